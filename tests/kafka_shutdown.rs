//! `serve` on Kafka stops within `--shutdown-timeout` whatever its brokers
//! do: with the broker gone, SIGTERM used to leave the process waiting on
//! librdkafka for half a minute and more. This test starts a 1-node
//! cluster of its own (its own KAFKA_BASE: the shared ones must stay up
//! for the other tests), stops the broker under a running server, sends
//! SIGTERM and times the exit (a request in flight is answered 503
//! meanwhile); then brings the broker back and finds what
//! was acknowledged before.

mod common;

use common::server::{self, post_ok};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A cluster of one node under a directory of its own, stopped (and its
/// files removed) when dropped.
struct OwnCluster {
    base: PathBuf,
    bootstrap: String,
}

fn kafka_sh(base: &Path, args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/kafka/kafka.sh");
    let out = Command::new(script)
        .args(args)
        .env("KAFKA_BASE", base)
        .env("KAFKA_STOP_GRACE", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kafka.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl OwnCluster {
    fn start(base: PathBuf) -> Self {
        let bootstrap = kafka_sh(&base, &["start", "1"]);
        assert!(!bootstrap.is_empty(), "kafka.sh start printed no bootstrap");
        OwnCluster { base, bootstrap }
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tools/kafka/kafka.sh");
        let _ = Command::new(script)
            .args(["stop", "--clean"])
            .env("KAFKA_BASE", &self.base)
            .env("KAFKA_STOP_GRACE", "0")
            .output();
    }
}

/// Wait until the server's log says `needle`.
fn wait_said(s: &server::Server, needle: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let text = std::fs::read_to_string(&s.stderr).unwrap_or_default();
        if text.contains(needle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "serve never said {needle:?}:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// SIGTERM, then the exit code and how long it took.
fn terminate(s: &mut server::Server, within: Duration) -> (Option<i32>, Duration) {
    let t = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(s.child.id() as i32, libc::SIGTERM) };
    loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            return (status.code(), t.elapsed());
        }
        assert!(
            t.elapsed() < within,
            "serve still running {within:?} after SIGTERM:\n{}",
            std::fs::read_to_string(&s.stderr).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn kafka_serve_exits_within_its_shutdown_timeout_when_the_brokers_are_gone() {
    let d = tempfile::tempdir().unwrap();
    let cluster = OwnCluster::start(d.path().join("kafka"));
    let kafka = (cluster.bootstrap.clone(), common::unique_prefix("shutdown"));
    let data = d.path().join("data");
    let mut s = server::start(&data, Some(&kafka), &["--shutdown-timeout", "3"]);
    // The group has settled: this instance dispatches every partition.
    wait_said(
        &s,
        "dispatching ledger partitions [0",
        Duration::from_secs(60),
    );
    post_ok(
        &s.url,
        json!({"op":"publish_agent","agent":"dev","scope":"acme/p"}),
    );

    kafka_sh(&cluster.base, &["stop"]);
    std::thread::sleep(Duration::from_secs(3));
    // A request the ledger cannot answer now (it waits on the broker) is
    // answered all the same once the server stops: 503 shutting_down.
    let url = s.url.clone();
    let client = server::http(&url);
    let in_flight = std::thread::spawn(move || {
        let r = client
            .post(format!("{url}/v1/ops"))
            .body(json!({"op":"publish_agent","agent":"late","scope":"acme/p"}).to_string())
            .send()
            .map_err(|e| e.to_string())?;
        Ok::<_, String>((r.status().as_u16(), r.text().unwrap_or_default()))
    });
    std::thread::sleep(Duration::from_millis(500));
    let (code, took) = terminate(&mut s, Duration::from_secs(20));
    let (status, answer) = in_flight
        .join()
        .unwrap()
        .expect("the request in flight is answered");
    assert_eq!(status, 503, "{answer}");
    assert!(answer.contains("shutting_down"), "{answer}");
    let said = std::fs::read_to_string(&s.stderr).unwrap_or_default();
    assert_eq!(code, Some(2), "{said}");
    assert!(
        took < Duration::from_secs(3) + Duration::from_secs(2),
        "{took:?}"
    );
    assert!(said.contains("--shutdown-timeout 3 s"), "{said}");
    assert!(!data.join("serve.addr").exists() && !data.join("serve.token").exists());

    // The broker back: what was acknowledged is there, and with its
    // broker up the server stops cleanly, well within the timeout.
    kafka_sh(&cluster.base, &["restart", "all"]);
    let mut s = server::start(&data, Some(&kafka), &["--shutdown-timeout", "20"]);
    let r = server::http(&s.url)
        .get(format!("{}/v1/agents/dev", s.url))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    wait_said(
        &s,
        "dispatching ledger partitions [0",
        Duration::from_secs(90),
    );
    let (code, took) = terminate(&mut s, Duration::from_secs(30));
    let said = std::fs::read_to_string(&s.stderr).unwrap_or_default();
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("stopped cleanly"), "{said}");
    assert!(took < Duration::from_secs(20), "{took:?}");
}

#[test]
fn a_shutdown_timeout_that_is_not_a_number_of_seconds_is_refused() {
    let d = tempfile::tempdir().unwrap();
    for bad in ["soon", "-1", "1e9", "NaN"] {
        let out = Command::new(env!("CARGO_BIN_EXE_agentledger"))
            .args(["--data", &d.path().display().to_string()])
            .args(["serve", &format!("--shutdown-timeout={bad}")])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("is not a number of seconds from 0 to 3600"),
            "{bad}: {err}"
        );
    }
}
