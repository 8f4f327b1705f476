//! Publish-time loop warnings (rule R10).
//!
//! When an agent version is published, this module finds every loop between
//! agents that the version closes — agent A feeds agent B when A emits an event
//! that B listens to — and turns them into warnings. A loop is never a reason
//! to refuse a publish (a review loop is a cycle on purpose); the warning is
//! there so that an unintended one is noticed before a chain reaches its hop
//! limit.
//!
//! # API
//!
//! ```text
//! pub struct AgentNode { pub name: String, pub scope: String,
//!                        pub listens: Vec<String>, pub emits: Vec<String> }
//!     AgentNode::new(name, scope, listens, emits) -> AgentNode
//! pub struct AgentIndex { .. }            // current version of every agent
//!     AgentIndex::new() -> AgentIndex
//!     AgentIndex::upsert(&mut self, node: AgentNode) -> Option<AgentNode>
//!     AgentIndex::remove(&mut self, name: &str) -> Option<AgentNode>
//!     AgentIndex::get(&self, name: &str) -> Option<&AgentNode>
//!     AgentIndex::len(&self) -> usize, AgentIndex::is_empty(&self) -> bool
//!     AgentIndex::listeners(&self, event: &str) -> Vec<&str>   // name order
//!     AgentIndex::emitters(&self, event: &str) -> Vec<&str>    // name order
//!     (also FromIterator<AgentNode> and Extend<AgentNode>)
//! pub struct LoopBounds { pub max_loops: usize, pub max_work: u64 }   // Default, unbounded()
//! pub struct LoopWarning { pub loop_agents: Vec<String>, pub text: String,
//!                          pub note: Option<String> }
//! pub struct LoopCheck { pub warnings: Vec<LoopWarning>, pub may_be_more: bool,
//!                         pub checked_in_full: bool, pub text: Option<String> }
//!     LoopCheck::is_clean(&self) -> bool
//! pub fn check_publish(index: &AgentIndex, candidate: &AgentNode,
//!                      access: &[String], bounds: &LoopBounds) -> LoopCheck
//! pub fn scope_within(scope: &str, ancestor: &str) -> bool
//! pub const OUTSIDE_ACCESS: &str = "an agent outside your access";
//! ```
//!
//! The data types derive `Debug, Clone, PartialEq, Eq, Serialize,
//! Deserialize`. In JSON a warning's `loop_agents` is called `loop`, and
//! `note` / the report's `text` are left out when absent, matching the CLI
//! contract: `{"warnings":[{"loop":["reviewer","developer","reviewer"],
//! "text":"reviewer → developer → reviewer"}],"may_be_more":false,
//! "checked_in_full":true}`.
//!
//! # Semantics
//!
//! * The candidate is judged as it will stand: it replaces the agent's current
//!   version in the graph (virtually — the index is never mutated).
//! * Only elementary loops through the candidate are reported; loops among
//!   other agents were not closed by this publish. Agents of every scope are
//!   searched, because a loop is real wherever its agents live.
//! * A candidate that listens to an event it emits is reported as the loop
//!   `[name, name]` with a note: the platform never starts an agent from its
//!   own event, so that trigger never fires.
//! * Loops are ordered by length (edges), then by the sequence of real agent
//!   names, so the same publish always reads the same. Masking happens after
//!   ordering: an agent whose scope is not within one of the publisher's
//!   `access` scopes shows as [`OUTSIDE_ACCESS`]; the published agent is
//!   always named.
//! * Bounds: at most `max(max_loops, 1)` loops are named (the shortest is
//!   always named when any is found), and the search stops once it has done
//!   `max_work` units of work (one unit ≈ one adjacency entry visited). When
//!   either bound stops it, `may_be_more` is set. When the work bound stops it
//!   before a single loop was found, the report says the version was not
//!   checked in full (`checked_in_full == false`). The report's `text` is a
//!   summary line whenever the list is not the whole story.
//!   Memory use is proportional to the work actually done, never to the size
//!   of the agent graph.
//!
//! # How the search works
//!
//! See `search.rs`: a bidirectional, level-by-level BFS grows a forward ball
//! (agents the candidate reaches) and a backward ball (agents that reach the
//! candidate) until the region provably holds every loop up to the length
//! being enumerated; the region is kept as a petgraph graph; once one ball is
//! complete the candidate's strongly connected component is cut out exactly.
//! Loops are then enumerated by iterative deepening on length, DFS in name
//! order with pruning by distance-to-candidate, which yields them directly in
//! report order and lets the search stop at any bound with a correct prefix.

