//! The events the ledger records. Each is one record body in the log; the
//! views are a fold of these and nothing else. Records are self-contained
//! (a run's closing record says what it published and what it withheld), so
//! replaying the log never has to re-decide anything (R1).
//!
//! These types go through bincode: no `skip_serializing_if`, `flatten` or
//! tagged enums here, they would break the non-self-describing wire format.

use serde::{Deserialize, Serialize};

/// How many hops a chain may go: a run at this hop runs but publishes no events (R2).
pub const HOP_LIMIT: u32 = 8;

/// The built-in artifact every run may publish.
pub const FINAL_ANSWER: &str = "final_answer";

/// One event an agent version emits, and which artifacts it exposes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EmitDecl {
    pub event: String,
    pub context: String,
    pub artifacts: Vec<String>,
}

/// One loop closed by a published version (R10), as shown to the publisher.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopWarning {
    /// The loop, starting and ending with the published agent; agents
    /// outside the publisher's access are shown as
    /// [`crate::loops::OUTSIDE_ACCESS`].
    #[serde(rename = "loop")]
    pub loop_agents: Vec<String>,
    /// The loop as one line: `developer → reviewer → developer`.
    pub text: String,
    /// Set for an agent that listens to its own event.
    pub note: Option<String>,
}

/// Everything a publish learns about the loops it closes (the loop
/// search's report), kept with the version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LoopCheck {
    /// Loops through the published agent, shortest first, then by name.
    pub warnings: Vec<LoopWarning>,
    /// A bound stopped the search: there may be loops beyond those named.
    pub may_be_more: bool,
    /// False when the work bound stopped the search before it could tell
    /// whether the version closes any loop at all.
    pub checked_in_full: bool,
    /// A summary line whenever the report is not the whole story.
    pub text: Option<String>,
}

impl LoopCheck {
    /// True when the version was checked in full and closes no loop.
    pub fn is_clean(&self) -> bool {
        self.warnings.is_empty() && self.checked_in_full && !self.may_be_more
    }
}

/// A published agent version (registry topic).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentVersion {
    pub agent: String,
    pub version: u32,
    pub scope: String,
    pub listens: Vec<String>,
    pub emits: Vec<EmitDecl>,
    /// Scopes whose agents the publisher may see by name.
    pub access: Vec<String>,
    pub tool_budget: Option<u32>,
    pub loop_check: LoopCheck,
}

/// What the ledger keeps of an artifact: never its bytes (R8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRef {
    pub name: String,
    /// sha256 of the bytes: their address in the content store. Kept as
    /// bytes (the ref and the digest are two spellings of it); JSON shows
    /// it as `sha256:<hex>`.
    #[serde(with = "sha256_text_in_json")]
    pub sha256: [u8; 32],
    pub size: u64,
    pub source_run: String,
    pub labels: Vec<String>,
}

/// Raw bytes in bincode, `sha256:<hex>` in human-readable formats.
mod sha256_text_in_json {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8; 32], s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&format!("sha256:{}", hex::encode(v)))
        } else {
            serde::Serialize::serialize(v, s)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<[u8; 32], D::Error> {
        if d.is_human_readable() {
            let s = String::deserialize(d)?;
            let hexpart = s.strip_prefix("sha256:").unwrap_or(&s);
            let mut out = [0u8; 32];
            hex::decode_to_slice(hexpart, &mut out).map_err(D::Error::custom)?;
            Ok(out)
        } else {
            <[u8; 32]>::deserialize(d)
        }
    }
}

impl ArtifactRef {
    /// `cas://sha256/<hex>`: where the content store keeps the bytes.
    pub fn content_ref(&self) -> String {
        super::cas::ContentRef::for_sha256(&self.sha256).to_string()
    }
    /// `sha256:<hex>`
    pub fn digest(&self) -> String {
        super::cas::ContentRef::for_sha256(&self.sha256).digest()
    }
}

/// The event that opened a listener run: name, id, and its artifact contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trigger {
    pub event_id: String,
    pub event: String,
    pub context: String,
    pub source_run: String,
    /// The artifacts the event exposes: the only names the listener may read.
    pub artifacts: Vec<ArtifactRef>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOpened {
    pub run: String,
    pub agent: String,
    pub version: u32,
    /// The agent's scope in that version (its runs carry `area:<scope>`).
    pub scope: String,
    /// Chain position, recorded once here and never recomputed (R1).
    /// `None` for runs an older worker opened without recording it (R6).
    pub root: Option<String>,
    pub hop: Option<u32>,
    pub trigger: Option<Trigger>,
    /// Set when an older worker opened the run from this event id (R6).
    pub legacy_trigger: Option<String>,
    pub labels: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRead {
    pub run: String,
    pub artifact: ArtifactRef,
    /// The run's labels after the read: the artifact's labels flow in (R9).
    pub labels_after: Vec<String>,
}

/// A request the caller's principal may not make, kept on the trail of the
/// run it concerned (the principal is on the record's envelope).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forbidden {
    pub run: String,
    pub op: String,
    pub message: String,
}

