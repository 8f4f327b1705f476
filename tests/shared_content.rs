//! Content shared between instances through Kafka (the `blobs` topic):
//! an artifact stored through one instance is read through another, bytes
//! identical and digest checked; a tampered chunk is refused
//! `digest_mismatch`; an expired reference is refused on every instance and
//! its bytes leave every cache and the topic; a broker killed mid-upload
//! loses no acknowledged blob (3-node cluster).

mod common;

use agentledger::apply::apply_value;
use agentledger::content::share::SharedContent;
use agentledger::engine::{Engine, EngineOptions};
use agentledger::log::kafka::KafkaConfig;
use agentledger::log::kafka::KafkaLog;
use agentledger::log::Log;
use agentledger::model::Topic;
use common::*;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// Options as the CLI gives them on Kafka: context is not sealed (keys
/// are not shared between instances).
fn kafka_options(base: EngineOptions) -> EngineOptions {
    EngineOptions {
        seal_context: false,
        ..base
    }
}

fn config(test: &str) -> KafkaConfig {
    let Backend::Kafka(k) = Backend::kafka(test) else {
        unreachable!()
    };
    k
}

fn instance(dir: &std::path::Path, k: &KafkaConfig, opts: EngineOptions) -> Ledger {
    Ledger::open_with(dir, &Backend::Kafka(k.clone()), kafka_options(opts))
}

/// Bytes no two calls share, `len` long.
fn body(tag: &str, len: usize) -> String {
    let mut s = String::with_capacity(len);
    let mut i = 0u64;
    while s.len() < len {
        s.push_str(&format!("{tag}:{i:08} "));
        i += 1;
    }
    s.truncate(len);
    s
}

/// `agentledger --json ARGS…` on `dir` against the test's topics: its
/// JSON answer (it must succeed).
fn cli_json_on(dir: &std::path::Path, k: &KafkaConfig, args: &[&str]) -> Value {
    let mut all = vec![
        "--kafka",
        k.brokers.as_str(),
        "--topic-prefix",
        k.topic_prefix.as_str(),
        "--json",
    ];
    all.extend_from_slice(args);
    let (code, out, err) = common::cli(dir, &all);
    assert_eq!(code, 0, "{args:?}: {err}");
    serde_json::from_str(out.trim()).unwrap()
}

/// A manifest filed in the topic as a writer with access to it would.
fn file_manifest(log: &KafkaLog, hex: &str, manifest: &Value) {
    log.append(
        Topic::Blobs,
        &[(hex.as_bytes().to_vec(), manifest.to_string().into_bytes())],
    )
    .unwrap();
}

fn sha_of(content: &str) -> [u8; 32] {
    sha256(&[content.as_bytes()])
}

