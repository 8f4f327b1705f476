//! Typed refusals of the context-exchange rules (R11–R15), each with a stable
//! snake_case code for the CLI's `{"ok":false,"error":{"code":…}}` answers and
//! for `Refused` events in the trail.

use std::fmt;

pub use crate::codes::Code;
use serde::{Deserialize, Serialize};

/// Which of the draft's two objects a schema violation is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ContextKind {
    TaskContext,
    AgentContext,
}

impl fmt::Display for ContextKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ContextKind::TaskContext => "TaskContext",
            ContextKind::AgentContext => "AgentContext",
        })
    }
}

/// One schema (or identity) violation: the JSON Pointer of the offending
/// value (`""` is the document root) and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub path: String,
    pub message: String,
    /// When `message` quotes the value at fault (a schema validator's
    /// words do), what was broken without it — the schema keyword's
    /// location — for the refusal the log records: the caller is told its
    /// value, the log never holds the context a refusal kept out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

impl Violation {
    /// This violation as the log may keep it: no value of the caller's.
    fn recorded(&self) -> String {
        match &self.rule {
            Some(rule) => Violation {
                path: self.path.clone(),
                message: format!("breaks {rule} (the value is not recorded)"),
                rule: None,
            }
            .to_string(),
            None => self.to_string(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // An empty pointer is the root; spell it out so the message never
        // starts with a bare colon.
        let path = if self.path.is_empty() {
            "(root)"
        } else {
            &self.path
        };
        write!(f, "{path}: {}", self.message)
    }
}

fn join(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(Violation::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Every refusal of this module. `code()` is the stable identifier; the
/// Display text is for humans and may be reworded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// The object does not match its schema (or, for the few identity rules
    /// JSON Schema cannot express, such as unique ContextIDs, their rule).
    #[error("invalid {kind}: {}", join(violations))]
    InvalidContext {
        kind: ContextKind,
        violations: Vec<Violation>,
    },
    /// An embedded schema failed to load: a build defect, never the caller's
    /// fault, reported instead of panicking.
    #[error("schema for {kind} unavailable: {detail}")]
    SchemaUnavailable { kind: ContextKind, detail: String },
    /// R11: the caller is not the agent the context belongs to.
    #[error("agent {agent:?} may not use this context: {detail}")]
    NotYourContext { agent: String, detail: String },
    /// R11: only the master run updates the TaskContext.
    #[error("only the master run {master:?} may update the TaskContext, not {run:?}")]
    NotMaster { run: String, master: String },
    /// R12: a dependency is not returned and accepted yet.
    #[error("dependency {dependency:?} is not satisfied: {status}")]
    DependencyPending { dependency: String, status: String },
    /// R12: sync interaction allows one outstanding subtask at a time.
    #[error("subtask {outstanding} (agent {agent:?}) is still outstanding and sync interaction waits for it")]
    SubtaskOutstanding { outstanding: String, agent: String },
    /// The SubTaskID is already outstanding in another subtask, so a return
    /// could not be matched to one of them.
    #[error("SubTaskID {sub_task_id:?} is already outstanding as {outstanding}")]
    DuplicateSubtask {
        sub_task_id: String,
        outstanding: String,
    },
    #[error("task {task:?} is already open (master run {master:?})")]
    TaskExists { task: String, master: String },
    #[error("unknown subtask {subtask:?}")]
    UnknownSubtask { subtask: String },
    #[error("subtask {subtask} was already returned")]
    AlreadyReturned { subtask: String },
    /// R15: the bytes do not hash to the digest in the reference.
    #[error(
        "content of {uri} does not match its digest (expected sha256:{expected}, got {actual})"
    )]
    DigestMismatch {
        uri: String,
        expected: String,
        actual: String,
    },
    /// R15: the content's TTL has passed; the digest stays in the ledger.
    #[error("content of {uri} expired at {}; its digest stays in the ledger", crate::model::time::rfc3339_ms(*.expired_at))]
    Expired { uri: String, expired_at: u64 },
    /// R15: the reader was never sent this reference.
    #[error("agent {agent:?} was never sent {uri}")]
    NotGranted { agent: String, uri: String },
    #[error("bad ContextURI {uri:?}: {reason}")]
    BadUri { uri: String, reason: String },
    /// R15: the ledger holds no BlobPut for this reference in this task.
    #[error("no content was put for {uri} in this task")]
    UnknownBlob { uri: String },
    /// R15: the ledger says the content is live but the store has no bytes.
    #[error("content of {uri} is missing from the store before its expiry")]
    BlobMissing { uri: String },
    #[error("subtask {subtask} was already evaluated")]
    AlreadyEvaluated { subtask: String },
    #[error("subtask {subtask} has not been returned yet")]
    NotReturned { subtask: String },
    /// The task would hold more context than it may.
    #[error("task {task:?} would hold {bytes} bytes of AgentContext, over the limit of {limit}")]
    ContextBudget {
        task: String,
        bytes: u64,
        limit: u64,
    },
    /// An id the caller chose is not a valid name.
    #[error(
        "{what} {name:?} is not a valid name (letters, digits, - _ . :; 1 to 128; never . or ..)"
    )]
    InvalidName { what: &'static str, name: String },
    /// The task's master run is closed: the task takes no more operations.
    #[error("run {run:?} is closed; the task's operations ended with it")]
    RunClosed { run: String },
    /// R15: a reference's MediaType is not the media type its content was
    /// stored with.
    #[error("{uri} (at {at}) is referenced as {referenced:?} but was stored as {stored:?}")]
    MediaTypeMismatch {
        uri: String,
        at: String,
        referenced: String,
        stored: String,
    },
}

