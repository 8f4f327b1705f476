//! A run as the rules see it: what it is, where it stands in its chain,
//! what it has read and published. Folded from its trail's events by
//! [`Run::opened`] and [`Run::evolve`]; the views keep it beside where its
//! steps sit in the log, the rules and the tests take it as it is.

use super::event::*;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
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
    pub dispatched: bool,
    /// `event id/agent` pairs already refused, so a redelivery records
    /// nothing twice (see `ids::refused_listener_key`).
    pub refused_listeners: Vec<String>,
}

/// An agent event a run published, as its state keeps it.
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

/// Sorted union of label lists (R9: labels only ever add up).
pub fn label_union(lists: &[&[String]]) -> Vec<String> {
    let mut v: Vec<String> = lists.iter().flat_map(|l| l.iter().cloned()).collect();
    v.sort();
    v.dedup();
    v
}

impl Run {
    /// The run its opening record (trail step `step`) creates.
    pub fn opened(e: &RunOpened, step: u32) -> Self {
        Run {
            run: e.run.clone(),
            agent: e.agent.clone(),
            version: e.version,
            scope: e.scope.clone(),
            root: e.root.clone(),
            hop: e.hop,
            trigger: e.trigger.clone(),
            legacy_trigger: e.legacy_trigger.clone(),
            labels: label_union(&[&e.labels]),
            status: None,
            next_step: step + 1,
            tool_calls: 0,
            artifacts: Vec::new(),
            published: Vec::new(),
            withheld: None,
            dispatched: false,
            refused_listeners: Vec::new(),
        }
    }

    /// Fold in one later step of its trail. Never refuses: the event was
    /// decided before it was recorded.
    pub fn evolve(&mut self, step: u32, event: &LedgerEvent) {
        self.next_step = self.next_step.max(step + 1);
        match event {
            LedgerEvent::ArtifactRead(e) => {
                self.labels = label_union(&[&self.labels, &e.labels_after]);
                self.tool_calls += 1;
            }
            LedgerEvent::ReadRefused(_) => self.tool_calls += 1,
            LedgerEvent::RunClosed(e) => {
                self.status = Some(e.status);
                self.labels = label_union(&[&self.labels, &e.labels]);
                self.artifacts = e.artifacts.clone();
                self.published = e.published.iter().map(PublishedEvent::from_out).collect();
                self.withheld = e.withheld.clone();
            }
            LedgerEvent::ListenerRefused(e) => {
                let k = super::ids::refused_listener_key(&e.event_id, &e.agent);
                if !self.refused_listeners.contains(&k) {
                    self.refused_listeners.push(k);
                }
            }
            LedgerEvent::RunDispatched(_) => self.dispatched = true,
            LedgerEvent::AgentPublished(_)
            | LedgerEvent::RunOpened(_)
            | LedgerEvent::Context(_)
            | LedgerEvent::SealedContext(_)
            | LedgerEvent::ContextErased(_)
            | LedgerEvent::Forbidden(_)
            | LedgerEvent::TokenIssued(_)
            | LedgerEvent::TokenRevoked(_) => {}
        }
    }

    pub fn is_open(&self) -> bool {
        self.status.is_none()
    }

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
}
