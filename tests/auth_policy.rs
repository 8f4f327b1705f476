//! Who may do what, as a table: every operation, read and event stream ×
//! every kind of principal, then the cases that turn on what the request
//! names (someone else's agent, scope, run or task).

use agentledger::auth::{authorize, Action, Facts, Grant, Principal};
use agentledger::protocol::{parse_request, Request};
use serde_json::{json, Value};

fn grant(p: &str, scopes: &[&str]) -> Grant {
    Grant::new(
        p.parse::<Principal>().unwrap(),
        scopes.iter().map(|s| s.to_string()).collect(),
    )
    .unwrap()
}

fn request(v: Value) -> Request {
    parse_request(&v).unwrap_or_else(|e| panic!("{v}: {e}"))
}

fn ctx() -> Value {
    json!({"AgentID":"id-hotel","AgentName":"hotel","SubTaskID":"h1","SubTaskName":"h1"})
}

/// One request per operation, each naming hotel's run `h1`, task `t1`
/// (whose master run `m1` platform:acme opened) or agent hotel.
fn every_op() -> Vec<Request> {
    vec![
        request(json!({"op":"publish_agent","agent":"hotel","scope":"acme/travel"})),
        request(json!({"op":"open_run","run":"h1","agent":"hotel"})),
        request(json!({"op":"read_artifact","run":"h1","name":"plan"})),
        request(json!({"op":"close_run","run":"h1","status":"succeeded"})),
        request(json!({"op":"dispatch"})),
        request(json!({"op":"open_task","task":"t1","run":"m1","task_context":{}})),
        request(json!({"op":"update_task","task":"t1","run":"m1","task_context":{}})),
        request(json!({"op":"put_blob","task":"t1","content":"x"})),
        request(
            json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":ctx()}),
        ),
        request(json!({"op":"get_context","task":"t1","agent":"hotel"})),
        request(json!({"op":"get_blob","task":"t1","agent":"hotel","uri":"sha256:00"})),
        request(json!({"op":"return_context","task":"t1","agent":"hotel","agent_context":ctx()})),
        request(
            json!({"op":"evaluate","task":"t1","subtask":"h1","decision":"accepted","run":"m1"}),
        ),
        request(json!({"op":"forget_task","task":"t1"})),
    ]
}

/// What the views say about hotel's run and the task.
fn facts() -> Facts {
    Facts {
        run_agent: Some("hotel".into()),
        agent_scope: Some("acme/travel".into()),
        run_opened_by: Some("platform:acme".into()),
        task_master: Some("platform:acme".into()),
    }
}

fn allowed(g: &Grant, a: Action<'_>, f: &Facts) -> bool {
    match authorize(g, a, f) {
        Ok(()) => true,
        Err(e) => {
            let text = e.to_string();
            assert!(text.starts_with(&g.principal.to_string()), "{text}");
            false
        }
    }
}

#[test]
fn every_operation_by_every_kind_of_principal() {
    let principals = [
        grant("operator", &[]),
        grant("platform:acme", &["acme/travel"]),
        grant("agent:hotel", &[]),
        grant("auditor", &[]),
        grant("consumer", &["acme/travel"]),
    ];
    // Rows: operations in `every_op` order, then a read, then the events of
    // acme/travel. Columns: the principals above. 1 = allowed.
    #[rustfmt::skip]
    let table: [(&str, [u8; 5]); 16] = [
        ("publish_agent",  [1, 1, 0, 0, 0]),
        ("open_run",       [1, 1, 0, 0, 0]),
        ("read_artifact",  [1, 0, 1, 0, 0]),
        ("close_run",      [1, 1, 1, 0, 0]),
        ("dispatch",       [1, 1, 0, 0, 0]),
        ("open_task",      [1, 1, 0, 0, 0]),
        ("update_task",    [1, 1, 0, 0, 0]),
        ("put_blob",       [1, 1, 0, 0, 0]),
        ("send_context",   [1, 1, 0, 0, 0]),
        ("get_context",    [1, 0, 1, 0, 0]),
        ("get_blob",       [1, 0, 1, 0, 0]),
        ("return_context", [1, 0, 1, 0, 0]),
        ("evaluate",       [1, 1, 0, 0, 0]),
        ("forget_task",    [1, 1, 0, 0, 0]),
        ("read",           [1, 0, 0, 1, 0]),
        ("events",         [1, 0, 0, 0, 1]),
    ];
    let ops = every_op();
    let f = facts();
    for (row, (name, expected)) in table.iter().enumerate() {
        let action = match row {
            r if r < ops.len() => {
                assert_eq!(ops[r].op(), *name);
                Action::Op(&ops[r])
            }
            14 => Action::Read,
            _ => Action::Events {
                scope: Some("acme/travel"),
            },
        };
        for (g, want) in principals.iter().zip(expected) {
            assert_eq!(allowed(g, action, &f), *want == 1, "{} {name}", g.principal);
        }
    }
}

