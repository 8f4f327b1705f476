//! The decide half of the operations on agents and runs: each is a pure
//! function of the ledger's state — read through [`LedgerRead`] — and a
//! command, answering the records to append or a refusal. The engine reads
//! what a decision needs (and, for reads, the content store), calls it and
//! appends what it decided; the given/when/then tests call the same
//! functions over state folded in memory, with no log, sled or files.
//! Every check a caller's command can fail lives here, not in the shell.

use super::{artifacts, chain, labels};
use crate::codes::Code;
use crate::codes::Refusal;
use crate::context::TaskState;
use crate::loops::{self, AgentIndex, AgentNode, LoopBounds};
use crate::model::limits;
use crate::model::scope::valid_scope;
use crate::model::Topic;
use crate::model::*;
use std::collections::BTreeMap;

/// The ledger's state as the rules read it.
pub trait LedgerRead {
    fn run(&self, run: &str) -> Result<Option<Run>, StateError>;
    fn version(&self, agent: &str, version: u32) -> Result<Option<AgentVersion>, StateError>;
    fn current_version(&self, agent: &str) -> Result<Option<AgentVersion>, StateError>;
    /// Agents whose current version listens to `event`, sorted by name.
    fn listeners(&self, event: &str) -> Result<Vec<String>, StateError>;
    fn task(&self, task: &str) -> Result<Option<TaskState>, StateError>;
}

/// The state could not be read as a decision needs it.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The reader failed (its own error, kept whole for the layer that
    /// knows it: the views' reader gives a `ViewError`).
    #[error(transparent)]
    Unreadable(Box<dyn std::error::Error + Send + Sync>),
    /// What was read contradicts itself (a run's version missing).
    #[error("{0}")]
    Inconsistent(String),
}

/// Why an artifact's bytes cannot be handed to a read, as the content
/// store says (the engine converts its errors; a test states it).
#[derive(Debug, thiserror::Error)]
pub enum ContentFault {
    /// The bytes are there but hash to something else.
    #[error("{0}")]
    Damaged(String),
    /// The bytes cannot be had.
    #[error("{0}")]
    Unavailable(String),
}

/// What a decision can fail with: a refusal, or the state not being
/// readable.
#[derive(Debug, thiserror::Error)]
pub enum DecideError {
    #[error(transparent)]
    Refused(#[from] Refusal),
    #[error(transparent)]
    State(#[from] StateError),
}

pub type Decision<T> = Result<T, DecideError>;

/// One record a decision appends.
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    pub topic: Topic,
    /// The log key: the chain root for ledger records, so a chain stays in
    /// one partition and in order; the agent for registry records.
    pub key: String,
    pub event_id: String,
    /// Its step in its run's trail (0 for registry records).
    pub step: u32,
    pub event: LedgerEvent,
}

impl Decided {
    /// The next step of an existing run's trail, keyed on its chain.
    pub fn step(run: &Run, step: u32, event: LedgerEvent) -> Self {
        Decided {
            topic: Topic::Ledger,
            key: ids::chain_key(run.root.as_deref(), &run.run).to_string(),
            event_id: ids::step_event_id(&run.run, step),
            step,
            event,
        }
    }
}

fn refused(code: Code, message: impl Into<String>) -> DecideError {
    Refusal::new(code, message).into()
}

/// The run a command names, or `unknown_run`.
pub fn existing_run(state: &impl LedgerRead, run: &str) -> Decision<Run> {
    state
        .run(run)?
        .ok_or_else(|| refused(Code::UnknownRun, format!("no run {run:?} in the ledger")))
}

fn check_names(what: &str, names: &[String]) -> Decision<()> {
    for n in names {
        if !ids::valid_name(n) {
            return Err(refused(
                Code::InvalidName,
                format!("{what} {n:?} is not a valid name (letters, digits, - _ . :; 1 to 128; never . or ..)"),
            ));
        }
    }
    Ok(())
}

/// An `open_run` command: a root run a user started, or (with
/// `legacy_trigger`) a run an older worker opened from an event without
/// recording its chain position (R6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRun {
    pub run: String,
    pub agent: String,
    pub legacy_trigger: Option<String>,
}