/// A bearer token the operator issued (registry topic, keyed by its id).
/// Only the token's SHA-256 is kept: the token itself was printed once to
/// whoever issued it and is in no record, view or log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenIssued {
    pub id: String,
    pub sha256: [u8; 32],
    /// The principal it authenticates, as `Principal` spells it.
    pub principal: String,
    pub scopes: Vec<String>,
    /// Unix milliseconds after which it no longer authenticates.
    pub expires_at_ms: Option<u64>,
}

/// A token withdrawn: from its projection on, every instance refuses it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRevoked {
    pub id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadRefused {
    pub run: String,
    pub requested: String,
    pub code: String,
    pub message: String,
}

/// How a run ended. On the wire (JSON) in lower case, as the input spells
/// it; the names of older JSON are still read. bincode numbers the
/// variants, so the stored records are the same either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    #[serde(alias = "Succeeded")]
    Succeeded,
    #[serde(alias = "Failed")]
    Failed,
    #[serde(alias = "Cancelled")]
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "succeeded" => Some(RunStatus::Succeeded),
            "failed" => Some(RunStatus::Failed),
            "cancelled" => Some(RunStatus::Cancelled),
            _ => None,
        }
    }
}

/// An agent event a closing run publishes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentEventOut {
    pub event_id: String,
    pub event: String,
    pub context: String,
    pub artifacts: Vec<ArtifactRef>,
}

/// Why a closing run's declared events were not published. In JSON by
/// its code (`hop_limit`, …), as answers name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WithheldReason {
    /// The run is at the hop limit (R2): names the chain's root and the limit.
    #[serde(alias = "HopLimit")]
    HopLimit { root: String, limit: u32 },
    /// The run was opened without a recorded chain position (R6).
    #[serde(alias = "ChainUnknown")]
    ChainUnknown,
    /// The run did not succeed; a failed run starts nothing downstream.
    #[serde(alias = "NotSucceeded")]
    NotSucceeded { status: RunStatus },
}

impl WithheldReason {
    pub fn code(&self) -> &'static str {
        match self {
            WithheldReason::HopLimit { .. } => "hop_limit",
            WithheldReason::ChainUnknown => "chain_unknown",
            WithheldReason::NotSucceeded { .. } => "not_succeeded",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Withheld {
    pub reason: WithheldReason,
    pub events: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunClosed {
    pub run: String,
    pub status: RunStatus,
    pub summary: String,
    pub artifacts: Vec<ArtifactRef>,
    pub labels: Vec<String>,
    pub published: Vec<AgentEventOut>,
    /// `None` also in closing records written by an older worker: the
    /// dispatcher still withholds for a run whose chain is unknown (R6).
    pub withheld: Option<Withheld>,
}

/// Why the dispatcher did not open a listener. In JSON by its code
/// (`self_listen`, `scope_barrier`), as answers name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// R4: an agent is never started by its own event.
    #[serde(alias = "SelfListen")]
    SelfListen,
    /// R9: the listener's scope does not cover every `area:` of the artifacts.
    #[serde(alias = "ScopeBarrier")]
    ScopeBarrier {
        listener_scope: String,
        areas: Vec<String>,
    },
}

impl RefusalReason {
    pub fn code(&self) -> &'static str {
        match self {
            RefusalReason::SelfListen => "self_listen",
            RefusalReason::ScopeBarrier { .. } => "scope_barrier",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListenerRefused {
    pub source_run: String,
    pub event_id: String,
    pub event: String,
    pub agent: String,
    pub reason: RefusalReason,
}

/// The dispatcher finished with one closed run: advances its durable cursor (R7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunDispatched {
    pub run: String,
    /// Log position of the run's closing record; the cursor moves past it.
    pub closed_partition: u32,
    pub closed_offset: u64,
    pub opened: Vec<String>,
}

/// A context exchange of a task (IETF draft, R11–R15), a step in the trail
/// of the task's master run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextRecord {
    pub master_run: String,
    pub event: crate::context::ContextEvent,
}

/// A context record sealed with its task's key (see `crate::erasure`):
/// in clear only what places it (task, master run, kind); the record
/// itself is `nonce ‖ ciphertext ‖ tag` of its bincode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SealedContext {
    pub master_run: String,
    pub task: String,
    /// The sealed event's kind (`task_opened`, `context_sent`, …).
    pub kind: String,
    /// A blob put: its ContextURI and until when the ledger holds it —
    /// what the ledger keeps of content (refs and deadlines, never bytes),
    /// in clear so the content store's sweep needs no key.
    pub hold: Option<(String, u64)>,
    pub sealed: Vec<u8>,
}

/// A task's context erased: its key deleted, forgotten on request or
/// expired. A step of the master run's trail.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContextErased {
    pub task: String,
    pub master_run: String,
    pub at: u64,
    /// Erased because its time to live ran out (else on request).
    pub expired: bool,
}