#[test]
fn a_platform_acts_only_within_its_scopes() {
    let acme = grant("platform:acme", &["acme/travel"]);
    let f = facts();
    let outside = request(json!({"op":"publish_agent","agent":"cfo","scope":"acme/finance"}));
    assert!(!allowed(&acme, Action::Op(&outside), &f));
    let below = request(json!({"op":"publish_agent","agent":"inn","scope":"acme/travel/inns"}));
    assert!(allowed(&acme, Action::Op(&below), &f));
    // Its agents' access is what it was granted, not what it declares.
    let wider = request(
        json!({"op":"publish_agent","agent":"hotel","scope":"acme/travel",
        "access":["acme/travel","acme/finance"]}),
    );
    assert!(!allowed(&acme, Action::Op(&wider), &f));
    // Runs of an agent in another scope.
    let finance = Facts {
        agent_scope: Some("acme/finance".into()),
        ..facts()
    };
    for op in [
        json!({"op":"open_run","run":"x","agent":"cfo"}),
        json!({"op":"close_run","run":"x","status":"succeeded"}),
    ] {
        assert!(!allowed(&acme, Action::Op(&request(op)), &finance));
    }
}

#[test]
fn an_agent_acts_only_as_itself_even_by_naming_another() {
    let weather = grant("agent:weather", &[]);
    let f = facts();
    for op in [
        json!({"op":"get_context","task":"t1","agent":"hotel"}),
        json!({"op":"get_blob","task":"t1","agent":"hotel","uri":"sha256:00"}),
        json!({"op":"return_context","task":"t1","agent":"hotel","agent_context":ctx()}),
        json!({"op":"read_artifact","run":"h1","name":"plan"}),
        json!({"op":"close_run","run":"h1","status":"failed"}),
    ] {
        let r = request(op.clone());
        let e = authorize(&weather, Action::Op(&r), &f).unwrap_err();
        // The agent it named is said back; whose a run is, is not.
        let named = op.get("agent").is_some();
        assert_eq!(e.to_string().contains("hotel"), named, "{op}: {e}");
    }
    // Its own subtask and its own run.
    let mine = Facts {
        run_agent: Some("weather".into()),
        ..facts()
    };
    for op in [
        json!({"op":"get_context","task":"t1","agent":"weather"}),
        json!({"op":"close_run","run":"w1","status":"succeeded"}),
    ] {
        assert!(allowed(&weather, Action::Op(&request(op)), &mine));
    }
}

#[test]
fn only_the_master_sends_evaluates_and_updates() {
    let other = grant("platform:globex", &["acme/travel"]);
    let master = grant("platform:acme", &["acme/travel"]);
    let f = facts();
    for r in every_op().iter().filter(|r| {
        matches!(
            r.op(),
            "open_task" | "update_task" | "put_blob" | "send_context" | "evaluate" | "forget_task"
        )
    }) {
        assert!(!allowed(&other, Action::Op(r), &f), "{}", r.op());
        assert!(allowed(&master, Action::Op(r), &f), "{}", r.op());
    }
    // An agent that opened the master run is that task's master too.
    let agent_master = Facts {
        task_master: Some("agent:planner".into()),
        ..facts()
    };
    let send = request(
        json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":ctx()}),
    );
    assert!(allowed(
        &grant("agent:planner", &[]),
        Action::Op(&send),
        &agent_master
    ));
    assert!(!allowed(
        &grant("agent:hotel", &[]),
        Action::Op(&send),
        &agent_master
    ));
}

