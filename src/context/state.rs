//! The task state the rules decide over, the events they decide, and
//! `evolve`, which folds events into state.
//!
//! Event sourcing: a `decide_*` function (see [`super::rules`]) checks a
//! request against the current [`TaskState`] and returns one
//! [`ContextEvent`]; the engine appends that event to its log and applies it
//! with [`evolve`]. Rebuilding a task is `events.iter().fold(None, evolve)`.
//! `evolve` never refuses and never panics: every event in the log was
//! already decided, and an event that does not fit (wrong task, unknown
//! subtask) is ignored rather than trusted.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::ContextError;
use super::evaluation::Layer1;
use super::serde_bin::{json_in_binary, opt_json_in_binary};
use super::types::{AgentContext, TaskContext};
use super::uri::{BlobMeta, Grants};
use super::UnixMillis;

/// The draft's two interaction modes (R12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// SynchronousContextInteraction: strictly one subtask at a time.
    Sync,
    /// AsynchronousContextInteraction: independent subtasks concurrently.
    Async,
}

impl Mode {
    /// The mode as the wire spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Sync => "sync",
            Mode::Async => "async",
        }
    }
}

/// The master's verdict on a returned subtask (layer two of R13).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Accepted,
    Rejected,
}

/// The master's decision with its stated reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub outcome: Outcome,
    pub reason: String,
}

/// One AgentContext sent to one invoked agent, and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Subtask {
    /// `s1`, `s2`, … in the order sent.
    pub id: String,
    /// The invoked agent, by the sent context's `AgentName` (the CLI's
    /// `agent`); the AgentID is checked on return as well.
    pub agent: String,
    pub mode: Mode,
    #[serde(with = "json_in_binary")]
    pub sent: AgentContext,
    #[serde(with = "opt_json_in_binary")]
    pub returned: Option<AgentContext>,
    pub layer1: Option<Layer1>,
    pub decision: Option<Decision>,
}

impl Subtask {
    /// Sent and not yet returned.
    pub fn is_outstanding(&self) -> bool {
        self.returned.is_none()
    }
}

/// Everything the context rules need to know about one task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskState {
    pub task: String,
    /// The master run: the only one that may update the TaskContext, and a
    /// reader of every blob of the task.
    pub master_run: String,
    #[serde(with = "json_in_binary")]
    pub task_context: TaskContext,
    pub subtasks: Vec<Subtask>,
    /// AgentName → ContextURIs it was sent.
    pub grants: Grants,
    /// ContextURI → what the ledger keeps about the content (outlives it).
    pub blobs: BTreeMap<String, BlobMeta>,
    /// Compact JSON bytes of every AgentContext sent and returned so far
    /// (bounded by `limits::MAX_TASK_CONTEXT_BYTES`).
    pub context_bytes: u64,
}

/// Compact JSON size of a context: what a task's budget counts.
pub fn context_size(ctx: &AgentContext) -> u64 {
    serde_json::to_vec(ctx).map_or(0, |v| v.len() as u64)
}

impl TaskState {
    pub fn subtask(&self, id: &str) -> Option<&Subtask> {
        self.subtasks.iter().find(|s| s.id == id)
    }

    /// Size of a blob put in this task, for byte accounting.
    pub fn blob_size(&self, uri: &str) -> Option<u64> {
        self.blobs.get(uri).map(|b| b.size)
    }

    /// Fold one event in place (see [`evolve`]; `TaskOpened` is ignored
    /// here because the state already exists).
    pub fn evolve(&mut self, event: &ContextEvent) {
        if event.task() != self.task {
            return;
        }
        match event {
            ContextEvent::TaskOpened { .. }
            | ContextEvent::BlobRead { .. }
            | ContextEvent::Refused { .. } => {}
            ContextEvent::ContextSent {
                subtask,
                agent,
                mode,
                context,
                ..
            } => {
                // A record applied twice must not make two subtasks.
                if self.subtask(subtask).is_some() {
                    return;
                }
                self.context_bytes += context_size(context);
                let granted = self.grants.entry(agent.clone()).or_default();
                granted.extend(context.context_items.iter().map(|i| i.context_uri.clone()));
                self.subtasks.push(Subtask {
                    id: subtask.clone(),
                    agent: agent.clone(),
                    mode: *mode,
                    sent: context.clone(),
                    returned: None,
                    layer1: None,
                    decision: None,
                });
            }
            ContextEvent::ContextReturned {
                subtask,
                context,
                layer1,
                ..
            } => {
                if let Some(s) = self.subtasks.iter_mut().find(|s| &s.id == subtask) {
                    if s.returned.is_none() {
                        self.context_bytes += context_size(context);
                    }
                    s.returned = Some(context.clone());
                    s.layer1 = Some(layer1.clone());
                }
            }
            ContextEvent::Evaluated {
                subtask, decision, ..
            } => {
                if let Some(s) = self.subtasks.iter_mut().find(|s| &s.id == subtask) {
                    s.decision = Some(decision.clone());
                }
            }
            ContextEvent::TaskUpdated { task_context, .. } => {
                self.task_context = task_context.clone();
            }
            ContextEvent::BlobPut {
                uri,
                digest,
                size,
                media_type,
                expires_at,
                ..
            } => {
                // Putting the same bytes again never shortens the life of a
                // reference someone may already hold.
                let expires_at = self
                    .blobs
                    .get(uri)
                    .map_or(*expires_at, |old| old.expires_at.max(*expires_at));
                self.blobs.insert(
                    uri.clone(),
                    BlobMeta {
                        digest: digest.clone(),
                        size: *size,
                        media_type: media_type.clone(),
                        expires_at,
                    },
                );
            }
        }
    }
}