/// Every kind of ledger record body. New variants go at the end: bincode
/// numbers them by position.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum LedgerEvent {
    AgentPublished(AgentVersion),
    RunOpened(RunOpened),
    ArtifactRead(ArtifactRead),
    ReadRefused(ReadRefused),
    RunClosed(RunClosed),
    ListenerRefused(ListenerRefused),
    RunDispatched(RunDispatched),
    Context(Box<ContextRecord>),
    /// Added last: bincode numbers variants by position.
    Forbidden(Forbidden),
    TokenIssued(TokenIssued),
    TokenRevoked(TokenRevoked),
    SealedContext(SealedContext),
    ContextErased(ContextErased),
}

impl LedgerEvent {
    /// The run whose trail this event is a step of (None for registry records).
    pub fn trail_run(&self) -> Option<&str> {
        match self {
            LedgerEvent::AgentPublished(_)
            | LedgerEvent::TokenIssued(_)
            | LedgerEvent::TokenRevoked(_) => None,
            LedgerEvent::RunOpened(e) => Some(&e.run),
            LedgerEvent::ArtifactRead(e) => Some(&e.run),
            LedgerEvent::ReadRefused(e) => Some(&e.run),
            LedgerEvent::Forbidden(e) => Some(&e.run),
            LedgerEvent::RunClosed(e) => Some(&e.run),
            LedgerEvent::ListenerRefused(e) => Some(&e.source_run),
            LedgerEvent::RunDispatched(e) => Some(&e.run),
            LedgerEvent::Context(c) => Some(&c.master_run),
            LedgerEvent::SealedContext(c) => Some(&c.master_run),
            LedgerEvent::ContextErased(c) => Some(&c.master_run),
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            LedgerEvent::AgentPublished(_) => "agent_published",
            LedgerEvent::RunOpened(_) => "run_opened",
            LedgerEvent::ArtifactRead(_) => "artifact_read",
            LedgerEvent::ReadRefused(_) => "read_refused",
            LedgerEvent::RunClosed(_) => "run_closed",
            LedgerEvent::ListenerRefused(_) => "listener_refused",
            LedgerEvent::RunDispatched(_) => "run_dispatched",
            LedgerEvent::Context(c) => c.event.kind(),
            LedgerEvent::Forbidden(_) => "forbidden",
            LedgerEvent::TokenIssued(_) => "token_issued",
            LedgerEvent::TokenRevoked(_) => "token_revoked",
            LedgerEvent::SealedContext(c) => crate::context::ContextEvent::KINDS
                .iter()
                .find(|k| **k == c.kind)
                .copied()
                .unwrap_or("context"),
            LedgerEvent::ContextErased(_) => "context_erased",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_written_in_lower_case_and_read_in_either() {
        let closed = serde_json::to_value(WithheldReason::NotSucceeded {
            status: RunStatus::Failed,
        })
        .unwrap();
        assert_eq!(
            closed,
            serde_json::json!({"not_succeeded": {"status": "failed"}})
        );
        // JSON an older build wrote (exports, saved trails) still reads.
        let old: WithheldReason =
            serde_json::from_str(r#"{"NotSucceeded":{"status":"Cancelled"}}"#).unwrap();
        assert_eq!(
            old,
            WithheldReason::NotSucceeded {
                status: RunStatus::Cancelled
            }
        );
        let old: RefusalReason = serde_json::from_str(r#""SelfListen""#).unwrap();
        assert_eq!(old, RefusalReason::SelfListen);
        assert_eq!(
            serde_json::to_value(RefusalReason::SelfListen).unwrap(),
            "self_listen"
        );
    }
}