mod search;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// How an agent outside the publisher's access is shown in a warning: the loop
/// and its length are the publisher's to know, the agent's name is not.
pub const OUTSIDE_ACCESS: &str = "an agent outside your access";

/// Separator between agents in a warning's text.
const ARROW: &str = " → ";

/// The parts of an agent version that matter for loops.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AgentNode {
    /// Unique agent name (a new version of an agent keeps its name).
    pub name: String,
    /// The agent's area, a `/`-separated path such as `acme/platform`.
    pub scope: String,
    /// Events that start the agent.
    pub listens: Vec<String>,
    /// Events the agent emits.
    pub emits: Vec<String>,
}

impl AgentNode {
    /// Convenience constructor.
    pub fn new<S: Into<String>>(
        name: impl Into<String>,
        scope: impl Into<String>,
        listens: impl IntoIterator<Item = S>,
        emits: impl IntoIterator<Item = S>,
    ) -> Self {
        AgentNode {
            name: name.into(),
            scope: scope.into(),
            listens: listens.into_iter().map(Into::into).collect(),
            emits: emits.into_iter().map(Into::into).collect(),
        }
    }
}

/// Dense id of an agent in an [`AgentIndex`] (slots are reused after removal).
type AgentId = u32;
/// Dense id of an event name in an [`AgentIndex`].
type EventId = u32;

/// In-memory index of the current version of every agent, maintained
/// incrementally by the engine as versions are published and retired.
///
/// Agents and event names are interned as dense `u32` ids, and every event
/// keeps the sorted ids of the agents that listen to it and that emit it. An
/// agent's successors (listeners of what it emits) and predecessors (emitters
/// of what it listens to) are then read without hashing or comparing a single
/// string — on a 100k-agent registry the loop search is bound by memory
/// accesses, so this is what keeps a publish within its latency target.
/// Ids depend on insertion order, but nothing the search reports does: ties
/// are always broken by name. Not serialisable on purpose: it is a view
/// rebuilt from the log, and a deserialised copy could have maps that
/// disagree with each other.
#[derive(Debug, Clone, Default)]
pub struct AgentIndex {
    by_name: HashMap<String, AgentId>,
    slots: Vec<Option<Slot>>,
    free_slots: Vec<AgentId>,
    event_ids: HashMap<String, EventId>,
    events: Vec<EventEntry>,
    free_events: Vec<EventId>,
}

#[derive(Debug, Clone)]
struct Slot {
    node: AgentNode,
    /// `node.listens` / `node.emits` as event ids, sorted, without duplicates.
    listens: Vec<EventId>,
    emits: Vec<EventId>,
}

#[derive(Debug, Clone, Default)]
struct EventEntry {
    name: String,
    /// Sorted agent ids.
    listeners: Vec<AgentId>,
    emitters: Vec<AgentId>,
}