#[test]
fn an_artifact_stored_through_one_instance_is_read_through_another_and_a_tampered_chunk_is_refused()
{
    let k = config("shared-artifact");
    let (da, db, dc) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let mut a = instance(da.path(), &k, fixed_clock_options());
    a.publish(
        "writer",
        "acme/docs",
        &[],
        &[("doc.ready", &["doc", "note"])],
    );
    a.publish("reader", "acme/docs", &["doc.ready"], &[]);
    a.open_run("w1", "writer");
    // Three chunks (512 KiB each at most) and one.
    let doc = body("doc", 1_300_000);
    let note = "a short note".to_string();
    a.close("w1", json!({"doc": doc, "note": note}));
    let opened = a.dispatch();
    let reader = opened["opened"][0]["run"].as_str().unwrap().to_string();

    let mut b = instance(db.path(), &k, fixed_clock_options());
    let uri = format!("cas://sha256/{}", hex::encode(sha_of(&doc)));
    let cached = b.engine.store().blob_path(&uri).unwrap();
    assert!(!cached.exists(), "B starts without the bytes");
    let got = b.ok(json!({"op":"read_artifact","run":reader,"name":"doc"}));
    assert_eq!(got["content"].as_str().unwrap(), doc, "bytes identical");
    assert_eq!(
        std::fs::read(&cached).unwrap(),
        doc.as_bytes(),
        "B keeps a checked copy"
    );

    // A chunk tampered with in the topic: the newest publication of the
    // note's digest carries other bytes.
    let log = KafkaLog::connect(&k).unwrap();
    let hex = hex::encode(sha_of(&note));
    let placed = log
        .append(
            Topic::Blobs,
            &[(format!("{hex}/0").into_bytes(), b"a forged note".to_vec())],
        )
        .unwrap();
    let manifest = json!({"v":1,"size":13,"chunks":[placed[0].1],"written_ms":1});
    file_manifest(&log, &hex, &manifest);
    let mut c = instance(dc.path(), &k, fixed_clock_options());
    assert_eq!(
        c.refused(json!({"op":"read_artifact","run":reader,"name":"note"})),
        "digest_mismatch"
    );
    // A manifest naming chunks that are not its own (another blob's): the
    // read is refused as unavailable, naming why, never served.
    let doc_hex = hex::encode(sha_of(&doc));
    let foreign = json!({"v":1,"size":13,"chunks":[placed[0].1],"written_ms":1});
    log.append(
        Topic::Blobs,
        &[(
            doc_hex.clone().into_bytes(),
            foreign.to_string().into_bytes(),
        )],
    )
    .unwrap();
    let refused = apply_value(
        &mut c.engine,
        &json!({"op":"read_artifact","run":reader,"name":"doc"}),
    )
    .unwrap_err();
    assert_eq!(refused.code().as_str(), "content_unavailable", "{refused}");
    assert!(
        refused
            .to_string()
            .contains("names chunks that are not there"),
        "{refused}"
    );
    // A manifest claiming more than any blob may hold is refused before
    // anything is read into memory.
    let huge = json!({"v":1,"size":64u64 << 20,"chunks":[placed[0].1],"written_ms":1});
    file_manifest(&log, &doc_hex, &huge);
    let refused = apply_value(
        &mut c.engine,
        &json!({"op":"read_artifact","run":reader,"name":"doc"}),
    )
    .unwrap_err();
    assert_eq!(refused.code().as_str(), "content_unavailable", "{refused}");
    assert!(refused.to_string().contains("over the limit"), "{refused}");
    // So is one naming more chunks than any blob has: never indexed, the
    // newest readable manifest stands.
    let many: Vec<u64> = (0..100_000).collect();
    file_manifest(
        &log,
        &doc_hex,
        &json!({"v":1,"size":13,"chunks":many,"written_ms":1}),
    );
    let refused = apply_value(
        &mut c.engine,
        &json!({"op":"read_artifact","run":reader,"name":"doc"}),
    )
    .unwrap_err();
    assert!(refused.to_string().contains("over the limit"), "{refused}");
    let note_uri = format!("cas://sha256/{hex}");
    assert!(
        !c.engine.store().blob_path(&note_uri).unwrap().exists(),
        "forged bytes are never kept"
    );
    // A, which stored the note, still serves it from its own copy.
    let got = a.ok(json!({"op":"read_artifact","run":reader,"name":"note"}));
    assert_eq!(got["content"], json!(note));
    // The refusal is on the trail every instance sees.
    a.engine.catch_up(&|_| {}).unwrap();
    let refused = a
        .engine
        .trail(&reader, false)
        .unwrap()
        .iter()
        .filter(|s| format!("{:?}", s.event).contains("digest_mismatch"))
        .count();
    assert_eq!(refused, 1);
}

#[test]
fn expired_content_is_refused_everywhere_and_leaves_every_cache_and_the_topic() {
    let k = config("shared-expiry");
    let clock = TestClock::at(1_700_000_000_000);
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = instance(da.path(), &k, clock.options());
    a.publish("master", "acme/travel", &[], &[]);
    a.open_run("m1", "master");
    a.ok(json!({"op":"open_task","task":"t1","run":"m1","task_context":{
        "TaskID":"T1","UserQuery":"q","TaskName":"n","TaskDescription":"d","GoalStatus":[],"OverallStatus":"open"}}));
    let short = body("short-lived", 700_000);
    let long = "kept for an hour".to_string();
    let short_uri = a.ok(json!({"op":"put_blob","task":"t1","content":short,"ttl_s":60}))["uri"]
        .as_str()
        .unwrap()
        .to_string();
    let long_uri = a.ok(json!({"op":"put_blob","task":"t1","content":long,"ttl_s":3600}))["uri"]
        .as_str()
        .unwrap()
        .to_string();

    let mut b = instance(db.path(), &k, clock.options());
    let got = b.ok(json!({"op":"get_blob","task":"t1","agent":"m1","uri":short_uri}));
    assert_eq!(got["content"].as_str().unwrap(), short);
    let b_copy = b.engine.blob_file("t1", &short_uri).unwrap();
    assert!(b_copy.exists(), "B keeps a copy");

    clock.advance(61_000);
    for l in [&mut a, &mut b] {
        assert_eq!(
            l.refused(json!({"op":"get_blob","task":"t1","agent":"m1","uri":short_uri})),
            "expired"
        );
    }
    let a_copy = a.engine.blob_file("t1", &short_uri).unwrap();
    let ra = a.engine.sweep_content(Duration::ZERO).unwrap();
    assert!(!a_copy.exists());
    let shared = ra.shared.expect("content is shared on Kafka");
    assert_eq!(shared.removed, 1, "{shared:?}");
    let rb = b.engine.sweep_content(Duration::ZERO).unwrap();
    assert!(!b_copy.exists(), "B's cache is swept too");
    assert_eq!(rb.shared.unwrap().removed, 0, "already ended by A");

    // Gone from the topic for any instance: a tombstone on each key.
    let fresh = SharedContent::over(Arc::new(KafkaLog::connect(&k).unwrap())).unwrap();
    let short_sha = sha_of(&short);
    assert_eq!(fresh.fetch(&short_sha).unwrap(), None);
    assert_eq!(
        fresh.fetch(&sha_of(&long)).unwrap().as_deref(),
        Some(long.as_bytes()),
        "what a live reference holds stays"
    );
    let log = KafkaLog::connect(&k).unwrap();
    let hex = hex::encode(short_sha);
    let p = log.partition_of(Topic::Blobs, hex.as_bytes());
    let records = read_all(&log, Topic::Blobs, p, 64);
    for key in [hex.clone(), format!("{hex}/0"), format!("{hex}/1")] {
        let last = records
            .iter()
            .rev()
            .find(|r| r.key == key.as_bytes())
            .unwrap_or_else(|| panic!("no record keyed {key}"));
        assert!(last.payload.is_empty(), "{key} ends with a tombstone");
    }
    // A's live blob is still served to B after the sweeps.
    let got = b.ok(json!({"op":"get_blob","task":"t1","agent":"m1","uri":long_uri}));
    assert_eq!(got["content"], json!(long));
    // `gc` says what it did in the topic too (another instance's dir, on
    // the real clock: the hour the test clock gave the long blob ended
    // long ago, so it goes now).
    let dc = tempfile::tempdir().unwrap();
    let gc = cli_json_on(dc.path(), &k, &["gc", "--grace-secs", "0"]);
    assert_eq!(gc["shared"], json!({"examined": 1, "removed": 1}), "{gc}");
    // `status` shows what the instances share.
    let st = cli_json_on(dc.path(), &k, &["status"]);
    assert!(
        st["shared"]["blobs"]["records"].as_u64().unwrap() >= 6,
        "{st}"
    );
    assert_eq!(st["shared"]["keys"]["partitions"], 1, "{st}");
    assert_eq!(fresh.fetch(&sha_of(&long)).unwrap(), None);
}

