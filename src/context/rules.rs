//! The decide half of the context rules (R11–R15): each function checks one
//! request against a [`TaskState`] and either refuses it with a
//! [`ContextError`] or returns the single [`ContextEvent`] to record.
//!
//! No function here does IO or reads a clock: time comes in as `now`, blob
//! bytes are hashed by the caller or passed in. The engine records a refusal
//! as [`ContextEvent::refused`].

use std::collections::BTreeSet;

use serde_json::Value;

use super::compression::parse_field_path;
use super::error::{ContextError, ContextKind};
use super::evaluation::{layer_one, Resolve};
use super::schema::{validate_agent_context, validate_task_context};
use super::state::{ContextEvent, Decision, Mode, Outcome, Subtask, TaskState};
use super::types::AgentContext;
use super::uri::{check_blob_read, parse_context_uri, ContextUri};
use super::UnixMillis;

/// A task whose master run is closed takes no more operations
/// (`run_closed`); `master_open` says whether it is still open.
pub fn require_open_master(state: &TaskState, master_open: bool) -> Result<(), ContextError> {
    if master_open {
        Ok(())
    } else {
        Err(ContextError::RunClosed {
            run: state.master_run.clone(),
        })
    }
}

/// Only the master run invokes agents and decides on their results (R11):
/// `run` is the caller's claim to be it.
fn require_master(state: &TaskState, run: &str) -> Result<(), ContextError> {
    if run == state.master_run {
        Ok(())
    } else {
        Err(ContextError::NotMaster {
            run: run.to_owned(),
            master: state.master_run.clone(),
        })
    }
}

/// When the references of a context are checked.
#[derive(Clone, Copy)]
enum Checked {
    /// The master sends it: every reference is live and says the media
    /// type its content was stored as (the agent could use it otherwise).
    AtSend(UnixMillis),
    /// The agent returns it: every reference names content of the task; a
    /// changed MediaType is the compression rules' to judge (R14), and a
    /// reference past its TTL may come back, it was live when sent.
    AtReturn,
}

/// R15: every ContextURI of a context names content put in this task.
fn check_references(
    state: &TaskState,
    ctx: &AgentContext,
    when: Checked,
) -> Result<(), ContextError> {
    for (i, item) in ctx.context_items.iter().enumerate() {
        let at = format!("/ContextItems/{i}/ContextURI");
        let meta = state
            .blobs
            .get(&item.context_uri)
            .ok_or_else(|| ContextError::UnknownBlob {
                uri: format!("{} (at {at})", item.context_uri),
            })?;
        let Checked::AtSend(now) = when else {
            continue;
        };
        if now >= meta.expires_at {
            return Err(ContextError::Expired {
                uri: format!("{} (at {at})", item.context_uri),
                expired_at: meta.expires_at,
            });
        }
        if media_essence(&item.media_type) != media_essence(&meta.media_type) {
            return Err(ContextError::MediaTypeMismatch {
                uri: item.context_uri.clone(),
                at: format!("/ContextItems/{i}/MediaType"),
                referenced: item.media_type.chars().take(100).collect(),
                stored: meta.media_type.clone(),
            });
        }
    }
    Ok(())
}

