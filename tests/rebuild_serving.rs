//! `rebuild` while `serve` owns the data dir: fresh views are built beside
//! the live ones while writes and reads go on through the server, then
//! swapped in; the digests prove them equal, progress shows in `status`
//! and `/metrics`, only the operator may start it, and the next process
//! (and an offline rebuild) opens the views that were swapped in.

mod common;

use agentledger::engine::synthetic::write_synthetic_log;
use agentledger::engine::DataDir;
use agentledger::log::embedded::{EmbeddedConfig, EmbeddedLog};
use agentledger::log::kafka::KafkaConfig;
use agentledger::log::kafka::KafkaLog;
use agentledger::log::Log;
use common::server::{base_args, http, post_ok, start};
use serde_json::{json, Value};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn cli_json(
    data: &std::path::Path,
    kafka: Option<&(String, String)>,
    args: &[&str],
) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_agentledger"))
        .args(base_args(data, kafka))
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let v = serde_json::from_str(stdout.lines().last().unwrap_or("null")).unwrap_or(Value::Null);
    (
        out.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// The two rebuilds take turns: each needs the cores to itself for its
/// writer to be answered while it projects.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn on_the_embedded_log() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let log = EmbeddedLog::open(DataDir::new(&data).log(), &EmbeddedConfig::default()).unwrap();
    write_synthetic_log(&log, 150_000).unwrap();
    drop(log);
    rebuild_while_serving(&data, None, 150_000);
}

#[test]
fn on_kafka() {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let k = KafkaConfig {
        topic_prefix: common::unique_prefix("rebuild-serving"),
        ..KafkaConfig::new(common::required_env(common::KAFKA_ENV))
    };
    let log = KafkaLog::connect(&k).unwrap();
    write_synthetic_log(&log, 100_000).unwrap();
    assert!(log.partitions(agentledger::model::Topic::Ledger) > 1);
    drop(log);
    rebuild_while_serving(&data, Some(&(k.brokers, k.topic_prefix)), 100_000);
}

/// Fresh views built while a writer and a reader keep going through the
/// server, swapped in, equal to the live ones.
fn rebuild_while_serving(data: &std::path::Path, kafka: Option<&(String, String)>, events: u64) {
    let data = data.to_path_buf();
    let s = start(&data, kafka, &[]);
    let url = s.url.clone();
    post_ok(
        &url,
        json!({"op":"publish_agent","agent":"worker","scope":"acme/ops","listens":[],"emits":[]}),
    );

    // Only the operator may start a rebuild.
    let (code, auditor, err) = common::cli(&data, &["token", "issue", "--principal", "auditor"]);
    assert_eq!(code, 0, "{err}");
    let r = reqwest::blocking::Client::new()
        .post(format!("{url}/v1/rebuild"))
        .bearer_auth(auditor.trim())
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 403);
    let v: Value = r.json().unwrap();
    assert_eq!(v["error"]["code"], "forbidden", "{v}");

    // A rebuild that cannot start says why, and nothing changes: here the
    // place it builds in is taken by a file.
    let blocker = data.join("views.b");
    std::fs::write(&blocker, "not a directory").unwrap();
    let (code, _, err) = cli_json(&data, None, &["rebuild"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("did not start the rebuild") && err.contains("views.b"),
        "{err}"
    );
    std::fs::remove_file(&blocker).unwrap();
    post_ok(
        &url,
        json!({"op":"open_run","run":"before","agent":"worker"}),
    );
    assert_eq!(DataDir::new(&data).views_name(), "views");

    // A writer and a reader keep going through the server meanwhile; every
    // answer counts (not whole rounds), since the swap at the end holds
    // the ledger for a while.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (stop, written, url) = (stop.clone(), written.clone(), url.clone());
        std::thread::spawn(move || {
            let c = http(&url);
            let mut i = 0;
            let mut slowest = Duration::ZERO;
            while !stop.load(Ordering::SeqCst) {
                let t = Instant::now();
                let run = format!("w{i}");
                for op in [
                    json!({"op":"open_run","run":run,"agent":"worker"}),
                    json!({"op":"close_run","run":run,"status":"succeeded"}),
                ] {
                    let v: Value = c
                        .post(format!("{url}/v1/ops"))
                        .json(&op)
                        .send()
                        .unwrap()
                        .json()
                        .unwrap();
                    assert_eq!(v["ok"], json!(true), "{op} -> {v}");
                    written.fetch_add(1, Ordering::SeqCst);
                }
                let trail = c
                    .get(format!("{url}/v1/runs/{run}/trail?format=json"))
                    .send()
                    .unwrap();
                assert!(
                    trail.status().is_success(),
                    "trail of {run} while rebuilding"
                );
                i += 1;
                written.fetch_add(1, Ordering::SeqCst);
                slowest = slowest.max(t.elapsed());
            }
            (slowest, i)
        })
    };
    // Let the writer get going, then rebuild through the server.
    while written.load(Ordering::SeqCst) < 15 {
        std::thread::sleep(Duration::from_millis(10));
    }
    let before = written.load(Ordering::SeqCst);
    let started = Instant::now();
    let (code, report, err) = cli_json(&data, None, &["rebuild"]);
    let during = written.load(Ordering::SeqCst) - before;
    stop.store(true, Ordering::SeqCst);
    let (slowest, rounds) = writer.join().expect("the writer saw every answer ok");
    assert_eq!(code, 0, "rebuild through the server: {err}");
    assert_eq!(report["identical"], json!(true), "{report}");
    assert!(report["records"].as_u64().unwrap() >= events, "{report}");
    eprintln!(
        "rebuild of {} records through the server: {:.2}s, {during} answers meanwhile, the slowest open+close+trail {:.0} ms",
        report["records"],
        started.elapsed().as_secs_f64(),
        slowest.as_secs_f64() * 1000.0
    );
    assert!(
        during > 0,
        "nothing was answered during the {:?} rebuild",
        started.elapsed()
    );

    // The fresh views are live: in this server and for the next process.
    let dd = DataDir::new(&data);
    assert_eq!(dd.views_name(), "views.b");
    assert!(
        !data.join("views").exists(),
        "the replaced views are removed"
    );
    let c = http(&url);
    let status: Value = c
        .get(format!("{url}/v1/status?format=json"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(status["rebuild"]["state"], "swapped", "{status}");
    assert_eq!(
        status["rebuild"]["previous_digest"],
        report["previous_digest"]
    );
    let metrics = c
        .get(format!("{url}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains("agentledger_rebuild_records{kind=\"total\"}"),
        "{metrics}"
    );
    for i in [0, rounds / 2, rounds - 1] {
        let t = c
            .get(format!("{url}/v1/runs/w{i}/trail?format=json"))
            .send()
            .unwrap();
        assert!(t.status().is_success(), "w{i} after the swap");
    }
    // Writing goes on on the swapped-in views.
    post_ok(
        &url,
        json!({"op":"open_run","run":"after","agent":"worker"}),
    );
    drop(s);

    // The next process opens the swapped-in views; an offline rebuild
    // finds them whole.
    let (code, st, err) = cli_json(&data, kafka, &["status"]);
    assert_eq!(code, 0, "{err}");
    assert!(st["partitions"].is_array(), "{st}");
    let (code, offline, err) = cli_json(&data, kafka, &["rebuild"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(offline["identical"], json!(true), "{offline}");
}