#[test]
fn a_broker_killed_mid_upload_loses_no_acknowledged_blob() {
    const UPLOADS: usize = 24;
    let cluster = Cluster::from_env();
    let k = KafkaConfig {
        topic_prefix: unique_prefix("shared-fault"),
        replication_factor: 3,
        min_insync_replicas: Some(2),
        timeout: Duration::from_secs(15),
        ..KafkaConfig::new(required_env(KAFKA3_ENV))
    };
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = Engine::open_kafka(da.path(), &k, kafka_options(fixed_clock_options())).unwrap();
    apply_retrying(
        &mut a,
        json!({"op":"publish_agent","agent":"writer","scope":"acme/docs","listens":[],"emits":[{"event":"doc.ready","context":"doc","artifacts":["doc"]}]}),
        &[],
    );
    let mut acknowledged = Vec::new();
    for i in 0..UPLOADS {
        if i == 4 {
            cluster.run(&["kill", "2"]).expect("kill broker 2");
        }
        if i == 16 {
            cluster.run(&["restart", "2"]).expect("restart broker 2");
        }
        let run = format!("w{i}");
        let doc = body(&run, 600_000 + i * 1000);
        apply_retrying(
            &mut a,
            json!({"op":"open_run","run":run,"agent":"writer"}),
            &["run_exists"],
        );
        apply_retrying(
            &mut a,
            json!({"op":"close_run","run":run,"status":"succeeded","artifacts":{"doc":doc}}),
            &["run_closed"],
        );
        acknowledged.push(doc);
    }
    drop(a);
    // Another instance, with nothing cached, reads every acknowledged blob.
    let b = Engine::open_kafka(db.path(), &k, kafka_options(fixed_clock_options())).unwrap();
    for doc in &acknowledged {
        let uri = format!("cas://sha256/{}", hex::encode(sha_of(doc)));
        let got = b.store().get(&uri).unwrap_or_else(|e| panic!("{uri}: {e}"));
        assert!(got == doc.as_bytes(), "{uri}: bytes differ");
    }
}

/// The same artifact sent by many operations in a burst is published once
/// (one round trip, not one per operation); once the burst is over, a
/// publication writes the bytes again and restarts their grace period.
#[test]
fn the_same_bytes_put_in_a_burst_are_published_once() {
    let k = config("shared-burst");
    let log: Arc<dyn Log> = Arc::new(KafkaLog::connect(&k).unwrap());
    let share = SharedContent::over(log.clone()).unwrap();
    let records = || -> u64 { log.end_offsets(Topic::Blobs).unwrap().iter().sum() };
    let bytes = b"the same patch, closed by many runs".to_vec();
    let sha = sha_of(std::str::from_utf8(&bytes).unwrap());
    let before = records();
    share.publish(&sha, &bytes).unwrap();
    assert_eq!(records() - before, 2, "one chunk and its manifest");
    for _ in 0..10 {
        share.publish(&sha, &bytes).unwrap();
    }
    assert_eq!(records() - before, 2, "published again within the burst");
    // Other bytes are not taken for these.
    let other = b"another patch".to_vec();
    share
        .publish(&sha_of(std::str::from_utf8(&other).unwrap()), &other)
        .unwrap();
    assert_eq!(records() - before, 4);
    std::thread::sleep(Duration::from_millis(
        agentledger::content::share::REPUBLISH_AFTER_MS + 100,
    ));
    share.publish(&sha, &bytes).unwrap();
    assert_eq!(records() - before, 6, "after the burst: written again");
}
