//! What the `tools/bench-*` examples share: their `[EVENTS] [REPS]`
//! arguments and the median they report.

/// `EVENTS` (default 1,000,000) and `REPS` (default 3) from the command line.
pub fn events_and_reps() -> (usize, usize) {
    let args: Vec<String> = std::env::args().collect();
    let events = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let reps = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    (events, reps)
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}
