//! From a request's JSON to its reply: parse into [`Request`], turn it into
//! the engine's command, carry it out, and type the answer. Every
//! transport (`apply`, HTTP, WebSocket) goes through [`reply`].

use super::answer::*;
use super::request::*;
use crate::auth::{authorize, Action, Grant, Principal};
use crate::codes::{Code, Refusal};
use crate::engine::{CloseRun, Engine, PublishAgent};
use crate::error::LedgerError;
use crate::model::RunStatus;
use serde_json::Value;

#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error("{0}")]
    BadRequest(String),
    #[error(transparent)]
    BadContent(#[from] super::request::BadContent),
    #[error("unknown op {0:?}; expected one of {ops}", ops = super::request::OPS.join(", "))]
    UnknownOp(String),
    #[error("{0}")]
    Ledger(#[from] LedgerError),
    #[error("{0}, not this one")]
    Elsewhere(Box<crate::engine::Referral>),
}

impl OpError {
    pub fn code(&self) -> Code {
        match self {
            OpError::BadRequest(_) | OpError::BadContent(_) => Code::InvalidRequest,
            OpError::UnknownOp(_) => Code::UnknownOp,
            OpError::Ledger(e) => e.code(),
            OpError::Elsewhere(_) => Code::NotOwner,
        }
    }

    /// A failure of the machine (IO, a corrupt log) rather than of the
    /// request: `apply` stops there, HTTP answers 503.
    pub fn is_machine(&self) -> bool {
        matches!(self, OpError::Ledger(le) if !le.is_refusal())
    }

    pub fn failure(&self) -> Failure {
        let mut f = Failure::new(self.code(), self.to_string());
        if let OpError::Elsewhere(r) = self {
            f.referral = Some(r.clone());
        }
        f
    }
}

/// Parse a request's JSON into its operation: `invalid_request` or
/// `unknown_op` for anything of the wrong shape, naming what is wrong.
pub fn parse_request(v: &Value) -> Result<Request, OpError> {
    let Some(obj) = v.as_object() else {
        return Err(OpError::BadRequest(
            "a request must be a JSON object with an \"op\" field".into(),
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
    if !OPS.contains(&op) {
        return Err(OpError::UnknownOp(op.chars().take(100).collect()));
    }
    serde_json::from_value(v.clone()).map_err(|e| OpError::BadRequest(format!("{op}: {e}")))
}

/// The engine's `publish_agent` command.
fn publish_command(r: &PublishAgentOp) -> PublishAgent {
    PublishAgent {
        agent: r.agent.clone(),
        scope: r.scope.clone(),
        listens: r.listens.clone(),
        emits: r.emits.iter().cloned().map(Into::into).collect(),
        access: r.access.clone(),
        tool_budget: r.tool_budget,
    }
}

/// The engine's `close_run` command: the status spelled right and every
/// artifact's bytes well formed.
fn close_command(r: &CloseRunOp) -> Result<CloseRun, OpError> {
    let status = RunStatus::parse(&r.status).ok_or_else(|| {
        OpError::BadRequest(format!(
            "close_run: status {:?} is not one of succeeded, failed, cancelled",
            r.status.chars().take(100).collect::<String>()
        ))
    })?;
    let artifacts = r
        .artifacts
        .iter()
        .map(|(name, c)| {
            let bytes = c.bytes(&format!("close_run: artifact {name:?}"))?;
            Ok((name.clone(), bytes))
        })
        .collect::<Result<_, OpError>>()?;
    Ok(CloseRun {
        run: r.run.clone(),
        status,
        summary: r.summary.clone(),
        artifacts,
        labels: r.labels.clone(),
    })
}

/// The engine's `issue_token` command: the hash spelled as 64 hex digits.
fn issue_command(r: &IssueTokenOp) -> Result<crate::auth::tokens::IssueToken, OpError> {
    let mut sha256 = [0u8; 32];
    hex::decode_to_slice(&r.sha256, &mut sha256).map_err(|_| {
        OpError::BadRequest(
            "issue_token: sha256 must be the token's SHA-256 as 64 hex digits".into(),
        )
    })?;
    Ok(crate::auth::tokens::IssueToken {
        sha256,
        principal: r.principal.clone(),
        scopes: r.scopes.clone(),
        expires_in_s: r.expires_in_s,
    })
}

/// Check what serde cannot, before the ledger is asked anything.
pub fn validate(request: &Request) -> Result<(), OpError> {
    match request {
        Request::CloseRun(r) => close_command(r).map(|_| ()),
        Request::IssueToken(r) => issue_command(r).map(|_| ()),
        Request::PutBlob(r) => {
            content_bytes("put_blob", r.content.as_deref(), r.content_b64.as_deref())
                .map(|_| ())
                .map_err(OpError::from)
        }
        _ => Ok(()),
    }
}

/// Carry out a parsed operation and type its answer.
pub fn execute(engine: &mut Engine, request: &Request) -> Result<Answer, OpError> {
    Ok(match request {
        Request::PublishAgent(r) => {
            let a = engine.publish_agent(publish_command(r))?;
            let lc = LoopCheckOut::from(&a.loop_check);
            Answer::PublishAgent(Published {
                agent: a.agent,
                version: a.version,
                warnings: lc.warnings,
                may_be_more: lc.may_be_more,
                checked_in_full: lc.checked_in_full,
                text: a.loop_check.text,
            })
        }
        Request::OpenRun(r) => {
            let a = engine.open_run(&r.run, &r.agent, r.legacy_trigger.as_deref())?;
            Answer::OpenRun(Opened {
                run: a.run,
                root: a.root,
                hop: a.hop,
                version: a.version,
            })
        }
        Request::ReadArtifact(r) => {
            let a = engine.read_artifact(&r.run, &r.name)?;
            Answer::ReadArtifact(ArtifactRead {
                digest: a.artifact.digest(),
                labels: a.artifact.labels,
                source_run: a.artifact.source_run,
                content: ContentOut::new(a.content, r.base64),
            })
        }
        Request::CloseRun(r) => {
            let a = engine.close_run(close_command(r)?)?;
            Answer::CloseRun(Closed {
                run: a.run,
                withheld: a.withheld.as_ref().map(Into::into),
                labels: a.labels,
                artifacts: a.artifacts.iter().map(Into::into).collect(),
            })
        }
        Request::Dispatch(d) => {
            Answer::Dispatch((&engine.dispatch_within(d.within.as_deref())?).into())
        }
        Request::OpenTask(r) => {
            engine.open_task(&r.task, &r.run, &r.task_context)?;
            Answer::OpenTask(TaskOpened {
                task: r.task.clone(),
                master_run: r.run.clone(),
            })
        }
        Request::UpdateTask(r) => {
            engine.update_task(&r.task, &r.run, &r.task_context)?;
            Answer::UpdateTask(TaskUpdated {
                task: r.task.clone(),
            })
        }
        Request::PutBlob(r) => {
            super::request::check_media_type(&r.media_type)?;
            let content =
                content_bytes("put_blob", r.content.as_deref(), r.content_b64.as_deref())?;
            let (uri, digest, size) = engine.put_blob(&r.task, &content, &r.media_type, r.ttl_s)?;
            Answer::PutBlob(BlobPut { uri, digest, size })
        }
        Request::SendContext(r) => {
            let a = engine.send_context(&r.task, &r.run, r.mode, &r.agent_context)?;
            Answer::SendContext(ContextSent {
                subtask: a.subtask,
                agent: a.agent,
                inline_bytes: a.accounting.inline_bytes,
                referenced_bytes: a.accounting.referenced_bytes,
                est_tokens_saved: a.accounting.est_tokens_saved,
            })
        }
        Request::GetContext(r) => {
            let (subtask, agent_context) = engine.get_context(&r.task, &r.agent)?;
            Answer::GetContext(ContextGot {
                subtask,
                agent_context,
            })
        }
        Request::GetBlob(r) => {
            let (bytes, digest) = engine.get_blob(&r.task, &r.agent, &r.uri)?;
            Answer::GetBlob(BlobGot {
                digest,
                content: ContentOut::new(bytes, r.base64),
            })
        }
        Request::ReturnContext(r) => {
            let (subtask, layer1) = engine.return_context(&r.task, &r.agent, &r.agent_context)?;
            Answer::ReturnContext(ContextReturned {
                subtask,
                layer1: (&layer1).into(),
            })
        }
        Request::IssueToken(r) => {
            let issued = engine.issue_token(&issue_command(r)?)?;
            Answer::IssueToken(TokenIssuedOut {
                id: issued.id,
                principal: issued.principal,
                scopes: issued.scopes,
                expires_at_ms: issued.expires_at_ms,
            })
        }
        Request::ForgetTask(r) => {
            let (erased, at) = engine.forget_task(&r.task)?;
            Answer::ForgetTask(TaskForgotten {
                task: r.task.clone(),
                erased,
                erased_at_ms: at,
            })
        }
        Request::RevokeToken(r) => {
            engine.revoke_token(&r.id)?;
            Answer::RevokeToken(TokenRevokedOut {
                id: r.id.clone(),
                revoked: true,
            })
        }
        Request::Evaluate(r) => {
            engine.evaluate(&r.task, &r.run, &r.subtask, r.decision, &r.reason)?;
            Answer::Evaluate(Evaluated {
                task: r.task.clone(),
                subtask: r.subtask.clone(),
                decision: r.decision,
            })
        }
    })
}

/// Carry out a request on views fresh enough for it, and say what failed
/// after its records were durable.
pub fn answer(engine: &mut Engine, request: &Request) -> Result<Done<Answer>, OpError> {
    let answer = decide_fresh(engine, request);
    let follow_up_failed = engine.take_follow_ups();
    answer.map(|answer| Done {
        ok: True,
        answer,
        follow_up_failed,
    })
}

fn decide_fresh(engine: &mut Engine, request: &Request) -> Result<Answer, OpError> {
    validate(request)?;
    // Another instance may have written since: decide on views at most
    // `max_staleness` old. An entity we do not know of may be what we have
    // not seen yet, so such a refusal is decided again on caught-up views
    // (these refusals record nothing, so deciding twice is harmless).
    let fresh = engine.refresh()?;
    match execute(engine, request) {
        Err(e)
            if !fresh
                && !matches!(request, Request::Dispatch(_))
                && matches!(e.code(), Code::UnknownAgent | Code::UnknownRun) =>
        {
            engine.catch_up_now()?;
            execute(engine, request)
        }
        answer => answer,
    }
}

/// The run whose trail a request concerns: the run it names, or its task's
/// master run.
fn involved_run(engine: &Engine, request: &Request) -> Result<Option<String>, LedgerError> {
    let task = |task: &str| -> Result<Option<String>, LedgerError> {
        Ok(engine.views().task(task)?.map(|t| t.master_run))
    };
    match request {
        Request::CloseRun(c) => Ok(Some(c.run.clone())),
        Request::ReadArtifact(r) => Ok(Some(r.run.clone())),
        Request::OpenTask(o) => Ok(Some(o.run.clone())),
        Request::UpdateTask(r) => task(&r.task),
        Request::PutBlob(r) => task(&r.task),
        Request::SendContext(r) => task(&r.task),
        Request::Evaluate(r) => task(&r.task),
        Request::GetContext(r) => task(&r.task),
        Request::GetBlob(r) => task(&r.task),
        Request::ReturnContext(r) => task(&r.task),
        Request::ForgetTask(r) => task(&r.task),
        Request::PublishAgent(_)
        | Request::OpenRun(_)
        | Request::Dispatch(_)
        | Request::IssueToken(_)
        | Request::RevokeToken(_) => Ok(None),
    }
}

/// A request narrowed to what its caller was granted. A platform's agents
/// see, in loop warnings, what the platform was granted: the `access` it
/// declares is checked against its grant by the policy and then replaced
/// by the grant. A platform's dispatch is its own agents' finished runs.
fn as_granted(mut request: Request, grant: &Grant) -> Request {
    if let Principal::Platform(_) = &grant.principal {
        match &mut request {
            Request::PublishAgent(p) => p.access = Some(grant.scopes.clone()),
            Request::Dispatch(d) => d.within = Some(grant.scopes.clone()),
            _ => {}
        }
    }
    request
}

/// The reply to one request's JSON, and whether a failure (if any) was the
/// machine's rather than the caller's.
pub fn reply(engine: &mut Engine, v: &Value) -> (Reply, bool) {
    reply_as(engine, &Grant::operator(), v)
}

/// The reply to one request made by `grant`: what the policy does not
/// allow is answered `forbidden` and carried out not at all; the rest is
/// carried out with records naming the principal.
pub fn reply_as(engine: &mut Engine, grant: &Grant, v: &Value) -> (Reply, bool) {
    let allowed = |engine: &mut Engine, request: &Request| -> Result<(), OpError> {
        if grant.principal == Principal::Operator {
            return Ok(());
        }
        // A principal that writes nothing is refused every operation,
        // without asking the views; its refusals are kept at most once a
        // minute, so a flood of them writes nothing more.
        if matches!(grant.principal, Principal::Auditor | Principal::Consumer) {
            if let Err(forbidden) = authorize(grant, Action::Op(request), &Default::default()) {
                let message = forbidden.to_string();
                engine.act_as(&grant.principal);
                let kept = engine.record_forbidden_limited(
                    |engine| {
                        if !engine.refresh()? {
                            engine.catch_up(&|_| {})?;
                        }
                        involved_run(engine, request)
                    },
                    request.op(),
                    &message,
                );
                engine.act_as(&Principal::Operator);
                kept?;
                return Err(OpError::Ledger(
                    Refusal::new(Code::Forbidden, message).into(),
                ));
            }
        }
        // Decide who may on views that have seen everything: a run another
        // instance opened must not look absent (absent facts allow, and
        // leave the refusal to the operation).
        if !engine.refresh()? {
            engine.catch_up(&|_| {})?;
        }
        let facts = crate::auth::gather(engine.views(), request)
            .map_err(|e| OpError::Ledger(LedgerError::from(e)))?;
        let Err(forbidden) = authorize(grant, Action::Op(request), &facts) else {
            return Ok(());
        };
        // Kept on the trail of the run it concerned, as the caller's.
        let message = forbidden.to_string();
        if let Some(run) = involved_run(engine, request)? {
            engine.act_as(&grant.principal);
            let recorded = engine.record_forbidden(&run, request.op(), &message);
            engine.act_as(&Principal::Operator);
            recorded?;
        }
        Err(OpError::Ledger(
            Refusal::new(Code::Forbidden, message).into(),
        ))
    };
    let result = parse_request(v).and_then(|request| {
        // Decided (and refused, and recorded) by its chain's owner only.
        if let Some(r) = engine.referral(&request)? {
            return Err(OpError::Elsewhere(Box::new(r)));
        }
        allowed(engine, &request)?;
        let request = as_granted(request, grant);
        if grant.principal == Principal::Operator {
            return answer(engine, &request);
        }
        engine.act_as(&grant.principal);
        let done = answer(engine, &request);
        engine.act_as(&Principal::Operator);
        done
    });
    match result {
        Ok(done) => (Reply::Done(done), false),
        Err(e) => (Reply::Failed(e.failure()), e.is_machine()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_op_is_answered_with_every_op_there_is() {
        let m = OpError::UnknownOp("x".into()).to_string();
        for op in super::super::request::OPS {
            assert!(m.contains(op), "{op} missing from {m}");
        }
    }
}
