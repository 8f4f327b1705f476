//! Context exchange through the engine: every exchange and every refusal is
//! a step in the master run's trail (R11–R15), and survives a rebuild.
//! The rule tests run on every backend through every transport.

#[macro_use]
mod common;

use agentledger::context::ContextEvent;
use agentledger::model::LedgerEvent;
use common::{Ledger, On};
use serde_json::{json, Value};

on_every_backend_and_transport!(
    r11_isolation_refusals_are_recorded_in_the_master_trail,
    r12_sync_dependency_skipped_is_refused_and_recorded,
    r13_both_evaluation_layers_are_in_the_trail,
    r15_tampered_expired_and_ungranted_references_are_refused_and_recorded,
);

fn ctx(agent: &str, sub: &str, deps: &[&str], uri: Option<&str>) -> Value {
    json!({
        "AgentID": format!("id-{agent}"), "AgentName": agent, "SubTaskID": sub, "SubTaskName": sub,
        "Dependencies": deps,
        "ContextItems": uri.map(|u| vec![json!({"ContextID": "doc", "ContextType": "text", "MediaType": "text/plain",
            "ContextURI": u, "Description": "the doc", "Priority": "reference_only"})]).unwrap_or_default(),
        "todoItems": [{"itemID": "i1", "description": "do it"}],
        "EvaluationPolicy": {"SuccessCriteria": [{"CriterionID": "c1", "Description": "ok", "Required": true}], "ConfidenceThreshold": 0.8}
    })
}

fn done(sent: &Value) -> Value {
    let mut r = sent.clone();
    r["ItemStateUpdates"] = json!([{"itemID": "i1", "state": 1}]);
    r["KeyInformation"] = json!([{"itemID": "i1", "outputabstract": "done"}]);
    r["EvaluationResult"] = json!({"Status": "passed", "Confidence": 0.9,
        "CriterionResults": [{"CriterionID": "c1", "Status": "passed", "EvidenceRefs": [], "TraceRefs": []}]});
    r
}

fn setup(l: &mut Ledger) -> String {
    l.publish("master", "acme/travel", &[], &[]);
    l.open_run("m1", "master");
    l.ok(json!({"op":"open_task","task":"t1","run":"m1","task_context":{
        "TaskID":"T1","UserQuery":"q","TaskName":"n","TaskDescription":"d","GoalStatus":[],"OverallStatus":"open"}}));
    let b = l
        .ok(json!({"op":"put_blob","task":"t1","content":"referenced document body","ttl_s":3600}));
    b["uri"].as_str().unwrap().to_string()
}