/// R1: a root run's position is decided here, once, and recorded.
pub fn decide_open_run(state: &impl LedgerRead, cmd: &OpenRun) -> Decision<Decided> {
    check_names("run id", std::slice::from_ref(&cmd.run))?;
    if state.run(&cmd.run)?.is_some() {
        return Err(refused(
            Code::RunExists,
            format!("run {:?} is already in the ledger", cmd.run),
        ));
    }
    let version = state.current_version(&cmd.agent)?.ok_or_else(|| {
        refused(
            Code::UnknownAgent,
            format!("no agent {:?} has been published", cmd.agent),
        )
    })?;
    let (root, hop) = match cmd.legacy_trigger {
        Some(_) => (None, None),
        None => {
            let (r, h) = chain::root_position(&cmd.run);
            (Some(r), Some(h))
        }
    };
    Ok(Decided {
        topic: Topic::Ledger,
        key: ids::chain_key(root.as_deref(), &cmd.run).to_string(),
        event_id: ids::step_event_id(&cmd.run, 0),
        step: 0,
        event: LedgerEvent::RunOpened(RunOpened {
            run: cmd.run.clone(),
            agent: cmd.agent.clone(),
            version: version.version,
            scope: version.scope.clone(),
            root,
            hop,
            trigger: None,
            legacy_trigger: cmd.legacy_trigger.clone(),
            labels: labels::opening_labels(&version.scope),
        }),
    })
}

/// What a read decided: the artifact and its record, or the refusal and
/// (on an open run) the record that keeps it in the trail.
#[derive(Debug, Clone, PartialEq)]
pub enum ReadDecision {
    Granted {
        artifact: ArtifactRef,
        record: Decided,
    },
    Refused {
        refusal: Refusal,
        record: Option<Decided>,
    },
}

/// R8, R9: a read by name through the run's trigger contract. `content`
/// says whether the content store holds the artifact's bytes intact (the
/// engine reads them; a test says so); damaged bytes are refused
/// `digest_mismatch`, missing ones `content_unavailable`. Granted or
/// refused, an open run's read is a trail step and a tool call.
pub fn decide_read(
    state: &impl LedgerRead,
    run_id: &str,
    name: &str,
    content: &mut dyn FnMut(&ArtifactRef) -> Result<(), ContentFault>,
) -> Decision<ReadDecision> {
    let run = existing_run(state, run_id)?;
    let budget = state
        .version(&run.agent, run.version)?
        .and_then(|v| v.tool_budget);
    let step = run.next_step;
    let decided = artifacts::authorize_read(&run, name, budget).and_then(|art| {
        content(&art).map(|()| art).map_err(|e| {
            let code = match e {
                ContentFault::Damaged(_) => Code::DigestMismatch,
                ContentFault::Unavailable(_) => Code::ContentUnavailable,
            };
            Refusal::new(code, format!("artifact {name:?}: {e}"))
        })
    });
    Ok(match decided {
        Ok(art) => ReadDecision::Granted {
            record: Decided::step(
                &run,
                step,
                LedgerEvent::ArtifactRead(ArtifactRead {
                    run: run_id.to_string(),
                    artifact: art.clone(),
                    labels_after: labels::after_read(&run.labels, &art),
                }),
            ),
            artifact: art,
        },
        Err(refusal) => ReadDecision::Refused {
            record: run.is_open().then(|| {
                Decided::step(
                    &run,
                    step,
                    LedgerEvent::ReadRefused(ReadRefused {
                        run: run_id.to_string(),
                        requested: name.to_string(),
                        code: refusal.code.to_string(),
                        message: refusal.message.clone(),
                    }),
                )
            }),
            refusal,
        },
    })
}

/// A `close_run` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseRun {
    pub run: String,
    pub status: RunStatus,
    pub summary: String,
    /// Artifact name → its bytes.
    pub artifacts: BTreeMap<String, Vec<u8>>,
    pub labels: Vec<String>,
}

