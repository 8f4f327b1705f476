//! A chain as a picture: what an auditor needs to see of an event chain —
//! its runs by hop, the events that opened them, the hop limit, what was
//! withheld and which listeners were refused — as a pure model
//! ([`ChainPicture`], built from run states and the chain's refusal
//! records) drawn as Graphviz DOT ([`dot`]) or as a self-contained SVG
//! laid out here ([`svg`]), so a page or a file needs no renderer.

pub mod dot;
pub mod svg;

use crate::model::{ListenerRefused, Run, RunStatus, HOP_LIMIT};

/// How a run node is coloured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeStatus {
    Open,
    Succeeded,
    Failed,
    Cancelled,
}

impl NodeStatus {
    fn of(status: Option<RunStatus>) -> Self {
        match status {
            None => NodeStatus::Open,
            Some(RunStatus::Succeeded) => NodeStatus::Succeeded,
            Some(RunStatus::Failed) => NodeStatus::Failed,
            Some(RunStatus::Cancelled) => NodeStatus::Cancelled,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NodeStatus::Open => "open",
            NodeStatus::Succeeded => "succeeded",
            NodeStatus::Failed => "failed",
            NodeStatus::Cancelled => "cancelled",
        }
    }

    /// Fill colour: green done, red failed, grey cancelled, amber open.
    pub fn fill(self) -> &'static str {
        match self {
            NodeStatus::Open => "#fff3cd",
            NodeStatus::Succeeded => "#d4edda",
            NodeStatus::Failed => "#f8d7da",
            NodeStatus::Cancelled => "#e2e3e5",
        }
    }
}

/// One run of the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunNode {
    pub run: String,
    pub agent: String,
    pub version: u32,
    /// `None` for a run opened without a recorded chain position.
    pub hop: Option<u32>,
    pub status: NodeStatus,
    /// It read something labelled `untrusted` (R9), or was opened so.
    pub untrusted: bool,
}

/// An event of one run that opened another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    pub from: String,
    pub to: String,
    pub event: String,
}

/// Why an edge leads nowhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dangling {
    /// The run's events were not dispatched (R2 hop limit, R6 unknown
    /// chain, or the run did not succeed); `reason` is the withheld code.
    Withheld { events: Vec<String>, reason: String },
    /// A listener the event would have opened was refused (R4 self-listen,
    /// R9 scope barrier); `reason` is the refusal code.
    Refused {
        event: String,
        agent: String,
        reason: String,
    },
}

/// An edge from `from` that opened nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DanglingEdge {
    pub from: String,
    pub what: Dangling,
}

/// What a chain's picture shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChainPicture {
    pub root: String,
    pub hop_limit: u32,
    /// In the order the runs were opened.
    pub runs: Vec<RunNode>,
    pub edges: Vec<Edge>,
    pub dangling: Vec<DanglingEdge>,
}

impl ChainPicture {
    /// The picture of the chain rooted at `root`: `runs` in the order they
    /// were opened, `refusals` the chain's listener refusal records.
    pub fn of(root: &str, runs: &[Run], refusals: &[ListenerRefused]) -> Self {
        let known = |r: &str| runs.iter().any(|x| x.run == r);
        let nodes = runs
            .iter()
            .map(|r| RunNode {
                run: r.run.clone(),
                agent: r.agent.clone(),
                version: r.version,
                hop: r.hop,
                status: NodeStatus::of(r.status),
                untrusted: r.labels.iter().any(|l| l == "untrusted"),
            })
            .collect();
        let edges = runs
            .iter()
            .filter_map(|r| {
                let t = r.trigger.as_ref()?;
                known(&t.source_run).then(|| Edge {
                    from: t.source_run.clone(),
                    to: r.run.clone(),
                    event: t.event.clone(),
                })
            })
            .collect();
        let mut dangling: Vec<DanglingEdge> = runs
            .iter()
            .filter_map(|r| {
                let w = r.withheld.as_ref()?;
                Some(DanglingEdge {
                    from: r.run.clone(),
                    what: Dangling::Withheld {
                        events: w.events.clone(),
                        reason: w.reason.code().to_string(),
                    },
                })
            })
            .collect();
        for f in refusals.iter().filter(|f| known(&f.source_run)) {
            let what = Dangling::Refused {
                event: f.event.clone(),
                agent: f.agent.clone(),
                reason: f.reason.code().to_string(),
            };
            // A redelivered refusal is one mark, not two.
            if !dangling
                .iter()
                .any(|d| d.from == f.source_run && d.what == what)
            {
                dangling.push(DanglingEdge {
                    from: f.source_run.clone(),
                    what,
                });
            }
        }
        ChainPicture {
            root: root.to_string(),
            hop_limit: HOP_LIMIT,
            runs: nodes,
            edges,
            dangling,
        }
    }

