//! The governed tools of a run: each one's JSON Schemas, the protocol
//! operation a call stands for (the ledger fills in the run or the agent,
//! so a call cannot act for another), and the tool result each reply makes.
//!
//! Three roles share one endpoint. Every run reads what its trigger
//! exposes and closes (seed 003). Its agent, when a master sent it a
//! subtask, gets, reads by reference and returns its own context (R11,
//! R13–R15). A run that is a task's master sends contexts, evaluates what
//! comes back and maintains the task (R12, R13). Which task a call is about
//! is named in the call: tasks open and subtasks arrive after a client
//! lists its tools, and the ledger refuses a call for a task the run has
//! no part in, as `/v1/ops` does.

use super::binding::Binding;
use crate::codes::Code;
use crate::context::schema::{AGENT_CONTEXT_SCHEMA, TASK_CONTEXT_SCHEMA};
use crate::protocol::answer::{
    ArtifactRead, BlobGot, BlobPut, Closed, ContextGot, ContextReturned, ContextSent, Done,
    Evaluated, TaskUpdated,
};
use crate::protocol::{Failure, Reply};
use rmcp::model::{CallToolResult, ContentBlock, JsonObject, ResourceContents, Tool};
use serde_json::{json, Map, Value};
use std::sync::Arc;

/// What the ledger adds to a call's arguments to make its operation.
#[derive(Clone, Copy)]
enum Fills {
    /// `run`: the endpoint's run (its reads, its close, its task as master).
    Run,
    /// `agent`: the run's agent (its own subtask's context, never another's).
    Agent,
    /// Nothing: the task named is enough (the policy holds it to its master).
    Nothing,
}

/// Every tool, in the order `tools/list` shows them.
const TOOLS: &[(&str, Fills)] = &[
    ("read_artifact", Fills::Run),
    ("close_run", Fills::Run),
    ("get_context", Fills::Agent),
    ("get_blob", Fills::Agent),
    ("return_context", Fills::Agent),
    ("send_context", Fills::Run),
    ("evaluate", Fills::Run),
    ("update_task", Fills::Run),
    ("put_blob", Fills::Nothing),
];

/// A context schema from `schemas/` as one property of a tool's input: the
/// property, and the definitions its `$ref`s name (which must sit at the
/// root of the input schema to resolve).
fn embedded(text: &str) -> (Value, Map<String, Value>) {
    let Ok(Value::Object(mut s)) = serde_json::from_str::<Value>(text) else {
        return (json!({"type": "object"}), Map::new());
    };
    let defs = match s.remove("$defs") {
        Some(Value::Object(d)) => d,
        _ => Map::new(),
    };
    s.remove("$schema");
    s.remove("$id");
    (Value::Object(s), defs)
}

/// An input schema: an object of `properties`, `required` ones, nothing
/// else; with `defs` at its root for embedded context schemas.
fn input(properties: Value, required: &[&str], defs: Map<String, Value>) -> Arc<JsonObject> {
    let mut s = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    if !defs.is_empty() {
        s["$defs"] = Value::Object(defs);
    }
    object(s)
}

