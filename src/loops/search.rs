//! The bounded search behind [`super::check_publish`].
//!
//! The registry can hold 100k agents and a million edges, most of it one
//! giant strongly connected component, so a publish must never walk the whole
//! graph. The search works in a *region* around the candidate `c`:
//!
//! * A forward ball `F_a` (every agent within `a` edges from `c`) and a
//!   backward ball `B_b` (every agent within `b` edges to `c`), grown one
//!   complete BFS level at a time, always on the side with the smaller
//!   frontier. An agent's successors are read from the index only when the
//!   forward BFS expands it, its predecessors only when the backward BFS
//!   does, so growing the region costs exactly what BFS costs.
//! * The region is a petgraph graph, built as the balls grow: expanding an
//!   agent adds its edges on that side (skipping those the other side already
//!   added). With `a + b >= L` it holds every loop of length `L` and every
//!   edge of it: the agent `j` steps into the loop has `d_from <= j` and
//!   `d_to <= L - j`; for `j < a` its successors are known, for `j >= a` the
//!   next agent is within `b - 1` of `c` and its predecessors are known.
//! * Once one ball is complete (its next level is empty) the region holds the
//!   candidate's whole strongly connected component with all of its edges,
//!   and the component is cut out exactly, with exact distances to `c`.
//!
//! Loops are enumerated by iterative deepening on their length: for each `L`,
//! a DFS from `c` in name order over simple paths, pruned whenever
//! `depth + lower_bound(distance to c) > L` (the backward ball gives the
//! distance, or at least `b + 1` outside it). A name-ordered DFS yields the
//! loops of one length in name order, so the loops come out exactly in report
//! order and the search can stop at any bound with a correct prefix.
//!
//! Every step is charged to a work budget, and the region never holds more
//! than the agents the charged steps touched, so memory follows the budget,
//! not the registry. Nothing here depends on the order agents were inserted
//! in (agent ids do, but ties are broken by name and the work of a BFS level
//! is the same in any order), so the same publish always reads the same.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::Direction::{Incoming, Outgoing};

use super::{AgentId, AgentIndex, AgentNode, EventId};

/// Distance not (yet) known.
const UNKNOWN: u32 = u32::MAX;

/// Id of a candidate whose agent is not in the index yet (real ids are dense
/// and far below this).
const NEW_AGENT: AgentId = AgentId::MAX;

/// What the search found.
pub(super) struct Outcome<'a> {
    /// Loops in report order, each closed: `[c, .., c]`.
    pub loops: Vec<Vec<&'a AgentNode>>,
    /// The work budget ran out before the search was done.
    pub exhausted: bool,
}

/// Finds up to `want` loops through `candidate`, in report order, within
/// `max_work` units of work.
pub(super) fn find_loops<'a>(
    index: &'a AgentIndex,
    candidate: &'a AgentNode,
    want: usize,
    max_work: u64,
) -> Outcome<'a> {
    let mut loops = Vec::new();
    // The self-loop is the shortest loop there is, and finding it costs only
    // the candidate's own size, so it is not charged: it is named even when
    // the budget is too small for anything else.
    let emits: HashSet<&str> = candidate.emits.iter().map(String::as_str).collect();
    if candidate.listens.iter().any(|e| emits.contains(e.as_str())) {
        loops.push(vec![candidate, candidate]);
    }
    if loops.len() >= want {
        return Outcome {
            loops,
            exhausted: false,
        };
    }
    let mut search = Search::new(index, candidate, max_work);
    let exhausted = search.run(&mut loops, want).is_err();
    Outcome { loops, exhausted }
}

/// Hashes agent ids. They are dense integers handed out by the index, not
/// chosen by users, so a multiplicative hash is safe and much cheaper than
/// SipHash on the hot path.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type IdMap<V> = HashMap<AgentId, V, BuildHasherDefault<IdHasher>>;

/// The work budget ran out.
struct OutOfWork;

struct Budget {
    used: u64,
    max: u64,
}

