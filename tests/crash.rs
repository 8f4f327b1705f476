//! Crash test: run the binary as a child, SIGKILL it at random points during
//! `apply` and `dispatch`, then check that reopening loses no acknowledged
//! event, duplicates nothing, and that the views equal a clean rebuild.

mod common;

use agentledger::codec;
use agentledger::engine::DataDir;
use agentledger::log::embedded::{EmbeddedConfig, EmbeddedLog};
use agentledger::log::Log;
use agentledger::model::{LedgerEvent, Topic};
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::time::{Duration, Instant};

const TRIALS: u64 = 24;
const CHAINS: usize = 40;

fn script() -> Vec<Value> {
    let mut ops = vec![
        json!({"op":"publish_agent","agent":"developer","scope":"acme/platform","listens":["review.done"],
               "emits":[{"event":"code.ready","context":"change","artifacts":["patch"]}]}),
        json!({"op":"publish_agent","agent":"reviewer","scope":"acme/platform","listens":["code.ready"],
               "emits":[{"event":"review.done","context":"change","artifacts":["review"]}]}),
    ];
    for i in 0..CHAINS {
        ops.push(json!({"op":"open_run","run":format!("c{i}"),"agent":"developer"}));
        ops.push(json!({"op":"close_run","run":format!("c{i}"),"status":"succeeded","artifacts":{"patch":format!("patch {i}")}}));
        if i % 3 == 2 {
            ops.push(json!({"op":"dispatch"}));
        }
    }
    ops.push(json!({"op":"dispatch"}));
    ops
}

fn run_apply(dir: &std::path::Path, ops: &[Value]) -> Vec<Value> {
    let mut child = common::spawn_apply(dir);
    let mut stdin = child.stdin.take().unwrap();
    for op in ops {
        writeln!(stdin, "{op}").unwrap();
    }
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Start `apply`, kill it once it has printed `after` answers and `delay`
/// more has passed (so the kill lands inside an operation, wherever that
/// is, however fast this machine runs); returns the answers it had printed.
fn killed_apply(
    dir: &std::path::Path,
    ops: &[Value],
    after: usize,
    delay: Duration,
) -> Vec<(Value, Value)> {
    let mut child = common::spawn_apply(dir);
    let mut stdin = child.stdin.take().unwrap();
    // Operations arrive in bursts of 1 to 8 lines: `apply` decides each
    // burst it has read ahead as one commit group, so the kill lands
    // inside groups of every size, not only between single operations.
    let mut rng = rand::rngs::StdRng::seed_from_u64(after as u64 ^ delay.as_micros() as u64);
    let mut bursts = Vec::new();
    let mut rest: &[Value] = ops;
    while !rest.is_empty() {
        let n = rng.gen_range(1..=8).min(rest.len());
        let text: String = rest[..n].iter().map(|o| format!("{o}\n")).collect();
        bursts.push((text, Duration::from_micros(rng.gen_range(500..3000))));
        rest = &rest[n..];
    }
    let stdout = child.stdout.take().unwrap();
    let printed = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = printed.clone();
    let answered = printed.clone();
    let writer = std::thread::spawn(move || {
        for (i, (text, pause)) in bursts.into_iter().enumerate() {
            if stdin.write_all(text.as_bytes()).is_err() || stdin.flush().is_err() {
                break;
            }
            // The rest only once the first burst is answered: a process
            // still starting would read everything at once as one group.
            let deadline = Instant::now() + Duration::from_secs(30);
            while i == 0
                && answered.load(std::sync::atomic::Ordering::SeqCst) == 0
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_micros(200));
            }
            std::thread::sleep(pause);
        }
    });
    let reader = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for l in BufReader::new(stdout).lines() {
            match l {
                Ok(l) => {
                    lines.push(l);
                    seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                }
                Err(_) => break,
            }
        }
        lines
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while printed.load(std::sync::atomic::Ordering::SeqCst) < after && Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let started = Instant::now();
    while started.elapsed() < delay {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let _ = child.kill(); // SIGKILL on Unix
    let _ = child.wait();
    let _ = writer.join();
    let lines = reader.join().unwrap();
    // An answer line is printed only after its records are durable: every
    // complete line is an acknowledged operation.
    lines
        .iter()
        .zip(ops)
        .filter_map(|(l, op)| {
            serde_json::from_str::<Value>(l)
                .ok()
                .map(|a| (op.clone(), a))
        })
        .collect()
}

