//! Task keys shared between instances on Kafka: with the same seal key
//! (`key generate --seal`, the file copied), context one instance sealed
//! opens on another — trail, context and blob — while the keys topic holds
//! only wrapped keys and no plaintext rests in any data dir; an instance
//! with another seal key reads it as unreadable; `forget_task` on one
//! instance erases the context on every instance (each drops its copy of
//! the key) and ends the key in the topic with a tombstone.

mod common;

use agentledger::log::kafka::KafkaLog;
use agentledger::model::Topic;
use serde_json::{json, Value};
use std::path::Path;

const QUERY: &str = "SECRET-QUERY-4e1d07";
const SUBTASK: &str = "SECRET-SUBTASK-a9c3b2";
const BLOB: &str = "SECRET-BLOB-77f0e1";

fn blob_uri() -> String {
    format!(
        "cas://sha256/{}",
        hex::encode(common::sha256(&[BLOB.as_bytes()]))
    )
}

fn ctx(agent: &str, sub: &str) -> Value {
    json!({
        "AgentID": format!("id-{agent}"), "AgentName": agent, "SubTaskID": sub, "SubTaskName": SUBTASK,
        "Dependencies": [], "ContextItems": [{"ContextID": "doc", "ContextType": "text", "MediaType": "text/plain",
            "ContextURI": blob_uri(), "Description": "the doc", "Priority": "reference_only"}],
        "todoItems": [{"itemID": "i1", "description": SUBTASK}],
        "EvaluationPolicy": {"SuccessCriteria": [{"CriterionID": "c1", "Description": "ok", "Required": true}], "ConfidenceThreshold": 0.8}
    })
}

struct Fleet {
    brokers: String,
    prefix: String,
}

