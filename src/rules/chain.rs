//! R1, R2, R5, R6: where a run stands in its chain and what it may publish.
//! The position is decided once, when the run opens, and recorded; nothing
//! downstream recomputes it.

use crate::model::*;

/// The position of a run a user opens: the root of a new chain (R1).
pub fn root_position(run: &str) -> (String, u32) {
    (run.to_string(), 0)
}

/// The position a listener opened by an event of `source` gets, or `None`
/// when nothing may be opened from it: its chain is unknown (R6) or it sits
/// at the hop limit, beyond which nothing is ever opened (R2).
pub fn listener_position(source: &Run) -> Option<(String, u32)> {
    match (&source.root, source.hop) {
        (Some(root), Some(hop)) if hop < HOP_LIMIT => Some((root.clone(), hop + 1)),
        _ => None,
    }
}

/// What the dispatcher sends out for a finished run (R2, R6): the events
/// its close published, or none and why. A run without a chain position
/// publishes nothing further even when an older worker's closing record
/// listed events (R6), so that reason is decided again here.
pub fn dispatchable(run: &Run) -> (Vec<AgentEventOut>, Option<Withheld>) {
    if run.root.is_none() || run.hop.is_none() {
        let listed: Vec<String> = run.published.iter().map(|e| e.event.clone()).collect();
        let withheld = run.withheld.clone().or_else(|| {
            (!listed.is_empty()).then_some(Withheld {
                reason: WithheldReason::ChainUnknown,
                events: listed,
            })
        });
        return (Vec::new(), withheld);
    }
    (run.published_events(), run.withheld.clone())
}

