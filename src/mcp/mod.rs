//! A run's governed tools as MCP tools, whichever transport carries them
//! (the server's `/v1/runs/{run}/mcp`, `agentledger mcp` on STDIO): their
//! schemas, the protocol operation each call stands for, the tool result
//! each reply makes, and the run's resources (its input, its trail). It
//! translates only: a call is decided by the engine like any other
//! operation, and what a resource shows is what the views say.

use crate::codes::Code;
use crate::engine::Engine;
use crate::model::Run;
use crate::protocol::{Failure, Reply};
use crate::queries::{self, Query};
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, JsonObject, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::ErrorData as McpError;
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

/// What a run's MCP server says of itself at `initialize`.
pub fn server_info() -> ServerConfig {
    let mut info = ServerConfig::new(
        ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .build(),
    );
    info.server_info = Implementation::new("agentledger", env!("CARGO_PKG_VERSION"));
    info.instructions = Some(
        "The governed tools of one agent run: read the artifacts the run's trigger event exposes by name, then close the run. Its resources are the run's input (what the trigger exposes: names, digests, labels; never bytes) and its trail so far.".into(),
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

/// The URI of run `run`'s resource `what` (`input`, `trail`).
pub fn resource_uri(run: &str, what: &str) -> String {
    format!(
        "agentledger://runs/{}/{what}",
        crate::encode::path_segment(run)
    )
}

/// The resources of run `run`.
pub fn resources(run: &str) -> Vec<Resource> {
    vec![
        Resource::new(resource_uri(run, "input"), "input")
            .with_title(format!("The input of run {run}"))
            .with_description("The event that opened the run and the artifacts it exposes by name: digests, sizes, source run, labels; never bytes (read_artifact reads those)")
            .with_mime_type("application/json"),
        Resource::new(resource_uri(run, "trail"), "trail")
            .with_title(format!("The trail of run {run}"))
            .with_description("Every step of the run so far, one JSON object a line, as `agentledger trail --json` prints it")
            .with_mime_type("application/x-ndjson"),
    ]
}

/// What run `r`'s input resource shows: its chain position and what its
/// trigger exposes, never the bytes.
pub fn input_of(r: &Run) -> Value {
    let artifacts: Vec<Value> = r
        .trigger
        .iter()
        .flat_map(|t| &t.artifacts)
        .map(|a| {
            json!({"name": a.name, "digest": format!("sha256:{}", hex::encode(a.sha256)),
                "size": a.size, "source_run": a.source_run, "labels": a.labels})
        })
        .collect();
    json!({
        "run": r.run,
        "agent": r.agent,
        "version": r.version,
        "root": r.root,
        "hop": r.hop,
        "event": r.trigger.as_ref().map(|t| &t.event),
        "source_run": r.trigger.as_ref().map(|t| &t.source_run),
        "artifacts": artifacts,
        "labels": r.labels,
    })
}

/// Read resource `uri` of run `run` on `engine`.
pub fn read_resource(
    engine: &mut Engine,
    run: &str,
    uri: &str,
) -> Result<ReadResourceResult, McpError> {
    let failed = |e: crate::error::LedgerError| McpError::internal_error(e.to_string(), None);
    let (text, mime) = if uri == resource_uri(run, "input") {
        let found = engine
            .views()
            .run(run)
            .map_err(|e| McpError::internal_error(e.to_string(), None))?
            .ok_or_else(|| {
                McpError::resource_not_found(format!("run {run} is not in the ledger"), None)
            })?;
        (input_of(&found).to_string(), "application/json")
    } else if uri == resource_uri(run, "trail") {
        let q = Query::Trail {
            run: run.to_string(),
            chain: false,
            as_of: None,
        };
        let said = queries::answer(engine, &q, true).map_err(failed)?;
        if let Some(f) = said.failure {
            return Err(McpError::internal_error(f.error.message, None));
        }
        (said.out, "application/x-ndjson")
    } else {
        return Err(McpError::resource_not_found(
            format!(
                "run {run} has no resource {uri:?}: it has {} and {}",
                resource_uri(run, "input"),
                resource_uri(run, "trail")
            ),
            None,
        ));
    };
    Ok(ReadResourceResult::new(vec![
        ResourceContents::TextResourceContents {
            uri: uri.to_string(),
            mime_type: Some(mime.into()),
            text,
            meta: None,
        },
    ]))
}

/// The `_meta` key a client may give a tool call's idempotency key under
/// (where no session ties a retry to the first call).
pub const IDEMPOTENCY_KEY: &str = "agentledger/idempotencyKey";

/// Tool results already given, so that a call retried after its answer
/// was lost (clients and frameworks retry) gets that answer again rather
/// than a second decision (`run_closed` for a second close). At most
/// `cap` are kept, the oldest forgotten first.
pub struct Answered {
    cap: usize,
    kept: Mutex<(HashMap<String, CallToolResult>, VecDeque<String>)>,
}

impl Answered {
    pub fn new(cap: usize) -> Answered {
        Answered {
            cap,
            kept: Mutex::new((HashMap::new(), VecDeque::new())),
        }
    }

    /// What a call of identity `key` was answered, if it was.
    pub fn get(&self, key: &str) -> Option<CallToolResult> {
        self.kept.lock().ok()?.0.get(key).cloned()
    }

    /// Remember the answer to the call of identity `key`.
    pub fn put(&self, key: String, result: &CallToolResult) {
        let Ok(mut kept) = self.kept.lock() else {
            return;
        };
        let (map, order) = &mut *kept;
        if map.insert(key.clone(), result.clone()).is_none() {
            order.push_back(key);
        }
        while order.len() > self.cap {
            if let Some(old) = order.pop_front() {
                map.remove(&old);
            }
        }
    }
}

/// The identity of a tool call for retries: the caller and run it is for,
/// then the client's idempotency key if it gave one, else the JSON-RPC
/// id within its session. `None` when neither ties a retry to it.
pub fn call_identity(
    who: &str,
    run: &str,
    session: Option<&str>,
    id: &rmcp::model::RequestId,
    meta: Option<&rmcp::model::RequestMetaObject>,
) -> Option<String> {
    let key = meta
        .and_then(|m| m.0 .0.get(IDEMPOTENCY_KEY))
        .and_then(Value::as_str);
    match (key, session) {
        (Some(k), _) => Some(format!("{who}\u{0}{run}\u{0}key\u{0}{k}")),
        (None, Some(s)) => Some(format!("{who}\u{0}{run}\u{0}session\u{0}{s}\u{0}{id}")),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_kept_for_retries_are_bounded_oldest_first() {
        let kept = Answered::new(2);
        let r = |t: &str| CallToolResult::success(vec![ContentBlock::text(t.to_string())]);
        kept.put("a".into(), &r("1"));
        kept.put("b".into(), &r("2"));
        kept.put("a".into(), &r("1"));
        kept.put("c".into(), &r("3"));
        assert!(kept.get("a").is_none(), "the oldest is forgotten");
        assert!(kept.get("b").is_some() && kept.get("c").is_some());
    }

    #[test]
    fn a_call_without_a_session_or_key_has_no_identity() {
        let id = rmcp::model::RequestId::Number(7);
        assert_eq!(call_identity("agent:a", "r", None, &id, None), None);
        let s = call_identity("agent:a", "r", Some("s1"), &id, None).unwrap();
        let other = call_identity("agent:b", "r", Some("s1"), &id, None).unwrap();
        assert_ne!(s, other, "another caller's call is another call");
    }
}
