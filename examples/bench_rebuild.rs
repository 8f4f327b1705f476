//! Rebuild throughput: writes a synthetic ledger of N events to a fresh
//! embedded log, rebuilds views from it, and in the same run measures the
//! baseline (raw sled batch inserts of one 150-byte entry per event, in
//! batches of the projector's size). Prints events/s and the ratio.
//! Run through `tools/bench-rebuild [EVENTS] [REPS]`.

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

fn baseline(dir: &std::path::Path, events: usize) -> f64 {
    let views = Views::open(dir).unwrap();
    let tree = views.tree().unwrap();
    let value = vec![7u8; 150 - 16];
    let t = Instant::now();
    let mut n = 0usize;
    while n < events {
        let mut b = sled::Batch::default();
        for _ in 0..PROJECT_BATCH.min(events - n) {
            let mut key = [0u8; 16];
            key[..8].copy_from_slice(&(n as u64).to_be_bytes());
            b.insert(&key[..], value.clone());
            n += 1;
        }
        tree.apply_batch(b).unwrap();
    }
    views.flush().unwrap();
    events as f64 / t.elapsed().as_secs_f64()
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
        let r = applied as f64 / secs;
        let b = baseline(&tmp.path().join(format!("base{rep}")), events);
        println!(
            "rep {rep}: rebuild {r:>9.0} events/s   baseline sled {b:>9.0} entries/s   ratio {:.2}",
            r / b
        );
        rebuild_rates.push(r);
        base_rates.push(b);
        let _ = std::fs::remove_dir_all(&vdir);
        let _ = std::fs::remove_dir_all(tmp.path().join(format!("base{rep}")));
    }
    let (r, b) = (median(rebuild_rates), median(base_rates));
    println!("median: rebuild {r:.0} events/s, baseline {b:.0} entries/s, ratio {:.2} (goal >= 50000 events/s and >= 0.5)", r / b);
}