impl Budget {
    fn charge(&mut self, units: u64) -> Result<(), OutOfWork> {
        self.used = self.used.saturating_add(units);
        if self.used > self.max {
            Err(OutOfWork)
        } else {
            Ok(())
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    /// Along edges, away from the candidate (successors).
    Forward,
    /// Against edges, towards the candidate (predecessors).
    Backward,
}

/// One side of the bidirectional BFS.
#[derive(Default)]
struct Ball {
    /// Agents at exactly `depth` from the candidate, still to expand.
    frontier: Vec<NodeIndex>,
    /// Every agent within `depth` is known: levels are only ever complete.
    depth: u32,
    /// The ball holds everything reachable on this side.
    done: bool,
}

/// Per region node.
struct NodeState {
    d_from: u32,
    d_to: u32,
    /// Successors read (forward BFS expanded it): all its out-edges are in
    /// the region graph.
    expanded_fwd: bool,
    /// Predecessors read: all its in-edges are in the region graph.
    expanded_bwd: bool,
}

/// The candidate's strongly connected component, once known exactly.
struct Component {
    member: Vec<bool>,
    size: usize,
}

struct Search<'a> {
    index: &'a AgentIndex,
    cand: &'a AgentNode,
    cand_id: AgentId,
    /// The candidate's events as index ids, sorted; events no other agent
    /// mentions cannot connect it to anyone and are left out.
    cand_listens: Vec<EventId>,
    cand_emits: Vec<EventId>,
    budget: Budget,
    /// The region; node weights are agent ids.
    graph: DiGraph<AgentId, ()>,
    at: IdMap<NodeIndex>,
    state: Vec<NodeState>,
    fwd: Ball,
    bwd: Ball,
    component: Option<Component>,
    /// Region nodes on the DFS path; kept between lengths (a finished DFS
    /// leaves it all false) so iterative deepening does not reallocate it.
    on_path: Vec<bool>,
}

impl<'a> Search<'a> {
    fn new(index: &'a AgentIndex, cand: &'a AgentNode, max_work: u64) -> Self {
        let ids = |events: &[String]| -> Vec<EventId> {
            let mut ids: Vec<EventId> = events.iter().filter_map(|e| index.event_id(e)).collect();
            ids.sort_unstable();
            ids.dedup();
            ids
        };
        Search {
            index,
            cand,
            cand_id: index.agent_id(&cand.name).unwrap_or(NEW_AGENT),
            cand_listens: ids(&cand.listens),
            cand_emits: ids(&cand.emits),
            budget: Budget {
                used: 0,
                max: max_work,
            },
            graph: DiGraph::new(),
            at: IdMap::default(),
            state: Vec::new(),
            fwd: Ball::default(),
            bwd: Ball::default(),
            component: None,
            on_path: Vec::new(),
        }
    }

    /// The agent version the search sees for `id`: the candidate in place of
    /// its agent's current version.
    fn agent(&self, id: AgentId) -> Option<&'a AgentNode> {
        if id == self.cand_id {
            Some(self.cand)
        } else {
            self.index.node(id)
        }
    }