fn refusals(l: &Ledger) -> Vec<(String, String)> {
    l.engine
        .trail("m1", false)
        .unwrap()
        .into_iter()
        .filter_map(|s| match s.event {
            LedgerEvent::Context(c) => match c.event {
                ContextEvent::Refused { op, code, .. } => Some((op, code)),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn r11_isolation_refusals_are_recorded_in_the_master_trail(on: &On) {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_for(d.path(), on);
    let uri = setup(&mut l);
    let hotel = ctx("hotel", "h1", &[], Some(&uri));
    let flight = ctx("flight", "f1", &[], None);
    l.ok(json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":hotel}));
    l.ok(json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":flight}));
    let own = l.ok(json!({"op":"get_context","task":"t1","agent":"flight"}));
    assert_eq!(own["agent_context"]["AgentName"], "flight");
    assert_eq!(
        l.refused(
            json!({"op":"return_context","task":"t1","agent":"flight","agent_context":done(&hotel)})
        ),
        "not_your_context"
    );
    assert_eq!(
        l.refused(json!({"op":"get_context","task":"t1","agent":"weather"})),
        "not_your_context"
    );
    assert_eq!(l.refused(json!({"op":"update_task","task":"t1","run":"someone-else","task_context":{
        "TaskID":"T1","UserQuery":"q","TaskName":"n","TaskDescription":"d","GoalStatus":[],"OverallStatus":"hijacked"}})), "not_master");
    assert_eq!(
        refusals(&l),
        vec![
            ("return_context".to_string(), "not_your_context".to_string()),
            ("get_context".to_string(), "not_your_context".to_string()),
            ("update_task".to_string(), "not_master".to_string()),
        ]
    );
}

fn r12_sync_dependency_skipped_is_refused_and_recorded(on: &On) {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_for(d.path(), on);
    setup(&mut l);
    let a = ctx("diagnosis", "d1", &[], None);
    let b = ctx("prescription", "p1", &["d1"], None);
    assert_eq!(
        l.refused(
            json!({"op":"send_context","task":"t1","run":"m1","mode":"sync","agent_context":b})
        ),
        "dependency_pending"
    );
    l.ok(json!({"op":"send_context","task":"t1","run":"m1","mode":"sync","agent_context":a}));
    assert_eq!(
        l.refused(
            json!({"op":"send_context","task":"t1","run":"m1","mode":"sync","agent_context":b})
        ),
        "subtask_outstanding"
    );
    l.ok(json!({"op":"return_context","task":"t1","agent":"diagnosis","agent_context":done(&a)}));
    assert_eq!(
        l.refused(
            json!({"op":"send_context","task":"t1","run":"m1","mode":"sync","agent_context":b})
        ),
        "dependency_pending"
    );
    l.ok(json!({"op":"evaluate","task":"t1","run":"m1","subtask":"s1","decision":"accepted","reason":"fine"}));
    l.ok(json!({"op":"send_context","task":"t1","run":"m1","mode":"sync","agent_context":b}));
    assert_eq!(refusals(&l).len(), 3);
}

fn r13_both_evaluation_layers_are_in_the_trail(on: &On) {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_for(d.path(), on);
    setup(&mut l);
    let a = ctx("weather", "w1", &[], None);
    l.ok(json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":a}));
    let mut low = done(&a);
    low["EvaluationResult"]["Confidence"] = json!(0.5);
    let r = l.ok(json!({"op":"return_context","task":"t1","agent":"weather","agent_context":low}));
    assert_eq!(r["layer1"]["passed"], false);
    assert!(r["layer1"]["reasons"][0]
        .as_str()
        .unwrap()
        .contains("confidence"));
    assert_eq!(l.refused(json!({"op":"evaluate","task":"t1","subtask":"s1","decision":"accepted","run":"not-the-master"})), "not_master");
    l.ok(json!({"op":"evaluate","task":"t1","run":"m1","subtask":"s1","decision":"accepted","reason":"good enough"}));
    assert_eq!(
        l.refused(
            json!({"op":"evaluate","task":"t1","run":"m1","subtask":"s1","decision":"rejected"})
        ),
        "already_evaluated"
    );
    let kinds: Vec<&str> = l
        .engine
        .trail("m1", false)
        .unwrap()
        .iter()
        .map(|s| s.event.kind())
        .collect::<Vec<_>>()
        .into_iter()
        .collect();
    let i_ret = kinds.iter().position(|k| *k == "context_returned").unwrap();
    let i_eval = kinds
        .iter()
        .position(|k| *k == "context_evaluated")
        .unwrap();
    assert!(i_ret < i_eval, "{kinds:?}");
}

fn r15_tampered_expired_and_ungranted_references_are_refused_and_recorded(on: &On) {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open_for(d.path(), on);
    let uri = setup(&mut l);
    l.ok(json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":ctx("hotel", "h1", &[], Some(&uri))}));
    l.ok(json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":ctx("flight", "f1", &[], None)}));
    let got = l.ok(json!({"op":"get_blob","task":"t1","agent":"hotel","uri":uri}));
    assert_eq!(got["content"], "referenced document body");
    assert_eq!(
        l.refused(json!({"op":"get_blob","task":"t1","agent":"flight","uri":uri})),
        "not_granted"
    );
    std::fs::write(l.engine.blob_file("t1", &uri).unwrap(), b"forged").unwrap();
    assert_eq!(
        l.refused(json!({"op":"get_blob","task":"t1","agent":"hotel","uri":uri})),
        "digest_mismatch"
    );
    let short = l.ok(json!({"op":"put_blob","task":"t1","content":"gone soon","ttl_s":0}));
    assert_eq!(
        l.refused(json!({"op":"get_blob","task":"t1","agent":"m1","uri":short["uri"]})),
        "expired"
    );
    // A read never deletes: the bytes go in a sweep, once no live
    // reference holds them; the digest stays in the ledger after.
    let path = l
        .engine
        .blob_file("t1", short["uri"].as_str().unwrap())
        .unwrap();
    assert!(path.exists());
    l.engine.sweep_content(std::time::Duration::ZERO).unwrap();
    assert!(!path.exists());
    let state = l.engine.views().task("t1").unwrap().unwrap();
    assert!(state.blobs.contains_key(short["uri"].as_str().unwrap()));
    let codes: Vec<String> = refusals(&l).into_iter().map(|(_, c)| c).collect();
    assert_eq!(codes, vec!["not_granted", "digest_mismatch", "expired"]);
}

#[test]
fn context_state_survives_rebuild_identically() {
    let d = tempfile::tempdir().unwrap();
    {
        let mut l = Ledger::open(d.path());
        let uri = setup(&mut l);
        let a = ctx("hotel", "h1", &[], Some(&uri));
        l.ok(json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":a}));
        l.ok(json!({"op":"return_context","task":"t1","agent":"hotel","agent_context":done(&a)}));
        assert_eq!(
            l.refused(json!({"op":"get_context","task":"t1","agent":"nobody"})),
            "not_your_context"
        );
    }
    let (_, report) = common::rebuild_report(d.path());
    assert_eq!(report["identical"], true, "{report}");
    let l = Ledger::open(d.path());
    let st = l.engine.views().task("t1").unwrap().unwrap();
    assert_eq!(st.subtasks.len(), 1);
    assert!(st.subtasks[0].layer1.as_ref().unwrap().passed);
}

#[test]
fn invalid_context_names_the_json_path() {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(d.path());
    setup(&mut l);
    let mut bad = ctx("hotel", "h1", &[], None);
    bad["todoItems"][0]["itemID"] = json!(7);
    let err = agentledger::apply::apply_value(
        &mut l.engine,
        &json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":bad}),
    )
    .unwrap_err();
    assert_eq!(err.code(), "invalid_context");
    assert!(err.to_string().contains("/todoItems/0/itemID"), "{err}");
}
