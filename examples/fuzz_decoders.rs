//! The long run of the decoder property tests: `CASES` (default 1,000,000)
//! arbitrary and mutated inputs per decoder — apply lines, the record
//! codec, embedded log frames, checkpoint JSON, export files — each must
//! give a value or a clear error, never a panic.
//!
//!     cargo run --release --example fuzz_decoders [CASES] [DECODER…]

#[path = "../tests/fuzz/mod.rs"]
mod fuzz;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cases: u32 = args
        .first()
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let only: Vec<&String> = args.iter().skip(1).collect();
    for (name, run) in fuzz::all(cases) {
        if !only.is_empty() && !only.iter().any(|o| name.contains(o.as_str())) {
            continue;
        }
        let t = std::time::Instant::now();
        run();
        let secs = t.elapsed().as_secs_f64();
        println!(
            "{name:<16} {cases} cases, no panic, every error clear ({secs:.1}s, {:.0} cases/s)",
            cases as f64 / secs
        );
    }
}
