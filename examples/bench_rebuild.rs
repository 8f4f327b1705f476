//! Rebuild throughput: writes a synthetic ledger of N events to a fresh
//! embedded log, rebuilds views from it, and in the same run measures the
//! baseline: raw sled batch inserts of exactly the entries the rebuild
//! wrote (same keys, same values, as many batches, one applying thread).
//! The ratio compares entries written per second, so the rebuild's own work
//! — reading, decoding and folding records, keys written over — is what it
//! costs. The first rep also samples the process's resident memory every
//! 100 ms while it rebuilds: the peak is printed and the samples drawn as
//! `target/bench-rebuild-rss.svg` (the script renders it to PNG), so that
//! flatness is seen, not asserted. Run through `tools/bench-rebuild
//! [EVENTS] [REPS]`.

use agentledger::engine::synthetic::write_synthetic_log;
use agentledger::log::embedded::{EmbeddedConfig, EmbeddedLog};
use agentledger::projector::{project_all, PROJECT_BATCH};
use agentledger::views::Views;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

// The same allocator as the `agentledger` binary.
mod support;
use support::{events_and_reps, median, rss_bytes};

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

/// Sample RSS every 100 ms until `stop`: (seconds since start, bytes).
fn sample_rss(stop: Arc<AtomicBool>) -> std::thread::JoinHandle<Vec<(f64, u64)>> {
    std::thread::spawn(move || {
        let t = Instant::now();
        let mut out = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            out.push((t.elapsed().as_secs_f64(), rss_bytes()));
            std::thread::sleep(Duration::from_millis(100));
        }
        out.push((t.elapsed().as_secs_f64(), rss_bytes()));
        out
    })
}

/// The samples as an SVG line chart, with the 500 MiB goal dashed.
fn rss_chart(samples: &[(f64, u64)], events: usize, cache_mib: u64) -> String {
    let (w, h, l, b, t, r) = (900.0, 420.0, 70.0, 50.0, 40.0, 20.0);
    let mib = |x: u64| x as f64 / (1 << 20) as f64;
    let max_t = samples.last().map_or(1.0, |s| s.0).max(1.0);
    let peak = samples.iter().map(|s| mib(s.1)).fold(0.0, f64::max);
    let max_y = (peak.max(500.0) * 1.15 / 100.0).ceil() * 100.0;
    let x = |s: f64| l + s / max_t * (w - l - r);
    let y = |m: f64| h - b - m / max_y * (h - b - t);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\
         <text x=\"{l}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">agentledger rebuild of {events} events: resident memory (peak {peak:.0} MiB, views cache {cache_mib} MiB)</text>\
         <line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#333\"/>\
         <line x1=\"{l}\" y1=\"{t}\" x2=\"{l}\" y2=\"{}\" stroke=\"#333\"/>\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">seconds</text>\
         <text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" text-anchor=\"middle\">RSS (MiB)</text>\n",
        h - b,
        w - r,
        h - b,
        h - b,
        (l + w - r) / 2.0,
        h - 12.0,
        (t + h - b) / 2.0,
        (t + h - b) / 2.0,
    );
    for i in 0..=5 {
        let m = max_y * i as f64 / 5.0;
        let s = max_t * i as f64 / 5.0;
        let prec = if max_t < 10.0 { 1 } else { 0 };
        svg += &format!(
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{m:.0}</text><line x1=\"{l}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#eee\"/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{s:.prec$}</text>\n",
            l - 6.0,
            y(m) + 4.0,
            y(m),
            w - r,
            y(m),
            x(s),
            h - b + 16.0
        );
    }
    svg += &format!(
        "<line x1=\"{l}\" y1=\"{g}\" x2=\"{}\" y2=\"{g}\" stroke=\"#b02a37\" stroke-dasharray=\"6 4\"/>\
         <text x=\"{}\" y=\"{}\" fill=\"#b02a37\" text-anchor=\"end\">goal: 500 MiB</text>\n",
        w - r,
        w - r - 4.0,
        y(500.0) - 6.0,
        g = y(500.0)
    );
    let points: Vec<String> = samples
        .iter()
        .map(|(s, rss)| format!("{:.1},{:.1}", x(*s), y(mib(*rss))))
        .collect();
    svg += &format!(
        "<polyline fill=\"none\" stroke=\"#1c7ed6\" stroke-width=\"2\" points=\"{}\"/></svg>\n",
        points.join(" ")
    );
    svg
}

fn main() {
    let (events, reps) = events_and_reps();
    // As `--cache-mb` does for the CLI.
    if let Some(mb) = std::env::var("AGENTLEDGER_CACHE_MB")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        agentledger::views::db::set_cache_bytes(mb << 20);
    }
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
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = (rep == 0).then(|| sample_rss(stop.clone()));
        let views = Views::open(&vdir).unwrap();
        let t = Instant::now();
        let applied = project_all(&log, &views, None, &|_| {}).unwrap();
        // Durable, like the baseline: `agentledger rebuild` flushes too.
        views.flush().unwrap();
        let secs = t.elapsed().as_secs_f64();
        drop(views);
        if let Some(s) = sampler {
            stop.store(true, Ordering::Relaxed);
            let samples = s.join().unwrap();
            let peak = samples.iter().map(|s| s.1).max().unwrap_or(0);
            let cache_mib = agentledger::views::db::cache_bytes() >> 20;
            println!(
                "rep 0: resident memory while rebuilding: start {} MiB, peak {} MiB, end {} MiB (views cache {cache_mib} MiB; {} samples)",
                samples.first().map_or(0, |s| s.1) >> 20,
                peak >> 20,
                samples.last().map_or(0, |s| s.1) >> 20,
                samples.len()
            );
            let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("target/bench-rebuild-rss.svg");
            std::fs::write(&chart, rss_chart(&samples, events, cache_mib)).unwrap();
            println!("rep 0: RSS over time drawn in {}", chart.display());
        }
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
