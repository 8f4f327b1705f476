//! Who may do what, as a table: every operation, read and event stream ×
//! every kind of principal, then the cases that turn on what the request
//! names (someone else's agent, scope, run or task).

mod common;

use agentledger::auth::{authorize, Action, Facts, Grant, Principal, Subject};
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
        task_master_agent: Some("planner".into()),
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
            14 => Action::Read(&Subject::Whole),
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
        task_master_agent: None,
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

/// The draft has the master agent maintain its TaskContext: the agent of
/// a task's master run sends, evaluates, updates and puts content for
/// that task — not another agent, and not erasure, which stays with the
/// principal that opened the master run.
#[test]
fn the_agent_of_the_master_run_maintains_its_task() {
    let f = facts();
    let planner = grant("agent:planner", &[]);
    let hotel = grant("agent:hotel", &[]);
    for r in every_op().iter().filter(|r| {
        matches!(
            r.op(),
            "update_task" | "put_blob" | "send_context" | "evaluate"
        )
    }) {
        assert!(allowed(&planner, Action::Op(r), &f), "{}", r.op());
        assert!(!allowed(&hotel, Action::Op(r), &f), "{}", r.op());
    }
    let forget = request(json!({"op":"forget_task","task":"t1"}));
    assert!(!allowed(&planner, Action::Op(&forget), &f));
    // Agents still open no runs.
    let open = request(json!({"op":"open_run","run":"x","agent":"planner"}));
    assert!(!allowed(&planner, Action::Op(&open), &f));
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
        task_master_agent: Some("alice".into()),
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

#[test]
fn readers_with_scopes_read_only_within_them() {
    let f = Facts::default();
    let about = |scopes: &[&str]| Subject::Scopes(scopes.iter().map(|s| s.to_string()).collect());
    let own = about(&["acme/a", "acme/b/c"]);
    let mixed = about(&["acme/a", "beta/x"]);
    let unknown = about(&[]);
    // (grant, whole ledger, its own, a chain reaching another tenant)
    let cases = [
        (grant("auditor", &[]), true, true, true),
        (grant("auditor", &["acme"]), false, true, false),
        (grant("platform:acme", &["acme"]), false, true, false),
        (grant("platform:beta", &["beta"]), false, false, false),
        (grant("consumer", &["acme"]), false, false, false),
        (grant("agent:alice", &[]), false, false, false),
    ];
    for (g, whole, mine, across) in &cases {
        let who = g.principal.to_string();
        assert_eq!(
            allowed(g, Action::Read(&Subject::Whole), &f),
            *whole,
            "{who} whole"
        );
        assert_eq!(allowed(g, Action::Read(&own), &f), *mine, "{who} own");
        assert_eq!(
            allowed(g, Action::Read(&mixed), &f),
            *across,
            "{who} across"
        );
        // What does not exist is the read's own to answer (unknown_run).
        let reader = matches!(g.principal, Principal::Auditor | Principal::Platform(_));
        assert_eq!(
            allowed(g, Action::Read(&unknown), &f),
            reader,
            "{who} unknown"
        );
    }
    // Refused without saying where the other tenant's runs are.
    let e = authorize(&cases[2].0, Action::Read(&mixed), &f).unwrap_err();
    assert!(!e.to_string().contains("beta"), "{e}");
    // A scoped auditor's grant is its scopes; a platform still may not follow events.
    assert!(Grant::new(Principal::Auditor, vec!["acme".into()]).is_ok());
    assert!(!allowed(
        &cases[2].0,
        Action::Events {
            scope: Some("acme")
        },
        &f
    ));
}

/// The columns of the live matrix, in the order they are tried: those
/// refused most first, so that what an allowed caller changes (a closed
/// run, a forgotten task) is seen only by callers allowed it too.
const COLUMNS: [&str; 12] = [
    "jwt:expired",
    "consumer:acme",
    "consumer",
    "auditor:acme",
    "auditor",
    "jwt:auditor:acme",
    "bob",
    "beta",
    "alice",
    "jwt:acme",
    "acme",
    "operator",
];

/// What a row tries.
enum Try {
    /// An operation, over `POST /v1/ops` and over a WebSocket.
    Op(Value),
    /// A read route.
    Get(&'static str),
    /// The published events, over SSE and a WebSocket `subscribe`.
    Events(Option<&'static str>),
}

/// Every operation, route and event feed, and who may (the rest are
/// refused `forbidden`; the expired JWT is `unauthenticated` everywhere).
/// acme's agent `alice` (acme/a) has the runs m1 (master of task t1, whose
/// subtask is alice's) and a1; beta's agent `bob` (beta/x) has b1.
fn matrix() -> Vec<(&'static str, Try, &'static [&'static str])> {
    const ACME_READERS: &[&str] = &[
        "operator",
        "auditor",
        "auditor:acme",
        "jwt:auditor:acme",
        "acme",
        "jwt:acme",
    ];
    const WHOLE: &[&str] = &["operator", "auditor"];
    const ACME: &[&str] = &["operator", "acme", "jwt:acme"];
    const ALICE: &[&str] = &["operator", "alice"];
    // The task's master: who opened its master run, and that run's agent.
    const MASTER: &[&str] = &["operator", "alice", "acme", "jwt:acme"];
    let c = agent_ctx("alice", "sub-alice");
    vec![
        (
            "GET /v1/runs/a1/trail",
            Try::Get("/v1/runs/a1/trail"),
            ACME_READERS,
        ),
        (
            "GET /v1/runs/a1/trail?chain=true",
            Try::Get("/v1/runs/a1/trail?chain=true"),
            ACME_READERS,
        ),
        (
            "GET /v1/runs/a1/chain",
            Try::Get("/v1/runs/a1/chain"),
            ACME_READERS,
        ),
        (
            "GET /v1/runs/a1/trace",
            Try::Get("/v1/runs/a1/trace"),
            ACME_READERS,
        ),
        (
            "GET /v1/agents/alice",
            Try::Get("/v1/agents/alice"),
            ACME_READERS,
        ),
        (
            "GET /v1/tasks/t1/stats",
            Try::Get("/v1/tasks/t1/stats"),
            ACME_READERS,
        ),
        (
            "GET /v1/export?run=a1",
            Try::Get("/v1/export?run=a1"),
            ACME_READERS,
        ),
        (
            "GET /v1/export?chain=a1",
            Try::Get("/v1/export?chain=a1"),
            ACME_READERS,
        ),
        ("GET /chains/a1", Try::Get("/chains/a1"), ACME_READERS),
        (
            "GET /v1/runs/b1/trail (beta's)",
            Try::Get("/v1/runs/b1/trail"),
            &["operator", "auditor", "beta"],
        ),
        ("GET /v1/export (all)", Try::Get("/v1/export"), WHOLE),
        ("GET /v1/status", Try::Get("/v1/status"), WHOLE),
        ("GET /v1/tokens", Try::Get("/v1/tokens"), WHOLE),
        ("GET /v1/verify", Try::Get("/v1/verify"), WHOLE),
        ("GET /v1/rebuild", Try::Get("/v1/rebuild"), WHOLE),
        ("GET /v1/log", Try::Get("/v1/log"), WHOLE),
        ("GET /metrics", Try::Get("/metrics"), WHOLE),
        ("GET / (recent runs)", Try::Get("/"), WHOLE),
        ("events", Try::Events(None), &["operator", "consumer"]),
        (
            "events scope=acme",
            Try::Events(Some("acme")),
            &["operator", "consumer", "consumer:acme"],
        ),
        (
            "events scope=beta",
            Try::Events(Some("beta")),
            &["operator", "consumer"],
        ),
        (
            "publish_agent alice",
            Try::Op(
                json!({"op":"publish_agent","agent":"alice","scope":"acme/a","emits":[{"event":"acme.done","context":"c","artifacts":["report"]}]}),
            ),
            ACME,
        ),
        (
            "open_run of alice",
            Try::Op(json!({"op":"open_run","run":"a2","agent":"alice"})),
            ACME,
        ),
        (
            "read_artifact",
            Try::Op(json!({"op":"read_artifact","run":"a1","name":"report"})),
            ALICE,
        ),
        (
            "open_task on m1",
            Try::Op(json!({"op":"open_task","task":"t2","run":"m1","task_context":task_ctx()})),
            ACME,
        ),
        (
            "update_task",
            Try::Op(json!({"op":"update_task","task":"t1","run":"m1","task_context":task_ctx()})),
            MASTER,
        ),
        (
            "put_blob",
            Try::Op(json!({"op":"put_blob","task":"t1","content":"x"})),
            MASTER,
        ),
        (
            "send_context",
            Try::Op(
                json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":agent_ctx("aide","sub-aide")}),
            ),
            MASTER,
        ),
        (
            "get_context",
            Try::Op(json!({"op":"get_context","task":"t1","agent":"alice"})),
            ALICE,
        ),
        (
            "get_blob",
            Try::Op(json!({"op":"get_blob","task":"t1","agent":"alice","uri":"sha256:00"})),
            ALICE,
        ),
        (
            "return_context",
            Try::Op(json!({"op":"return_context","task":"t1","agent":"alice","agent_context":c})),
            ALICE,
        ),
        (
            "evaluate",
            Try::Op(
                json!({"op":"evaluate","task":"t1","subtask":"sub-alice","decision":"accepted","run":"m1"}),
            ),
            MASTER,
        ),
        (
            "close_run a1",
            Try::Op(json!({"op":"close_run","run":"a1","status":"succeeded"})),
            &["operator", "alice", "acme", "jwt:acme"],
        ),
        (
            "close_run a1 labelled area:beta",
            Try::Op(
                json!({"op":"close_run","run":"a1","status":"succeeded","labels":["area:beta"]}),
            ),
            &["operator"],
        ),
        (
            "dispatch",
            Try::Op(json!({"op":"dispatch"})),
            &["operator", "beta", "acme", "jwt:acme"],
        ),
        (
            "issue_token",
            Try::Op(json!({"op":"issue_token","principal":"auditor","sha256":"ab".repeat(32)})),
            &["operator"],
        ),
        (
            "revoke_token",
            Try::Op(json!({"op":"revoke_token","id":"tok_0000000000000000"})),
            &["operator"],
        ),
        (
            "forget_task",
            Try::Op(json!({"op":"forget_task","task":"t1"})),
            ACME,
        ),
        // Last: the operator moves alice out of acme's reach.
        (
            "publish_agent alice into beta",
            Try::Op(json!({"op":"publish_agent","agent":"alice","scope":"beta/x"})),
            &["operator"],
        ),
    ]
}

fn agent_ctx(agent: &str, sub: &str) -> Value {
    json!({
        "AgentID": format!("id-{agent}"), "AgentName": agent, "SubTaskID": sub, "SubTaskName": sub,
        "Dependencies": [], "ContextItems": [],
        "todoItems": [{"itemID": "i1", "description": "do it"}],
        "EvaluationPolicy": {"SuccessCriteria": [{"CriterionID": "c1", "Description": "ok", "Required": true}], "ConfidenceThreshold": 0.8}
    })
}

fn task_ctx() -> Value {
    json!({"TaskID":"T1","UserQuery":"q","TaskName":"n","TaskDescription":"d","GoalStatus":[],"OverallStatus":"open"})
}

/// The matrix as `docs/authorization.md` shows it.
fn matrix_markdown() -> String {
    let mut out = format!(
        "| | {} |\n|---|{}\n",
        COLUMNS.join(" | "),
        "---|".repeat(COLUMNS.len())
    );
    for (name, _, allowed) in matrix() {
        let cells: Vec<&str> = COLUMNS
            .iter()
            .map(|c| match *c {
                "jwt:expired" => "401",
                c if allowed.contains(&c) => "✓",
                _ => "403",
            })
            .collect();
        out.push_str(&format!("| {name} | {} |\n", cells.join(" | ")));
    }
    out
}

/// Every operation, route and event feed tried by every kind of caller
/// through a live `serve`: two platforms and their agents, auditors and
/// consumers with and without scopes, ledger tokens and JWTs (one of them
/// expired), over HTTP, WebSocket and SSE. Each is refused `forbidden`
/// exactly where the matrix says, `unauthenticated` for the expired JWT,
/// and never refused `forbidden` where allowed (an allowed one may still
/// be refused for what it asks, a run already closed, say).
#[test]
fn the_authorization_matrix_holds_over_every_transport() {
    let docs = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/authorization.md"
    ))
    .unwrap();
    assert!(
        docs.contains(&matrix_markdown()),
        "docs/authorization.md lacks the matrix as it stands:\n{}",
        matrix_markdown()
    );

    let idp = common::idp::Provider::new();
    let dir = tempfile::tempdir().unwrap();
    let args = idp.serve_args(dir.path());
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.extend(["--dispatch", "manual"]);
    let s = common::server::start(&dir.path().join("data"), None, &args);
    let url = s.url.as_str();
    let session = common::server::bearer(url)
        .trim_start_matches("Bearer ")
        .to_string();
    let now = common::idp::unix_now();
    let issue = |p: &str, scopes: &[&str]| common::server::issue(url, p, scopes);
    let tokens: Vec<(&str, String)> = vec![
        ("jwt:expired", idp.jwt("platform:acme", "acme", now - 120)),
        ("consumer:acme", issue("consumer", &["acme"])),
        ("consumer", issue("consumer", &[])),
        ("auditor:acme", issue("auditor", &["acme"])),
        ("auditor", issue("auditor", &[])),
        ("jwt:auditor:acme", idp.jwt("auditor", "acme", now + 3600)),
        ("bob", issue("agent:bob", &[])),
        ("beta", issue("platform:beta", &["beta"])),
        ("alice", issue("agent:alice", &[])),
        ("jwt:acme", idp.jwt("platform:acme", "acme", now + 3600)),
        ("acme", issue("platform:acme", &["acme"])),
        ("operator", session),
    ];
    assert_eq!(tokens.iter().map(|(n, _)| *n).collect::<Vec<_>>(), COLUMNS);
    let token = |who: &str| tokens.iter().find(|(n, _)| *n == who).unwrap().1.clone();
    let ok = |who: &str, v: Value| common::server::ok(url, &token(who), v);
    ok(
        "acme",
        json!({"op":"publish_agent","agent":"alice","scope":"acme/a"}),
    );
    ok(
        "acme",
        json!({"op":"publish_agent","agent":"aide","scope":"acme/a"}),
    );
    ok(
        "beta",
        json!({"op":"publish_agent","agent":"bob","scope":"beta/x"}),
    );
    ok("acme", json!({"op":"open_run","run":"m1","agent":"alice"}));
    ok("acme", json!({"op":"open_run","run":"a1","agent":"alice"}));
    ok("beta", json!({"op":"open_run","run":"b1","agent":"bob"}));
    ok(
        "acme",
        json!({"op":"open_task","task":"t1","run":"m1","task_context":task_ctx()}),
    );
    ok(
        "acme",
        json!({"op":"send_context","task":"t1","run":"m1","mode":"async","agent_context":agent_ctx("alice","sub-alice")}),
    );

    let http = common::server::client();
    let mut sockets: Vec<Option<common::server::Socket>> = COLUMNS
        .iter()
        .map(|who| match common::server::ws_connect(url, &token(who)) {
            Ok(ws) => Some(ws),
            Err(status) => {
                assert_eq!((*who, status), ("jwt:expired", 401));
                None
            }
        })
        .collect();
    let mut tried = 0;
    for (row, what, allowed) in matrix() {
        for (column, who) in COLUMNS.iter().enumerate() {
            let expired = *who == "jwt:expired";
            let may = allowed.contains(who);
            let at = format!("{row} by {who}");
            // (status or none, error code or none) per transport.
            let mut seen: Vec<(&str, Option<u16>, Option<String>)> = Vec::new();
            let code = |a: &Value| a["error"]["code"].as_str().map(String::from);
            match &what {
                Try::Op(v) => {
                    let (status, a) = common::server::op(url, &token(who), v);
                    seen.push(("http", Some(status), code(&a)));
                    if let Some(ws) = sockets[column].as_mut() {
                        let a = common::server::ws_ask(ws, v);
                        seen.push(("ws", None, code(&a)));
                    }
                }
                Try::Get(path) => {
                    let r = http
                        .get(format!("{url}{path}"))
                        .bearer_auth(token(who))
                        .send()
                        .unwrap();
                    seen.push(("http", Some(r.status().as_u16()), None));
                }
                Try::Events(scope) => {
                    let path = scope.map_or("/v1/events".to_string(), |s| {
                        format!("/v1/events?scope={s}")
                    });
                    let r = http
                        .get(format!("{url}{path}"))
                        .bearer_auth(token(who))
                        .send()
                        .unwrap();
                    seen.push(("sse", Some(r.status().as_u16()), None));
                    drop(r);
                    if !expired {
                        let mut ws = common::server::ws_connect(url, &token(who)).unwrap();
                        let mut sub = json!({"op":"subscribe"});
                        if let Some(s) = scope {
                            sub["scope"] = json!(s);
                        }
                        let a = common::server::ws_ask(&mut ws, &sub);
                        seen.push(("ws", None, code(&a)));
                    }
                }
            }
            for (via, status, code) in seen {
                let at = format!("{at} over {via}: {status:?} {code:?}");
                if expired {
                    assert!(
                        status == Some(401) || code.as_deref() == Some("unauthenticated"),
                        "{at}"
                    );
                } else if may {
                    assert!(!matches!(status, Some(401 | 403)), "{at}");
                    assert!(
                        !matches!(code.as_deref(), Some("forbidden" | "unauthenticated")),
                        "{at}"
                    );
                } else {
                    assert!(status.is_none_or(|s| s == 403), "{at}");
                    assert!(
                        status.is_some() || code.as_deref() == Some("forbidden"),
                        "{at}"
                    );
                }
                tried += 1;
            }
        }
    }
    // Every row by every caller: twice (two transports) but for reads,
    // less the socket the expired JWT never opened.
    let expected: usize = matrix()
        .iter()
        .map(|(_, t, _)| match t {
            Try::Get(_) => COLUMNS.len(),
            Try::Op(_) | Try::Events(_) => 2 * COLUMNS.len() - 1,
        })
        .sum();
    assert_eq!(tried, expected);
}