/// `type/subtype` of a media type, lowercased, without parameters:
/// `Text/Plain; charset=utf-8` is `text/plain`.
fn media_essence(media_type: &str) -> String {
    media_type
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// A task holds at most `limits::MAX_TASK_CONTEXT_BYTES` of contexts.
fn check_budget(state: &TaskState, ctx: &AgentContext) -> Result<(), ContextError> {
    let limit = crate::model::limits::MAX_TASK_CONTEXT_BYTES;
    let bytes = state.context_bytes + super::state::context_size(ctx);
    if bytes > limit {
        return Err(ContextError::ContextBudget {
            task: state.task.clone(),
            bytes,
            limit,
        });
    }
    Ok(())
}

/// Open a task for `master_run` with its TaskContext (validated).
/// `existing` is the state already recorded under `task`, if any: a task is
/// opened once (`task_exists`), after which only `update_task` changes it.
pub fn decide_open(
    existing: Option<&TaskState>,
    task: &str,
    master_run: &str,
    task_context: &Value,
    now: UnixMillis,
) -> Result<ContextEvent, ContextError> {
    if let Some(state) = existing {
        return Err(ContextError::TaskExists {
            task: task.to_owned(),
            master: state.master_run.clone(),
        });
    }
    let task_context = validate_task_context(task_context)?;
    Ok(ContextEvent::TaskOpened {
        task: task.to_owned(),
        master_run: master_run.to_owned(),
        task_context,
        at: now,
    })
}

/// R11: replace the TaskContext. Only the master run may (checked before
/// the document is even looked at), and the TaskID may not change.
pub fn decide_update_task(
    state: &TaskState,
    run: &str,
    task_context: &Value,
    now: UnixMillis,
) -> Result<ContextEvent, ContextError> {
    require_master(state, run)?;
    let task_context = validate_task_context(task_context)?;
    if task_context.task_id != state.task_context.task_id {
        return Err(ContextError::invalid(
            ContextKind::TaskContext,
            "/TaskID",
            format!(
                "the TaskID of an open task cannot change (was {:?})",
                state.task_context.task_id
            ),
        ));
    }
    Ok(ContextEvent::TaskUpdated {
        task: state.task.clone(),
        run: run.to_owned(),
        task_context,
        at: now,
    })
}

/// Checks shared by sent and returned contexts that JSON Schema cannot
/// express: unique ContextIDs (R14 matches items by them) and well-formed
/// `cas://` references (R15).
fn check_items(ctx: &AgentContext) -> Result<(), ContextError> {
    let mut ids = BTreeSet::new();
    for (i, item) in ctx.context_items.iter().enumerate() {
        if !ids.insert(item.context_id.as_str()) {
            return Err(ContextError::invalid(
                ContextKind::AgentContext,
                &format!("/ContextItems/{i}/ContextID"),
                format!(
                    "duplicate ContextID {:?}; items are matched by it",
                    item.context_id
                ),
            ));
        }
        if let Err(ContextError::BadUri { uri, reason }) = parse_context_uri(&item.context_uri) {
            return Err(ContextError::BadUri {
                uri,
                reason: format!("{reason} (at /ContextItems/{i}/ContextURI)"),
            });
        }
    }
    Ok(())
}

/// What a dependency still waits for, if anything: it is met when the
/// latest subtask with that SubTaskID (or, when no subtask has it, the
/// latest subtask of an agent by that name) was returned and accepted.
fn dependency_wait(state: &TaskState, dep: &str) -> Option<String> {
    let latest = state
        .subtasks
        .iter()
        .rev()
        .find(|s| s.sent.sub_task_id == dep)
        .or_else(|| state.subtasks.iter().rev().find(|s| s.agent == dep));
    let Some(s) = latest else {
        return Some("no subtask with that SubTaskID (or agent) has been sent".to_owned());
    };
    match (&s.returned, &s.decision) {
        (None, _) => Some(format!("{} is still outstanding", s.id)),
        (Some(_), None) => Some(format!("{} is returned but not yet accepted", s.id)),
        (Some(_), Some(d)) if d.outcome == Outcome::Rejected => {
            Some(format!("{} was rejected", s.id))
        }
        (Some(_), Some(_)) => None,
    }
}

/// R11/R12: the master run `run` delivers one agent's AgentContext as a
/// new subtask.
///
/// Refusals, in order: `not_master`, `invalid_context` (schema; empty
/// AgentName; duplicate ContextID; unreadable MustPreserveFields path),
/// `bad_uri`, `unknown_blob` / `expired` / `media_type_mismatch` (R15: a
/// reference to content not put in this task, past its TTL, or stored as
/// another media type), `subtask_outstanding` (sync: anything outstanding;
/// async: a sync subtask outstanding), `duplicate_subtask` (SubTaskID
/// already outstanding), `dependency_pending` (in both modes).
pub fn decide_send(
    state: &TaskState,
    run: &str,
    mode: Mode,
    agent_context: &Value,
    now: UnixMillis,
) -> Result<ContextEvent, ContextError> {
    require_master(state, run)?;
    let ctx = validate_agent_context(agent_context)?;
    // The schema admits "" (the draft's placeholders), but a subtask must be
    // bound to an agent for isolation to mean anything.
    if ctx.agent_name.is_empty() {
        return Err(ContextError::invalid(
            ContextKind::AgentContext,
            "/AgentName",
            "must name the invoked agent",
        ));
    }
    check_items(&ctx)?;
    check_references(state, &ctx, Checked::AtSend(now))?;
    check_budget(state, &ctx)?;
    if let Some(policy) = &ctx.compression_policy {
        for (i, path) in policy.must_preserve_fields.iter().enumerate() {
            parse_field_path(path).map_err(|e| {
                ContextError::invalid(
                    ContextKind::AgentContext,
                    &format!("/CompressionPolicy/MustPreserveFields/{i}"),
                    e.to_string(),
                )
            })?;
        }
    }
    let blocking = state
        .subtasks
        .iter()
        .find(|s| s.is_outstanding() && (mode == Mode::Sync || s.mode == Mode::Sync));
    if let Some(s) = blocking {
        return Err(ContextError::SubtaskOutstanding {
            outstanding: s.id.clone(),
            agent: s.agent.clone(),
        });
    }
    if let Some(s) = state
        .subtasks
        .iter()
        .find(|s| s.is_outstanding() && s.sent.sub_task_id == ctx.sub_task_id)
    {
        return Err(ContextError::DuplicateSubtask {
            sub_task_id: ctx.sub_task_id.clone(),
            outstanding: s.id.clone(),
        });
    }
    for dep in &ctx.dependencies {
        if let Some(status) = dependency_wait(state, dep) {
            return Err(ContextError::DependencyPending {
                dependency: dep.clone(),
                status,
            });
        }
    }
    Ok(ContextEvent::ContextSent {
        task: state.task.clone(),
        subtask: format!("s{}", state.subtasks.len() + 1),
        agent: ctx.agent_name.clone(),
        mode,
        context: ctx,
        at: now,
    })
}

/// R11: the calling agent's own current context — the latest outstanding
/// subtask's sent context, else the latest returned one. An agent with no
/// subtask in the task has no context here (`not_your_context`).
pub fn get_context<'a>(
    state: &'a TaskState,
    agent: &str,
) -> Result<(&'a Subtask, &'a AgentContext), ContextError> {
    let own = || state.subtasks.iter().rev().filter(|s| s.agent == agent);
    if let Some(s) = own().find(|s| s.is_outstanding()) {
        return Ok((s, &s.sent));
    }
    own()
        .find_map(|s| s.returned.as_ref().map(|r| (s, r)))
        .ok_or_else(|| ContextError::NotYourContext {
            agent: agent.to_owned(),
            detail: "no subtask of this task was sent to it".to_owned(),
        })
}

