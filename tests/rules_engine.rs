//! The chain rules R1–R9 end to end: operations in, trail and views out.
//! Written once, run on every backend (the embedded log and Kafka) through
//! every transport (a call, HTTP, WebSocket).

#[macro_use]
mod common;

use agentledger::codec;
use agentledger::model::Topic;
use agentledger::model::*;
use agentledger::projector::project_all;
use agentledger::views::Views;
use common::{Ledger, On};
use serde_json::json;

on_every_backend_and_transport!(
    r1_every_replay_and_rebuild_reaches_the_same_hop,
    r2_hop_eight_runs_publishes_artifacts_but_withholds_events,
    r3_event_delivered_twice_opens_each_listener_once,
    r4_agent_never_started_by_its_own_event_and_refusal_is_recorded,
    r5_run_publishes_its_opening_version_listeners_read_at_dispatch,
    r6_run_without_chain_position_publishes_nothing_further,
    r7_no_finished_run_skipped_or_dispatched_twice,
    r8_listener_reads_only_contract_names_and_each_read_is_a_tool_call,
    r8_tool_budget_bounds_reads,
    r9_labels_flow_and_scope_barrier_holds
);

fn r1_every_replay_and_rebuild_reaches_the_same_hop(on: &On) {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_for(d.path(), on);
    let runs = l.drive_loop("r0");
    let hops: Vec<Option<u32>> = runs.iter().map(|r| l.run(r).hop).collect();
    assert_eq!(hops, (0..=8).map(Some).collect::<Vec<_>>());
    drop(l);
    // A fresh projection of the same log, twice over (a replay), agrees.
    let log = on.backend.log(d.path());
    for attempt in 0..2 {
        let views = Views::open(d.path().join(format!("replay{attempt}"))).unwrap();
        project_all(log.as_ref(), &views, None, &|_| {}).unwrap();
        let replayed: Vec<Option<u32>> = runs
            .iter()
            .map(|r| views.run(r).unwrap().unwrap().hop)
            .collect();
        assert_eq!(replayed, hops);
        assert_eq!(
            views.run(&runs[5]).unwrap().unwrap().root.as_deref(),
            Some("r0")
        );
    }
}

fn r2_hop_eight_runs_publishes_artifacts_but_withholds_events(on: &On) {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_for(d.path(), on);
    let runs = l.drive_loop("r0");
    assert_eq!(runs.len(), 9, "hops 0..=8, nothing beyond");
    let last = l.run(&runs[8]);
    assert_eq!(last.hop, Some(8));
    assert!(
        !last.artifacts.is_empty(),
        "the run at hop 8 still publishes artifacts"
    );
    assert!(last.published.is_empty());
    assert_eq!(
        last.withheld.as_ref().unwrap().reason,
        WithheldReason::HopLimit {
            root: "r0".into(),
            limit: 8
        }
    );
    // The closing step says so, naming the root run and the limit.
    let trail = l.engine.trail(&runs[8], false).unwrap();
    let closing = trail
        .iter()
        .find(|s| matches!(s.event, LedgerEvent::RunClosed(_)))
        .unwrap();
    let line = agentledger::queries::report::step_line(&runs[8], closing);
    assert!(
        line.contains(
            "events WITHHELD (code.ready): this run is at hop 8, the limit of the chain started by r0"
        ),
        "{line}"
    );
    // Its listeners do not start, however often we dispatch.
    assert_eq!(l.dispatch()["opened"], json!([]));
    let chain = l.engine.views().chain("r0").unwrap().unwrap();
    assert_eq!(chain.max_hop, 8);
    assert_eq!(chain.runs.len(), 9);
}