/// Fold one event into the state of its task: `TaskOpened` creates it, every
/// other event updates an existing state (and is ignored without one).
pub fn evolve(state: Option<TaskState>, event: &ContextEvent) -> Option<TaskState> {
    match (state, event) {
        (
            None,
            ContextEvent::TaskOpened {
                task,
                master_run,
                task_context,
                ..
            },
        ) => Some(TaskState {
            task: task.clone(),
            master_run: master_run.clone(),
            task_context: task_context.clone(),
            subtasks: Vec::new(),
            grants: Grants::new(),
            blobs: BTreeMap::new(),
            context_bytes: 0,
        }),
        (Some(mut s), e) => {
            s.evolve(e);
            Some(s)
        }
        (None, _) => None,
    }
}

/// Everything the context rules record. All variants own plain data, and
/// contexts are embedded so that the trail alone reproduces every decision.
/// `at` is the decision time (unix milliseconds) passed to the rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContextEvent {
    /// The master run opened a task with its TaskContext.
    TaskOpened {
        task: String,
        master_run: String,
        #[serde(with = "json_in_binary")]
        task_context: TaskContext,
        at: UnixMillis,
    },
    /// One AgentContext delivered to one agent: subtask `subtask` begins.
    ContextSent {
        task: String,
        subtask: String,
        agent: String,
        mode: Mode,
        #[serde(with = "json_in_binary")]
        context: AgentContext,
        at: UnixMillis,
    },
    /// The agent returned its updated context; layer one as computed then.
    ContextReturned {
        task: String,
        subtask: String,
        agent: String,
        #[serde(with = "json_in_binary")]
        context: AgentContext,
        layer1: Layer1,
        at: UnixMillis,
    },
    /// The master's decision on a returned subtask (layer two).
    Evaluated {
        task: String,
        subtask: String,
        decision: Decision,
        at: UnixMillis,
    },
    /// The master run replaced the TaskContext.
    TaskUpdated {
        task: String,
        run: String,
        #[serde(with = "json_in_binary")]
        task_context: TaskContext,
        at: UnixMillis,
    },
    /// Content stored by reference (the bytes are not in the ledger).
    BlobPut {
        task: String,
        uri: String,
        /// `sha256:<hex>`.
        digest: String,
        size: u64,
        media_type: String,
        expires_at: UnixMillis,
        at: UnixMillis,
    },
    /// A granted, verified read of referenced content.
    BlobRead {
        task: String,
        reader: String,
        uri: String,
        digest: String,
        at: UnixMillis,
    },
    /// A refused request, kept for the audit trail.
    Refused {
        task: String,
        /// The operation refused, e.g. `return_context`.
        op: String,
        code: String,
        message: String,
        /// Who asked, when known (an agent name or a run).
        agent: Option<String>,
        at: UnixMillis,
    },
}

impl ContextEvent {
    /// The task the event belongs to.
    pub fn task(&self) -> &str {
        match self {
            ContextEvent::TaskOpened { task, .. }
            | ContextEvent::ContextSent { task, .. }
            | ContextEvent::ContextReturned { task, .. }
            | ContextEvent::Evaluated { task, .. }
            | ContextEvent::TaskUpdated { task, .. }
            | ContextEvent::BlobPut { task, .. }
            | ContextEvent::BlobRead { task, .. }
            | ContextEvent::Refused { task, .. } => task,
        }
    }

    /// Every kind's name, as [`Self::kind`] gives them.
    pub const KINDS: [&'static str; 8] = [
        "task_opened",
        "context_sent",
        "context_returned",
        "context_evaluated",
        "task_updated",
        "blob_put",
        "blob_read",
        "context_refused",
    ];

    /// The trail's name for this kind of exchange.
    pub fn kind(&self) -> &'static str {
        match self {
            ContextEvent::TaskOpened { .. } => "task_opened",
            ContextEvent::ContextSent { .. } => "context_sent",
            ContextEvent::ContextReturned { .. } => "context_returned",
            ContextEvent::Evaluated { .. } => "context_evaluated",
            ContextEvent::TaskUpdated { .. } => "task_updated",
            ContextEvent::BlobPut { .. } => "blob_put",
            ContextEvent::BlobRead { .. } => "blob_read",
            ContextEvent::Refused { .. } => "context_refused",
        }
    }

    /// The `Refused` event recording `error`.
    pub fn refused(
        task: &str,
        op: &str,
        error: &ContextError,
        agent: Option<&str>,
        at: UnixMillis,
    ) -> Self {
        ContextEvent::Refused {
            task: task.to_owned(),
            op: op.to_owned(),
            code: error.code().as_str().to_owned(),
            message: error.recorded(),
            agent: agent.map(str::to_owned),
            at,
        }
    }
}