#[test]
fn a_consumer_follows_only_its_scopes() {
    let scoped = grant("consumer", &["acme/travel"]);
    let all = grant("consumer", &[]);
    let f = Facts::default();
    let events = |scope| Action::Events { scope };
    assert!(allowed(&scoped, events(Some("acme/travel/inns")), &f));
    assert!(!allowed(&scoped, events(Some("acme/finance")), &f));
    assert!(!allowed(&scoped, events(None), &f));
    assert!(allowed(&all, events(None), &f));
    assert!(allowed(&all, events(Some("acme/finance")), &f));
}

/// What the views say of another tenant: acme's agent `alice` in
/// `acme/secret`, its runs and tasks opened by platform:acme.
fn acme_facts() -> Facts {
    Facts {
        run_agent: Some("alice".into()),
        agent_scope: Some("acme/secret".into()),
        run_opened_by: Some("platform:acme".into()),
        task_master: Some("platform:acme".into()),
    }
}

#[test]
fn a_platform_may_not_publish_over_another_platforms_agent() {
    let beta = grant("platform:beta", &["beta"]);
    let takeover = request(json!({"op":"publish_agent","agent":"alice","scope":"beta/evil"}));
    let e = authorize(&beta, Action::Op(&takeover), &acme_facts()).unwrap_err();
    assert!(!e.to_string().contains("acme"), "{e}");
    // A new agent, or its own agent moved within its scopes, is its to publish.
    assert!(allowed(&beta, Action::Op(&takeover), &Facts::default()));
    let own = Facts {
        agent_scope: Some("beta/old".into()),
        ..Facts::default()
    };
    assert!(allowed(&beta, Action::Op(&takeover), &own));
    // The owner publishes over it as before.
    let acme = grant("platform:acme", &["acme"]);
    let moved = request(json!({"op":"publish_agent","agent":"alice","scope":"acme/a"}));
    assert!(allowed(&acme, Action::Op(&moved), &acme_facts()));
}

#[test]
fn refusals_name_nothing_of_another_tenant() {
    let beta = grant("platform:beta", &["beta"]);
    let agent = grant("agent:bob", &[]);
    let f = acme_facts();
    // Requests that name nothing of acme's beyond the names of its runs,
    // task and agent (which the caller sent).
    let ops = [
        json!({"op":"publish_agent","agent":"alice","scope":"beta/x"}),
        json!({"op":"open_run","run":"r1","agent":"alice"}),
        json!({"op":"close_run","run":"r1","status":"succeeded"}),
        json!({"op":"open_task","task":"t1","run":"m1","task_context":{}}),
        json!({"op":"update_task","task":"t1","run":"m1","task_context":{}}),
        json!({"op":"put_blob","task":"t1","content":"x"}),
        json!({"op":"forget_task","task":"t1"}),
        json!({"op":"read_artifact","run":"r1","name":"plan"}),
    ];
    let mut refused = 0;
    for op in ops {
        let r = request(op.clone());
        for g in [&beta, &agent] {
            if let Err(e) = authorize(g, Action::Op(&r), &f) {
                refused += 1;
                let text = e.to_string();
                for secret in ["acme", "secret", "platform:acme"] {
                    assert!(!text.contains(secret), "{op} by {}: {text}", g.principal);
                }
            }
        }
    }
    assert!(refused >= 12, "{refused}");
}

#[test]
fn a_close_may_label_only_areas_within_the_closers_own() {
    let acme = grant("platform:acme", &["acme"]);
    let own = Facts {
        run_agent: Some("alice".into()),
        agent_scope: Some("acme/a".into()),
        ..Facts::default()
    };
    let close = |labels: Value| {
        request(json!({"op":"close_run","run":"r1","status":"succeeded","labels":labels}))
    };
    for ok in [
        json!(["area:acme/b", "untrusted", "reviewed"]),
        json!(["area:acme"]),
    ] {
        assert!(allowed(&acme, Action::Op(&close(ok.clone())), &own), "{ok}");
    }
    let e = authorize(&acme, Action::Op(&close(json!(["area:zeta/secret"]))), &own).unwrap_err();
    assert!(e.to_string().contains("area:zeta/secret"), "{e}");
    // An agent labels within its own agent's scope.
    let alice = grant("agent:alice", &[]);
    assert!(allowed(
        &alice,
        Action::Op(&close(json!(["area:acme/a/x"]))),
        &own
    ));
    for bad in [json!(["area:acme/b"]), json!(["area:zeta"])] {
        assert!(
            !allowed(&alice, Action::Op(&close(bad.clone())), &own),
            "{bad}"
        );
    }
}
