//! Rebuild throughput: writes a synthetic ledger of N events to a fresh
//! embedded log, rebuilds views from it, and in the same run measures the
//! baseline: raw sled batch inserts of exactly the entries the rebuild
//! wrote (same keys, same values, as many batches, one applying thread).
//! The ratio compares entries written per second, so the rebuild's own work
//! — reading, decoding and folding records, keys written over — is what it
//! costs. Run through `tools/bench-rebuild [EVENTS] [REPS]`.

use agentledger::log::embedded::{EmbeddedConfig, EmbeddedLog};
use agentledger::projector::{project_all, PROJECT_BATCH};
use agentledger::synthetic::write_synthetic_log;
use agentledger::views::Views;
use std::time::Instant;

// The same allocator as the `agentledger` binary.
mod support;
use support::{events_and_reps, median};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Raw sled batch inserts of exactly the entries the rebuild wrote (the
/// same keys and values, so the same shapes), in as many batches as the
/// rebuild wrote, on one thread like the rebuild's applying thread, flushed
/// at the end like the rebuild. Returns entries/s.
fn baseline(dir: &std::path::Path, entries: &[(Vec<u8>, Vec<u8>)], batches: usize) -> f64 {
    let db = sled::Config::new()
        .path(dir)
        .cache_capacity(256 * 1024 * 1024)
        .open()
        .unwrap();
    let tree = db.open_tree("views").unwrap();
    let per_batch = entries.len().div_ceil(batches.max(1));
    let t = Instant::now();
    for chunk in entries.chunks(per_batch.max(1)) {
        let mut b = sled::Batch::default();
        for (k, v) in chunk {
            b.insert(k.as_slice(), v.as_slice());
        }
        tree.apply_batch(b).unwrap();
    }
    db.flush().unwrap();
    entries.len() as f64 / t.elapsed().as_secs_f64()
}

fn main() {
    let (events, reps) = events_and_reps();
    let tmp = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let log = EmbeddedLog::open(tmp.path().join("log"), &EmbeddedConfig::default()).unwrap();
    write_synthetic_log(&log, events).unwrap();
    println!(
        "wrote {events} events to the embedded log in {:.1}s",
        t.elapsed().as_secs_f64()
    );
    let mut rebuild_rates = Vec::new();
    let mut event_rates = Vec::new();
    let mut base_rates = Vec::new();
    for rep in 0..reps {
        let vdir = tmp.path().join(format!("views{rep}"));
        let views = Views::open(&vdir).unwrap();
        let t = Instant::now();
        let applied = project_all(&log, &views, &|_| {}).unwrap();
        // Durable, like the baseline: `agentledger rebuild` flushes too.
        views.flush().unwrap();
        let secs = t.elapsed().as_secs_f64();
        drop(views);
        assert_eq!(applied as usize, events + 2);
        // What the rebuild left: every entry, to write again raw.
        let views = Views::open(&vdir).unwrap();
        let entries: Vec<(Vec<u8>, Vec<u8>)> = views
            .tree()
            .unwrap()
            .iter()
            .map(|kv| {
                let (k, v) = kv.unwrap();
                (k.to_vec(), v.to_vec())
            })
            .collect();
        drop(views);
        let batches = (applied as usize).div_ceil(PROJECT_BATCH);
        let r = entries.len() as f64 / secs;
        let b = baseline(&tmp.path().join(format!("base{rep}")), &entries, batches);
        println!(
            "rep {rep}: rebuild {:>9.0} events/s = {r:>9.0} entries/s ({} entries)   baseline sled {b:>9.0} entries/s   ratio {:.2}",
            applied as f64 / secs,
            entries.len(),
            r / b
        );
        event_rates.push(applied as f64 / secs);
        rebuild_rates.push(r);
        base_rates.push(b);
        let _ = std::fs::remove_dir_all(&vdir);
        let _ = std::fs::remove_dir_all(tmp.path().join(format!("base{rep}")));
    }
    let (r, b, e) = (
        median(rebuild_rates),
        median(base_rates),
        median(event_rates),
    );
    println!("median: rebuild {e:.0} events/s, {r:.0} entries/s; raw sled the same entries {b:.0} entries/s; ratio {:.2}", r / b);
}
