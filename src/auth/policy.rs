//! Who may do what: a pure function of the caller's grant, what it asks,
//! and what the views say about the things the request names. The facts
//! are gathered at the edge (`Facts`); nothing here reads a store, so the
//! whole policy is a table in the tests.

use super::principal::{Grant, Principal};
use crate::protocol::Request;

/// What a caller asks for.
#[derive(Debug, Clone, Copy)]
pub enum Action<'a> {
    /// An operation.
    Op(&'a Request),
    /// A question that writes nothing: trail, chain, agent, stats, status,
    /// export, verify, metrics; about what the subject says.
    Read(&'a Subject),
    /// The published events, limited to `scope` when given.
    Events { scope: Option<&'a str> },
}

/// What a read is about, as far as the policy needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// The ledger as a whole: status, tokens, verify, metrics, the signed
    /// log, an export of everything, the list of recent runs.
    Whole,
    /// Runs, a chain, an agent or a task: the scopes of the agents
    /// concerned (a chain's: every run's). Empty when what is named does
    /// not exist; the read itself then answers that it is unknown.
    Scopes(Vec<String>),
}

/// What the views say about the things a request names, as far as the
/// policy needs it. `None` where the thing does not exist (the operation
/// itself then refuses it with its own code) or does not apply.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// The agent the named run belongs to (`close_run`, `read_artifact`).
    pub run_agent: Option<String>,
    /// The scope of the agent concerned: the one named by `open_run` or
    /// `publish_agent` (its current version), or the named run's agent.
    pub agent_scope: Option<String>,
    /// The principal that opened the named run (`open_task`).
    pub run_opened_by: Option<String>,
    /// The principal that opened the task's master run: the task's master
    /// (`update_task`, `put_blob`, `send_context`, `evaluate`).
    pub task_master: Option<String>,
    /// The agent of the task's master run: the agent the draft has
    /// maintain its TaskContext (the same operations, but not erasure).
    pub task_master_agent: Option<String>,
}

/// Why a caller may not do what it asked: said in the `forbidden`
/// refusal, never naming a credential, and never what the views say of
/// another tenant (its scopes, its agents, its principals): `why` names
/// only what the caller sent or was granted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{principal} may not {what}: {why}")]
pub struct Forbidden {
    pub principal: String,
    pub what: String,
    pub why: String,
}

/// Allow or refuse `action` by `grant`, given `facts`.
pub fn authorize(grant: &Grant, action: Action<'_>, facts: &Facts) -> Result<(), Forbidden> {
    let who = &grant.principal;
    let what = match action {
        Action::Op(r) => r.op().to_string(),
        Action::Read(Subject::Whole) => "read the ledger".to_string(),
        Action::Read(Subject::Scopes(_)) => "read what it names".to_string(),
        Action::Events { .. } => "follow the published events".to_string(),
    };
    let refuse = |why: String| {
        Err(Forbidden {
            principal: who.to_string(),
            what: what.clone(),
            why,
        })
    };
    let allow_if = |ok: bool, why: &dyn Fn() -> String| if ok { Ok(()) } else { refuse(why()) };
    match (who, action) {
        (Principal::Operator, _) => Ok(()),
        (_, Action::Op(Request::IssueToken(_) | Request::RevokeToken(_))) => {
            refuse("only the operator issues and revokes tokens".into())
        }
        (Principal::Auditor | Principal::Platform(_), Action::Read(subject)) => {
            scoped_read(grant, subject, &refuse)
        }
        (Principal::Auditor, _) => refuse("an auditor reads and writes nothing".into()),
        (Principal::Consumer, Action::Events { scope }) => allow_if(
            grant.scopes.is_empty() || scope.is_some_and(|s| grant.covers(s)),
            &|| match scope {
                Some(s) => format!("scope {s} is not within its scopes {:?}", grant.scopes),
                None => format!("it may follow only its scopes {:?}", grant.scopes),
            },
        ),
        (Principal::Consumer, _) => refuse("a consumer only follows published events".into()),
        (Principal::Platform(_), Action::Op(r)) => platform_op(grant, r, facts, &refuse),
        (Principal::Platform(_), Action::Events { .. }) => {
            refuse("following the published events is a consumer's".into())
        }
        (Principal::Agent(name), Action::Op(r)) => agent_op(name, r, facts, &refuse),
        (Principal::Agent(_), _) => refuse("an agent acts only through its operations".into()),
    }
}

/// A reader with scopes (a platform, a scoped auditor) reads what lies
/// within them; an auditor without scopes reads everything.
fn scoped_read(grant: &Grant, subject: &Subject, refuse: &Refuse) -> Result<(), Forbidden> {
    let global = grant.principal == Principal::Auditor && grant.scopes.is_empty();
    match subject {
        _ if global => Ok(()),
        Subject::Whole => refuse(format!(
            "a reader with scopes reads only the runs, chains, agents and tasks within its scopes {:?}",
            grant.scopes
        )),
        // Where the things outside lie stays unsaid.
        Subject::Scopes(scopes) if scopes.iter().all(|s| grant.covers(s)) => Ok(()),
        Subject::Scopes(_) => refuse(format!(
            "what it names is outside its scopes {:?}",
            grant.scopes
        )),
    }
}

type Refuse<'a> = dyn Fn(String) -> Result<(), Forbidden> + 'a;

