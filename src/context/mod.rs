//! Context exchange after the IETF draft "Agent Context Interaction
//! Optimizations" (draft-chang-agentproto-context-interaction-00): the
//! TaskContext and AgentContext objects, their JSON Schemas, and the pure
//! rules R11–R15 of DESIGN.md over a task's state.
//!
//! This module is the functional core for context exchange: no IO, no
//! clock. The shell validates nothing itself; it calls a `decide_*`
//! function, appends the returned [`ContextEvent`] (or, on refusal, a
//! [`ContextEvent::refused`]) to the log, and folds it into the state with
//! [`evolve`].
//!
//! * [`types`] — serde types with the draft's member names;
//! * [`schema`] — validation against `schemas/*.json` (the only structural
//!   validator);
//! * [`error`] — refusals with stable codes;
//! * [`state`] — task state, events, `evolve`;
//! * [`rules`] — the decide functions (R11 isolation, R12 ordering, R13
//!   layered evaluation, R15 blob reads);
//! * [`evaluation`] — layer one (R13); [`compression`] — R14;
//! * [`uri`] — `cas://sha256/…` references and the read check (R15);
//! * [`accounting`] — inline vs referenced bytes, tokens saved.

pub mod accounting;
pub mod compression;
pub mod error;
pub mod evaluation;
pub mod rules;
pub mod schema;
mod serde_bin;
pub mod state;
pub mod types;
pub mod uri;

#[cfg(test)]
mod tests;

/// Milliseconds since the Unix epoch, as passed to every rule that needs the
/// time.
pub type UnixMillis = u64;

pub use accounting::{account, ContextAccounting, BYTES_PER_TOKEN};
pub use compression::{check_compression, parse_field_path, PathSegment};
pub use error::{ContextError, ContextKind, Violation};
pub use evaluation::{cited_context_uris, layer_one, Layer1, Resolve};
pub use rules::{
    decide_blob_read, decide_evaluate, decide_open, decide_put_blob, decide_return, decide_send,
    decide_update_task, get_context, require_open_master,
};
pub use schema::{
    validate_agent_context, validate_task_context, AGENT_CONTEXT_SCHEMA, TASK_CONTEXT_SCHEMA,
};
pub use state::{context_size, evolve, ContextEvent, Decision, Mode, Outcome, Subtask, TaskState};
pub use types::{
    is_passing_status, AgentContext, CompressionPolicy, ContextItem, ContextType, CriterionResult,
    EvaluationPolicy, EvaluationResult, GoalStatus, ItemStateUpdate, KeyInformation, Priority,
    SuccessCriterion, TaskContext, TodoItem,
};
pub use uri::{check_blob_read, parse_context_uri, sha256_hex, BlobMeta, ContextUri, Grants};