fn r3_event_delivered_twice_opens_each_listener_once(on: &On) {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_for(d.path(), on);
    l.publish(
        "triager",
        "acme/platform",
        &[],
        &[("incident.triaged", &["triage_summary"])],
    );
    l.publish("responder", "acme/platform", &["incident.triaged"], &[]);
    l.publish("notifier", "acme/platform", &["incident.triaged"], &[]);
    l.open_run("t1", "triager");
    l.close("t1", json!({"triage_summary":"s"}));
    let source = l.run("t1");
    let ev = &source.published_events()[0];
    // A worker crashed after opening the responder but before recording the
    // dispatch: its record is in the log, the dispatch record is not.
    let responder = ids::listener_run_id(&ev.event_id, "responder");
    let early = LedgerEvent::RunOpened(RunOpened {
        run: responder.clone(),
        agent: "responder".into(),
        version: 1,
        scope: "acme/platform".into(),
        root: Some("t1".into()),
        hop: Some(1),
        trigger: Some(Trigger {
            event_id: ev.event_id.clone(),
            event: ev.event.clone(),
            context: ev.context.clone(),
            source_run: "t1".into(),
            artifacts: ev.artifacts.clone(),
        }),
        legacy_trigger: None,
        labels: vec!["area:acme/platform".into()],
    });
    let bytes = codec::encode(
        &early,
        &ids::step_event_id(&responder, 0),
        "t1",
        1,
        "crashed-worker",
        0,
    )
    .unwrap();
    l.engine
        .log()
        .append(Topic::Ledger, &[(b"t1".to_vec(), bytes.clone())])
        .unwrap();
    // The same record delivered twice more: it counts once.
    l.engine
        .log()
        .append(Topic::Ledger, &[(b"t1".to_vec(), bytes)])
        .unwrap();
    l.engine.catch_up(&|_| {}).unwrap();
    let d1 = l.dispatch();
    let opened: Vec<&str> = d1["opened"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["agent"].as_str().unwrap())
        .collect();
    assert_eq!(
        opened,
        vec!["notifier"],
        "responder was already open: not opened again"
    );
    let chain = l.engine.views().chain("t1").unwrap().unwrap();
    assert_eq!(chain.runs.iter().filter(|r| **r == responder).count(), 1);
    assert_eq!(chain.runs.len(), 3);
    assert_eq!(l.dispatch()["opened"], json!([]));
}

fn r4_agent_never_started_by_its_own_event_and_refusal_is_recorded(on: &On) {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_for(d.path(), on);
    l.publish(
        "echo",
        "acme/platform",
        &["echo.said"],
        &[("echo.said", &[])],
    );
    l.open_run("e1", "echo");
    l.close("e1", json!({}));
    let a = l.dispatch();
    assert_eq!(a["opened"], json!([]));
    assert_eq!(a["refused"][0]["reason"], json!("self_listen"));
    let trail = l.engine.trail("e1", false).unwrap();
    assert!(trail.iter().any(|s| matches!(&s.event, LedgerEvent::ListenerRefused(r) if r.reason == RefusalReason::SelfListen)));
}

fn r5_run_publishes_its_opening_version_listeners_read_at_dispatch(on: &On) {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_for(d.path(), on);
    l.publish(
        "developer",
        "acme/platform",
        &[],
        &[("code.ready", &["patch"])],
    );
    l.publish("reviewer", "acme/platform", &["code.ready"], &[]);
    l.open_run("r1", "developer");
    // A new developer version while r1 runs: r1 still publishes code.ready.
    l.publish("developer", "acme/platform", &[], &[("code.shipped", &[])]);
    // The reviewer stops listening, a linter starts: read at dispatch time.
    l.publish("reviewer", "acme/platform", &["something.else"], &[]);
    l.publish("linter", "acme/platform", &["code.ready"], &[]);
    let closed = l.close("r1", json!({"patch":"p"}));
    assert_eq!(closed["withheld"], json!(null));
    assert_eq!(l.run("r1").published[0].event, "code.ready");
    let a = l.dispatch();
    let opened: Vec<&str> = a["opened"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["agent"].as_str().unwrap())
        .collect();
    assert_eq!(opened, vec!["linter"]);
    // A run opened on v2 publishes v2's event.
    l.open_run("r2", "developer");
    assert_eq!(l.run("r2").version, 2);
    l.close("r2", json!({}));
    assert_eq!(l.run("r2").published[0].event, "code.shipped");
}

