//! Tenants kept apart on a live `serve --listen`: two platforms, `acme`
//! and `beta`, with their own agents. One may not publish over the
//! other's agent, dispatch the other's finished runs, label its closes
//! with the other's area, or learn the other's scopes from a refusal; and
//! a credential that lapses ends the sockets and streams it opened.

mod common;

use common::idp::{unix_now, Provider};
use common::server::{self, issue, ok, op, ws_connect, ws_next, Server};
use serde_json::{json, Value};
use std::io::Read;
use std::time::{Duration, Instant};

fn publish(url: &str, token: &str, agent: &str, scope: &str, listens: &[&str], emits: &[&str]) {
    ok(
        url,
        token,
        json!({"op":"publish_agent","agent":agent,"scope":scope,"listens":listens,
            "emits": emits.iter().map(|e| json!({"event":e,"context":"ctx","artifacts":["report"]})).collect::<Vec<_>>()}),
    );
}

fn close(run: &str, labels: &[&str]) -> Value {
    json!({"op":"close_run","run":run,"status":"succeeded","summary":"done",
        "artifacts":{"report":"findings"},"labels":labels})
}

struct Tenants {
    _dir: tempfile::TempDir,
    s: Server,
    acme: String,
    beta: String,
}

/// A server dispatching only when asked, acme's agents `alice` (emits
/// `acme.done`) and `aide` (listens to it) in `acme/a`, beta's `bob` and
/// `bea` likewise in `beta/x`.
fn tenants() -> Tenants {
    let dir = tempfile::tempdir().unwrap();
    let s = server::start(&dir.path().join("data"), None, &["--dispatch", "manual"]);
    let acme = issue(&s.url, "platform:acme", &["acme"]);
    let beta = issue(&s.url, "platform:beta", &["beta"]);
    publish(&s.url, &acme, "alice", "acme/a", &[], &["acme.done"]);
    publish(&s.url, &acme, "aide", "acme/a", &["acme.done"], &[]);
    publish(&s.url, &beta, "bob", "beta/x", &[], &["beta.done"]);
    publish(&s.url, &beta, "bea", "beta/x", &["beta.done"], &[]);
    Tenants {
        _dir: dir,
        s,
        acme,
        beta,
    }
}