impl ContextError {
    /// Stable snake_case code of the refusal.
    pub fn code(&self) -> Code {
        match self {
            ContextError::InvalidContext { .. } => Code::InvalidContext,
            ContextError::SchemaUnavailable { .. } => Code::SchemaUnavailable,
            ContextError::NotYourContext { .. } => Code::NotYourContext,
            ContextError::NotMaster { .. } => Code::NotMaster,
            ContextError::DependencyPending { .. } => Code::DependencyPending,
            ContextError::SubtaskOutstanding { .. } => Code::SubtaskOutstanding,
            ContextError::DuplicateSubtask { .. } => Code::DuplicateSubtask,
            ContextError::TaskExists { .. } => Code::TaskExists,
            ContextError::UnknownSubtask { .. } => Code::UnknownSubtask,
            ContextError::AlreadyReturned { .. } => Code::AlreadyReturned,
            ContextError::DigestMismatch { .. } => Code::DigestMismatch,
            ContextError::Expired { .. } => Code::Expired,
            ContextError::NotGranted { .. } => Code::NotGranted,
            ContextError::BadUri { .. } => Code::BadUri,
            ContextError::UnknownBlob { .. } => Code::UnknownBlob,
            ContextError::BlobMissing { .. } => Code::BlobMissing,
            ContextError::AlreadyEvaluated { .. } => Code::AlreadyEvaluated,
            ContextError::NotReturned { .. } => Code::NotReturned,
            ContextError::RunClosed { .. } => Code::RunClosed,
            ContextError::InvalidName { .. } => Code::InvalidName,
            ContextError::ContextBudget { .. } => Code::LimitExceeded,
            ContextError::MediaTypeMismatch { .. } => Code::MediaTypeMismatch,
        }
    }

    /// The refusal as the log records it, in plaintext where the task has
    /// no key yet (its `open_task` refused): what was wrong, where, never
    /// the caller's values (the Display text, answered to the caller, may
    /// quote them).
    pub fn recorded(&self) -> String {
        match self {
            ContextError::InvalidContext { kind, violations } => format!(
                "invalid {kind}: {}",
                violations
                    .iter()
                    .map(Violation::recorded)
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            other => other.to_string(),
        }
    }

    /// Shorthand for a single-violation `invalid_context`.
    pub(crate) fn invalid(kind: ContextKind, path: &str, message: impl Into<String>) -> Self {
        ContextError::InvalidContext {
            kind,
            violations: vec![Violation {
                path: path.to_owned(),
                message: message.into(),
                rule: None,
            }],
        }
    }
}