/// R2, R5, R6, R9: closing a run decides what it publishes, from the
/// version it opened on; every artifact carries the run's labels. The
/// artifacts' refs are their digests, so the shell stores the bytes under
/// them before it appends the record.
pub fn decide_close(state: &impl LedgerRead, cmd: &CloseRun) -> Decision<Decided> {
    let run = existing_run(state, &cmd.run)?;
    if !run.is_open() {
        return Err(refused(
            Code::RunClosed,
            format!("run {:?} is already closed", cmd.run),
        ));
    }
    limits::check_count(
        "artifacts in one close_run",
        cmd.artifacts.len(),
        limits::MAX_ARTIFACTS_PER_CLOSE,
    )?;
    for (name, content) in &cmd.artifacts {
        check_names("artifact name", std::slice::from_ref(name))?;
        if content.len() > limits::MAX_BLOB_BYTES {
            return Err(refused(
                Code::TooLarge,
                format!(
                    "artifact {name:?} is {} bytes; the limit is {} bytes",
                    content.len(),
                    limits::MAX_BLOB_BYTES
                ),
            ));
        }
    }
    limits::check_count(
        "labels in one close_run",
        cmd.labels.len(),
        limits::MAX_LABELS_PER_RUN,
    )
    .map_err(|r| Refusal::new(Code::TooManyLabels, r.message))?;
    for l in &cmd.labels {
        labels::check_label(l)?;
    }
    let opened_on = state.version(&run.agent, run.version)?.ok_or_else(|| {
        StateError::Inconsistent(format!(
            "version {} of agent {} is missing from the views",
            run.version, run.agent
        ))
    })?;
    let run_labels = labels::at_close(&run.labels, &cmd.labels);
    labels::check_label_count(&run_labels, "this close")?;
    let arts: Vec<ArtifactRef> = cmd
        .artifacts
        .iter()
        .map(|(name, content)| ArtifactRef {
            name: name.clone(),
            sha256: cas::ContentRef::for_content(content).sha256(),
            size: content.len() as u64,
            source_run: run.run.clone(),
            labels: run_labels.clone(),
        })
        .collect();
    let (published, withheld) = chain::close_outcome(&run, &opened_on, cmd.status, &arts);
    Ok(Decided::step(
        &run,
        run.next_step,
        LedgerEvent::RunClosed(RunClosed {
            run: run.run.clone(),
            status: cmd.status,
            summary: cmd.summary.clone(),
            artifacts: arts,
            labels: run_labels,
            published,
            withheld,
        }),
    ))
}

/// What one listener of one published event comes to (R3, R4, R5, R9).
#[derive(Debug, Clone, PartialEq)]
pub enum ListenerOutcome {
    /// Opened: the listener run's opening record.
    Opened(Decided),
    /// Not opened, for a reason recorded as a step of the source run.
    Refused(Decided, RefusalReason),
    /// Nothing to record: already opened or refused by an earlier delivery,
    /// or the source may open nothing (hop limit, unknown chain), or the
    /// agent no longer has a version.
    Nothing,
}

/// One listener `agent` of event `ev` of the finished run `source`: read
/// from the version current now (R5), opened at most once (R3), never by
/// its own event (R4), not across the scope barrier (R9). A refusal takes
/// the source's trail step `next_step`.
pub fn decide_listener_record(
    state: &impl LedgerRead,
    source: &Run,
    ev: &AgentEventOut,
    agent: &str,
    next_step: u32,
) -> Decision<ListenerOutcome> {
    use super::dispatch::{decide_listener, ListenerDecision};
    let Some(listener) = state.current_version(agent)? else {
        return Ok(ListenerOutcome::Nothing);
    };
    let already = state
        .run(&ids::listener_run_id(&ev.event_id, agent))?
        .is_some();
    Ok(match decide_listener(source, ev, &listener, already) {
        ListenerDecision::Open { run, root, hop } => ListenerOutcome::Opened(Decided {
            topic: Topic::Ledger,
            key: root.clone(),
            event_id: ids::step_event_id(&run, 0),
            step: 0,
            event: LedgerEvent::RunOpened(RunOpened {
                run,
                agent: agent.to_string(),
                version: listener.version,
                scope: listener.scope.clone(),
                root: Some(root),
                hop: Some(hop),
                trigger: Some(Trigger {
                    event_id: ev.event_id.clone(),
                    event: ev.event.clone(),
                    context: ev.context.clone(),
                    source_run: source.run.clone(),
                    artifacts: ev.artifacts.clone(),
                }),
                legacy_trigger: None,
                labels: labels::opening_labels(&listener.scope),
            }),
        }),
        ListenerDecision::Refuse(reason) => ListenerOutcome::Refused(
            Decided::step(
                source,
                next_step,
                LedgerEvent::ListenerRefused(ListenerRefused {
                    source_run: source.run.clone(),
                    event_id: ev.event_id.clone(),
                    event: ev.event.clone(),
                    agent: agent.to_string(),
                    reason: reason.clone(),
                }),
            ),
            reason,
        ),
        ListenerDecision::AlreadyDone | ListenerDecision::NotAllowed => ListenerOutcome::Nothing,
    })
}

