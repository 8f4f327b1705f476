//! Memory per line is bounded by a small multiple of the line (issue 12,
//! item 5): a `close_run` whose artifacts would each carry every label is
//! refused, the largest one within the limits is applied in little memory,
//! and the lines after both apply. The peak is measured on the child
//! `apply` process; this file holds one test so that the peak over all
//! children of this test process is that child's.

mod common;

use std::process::Command;

/// The largest resident set any waited-for child of this process reached,
/// in bytes.
fn children_peak_rss() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes a whole rusage into the pointer it is given.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage");
    // SAFETY: initialised by the successful call above.
    let usage = unsafe { usage.assume_init() };
    usage.ru_maxrss as u64 * 1024
}

fn line(v: serde_json::Value) -> String {
    format!("{v}\n")
}

#[test]
fn label_amplification_is_refused_and_the_largest_close_stays_small() {
    let d = tempfile::tempdir().unwrap();
    let mut ops = String::new();
    let exposed: Vec<String> = (0..64).map(|i| format!("a{i}")).collect();
    ops += &line(
        serde_json::json!({"op":"publish_agent","agent":"dev","scope":"acme/platform",
        "listens":[],"emits":[{"event":"e","context":"c","artifacts":exposed}]}),
    );
    ops += &line(serde_json::json!({"op":"open_run","run":"r1","agent":"dev"}));
    // The review's shape: 1000 artifacts, each to be given 1000 labels
    // (~200 KB of line; 1.1 GB of memory before the limits).
    let arts: serde_json::Map<String, serde_json::Value> =
        (0..1000).map(|i| (format!("a{i}"), "x".into())).collect();
    let labels: Vec<String> = (0..1000)
        .map(|i| format!("l{i:04}-{}", "y".repeat(120)))
        .collect();
    let hostile = line(
        serde_json::json!({"op":"close_run","run":"r1","status":"succeeded",
        "artifacts":arts,"labels":labels}),
    );
    ops += &hostile;
    // Within the artifact limit, still too many labels.
    let arts: serde_json::Map<String, serde_json::Value> =
        (0..200).map(|i| (format!("a{i}"), "x".into())).collect();
    ops += &line(
        serde_json::json!({"op":"close_run","run":"r1","status":"succeeded",
        "artifacts":arts,"labels":labels}),
    );
    // The largest close the limits allow: 256 artifacts of 8 KB, 63 labels
    // of 126 bytes (the run's area makes 64): a 2 MB line.
    let arts: serde_json::Map<String, serde_json::Value> = (0..256)
        .map(|i| (format!("a{i}"), "z".repeat(8000).into()))
        .collect();
    let most: Vec<String> = (0..63)
        .map(|i| format!("l{i:02}-{}", "y".repeat(122)))
        .collect();
    let largest = line(
        serde_json::json!({"op":"close_run","run":"r1","status":"succeeded",
        "artifacts":arts,"labels":most}),
    );
    ops += &largest;
    ops += &line(serde_json::json!({"op":"open_run","run":"r2","agent":"dev"}));
    let file = d.path().join("ops.jsonl");
    std::fs::write(&file, &ops).unwrap();

    let before = children_peak_rss();
    let out = Command::new(env!("CARGO_BIN_EXE_agentledger"))
        .arg("--data")
        .arg(d.path().join("data"))
        .arg("apply")
        .arg(&file)
        .output()
        .unwrap();
    let peak = children_peak_rss();
    let stdout = String::from_utf8(out.stdout).unwrap();
    let codes = common::answer_codes(&stdout);
    let answers: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        codes,
        ["ok", "ok", "limit_exceeded", "too_many_labels", "ok", "ok"],
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1));
    // Labels are said once in the answer, not once per artifact.
    assert_eq!(answers[4]["labels"].as_array().unwrap().len(), 64);
    assert!(answers[4]["artifacts"][0].get("labels").is_none());
    // The process as a whole (sled's cache, the runtime) within 160 MB; the
    // review measured 1.1 GB for the hostile line alone.
    eprintln!("apply peak RSS {} MB", peak / (1024 * 1024));
    assert!(before <= peak);
    assert!(
        peak < 160 * 1024 * 1024,
        "apply peaked at {} MB for a {} KB and a {} KB line",
        peak / (1024 * 1024),
        hostile.len() / 1024,
        largest.len() / 1024
    );
}
