//! R3, R4, R9 at dispatch time: which listeners an agent event opens.
//! Listeners are read from the versions current when the event goes out (R5).

use super::{chain, labels};
use crate::model::*;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenerDecision {
    /// Open `run` at this chain position.
    Open { run: String, root: String, hop: u32 },
    /// Not opened, for a reason the trail records.
    Refuse(RefusalReason),
    /// Already opened or already refused by an earlier delivery (R3).
    AlreadyDone,
    /// The source may not open anything (hop limit or unknown chain).
    NotAllowed,
}

/// Decide for one listener of one event. `already_opened` tells whether the
/// deterministic listener run exists already (a redelivery).
pub fn decide_listener(
    source: &Run,
    event: &AgentEventOut,
    listener: &AgentVersion,
    already_opened: bool,
) -> ListenerDecision {
    let Some((root, hop)) = chain::listener_position(source) else {
        return ListenerDecision::NotAllowed;
    };
    let run = ids::listener_run_id(&event.event_id, &listener.agent);
    let refused_key = ids::refused_listener_key(&event.event_id, &listener.agent);
    if already_opened || source.refused_listeners.contains(&refused_key) {
        return ListenerDecision::AlreadyDone;
    }
    if listener.agent == source.agent {
        return ListenerDecision::Refuse(RefusalReason::SelfListen);
    }
    let blocked = labels::scope_barrier(&listener.scope, &event.artifacts);
    if !blocked.is_empty() {
        return ListenerDecision::Refuse(RefusalReason::ScopeBarrier {
            listener_scope: listener.scope.clone(),
            areas: blocked,
        });
    }
    ListenerDecision::Open { run, root, hop }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::chain::tests::{run_at, version};

    fn event(labels: &[&str]) -> AgentEventOut {
        AgentEventOut {
            event_id: "ae-1".into(),
            event: "code.ready".into(),
            context: "change".into(),
            artifacts: vec![ArtifactRef {
                name: "patch".into(),
                sha256: [0xaa; 32],
                size: 1,
                source_run: "r1".into(),
                labels: labels.iter().map(|s| s.to_string()).collect(),
            }],
        }
    }

    #[test]
    fn r3_second_delivery_opens_nothing() {
        let src = run_at("r1", Some("r1"), Some(0));
        let reviewer = version("reviewer", &[]);
        let ev = event(&["area:acme/platform"]);
        let first = decide_listener(&src, &ev, &reviewer, false);
        let ListenerDecision::Open { run, hop, .. } = first else {
            panic!("expected open, got {first:?}")
        };
        assert_eq!(run, ids::listener_run_id("ae-1", "reviewer"));
        assert_eq!(hop, 1);
        assert_eq!(
            decide_listener(&src, &ev, &reviewer, true),
            ListenerDecision::AlreadyDone
        );
    }

    #[test]
    fn r4_agent_never_started_by_its_own_event() {
        let src = run_at("r1", Some("r1"), Some(0));
        let same = version("developer", &[]);
        assert_eq!(
            decide_listener(&src, &event(&[]), &same, false),
            ListenerDecision::Refuse(RefusalReason::SelfListen)
        );
    }

    #[test]
    fn r9_listener_outside_the_area_is_not_opened() {
        let src = run_at("r1", Some("r1"), Some(0));
        let mut finance = version("ledgerbot", &[]);
        finance.scope = "acme/finance".into();
        assert_eq!(
            decide_listener(&src, &event(&["area:acme/platform"]), &finance, false),
            ListenerDecision::Refuse(RefusalReason::ScopeBarrier {
                listener_scope: "acme/finance".into(),
                areas: vec!["acme/platform".into()],
            })
        );
        let mut company = version("auditor", &[]);
        company.scope = "acme".into();
        assert!(matches!(
            decide_listener(&src, &event(&["area:acme/platform"]), &company, false),
            ListenerDecision::Open { .. }
        ));
    }

    #[test]
    fn r2_nothing_opens_from_hop_eight() {
        let src = run_at("r8", Some("r0"), Some(HOP_LIMIT));
        assert_eq!(
            decide_listener(&src, &event(&[]), &version("reviewer", &[]), false),
            ListenerDecision::NotAllowed
        );
    }
}
