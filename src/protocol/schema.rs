//! `schemas/ops.json`, generated from the protocol's types so that the
//! schema and what serde accepts and prints cannot drift apart: the root
//! validates a request, `#/$defs/replies/<op>` the reply to that operation.
//! `agentledger schema` prints it; a test checks the file is current.

use super::answer::*;
use super::request::{Request, OPS};
use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};

/// The schema document, as written to `schemas/ops.json`.
pub fn document() -> Value {
    let mut generator = SchemaSettings::draft2020_12().into_generator();
    let request = generator.subschema_for::<Request>();
    let failure = generator.subschema_for::<Failure>();
    let mut replies = Map::new();
    for op in OPS {
        let done = match *op {
            "publish_agent" => generator.subschema_for::<Done<Published>>(),
            "open_run" => generator.subschema_for::<Done<Opened>>(),
            "read_artifact" => generator.subschema_for::<Done<ArtifactRead>>(),
            "close_run" => generator.subschema_for::<Done<Closed>>(),
            "dispatch" => generator.subschema_for::<Done<Dispatched>>(),
            "open_task" => generator.subschema_for::<Done<TaskOpened>>(),
            "update_task" => generator.subschema_for::<Done<TaskUpdated>>(),
            "put_blob" => generator.subschema_for::<Done<BlobPut>>(),
            "send_context" => generator.subschema_for::<Done<ContextSent>>(),
            "get_context" => generator.subschema_for::<Done<ContextGot>>(),
            "get_blob" => generator.subschema_for::<Done<BlobGot>>(),
            "return_context" => generator.subschema_for::<Done<ContextReturned>>(),
            "evaluate" => generator.subschema_for::<Done<Evaluated>>(),
            "issue_token" => generator.subschema_for::<Done<TokenIssuedOut>>(),
            "revoke_token" => generator.subschema_for::<Done<TokenRevokedOut>>(),
            "forget_task" => generator.subschema_for::<Done<TaskForgotten>>(),
            other => unreachable!("OPS names {other} but no answer type does"),
        };
        replies.insert(
            op.to_string(),
            json!({"oneOf": [done.to_value(), failure.clone().to_value()]}),
        );
    }
    let mut defs: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    defs.insert("replies".into(), Value::Object(replies));
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "agentledger operations",
        "description": "One request per line (apply), per POST /v1/ops body or ndjson line, or per WebSocket message. The root validates a request; #/$defs/replies/<op> validates the reply to that operation.",
        "$ref": request.to_value()["$ref"],
        "$defs": defs,
    })
}

/// The document as the file holds it: pretty JSON and a final newline.
pub fn document_text() -> String {
    let mut s = serde_json::to_string_pretty(&document()).expect("a schema serialises");
    s.push('\n');
    s
}
