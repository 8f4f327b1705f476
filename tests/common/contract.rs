//! Every request the suite sends and every reply it gets, held against
//! `schemas/ops.json` and against serde both ways: the request validates
//! and parses into `protocol::Request`, whose JSON parses back to the same
//! request; the reply validates against `#/$defs/replies/<op>` and reads
//! back into the typed answer, which prints the very same JSON.

use agentledger::protocol::{parse_request, Answer, Done, Failure, True};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/ops.json");
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    })
}

/// A validator for the schema at `pointer` inside the document.
fn validator(pointer: &str) -> &'static jsonschema::Validator {
    static CACHE: OnceLock<Mutex<HashMap<String, &'static jsonschema::Validator>>> =
        OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap();
    cache.entry(pointer.to_string()).or_insert_with(|| {
        let doc = document();
        let schema = json!({
            "$schema": doc["$schema"],
            "$ref": format!("#{pointer}"),
            "$defs": doc["$defs"],
        });
        Box::leak(Box::new(
            jsonschema::draft202012::new(&schema).expect("schemas/ops.json compiles"),
        ))
    })
}

fn valid(pointer: &str, v: &Value) {
    let errors: Vec<String> = validator(pointer)
        .iter_errors(v)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{v} against {pointer}: {errors:?}");
}

/// Check one request the ledger accepted as well formed, and its reply.
pub fn check(request: &Value, reply: &Value) {
    let op = request["op"].as_str().expect("a request names its op");
    valid("/$defs/Request", request);
    let parsed = parse_request(request).unwrap_or_else(|e| panic!("{request}: {e}"));
    let again = serde_json::to_value(&parsed).unwrap();
    assert_eq!(
        parse_request(&again).unwrap(),
        parsed,
        "{request} → {again}"
    );
    check_reply(op, reply);
}

/// Check a reply to operation `op`.
pub fn check_reply(op: &str, reply: &Value) {
    valid(&format!("/$defs/replies/{op}"), reply);
    let printed = if reply["ok"] == json!(true) {
        let mut body = reply.clone();
        let follow_up_failed: Vec<String> = body
            .as_object_mut()
            .and_then(|o| o.remove("follow_up_failed"))
            .map(|v| serde_json::from_value(v).unwrap())
            .unwrap_or_default();
        let answer = Answer::from_value(op, body).unwrap_or_else(|e| panic!("{reply}: {e}"));
        serde_json::to_value(Done {
            ok: True,
            answer,
            follow_up_failed,
        })
        .unwrap()
    } else {
        let failure: Failure = serde_json::from_value(reply.clone()).unwrap();
        serde_json::to_value(failure).unwrap()
    };
    assert_eq!(&printed, reply, "the typed reply prints differently");
}