    /// The column a run is drawn in: its hop (a run without one, beside
    /// the root).
    pub fn column(node: &RunNode) -> u32 {
        node.hop.unwrap_or(0)
    }

    /// The deepest hop drawn.
    pub fn max_hop(&self) -> u32 {
        self.runs.iter().map(Self::column).max().unwrap_or(0)
    }
}

/// The text a dangling edge is labelled with.
pub fn dangling_label(d: &Dangling) -> String {
    match d {
        Dangling::Withheld { events, reason } => {
            format!("withheld {} ({reason})", events.join(", "))
        }
        Dangling::Refused {
            event,
            agent,
            reason,
        } => format!("{event} ✗ {agent} ({reason})"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::model::{RefusalReason, Trigger, Withheld, WithheldReason};

    pub fn run(id: &str, agent: &str, hop: u32, from: Option<(&str, &str)>) -> Run {
        Run {
            run: id.into(),
            agent: agent.into(),
            version: 1,
            scope: "acme".into(),
            root: Some("r0".into()),
            hop: Some(hop),
            trigger: from.map(|(src, ev)| Trigger {
                event_id: format!("e-{src}"),
                event: ev.into(),
                context: String::new(),
                source_run: src.into(),
                artifacts: Vec::new(),
            }),
            legacy_trigger: None,
            labels: Vec::new(),
            status: Some(RunStatus::Succeeded),
            next_step: 1,
            tool_calls: 0,
            artifacts: Vec::new(),
            published: Vec::new(),
            withheld: None,
            dispatched: true,
            refused_listeners: Vec::new(),
        }
    }

    /// An eight-hop chain whose last run's event is withheld, with a
    /// refused listener at hop 2 and an untrusted run.
    pub fn eight_hops() -> (Vec<Run>, Vec<ListenerRefused>) {
        let mut runs = vec![run("r0", "dev", 0, None)];
        for h in 1..=HOP_LIMIT {
            let agent = if h % 2 == 1 { "review" } else { "dev" };
            let prev = format!("r{}", h - 1);
            runs.push(run(&format!("r{h}"), agent, h, Some((&prev, "changed"))));
        }
        runs[8].withheld = Some(Withheld {
            reason: WithheldReason::HopLimit {
                root: "r0".into(),
                limit: HOP_LIMIT,
            },
            events: vec!["reviewed".into()],
        });
        runs[3].labels = vec!["untrusted".into()];
        runs[8].status = Some(RunStatus::Failed);
        let refused = ListenerRefused {
            source_run: "r2".into(),
            event_id: "e-r2".into(),
            event: "changed".into(),
            agent: "billing-watch".into(),
            reason: RefusalReason::ScopeBarrier {
                listener_scope: "acme/billing".into(),
                areas: vec!["acme/platform".into()],
            },
        };
        (runs, vec![refused.clone(), refused])
    }

    #[test]
    fn the_model_has_every_run_edge_and_mark_once() {
        let (runs, refusals) = eight_hops();
        let p = ChainPicture::of("r0", &runs, &refusals);
        assert_eq!(p.runs.len(), 9);
        assert_eq!(p.edges.len(), 8);
        assert_eq!(p.max_hop(), 8);
        assert_eq!(p.dangling.len(), 2, "{:?}", p.dangling);
        assert!(p.runs[3].untrusted && !p.runs[2].untrusted);
        assert_eq!(p.runs[8].status, NodeStatus::Failed);
        assert!(
            matches!(&p.dangling[0].what, Dangling::Withheld { reason, .. } if reason == "hop_limit")
        );
        assert!(
            matches!(&p.dangling[1].what, Dangling::Refused { reason, agent, .. } if reason == "scope_barrier" && agent == "billing-watch")
        );
    }

    #[test]
    fn an_edge_from_outside_the_chain_is_not_drawn() {
        let runs = vec![run("r5", "dev", 5, Some(("elsewhere", "changed")))];
        let p = ChainPicture::of("r0", &runs, &[]);
        assert!(p.edges.is_empty());
    }
}