impl AgentIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `node` the current version of its agent and returns the version
    /// it replaced, if any.
    pub fn upsert(&mut self, node: AgentNode) -> Option<AgentNode> {
        let old = self.remove(&node.name);
        // More than u32::MAX agents cannot fit in memory, so the id never
        // wraps in practice.
        let id = self.free_slots.pop().unwrap_or(self.slots.len() as AgentId);
        let listens = self.intern_all(&node.listens);
        let emits = self.intern_all(&node.emits);
        for &e in &listens {
            sorted_insert(&mut self.events[e as usize].listeners, id);
        }
        for &e in &emits {
            sorted_insert(&mut self.events[e as usize].emitters, id);
        }
        self.by_name.insert(node.name.clone(), id);
        let slot = Some(Slot {
            node,
            listens,
            emits,
        });
        match self.slots.get_mut(id as usize) {
            Some(free) => *free = slot,
            None => self.slots.push(slot),
        }
        old
    }

    /// Removes an agent (e.g. retired) and returns its current version.
    pub fn remove(&mut self, name: &str) -> Option<AgentNode> {
        let id = self.by_name.remove(name)?;
        let slot = self.slots.get_mut(id as usize)?.take()?;
        for &e in &slot.listens {
            sorted_remove(&mut self.events[e as usize].listeners, id);
            self.release_event(e);
        }
        for &e in &slot.emits {
            sorted_remove(&mut self.events[e as usize].emitters, id);
            self.release_event(e);
        }
        self.free_slots.push(id);
        Some(slot.node)
    }

    /// The current version of an agent.
    pub fn get(&self, name: &str) -> Option<&AgentNode> {
        self.by_name.get(name).and_then(|&id| self.node(id))
    }

    /// Number of agents.
    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    /// True when no agent is indexed.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Names of the agents that listen to `event`, in name order.
    pub fn listeners(&self, event: &str) -> Vec<&str> {
        self.names_of(event, |entry| &entry.listeners)
    }

    /// Names of the agents that emit `event`, in name order.
    pub fn emitters(&self, event: &str) -> Vec<&str> {
        self.names_of(event, |entry| &entry.emitters)
    }

    fn names_of(&self, event: &str, ids: impl Fn(&EventEntry) -> &Vec<AgentId>) -> Vec<&str> {
        let mut names: Vec<&str> = match self.event_ids.get(event) {
            Some(&e) => ids(&self.events[e as usize])
                .iter()
                .filter_map(|&id| self.node(id))
                .map(|node| node.name.as_str())
                .collect(),
            None => Vec::new(),
        };
        names.sort_unstable();
        names
    }

    fn node(&self, id: AgentId) -> Option<&AgentNode> {
        self.slots
            .get(id as usize)
            .and_then(Option::as_ref)
            .map(|slot| &slot.node)
    }

    fn slot(&self, id: AgentId) -> Option<&Slot> {
        self.slots.get(id as usize).and_then(Option::as_ref)
    }

    fn agent_id(&self, name: &str) -> Option<AgentId> {
        self.by_name.get(name).copied()
    }

    fn event_id(&self, event: &str) -> Option<EventId> {
        self.event_ids.get(event).copied()
    }

    /// Sorted agent ids listening to / emitting `event`.
    fn listener_ids(&self, event: EventId) -> &[AgentId] {
        self.events
            .get(event as usize)
            .map_or(&[], |entry| &entry.listeners)
    }

    fn emitter_ids(&self, event: EventId) -> &[AgentId] {
        self.events
            .get(event as usize)
            .map_or(&[], |entry| &entry.emitters)
    }

    fn intern_all(&mut self, events: &[String]) -> Vec<EventId> {
        let mut ids: Vec<EventId> = events.iter().map(|e| self.intern(e)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    fn intern(&mut self, event: &str) -> EventId {
        if let Some(&e) = self.event_ids.get(event) {
            return e;
        }
        let entry = EventEntry {
            name: event.to_string(),
            ..EventEntry::default()
        };
        let e = match self.free_events.pop() {
            Some(e) => {
                self.events[e as usize] = entry;
                e
            }
            None => {
                self.events.push(entry);
                (self.events.len() - 1) as EventId
            }
        };
        self.event_ids.insert(event.to_string(), e);
        e
    }

    /// Forgets an event nobody listens to or emits any more, so the maps do
    /// not grow with retired events.
    fn release_event(&mut self, e: EventId) {
        let entry = &mut self.events[e as usize];
        // Called once per list the agent was in; only the call that finds the
        // entry empty and still live releases it.
        if entry.listeners.is_empty()
            && entry.emitters.is_empty()
            && self.event_ids.get(entry.name.as_str()) == Some(&e)
        {
            let name = std::mem::take(&mut entry.name);
            self.event_ids.remove(&name);
            self.free_events.push(e);
        }
    }
}

fn sorted_insert(ids: &mut Vec<AgentId>, id: AgentId) {
    if let Err(at) = ids.binary_search(&id) {
        ids.insert(at, id);
    }
}

fn sorted_remove(ids: &mut Vec<AgentId>, id: AgentId) {
    if let Ok(at) = ids.binary_search(&id) {
        ids.remove(at);
    }
}

impl FromIterator<AgentNode> for AgentIndex {
    fn from_iter<I: IntoIterator<Item = AgentNode>>(iter: I) -> Self {
        let mut index = AgentIndex::new();
        index.extend(iter);
        index
    }
}

impl Extend<AgentNode> for AgentIndex {
    fn extend<I: IntoIterator<Item = AgentNode>>(&mut self, iter: I) {
        for node in iter {
            self.upsert(node);
        }
    }
}

/// Bounds on one publish check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoopBounds {
    /// Most loops named; values below 1 are treated as 1, because the
    /// shortest loop is always named when one is found.
    pub max_loops: usize,
    /// Most units of work (adjacency entries visited while growing the
    /// search region, building its graph and enumerating paths).
    pub max_work: u64,
}