/// A `publish_agent` command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishAgent {
    pub agent: String,
    pub scope: String,
    pub listens: Vec<String>,
    pub emits: Vec<EmitDecl>,
    pub access: Option<Vec<String>>,
    pub tool_budget: Option<u32>,
}

/// The loop search's node for a version.
pub fn node_of(v: &AgentVersion) -> AgentNode {
    AgentNode {
        name: v.agent.clone(),
        scope: v.scope.clone(),
        listens: v.listens.clone(),
        emits: v.emits.iter().map(|e| e.event.clone()).collect(),
    }
}

/// R10: the next version of an agent, with the loops it closes among the
/// current versions in `index` (warned about, never refused).
pub fn decide_publish(
    state: &impl LedgerRead,
    index: &AgentIndex,
    bounds: &LoopBounds,
    cmd: &PublishAgent,
) -> Decision<Decided> {
    check_names("agent", std::slice::from_ref(&cmd.agent))?;
    limits::check_count(
        "events one version listens to",
        cmd.listens.len(),
        limits::MAX_LISTENS_PER_VERSION,
    )?;
    limits::check_count(
        "events one version emits",
        cmd.emits.len(),
        limits::MAX_EMITS_PER_VERSION,
    )?;
    for e in &cmd.emits {
        limits::check_count(
            &format!("artifacts event {:?} exposes", e.event),
            e.artifacts.len(),
            limits::MAX_ARTIFACTS_PER_EMIT,
        )?;
    }
    if let Some(access) = &cmd.access {
        limits::check_count("scopes in access", access.len(), limits::MAX_ACCESS_SCOPES)?;
    }
    if !valid_scope(&cmd.scope) {
        return Err(refused(
            Code::InvalidScope,
            format!("scope {:?} is not a path like company/area", cmd.scope),
        ));
    }
    check_names("event", &cmd.listens)?;
    for e in &cmd.emits {
        check_names("event", std::slice::from_ref(&e.event))?;
        check_names("context", std::slice::from_ref(&e.context))?;
        check_names("artifact", &e.artifacts)?;
    }
    let access = cmd
        .access
        .clone()
        .unwrap_or_else(|| vec![cmd.scope.clone()]);
    if let Some(bad) = access.iter().find(|s| !valid_scope(s)) {
        return Err(refused(
            Code::InvalidScope,
            format!("access scope {bad:?} is not a path like company/area"),
        ));
    }
    let version = state
        .current_version(&cmd.agent)?
        .map(|v| v.version + 1)
        .unwrap_or(1);
    let mut candidate = AgentVersion {
        agent: cmd.agent.clone(),
        version,
        scope: cmd.scope.clone(),
        listens: cmd.listens.clone(),
        emits: cmd.emits.clone(),
        access,
        tool_budget: cmd.tool_budget,
        loop_check: LoopCheck::default(),
    };
    candidate.loop_check =
        loops::check_publish(index, &node_of(&candidate), &candidate.access, bounds);
    Ok(Decided {
        topic: Topic::Registry,
        key: cmd.agent.clone(),
        event_id: ids::agent_version_event_id(&cmd.agent, version),
        step: 0,
        event: LedgerEvent::AgentPublished(candidate),
    })
}
