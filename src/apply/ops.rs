//! One typed request per operation, parsed strictly (unknown fields are an
//! error, so a typo is never silently ignored), and its answer.

use crate::engine::{CloseRun, Engine, PublishAgent};
use crate::error::LedgerError;
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
    pub fn code(&self) -> &'static str {
        match self {
            OpError::BadRequest(_) => "invalid_request",
            OpError::UnknownOp(_) => "unknown_op",
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
    #[serde(default)]
    artifacts: BTreeMap<String, String>,
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
    content: String,
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
    run: Option<String>,
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
    run: Option<String>,
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

pub fn artifact_json(a: &ArtifactRef) -> Value {
    json!({"name": a.name, "ref": a.content_ref(), "digest": a.digest(), "size": a.size,
           "source_run": a.source_run, "labels": a.labels})
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

fn decide_value(engine: &mut Engine, v: &Value) -> Result<Value, OpError> {
    let Some(obj) = v.as_object() else {
        return Err(OpError::BadRequest(
            "a line must be a JSON object with an \"op\" field".into(),
        ));
    };
    let op = match obj.get("op") {
        Some(Value::String(s)) => s.as_str(),
        Some(other) => {
            return Err(OpError::BadRequest(format!(
                "\"op\" must be a string, not {other}"
            )))
        }
        None => return Err(OpError::BadRequest("missing field `op`".into())),
    };
    // Another instance may have written since: decide on views at most
    // `max_staleness` old. An entity we do not know of may be what we have
    // not seen yet, so such a refusal is decided again on caught-up views
    // (these refusals record nothing, so deciding twice is harmless).
    let fresh = engine.refresh()?;
    match apply_op(engine, op, v) {
        Err(e) if !fresh && matches!(e.code(), "unknown_agent" | "unknown_run") => {
            engine.catch_up(&|_| {})?;
            apply_op(engine, op, v)
        }
        answer => answer,
    }
}

fn apply_op(engine: &mut Engine, op: &str, v: &Value) -> Result<Value, OpError> {
    match op {
        "publish_agent" => {
            let r: PublishIn = parse(op, v)?;
            let a = engine.publish_agent(PublishAgent {
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
            })?;
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
        "open_run" => {
            let r: OpenIn = parse(op, v)?;
            let a = engine.open_run(&r.run, &r.agent, r.legacy_trigger.as_deref())?;
            Ok(
                json!({"ok": true, "run": a.run, "root": a.root, "hop": a.hop, "version": a.version}),
            )
        }
        "read_artifact" => {
            let r: ReadIn = parse(op, v)?;
            let a = engine.read_artifact(&r.run, &r.name)?;
            Ok(
                json!({"ok": true, "content": a.content, "digest": a.artifact.digest(),
                      "labels": a.artifact.labels, "source_run": a.artifact.source_run}),
            )
        }
        "close_run" => {
            let r: CloseIn = parse(op, v)?;
            let status = RunStatus::parse(&r.status).ok_or_else(|| {
                OpError::BadRequest(format!(
                    "close_run: status {:?} is not one of succeeded, failed, cancelled",
                    r.status
                ))
            })?;
            let a = engine.close_run(CloseRun {
                run: r.run,
                status,
                summary: r.summary,
                artifacts: r.artifacts,
                labels: r.labels,
            })?;
            Ok(
                json!({"ok": true, "run": a.run, "withheld": withheld_json(&a.withheld),
                      "artifacts": a.artifacts.iter().map(artifact_json).collect::<Vec<_>>()}),
            )
        }
        "dispatch" => {
            let _: DispatchIn = parse(op, v)?;
            let a = engine.dispatch()?;
            Ok(json!({
                "ok": true,
                "opened": a.opened.iter().map(|o| json!({"run": o.run, "agent": o.agent, "root": o.root,
                    "hop": o.hop, "event": o.event, "event_id": o.event_id, "source_run": o.source_run})).collect::<Vec<_>>(),
                "refused": a.refused.iter().map(|r| json!({"agent": r.agent, "event": r.event,
                    "source_run": r.source_run, "reason": r.reason.code()})).collect::<Vec<_>>(),
                "withheld": a.withheld.iter().map(|w| json!({"run": w.run, "root": w.root, "hop": w.hop,
                    "reason": w.reason, "events": w.events})).collect::<Vec<_>>(),
            }))
        }
        "open_task" => {
            let r: OpenTaskIn = parse(op, v)?;
            engine.open_task(&r.task, &r.run, &r.task_context)?;
            Ok(json!({"ok": true, "task": r.task, "master_run": r.run}))
        }
        "update_task" => {
            let r: UpdateTaskIn = parse(op, v)?;
            engine.update_task(&r.task, &r.run, &r.task_context)?;
            Ok(json!({"ok": true, "task": r.task}))
        }
        "put_blob" => {
            let r: PutBlobIn = parse(op, v)?;
            let (uri, digest, size) =
                engine.put_blob(&r.task, r.content.as_bytes(), &r.media_type, r.ttl_s)?;
            Ok(json!({"ok": true, "uri": uri, "digest": digest, "size": size}))
        }
        "send_context" => {
            let r: SendIn = parse(op, v)?;
            let a = engine.send_context(&r.task, r.run.as_deref(), r.mode, &r.agent_context)?;
            Ok(json!({"ok": true, "subtask": a.subtask, "agent": a.agent,
                      "inline_bytes": a.accounting.inline_bytes, "referenced_bytes": a.accounting.referenced_bytes,
                      "est_tokens_saved": a.accounting.est_tokens_saved}))
        }
        "get_context" => {
            let r: AgentIn = parse(op, v)?;
            let (subtask, ctx) = engine.get_context(&r.task, &r.agent)?;
            Ok(json!({"ok": true, "subtask": subtask, "agent_context": ctx}))
        }
        "get_blob" => {
            let r: GetBlobIn = parse(op, v)?;
            let (bytes, digest) = engine.get_blob(&r.task, &r.agent, &r.uri)?;
            Ok(json!({"ok": true, "content": String::from_utf8_lossy(&bytes), "digest": digest}))
        }
        "return_context" => {
            let r: ReturnIn = parse(op, v)?;
            let (subtask, layer1) = engine.return_context(&r.task, &r.agent, &r.agent_context)?;
            Ok(
                json!({"ok": true, "subtask": subtask, "layer1": {"passed": layer1.passed, "reasons": layer1.reasons}}),
            )
        }
        "evaluate" => {
            let r: EvaluateIn = parse(op, v)?;
            engine.evaluate(&r.task, r.run.as_deref(), &r.subtask, r.decision, &r.reason)?;
            Ok(json!({"ok": true, "task": r.task, "subtask": r.subtask, "decision": r.decision}))
        }
        other => Err(OpError::UnknownOp(other.to_string())),
    }
}
