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
            task_master_agent: None,
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

fn apply_as(
    dir: &std::path::Path,
    who: &[&str],
    ops: &[serde_json::Value],
) -> (i32, Vec<serde_json::Value>, String) {
    let input: String = ops.iter().map(|o| format!("{o}\n")).collect();
    common::apply_answers(dir, &input, who)
}

/// `apply --as` carries out requests as that principal: what the policy
/// does not allow is refused `forbidden` and writes nothing; what it does
/// is recorded as that principal's.
#[test]
fn apply_as_a_principal_is_held_to_what_it_may_do() {
    let d = tempfile::tempdir().unwrap();
    let acme = ["--as", "platform:acme", "--scope", "acme/travel"];
    let (code, a, err) = apply_as(
        d.path(),
        &acme,
        &[
            json!({"op":"publish_agent","agent":"planner","scope":"acme/travel"}),
            json!({"op":"publish_agent","agent":"hotel","scope":"acme/travel/inns"}),
            json!({"op":"publish_agent","agent":"cfo","scope":"acme/finance"}),
            json!({"op":"open_run","run":"m1","agent":"planner"}),
            json!({"op":"open_run","run":"h1","agent":"hotel"}),
            json!({"op":"open_task","task":"t1","run":"m1","task_context":{
                "TaskID":"T1","UserQuery":"q","TaskName":"n","TaskDescription":"d","GoalStatus":[],"OverallStatus":"open"}}),
        ],
    );
    assert_eq!(code, 1, "{err}");
    let codes: Vec<&str> = a
        .iter()
        .map(|a| a["error"]["code"].as_str().unwrap_or("ok"))
        .collect();
    assert_eq!(codes, ["ok", "ok", "forbidden", "ok", "ok", "ok"]);
    assert!(
        a[2]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("acme/finance"),
        "{}",
        a[2]
    );

    // The hotel agent closes its own run, not the planner's, and reads
    // nothing as another agent.
    let (_, a, _) = apply_as(
        d.path(),
        &["--as", "agent:hotel"],
        &[
            json!({"op":"close_run","run":"m1","status":"succeeded"}),
            json!({"op":"get_context","task":"t1","agent":"planner"}),
            json!({"op":"open_run","run":"h2","agent":"hotel"}),
            json!({"op":"close_run","run":"h1","status":"succeeded"}),
        ],
    );
    let codes: Vec<&str> = a
        .iter()
        .map(|a| a["error"]["code"].as_str().unwrap_or("ok"))
        .collect();
    assert_eq!(codes, ["forbidden", "forbidden", "forbidden", "ok"]);

    // Another platform is not the task's master.
    let (_, a, _) = apply_as(
        d.path(),
        &["--as", "platform:globex", "--scope", "acme/travel"],
        &[json!({"op":"put_blob","task":"t1","content":"x"})],
    );
    assert_eq!(a[0]["error"]["code"], "forbidden", "{}", a[0]);

    // Nothing refused was carried out; each refusal is a step of the run it
    // concerned (the task's master run for task operations), as the
    // caller's; what was done is recorded as whose it was.
    let l = Ledger::open(d.path());
    assert!(l.engine.views().agent("cfo").unwrap().is_none());
    assert!(l.engine.views().run("h2").unwrap().is_none());
    assert!(l
        .engine
        .views()
        .run("m1")
        .unwrap()
        .unwrap()
        .status
        .is_none());
    let refused: Vec<(String, String)> = l
        .engine
        .trail("m1", false)
        .unwrap()
        .into_iter()
        .filter_map(|s| match s.event {
            agentledger::model::LedgerEvent::Forbidden(f) => Some((f.op, s.principal)),
            _ => None,
        })
        .collect();
    assert_eq!(
        refused,
        [
            ("close_run".to_string(), "agent:hotel".to_string()),
            ("get_context".to_string(), "agent:hotel".to_string()),
            ("put_blob".to_string(), "platform:globex".to_string()),
        ]
    );
    let by: Vec<String> = l
        .engine
        .trail("h1", false)
        .unwrap()
        .into_iter()
        .map(|s| s.principal)
        .collect();
    assert_eq!(by, ["platform:acme", "agent:hotel"]);
    drop(l);
    let (_, text, _) = common::cli(d.path(), &["trail", "m1"]);
    assert!(
        text.contains("close_run FORBIDDEN: \"agent:hotel may not close_run")
            && text.contains("(by agent:hotel)"),
        "{text}"
    );
}