#[test]
fn a_platform_may_not_publish_over_another_platforms_agent() {
    let t = tenants();
    let url = &t.s.url;
    let (status, a) = op(
        url,
        &t.beta,
        &json!({"op":"publish_agent","agent":"alice","scope":"beta/evil"}),
    );
    assert_eq!(
        (status, &a["error"]["code"]),
        (403, &json!("forbidden")),
        "{a}"
    );
    // Said without where acme's agent lives.
    let text = a.to_string();
    assert!(!text.contains("acme"), "{text}");
    // Nothing changed hands: acme opens alice's runs, beta may not.
    ok(
        url,
        &t.acme,
        json!({"op":"open_run","run":"a1","agent":"alice"}),
    );
    let (status, a) = op(
        url,
        &t.beta,
        &json!({"op":"open_run","run":"b1","agent":"alice"}),
    );
    assert_eq!(status, 403, "{a}");
    assert!(!a.to_string().contains("acme"), "{a}");
    let agent: Value = server::http(url)
        .get(format!("{url}/v1/agents/alice"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert!(agent.to_string().contains("acme/a"), "{agent}");
    assert!(!agent.to_string().contains("beta/evil"), "{agent}");
}

#[test]
fn dispatch_hands_each_platform_only_its_own_work() {
    let t = tenants();
    let url = &t.s.url;
    // acme's run finishes first, beta's after it in the same partition
    // (the embedded log's 4), so beta's is behind acme's in the queue.
    let same = |run: &str| agentledger::log::partition_for_key(run.as_bytes(), 4);
    let b1 = (1..)
        .map(|i| format!("b{i}"))
        .find(|r| same(r) == same("a1"))
        .unwrap();
    ok(
        url,
        &t.acme,
        json!({"op":"open_run","run":"a1","agent":"alice"}),
    );
    ok(url, &t.acme, close("a1", &[]));
    ok(
        url,
        &t.beta,
        json!({"op":"open_run","run":b1,"agent":"bob"}),
    );
    ok(url, &t.beta, close(&b1, &[]));

    let mine = ok(url, &t.beta, json!({"op":"dispatch"}));
    let opened = mine["opened"].as_array().unwrap();
    assert_eq!(opened.len(), 1, "{mine}");
    assert_eq!(opened[0]["agent"], "bea", "{mine}");
    assert_eq!(opened[0]["source_run"], json!(b1), "{mine}");
    let text = mine.to_string();
    for acmes in ["\"a1\"", "aide", "acme"] {
        assert!(!text.contains(acmes), "{acmes} in {text}");
    }
    // acme's work was left for acme, not stranded.
    let theirs = ok(url, &t.acme, json!({"op":"dispatch"}));
    let opened = theirs["opened"].as_array().unwrap();
    assert_eq!(opened.len(), 1, "{theirs}");
    assert_eq!(opened[0]["agent"], "aide", "{theirs}");
    assert_eq!(opened[0]["source_run"], "a1", "{theirs}");
    // Each once: nothing is left for anyone.
    for token in [&t.acme, &t.beta] {
        let again = ok(url, token, json!({"op":"dispatch"}));
        assert_eq!(again["opened"], json!([]), "{again}");
    }
    let operator = server::post_ok(url, json!({"op":"dispatch"}));
    assert_eq!(operator["opened"], json!([]), "{operator}");
}

#[test]
fn a_close_labels_only_areas_within_the_closers_grant() {
    let t = tenants();
    let url = &t.s.url;
    ok(
        url,
        &t.acme,
        json!({"op":"open_run","run":"a1","agent":"alice"}),
    );
    let (status, a) = op(url, &t.acme, &close("a1", &["area:beta/x"]));
    assert_eq!(status, 403, "{a}");
    assert!(a["error"]["message"]
        .as_str()
        .unwrap()
        .contains("area:beta/x"));
    // Refused whole: the run is still open and closes within acme's own.
    let a = ok(url, &t.acme, close("a1", &["area:acme/b", "reviewed"]));
    let labels = a["labels"].as_array().unwrap();
    assert!(labels.contains(&json!("area:acme/b")), "{a}");
    assert!(!labels.contains(&json!("area:beta/x")), "{a}");
}

fn closed_for_lapse(m: tungstenite::Message) {
    match m {
        tungstenite::Message::Close(Some(frame)) => {
            assert_eq!(u16::from(frame.code), 1008, "{frame:?}")
        }
        other => panic!("not closed for the lapse: {other}"),
    }
}

/// A JWT that verified when its socket or stream opened stops working
/// when it lapses (its `exp` plus the 30 s leeway): the next operation on
/// the socket is refused `unauthenticated` and the socket closed 1008; a
/// quiet socket is closed 1008 on its own; an event stream ends. A fresh
/// request with it is 401 as before.
#[test]
fn a_jwt_ends_the_sockets_and_streams_it_opened_when_it_lapses() {
    let idp = Provider::new();
    let dir = tempfile::tempdir().unwrap();
    let mut args = idp.serve_args(dir.path());
    args.extend(["--dispatch".into(), "manual".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let s = server::start(&dir.path().join("data"), None, &args);
    let url = &s.url;
    // Expired 26 s ago: within the leeway for 4 s more.
    let exp = unix_now() - 26;
    let lapse = Instant::now() + Duration::from_secs(4);
    let platform = idp.jwt("platform:acme", "acme", exp);
    let consumer = idp.jwt("consumer", "", exp);

    let mut busy = ws_connect(url, &platform).unwrap();
    let mut quiet = ws_connect(url, &platform).unwrap();
    let publish = json!({"op":"publish_agent","agent":"alice","scope":"acme/a"});
    busy.send(tungstenite::Message::text(publish.to_string()))
        .unwrap();
    let first: Value = serde_json::from_str(ws_next(&mut busy).to_text().unwrap()).unwrap();
    assert_eq!(first["ok"], true, "{first}");
    let mut stream = server::client()
        .get(format!("{url}/v1/events"))
        .bearer_auth(&consumer)
        .send()
        .unwrap();
    assert_eq!(stream.status(), 200);

    std::thread::sleep(
        lapse.saturating_duration_since(Instant::now()) + Duration::from_millis(500),
    );
    busy.send(tungstenite::Message::text(
        json!({"op":"open_run","run":"a1","agent":"alice"}).to_string(),
    ))
    .unwrap();
    // Refused, if the socket's own recheck did not close it first.
    let close = match ws_next(&mut busy) {
        tungstenite::Message::Text(t) => {
            let v: Value = serde_json::from_str(&t).unwrap();
            assert_eq!(v["error"]["code"], "unauthenticated", "{v}");
            ws_next(&mut busy)
        }
        close => close,
    };
    closed_for_lapse(close);
    closed_for_lapse(ws_next(&mut quiet));
    // The event stream ends (its body reaches its end) within a recheck.
    let ended = std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink);
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ended.is_finished() {
        assert!(
            Instant::now() < deadline,
            "the event stream outlived its JWT"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The run was never opened.
    let (status, a) = op(
        url,
        &platform,
        &json!({"op":"open_run","run":"a2","agent":"alice"}),
    );
    assert_eq!(status, 401, "{a}");
    let trail: Value = server::http(url)
        .get(format!("{url}/v1/runs/a1/trail"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(trail["error"]["code"], "unknown_run", "{trail}");
}

/// The steps of `run`'s trail, as the operator reads them.
fn trail_steps(url: &str, run: &str) -> Vec<Value> {
    server::http(url)
        .get(format!("{url}/v1/runs/{run}/trail"))
        .send()
        .unwrap()
        .text()
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_principal_that_writes_nothing_cannot_fill_a_trail_with_refusals() {
    let t = tenants();
    let url = &t.s.url;
    ok(
        url,
        &t.acme,
        json!({"op":"open_run","run":"a1","agent":"alice"}),
    );
    let before = trail_steps(url, "a1").len();
    for principal in ["consumer", "auditor"] {
        let token = issue(url, principal, &[]);
        // A whole body of refused lines, as many as a body may hold.
        let lines: Vec<String> = (0..agentledger::model::limits::MAX_OPS_PER_BODY)
            .map(|_| close("a1", &[]).to_string())
            .collect();
        let answers = server::client()
            .post(format!("{url}/v1/ops"))
            .bearer_auth(&token)
            .header("content-type", "application/x-ndjson")
            .body(lines.join("\n"))
            .send()
            .unwrap()
            .text()
            .unwrap();
        let refused = answers
            .lines()
            .filter(|l| l.contains("\"forbidden\""))
            .count();
        assert_eq!(refused, lines.len(), "every line is refused");
    }
    // One step for each principal, not one for each line; the run is
    // still open and acme closes it.
    let steps = trail_steps(url, "a1");
    let kept: Vec<&Value> = steps
        .iter()
        .filter(|s| s.to_string().contains("forbidden"))
        .collect();
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert_eq!(steps.len(), before + 2);
    ok(url, &t.acme, close("a1", &[]));
    // Every refusal is counted, the unrecorded ones by principal.
    let metrics = server::http(url)
        .get(format!("{url}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let unrecorded = (agentledger::model::limits::MAX_OPS_PER_BODY - 1).to_string();
    for principal in ["consumer", "auditor"] {
        let line = format!(
            "agentledger_forbidden_unrecorded_total{{principal=\"{principal}\"}} {unrecorded}"
        );
        assert!(metrics.contains(&line), "no {line} in\n{metrics}");
    }
    let forbidden = metrics
        .lines()
        .find(|l| l.starts_with("agentledger_refusals_total{code=\"forbidden\"}"))
        .unwrap_or_else(|| panic!("no forbidden refusals counted:\n{metrics}"));
    let n: usize = forbidden.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(
        n >= 2 * agentledger::model::limits::MAX_OPS_PER_BODY,
        "{forbidden}"
    );
}

#[test]
fn one_caller_follows_at_most_its_share_of_the_event_streams() {
    let dir = tempfile::tempdir().unwrap();
    let s = server::start(
        &dir.path().join("data"),
        None,
        &["--max-streams", "3", "--max-streams-per-caller", "2"],
    );
    let url = &s.url;
    let greedy = issue(url, "consumer", &[]);
    let other = issue(url, "consumer", &["acme"]);
    let follow = |token: &str, scope: &str| {
        server::client()
            .get(format!("{url}/v1/events{scope}"))
            .bearer_auth(token)
            .send()
            .unwrap()
    };
    let held: Vec<_> = (0..2).map(|_| follow(&greedy, "")).collect();
    assert!(held.iter().all(|r| r.status() == 200));
    let third = follow(&greedy, "");
    assert_eq!(third.status(), 503);
    assert_eq!(third.headers()["retry-after"], "1");
    let said = third.text().unwrap();
    assert!(said.contains("--max-streams-per-caller"), "{said}");
    // Another tenant still gets its stream; then the server is full.
    let theirs = follow(&other, "?scope=acme");
    assert_eq!(theirs.status(), 200);
    let full = follow(&other, "?scope=acme");
    assert_eq!(full.status(), 503);
    assert!(full.text().unwrap().contains("follows 3 event streams"));
    // A share given back is taken again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let again = follow(&greedy, "");
        if again.status() == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the share never came back");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_share_larger_than_the_whole_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    for (flags, said) in [
        (
            ["--max-in-flight", "4", "--max-in-flight-per-caller", "5"],
            "--max-in-flight-per-caller 5 is not within 1 to --max-in-flight 4",
        ),
        (
            ["--max-streams", "4", "--max-streams-per-caller", "0"],
            "--max-streams-per-caller 0 is not within 1 to --max-streams 4",
        ),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentledger"))
            .args(["--data", &dir.path().join("d").display().to_string()])
            .args(["serve", "--listen", "127.0.0.1:0"])
            .args(flags)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(said), "{err}");
    }
}