/// What closing a run publishes. The events come from the version the run
/// opened on (R5), never from whatever version is current now. A run at the
/// hop limit (R2) or without a chain position (R6) publishes none of them,
/// and says why; so does a run that did not succeed.
pub fn close_outcome(
    run: &Run,
    opened_on: &AgentVersion,
    status: RunStatus,
    artifacts: &[ArtifactRef],
) -> (Vec<AgentEventOut>, Option<Withheld>) {
    let declared: Vec<String> = opened_on.emits.iter().map(|e| e.event.clone()).collect();
    let withhold = |reason| {
        let w = if declared.is_empty() {
            None
        } else {
            Some(Withheld {
                reason,
                events: declared.clone(),
            })
        };
        (Vec::new(), w)
    };
    let (root, hop) = match (&run.root, run.hop) {
        (Some(root), Some(hop)) => (root, hop),
        _ => return withhold(WithheldReason::ChainUnknown),
    };
    if hop >= HOP_LIMIT {
        return withhold(WithheldReason::HopLimit {
            root: root.clone(),
            limit: HOP_LIMIT,
        });
    }
    if status != RunStatus::Succeeded {
        return withhold(WithheldReason::NotSucceeded { status });
    }
    // `final_answer` is built in: a succeeded run's closing answer goes
    // out with every event it publishes, declared or not.
    let final_answer = artifacts.iter().find(|a| a.name == FINAL_ANSWER);
    let published = opened_on
        .emits
        .iter()
        .map(|decl| {
            let mut exposed: Vec<ArtifactRef> = decl
                .artifacts
                .iter()
                .filter_map(|name| artifacts.iter().find(|a| &a.name == name).cloned())
                .collect();
            if let Some(fa) =
                final_answer.filter(|_| !decl.artifacts.iter().any(|n| n == FINAL_ANSWER))
            {
                exposed.push(fa.clone());
            }
            AgentEventOut {
                event_id: crate::model::ids::agent_event_id(&run.run, &decl.event),
                event: decl.event.clone(),
                context: decl.context.clone(),
                artifacts: exposed,
            }
        })
        .collect();
    (published, None)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn version(agent: &str, emits: &[(&str, &[&str])]) -> AgentVersion {
        AgentVersion {
            agent: agent.into(),
            version: 1,
            scope: "acme/platform".into(),
            listens: vec![],
            emits: emits
                .iter()
                .map(|(e, arts)| EmitDecl {
                    event: e.to_string(),
                    context: "ctx".into(),
                    artifacts: arts.iter().map(|s| s.to_string()).collect(),
                })
                .collect(),
            access: vec![],
            tool_budget: None,
            loop_check: LoopCheck::default(),
        }
    }

    pub fn run_at(run: &str, root: Option<&str>, hop: Option<u32>) -> Run {
        Run {
            run: run.into(),
            agent: "developer".into(),
            version: 1,
            scope: "acme/platform".into(),
            root: root.map(str::to_string),
            hop,
            trigger: None,
            legacy_trigger: None,
            labels: vec![],
            status: None,
            next_step: 1,
            tool_calls: 0,
            artifacts: vec![],
            published: vec![],
            withheld: None,
            dispatched: false,
            refused_listeners: vec![],
        }
    }

    #[test]
    fn r1_hop_counts_from_the_root_and_adds_one_per_event() {
        assert_eq!(root_position("r0"), ("r0".to_string(), 0));
        let mut run = run_at("r0", Some("r0"), Some(0));
        for expected in 1..=HOP_LIMIT {
            let (root, hop) = listener_position(&run).unwrap();
            assert_eq!((root.as_str(), hop), ("r0", expected));
            run = run_at("next", Some(&root), Some(hop));
        }
    }

    #[test]
    fn r2_hop_eight_runs_but_withholds() {
        let v = version("developer", &[("code.ready", &[])]);
        let at_limit = run_at("r8", Some("r0"), Some(HOP_LIMIT));
        let (published, withheld) = close_outcome(&at_limit, &v, RunStatus::Succeeded, &[]);
        assert!(published.is_empty());
        assert_eq!(
            withheld,
            Some(Withheld {
                reason: WithheldReason::HopLimit {
                    root: "r0".into(),
                    limit: 8
                },
                events: vec!["code.ready".into()],
            })
        );
        // Nothing beyond hop 8 is ever opened.
        assert_eq!(listener_position(&at_limit), None);
        // One hop earlier still publishes.
        let below = run_at("r7", Some("r0"), Some(HOP_LIMIT - 1));
        let (published, withheld) = close_outcome(&below, &v, RunStatus::Succeeded, &[]);
        assert_eq!(published.len(), 1);
        assert_eq!(withheld, None);
    }

    #[test]
    fn r5_publishes_what_the_opening_version_declares() {
        let v1 = version("developer", &[("code.ready", &["patch"])]);
        let run = run_at("r1", Some("r1"), Some(0));
        let patch = ArtifactRef {
            name: "patch".into(),
            sha256: [0xaa; 32],
            size: 1,
            source_run: "r1".into(),
            labels: vec![],
        };
        let (published, _) = close_outcome(
            &run,
            &v1,
            RunStatus::Succeeded,
            std::slice::from_ref(&patch),
        );
        assert_eq!(published.len(), 1);
        assert_eq!(published[0].event, "code.ready");
        assert_eq!(published[0].artifacts, vec![patch]);
    }

    #[test]
    fn final_answer_goes_out_with_every_event_of_a_succeeded_run_declared_or_not() {
        let v = version("developer", &[("code.ready", &["patch"]), ("noted", &[])]);
        let run = run_at("r1", Some("r1"), Some(0));
        let art = |name: &str| ArtifactRef {
            name: name.into(),
            sha256: [0x11; 32],
            size: 1,
            source_run: "r1".into(),
            labels: vec![],
        };
        let arts = [art("patch"), art(FINAL_ANSWER), art("scratch")];
        let (published, _) = close_outcome(&run, &v, RunStatus::Succeeded, &arts);
        let names = |i: usize| -> Vec<&str> {
            published[i]
                .artifacts
                .iter()
                .map(|a| a.name.as_str())
                .collect()
        };
        assert_eq!(names(0), ["patch", FINAL_ANSWER]);
        assert_eq!(names(1), [FINAL_ANSWER]);
        // Declared explicitly, it goes out once.
        let v = version("developer", &[("code.ready", &[FINAL_ANSWER])]);
        let (published, _) = close_outcome(&run, &v, RunStatus::Succeeded, &arts);
        assert_eq!(published[0].artifacts.len(), 1);
        let (published, _) = close_outcome(&run, &v, RunStatus::Failed, &arts);
        assert!(published.is_empty());
    }

    #[test]
    fn r6_unknown_chain_publishes_nothing() {
        let v = version("reviewer", &[("review.done", &[])]);
        let legacy = run_at("x1", None, None);
        let (published, withheld) = close_outcome(&legacy, &v, RunStatus::Succeeded, &[]);
        assert!(published.is_empty());
        assert_eq!(withheld.unwrap().reason, WithheldReason::ChainUnknown);
        assert_eq!(listener_position(&legacy), None);
    }

    #[test]
    fn r6_a_legacy_close_listing_events_is_withheld_at_dispatch() {
        let mut legacy = run_at("x1", None, None);
        legacy.published = vec![PublishedEvent {
            event_id: "ae-1".into(),
            event: "code.ready".into(),
            context: "c".into(),
            artifact_names: vec![],
        }];
        let (events, withheld) = dispatchable(&legacy);
        assert!(events.is_empty());
        let w = withheld.unwrap();
        assert_eq!(
            (w.reason, w.events),
            (WithheldReason::ChainUnknown, vec!["code.ready".to_string()])
        );
        let mut known = run_at("r1", Some("r1"), Some(0));
        known.published = legacy.published.clone();
        assert_eq!(dispatchable(&known).0.len(), 1);
    }

    #[test]
    fn failed_run_publishes_no_events() {
        let v = version("developer", &[("code.ready", &[])]);
        let run = run_at("r1", Some("r1"), Some(0));
        let (published, withheld) = close_outcome(&run, &v, RunStatus::Failed, &[]);
        assert!(published.is_empty());
        assert_eq!(withheld.unwrap().reason.code(), "not_succeeded");
    }
}