/// R11/R13/R14: the agent returns its updated context; layer one is computed
/// against what was sent.
///
/// The subtask is the calling agent's outstanding one with the context's
/// SubTaskID. Refusals: `invalid_context`; `not_your_context` (the context
/// names another AgentName, the agent has nothing outstanding, the SubTaskID
/// is not one of the agent's subtasks, or the AgentID differs from the one
/// sent); `already_returned`; `bad_uri` (and `invalid_context` for duplicate
/// ContextIDs); `unknown_blob` for a ContextItem naming content not put in
/// the task. `resolve` answers for the ContextURIs the
/// EvaluationResult cites (see [`layer_one`]).
pub fn decide_return(
    state: &TaskState,
    agent: &str,
    agent_context: &Value,
    resolve: Resolve<'_>,
    now: UnixMillis,
) -> Result<ContextEvent, ContextError> {
    let ctx = validate_agent_context(agent_context)?;
    let not_yours = |detail: String| ContextError::NotYourContext {
        agent: agent.to_owned(),
        detail,
    };
    if ctx.agent_name != agent {
        return Err(not_yours(format!(
            "the context belongs to agent {:?}",
            ctx.agent_name
        )));
    }
    let mine = || state.subtasks.iter().rev().filter(|s| s.agent == agent);
    let same_id = |s: &&Subtask| s.sent.sub_task_id == ctx.sub_task_id;
    let subtask = match mine().filter(same_id).find(|s| s.is_outstanding()) {
        Some(s) => s,
        None => {
            if let Some(done) = mine().find(same_id) {
                return Err(ContextError::AlreadyReturned {
                    subtask: done.id.clone(),
                });
            }
            if !mine().any(Subtask::is_outstanding) {
                return Err(not_yours("it has no outstanding subtask".to_owned()));
            }
            // Whether the SubTaskID is another agent's or exists nowhere, the
            // answer is the same, so that it cannot be used to probe other
            // agents' subtasks.
            return Err(not_yours(format!(
                "SubTaskID {:?} is not a subtask sent to it",
                ctx.sub_task_id
            )));
        }
    };
    if ctx.agent_id != subtask.sent.agent_id {
        return Err(not_yours(format!(
            "AgentID {:?} is not the AgentID {:?} the context was sent with",
            ctx.agent_id, subtask.sent.agent_id
        )));
    }
    check_items(&ctx)?;
    check_references(state, &ctx, Checked::AtReturn)?;
    check_budget(state, &ctx)?;
    let layer1 = layer_one(&subtask.sent, &ctx, resolve);
    Ok(ContextEvent::ContextReturned {
        task: state.task.clone(),
        subtask: subtask.id.clone(),
        agent: agent.to_owned(),
        context: ctx,
        layer1,
        at: now,
    })
}

