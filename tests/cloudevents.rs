//! The `published` topic read by a CloudEvents SDK no one here wrote (the
//! Python `cloudevents` package, through the Confluent Kafka client on
//! Kafka): every event parses, ids are unique, only published events
//! appear, and on Kafka the `ce_` headers say what the structured value
//! says. The Python environment comes from `tools/python/setup.sh`
//! (`AGENTLEDGER_TEST_PYTHON`, exported by `tools/test`).

mod common;

use agentledger::engine::EngineOptions;
use agentledger::model::Topic;
use common::{Backend, Ledger};
use serde_json::Value;
use std::collections::BTreeSet;

fn reader(args: &[&str], input: &str) -> Vec<Value> {
    let out = common::run_python("read_published.py", args, &[], input);
    let v: Value = serde_json::from_slice(&out).unwrap();
    v["events"].as_array().unwrap().clone()
}

fn options() -> EngineOptions {
    EngineOptions {
        ledger: Some("acme-test".into()),
        ..common::fixed_clock_options()
    }
}

/// What every parsed event must say, given the loop's runs (hops 0..=8;
/// the run at hop 8 publishes nothing).
fn check(events: &[Value], runs: &[String]) {
    assert_eq!(events.len(), 8, "hops 0..7 publish one event each");
    let ids: BTreeSet<&str> = events
        .iter()
        .map(|e| e["attributes"]["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 8, "ids are unique");
    let mut subjects: Vec<&str> = events
        .iter()
        .map(|e| e["attributes"]["subject"].as_str().unwrap())
        .collect();
    subjects.sort();
    let mut expected: Vec<&str> = runs[..8].iter().map(String::as_str).collect();
    expected.sort();
    assert_eq!(subjects, expected, "only published events, each once");
    for e in events {
        let a = &e["attributes"];
        assert_eq!(a["specversion"], "1.0");
        let agent = e["data"]["agent"].as_str().unwrap();
        assert_eq!(a["source"], format!("agentledger/acme-test/{agent}"));
        let kind = a["type"].as_str().unwrap();
        assert_eq!(
            kind,
            if agent == "developer" {
                "code.ready"
            } else {
                "review.done"
            }
        );
        assert_eq!(a["root"], runs[0]);
        assert_eq!(a["partitionkey"], runs[0]);
        assert_eq!(a["datacontenttype"], "application/json");
        assert_eq!(a["hop"], e["data"]["hop"]);
        assert!(a["labels"].as_str().unwrap().contains("area:acme/platform"));
        // References only: never the artifact's bytes.
        for art in e["data"]["artifacts"].as_array().unwrap() {
            let keys: BTreeSet<&str> = art
                .as_object()
                .unwrap()
                .keys()
                .map(|k| k.as_str())
                .collect();
            assert_eq!(
                keys,
                BTreeSet::from(["name", "ref", "digest", "size", "source_run", "labels"])
            );
        }
    }
}

#[test]
fn the_published_topic_parses_with_the_cloudevents_sdk() {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_with(d.path(), &Backend::Embedded, options());
    let runs = l.drive_loop("r0");
    let log = l.engine.log();
    let lines: String = (0..log.partitions(Topic::Published))
        .flat_map(|p| log.read(Topic::Published, p, 0, usize::MAX).unwrap())
        .map(|r| String::from_utf8(r.payload).unwrap() + "\n")
        .collect();
    check(&reader(&["lines"], &lines), &runs);
    // `subscribe` prints the same objects.
    drop(l);
    let (rc, out, err) = common::cli(
        d.path(),
        &[
            "--ledger-id",
            "acme-test",
            "subscribe",
            "--from-beginning",
            "--idle-exit",
            "1",
        ],
    );
    assert_eq!(rc, 0, "{err}");
    check(&reader(&["lines"], &out), &runs);
}

#[test]
fn kafka_the_published_topic_parses_with_the_cloudevents_sdk_headers_and_all() {
    let backend = Backend::kafka("cloudevents_sdk");
    let Backend::Kafka(k) = &backend else {
        unreachable!()
    };
    let (bootstrap, topic) = (k.brokers.clone(), format!("{}published", k.topic_prefix));
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_with(d.path(), &backend, options());
    let runs = l.drive_loop("r0");
    let events = reader(&["kafka", &bootstrap, &topic, "8"], "");
    check(&events, &runs);
    for e in &events {
        assert_eq!(e["key"], runs[0], "the record key is the chain root");
        assert_eq!(
            e["headers"]["content-type"],
            "application/cloudevents+json; charset=UTF-8"
        );
        // The `ce_` headers alone (binary mode) give every attribute the
        // structured value gives.
        let (s, b) = (
            e["attributes"].as_object().unwrap(),
            e["binary_attributes"].as_object().unwrap(),
        );
        for (name, value) in s {
            let text = |v: &Value| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            assert_eq!(
                b.get(name).map(text),
                Some(text(value)),
                "ce_{name} says what the value says"
            );
        }
    }
}
