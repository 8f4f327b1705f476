//! A run's governed tools as MCP tools, whichever transport carries them
//! (the server's `/v1/runs/{run}/mcp`, `agentledger mcp` on STDIO): their
//! schemas, the protocol operation each call stands for, and the tool
//! result each reply makes. No IO: a call is decided by the engine like any
//! other operation, and this module only translates.

use crate::codes::Code;
use crate::model::Run;
use crate::protocol::{Failure, Reply};
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, JsonObject, ServerCapabilities, ServerConfig,
    Tool,
};
use serde_json::{json, Value};
use std::sync::Arc;

/// What a run's MCP server says of itself at `initialize`.
pub fn server_info() -> ServerConfig {
    let mut info = ServerConfig::new(ServerCapabilities::builder().enable_tools().build());
    info.server_info = Implementation::new("agentledger", env!("CARGO_PKG_VERSION"));
    info.instructions = Some(
        "The governed tools of one agent run: read the artifacts the run's trigger event exposes by name, then close the run.".into(),
    );
    info
}

/// The names `run`'s trigger event exposes, in its order: all it may read.
pub fn names_of(run: &Run) -> Vec<String> {
    run.trigger
        .as_ref()
        .map(|t| t.artifacts.iter().map(|a| a.name.clone()).collect())
        .unwrap_or_default()
}

fn schema(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(o) => Arc::new(o),
        _ => Arc::new(JsonObject::new()),
    }
}

/// The tools of run `run`, whose trigger exposes `names`.
pub fn tools(run: &str, names: &[String]) -> Vec<Tool> {
    let read = Tool::new(
        "read_artifact",
        format!(
            "Read an artifact the event that started run {} exposes, by its name in the event's contract (never a ref). The read is recorded in the run's trail, the artifact's labels flow into the run, and it counts against the agent's tool budget.",
            run
        ),
        schema(json!({
            "type": "object",
            "properties": {"name": {"type": "string", "enum": names,
                "description": "The artifact's name in the trigger event's contract"}},
            "required": ["name"],
            "additionalProperties": false
        })),
    );
    let close = Tool::new(
        "close_run",
        format!(
            "Finish run {} with its status, a summary and the artifacts it produced (name → text). A run that succeeds publishes its agent's events; the ledger decides who is started next.",
            run
        ),
        schema(json!({
            "type": "object",
            "properties": {
                "status": {"type": "string", "enum": ["succeeded", "failed", "cancelled"]},
                "summary": {"type": "string"},
                "artifacts": {"type": "object", "additionalProperties": {"type": "string"}},
                "labels": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["status"],
            "additionalProperties": false
        })),
    );
    vec![read, close]
}

/// The operation a tool call stands for, or why it stands for none.
pub fn operation(run: &str, tool: &str, args: &JsonObject) -> Result<Value, Failure> {
    let refuse = |why: String| Err(Failure::new(Code::InvalidRequest, why));
    let allowed: &[&str] = match tool {
        "read_artifact" => &["name"],
        "close_run" => &["status", "summary", "artifacts", "labels"],
        other => {
            return refuse(format!(
                "no tool {other:?}: this run has read_artifact and close_run"
            ))
        }
    };
    if let Some(k) = args.keys().find(|k| !allowed.contains(&k.as_str())) {
        return refuse(format!("{tool} takes no argument {k:?}"));
    }
    let mut op = args.clone();
    op.insert("op".into(), Value::String(tool.into()));
    op.insert("run".into(), Value::String(run.to_string()));
    Ok(Value::Object(op))
}

/// A tool's result from the ledger's reply: the answer as structured
/// content (and, for a read, the bytes as text); a refusal as an error
/// result carrying the ledger's code and message.
pub fn result_of(tool: &str, reply: Reply) -> CallToolResult {
    match reply {
        Reply::Done(done) => {
            let v = serde_json::to_value(&done).unwrap_or(Value::Null);
            let text = match (tool, v.get("content").and_then(Value::as_str)) {
                ("read_artifact", Some(text)) => text.to_string(),
                _ => v.to_string(),
            };
            let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
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
