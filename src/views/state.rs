//! The state the views hold, one struct per kind of key.

use crate::model::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentState {
    pub agent: String,
    pub current: u32,
    pub scope: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    pub run: String,
    pub agent: String,
    pub version: u32,
    pub scope: String,
    pub root: Option<String>,
    pub hop: Option<u32>,
    pub trigger: Option<Trigger>,
    pub legacy_trigger: Option<String>,
    /// Sorted, without duplicates.
    pub labels: Vec<String>,
    /// `None` while the run is open.
    pub status: Option<RunStatus>,
    /// The step number the next trail step of this run gets.
    pub next_step: u32,
    /// Reads (granted or refused) count as tool calls (R8).
    pub tool_calls: u32,
    pub artifacts: Vec<ArtifactRef>,
    /// What its close published; artifact refs are named, not copied (they
    /// are in `artifacts`), to keep the state small.
    pub published: Vec<PublishedEvent>,
    pub withheld: Option<Withheld>,
    /// Log position of the closing record.
    pub closed_at: Option<(u32, u64)>,
    pub dispatched: bool,
    /// `event id/agent` pairs already refused, so a redelivery records nothing twice.
    pub refused_listeners: Vec<String>,
    /// Where the run's first `TRAIL_PAGE` steps sit in the log. Nearly every
    /// run fits, so its trail costs no view write of its own; later pages
    /// have keys of their own.
    pub trail: TrailPage,
}

/// An agent event a run published, as the views keep it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedEvent {
    pub event_id: String,
    pub event: String,
    pub context: String,
    pub artifact_names: Vec<String>,
}

impl PublishedEvent {
    pub fn from_out(e: &AgentEventOut) -> Self {
        Self {
            event_id: e.event_id.clone(),
            event: e.event.clone(),
            context: e.context.clone(),
            artifact_names: e.artifacts.iter().map(|a| a.name.clone()).collect(),
        }
    }
}

impl RunState {
    /// The events its close published, with their artifacts' refs.
    pub fn published_events(&self) -> Vec<AgentEventOut> {
        self.published
            .iter()
            .map(|p| AgentEventOut {
                event_id: p.event_id.clone(),
                event: p.event.clone(),
                context: p.context.clone(),
                artifacts: p
                    .artifact_names
                    .iter()
                    .filter_map(|n| self.artifacts.iter().find(|a| &a.name == n).cloned())
                    .collect(),
            })
            .collect()
    }

    pub fn is_open(&self) -> bool {
        self.status.is_none()
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
    pub event: LedgerEvent,
}
