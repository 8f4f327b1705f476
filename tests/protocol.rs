//! The protocol's schema: `schemas/ops.json` is what the types generate,
//! and it tells good requests from bad ones the way the parser does.

mod common;

use agentledger::protocol::{parse_request, schema};
use serde_json::json;

#[test]
fn the_published_schema_is_the_one_the_types_generate() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/schemas/ops.json");
    let file = std::fs::read_to_string(path).unwrap();
    assert!(
        file == schema::document_text(),
        "schemas/ops.json is stale: run `agentledger schema > schemas/ops.json`"
    );
}

#[test]
fn schema_and_parser_agree_on_what_is_a_request() {
    let schema = schema::document();
    let v = jsonschema::draft202012::new(&schema).expect("the schema compiles");
    let good = [
        json!({"op":"open_run","run":"r1","agent":"developer"}),
        json!({"op":"dispatch"}),
        json!({"op":"close_run","run":"r1","status":"succeeded",
               "artifacts":{"a":"text","b":{"content_b64":"AAE="}}}),
        json!({"op":"send_context","task":"t","run":"m","mode":"sync","agent_context":{}}),
        json!({"op":"evaluate","task":"t","run":"m","subtask":"s","decision":"accepted"}),
    ];
    for g in &good {
        assert!(v.is_valid(g), "{g}");
        parse_request(g).unwrap_or_else(|e| panic!("{g}: {e}"));
    }
    let bad = [
        json!({"op":"open_run","run":"r1"}),
        json!({"op":"open_run","run":"r1","agent":"a","colour":"red"}),
        json!({"op":"dispatch","extra":1}),
        json!({"op":"nope"}),
        json!({"run":"r1"}),
        json!({"op":"close_run","run":"r1","status":"succeeded","artifacts":{"a":7}}),
        json!({"op":"send_context","task":"t","run":"m","mode":"sometimes","agent_context":{}}),
        json!({"op":"publish_agent","agent":"a","scope":"s","tool_budget":-1}),
        json!(["op", "open_run"]),
    ];
    for b in &bad {
        assert!(!v.is_valid(b), "the schema accepts {b}");
        assert!(parse_request(b).is_err(), "the parser accepts {b}");
    }
}
