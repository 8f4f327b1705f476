//! What goes out as JSON (the `published` and `checkpoints` topics) matches
//! the schemas in `schemas/`, which are what downstream consumers rely on.

mod common;

use agentledger::log::Topic;
use serde_json::{json, Value};

fn validator(file: &str) -> jsonschema::Validator {
    let text =
        std::fs::read_to_string(format!("{}/schemas/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

fn records(l: &common::Ledger, topic: Topic) -> Vec<Value> {
    let log = l.engine.log();
    (0..log.partitions(topic))
        .flat_map(|p| log.read(topic, p, 0, usize::MAX).unwrap())
        .map(|r| serde_json::from_slice(&r.payload).unwrap())
        .collect()
}

#[test]
fn published_topic_and_checkpoints_match_their_schemas() {
    let d = tempfile::tempdir().unwrap();
    let mut l = common::Ledger::open(d.path());
    let runs = l.drive_loop("r0");
    l.engine.checkpoint(true).unwrap();
    let published = records(&l, Topic::Published);
    // Hops 0..=7 publish; the run at hop 8 is withheld and never appears.
    assert_eq!(published.len(), 8);
    assert!(published.iter().all(|p| p["source_run"] != json!(runs[8])));
    let v = validator("published_event.json");
    for p in &published {
        let errors: Vec<String> = v.iter_errors(p).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{p}: {errors:?}");
    }
    let v = validator("checkpoint.json");
    let cps = records(&l, Topic::Checkpoints);
    assert!(!cps.is_empty());
    for c in &cps {
        assert!(v.is_valid(c), "{c}");
    }
}
