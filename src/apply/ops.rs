//! One typed request per operation, parsed strictly (unknown fields are an
//! error, so a typo is never silently ignored), and its answer.

use crate::engine::{CloseRun, Engine, PublishAgent};
use crate::error::{Code, LedgerError};
use crate::model::*;
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error("{0}")]
    BadRequest(String),
    #[error("unknown op {0:?}; expected one of publish_agent, open_run, read_artifact, close_run, dispatch, open_task, update_task, put_blob, send_context, get_context, get_blob, return_context, evaluate")]
    UnknownOp(String),
    #[error("{0}")]
    Ledger(#[from] LedgerError),
}

impl OpError {
    pub fn code(&self) -> Code {
        match self {
            OpError::BadRequest(_) => Code::InvalidRequest,
            OpError::UnknownOp(_) => Code::UnknownOp,
            OpError::Ledger(e) => e.code(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EmitIn {
    event: String,
    context: String,
    #[serde(default)]
    artifacts: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PublishIn {
    #[allow(dead_code)]
    op: String,
    agent: String,
    scope: String,
    #[serde(default)]
    listens: Vec<String>,
    #[serde(default)]
    emits: Vec<EmitIn>,
    access: Option<Vec<String>>,
    tool_budget: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenIn {
    #[allow(dead_code)]
    op: String,
    run: String,
    agent: String,
    legacy_trigger: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadIn {
    #[allow(dead_code)]
    op: String,
    run: String,
    name: String,
    /// Answer `content_b64` even when the bytes are text.
    #[serde(default)]
    base64: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CloseIn {
    #[allow(dead_code)]
    op: String,
    run: String,
    status: String,
    #[serde(default)]
    summary: String,
    /// name → text, or `{"content_b64": "…"}` for bytes that are not text.
    #[serde(default)]
    artifacts: BTreeMap<String, Value>,
    #[serde(default)]
    labels: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DispatchIn {
    #[allow(dead_code)]
    op: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OpenTaskIn {
    #[allow(dead_code)]
    op: String,
    task: String,
    run: String,
    task_context: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutBlobIn {
    #[allow(dead_code)]
    op: String,
    task: String,
    /// Text content; or `content_b64` for bytes (exactly one of the two).
    content: Option<String>,
    content_b64: Option<String>,
    #[serde(default = "default_media_type")]
    media_type: String,
    #[serde(default = "default_ttl")]
    ttl_s: u64,
}

fn default_media_type() -> String {
    "text/plain".into()
}

fn default_ttl() -> u64 {
    24 * 3600
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendIn {
    #[allow(dead_code)]
    op: String,
    task: String,
    mode: crate::context::Mode,
    agent_context: Value,
    /// The master run: only it invokes agents.
    run: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentIn {
    #[allow(dead_code)]
    op: String,
    task: String,
    agent: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetBlobIn {
    #[allow(dead_code)]
    op: String,
    task: String,
    agent: String,
    uri: String,
    /// Answer `content_b64` even when the bytes are text.
    #[serde(default)]
    base64: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReturnIn {
    #[allow(dead_code)]
    op: String,
    task: String,
    agent: String,
    agent_context: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EvaluateIn {
    #[allow(dead_code)]
    op: String,
    task: String,
    subtask: String,
    decision: crate::context::Outcome,
    #[serde(default)]
    reason: String,
    /// The master run: only it decides.
    run: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UpdateTaskIn {
    #[allow(dead_code)]
    op: String,
    task: String,
    run: String,
    task_context: Value,
}

/// Content sent as text (`content`) or as base64 (`content_b64`, for bytes
/// that are not UTF-8: images, audio): exactly one of the two.
fn content_bytes(
    what: &str,
    text: Option<String>,
    b64: Option<String>,
) -> Result<Vec<u8>, OpError> {
    use base64::Engine as _;
    match (text, b64) {
        (Some(t), None) => Ok(t.into_bytes()),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.as_bytes())
            .map_err(|e| OpError::BadRequest(format!("{what}: content_b64 is not base64: {e}"))),
        (Some(_), Some(_)) => Err(OpError::BadRequest(format!(
            "{what}: give content or content_b64, not both"
        ))),
        (None, None) => Err(OpError::BadRequest(format!(
            "{what}: missing content (text) or content_b64 (base64 bytes)"
        ))),
    }
}

/// An artifact's content in `close_run`: a string of text, or an object
/// with `content` or `content_b64`.
fn artifact_bytes(name: &str, v: Value) -> Result<Vec<u8>, OpError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Bytes {
        content: Option<String>,
        content_b64: Option<String>,
    }
    let what = format!("close_run: artifact {name:?}");
    match v {
        Value::String(s) => Ok(s.into_bytes()),
        v @ Value::Object(_) => {
            let b: Bytes = serde_json::from_value(v).map_err(|e| {
                OpError::BadRequest(format!(
                    "{what}: {e} (expected text, or {{\"content_b64\": \"…\"}})"
                ))
            })?;
            content_bytes(&what, b.content, b.content_b64)
        }
        other => Err(OpError::BadRequest(format!(
            "{what}: expected text or {{\"content_b64\": \"…\"}}, not {}",
            json_kind(&other)
        ))),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Bytes in an answer: `content` when they are text (unless base64 was
/// asked for), else `content_b64`; never a lossy rendering.
fn put_content(answer: &mut Value, bytes: Vec<u8>, force_b64: bool) {
    use base64::Engine as _;
    match String::from_utf8(bytes) {
        Ok(text) if !force_b64 => answer["content"] = json!(text),
        Ok(text) => {
            answer["content_b64"] =
                json!(base64::engine::general_purpose::STANDARD.encode(text.as_bytes()))
        }
        Err(e) => {
            answer["content_b64"] =
                json!(base64::engine::general_purpose::STANDARD.encode(e.as_bytes()))
        }
    }
}

fn parse<T: serde::de::DeserializeOwned>(op: &str, v: &Value) -> Result<T, OpError> {
    serde_json::from_value(v.clone()).map_err(|e| OpError::BadRequest(format!("{op}: {e}")))
}

pub fn loop_check_json(c: &LoopCheck) -> Value {
    json!({
        "warnings": c.warnings.iter().map(|w| {
            let mut o = json!({"loop": w.loop_agents, "text": w.text});
            if let Some(n) = &w.note { o["note"] = json!(n); }
            o
        }).collect::<Vec<_>>(),
        "may_be_more": c.may_be_more,
        "checked_in_full": c.checked_in_full,
    })
}

pub fn withheld_json(w: &Option<Withheld>) -> Value {
    match w {
        None => Value::Null,
        Some(w) => {
            let mut o = json!({"reason": w.reason.code(), "events": w.events});
            match &w.reason {
                WithheldReason::HopLimit { root, limit } => {
                    o["root"] = json!(root);
                    o["limit"] = json!(limit);
                }
                WithheldReason::NotSucceeded { status } => o["status"] = json!(status.as_str()),
                WithheldReason::ChainUnknown => {}
            }
            o
        }
    }
}

/// What a listener is started with (R8): the event and the artifacts its
/// contract exposes, never their bytes. Every exposed artifact comes from
/// the source run's close and carries its labels, which are listed once.
pub fn listener_input_json(t: &Trigger) -> Value {
    let labels = crate::rules::labels::union(
        &t.artifacts
            .iter()
            .map(|a| a.labels.as_slice())
            .collect::<Vec<_>>(),
    );
    json!({
        "event": t.event, "event_id": t.event_id, "context": t.context, "source_run": t.source_run,
        "labels": labels,
        "artifacts": t.artifacts.iter().map(crate::report::artifact_json).collect::<Vec<_>>(),
    })
}

/// Apply one parsed line. An ok answer says under `follow_up_failed` what
/// failed after the operation's records were durable (it happened; those
/// follow-ups are retried).
pub fn apply_value(engine: &mut Engine, v: &Value) -> Result<Value, OpError> {
    let answer = decide_value(engine, v);
    let follow_ups = engine.take_follow_ups();
    answer.map(|mut a| {
        if !follow_ups.is_empty() {
            a["follow_up_failed"] = json!(follow_ups);
        }
        a
    })
}

/// One line's operation, parsed and checked for shape: everything a line
/// can get wrong before the ledger is asked anything.
pub struct Request(Parsed);

enum Parsed {
    Publish(PublishAgent),
    Open(OpenIn),
    Read(ReadIn),
    Close(CloseRun),
    Dispatch,
    OpenTask(OpenTaskIn),
    UpdateTask(UpdateTaskIn),
    PutBlob {
        task: String,
        content: Vec<u8>,
        media_type: String,
        ttl_s: u64,
    },
    Send(SendIn),
    GetContext(AgentIn),
    GetBlob(GetBlobIn),
    Return(ReturnIn),
    Evaluate(EvaluateIn),
}

impl Request {
    /// Operations that name an agent or a run another writer may have
    /// created meanwhile (see `decide_value`).
    fn may_name_the_unseen(&self) -> bool {
        !matches!(self.0, Parsed::Dispatch)
    }
}

/// Parse a line's JSON into its operation: `invalid_request` or
/// `unknown_op` for anything of the wrong shape, naming what is wrong.
pub fn parse_request(v: &Value) -> Result<Request, OpError> {
    let Some(obj) = v.as_object() else {
        return Err(OpError::BadRequest(
            "a line must be a JSON object with an \"op\" field".into(),
        ));
    };
    let op = match obj.get("op") {
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(OpError::BadRequest(format!(
                "\"op\" must be a string, not {}",
                json_kind(other)
            )))
        }
        None => return Err(OpError::BadRequest("missing field `op`".into())),
    };
    let parsed = match op {
        "publish_agent" => {
            let r: PublishIn = parse(op, v)?;
            Parsed::Publish(PublishAgent {
                agent: r.agent,
                scope: r.scope,
                listens: r.listens,
                emits: r
                    .emits
                    .into_iter()
                    .map(|e| EmitDecl {
                        event: e.event,
                        context: e.context,
                        artifacts: e.artifacts,
                    })
                    .collect(),
                access: r.access,
                tool_budget: r.tool_budget,
            })
        }
        "open_run" => Parsed::Open(parse(op, v)?),
        "read_artifact" => Parsed::Read(parse(op, v)?),
        "close_run" => {
            let r: CloseIn = parse(op, v)?;
            let status = RunStatus::parse(&r.status).ok_or_else(|| {
                OpError::BadRequest(format!(
                    "close_run: status {:?} is not one of succeeded, failed, cancelled",
                    r.status.chars().take(100).collect::<String>()
                ))
            })?;
            let artifacts = r
                .artifacts
                .into_iter()
                .map(|(name, v)| Ok((name.clone(), artifact_bytes(&name, v)?)))
                .collect::<Result<_, OpError>>()?;
            Parsed::Close(CloseRun {
                run: r.run,
                status,
                summary: r.summary,
                artifacts,
                labels: r.labels,
            })
        }
        "dispatch" => {
            let _: DispatchIn = parse(op, v)?;
            Parsed::Dispatch
        }
        "open_task" => Parsed::OpenTask(parse(op, v)?),
        "update_task" => Parsed::UpdateTask(parse(op, v)?),
        "put_blob" => {
            let r: PutBlobIn = parse(op, v)?;
            Parsed::PutBlob {
                content: content_bytes("put_blob", r.content, r.content_b64)?,
                task: r.task,
                media_type: r.media_type,
                ttl_s: r.ttl_s,
            }
        }
        "send_context" => Parsed::Send(parse(op, v)?),
        "get_context" => Parsed::GetContext(parse(op, v)?),
        "get_blob" => Parsed::GetBlob(parse(op, v)?),
        "return_context" => Parsed::Return(parse(op, v)?),
        "evaluate" => Parsed::Evaluate(parse(op, v)?),
        other => {
            return Err(OpError::UnknownOp(other.chars().take(100).collect()));
        }
    };
    Ok(Request(parsed))
}

fn decide_value(engine: &mut Engine, v: &Value) -> Result<Value, OpError> {
    let request = parse_request(v)?;
    // Another instance may have written since: decide on views at most
    // `max_staleness` old. An entity we do not know of may be what we have
    // not seen yet, so such a refusal is decided again on caught-up views
    // (these refusals record nothing, so deciding twice is harmless).
    let fresh = engine.refresh()?;
    match apply_request(engine, &request) {
        Err(e)
            if !fresh
                && request.may_name_the_unseen()
                && matches!(e.code(), Code::UnknownAgent | Code::UnknownRun) =>
        {
            engine.catch_up(&|_| {})?;
            apply_request(engine, &request)
        }
        answer => answer,
    }
}

/// Apply a parsed operation and answer it.
pub fn apply_request(engine: &mut Engine, request: &Request) -> Result<Value, OpError> {
    match &request.0 {
        Parsed::Publish(req) => {
            let a = engine.publish_agent(req.clone())?;
            let mut out = json!({"ok": true, "agent": a.agent, "version": a.version});
            let lc = loop_check_json(&a.loop_check);
            for k in ["warnings", "may_be_more", "checked_in_full"] {
                out[k] = lc[k].clone();
            }
            if let Some(t) = &a.loop_check.text {
                out["text"] = json!(t);
            }
            Ok(out)
        }
        Parsed::Open(r) => {
            let a = engine.open_run(&r.run, &r.agent, r.legacy_trigger.as_deref())?;
            Ok(
                json!({"ok": true, "run": a.run, "root": a.root, "hop": a.hop, "version": a.version}),
            )
        }
        Parsed::Read(r) => {
            let a = engine.read_artifact(&r.run, &r.name)?;
            let mut out = json!({"ok": true, "digest": a.artifact.digest(),
                      "labels": a.artifact.labels, "source_run": a.artifact.source_run});
            put_content(&mut out, a.content, r.base64);
            Ok(out)
        }
        Parsed::Close(req) => {
            let a = engine.close_run(req.clone())?;
            // Every artifact carries the run's labels: said once.
            Ok(
                json!({"ok": true, "run": a.run, "withheld": withheld_json(&a.withheld),
                      "labels": a.labels,
                      "artifacts": a.artifacts.iter().map(crate::report::artifact_json)
                          .collect::<Vec<_>>()}),
            )
        }
        Parsed::Dispatch => {
            let a = engine.dispatch()?;
            Ok(json!({
                "ok": true,
                "opened": a.opened.iter().map(|o| json!({"run": o.run, "agent": o.agent, "root": o.root,
                    "hop": o.hop, "event": o.event, "event_id": o.event_id, "source_run": o.source_run,
                    "input": listener_input_json(&o.input)})).collect::<Vec<_>>(),
                "refused": a.refused.iter().map(|r| json!({"agent": r.agent, "event": r.event,
                    "source_run": r.source_run, "reason": r.reason.code()})).collect::<Vec<_>>(),
                "withheld": a.withheld.iter().map(|w| json!({"run": w.run, "root": w.root, "hop": w.hop,
                    "reason": w.reason, "events": w.events})).collect::<Vec<_>>(),
            }))
        }
        Parsed::OpenTask(r) => {
            engine.open_task(&r.task, &r.run, &r.task_context)?;
            Ok(json!({"ok": true, "task": r.task, "master_run": r.run}))
        }
        Parsed::UpdateTask(r) => {
            engine.update_task(&r.task, &r.run, &r.task_context)?;
            Ok(json!({"ok": true, "task": r.task}))
        }
        Parsed::PutBlob {
            task,
            content,
            media_type,
            ttl_s,
        } => {
            let (uri, digest, size) = engine.put_blob(task, content, media_type, *ttl_s)?;
            Ok(json!({"ok": true, "uri": uri, "digest": digest, "size": size}))
        }
        Parsed::Send(r) => {
            let a = engine.send_context(&r.task, &r.run, r.mode, &r.agent_context)?;
            Ok(json!({"ok": true, "subtask": a.subtask, "agent": a.agent,
                      "inline_bytes": a.accounting.inline_bytes, "referenced_bytes": a.accounting.referenced_bytes,
                      "est_tokens_saved": a.accounting.est_tokens_saved}))
        }
        Parsed::GetContext(r) => {
            let (subtask, ctx) = engine.get_context(&r.task, &r.agent)?;
            Ok(json!({"ok": true, "subtask": subtask, "agent_context": ctx}))
        }
        Parsed::GetBlob(r) => {
            let (bytes, digest) = engine.get_blob(&r.task, &r.agent, &r.uri)?;
            let mut out = json!({"ok": true, "digest": digest});
            put_content(&mut out, bytes, r.base64);
            Ok(out)
        }
        Parsed::Return(r) => {
            let (subtask, layer1) = engine.return_context(&r.task, &r.agent, &r.agent_context)?;
            Ok(
                json!({"ok": true, "subtask": subtask, "layer1": {"passed": layer1.passed, "reasons": layer1.reasons}}),
            )
        }
        Parsed::Evaluate(r) => {
            engine.evaluate(&r.task, &r.run, &r.subtask, r.decision, &r.reason)?;
            Ok(json!({"ok": true, "task": r.task, "subtask": r.subtask, "decision": r.decision}))
        }
    }
}