fn object(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(o) => Arc::new(o),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The schema of a call's structured result: the answer `/v1/ops` gives
/// (as `schemas/ops.json` has it), or a refusal's code and message — a
/// client checks an error result against it too. Each `true` (anything: a
/// context's JSON) is written `{}` and the formats of Rust's integer kinds
/// (`uint32`, …) are left out, as clients expect of a JSON Schema.
fn output<T: schemars::JsonSchema>() -> Arc<JsonObject> {
    let mut done = schemars::schema_for!(Done<T>).to_value();
    let defs = done
        .as_object_mut()
        .and_then(|o| {
            o.remove("$schema");
            o.remove("$defs")
        })
        .unwrap_or_else(|| json!({}));
    let mut v = json!({
        "type": "object",
        "oneOf": [done, {
            "type": "object",
            "description": "A refusal: the ledger's code and message (the result's isError is true)",
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            "required": ["code", "message"],
            "additionalProperties": false
        }],
        "$defs": defs,
    });
    plain(&mut v);
    object(v)
}

/// Rewrite the subschemas of schema `v` that are `true` as `{}`, and drop
/// formats JSON Schema does not define.
fn plain(v: &mut Value) {
    let Value::Object(o) = v else { return };
    if o.get("format").and_then(Value::as_str).is_some_and(|f| {
        ["int", "uint", "double", "float"]
            .iter()
            .any(|p| f.starts_with(p))
    }) {
        o.remove("format");
    }
    let sub = |s: &mut Value| match s {
        Value::Bool(true) => *s = json!({}),
        s => plain(s),
    };
    for (k, val) in o.iter_mut() {
        match (k.as_str(), val) {
            ("properties" | "$defs" | "definitions", Value::Object(m)) => {
                m.values_mut().for_each(sub)
            }
            ("allOf" | "anyOf" | "oneOf" | "prefixItems", Value::Array(a)) => {
                a.iter_mut().for_each(sub)
            }
            ("items" | "not" | "contains", s) => sub(s),
            _ => {}
        }
    }
}

fn task_property() -> Value {
    json!({"type": "string", "description": "The task, by the id its master opened it with"})
}

/// One tool: its description and schemas.
fn tool(name: &'static str, b: &Binding) -> Tool {
    let run = &b.run;
    let (description, input_schema, output_schema) = match name {
        "read_artifact" => (
            format!("Read an artifact the event that started run {run} exposes, by its name in the event's contract (never a ref). The read is recorded in the run's trail, the artifact's labels flow into the run, and it counts against the agent's tool budget."),
            input(
                json!({"name": {"type": "string", "enum": b.names,
                    "description": "The artifact's name in the trigger event's contract"}}),
                &["name"],
                Map::new(),
            ),
            output::<ArtifactRead>(),
        ),
        "close_run" => (
            format!("Finish run {run} with its status, a summary and the artifacts it produced (name → text). A run that succeeds publishes its agent's events; the ledger decides who is started next."),
            input(
                json!({
                    "status": {"type": "string", "enum": ["succeeded", "failed", "cancelled"]},
                    "summary": {"type": "string"},
                    "artifacts": {"type": "object", "additionalProperties": {"type": "string"}},
                    "labels": {"type": "array", "items": {"type": "string"}}
                }),
                &["status"],
                Map::new(),
            ),
            output::<Closed>(),
        ),
        "get_context" => (
            format!("The AgentContext a task's master sent agent {} for its subtask (its own only: isolation), or the one it returned when nothing is outstanding.", b.agent),
            input(json!({"task": task_property()}), &["task"], Map::new()),
            output::<ContextGot>(),
        ),
        "get_blob" => (
            format!("Read content a context sent to agent {} holds by reference, by its ContextURI: the digest is checked, and only a URI the agent was sent, within its time to live, is read.", b.agent),
            input(
                json!({"task": task_property(),
                    "uri": {"type": "string", "description": "The ContextURI, as the context item gives it"}}),
                &["task", "uri"],
                Map::new(),
            ),
            output::<BlobGot>(),
        ),
        "return_context" => {
            let (ctx, defs) = embedded(AGENT_CONTEXT_SCHEMA);
            (
                format!("Return agent {}'s updated AgentContext for its subtask: checked against the schema, then layer one of the evaluation (what was kept of what was sent) is recorded for the master to decide on.", b.agent),
                input(json!({"task": task_property(), "agent_context": ctx}), &["task", "agent_context"], defs),
                output::<ContextReturned>(),
            )
        }
        "send_context" => {
            let (ctx, defs) = embedded(AGENT_CONTEXT_SCHEMA);
            (
                format!("As the master of a task (run {run}), invoke the agent an AgentContext names with it: sync waits for nothing else outstanding, async runs beside other async subtasks."),
                input(
                    json!({"task": task_property(),
                        "mode": {"type": "string", "enum": ["sync", "async"]},
                        "agent_context": ctx}),
                    &["task", "mode", "agent_context"],
                    defs,
                ),
                output::<ContextSent>(),
            )
        }
        "evaluate" => (
            format!("As the master of a task (run {run}), accept or reject a returned subtask (layer two of the evaluation), with the reason."),
            input(
                json!({"task": task_property(),
                    "subtask": {"type": "string", "description": "The subtask, as send_context answered it (s1, s2, …)"},
                    "decision": {"type": "string", "enum": ["accepted", "rejected"]},
                    "reason": {"type": "string"}}),
                &["task", "subtask", "decision"],
                Map::new(),
            ),
            output::<Evaluated>(),
        ),
        "update_task" => {
            let (ctx, defs) = embedded(TASK_CONTEXT_SCHEMA);
            (
                format!("As the master of a task (run {run}), replace its TaskContext."),
                input(json!({"task": task_property(), "task_context": ctx}), &["task", "task_context"], defs),
                output::<TaskUpdated>(),
            )
        }
        _ => (
            "As the master of a task, put content in its store: the answer's ContextURI is what a context then carries instead of the bytes.".to_string(),
            input(
                json!({"task": task_property(),
                    "content": {"type": "string", "description": "Text (or content_b64 for bytes: exactly one of the two)"},
                    "content_b64": {"type": "string"},
                    "media_type": {"type": "string", "description": "RFC 6838 type/subtype; text/plain when absent"},
                    "ttl_s": {"type": "integer", "minimum": 1, "description": "Seconds the reference stays readable; a day when absent"}}),
                &["task"],
                Map::new(),
            ),
            output::<BlobPut>(),
        ),
    };
    Tool::new(name, description, input_schema).with_raw_output_schema(output_schema)
}

/// The tools of the run `b` is bound to.
pub fn tools(b: &Binding) -> Vec<Tool> {
    TOOLS.iter().map(|(name, _)| tool(name, b)).collect()
}

/// The arguments tool `name` takes: its input schema's properties (the
/// same for every run; read once).
fn arguments(name: &str) -> &'static [String] {
    static ARGUMENTS: std::sync::OnceLock<Vec<(&'static str, Vec<String>)>> =
        std::sync::OnceLock::new();
    let all = ARGUMENTS.get_or_init(|| {
        let any = Binding::default();
        TOOLS
            .iter()
            .map(|(n, _)| {
                let schema = tool(n, &any).input_schema;
                let keys = schema
                    .get("properties")
                    .and_then(Value::as_object)
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                (*n, keys)
            })
            .collect()
    });
    all.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, keys)| keys.as_slice())
        .unwrap_or(&[])
}