impl Fleet {
    fn args<'a>(&'a self, rest: &[&'a str]) -> Vec<&'a str> {
        let mut a = vec!["--kafka", &self.brokers, "--topic-prefix", &self.prefix];
        a.extend_from_slice(rest);
        a
    }

    fn apply(&self, dir: &Path, ops: &[Value]) -> Vec<Value> {
        let input: Vec<String> = ops.iter().map(Value::to_string).collect();
        let (code, answers, err) =
            common::apply_answers(dir, &(input.join("\n") + "\n"), &self.args(&[]));
        assert_eq!(code, 0, "{answers:?} {err}");
        answers
    }

    fn trail(&self, dir: &Path, run: &str) -> String {
        let (code, out, err) = common::cli(dir, &self.args(&["--json", "trail", run]));
        assert_eq!(code, 0, "{err}");
        out
    }
}

#[test]
fn context_sealed_on_one_instance_opens_on_another_and_forgetting_erases_it_everywhere() {
    let brokers = common::required_env(common::KAFKA_ENV);
    let fleet = Fleet {
        brokers: brokers.clone(),
        prefix: common::unique_prefix("shared-keys"),
    };
    let d = tempfile::tempdir().unwrap();
    let (a, b, c) = (d.path().join("a"), d.path().join("b"), d.path().join("c"));
    let (code, fingerprint, err) = common::cli(&a, &["key", "generate", "--seal"]);
    assert_eq!(code, 0, "{err}");
    agentledger::log::private_files::create_dir_all(&b).unwrap();
    std::fs::copy(a.join("seal.key"), b.join("seal.key")).unwrap();
    let (code, shown, _) = common::cli(&b, &["key", "show", "--seal"]);
    assert_eq!((code, shown.trim()), (0, fingerprint.trim()));
    let (code, other, _) = common::cli(&c, &["key", "generate", "--seal"]);
    assert_eq!(code, 0);
    assert_ne!(other.trim(), fingerprint.trim());

    let sent = ctx("hotel", "h1");
    let answers = fleet.apply(
        &a,
        &[
            json!({"op":"publish_agent","agent":"master","scope":"acme/travel"}),
            json!({"op":"publish_agent","agent":"hotel","scope":"acme/travel"}),
            json!({"op":"open_run","run":"m1","agent":"master"}),
            json!({"op":"open_task","task":"t1","run":"m1","task_context":{
                "TaskID":"T1","UserQuery":QUERY,"TaskName":"trip","TaskDescription":"d","GoalStatus":[],"OverallStatus":"open"}}),
            json!({"op":"put_blob","task":"t1","content":BLOB,"ttl_s":3600}),
            json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":sent}),
        ],
    );
    assert!(answers.iter().all(|x| x["ok"] == true), "{answers:?}");

    // B, with the same seal key: everything opens.
    let on_b = fleet.trail(&b, "m1");
    assert!(on_b.contains(QUERY) && on_b.contains(SUBTASK), "{on_b}");
    let got = fleet.apply(
        &b,
        &[
            json!({"op":"get_context","task":"t1","agent":"hotel"}),
            json!({"op":"get_blob","task":"t1","agent":"hotel","uri":blob_uri()}),
        ],
    );
    assert_eq!(got[0]["agent_context"]["SubTaskName"], SUBTASK, "{got:?}");
    assert_eq!(got[1]["content"], BLOB, "{got:?}");
    // At rest nowhere in clear, on either instance.
    for secret in [QUERY, SUBTASK, BLOB] {
        for dir in [&a, &b] {
            assert_eq!(
                common::holding(dir, secret),
                Vec::<String>::new(),
                "{secret}"
            );
        }
    }
    // The topic holds the key wrapped, never as the key file holds it.
    let log = KafkaLog::connect(&agentledger::log::kafka::KafkaConfig {
        topic_prefix: fleet.prefix.clone(),
        ..agentledger::log::kafka::KafkaConfig::new(brokers)
    })
    .unwrap();
    let tag = agentledger::erasure::keys::tag("t1");
    let key_file: Value = serde_json::from_str(
        &std::fs::read_to_string(a.join("keys").join(format!("{tag}.key"))).unwrap(),
    )
    .unwrap();
    let plain_key = key_file["key"].as_str().unwrap().to_owned();
    let records = common::read_all(&log, Topic::Keys, 0, 64);
    let ours: Vec<_> = records.iter().filter(|r| r.key == tag.as_bytes()).collect();
    assert_eq!(ours.len(), 1, "one wrapped key for t1");
    let raw = hex::decode(&plain_key).unwrap();
    for r in &ours {
        assert!(!String::from_utf8_lossy(&r.payload).contains(&plain_key));
        assert!(!r.payload.windows(32).any(|w| w == raw.as_slice()));
    }

    // C, with another seal key: unreadable, never shown.
    let on_c = fleet.trail(&c, "m1");
    assert!(!on_c.contains(QUERY) && !on_c.contains(SUBTASK), "{on_c}");
    assert!(on_c.contains("unreadable"), "{on_c}");

    // Forgotten on A: erased on B too, and ended in the topic.
    let forgot = fleet.apply(&a, &[json!({"op":"forget_task","task":"t1"})]);
    assert_eq!(forgot[0]["ok"], true, "{forgot:?}");
    let after = fleet.trail(&b, "m1");
    assert!(
        !after.contains(QUERY) && !after.contains(SUBTASK),
        "{after}"
    );
    assert!(after.contains("\"unreadable\":\"erased\""), "{after}");
    assert!(
        !b.join("keys").join(format!("{tag}.key")).exists(),
        "B dropped its copy of the key"
    );
    let (_, refused, _) = common::apply_answers(
        &b,
        &format!(
            "{}\n",
            json!({"op":"get_context","task":"t1","agent":"hotel"})
        ),
        &fleet.args(&[]),
    );
    assert_eq!(refused[0]["error"]["code"], "expired", "{refused:?}");
    let last = common::read_all(&log, Topic::Keys, 0, 64)
        .into_iter()
        .rev()
        .find(|r| r.key == tag.as_bytes())
        .unwrap();
    assert!(last.payload.is_empty(), "a tombstone ends the key");
}