/// R13, layer two: the master's decision on a returned subtask. It may
/// overrule layer one either way — the draft leaves the final decision to the
/// master — and both layers stay in the trail.
pub fn decide_evaluate(
    state: &TaskState,
    run: &str,
    subtask: &str,
    outcome: Outcome,
    reason: &str,
    now: UnixMillis,
) -> Result<ContextEvent, ContextError> {
    require_master(state, run)?;
    let s = state
        .subtask(subtask)
        .ok_or_else(|| ContextError::UnknownSubtask {
            subtask: subtask.to_owned(),
        })?;
    if s.returned.is_none() {
        return Err(ContextError::NotReturned {
            subtask: s.id.clone(),
        });
    }
    if s.decision.is_some() {
        return Err(ContextError::AlreadyEvaluated {
            subtask: s.id.clone(),
        });
    }
    Ok(ContextEvent::Evaluated {
        task: state.task.clone(),
        subtask: s.id.clone(),
        decision: Decision {
            outcome,
            reason: reason.to_owned(),
        },
        at: now,
    })
}

/// R15: record content stored by reference. The caller writes the bytes to
/// the content store; the ledger keeps only the digest, size, media type and
/// expiry (`now + ttl_s`, saturating).
pub fn decide_put_blob(
    state: &TaskState,
    content: &[u8],
    media_type: &str,
    ttl_s: u64,
    now: UnixMillis,
) -> ContextEvent {
    let uri = ContextUri::for_content(content);
    ContextEvent::BlobPut {
        task: state.task.clone(),
        uri: uri.to_string(),
        digest: uri.digest(),
        size: u64::try_from(content.len()).unwrap_or(u64::MAX),
        media_type: media_type.to_owned(),
        expires_at: now.saturating_add(ttl_s.saturating_mul(1000)),
        at: now,
    }
}

/// R15: a read of referenced content by `reader` (an AgentName, or the master
/// run). `content_digest_actual` is the lowercase-hex sha256 of the bytes the
/// store returned (`None` when it returned none). See [`check_blob_read`].
pub fn decide_blob_read(
    state: &TaskState,
    reader: &str,
    uri: &str,
    content_digest_actual: Option<&str>,
    now: UnixMillis,
) -> Result<ContextEvent, ContextError> {
    let parsed = check_blob_read(
        uri,
        reader,
        &state.master_run,
        &state.grants,
        state.blobs.get(uri),
        now,
        content_digest_actual,
    )?;
    Ok(ContextEvent::BlobRead {
        task: state.task.clone(),
        reader: reader.to_owned(),
        uri: uri.to_owned(),
        digest: parsed.digest(),
        at: now,
    })
}
