//! Who caused each record: every record names the principal whose request
//! wrote it, and the trail says so ("by agent:hotel"), in text and JSON.

mod common;

use agentledger::auth::Principal;
use common::Ledger;
use serde_json::json;

#[test]
fn every_step_names_the_principal_that_caused_it() {
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(d.path());
    l.publish(
        "developer",
        "acme/platform",
        &[],
        &[("code.ready", &["patch"])],
    );
    l.engine
        .act_as(&"platform:acme".parse::<Principal>().unwrap());
    l.open_run("r1", "developer");
    l.engine
        .act_as(&"agent:developer".parse::<Principal>().unwrap());
    l.close("r1", json!({"patch": "diff"}));
    assert_eq!(l.engine.principal(), "agent:developer");

    let by: Vec<String> = l
        .engine
        .trail("r1", false)
        .unwrap()
        .into_iter()
        .map(|s| s.principal)
        .collect();
    assert_eq!(by, ["platform:acme", "agent:developer"]);
    drop(l);

    // The CLI prints it, and a record written by the CLI is the operator's.
    let (code, text, err) = common::cli(d.path(), &["trail", "r1"]);
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = text.lines().filter(|l| l.contains('#')).collect();
    assert!(lines[0].ends_with("(by platform:acme)"), "{text}");
    assert!(lines[1].ends_with("(by agent:developer)"), "{text}");
    let (_, json_out, _) = common::cli(d.path(), &["--json", "trail", "r1"]);
    let steps: Vec<serde_json::Value> = json_out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(steps[0]["by"], "platform:acme");
    assert_eq!(steps[1]["by"], "agent:developer");
}

/// What the policy is told about a request comes from the views: the run's
/// agent and scope, who opened it, and who opened the task's master run.
#[test]
fn the_facts_of_a_request_come_from_who_opened_what() {
    use agentledger::auth::{gather, Facts};
    use agentledger::protocol::parse_request;
    let d = tempfile::tempdir().unwrap();
    let mut l = Ledger::open(d.path());
    l.publish("planner", "acme/travel", &[], &[]);
    l.publish("hotel", "acme/travel/inns", &[], &[]);
    l.engine
        .act_as(&"platform:acme".parse::<Principal>().unwrap());
    l.open_run("m1", "planner");
    l.open_run("h1", "hotel");
    l.ok(json!({"op":"open_task","task":"t1","run":"m1","task_context":{
        "TaskID":"T1","UserQuery":"q","TaskName":"n","TaskDescription":"d","GoalStatus":[],"OverallStatus":"open"}}));
    let facts = |l: &Ledger, v: serde_json::Value| {
        gather(l.engine.views(), &parse_request(&v).unwrap()).unwrap()
    };
    assert_eq!(
        facts(
            &l,
            json!({"op":"close_run","run":"h1","status":"succeeded"})
        ),
        Facts {
            run_agent: Some("hotel".into()),
            agent_scope: Some("acme/travel/inns".into()),
            run_opened_by: Some("platform:acme".into()),
            task_master: None,
        }
    );
    assert_eq!(
        facts(&l, json!({"op":"open_run","run":"x","agent":"hotel"})).agent_scope,
        Some("acme/travel/inns".into())
    );
    assert_eq!(
        facts(&l, json!({"op":"put_blob","task":"t1","content":"x"})).task_master,
        Some("platform:acme".into())
    );
    // Nothing known about what does not exist: the operation refuses it.
    assert_eq!(
        facts(
            &l,
            json!({"op":"close_run","run":"nope","status":"succeeded"})
        ),
        Facts::default()
    );
    // Survives a rebuild: the principal is in the log, not only the views.
    drop(l);
    let (code, report) = common::rebuild_report(d.path());
    assert_eq!(
        (code, &report["identical"]),
        (Some(0), &json!(true)),
        "{report}"
    );
    let l = Ledger::open(d.path());
    assert_eq!(
        l.engine.views().run("m1").unwrap().unwrap().opened_by,
        "platform:acme"
    );
}