fn r6_run_without_chain_position_publishes_nothing_further(on: &On) {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_for(d.path(), on);
    l.publish(
        "developer",
        "acme/platform",
        &["review.done"],
        &[("code.ready", &[])],
    );
    l.publish(
        "reviewer",
        "acme/platform",
        &["code.ready"],
        &[("review.done", &[])],
    );
    let opened =
        l.ok(json!({"op":"open_run","run":"x1","agent":"reviewer","legacy_trigger":"ev-old-1"}));
    assert_eq!(opened["root"], json!(null));
    assert_eq!(opened["hop"], json!(null));
    // Closed by this engine: the closing step says the chain is unknown.
    let closed = l.close("x1", json!({}));
    assert_eq!(closed["withheld"]["reason"], json!("chain_unknown"));
    let a = l.dispatch();
    assert_eq!(a["opened"], json!([]));
    assert_eq!(a["withheld"][0]["reason"], json!("chain_unknown"));

    // Closed by an older worker, whose record lists the events and says
    // nothing of the chain: still withheld, and no such line in the trail.
    l.ok(json!({"op":"open_run","run":"x2","agent":"reviewer","legacy_trigger":"ev-old-2"}));
    let step = l.run("x2").next_step;
    let old_close = LedgerEvent::RunClosed(RunClosed {
        run: "x2".into(),
        status: RunStatus::Succeeded,
        summary: "closed by an older worker".into(),
        artifacts: vec![],
        labels: vec![],
        published: vec![AgentEventOut {
            event_id: ids::agent_event_id("x2", "review.done"),
            event: "review.done".into(),
            context: "ctx".into(),
            artifacts: vec![],
        }],
        withheld: None,
    });
    let bytes = codec::encode(
        &old_close,
        &ids::step_event_id("x2", step),
        "x2",
        1,
        "old-worker",
        step,
    )
    .unwrap();
    l.engine
        .log()
        .append(Topic::Ledger, &[(b"x2".to_vec(), bytes)])
        .unwrap();
    l.engine.catch_up(&|_| {}).unwrap();
    let a = l.dispatch();
    assert_eq!(
        a["opened"],
        json!([]),
        "an older worker's close opens nothing"
    );
    let trail = l.engine.trail("x2", false).unwrap();
    let closing = trail
        .iter()
        .find(|s| matches!(s.event, LedgerEvent::RunClosed(_)))
        .unwrap();
    assert!(!agentledger::queries::report::step_line("x2", closing).contains("chain is unknown"));
}

fn r7_no_finished_run_skipped_or_dispatched_twice(on: &On) {
    let d = tempfile::tempdir().unwrap();
    {
        let mut l = Ledger::open_for(d.path(), on);
        l.publish("worker", "acme/platform", &[], &[("job.done", &[])]);
        l.publish("collector", "acme/platform", &["job.done"], &[]);
        // Many runs finish between two sweeps.
        for i in 0..60 {
            l.open_run(&format!("w{i}"), "worker");
            l.close(&format!("w{i}"), json!({}));
        }
        let a = l.dispatch();
        assert_eq!(a["opened"].as_array().unwrap().len(), 60);
        let mut sources: Vec<&str> = a["opened"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["source_run"].as_str().unwrap())
            .collect();
        sources.sort();
        sources.dedup();
        assert_eq!(
            sources.len(),
            60,
            "every finished run dispatched exactly once"
        );
        for i in 60..65 {
            l.open_run(&format!("w{i}"), "worker");
            l.close(&format!("w{i}"), json!({}));
        }
        l.engine.flush().unwrap();
    }
    // The cursor is durable: after a restart only the five new runs go out.
    let mut l = Ledger::open_for(d.path(), on);
    let a = l.dispatch();
    assert_eq!(a["opened"].as_array().unwrap().len(), 5);
    assert_eq!(l.dispatch()["opened"], json!([]));
    for p in 0..l.engine.log().partitions(Topic::Ledger) {
        assert_eq!(l.engine.views().finished_from(p, None, 1).unwrap(), vec![]);
    }
}

fn r8_listener_reads_only_contract_names_and_each_read_is_a_tool_call(on: &On) {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_for(d.path(), on);
    l.publish(
        "triager",
        "acme/platform",
        &[],
        &[("incident.triaged", &["triage_summary"])],
    );
    l.publish("responder", "acme/platform", &["incident.triaged"], &[]);
    l.open_run("t1", "triager");
    l.close(
        "t1",
        json!({"triage_summary":"SECRET-BODY","suspected_cause":"not exposed"}),
    );
    let a = l.dispatch();
    let resp = a["opened"][0]["run"].as_str().unwrap().to_string();
    // The listener sees names, refs, digests, source run, labels: never bytes.
    let opened_step = &l.engine.trail(&resp, false).unwrap()[0];
    let shown = agentledger::queries::report::step_json(&resp, opened_step).to_string();
    assert!(shown.contains("triage_summary") && shown.contains("sha256:"));
    assert!(!shown.contains("SECRET-BODY"));
    assert!(!shown.contains("suspected_cause"));
    let got = l.ok(json!({"op":"read_artifact","run":resp,"name":"triage_summary"}));
    assert_eq!(got["content"], json!("SECRET-BODY"));
    assert_eq!(got["source_run"], json!("t1"));
    let the_ref = l.run(&resp).trigger.unwrap().artifacts[0]
        .content_ref()
        .clone();
    assert_eq!(
        l.refused(json!({"op":"read_artifact","run":resp,"name":the_ref})),
        "ref_not_allowed"
    );
    assert_eq!(
        l.refused(json!({"op":"read_artifact","run":resp,"name":"suspected_cause"})),
        "not_in_contract"
    );
    let run = l.run(&resp);
    assert_eq!(run.tool_calls, 3);
    assert_eq!(
        l.engine.trail(&resp, false).unwrap().len(),
        4,
        "open + three reads"
    );
}