/// The operation a call of `name` with `args` stands for on the run `b`
/// is bound to, or why it stands for none (an unknown tool, an argument
/// its schema does not have).
pub fn operation(b: &Binding, name: &str, args: &JsonObject) -> Result<Value, Failure> {
    let refuse = |why: String| Err(Failure::new(Code::InvalidRequest, why));
    let Some((name, fills)) = TOOLS.iter().find(|(n, _)| *n == name) else {
        let names: Vec<&str> = TOOLS.iter().map(|(n, _)| *n).collect();
        return refuse(format!(
            "no tool {name:?}: this run's tools are {}",
            names.join(", ")
        ));
    };
    if let Some(k) = args.keys().find(|k| !arguments(name).contains(k)) {
        return refuse(format!("{name} takes no argument {k:?}"));
    }
    let mut op = args.clone();
    op.insert("op".into(), Value::String(name.to_string()));
    match fills {
        Fills::Run => op.insert("run".into(), Value::String(b.run.clone())),
        Fills::Agent => op.insert("agent".into(), Value::String(b.agent.clone())),
        Fills::Nothing => None,
    };
    Ok(Value::Object(op))
}

/// Where bytes a call read came from, as a resource URI: an artifact of
/// the run by its name, or the ContextURI a blob was read by.
fn source_uri(b: &Binding, name: &str, op: &Value) -> String {
    let field = |f: &str| op.get(f).and_then(Value::as_str).unwrap_or_default();
    match name {
        "read_artifact" => format!(
            "{}/{}",
            super::resources::resource_uri(&b.run, "artifacts"),
            crate::encode::path_segment(field("name"))
        ),
        _ => field("uri").to_string(),
    }
}

