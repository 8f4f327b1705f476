//! The rules as given/when/then: given these records, when this command,
//! then these records or this refusal. Decided over state folded in memory
//! (`common::mem`), with no log, sled or files: what the engine appends is
//! exactly what these functions answer.

mod common;

use agentledger::codes::Code;
use agentledger::loops::{AgentIndex, LoopBounds};
use agentledger::model::Topic;
use agentledger::model::*;
use agentledger::rules::decide::LedgerRead as _;
use agentledger::rules::decide::*;
use common::mem::MemLedger;
use std::collections::BTreeMap;

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Version `version` of `agent` as the registry records it.
fn published(agent: &str, version: u32, listens: &[&str], emits: &[(&str, &[&str])]) -> Decided {
    Decided {
        topic: Topic::Registry,
        key: agent.into(),
        event_id: ids::agent_version_event_id(agent, version),
        step: 0,
        event: LedgerEvent::AgentPublished(AgentVersion {
            agent: agent.into(),
            version,
            scope: "acme/platform".into(),
            listens: strings(listens),
            emits: emits
                .iter()
                .map(|(e, a)| EmitDecl {
                    event: e.to_string(),
                    context: "change".into(),
                    artifacts: strings(a),
                })
                .collect(),
            access: strings(&["acme/platform"]),
            tool_budget: None,
            loop_check: LoopCheck {
                checked_in_full: true,
                ..LoopCheck::default()
            },
        }),
    }
}

fn opened(run: &str, agent: &str, root: Option<&str>, hop: Option<u32>) -> Decided {
    Decided {
        topic: Topic::Ledger,
        key: ids::chain_key(root, run).to_string(),
        event_id: ids::step_event_id(run, 0),
        step: 0,
        event: LedgerEvent::RunOpened(RunOpened {
            run: run.into(),
            agent: agent.into(),
            version: 1,
            scope: "acme/platform".into(),
            root: root.map(str::to_string),
            hop,
            trigger: None,
            legacy_trigger: hop.is_none().then(|| "ev-legacy".to_string()),
            labels: strings(&["area:acme/platform"]),
        }),
    }
}

/// A listener run opened at `hop` by `source`'s event exposing `patch`.
fn opened_by_event(run: &str, agent: &str, root: &str, hop: u32, source: &str) -> Decided {
    let mut d = opened(run, agent, Some(root), Some(hop));
    if let LedgerEvent::RunOpened(o) = &mut d.event {
        o.trigger = Some(Trigger {
            event_id: ids::agent_event_id(source, "code.ready"),
            event: "code.ready".into(),
            context: "change".into(),
            source_run: source.into(),
            artifacts: vec![ArtifactRef {
                name: "patch".into(),
                sha256: cas::ContentRef::for_content(b"diff").sha256(),
                size: 4,
                source_run: source.into(),
                labels: strings(&["area:acme/platform", "untrusted"]),
            }],
        });
    }
    d
}

fn close(run: &str, artifacts: &[(&str, &str)], labels: &[&str]) -> CloseRun {
    CloseRun {
        run: run.into(),
        status: RunStatus::Succeeded,
        summary: "done".into(),
        artifacts: artifacts
            .iter()
            .map(|(n, c)| (n.to_string(), c.as_bytes().to_vec()))
            .collect::<BTreeMap<_, _>>(),
        labels: strings(labels),
    }
}