fn platform_op(
    grant: &Grant,
    r: &Request,
    facts: &Facts,
    refuse: &Refuse,
) -> Result<(), Forbidden> {
    let who = grant.principal.to_string();
    let granted = || format!("its scopes {:?}", grant.scopes);
    // What the views say of an agent or run: the refusal says it lies
    // outside the caller's scopes, never where it lies.
    let theirs = |what: &str, scope: Option<&str>| match scope {
        Some(s) if !grant.covers(s) => refuse(format!("{what} is outside {}", granted())),
        // Nothing to check against: the operation refuses the unknown
        // agent or run itself.
        _ => Ok(()),
    };
    match r {
        Request::PublishAgent(p) => {
            if !grant.covers(&p.scope) {
                return refuse(format!("scope {} is not within {}", p.scope, granted()));
            }
            // A new version replaces the current one: only a platform the
            // current one belongs to may replace it.
            theirs(&format!("agent {}", p.agent), facts.agent_scope.as_deref())?;
            match p.access.iter().flatten().find(|a| !grant.covers(a)) {
                Some(a) => refuse(format!("access to {a} is not within {}", granted())),
                None => Ok(()),
            }
        }
        Request::OpenRun(o) => theirs(&format!("agent {}", o.agent), facts.agent_scope.as_deref()),
        Request::CloseRun(c) => {
            theirs(&format!("run {}", c.run), facts.agent_scope.as_deref())?;
            labels_within(&c.labels, |s| grant.covers(s), &granted(), refuse)
        }
        // Dispatch is narrowed to the caller's scopes where it is carried out.
        Request::Dispatch(_) => Ok(()),
        Request::OpenTask(_) => master(&who, facts.run_opened_by.as_deref(), "the run", refuse),
        Request::UpdateTask(_)
        | Request::PutBlob(_)
        | Request::SendContext(_)
        | Request::Evaluate(_)
        | Request::ForgetTask(_) => master(&who, facts.task_master.as_deref(), "the task", refuse),
        Request::ReadArtifact(_)
        | Request::GetContext(_)
        | Request::GetBlob(_)
        | Request::ReturnContext(_) => refuse("only the agent concerned does this".into()),
        Request::IssueToken(_) | Request::RevokeToken(_) => {
            refuse("only the operator issues and revokes tokens".into())
        }
    }
}

/// An `area:` label a close adds says whose data the run's artifacts are
/// (R9): a caller may name only areas within its own.
fn labels_within(
    labels: &[String],
    covered: impl Fn(&str) -> bool,
    granted: &str,
    refuse: &Refuse,
) -> Result<(), Forbidden> {
    match labels
        .iter()
        .find(|l| l.strip_prefix("area:").is_some_and(|s| !covered(s)))
    {
        Some(l) => refuse(format!("label {l} is not within {granted}")),
        None => Ok(()),
    }
}

fn agent_op(name: &str, r: &Request, facts: &Facts, refuse: &Refuse) -> Result<(), Forbidden> {
    let as_itself = |agent: &str| {
        if agent == name {
            Ok(())
        } else {
            refuse(format!("it acts only as agent {name}, not {agent}"))
        }
    };
    // The run's agent is what the views say: not named back.
    let its_run = |run: &str| match facts.run_agent.as_deref() {
        Some(agent) if agent != name => refuse(format!("run {run} is not a run of agent {name}")),
        _ => Ok(()),
    };
    match r {
        Request::GetContext(g) => as_itself(&g.agent),
        Request::GetBlob(g) => as_itself(&g.agent),
        Request::ReturnContext(g) => as_itself(&g.agent),
        Request::ReadArtifact(a) => its_run(&a.run),
        Request::CloseRun(c) => {
            its_run(&c.run)?;
            // An agent's own area is its agent's scope.
            let own = facts.agent_scope.as_deref();
            labels_within(
                &c.labels,
                |s| own.is_none_or(|o| crate::model::scope::scope_within(s, o)),
                &format!("agent {name}'s scope"),
                refuse,
            )
        }
        // The draft's master agent maintains its task: the agent of the
        // task's master run acts on it as the run's opener does. Erasing
        // the task stays with the principal that opened that run.
        Request::UpdateTask(_)
        | Request::PutBlob(_)
        | Request::SendContext(_)
        | Request::Evaluate(_)
            if facts.task_master_agent.as_deref() == Some(name) =>
        {
            Ok(())
        }
        Request::UpdateTask(_)
        | Request::PutBlob(_)
        | Request::SendContext(_)
        | Request::Evaluate(_)
        | Request::ForgetTask(_) => master(
            &format!("agent:{name}"),
            facts.task_master.as_deref(),
            "the task",
            refuse,
        ),
        Request::OpenTask(_) => master(
            &format!("agent:{name}"),
            facts.run_opened_by.as_deref(),
            "the run",
            refuse,
        ),
        Request::PublishAgent(_) | Request::OpenRun(_) | Request::Dispatch(_) => {
            refuse("publishing, opening runs and dispatching are a platform's".into())
        }
        Request::IssueToken(_) | Request::RevokeToken(_) => {
            refuse("only the operator issues and revokes tokens".into())
        }
    }
}

/// Only the principal that opened the master run acts as a task's master.
fn master(who: &str, opener: Option<&str>, of: &str, refuse: &Refuse) -> Result<(), Forbidden> {
    match opener {
        Some(o) if o == who => Ok(()),
        // Whose it is stays unsaid: it may be another tenant's.
        Some(_) => refuse(format!(
            "{of} is another principal's; only its master does this"
        )),
        None => Ok(()),
    }
}