impl LoopBounds {
    /// No bounds at all: every loop, however much work. For tests and offline
    /// audits, not for the publish path.
    pub fn unbounded() -> Self {
        LoopBounds {
            max_loops: usize::MAX,
            max_work: u64::MAX,
        }
    }
}

impl Default for LoopBounds {
    /// Ten loops, and a work budget that keeps a publish against a
    /// 100k-agent / 1M-edge registry well under 20 ms at p99 on two cores
    /// (see `benches/loop_search.rs`).
    fn default() -> Self {
        LoopBounds {
            max_loops: 10,
            max_work: 100_000,
        }
    }
}

pub use crate::model::{LoopCheck, LoopWarning};

/// Scope ancestry, shared with the rest of the ledger.
pub use crate::model::scope::scope_within;

/// Checks what publishing `candidate` (replacing the agent's current version
/// in `index`) would close, and words it for a publisher who may read the
/// scopes in `access`. Never fails and never mutates the index.
pub fn check_publish(
    index: &AgentIndex,
    candidate: &AgentNode,
    access: &[String],
    bounds: &LoopBounds,
) -> LoopCheck {
    let max_loops = bounds.max_loops.max(1);
    // Ask for one loop more than may be named: finding it is what tells
    // "exactly max_loops" from "there may be more".
    let outcome = search::find_loops(
        index,
        candidate,
        max_loops.saturating_add(1),
        bounds.max_work,
    );

    let mut loops = outcome.loops;
    let mut may_be_more = outcome.exhausted;
    if loops.len() > max_loops {
        loops.truncate(max_loops);
        may_be_more = true;
    }
    // The shortest loop is named whenever one was found, so the version only
    // counts as unchecked when the budget ran out before the first one.
    let checked_in_full = !outcome.exhausted || !loops.is_empty();

    let shown = |node: &AgentNode| -> String {
        // Names are unique in the graph searched (the candidate replaced its
        // agent's old version), so the name identifies the published agent.
        let readable = node.name == candidate.name
            || access.iter().any(|scope| scope_within(&node.scope, scope));
        if readable {
            node.name.clone()
        } else {
            OUTSIDE_ACCESS.to_string()
        }
    };
    let warnings: Vec<LoopWarning> = loops
        .iter()
        .map(|agents| {
            let loop_agents: Vec<String> = agents.iter().map(|n| shown(n)).collect();
            let note = (agents.len() == 2).then(|| {
                format!(
                    "{} listens to an event it emits itself; the platform never starts an agent \
                     from its own event, so this trigger never fires",
                    candidate.name
                )
            });
            LoopWarning {
                text: loop_agents.join(ARROW),
                loop_agents,
                note,
            }
        })
        .collect();

    let text = if !checked_in_full {
        Some(format!(
            "version was not checked in full for loops: the search stopped at its bound of {} \
             steps before it could tell whether {} closes a loop; there may be loops",
            bounds.max_work, candidate.name
        ))
    } else if may_be_more {
        Some(format!(
            "there may be more loops through {} than the {} named: the search stopped at its bound",
            candidate.name,
            warnings.len()
        ))
    } else {
        None
    };

    LoopCheck {
        warnings,
        may_be_more,
        checked_in_full,
        text,
    }
}
