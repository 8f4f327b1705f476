//! What one caller may ask of the ledger at once, in one place. Each limit
//! keeps the memory and the log records of one operation bounded by a small
//! multiple of what the caller sent, and going over one is the caller's
//! fault: a refusal naming the limit, after which the next operation
//! applies as usual. The table of limits in docs/api.md lists these.

use crate::codes::Code;

/// Longest `apply` line (and request body over HTTP, and WebSocket
/// message), without its line end.
pub const MAX_LINE_BYTES: usize = 4 * 1024 * 1024;

/// Bytes all request bodies being read and WebSocket messages being
/// assembled may hold together, whoever sends them (`--body-budget-bytes`):
/// past it a request is answered `overloaded` (HTTP 503, `Retry-After`)
/// instead of read, so slow senders cannot pin the server's memory.
pub const BODY_BUDGET_BYTES: usize = 64 * 1024 * 1024;

/// Operations in one ndjson request body (refused `limit_exceeded`, HTTP
/// 413, nothing applied): answers are held until the body's group is
/// durable, so their number is bounded, not only the body's bytes.
pub const MAX_OPS_PER_BODY: usize = 4096;

/// Event streams (SSE and subscribed WebSockets) one server follows at
/// once; more are answered `overloaded` (HTTP 503).
pub const MAX_STREAMS: usize = 1024;

/// Largest record the log takes (refused `too_large`).
pub use crate::codec::MAX_RECORD_BYTES;

/// Largest artifact or blob (refused `too_large`).
pub const MAX_BLOB_BYTES: usize = 16 * 1024 * 1024;

/// Labels one run may carry: its area, what its reads brought in and what
/// its close adds (refused `too_many_labels`). Every artifact a run
/// publishes carries all of them, so this bounds what labels cost per
/// artifact.
pub const MAX_LABELS_PER_RUN: usize = 64;

/// Longest label, in bytes (refused `invalid_label`).
pub const MAX_LABEL_BYTES: usize = 128;

/// Artifacts one `close_run` publishes (refused `limit_exceeded`).
pub const MAX_ARTIFACTS_PER_CLOSE: usize = 256;

/// Events one agent version listens to, and events it emits (refused
/// `limit_exceeded`): a dispatch writes a record per event and listener.
pub const MAX_LISTENS_PER_VERSION: usize = 64;
pub const MAX_EMITS_PER_VERSION: usize = 64;

/// Artifacts one emitted event exposes (refused `limit_exceeded`).
pub const MAX_ARTIFACTS_PER_EMIT: usize = 64;

/// Scopes in one `access` list (refused `limit_exceeded`).
pub const MAX_ACCESS_SCOPES: usize = 64;

/// Longest scope, in bytes (refused `invalid_scope`).
pub const MAX_SCOPE_BYTES: usize = 200;

/// Bytes of AgentContext (compact JSON) one task may hold, sent and
/// returned, across its subtasks (refused `limit_exceeded`): the task's
/// state holds them all and is read by every exchange.
pub const MAX_TASK_CONTEXT_BYTES: u64 = 64 * 1024 * 1024;

/// Listener records the dispatcher writes in one step: a run whose event
/// many agents listen to is dispatched in steps of this many.
pub const DISPATCH_STEP: usize = 64;

/// A count over its limit, as a refusal.
pub fn exceeded(what: &str, count: usize, limit: usize) -> crate::codes::Refusal {
    crate::codes::Refusal::new(
        Code::LimitExceeded,
        format!("{what}: {count}, over the limit of {limit}"),
    )
}

/// Refuse a count over its limit.
pub fn check_count(what: &str, count: usize, limit: usize) -> Result<(), crate::codes::Refusal> {
    if count > limit {
        Err(exceeded(what, count, limit))
    } else {
        Ok(())
    }
}