#[test]
fn apply_as_says_what_is_wrong_with_a_principal() {
    let d = tempfile::tempdir().unwrap();
    for (who, says) in [
        (&["--as", "root"][..], "not one of operator"),
        (&["--as", "platform:acme"][..], "at least one scope"),
        (
            &["--as", "agent:hotel", "--scope", "acme"][..],
            "takes no scopes",
        ),
    ] {
        let (code, _, err) = apply_as(d.path(), who, &[json!({"op":"dispatch"})]);
        assert_eq!(code, 2, "{who:?}: {err}");
        assert!(err.contains(says), "{who:?}: {err}");
    }
}

/// The read commands take `--as` too: an auditor reads, whoever else only
/// writes or follows events is refused `forbidden` (exit 1) before
/// anything is read, and a principal that is not one is said (exit 2).
#[test]
fn read_commands_as_a_principal_are_held_to_the_policy() {
    let d = tempfile::tempdir().unwrap();
    let (code, _, err) = apply_as(
        d.path(),
        &[],
        &[
            json!({"op":"publish_agent","agent":"hotel","scope":"acme/travel"}),
            json!({"op":"open_run","run":"h1","agent":"hotel"}),
        ],
    );
    assert_eq!(code, 0, "{err}");
    let reads: [&[&str]; 6] = [
        &["trail", "h1"],
        &["chain", "h1"],
        &["agent", "hotel"],
        &["status"],
        &["export", "--run", "h1"],
        &["verify"],
    ];
    for read in reads {
        let as_auditor = [read, &["--as", "auditor"]].concat();
        let (code, out, err) = common::cli(d.path(), &as_auditor);
        assert_eq!(code, 0, "{as_auditor:?}: {out} {err}");
        let (plain_code, plain, _) = common::cli(d.path(), read);
        assert_eq!((code, &out), (plain_code, &plain), "{read:?}");
        for who in [
            &["--as", "agent:hotel"][..],
            &["--as", "consumer"][..],
            &["--as", "platform:acme", "--scope", "acme/travel"][..],
        ] {
            let args = [read, who].concat();
            let (code, out, err) = common::cli(d.path(), &args);
            assert_eq!(code, 1, "{args:?}: {out} {err}");
            assert!(out.is_empty(), "{args:?}: {out}");
            assert!(
                err.contains("forbidden") && err.contains("read the ledger"),
                "{err}"
            );
        }
    }
    let (code, _, err) = common::cli(d.path(), &["status", "--as", "root"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not one of operator"), "{err}");
}

#[test]
fn refusals_of_a_principal_that_writes_nothing_are_kept_once_a_minute_with_the_count() {
    use agentledger::auth::Grant;
    use agentledger::protocol::{reply_as, Reply};
    let d = tempfile::tempdir().unwrap();
    let clock = common::TestClock::at(1_000_000);
    let mut l = Ledger::open_with(d.path(), &common::Backend::Embedded, clock.options());
    l.publish("developer", "acme/platform", &[], &[]);
    l.open_run("r1", "developer");
    let consumer = Grant::new(Principal::Consumer, vec![]).unwrap();
    let close = json!({"op":"close_run","run":"r1","status":"succeeded"});
    let forbidden_steps = |l: &Ledger| -> Vec<String> {
        l.engine
            .trail("r1", false)
            .unwrap()
            .iter()
            .filter_map(|s| match &s.event {
                agentledger::model::LedgerEvent::Forbidden(f) => Some(f.message.clone()),
                _ => None,
            })
            .collect()
    };
    let refuse = |l: &mut Ledger| {
        let (reply, _) = reply_as(&mut l.engine, &consumer, &close);
        let Reply::Failed(f) = reply else {
            panic!("a consumer closed a run")
        };
        assert_eq!(f.error.code.as_str(), "forbidden");
        assert!(
            !f.error.message.contains("more refused"),
            "{}",
            f.error.message
        );
    };
    for _ in 0..10 {
        refuse(&mut l);
    }
    assert_eq!(forbidden_steps(&l).len(), 1);
    assert!(!forbidden_steps(&l)[0].contains("more refused"));
    // Within the minute nothing more is kept; past it, the next refusal is,
    // saying how many were not.
    clock.advance(59_999);
    refuse(&mut l);
    assert_eq!(forbidden_steps(&l).len(), 1);
    clock.advance(1);
    refuse(&mut l);
    let kept = forbidden_steps(&l);
    assert_eq!(kept.len(), 2);
    assert!(
        kept[1].contains("(10 more refused since the last recorded"),
        "{}",
        kept[1]
    );
    assert_eq!(
        l.engine.refusals_unrecorded(),
        vec![("consumer".to_string(), 10)]
    );
    // A principal that may write keeps every refusal.
    let other = Grant::new(Principal::Agent("someone".into()), vec![]).unwrap();
    for _ in 0..3 {
        let (reply, _) = reply_as(&mut l.engine, &other, &close);
        assert!(matches!(reply, Reply::Failed(_)));
    }
    assert_eq!(forbidden_steps(&l).len(), 5);
}