/// A call's result from the ledger's reply: the answer as structured
/// content, with bytes read as text (or, when they are not UTF-8, as an
/// embedded resource holding them in base64) and a context as its JSON; a
/// refusal as an error result carrying the ledger's code and message.
pub fn result_of(b: &Binding, name: &str, op: &Value, reply: Reply) -> CallToolResult {
    match reply {
        Reply::Done(done) => {
            let v = serde_json::to_value(&done).unwrap_or(Value::Null);
            let field = |f: &str| v.get(f).and_then(Value::as_str);
            let block = match (name, field("content"), field("content_b64")) {
                ("read_artifact" | "get_blob", Some(text), _) => ContentBlock::text(text),
                ("read_artifact" | "get_blob", None, Some(b64)) => ContentBlock::resource(
                    ResourceContents::blob(b64, source_uri(b, name, op))
                        .with_mime_type("application/octet-stream"),
                ),
                ("get_context", _, _) => ContentBlock::text(
                    v.get("agent_context")
                        .map(Value::to_string)
                        .unwrap_or_default(),
                ),
                _ => ContentBlock::text(v.to_string()),
            };
            let mut r = CallToolResult::success(vec![block]);
            r.structured_content = Some(v);
            r
        }
        Reply::Failed(f) => {
            let mut r = CallToolResult::error(vec![ContentBlock::text(format!(
                "{}: {}",
                f.error.code, f.error.message
            ))]);
            r.structured_content = Some(json!({"code": f.error.code, "message": f.error.message}));
            r
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bound() -> Binding {
        Binding {
            run: "r1".into(),
            agent: "responder".into(),
            names: vec!["triage_summary".into()],
            who: "agent:responder".into(),
            session: None,
        }
    }

    #[test]
    fn every_schema_is_an_object_and_context_refs_resolve_at_its_root() {
        for t in tools(&bound()) {
            assert_eq!(t.input_schema["type"], "object", "{}", t.name);
            let out = t
                .output_schema
                .as_ref()
                .expect("every tool has an output schema");
            assert_eq!(out["type"], "object", "{}", t.name);
            let text = serde_json::to_string(&**out).unwrap();
            assert!(!text.contains("\"uint"), "{}: {text}", t.name);
            for (p, schema) in out["oneOf"][0]["properties"].as_object().unwrap() {
                assert!(schema.is_object(), "{}: {p} is written {schema}", t.name);
            }
            let text = serde_json::to_string(&*t.input_schema).unwrap();
            for r in text.split("\"$ref\":\"#/$defs/").skip(1) {
                let def = r.split('"').next().unwrap();
                assert!(
                    t.input_schema["$defs"].get(def).is_some(),
                    "{}: {def} is not at the root",
                    t.name
                );
            }
        }
    }

    #[test]
    fn the_ledger_fills_in_the_run_or_agent_and_refuses_what_no_schema_has() {
        let b = bound();
        let args = |v: Value| v.as_object().unwrap().clone();
        let op = operation(&b, "get_context", &args(json!({"task": "t1"}))).unwrap();
        assert_eq!(
            op,
            json!({"op": "get_context", "task": "t1", "agent": "responder"})
        );
        let op = operation(&b, "evaluate", &args(json!({"task": "t1"}))).unwrap();
        assert_eq!(op["run"], "r1");
        // Acting for another agent or run is not an argument any tool has.
        let f = operation(&b, "get_context", &args(json!({"task": "t", "agent": "x"})));
        assert!(f.unwrap_err().error.message.contains("\"agent\""));
        let f = operation(&b, "close_run", &args(json!({"run": "other"})));
        assert!(f.unwrap_err().error.message.contains("\"run\""));
        let f = operation(&b, "open_run", &args(json!({})));
        assert!(f.unwrap_err().error.message.contains("read_artifact"));
    }
}