/// Runs whose events are on the `published` topic while no close of
/// theirs is in the ledger.
fn events_without_a_durable_close(dir: &std::path::Path) -> Vec<String> {
    let log = EmbeddedLog::open(DataDir::new(dir).log(), &EmbeddedConfig::default()).unwrap();
    let mut closed = HashSet::new();
    for p in 0..log.partitions(Topic::Ledger) {
        for r in log.read(Topic::Ledger, p, 0, usize::MAX).unwrap() {
            if let LedgerEvent::RunClosed(c) = codec::decode(&r.payload).unwrap().event {
                closed.insert(c.run);
            }
        }
    }
    let mut orphans = Vec::new();
    for p in 0..log.partitions(Topic::Published) {
        for r in log.read(Topic::Published, p, 0, usize::MAX).unwrap() {
            let e: Value = serde_json::from_slice(&r.payload).unwrap();
            let run = e["subject"].as_str().unwrap_or_default().to_string();
            if !closed.contains(&run) {
                orphans.push(run);
            }
        }
    }
    orphans
}

#[test]
fn sigkill_during_apply_and_dispatch_loses_nothing_acknowledged() {
    let ops = script();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0xA11CE);
    let mut killed_mid_way = 0;
    for trial in 0..TRIALS {
        let d = tempfile::tempdir().unwrap();
        // After a random number of answers, a random fraction of an
        // operation (an fsync is a few milliseconds).
        let after = rng.gen_range(0..ops.len());
        let delay = Duration::from_micros(rng.gen_range(0..4000));
        let acked = killed_apply(d.path(), &ops, after, delay);
        if acked.len() < ops.len() {
            killed_mid_way += 1;
        }
        // Consumers saw events only of runs whose close survived.
        let orphans = events_without_a_durable_close(d.path());
        assert!(
            orphans.is_empty(),
            "trial {trial}: published events of runs not closed in the ledger: {orphans:?}"
        );
        // Reopen and finish the dispatcher's work, as an operator would.
        let after = run_apply(d.path(), &[json!({"op":"dispatch"})]);
        assert_eq!(after[0]["ok"], true, "trial {trial}: {after:?}");

        let dd = DataDir::new(d.path());
        {
            let l = common::Ledger::open(d.path());
            let views = l.engine.views();
            for (op, answer) in &acked {
                if answer["ok"] != true {
                    continue;
                }
                match op["op"].as_str().unwrap() {
                    "open_run" => assert!(
                        views.run(op["run"].as_str().unwrap()).unwrap().is_some(),
                        "trial {trial}: acked {op} lost"
                    ),
                    "close_run" => {
                        let r = views.run(op["run"].as_str().unwrap()).unwrap().unwrap();
                        assert!(!r.is_open(), "trial {trial}: acked close lost");
                        assert!(
                            r.dispatched,
                            "trial {trial}: closed run {} never dispatched",
                            r.run
                        );
                    }
                    "publish_agent" => assert!(views
                        .agent(op["agent"].as_str().unwrap())
                        .unwrap()
                        .is_some()),
                    _ => {}
                }
            }
            // Every closed root run opened its reviewer exactly once.
            for i in 0..CHAINS {
                if let Some(r) = views.run(&format!("c{i}")).unwrap() {
                    if !r.is_open() {
                        let chain = views.chain(&r.run).unwrap().unwrap();
                        assert_eq!(
                            chain.runs.len(),
                            2,
                            "trial {trial}: chain c{i} has {:?}",
                            chain.runs
                        );
                    }
                }
            }
        }
        // Nothing duplicated in the ledger: every event id appears once.
        let log = EmbeddedLog::open(dd.log(), &EmbeddedConfig::default()).unwrap();
        let mut seen = HashSet::new();
        for p in 0..log.partitions(Topic::Ledger) {
            for r in log.read(Topic::Ledger, p, 0, usize::MAX).unwrap() {
                let rec = codec::decode(&r.payload).unwrap();
                assert!(
                    seen.insert(rec.event_id.clone()),
                    "trial {trial}: duplicate {}",
                    rec.event_id
                );
            }
        }
        drop(log);
        // The live views equal a clean rebuild.
        let (code, report) = common::rebuild_report(d.path());
        assert_eq!(code, Some(0));
        assert_eq!(report["identical"], true, "trial {trial}: {report}");
    }
    eprintln!("{killed_mid_way} of {TRIALS} trials were killed mid-way");
    assert!(
        killed_mid_way >= TRIALS / 2,
        "only {killed_mid_way} trials were killed mid-way"
    );
}