    fn name(&self, v: NodeIndex) -> &'a str {
        self.agent(self.graph[v])
            .map_or("", |node| node.name.as_str())
    }

    /// Appends loops of length 2, 3, … to `loops` until `want` are known, the
    /// candidate's component has no longer loops, or the budget runs out.
    fn run(&mut self, loops: &mut Vec<Vec<&'a AgentNode>>, want: usize) -> Result<(), OutOfWork> {
        let c = self.node_for(self.cand_id);
        self.state[c.index()].d_from = 0;
        self.state[c.index()].d_to = 0;
        self.fwd.frontier.push(c);
        self.bwd.frontier.push(c);

        let mut len: u32 = 2;
        loop {
            if self.component.is_none() {
                while !self.fwd.done
                    && !self.bwd.done
                    && u64::from(self.fwd.depth) + u64::from(self.bwd.depth) < u64::from(len)
                {
                    self.grow()?;
                }
                if self.fwd.done || self.bwd.done {
                    self.settle_component(c)?;
                }
            }
            if let Some(component) = &self.component {
                // An elementary loop visits each agent of the component at
                // most once.
                if len as usize > component.size {
                    return Ok(());
                }
            }
            self.enumerate(c, len, loops, want)?;
            if loops.len() >= want {
                return Ok(());
            }
            len = len.saturating_add(1);
        }
    }

    /// Expands one BFS level on the side with the smaller frontier (on a tie,
    /// the shallower side: balanced balls prune the DFS best).
    fn grow(&mut self) -> Result<(), OutOfWork> {
        let fwd = (self.fwd.frontier.len(), self.fwd.depth);
        let bwd = (self.bwd.frontier.len(), self.bwd.depth);
        if fwd <= bwd {
            self.expand(Side::Forward)
        } else {
            self.expand(Side::Backward)
        }
    }

    fn expand(&mut self, side: Side) -> Result<(), OutOfWork> {
        let ball = match side {
            Side::Forward => &mut self.fwd,
            Side::Backward => &mut self.bwd,
        };
        let frontier = std::mem::take(&mut ball.frontier);
        let depth = ball.depth;
        let mut next = Vec::new();
        for v in frontier {
            let neighbours = self.neighbours(self.graph[v], side)?;
            match side {
                Side::Forward => self.state[v.index()].expanded_fwd = true,
                Side::Backward => self.state[v.index()].expanded_bwd = true,
            }
            for id in neighbours {
                let w = self.node_for(id);
                let state = &mut self.state[w.index()];
                // Each edge is added once: by whichever side reads it first.
                match side {
                    Side::Forward => {
                        if !state.expanded_bwd {
                            self.graph.add_edge(v, w, ());
                        }
                        if state.d_from == UNKNOWN {
                            state.d_from = depth + 1;
                            next.push(w);
                        }
                    }
                    Side::Backward => {
                        if !state.expanded_fwd {
                            self.graph.add_edge(w, v, ());
                        }
                        if state.d_to == UNKNOWN {
                            state.d_to = depth + 1;
                            next.push(w);
                        }
                    }
                }
            }
        }
        let ball = match side {
            Side::Forward => &mut self.fwd,
            Side::Backward => &mut self.bwd,
        };
        if next.is_empty() {
            ball.done = true;
        } else {
            ball.depth += 1;
            ball.frontier = next;
        }
        Ok(())
    }

    /// The region node of agent `id`, added if new.
    fn node_for(&mut self, id: AgentId) -> NodeIndex {
        if let Some(&v) = self.at.get(&id) {
            return v;
        }
        let v = self.graph.add_node(id);
        self.at.insert(id, v);
        self.state.push(NodeState {
            d_from: UNKNOWN,
            d_to: UNKNOWN,
            expanded_fwd: false,
            expanded_bwd: false,
        });
        v
    }

    /// Successors (forward) or predecessors (backward) of agent `id` in the
    /// graph as it will stand: the candidate in place of its agent's current
    /// version. Self-edges are left out: they are never part of a loop
    /// through more than one agent, and the candidate's own is reported
    /// separately.
    fn neighbours(&mut self, id: AgentId, side: Side) -> Result<Vec<AgentId>, OutOfWork> {
        let index: &'a AgentIndex = self.index;
        let is_cand = id == self.cand_id;
        let events: &[EventId] = match (is_cand, side, index.slot(id)) {
            (true, Side::Forward, _) => &self.cand_emits,
            (true, Side::Backward, _) => &self.cand_listens,
            (false, Side::Forward, Some(slot)) => &slot.emits,
            (false, Side::Backward, Some(slot)) => &slot.listens,
            (false, _, None) => &[],
        };
        let cand_side = match side {
            Side::Forward => &self.cand_listens,
            Side::Backward => &self.cand_emits,
        };
        let mut out = Vec::new();
        for &event in events {
            let others = match side {
                Side::Forward => index.listener_ids(event),
                Side::Backward => index.emitter_ids(event),
            };
            // Charged before collecting, so that one hugely popular event
            // cannot make the list outgrow the budget.
            self.budget.charge(1 + others.len() as u64)?;
            out.extend(
                others
                    .iter()
                    .copied()
                    .filter(|&other| other != id && other != self.cand_id),
            );
            if !is_cand && cand_side.binary_search(&event).is_ok() {
                out.push(self.cand_id);
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Once one ball is complete the region holds the candidate's whole
    /// strongly connected component with all its edges (a loop never leaves
    /// it), so the component and exact distances to the candidate can be
    /// computed inside the region alone.
    fn settle_component(&mut self, c: NodeIndex) -> Result<(), OutOfWork> {
        let n = self.graph.node_count();
        self.budget
            .charge(2 * self.graph.edge_count() as u64 + n as u64)?;

        let mut reached = vec![false; n];
        reached[c.index()] = true;
        let mut stack = vec![c];
        while let Some(v) = stack.pop() {
            for w in self.graph.neighbors_directed(v, Outgoing) {
                if !reached[w.index()] {
                    reached[w.index()] = true;
                    stack.push(w);
                }
            }
        }

        let mut d_to = vec![UNKNOWN; n];
        d_to[c.index()] = 0;
        let mut level = vec![c];
        while !level.is_empty() {
            let mut next = Vec::new();
            for v in level {
                for w in self.graph.neighbors_directed(v, Incoming) {
                    if d_to[w.index()] == UNKNOWN {
                        d_to[w.index()] = d_to[v.index()] + 1;
                        next.push(w);
                    }
                }
            }
            level = next;
        }

        let member: Vec<bool> = (0..n).map(|i| reached[i] && d_to[i] != UNKNOWN).collect();
        let size = member.iter().filter(|&&m| m).count();
        for (state, d) in self.state.iter_mut().zip(d_to) {
            state.d_to = d;
        }
        self.component = Some(Component { member, size });
        Ok(())
    }

    /// A lower bound on the length of any path from `w` back to the
    /// candidate; `None` when there is none.
    fn distance_bound(&self, w: NodeIndex) -> Option<u32> {
        let d_to = self.state[w.index()].d_to;
        if let Some(component) = &self.component {
            return component.member[w.index()].then_some(d_to);
        }
        match d_to {
            // Outside the backward ball, whose levels are complete up to its
            // depth: the way back is longer than that.
            UNKNOWN => Some(self.bwd.depth + 1),
            d => Some(d),
        }
    }

    /// Appends every loop of exactly `len` edges, in name order, until
    /// `loops` holds `want`.
    fn enumerate(
        &mut self,
        c: NodeIndex,
        len: u32,
        loops: &mut Vec<Vec<&'a AgentNode>>,
        want: usize,
    ) -> Result<(), OutOfWork> {
        struct Frame {
            node: NodeIndex,
            /// Next steps, in reverse name order so that `pop` takes the
            /// smallest name first.
            todo: Vec<NodeIndex>,
        }
        let mut on_path = std::mem::take(&mut self.on_path);
        on_path.resize(self.graph.node_count(), false);
        on_path[c.index()] = true;
        let todo = self.next_steps(c, c, 0, len, &on_path)?;
        let mut stack = vec![Frame { node: c, todo }];
        while let Some(frame) = stack.last_mut() {
            let Some(w) = frame.todo.pop() else {
                let node = frame.node;
                stack.pop();
                on_path[node.index()] = false;
                continue;
            };
            if w == c {
                // Charged by length: the report holds every loop it names.
                self.budget.charge(u64::from(len))?;
                let agents: Vec<&'a AgentNode> = stack
                    .iter()
                    .map(|f| f.node)
                    .chain([c])
                    .filter_map(|v| self.agent(self.graph[v]))
                    .collect();
                loops.push(agents);
                if loops.len() >= want {
                    return Ok(());
                }
                continue;
            }
            let depth = stack.len() as u32;
            on_path[w.index()] = true;
            let todo = self.next_steps(c, w, depth, len, &on_path)?;
            stack.push(Frame { node: w, todo });
        }
        self.on_path = on_path;
        Ok(())
    }

    /// The steps from `v`, reached after `depth` edges, that can still be part
    /// of a loop of exactly `len` edges, in reverse name order.
    fn next_steps(
        &mut self,
        c: NodeIndex,
        v: NodeIndex,
        depth: u32,
        len: u32,
        on_path: &[bool],
    ) -> Result<Vec<NodeIndex>, OutOfWork> {
        let Some(remaining) = u64::from(len).checked_sub(u64::from(depth) + 1) else {
            return Ok(Vec::new());
        };
        let mut steps: Vec<(&'a str, NodeIndex)> = Vec::new();
        for w in self.graph.neighbors(v) {
            self.budget.charge(1)?;
            let fits = if w == c {
                remaining == 0
            } else {
                !on_path[w.index()]
                    && self
                        .distance_bound(w)
                        .is_some_and(|bound| u64::from(bound) <= remaining)
            };
            if fits {
                steps.push((self.name(w), w));
            }
        }
        steps.sort_unstable_by(|a, b| b.0.cmp(a.0));
        Ok(steps.into_iter().map(|(_, w)| w).collect())
    }
}
