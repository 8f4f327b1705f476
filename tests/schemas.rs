//! What goes out as JSON (the `published` and `checkpoints` topics) matches
//! the schemas in `schemas/`, which are what downstream consumers rely on.

mod common;

use agentledger::model::Topic;
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
    assert!(published.iter().all(|p| p["subject"] != json!(runs[8])));
    // Each parses as the type the dispatcher wrote, and prints the same.
    for p in &published {
        let e: agentledger::engine::published::CloudEvent =
            serde_json::from_value(p.clone()).unwrap();
        assert_eq!(&serde_json::to_value(&e).unwrap(), p);
    }
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

/// Every line of an export of a signed ledger matches `schemas/export.json`
/// (records with inclusion proofs, checkpoints with notes).
#[test]
fn export_lines_match_their_schema() {
    let d = tempfile::tempdir().unwrap();
    let key = agentledger::audit::note::SignerKey::generate("schema-test").unwrap();
    // Where the CLI's export finds it to sign the tail it checkpoints.
    std::fs::write(d.path().join("checkpoint.key"), key.to_text()).unwrap();
    let opts = agentledger::engine::EngineOptions {
        signer: Some(std::sync::Arc::new(key)),
        ..common::fixed_clock_options()
    };
    {
        let mut l = common::Ledger::open_with(d.path(), &common::Backend::Embedded, opts);
        l.drive_loop("r0");
    }
    let (code, out, err) = common::cli(d.path(), &["export", "--chain", "r0"]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(format!(
        "{}/schemas/export.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let mut schema: Value = serde_json::from_str(&text).unwrap();
    // The checkpoint line refers to checkpoint.json by name: resolve it here.
    let cp: Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/schemas/checkpoint.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .unwrap(),
    )
    .unwrap();
    schema["oneOf"][2]["properties"]["checkpoint"] = cp;
    let v = jsonschema::validator_for(&schema).unwrap();
    let mut kinds = std::collections::BTreeSet::new();
    for line in out.lines() {
        let l: Value = serde_json::from_str(line).unwrap();
        let errors: Vec<String> = v.iter_errors(&l).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{line}: {errors:?}");
        kinds.insert(l["type"].as_str().unwrap().to_owned());
        if l["type"] == "record" {
            assert!(
                l["inclusion"].is_object(),
                "a signed ledger's records are proven: {line}"
            );
        }
    }
    assert_eq!(kinds.len(), 3, "{kinds:?}");
}