fn r8_tool_budget_bounds_reads(on: &On) {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_for(d.path(), on);
    l.publish(
        "triager",
        "acme/platform",
        &[],
        &[("incident.triaged", &["s"])],
    );
    l.ok(json!({"op":"publish_agent","agent":"responder","scope":"acme/platform","listens":["incident.triaged"],"emits":[],"tool_budget":1}));
    l.open_run("t1", "triager");
    l.close("t1", json!({"s":"x"}));
    let resp = l.dispatch()["opened"][0]["run"]
        .as_str()
        .unwrap()
        .to_string();
    l.ok(json!({"op":"read_artifact","run":resp,"name":"s"}));
    assert_eq!(
        l.refused(json!({"op":"read_artifact","run":resp,"name":"s"})),
        "budget_exhausted"
    );
}

fn r9_labels_flow_and_scope_barrier_holds(on: &On) {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_for(d.path(), on);
    l.publish(
        "triager",
        "acme/platform",
        &[],
        &[("incident.triaged", &["triage_summary"])],
    );
    l.publish(
        "responder",
        "acme/platform",
        &["incident.triaged"],
        &[("incident.resolved", &["final_answer"])],
    );
    l.publish("billing", "acme/finance", &["incident.triaged"], &[]);
    l.publish("cfo-desk", "acme/finance", &["incident.resolved"], &[]);
    l.publish("company-audit", "acme", &["incident.resolved"], &[]);
    l.open_run("t1", "triager");
    l.ok(json!({"op":"close_run","run":"t1","status":"succeeded","artifacts":{"triage_summary":"from a webhook"},"labels":["untrusted"]}));
    let a = l.dispatch();
    assert_eq!(a["refused"][0]["agent"], json!("billing"));
    assert_eq!(a["refused"][0]["reason"], json!("scope_barrier"));
    let resp = a["opened"][0]["run"].as_str().unwrap().to_string();
    assert!(l
        .run(&resp)
        .labels
        .contains(&"area:acme/platform".to_string()));
    assert!(!l.run(&resp).labels.contains(&"untrusted".to_string()));
    l.ok(json!({"op":"read_artifact","run":resp,"name":"triage_summary"}));
    assert!(
        l.run(&resp).labels.contains(&"untrusted".to_string()),
        "untrusted flows in by reading"
    );
    let closed = l.ok(json!({"op":"close_run","run":resp,"status":"succeeded","artifacts":{"final_answer":"fixed"}}));
    assert_eq!(
        closed["labels"],
        json!(["area:acme/platform", "untrusted"]),
        "every artifact it publishes carries all of the run's labels"
    );
    let b = l.dispatch();
    // The listener's input carries them too.
    assert_eq!(
        b["opened"][0]["input"]["labels"],
        json!(["area:acme/platform", "untrusted"])
    );
    assert_eq!(
        b["opened"][0]["input"]["artifacts"][0]["name"],
        json!("final_answer")
    );
    let opened: Vec<&str> = b["opened"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["agent"].as_str().unwrap())
        .collect();
    assert_eq!(
        opened,
        vec!["company-audit"],
        "an ancestor scope may receive"
    );
    assert_eq!(b["refused"][0]["agent"], json!("cfo-desk"));
    // The refusal is in the trail with its reason.
    let trail = l.engine.trail("t1", false).unwrap();
    assert!(trail.iter().any(|s| matches!(&s.event, LedgerEvent::ListenerRefused(r) if r.agent == "billing" && r.reason.code() == "scope_barrier")));
}
