//! The state the views hold, one struct per kind of key.

use crate::model::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentState {
    pub agent: String,
    pub current: u32,
    pub scope: String,
}

/// A bearer token as the views keep it, found by its SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenState {
    pub id: String,
    pub principal: String,
    pub scopes: Vec<String>,
    pub issued_at_ms: u64,
    pub expires_at_ms: Option<u64>,
    pub revoked_at_ms: Option<u64>,
}

/// A run as the views keep it: the domain state the rules read, and where
/// its closing record and its first trail steps sit in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    pub state: Run,
    /// Log position of the closing record.
    pub closed_at: Option<(u32, u64)>,
    /// Where the run's first `TRAIL_PAGE` steps sit in the log. Nearly every
    /// run fits, so its trail costs no view write of its own; later pages
    /// have keys of their own.
    pub trail: TrailPage,
    /// The principal that opened the run: a task whose master run this is
    /// has that principal as its master.
    pub opened_by: String,
}

impl std::ops::Deref for RunState {
    type Target = Run;
    fn deref(&self) -> &Run {
        &self.state
    }
}

impl std::ops::DerefMut for RunState {
    fn deref_mut(&mut self) -> &mut Run {
        &mut self.state
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainState {
    pub root: String,
    /// Runs in the order they were opened.
    pub runs: Vec<String>,
    pub max_hop: u32,
}

impl ChainState {
    /// The chain of a run that is its own root, while no other run has
    /// joined it. Storing it would cost a view write per opened root — half
    /// of what opening a run writes.
    pub fn of_root_alone(run: &RunState) -> Option<Self> {
        (run.root.as_deref() == Some(run.run.as_str())).then(|| ChainState {
            root: run.run.clone(),
            runs: vec![run.run.clone()],
            max_hop: run.hop.unwrap_or(0),
        })
    }
}

/// How far the checkpoints of a partition reach, and the chain head there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointMark {
    pub to: u64,
    pub head: [u8; 32],
}

/// What the trail view keeps of a step: where its record sits in the log
/// (the log holds the record itself) and a prefix of its body digest, to
/// tell a redelivered record from a conflicting one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TrailPointer {
    pub partition: u32,
    pub offset: u64,
    pub digest8: [u8; 8],
}

/// A page of a run's trail: (step, pointer) in step order.
pub type TrailPage = Vec<(u32, TrailPointer)>;

/// One step of a run's trail as shown: the record and where it sits in the log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrailStep {
    pub step: u32,
    pub partition: u32,
    pub offset: u64,
    pub time_ms: u64,
    pub event_id: String,
    pub writer: String,
    /// The principal whose request caused it.
    pub principal: String,
    /// The span of the request that caused it, when the server exported
    /// one (an MCP tool call).
    pub span: Option<crate::codec::SpanRef>,
    pub event: LedgerEvent,
}
