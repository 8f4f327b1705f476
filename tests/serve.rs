//! `agentledger serve` as operators run it: a process that dispatches
//! finished runs until SIGTERM, then stops cleanly. On Kafka, two serve
//! processes join one consumer group and split the ledger partitions; every
//! finished run is dispatched exactly once between them.

mod common;

use common::{Backend, Ledger};
use serde_json::json;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn serve(data: &Path, kafka: Option<(&str, &str)>, stderr: &Path) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_agentledger"));
    c.arg("--data").arg(data);
    if let Some((brokers, prefix)) = kafka {
        c.args(["--kafka", brokers, "--topic-prefix", prefix]);
    }
    c.args(["serve", "--poll-ms", "50"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .unwrap()
}

/// SIGTERM, then the exit code and what the process said.
fn terminate(mut child: Child, stderr: &Path) -> (Option<i32>, String) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("serve did not stop within 60 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (status.code(), std::fs::read_to_string(stderr).unwrap())
}

fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {secs} s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The developer ⇄ reviewer agents, and `roots` developer runs closed.
fn closed_roots(l: &mut Ledger, roots: usize) {
    l.publish_review_loop();
    for i in 0..roots {
        l.open_run(&format!("root-{i}"), "developer");
        l.close(&format!("root-{i}"), json!({"patch": "p"}));
    }
}

/// How many runs each root's chain holds.
fn chain_sizes(l: &mut Ledger, roots: usize) -> Vec<usize> {
    l.engine.catch_up(&|_| {}).unwrap();
    (0..roots)
        .map(|i| {
            l.engine
                .views()
                .chain(&format!("root-{i}"))
                .unwrap()
                .map_or(0, |c| c.runs.len())
        })
        .collect()
}

#[test]
fn serve_dispatches_what_finished_and_stops_cleanly_on_sigterm() {
    let d = tempfile::tempdir().unwrap();
    {
        let mut l = Ledger::open(d.path());
        closed_roots(&mut l, 3);
    }
    let err = d.path().join("serve.err");
    let child = serve(d.path(), None, &err);
    wait_for("serve dispatching", 60, || {
        std::fs::read_to_string(&err).is_ok_and(|s| s.contains("dispatching ledger partitions"))
    });
    // Serve says which partitions it dispatches just before its first sweep
    // and looks at the stop flag only between sweeps: the sweep completes.
    let (code, said) = terminate(child, &err);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("stopped cleanly"), "{said}");
    assert!(
        said.contains("dispatching ledger partitions [0, 1, 2, 3]"),
        "{said}"
    );
    let mut l = Ledger::open(d.path());
    assert_eq!(
        chain_sizes(&mut l, 3),
        [2, 2, 2],
        "one reviewer run per root"
    );
}

#[test]
fn two_serve_processes_on_kafka_split_the_partitions_and_dispatch_each_run_once() {
    let backend = Backend::kafka("serve_pair");
    let Backend::Kafka(cfg) = &backend else {
        unreachable!()
    };
    let (w, a, b) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    // The writer creates the topics before anyone subscribes to them.
    let mut writer = Ledger::open_on(w.path(), &backend);
    let kafka = Some((cfg.brokers.as_str(), cfg.topic_prefix.as_str()));
    let (err_a, err_b) = (w.path().join("a.err"), w.path().join("b.err"));
    let serve_a = serve(a.path(), kafka, &err_a);
    let serve_b = serve(b.path(), kafka, &err_b);
    // Each says which partitions it dispatches whenever that changes; wait
    // until both hold some.
    let last_share = |path: &Path| -> Option<String> {
        let s = std::fs::read_to_string(path).ok()?;
        s.lines()
            .rev()
            .find_map(|l| l.strip_prefix("agentledger: dispatching ledger partitions "))
            .map(str::to_string)
    };
    wait_for("both instances owning partitions", 90, || {
        [&err_a, &err_b]
            .iter()
            .all(|p| last_share(p).is_some_and(|s| s != "[]"))
    });

    let roots = 12;
    closed_roots(&mut writer, roots);
    wait_for("every root dispatched", 90, || {
        chain_sizes(&mut writer, roots).iter().all(|n| *n >= 2)
    });
    // Both stop (finishing the step each is in): whatever either was going
    // to dispatch is in the log now, and nothing more will be.
    let (share_a, share_b) = (last_share(&err_a).unwrap(), last_share(&err_b).unwrap());
    let (code_a, said_a) = terminate(serve_a, &err_a);
    let (code_b, said_b) = terminate(serve_b, &err_b);
    assert_eq!(chain_sizes(&mut writer, roots), vec![2; roots]);
    assert_eq!((code_a, code_b), (Some(0), Some(0)), "{said_a}\n{said_b}");
    assert!(said_a.contains("stopped cleanly") && said_b.contains("stopped cleanly"));
    // No run was dispatched by both (the second would have met a conflict).
    assert!(
        !said_a.contains("decided by another writer")
            && !said_b.contains("decided by another writer"),
        "{said_a}\n{said_b}"
    );
    // Together they own the four partitions, each one once.
    let parse = |s: &str| -> Vec<u32> {
        s.trim_matches(|c| c == '[' || c == ']')
            .split(", ")
            .map(|n| n.parse().unwrap())
            .collect()
    };
    let mut all = parse(&share_a);
    all.extend(parse(&share_b));
    all.sort();
    assert_eq!(all, [0, 1, 2, 3], "a: {share_a}, b: {share_b}");
}