fn code<T: std::fmt::Debug>(r: Result<T, DecideError>) -> Code {
    match r {
        Err(DecideError::Refused(r)) => r.code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn open_run(run: &str, agent: &str) -> OpenRun {
    OpenRun {
        run: run.into(),
        agent: agent.into(),
        legacy_trigger: None,
    }
}

#[test]
fn r1_a_root_run_is_opened_at_hop_zero_of_its_own_chain() {
    let given = MemLedger::given([published("developer", 2, &[], &[])]);
    let then = decide_open_run(&given, &open_run("r1", "developer")).unwrap();
    assert_eq!(then, opened_root_expected());
    assert_eq!(
        code(decide_open_run(
            &MemLedger::given([published("developer", 2, &[], &[]), then]),
            &open_run("r1", "developer")
        )),
        Code::RunExists
    );
    assert_eq!(
        code(decide_open_run(&given, &open_run("r1", "nobody"))),
        Code::UnknownAgent
    );
    assert_eq!(
        code(decide_open_run(&given, &open_run("r 1", "developer"))),
        Code::InvalidName
    );
}

fn opened_root_expected() -> Decided {
    Decided {
        topic: Topic::Ledger,
        key: "r1".into(),
        event_id: ids::step_event_id("r1", 0),
        step: 0,
        event: LedgerEvent::RunOpened(RunOpened {
            run: "r1".into(),
            agent: "developer".into(),
            version: 2,
            scope: "acme/platform".into(),
            root: Some("r1".into()),
            hop: Some(0),
            trigger: None,
            legacy_trigger: None,
            labels: strings(&["area:acme/platform"]),
        }),
    }
}

#[test]
fn r2_a_run_at_hop_eight_closes_with_its_events_withheld() {
    let given = MemLedger::given([
        published(
            "reviewer",
            1,
            &["code.ready"],
            &[("review.done", &["review"])],
        ),
        opened("r8", "reviewer", Some("r0"), Some(8)),
    ]);
    let then = decide_close(&given, &close("r8", &[("review", "ok")], &[])).unwrap();
    let LedgerEvent::RunClosed(c) = &then.event else {
        panic!("{then:?}")
    };
    assert_eq!((then.step, then.key.as_str()), (1, "r0"));
    assert!(c.published.is_empty());
    assert_eq!(
        c.withheld,
        Some(Withheld {
            reason: WithheldReason::HopLimit {
                root: "r0".into(),
                limit: 8
            },
            events: strings(&["review.done"]),
        })
    );
    // Its artifacts are still published.
    assert_eq!(c.artifacts[0].name, "review");
}

#[test]
fn r5_a_close_publishes_what_its_opening_version_declares() {
    // Version 2 was published while r1 (opened on version 1) ran.
    let given = MemLedger::given([
        published("developer", 1, &[], &[("code.ready", &["patch"])]),
        opened("r1", "developer", Some("r1"), Some(0)),
        published("developer", 2, &[], &[("something.else", &[])]),
    ]);
    let then = decide_close(&given, &close("r1", &[("patch", "diff")], &[])).unwrap();
    let LedgerEvent::RunClosed(c) = &then.event else {
        panic!("{then:?}")
    };
    let events: Vec<&str> = c.published.iter().map(|e| e.event.as_str()).collect();
    assert_eq!(events, ["code.ready"]);
    assert_eq!(
        c.published[0].event_id,
        ids::agent_event_id("r1", "code.ready")
    );
    assert_eq!(c.published[0].artifacts[0].size, 4);
    assert_eq!(
        c.published[0].artifacts[0].content_ref(),
        cas::ContentRef::for_content(b"diff").to_string()
    );
}

#[test]
fn r6_a_run_without_a_chain_position_publishes_nothing_further() {
    let given = MemLedger::given([
        published("developer", 1, &[], &[("code.ready", &[])]),
        opened("x1", "developer", None, None),
    ]);
    let then = decide_close(&given, &close("x1", &[], &[])).unwrap();
    let LedgerEvent::RunClosed(c) = &then.event else {
        panic!("{then:?}")
    };
    assert_eq!(then.key, "x1", "a run without a chain keys on itself");
    assert_eq!(
        c.withheld.as_ref().map(|w| &w.reason),
        Some(&WithheldReason::ChainUnknown)
    );
}

#[test]
fn r8_a_listener_reads_by_contract_name_and_each_read_is_a_step() {
    let given = MemLedger::given([
        published("developer", 1, &[], &[("code.ready", &["patch"])]),
        published("reviewer", 1, &["code.ready"], &[]),
        opened_by_event("l1", "reviewer", "r1", 1, "r1"),
    ]);
    let mut intact = |_: &ArtifactRef| Ok(());
    match decide_read(&given, "l1", "patch", &mut intact).unwrap() {
        ReadDecision::Granted { artifact, record } => {
            assert_eq!(artifact.name, "patch");
            assert_eq!((record.step, record.key.as_str()), (1, "r1"));
            let LedgerEvent::ArtifactRead(r) = &record.event else {
                panic!("{record:?}")
            };
            // R9: what it read flows into the run.
            assert_eq!(
                r.labels_after,
                strings(&["area:acme/platform", "untrusted"])
            );
        }
        other => panic!("{other:?}"),
    }
    // A ref, even the right one, is refused; so is a name off the contract.
    let the_ref = cas::ContentRef::for_content(b"diff").to_string();
    for (asked, want) in [
        (the_ref.as_str(), Code::RefNotAllowed),
        ("secrets", Code::NotInContract),
    ] {
        match decide_read(&given, "l1", asked, &mut intact).unwrap() {
            ReadDecision::Refused { refusal, record } => {
                assert_eq!(refusal.code, want);
                let LedgerEvent::ReadRefused(r) = &record.unwrap().event else {
                    panic!()
                };
                assert_eq!(r.code, want.as_str());
            }
            other => panic!("{other:?}"),
        }
    }
    // Damaged bytes in the store: refused, and recorded.
    let mut damaged = |_: &ArtifactRef| {
        Err(agentledger::content::store::StoreError::DigestMismatch {
            uri: "cas://sha256/…".into(),
            found: "other".into(),
        }
        .into())
    };
    assert!(matches!(
        decide_read(&given, "l1", "patch", &mut damaged).unwrap(),
        ReadDecision::Refused { refusal, record: Some(_) } if refusal.code == Code::DigestMismatch
    ));
}

#[test]
fn r8_reads_stop_at_the_tool_budget_and_a_closed_run_reads_nothing() {
    let mut budgeted = published("reviewer", 1, &["code.ready"], &[]);
    if let LedgerEvent::AgentPublished(v) = &mut budgeted.event {
        v.tool_budget = Some(1);
    }
    let first = opened_by_event("l1", "reviewer", "r1", 1, "r1");
    let mut intact = |_: &ArtifactRef| Ok(());
    let given = MemLedger::given([budgeted.clone(), first.clone()]);
    let ReadDecision::Granted { record, .. } =
        decide_read(&given, "l1", "patch", &mut intact).unwrap()
    else {
        panic!()
    };
    let given = MemLedger::given([budgeted.clone(), first.clone(), record.clone()]);
    assert!(matches!(
        decide_read(&given, "l1", "patch", &mut intact).unwrap(),
        ReadDecision::Refused { refusal, .. } if refusal.code == Code::BudgetExhausted
    ));
    // Closed: refused, and nothing more is added to its trail.
    let closing = decide_close(&given, &close("l1", &[], &[])).unwrap();
    let given = MemLedger::given([budgeted, first, record, closing]);
    assert!(matches!(
        decide_read(&given, "l1", "patch", &mut intact).unwrap(),
        ReadDecision::Refused { refusal, record: None } if refusal.code == Code::RunClosed
    ));
}

#[test]
fn r9_a_close_carries_the_runs_labels_onto_every_artifact() {
    let given = MemLedger::given([
        published("reviewer", 1, &["code.ready"], &[]),
        opened_by_event("l1", "reviewer", "r1", 1, "r1"),
    ]);
    let then = decide_close(
        &given,
        &close("l1", &[("a", "x"), ("b", "y")], &["reviewed"]),
    )
    .unwrap();
    let LedgerEvent::RunClosed(c) = &then.event else {
        panic!()
    };
    assert_eq!(c.labels, strings(&["area:acme/platform", "reviewed"]));
    assert!(c.artifacts.iter().all(|a| a.labels == c.labels));
    // Labels that hide what they say, or too many of them, are refused.
    assert_eq!(
        code(decide_close(
            &given,
            &close("l1", &[], &["un\u{200b}trusted"])
        )),
        Code::InvalidLabel
    );
    let many: Vec<String> = (0..64).map(|i| format!("l{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert_eq!(
        code(decide_close(&given, &close("l1", &[], &many))),
        Code::TooManyLabels
    );
}

#[test]
fn a_closed_run_cannot_close_again() {
    let given = MemLedger::given([
        published("developer", 1, &[], &[]),
        opened("r1", "developer", Some("r1"), Some(0)),
    ]);
    let closing = decide_close(&given, &close("r1", &[], &[])).unwrap();
    let given = MemLedger::given([
        published("developer", 1, &[], &[]),
        opened("r1", "developer", Some("r1"), Some(0)),
        closing,
    ]);
    assert_eq!(
        code(decide_close(&given, &close("r1", &[], &[]))),
        Code::RunClosed
    );
    assert_eq!(
        code(decide_close(&given, &close("nope", &[], &[]))),
        Code::UnknownRun
    );
}

fn publish(agent: &str, listens: &[&str], emits: &[&str]) -> PublishAgent {
    PublishAgent {
        agent: agent.into(),
        scope: "acme/platform".into(),
        listens: strings(listens),
        emits: emits
            .iter()
            .map(|e| EmitDecl {
                event: e.to_string(),
                context: "change".into(),
                artifacts: vec![],
            })
            .collect(),
        access: None,
        tool_budget: None,
    }
}

#[test]
fn r10_a_version_closing_a_loop_is_published_with_a_warning() {
    let given = MemLedger::given([published(
        "developer",
        1,
        &["review.done"],
        &[("code.ready", &[])],
    )]);
    let index: AgentIndex =
        [node_of(
            &match &published("developer", 1, &["review.done"], &[("code.ready", &[])]).event {
                LedgerEvent::AgentPublished(v) => v.clone(),
                _ => unreachable!(),
            },
        )]
        .into_iter()
        .collect();
    let then = decide_publish(
        &given,
        &index,
        &LoopBounds::default(),
        &publish("reviewer", &["code.ready"], &["review.done"]),
    )
    .unwrap();
    let LedgerEvent::AgentPublished(v) = &then.event else {
        panic!()
    };
    assert_eq!(
        (v.version, v.access.clone()),
        (1, strings(&["acme/platform"]))
    );
    let texts: Vec<&str> = v
        .loop_check
        .warnings
        .iter()
        .map(|w| w.text.as_str())
        .collect();
    assert_eq!(texts, ["reviewer → developer → reviewer"]);
    // The next version of an agent is numbered after its current one.
    let again = decide_publish(
        &given,
        &index,
        &LoopBounds::default(),
        &publish("developer", &[], &[]),
    )
    .unwrap();
    assert_eq!(again.event_id, ids::agent_version_event_id("developer", 2));
    let mut climbing = publish("x", &[], &[]);
    climbing.scope = "acme/../etc".into();
    assert_eq!(
        code(decide_publish(
            &given,
            &index,
            &LoopBounds::default(),
            &climbing
        )),
        Code::InvalidScope
    );
    let emits: Vec<String> = (0..65).map(|i| format!("e{i}")).collect();
    let emits: Vec<&str> = emits.iter().map(String::as_str).collect();
    assert_eq!(
        code(decide_publish(
            &given,
            &index,
            &LoopBounds::default(),
            &publish("x", &[], &emits)
        )),
        Code::LimitExceeded
    );
}

/// `agent` at version 1 in `scope`, listening to `code.ready`.
fn listener_in(agent: &str, scope: &str) -> Decided {
    let mut d = published(agent, 1, &["code.ready"], &[]);
    if let LedgerEvent::AgentPublished(v) = &mut d.event {
        v.scope = scope.into();
        v.access = strings(&[scope]);
    }
    d
}

#[test]
fn r3_r4_r9_each_listener_of_an_event_is_opened_once_refused_or_left_alone() {
    let source = [
        published(
            "developer",
            1,
            &["code.ready"],
            &[("code.ready", &["patch"])],
        ),
        opened("r1", "developer", Some("r1"), Some(0)),
    ];
    let given = MemLedger::given(source.clone());
    let closing = decide_close(&given, &close("r1", &[("patch", "diff")], &[])).unwrap();
    let mut records = source.to_vec();
    records.extend([
        closing,
        listener_in("reviewer", "acme/platform"),
        listener_in("auditor", "other/team"),
    ]);
    let given = MemLedger::given(records.clone());
    let r1 = given.run("r1").unwrap().unwrap();
    let ev = &r1.published_events()[0];

    // A listener in scope opens one hop further down r1's chain.
    let ListenerOutcome::Opened(open) =
        decide_listener_record(&given, &r1, ev, "reviewer", 2).unwrap()
    else {
        panic!("reviewer should open")
    };
    let LedgerEvent::RunOpened(o) = &open.event else {
        panic!("{open:?}")
    };
    assert_eq!(o.run, ids::listener_run_id(&ev.event_id, "reviewer"));
    assert_eq!(
        (o.root.as_deref(), o.hop, open.key.as_str()),
        (Some("r1"), Some(1), "r1")
    );
    assert_eq!(o.trigger.as_ref().unwrap().source_run, "r1");

    // The agent whose event it is: refused as a step of r1 (R4).
    let ListenerOutcome::Refused(self_step, reason) =
        decide_listener_record(&given, &r1, ev, "developer", 2).unwrap()
    else {
        panic!("developer must not hear its own event")
    };
    assert_eq!(reason, RefusalReason::SelfListen);
    assert_eq!((self_step.step, self_step.key.as_str()), (2, "r1"));

    // A listener whose scope does not cover the artifacts' area (R9).
    let ListenerOutcome::Refused(_, reason) =
        decide_listener_record(&given, &r1, ev, "auditor", 2).unwrap()
    else {
        panic!("auditor is across the scope barrier")
    };
    assert_eq!(
        reason,
        RefusalReason::ScopeBarrier {
            listener_scope: "other/team".into(),
            areas: strings(&["acme/platform"]),
        }
    );

    // Given those records, a second delivery records nothing (R3).
    records.extend([open, self_step]);
    let given = MemLedger::given(records);
    let r1 = given.run("r1").unwrap().unwrap();
    for agent in ["reviewer", "developer", "nobody"] {
        assert_eq!(
            decide_listener_record(&given, &r1, ev, agent, 3).unwrap(),
            ListenerOutcome::Nothing,
            "{agent}"
        );
    }
}
