//! `serve --listen` with real clients on 127.0.0.1:0: the same scenario
//! answers identically through `apply`, HTTP and WebSocket on both
//! backends; status codes and limits; SSE that resumes with
//! `Last-Event-ID`; the CLI through the server; SIGTERM and SIGKILL.

mod common;

use common::contract;
use common::server::{base_args, bearer, http, start, start_with_env, SESSIONS};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A WebSocket request to `ws_url` showing the operator's token.
fn ws_request(ws_url: &str) -> tungstenite::handshake::client::Request {
    use tungstenite::client::IntoClientRequest;
    let mut r = ws_url.into_client_request().unwrap();
    r.headers_mut()
        .insert("authorization", bearer(ws_url).parse().unwrap());
    r
}

fn post(url: &str, body: &Value) -> (u16, Value) {
    let r = http(url)
        .post(format!("{url}/v1/ops"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .unwrap();
    let status = r.status().as_u16();
    (status, serde_json::from_str(&r.text().unwrap()).unwrap())
}

/// Every operation, refusals among them; later requests use earlier
/// answers (the blob's URI).
fn scenario(send: &mut dyn FnMut(Value) -> Value) -> Vec<Value> {
    let mut out = Vec::new();
    let mut go = |v: Value, out: &mut Vec<Value>| {
        let a = send(v);
        out.push(a.clone());
        a
    };
    let ctx = |uri: &str| {
        json!({"AgentID": "id-hotel", "AgentName": "hotel", "SubTaskID": "h1", "SubTaskName": "h1",
            "Dependencies": [],
            "ContextItems": [{"ContextID": "doc", "ContextType": "text", "MediaType": "text/plain",
                "ContextURI": uri, "Description": "the doc", "Priority": "reference_only"}],
            "todoItems": [{"itemID": "i1", "description": "do it"}],
            "EvaluationPolicy": {"SuccessCriteria": [{"CriterionID": "c1", "Description": "ok", "Required": true}],
                "ConfidenceThreshold": 0.8}})
    };
    for (agent, listens, emits) in [
        (
            "developer",
            json!(["review.done"]),
            json!([{"event":"code.ready","context":"change","artifacts":["patch"]}]),
        ),
        (
            "reviewer",
            json!(["code.ready"]),
            json!([{"event":"review.done","context":"review","artifacts":["review"]}]),
        ),
    ] {
        go(
            json!({"op":"publish_agent","agent":agent,"scope":"acme/platform","listens":listens,"emits":emits}),
            &mut out,
        );
    }
    go(
        json!({"op":"open_run","run":"r1","agent":"developer"}),
        &mut out,
    );
    go(
        json!({"op":"open_run","run":"r1","agent":"developer"}),
        &mut out,
    );
    go(
        json!({"op":"open_run","run":"r2","agent":"nobody"}),
        &mut out,
    );
    go(
        json!({"op":"close_run","run":"r1","status":"succeeded","summary":"s",
        "artifacts":{"patch":"diff --git","bin":{"content_b64":"AAEC/w=="}}}),
        &mut out,
    );
    let d = go(json!({"op":"dispatch"}), &mut out);
    let listener = d["opened"][0]["run"].as_str().unwrap_or("none").to_string();
    go(
        json!({"op":"read_artifact","run":listener,"name":"patch"}),
        &mut out,
    );
    go(
        json!({"op":"read_artifact","run":listener,"name":"secret"}),
        &mut out,
    );
    go(
        json!({"op":"publish_agent","agent":"master","scope":"acme/travel"}),
        &mut out,
    );
    go(
        json!({"op":"open_run","run":"m1","agent":"master"}),
        &mut out,
    );
    let task = json!({"TaskID":"T1","UserQuery":"q","TaskName":"n","TaskDescription":"d","GoalStatus":[],"OverallStatus":"open"});
    go(
        json!({"op":"open_task","task":"t1","run":"m1","task_context":task}),
        &mut out,
    );
    let b = go(
        json!({"op":"put_blob","task":"t1","content":"referenced document body","ttl_s":3600}),
        &mut out,
    );
    let uri = b["uri"].as_str().unwrap_or("").to_string();
    let c = ctx(&uri);
    go(
        json!({"op":"send_context","task":"t1","run":"m1","mode":"sync","agent_context":c}),
        &mut out,
    );
    go(
        json!({"op":"get_context","task":"t1","agent":"hotel"}),
        &mut out,
    );
    go(
        json!({"op":"get_blob","task":"t1","agent":"hotel","uri":uri}),
        &mut out,
    );
    go(
        json!({"op":"get_blob","task":"t1","agent":"flight","uri":uri}),
        &mut out,
    );
    let mut done = c.clone();
    done["ItemStateUpdates"] = json!([{"itemID": "i1", "state": 1}]);
    done["KeyInformation"] = json!([{"itemID": "i1", "outputabstract": "done"}]);
    done["EvaluationResult"] = json!({"Status": "passed", "Confidence": 0.9,
        "CriterionResults": [{"CriterionID": "c1", "Status": "passed", "EvidenceRefs": [], "TraceRefs": []}]});
    go(
        json!({"op":"return_context","task":"t1","agent":"hotel","agent_context":done}),
        &mut out,
    );
    go(
        json!({"op":"evaluate","task":"t1","run":"m1","subtask":"h1","decision":"accepted","reason":"fine"}),
        &mut out,
    );
    go(
        json!({"op":"update_task","task":"t1","run":"m1","task_context":task}),
        &mut out,
    );
    go(json!({"op":"nope"}), &mut out);
    go(json!({"op":"open_run","run":"r3"}), &mut out);
    out
}

/// The scenario through `apply` on a data dir of its own.
fn through_apply(data: &Path, kafka: Option<&(String, String)>) -> Vec<Value> {
    let mut send = |v: Value| {
        let mut args = base_args(data, kafka);
        args.extend(["apply".to_string(), "-".to_string()]);
        let (_, out, _) = common::cli_with_input(&args, &format!("{v}\n"));
        let a: Value = serde_json::from_str(&out).unwrap();
        if let Some(op) = v["op"]
            .as_str()
            .filter(|op| agentledger::protocol::OPS.contains(op))
        {
            contract::check_reply(op, &a);
        }
        a
    };
    scenario(&mut send)
}

fn through_http(url: &str) -> Vec<Value> {
    let mut send = |v: Value| {
        let (status, a) = post(url, &v);
        let expected = match a["error"]["code"].as_str() {
            None => 200,
            Some("malformed_json" | "invalid_request" | "unknown_op") => 400,
            Some("run_exists") => 409,
            Some(_) => 422,
        };
        assert_eq!(status, expected, "{v} → {a}");
        a
    };
    scenario(&mut send)
}

fn through_ws(url: &str) -> Vec<Value> {
    let ws_url = url.replace("http://", "ws://") + "/v1/ws";
    let (mut ws, _) = tungstenite::connect(ws_request(&ws_url)).unwrap();
    let mut send = |v: Value| {
        ws.send(tungstenite::Message::text(v.to_string())).unwrap();
        loop {
            if let tungstenite::Message::Text(t) = ws.read().unwrap() {
                break serde_json::from_str(t.as_str()).unwrap();
            }
        }
    };
    scenario(&mut send)
}

fn kafka(test: &str) -> (String, String) {
    let common::Backend::Kafka(k) = common::Backend::kafka(test) else {
        unreachable!()
    };
    (k.brokers, k.topic_prefix)
}

/// Where a test's Kafka topics are, by name: brokers and topic prefix.
type KafkaFor<'a> = Option<&'a dyn Fn(&str) -> (String, String)>;

fn same_answers_on_every_transport(kafka_for: KafkaFor) {
    let d = tempfile::tempdir().unwrap();
    let k = |name: &str| kafka_for.map(|f| f(name));
    let apply = through_apply(&d.path().join("apply"), k("apply").as_ref());
    // The serve loop's own dispatch would race the scenario's `dispatch`
    // (which then finds nothing left to open): leave dispatching to it.
    let quiet = ["--dispatch", "manual"];
    let k_http = k("http");
    let s = start(&d.path().join("http"), k_http.as_ref(), &quiet);
    let http = through_http(&s.url);
    drop(s);
    let k_ws = k("ws");
    let s = start(&d.path().join("ws"), k_ws.as_ref(), &quiet);
    let ws = through_ws(&s.url);
    assert!(
        apply.iter().filter(|a| a["ok"] == json!(true)).count() >= 15,
        "{apply:?}"
    );
    for (i, a) in apply.iter().enumerate() {
        assert_eq!(&http[i], a, "answer {i} over HTTP");
        assert_eq!(&ws[i], a, "answer {i} over WebSocket");
    }
    assert_eq!(
        (apply.len(), http.len(), ws.len()),
        (apply.len(), apply.len(), apply.len())
    );
}

#[test]
fn one_scenario_answers_the_same_through_apply_http_and_websocket() {
    same_answers_on_every_transport(None);
}

#[test]
fn kafka_one_scenario_answers_the_same_through_apply_http_and_websocket() {
    same_answers_on_every_transport(Some(&|name: &str| kafka(&format!("server_{name}"))));
}

#[test]
fn status_codes_limits_and_ndjson_bodies() {
    let d = tempfile::tempdir().unwrap();
    let s = start(d.path(), None, &["--max-body-bytes", "2000"]);
    let c = http(&s.url);
    let raw = |body: &str, ctype: &str| {
        let r = c
            .post(format!("{}/v1/ops", s.url))
            .header("content-type", ctype)
            .body(body.to_string())
            .send()
            .unwrap();
        (r.status().as_u16(), r.text().unwrap())
    };
    let (st, body) = raw("{\"op\":", "application/json");
    assert_eq!(st, 400, "{body}");
    assert!(body.contains("malformed_json"), "{body}");
    let (st, body) = raw(
        "{\"op\":\"open_run\",\"run\":\"r\",\"run\":\"x\",\"agent\":\"a\"}",
        "application/json",
    );
    assert_eq!(
        (st, body.contains("invalid_request")),
        (400, true),
        "{body}"
    );
    // Over the body limit: 413, nothing applied.
    let big = format!(
        "{{\"op\":\"publish_agent\",\"agent\":\"a\",\"scope\":\"s\",\"listens\":[\"{}\"]}}",
        "x".repeat(3000)
    );
    let (st, body) = raw(&big, "application/json");
    assert_eq!(st, 413, "{body}");
    assert!(
        body.contains("line_too_long") && body.contains("2000"),
        "{body}"
    );
    // ndjson: one answer per line, in order, a bad line answered and skipped.
    let lines = [
        json!({"op":"publish_agent","agent":"developer","scope":"acme/platform"}).to_string(),
        "not json".to_string(),
        String::new(),
        json!({"op":"open_run","run":"r1","agent":"developer"}).to_string(),
        json!({"op":"open_run","run":"r1","agent":"developer"}).to_string(),
    ];
    let (st, body) = raw(&lines.join("\n"), "application/x-ndjson");
    assert_eq!(st, 200);
    assert_eq!(
        common::answer_codes(&body),
        ["ok", "malformed_json", "ok", "run_exists"]
    );
    // One op preferring an event stream: one SSE event with the answer.
    let r = c
        .post(format!("{}/v1/ops", s.url))
        .header("accept", "text/event-stream, application/json")
        .body(json!({"op":"open_run","run":"r1","agent":"developer"}).to_string())
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 409);
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    let text = r.text().unwrap();
    let data = text
        .lines()
        .find_map(|l| l.strip_prefix("data: "))
        .expect("a data line");
    let a: Value = serde_json::from_str(data).unwrap();
    assert_eq!(a["error"]["code"], "run_exists");
    // Reads, health and metrics.
    let r = c.get(format!("{}/v1/runs/r1/trail", s.url)).send().unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let steps: Vec<Value> = r
        .text()
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(steps.len(), 1);
    let r = c
        .get(format!("{}/v1/runs/nope/chain", s.url))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 422);
    assert_eq!(r.headers()["x-agentledger-exit"], "1");
    let r = c
        .get(format!("{}/v1/agents/developer", s.url))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        c.get(format!("{}/healthz", s.url))
            .send()
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while c
        .get(format!("{}/readyz", s.url))
        .send()
        .unwrap()
        .status()
        .as_u16()
        != 200
    {
        assert!(Instant::now() < deadline, "never ready");
        std::thread::sleep(Duration::from_millis(50));
    }
    let m = c
        .get(format!("{}/metrics", s.url))
        .send()
        .unwrap()
        .text()
        .unwrap();
    for needle in [
        "agentledger_operations_total{op=\"open_run\",outcome=\"ok\"} 1",
        "agentledger_refusals_total{code=\"run_exists\"} 2",
        "agentledger_refusals_total{code=\"malformed_json\"}",
        "agentledger_operation_duration_seconds_bucket",
        "agentledger_lag_records{kind=\"projector\",topic=\"ledger\"",
    ] {
        assert!(m.contains(needle), "{needle} missing from\n{m}");
    }
}

/// Read SSE events from a response until `n` events or the stream ends.
fn read_events(r: reqwest::blocking::Response, n: usize) -> Vec<(String, Value)> {
    let mut reader = BufReader::new(r);
    let mut events = Vec::new();
    let (mut id, mut data) = (None, None);
    let mut line = String::new();
    while events.len() < n {
        line.clear();
        if reader.read_line(&mut line).unwrap() == 0 {
            break;
        }
        let l = line.trim_end_matches(['\r', '\n']);
        if let Some(v) = l.strip_prefix("id:") {
            id = Some(v.trim().to_string());
        } else if let Some(v) = l.strip_prefix("data:") {
            data = Some(serde_json::from_str::<Value>(v.trim()).unwrap());
        } else if l.is_empty() {
            if let (Some(i), Some(d)) = (id.take(), data.take()) {
                events.push((i, d));
            }
        }
    }
    events
}

#[test]
fn sse_resumes_with_last_event_id_losing_and_repeating_nothing() {
    let d = tempfile::tempdir().unwrap();
    let s = start(d.path(), None, &[]);
    post(
        &s.url,
        &json!({"op":"publish_agent","agent":"developer","scope":"acme/platform",
        "emits":[{"event":"code.ready","context":"c","artifacts":["patch"]}]}),
    );
    let close = |i: usize| {
        let run = format!("r{i}");
        post(
            &s.url,
            &json!({"op":"open_run","run":run,"agent":"developer"}),
        );
        let (st, a) = post(
            &s.url,
            &json!({"op":"close_run","run":run,"status":"succeeded","artifacts":{"patch":"p"}}),
        );
        assert_eq!(st, 200, "{a}");
    };
    for i in 0..6 {
        close(i);
    }
    let c = http(&s.url);
    let first = c
        .get(format!("{}/v1/events?from=beginning", s.url))
        .send()
        .unwrap();
    assert_eq!(first.headers()["content-type"], "text/event-stream");
    let got = read_events(first, 4);
    assert_eq!(got.len(), 4);
    // The client goes away mid-stream; more events are published; it comes
    // back with the last id it saw.
    for i in 6..10 {
        close(i);
    }
    let last = got.last().unwrap().0.clone();
    let again = c
        .get(format!("{}/v1/events", s.url))
        .header("last-event-id", &last)
        .send()
        .unwrap();
    let rest = read_events(again, 6);
    let runs: Vec<String> = got
        .iter()
        .chain(&rest)
        .map(|(_, e)| e["subject"].as_str().unwrap().to_string())
        .collect();
    let mut sorted = runs.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), 10, "every event exactly once: {runs:?}");
    // In order within each partition: ids (cursors) only move forward.
    let cursors: Vec<Vec<u64>> = got
        .iter()
        .chain(&rest)
        .map(|(id, _)| id.split('.').map(|o| o.parse().unwrap()).collect())
        .collect();
    for w in cursors.windows(2) {
        assert!(w[0].iter().zip(&w[1]).all(|(a, b)| a <= b), "{cursors:?}");
        assert_ne!(w[0], w[1]);
    }
    // Filters: only the named event; a bad cursor is a 400.
    let none = c
        .get(format!(
            "{}/v1/events?from=beginning&event=other.thing",
            s.url
        ))
        .timeout(Duration::from_millis(800))
        .send()
        .unwrap();
    let mut buf = String::new();
    let _ = BufReader::new(none).read_to_string(&mut buf);
    assert!(!buf.contains("data:"), "{buf}");
    let bad = c
        .get(format!("{}/v1/events?from=x.y", s.url))
        .send()
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
}

#[test]
fn websocket_subscribe_streams_published_events_on_the_same_socket() {
    let d = tempfile::tempdir().unwrap();
    let s = start(d.path(), None, &[]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let url = s.url.replace("http://", "ws://") + "/v1/ws";
    rt.block_on(async {
        use tokio_tungstenite::tungstenite::Message;
        let (mut ws, _) = tokio_tungstenite::connect_async(ws_request(&url))
            .await
            .unwrap();
        let send = |v: Value| Message::text(v.to_string());
        ws.send(send(
            json!({"op":"subscribe","from":"beginning","event":"code.ready"}),
        ))
        .await
        .unwrap();
        ws.send(send(
            json!({"op":"publish_agent","agent":"developer","scope":"acme/platform",
            "emits":[{"event":"code.ready","context":"c","artifacts":["patch"]}]}),
        ))
        .await
        .unwrap();
        ws.send(send(
            json!({"op":"open_run","run":"r1","agent":"developer"}),
        ))
        .await
        .unwrap();
        ws.send(send(
            json!({"op":"close_run","run":"r1","status":"succeeded","artifacts":{"patch":"p"}}),
        ))
        .await
        .unwrap();
        let mut replies = Vec::new();
        let mut published = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while (replies.len() < 4 || published.is_empty()) && Instant::now() < deadline {
            let Ok(Some(Ok(Message::Text(t)))) =
                tokio::time::timeout(Duration::from_secs(30), ws.next()).await
            else {
                continue;
            };
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v.get("published").is_some() {
                published.push(v);
            } else {
                replies.push(v);
            }
        }
        assert_eq!(replies.len(), 4, "{replies:?}");
        assert!(
            replies.iter().all(|r| r["ok"] == json!(true)),
            "{replies:?}"
        );
        assert_eq!(replies[0]["subscribed"], json!(true));
        assert_eq!(published.len(), 1, "{published:?}");
        assert_eq!(published[0]["published"]["subject"], "r1");
        assert_eq!(published[0]["published"]["type"], "code.ready");
        assert_eq!(published[0]["published"]["specversion"], "1.0");
        assert!(published[0]["id"].as_str().is_some());
    });
}

#[test]
fn the_cli_goes_through_a_running_server_and_prints_the_same() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let s = start(&data, None, &[]);
    let dir = data.to_str().unwrap();
    let apply = |input: &str| {
        let args = ["--data", dir, "apply", "-"].map(String::from);
        common::cli_with_input(&args, input)
    };
    let (code, out, err) = apply(&[
        json!({"op":"publish_agent","agent":"developer","scope":"acme/platform","emits":[{"event":"code.ready","context":"c","artifacts":["patch"]}]}).to_string(),
        json!({"op":"open_run","run":"r1","agent":"developer"}).to_string(),
        json!({"op":"close_run","run":"r1","status":"succeeded","artifacts":{"patch":"p"}}).to_string(),
        json!({"op":"open_run","run":"r1","agent":"developer"}).to_string(),
    ].join("\n"));
    assert_eq!(code, 1, "one refusal: {out} {err}");
    assert_eq!(out.lines().count(), 4, "{out}");
    // Acting as another principal is for the data dir itself: through a
    // server identities come from credentials.
    let (code, out, err) = common::cli_with_input(
        &["--data", dir, "apply", "--as", "agent:developer", "-"].map(String::from),
        &json!({"op":"close_run","run":"r1","status":"failed"}).to_string(),
    );
    assert_eq!(code, 2, "{out} {err}");
    assert!(err.contains("--as acts on the data dir itself"), "{err}");
    let (code, out, err) = common::cli(&data, &["status", "--as", "auditor"]);
    assert_eq!(code, 2, "{out} {err}");
    assert!(err.contains("--as acts on the data dir itself"), "{err}");
    // Tokens issued, listed and revoked through the server; an auditor's
    // token reads and may not write.
    let (code, token, err) = common::cli(
        &data,
        &[
            "token",
            "issue",
            "--principal",
            "auditor",
            "--expires",
            "1h",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let token = token.trim().to_string();
    assert!(
        token.starts_with("alt_") && err.contains("for auditor, until"),
        "{token} {err}"
    );
    let id = agentledger::auth::tokens::id_of(&agentledger::auth::tokens::hash(&token));
    let as_auditor = |q: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_agentledger"));
        c.env("AGENTLEDGER_TOKEN", &token)
            .arg("--data")
            .arg(&data)
            .args(q);
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    assert_eq!(as_auditor(&["status"]).0, Some(0));
    let (code, err) = as_auditor(&["token", "revoke", &id]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("forbidden: auditor may not revoke_token"),
        "{err}"
    );
    let (code, list, _) = common::cli(&data, &["token", "list"]);
    assert_eq!(code, 0);
    assert!(list.contains(&format!("{id} active auditor")), "{list}");
    assert!(!list.contains(&token));
    let (code, out, err) = common::cli(&data, &["token", "revoke", &id]);
    assert_eq!(
        (code, out.trim()),
        (0, format!("revoked {id}").as_str()),
        "{err}"
    );
    let (code, err) = as_auditor(&["status"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains(&format!("unauthenticated: token {id} was revoked")),
        "{err}"
    );
    let (code, _, err) = common::cli(&data, &["token", "issue", "--principal", "platform:x"]);
    assert_eq!(code, 1);
    assert!(err.contains("a platform needs at least one scope"), "{err}");
    let questions: [&[&str]; 7] = [
        &["trail", "r1"],
        &["--json", "trail", "r1"],
        &["chain", "r1"],
        &["--json", "chain", "r1"],
        &["agent", "developer"],
        &["stats", "nope"],
        &["trail", "nope"],
    ];
    let ask = |q: &[&str]| common::cli(&data, q);
    let live: Vec<_> = questions.iter().map(|q| ask(q)).collect();
    // An export through the server verifies alone.
    let file = d.path().join("r1.export");
    let file_s = file.to_str().unwrap();
    let (code, out, err) = ask(&["export", "--run", "r1", "-o", file_s]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(
        out.starts_with("exported 3 records") || out.starts_with("exported 2 records"),
        "{out}"
    );
    let (code, out, err) = ask(&["verify", "--export", file_s]);
    assert_eq!(code, 0, "{out} {err}");
    // `verify` of the live log, read beside the server.
    let (code, out, err) = ask(&["verify"]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(
        out.contains("clean: every digest and chain head matches"),
        "{out}"
    );
    let (code, _, err) = ask(&["export", "--run", "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("unknown_run"), "{err}");
    assert_eq!(live[0].0, 0, "{:?}", live[0]);
    assert!(live[0].1.contains("closed succeeded"), "{:?}", live[0]);
    assert_eq!(live[6].0, 1);
    assert!(live[6].2.contains("unknown_run"), "{:?}", live[6]);
    // Stop the server: the same questions on the data dir say the same.
    let _ = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status();
    let mut s = s;
    let status = s.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(
        !data.join("serve.addr").exists() && !data.join("serve.token").exists(),
        "serve.addr and serve.token are removed on a clean stop"
    );
    let text = std::fs::read_to_string(&s.stderr).unwrap();
    assert!(text.contains("stopped cleanly"), "{text}");
    for (q, before) in questions.iter().zip(&live) {
        let after = ask(q);
        // A dispatch step may have been added meanwhile; compare what both saw.
        if q.contains(&"trail") && before.0 == 0 {
            assert!(
                after.1.starts_with(&before.1) || before.1.starts_with(&after.1),
                "{q:?}: {before:?} vs {after:?}"
            );
        } else {
            assert_eq!(&after, before, "{q:?}");
        }
    }
}

#[test]
fn sigkill_under_concurrent_writers_loses_nothing_answered() {
    sigkill_under_64_writers(None);
}

/// On Kafka the operations of a commit group are in flight together and
/// answered once all are acknowledged: killed mid-group, nothing answered
/// is missing from the topics (read afresh by a new instance).
#[test]
fn kafka_sigkill_under_concurrent_writers_loses_nothing_answered() {
    sigkill_under_64_writers(Some(kafka("sigkill")));
}

fn sigkill_under_64_writers(kafka: Option<(String, String)>) {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let s = start(&data, kafka.as_ref(), &[]);
    post(
        &s.url,
        &json!({"op":"publish_agent","agent":"developer","scope":"acme/platform"}),
    );
    let url = s.url.clone();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..64)
        .map(|w| {
            let url = url.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let c = http(&url);
                let mut answered = Vec::new();
                for i in 0.. {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) {
                        break;
                    }
                    let run = format!("w{w}-{i}");
                    let r = c
                        .post(format!("{url}/v1/ops"))
                        .body(json!({"op":"open_run","run":run,"agent":"developer"}).to_string())
                        .send()
                        .and_then(|r| r.text());
                    match r {
                        Ok(t) if t.contains("\"ok\":true") => answered.push(run),
                        _ => break,
                    }
                }
                answered
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let mut s = s;
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let answered: Vec<String> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(
        answered.len() >= 64,
        "only {} operations answered",
        answered.len()
    );
    // After the kill: every answered run is in the ledger.
    let engine = match &kafka {
        None => {
            let (code, out, err) = common::cli(&data, &["--json", "status"]);
            assert_eq!(code, 0, "{out} {err}");
            common::Ledger::open(&data).engine
        }
        Some((brokers, prefix)) => {
            let cfg = agentledger::log::kafka::KafkaConfig {
                topic_prefix: prefix.clone(),
                ..agentledger::log::kafka::KafkaConfig::new(brokers.clone())
            };
            agentledger::engine::Engine::open_kafka(
                d.path().join("after"),
                &cfg,
                agentledger::engine::EngineOptions::default(),
            )
            .unwrap()
        }
    };
    for run in &answered {
        assert!(
            engine.views().run(run).unwrap().is_some(),
            "{run} was answered ok but is not in the ledger after SIGKILL"
        );
    }
}

#[test]
fn past_its_limits_the_server_says_so_and_applies_nothing() {
    let d = tempfile::tempdir().unwrap();
    let s = start(
        d.path(),
        None,
        &["--max-in-flight", "1", "--max-streams", "1"],
    );
    let c = http(&s.url);
    // Too many operations in one body: 413, nothing applied.
    let many: Vec<String> = (0..=agentledger::model::limits::MAX_OPS_PER_BODY)
        .map(|i| json!({"op":"publish_agent","agent":format!("a{i}"),"scope":"acme/x"}).to_string())
        .collect();
    let r = c
        .post(format!("{}/v1/ops", s.url))
        .header("content-type", "application/x-ndjson")
        .body(many.join("\n"))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 413);
    assert!(r.text().unwrap().contains("limit_exceeded"));
    let r = c.get(format!("{}/v1/agents/a0", s.url)).send().unwrap();
    assert_eq!(
        r.status().as_u16(),
        422,
        "nothing of the refused body was applied"
    );

    // One event stream at a time: the second is 503 until the first goes.
    let first = c
        .get(format!("{}/v1/events?from=beginning", s.url))
        .send()
        .unwrap();
    assert_eq!(first.status().as_u16(), 200);
    let second = c.get(format!("{}/v1/events", s.url)).send().unwrap();
    assert_eq!(second.status().as_u16(), 503);
    assert_eq!(second.headers()["retry-after"], "1");
    assert!(second.text().unwrap().contains("overloaded"));
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let again = c
            .get(format!("{}/v1/events", s.url))
            .timeout(Duration::from_millis(500))
            .send();
        if again.is_ok_and(|r| r.status().as_u16() == 200) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stream's slot was never freed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // One request at a time: while a long body is answered, another
    // request is turned away with 503 and Retry-After.
    let long: Vec<String> = (0..agentledger::model::limits::MAX_OPS_PER_BODY)
        .map(|i| json!({"op":"publish_agent","agent":format!("b{i}"),"scope":"acme/x"}).to_string())
        .collect();
    let url = s.url.clone();
    let busy = std::thread::spawn(move || loop {
        // It may itself be turned away while the probe below holds the
        // one slot: retry as a client told Retry-After would.
        let status = http(&url)
            .post(format!("{url}/v1/ops"))
            .header("content-type", "application/x-ndjson")
            .body(long.join("\n"))
            .send()
            .unwrap()
            .status()
            .as_u16();
        if status != 503 {
            break status;
        }
    });
    let mut turned_away = false;
    while !busy.is_finished() {
        let r = c
            .post(format!("{}/v1/ops", s.url))
            .body(json!({"op":"dispatch"}).to_string())
            .send()
            .unwrap();
        if r.status().as_u16() == 503 {
            assert_eq!(r.headers()["retry-after"], "1");
            assert!(r.text().unwrap().contains("overloaded"));
            turned_away = true;
            break;
        }
    }
    assert_eq!(busy.join().unwrap(), 200);
    assert!(
        turned_away,
        "no request was turned away while one was answered"
    );
}

/// A counter's value in Prometheus text.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("{name} missing from\n{text}")) as u64
}

#[test]
fn the_dispatch_sweep_shares_one_sync_per_partition_with_the_operations() {
    let d = tempfile::tempdir().unwrap();
    let s = start(d.path(), None, &["--poll-ms", "300"]);
    let c = http(&s.url);
    let scrape = || {
        c.get(format!("{}/metrics", s.url))
            .send()
            .unwrap()
            .text()
            .unwrap()
    };
    for body in [
        json!({"op":"publish_agent","agent":"developer","scope":"acme/platform",
            "emits":[{"event":"code.ready","context":"change","artifacts":["patch"]}]}),
        json!({"op":"publish_agent","agent":"reviewer","scope":"acme/platform",
            "listens":["code.ready"]}),
    ] {
        assert_eq!(post(&s.url, &body).0, 200);
    }
    // 40 chains (spread over every partition) opened and closed in one body.
    let runs = 40;
    let lines: Vec<String> = (0..runs)
        .flat_map(|i| {
            let run = format!("sweep-{i}");
            [
                json!({"op":"open_run","run":run,"agent":"developer"}).to_string(),
                json!({"op":"close_run","run":run,"status":"succeeded","artifacts":{"patch":"p"}})
                    .to_string(),
            ]
        })
        .collect();
    let before = metric(&scrape(), "agentledger_log_syncs_total");
    let r = c
        .post(format!("{}/v1/ops", s.url))
        .header("content-type", "application/x-ndjson")
        .body(lines.join("\n"))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(common::answer_codes(&r.text().unwrap()).len(), 2 * runs);
    // The next sweep dispatches all 40 runs: one listener each.
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = scrape();
        if text.contains(&format!("agentledger_listeners_opened_total {runs}")) {
            break text;
        }
        assert!(Instant::now() < deadline, "never dispatched:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    let syncs = metric(&text, "agentledger_log_syncs_total") - before;
    // The body's group syncs the 4 ledger partitions; the sweep's group
    // the 4 ledger and the published partitions. A sync per dispatched run
    // (as before) would be at least 80.
    assert!(
        syncs <= 16,
        "{syncs} syncs for 80 operations and a sweep of {runs} runs"
    );
}

/// A token issued through one instance works on another serving the same
/// Kafka topics, and stops working there once revoked through the first,
/// within the staleness bound.
#[test]
fn kafka_a_token_revoked_on_one_instance_stops_working_on_another() {
    let d = tempfile::tempdir().unwrap();
    let k = kafka("server_tokens");
    let (a_dir, b_dir) = (d.path().join("a"), d.path().join("b"));
    let _a = start(&a_dir, Some(&k), &[]);
    let b = start(&b_dir, Some(&k), &[]);
    let on_a = |args: &[&str]| {
        let mut all = base_args(&a_dir, Some(&k));
        all.extend(args.iter().map(|s| s.to_string()));
        common::cli_with_input(&all, "")
    };
    let (code, token, err) = on_a(&["token", "issue", "--principal", "auditor"]);
    assert_eq!(code, 0, "{err}");
    let token = token.trim().to_string();
    let id = agentledger::auth::tokens::id_of(&agentledger::auth::tokens::hash(&token));
    let status_on_b = || {
        reqwest::blocking::Client::new()
            .get(format!("{}/v1/status", b.url))
            .bearer_auth(&token)
            .send()
            .unwrap()
            .status()
            .as_u16()
    };
    // Issued a moment ago on A: B looks again on caught-up views.
    assert_eq!(status_on_b(), 200);
    let (code, out, err) = on_a(&["token", "revoke", &id]);
    assert_eq!(code, 0, "{out} {err}");
    let revoked = Instant::now();
    while status_on_b() != 401 {
        assert!(
            revoked.elapsed() < Duration::from_secs(10),
            "B still accepts a token revoked on A"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!("revocation took effect on B after {:?}", revoked.elapsed());
    let stderr_b = std::fs::read_to_string(&b.stderr).unwrap();
    assert!(!stderr_b.contains(&token));
}

/// A certificate authority and a certificate it signed for 127.0.0.1, as
/// PEM files in `dir`: (ca, cert, key).
fn certificates(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    let ca = common::tls::TestCa::new();
    let (cert, key) = ca.server(dir, name);
    (ca.write(dir, name), cert, key)
}

/// `serve --tls-cert --tls-key`: HTTPS with rustls; a client that trusts
/// the CA is answered, one that does not (no CA, or another CA) is refused
/// at the handshake; the CLI goes through it with `--tls-ca` and says what
/// is wrong without; certificates that cannot be used are a clear error
/// before anything listens.
#[test]
fn https_answers_clients_that_trust_its_ca_and_only_them() {
    let d = tempfile::tempdir().unwrap();
    let (ca, cert, key) = certificates(d.path(), "good");
    let (other_ca, _, other_key) = certificates(d.path(), "other");
    let data = d.path().join("data");
    let (cert_s, key_s) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let s = start(&data, None, &["--tls-cert", cert_s, "--tls-key", key_s]);
    assert!(s.url.starts_with("https://127.0.0.1:"), "{}", s.url);
    let client = |ca: Option<&Path>| {
        let mut b = reqwest::blocking::Client::builder().timeout(Duration::from_secs(30));
        if let Some(ca) = ca {
            let pem = std::fs::read(ca).unwrap();
            b = b.add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap());
        }
        b.build().unwrap()
    };
    let publish = json!({"op":"publish_agent","agent":"developer","scope":"acme/platform"});
    let r = client(Some(&ca))
        .post(format!("{}/v1/ops", s.url))
        .header("authorization", bearer(&s.url))
        .body(publish.to_string())
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(r.json::<Value>().unwrap()["version"], json!(1));
    for untrusted in [None, Some(other_ca.as_path())] {
        let e = client(untrusted)
            .get(format!("{}/healthz", s.url))
            .send()
            .unwrap_err();
        assert!(e.is_connect() || e.is_request(), "{e:?}");
    }
    // Plain HTTP to the TLS port gets no answer from the ledger.
    let plain = s.url.replace("https://", "http://");
    assert!(!client(None)
        .get(format!("{plain}/healthz"))
        .send()
        .is_ok_and(|r| r.status().is_success()));
    // The CLI through it: with the CA it answers; without, it says why.
    let ca_s = ca.to_str().unwrap();
    let (code, out, err) = common::cli(&data, &["--tls-ca", ca_s, "agent", "developer"]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("developer v1"), "{out}");
    let (code, _, err) = common::cli(&data, &["agent", "developer"]);
    assert_eq!(code, 2);
    assert!(err.contains("trust its certificate with --tls-ca"), "{err}");
    drop(s);
    // Certificates that cannot be used: said before anything listens.
    let missing = d.path().join("missing.pem");
    let missing = missing.to_str().unwrap();
    let other_key = other_key.to_str().unwrap();
    for (cert, key, says) in [
        (missing, key_s, "--tls-cert"),
        (cert_s, missing, "--tls-key"),
        (key_s, key_s, "no PEM certificate"),
        (cert_s, cert_s, "no PEM private key"),
        (cert_s, other_key, "do not go together"),
    ] {
        let d2 = tempfile::tempdir().unwrap();
        let (code, _, err) = common::cli(
            d2.path(),
            &[
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--tls-cert",
                cert,
                "--tls-key",
                key,
            ],
        );
        assert_eq!(code, 2, "{cert} {key}: {err}");
        assert!(err.contains(says), "{says}: {err}");
        assert!(!err.contains("PRIVATE KEY"), "{err}");
        assert!(!d2.path().join("serve.addr").exists());
    }
}

/// `serve --client-ca`: a client certificate signed by that CA
/// authenticates as the principal its URI SAN names, with no bearer token,
/// and is held to the same policy as a token (an agent may not publish, a
/// platform publishes in its scopes with its grant as access, an auditor
/// reads); a certificate naming no one is 401 saying why, one signed by
/// another CA is refused at the handshake, and clients with only a bearer
/// token still get in. A CA file that cannot be used is said before
/// anything listens.
#[test]
fn client_certificates_authenticate_as_the_principal_their_san_names() {
    use common::tls::TestCa;
    let d = tempfile::tempdir().unwrap();
    let server_ca = TestCa::new();
    let (cert, key) = server_ca.server(d.path(), "server");
    let clients = TestCa::new();
    let clients_file = clients.write(d.path(), "clients");
    let data = d.path().join("data");
    let path = |p: &PathBuf| p.to_str().unwrap().to_owned();
    let s = start(
        &data,
        None,
        &[
            "--tls-cert",
            &path(&cert),
            "--tls-key",
            &path(&key),
            "--client-ca",
            &path(&clients_file),
        ],
    );
    let client = |identity: Option<(PathBuf, PathBuf)>| {
        let mut b = reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .add_root_certificate(
                reqwest::Certificate::from_pem(server_ca.pem().as_bytes()).unwrap(),
            );
        if let Some((cert, key)) = identity {
            let mut pem = std::fs::read(key).unwrap();
            pem.extend(std::fs::read(cert).unwrap());
            b = b.identity(reqwest::Identity::from_pem(&pem).unwrap());
        }
        b.build().unwrap()
    };
    let op = |c: &reqwest::blocking::Client, body: Value| -> (u16, Value) {
        let r = c
            .post(format!("{}/v1/ops", s.url))
            .body(body.to_string())
            .send()
            .unwrap();
        (r.status().as_u16(), r.json().unwrap())
    };
    let publish = |agent: &str| json!({"op":"publish_agent","agent":agent,"scope":"acme/travel","access":["acme/travel"]});

    let platform = client(Some(clients.client(
        d.path(),
        "platform",
        &["agentledger:platform:acme?scope=acme/travel"],
    )));
    let (status, a) = op(&platform, publish("hotel"));
    assert_eq!(status, 200, "{a}");
    let (status, a) = op(
        &platform,
        json!({"op":"publish_agent","agent":"bank","scope":"globex/finance"}),
    );
    assert_eq!(status, 403, "{a}");
    assert_eq!(a["error"]["code"], "forbidden", "{a}");

    let agent = client(Some(clients.client(
        d.path(),
        "agent",
        &["spiffe://acme/hotel", "agentledger:agent:hotel"],
    )));
    let (status, a) = op(&agent, publish("weather"));
    assert_eq!(status, 403, "{a}");

    let auditor = client(Some(clients.client(
        d.path(),
        "auditor",
        &["agentledger:auditor"],
    )));
    let r = auditor
        .get(format!("{}/v1/agents/hotel", s.url))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let shown: Value = r.json().unwrap();
    assert!(
        shown.to_string().contains(r#""access":["acme/travel"]"#),
        "the platform's grant is the agent's access: {shown}"
    );
    let (status, a) = op(&auditor, publish("spy"));
    assert_eq!(status, 403, "{a}");

    // Certificates that name no one, or two: 401, saying why.
    for (name, uris, says) in [
        ("nobody", &["spiffe://acme/hotel"][..], "names no principal"),
        (
            "twice",
            &["agentledger:auditor", "agentledger:agent:hotel"][..],
            "names 2 principals",
        ),
        ("bad", &["agentledger:root"][..], "agentledger:root"),
    ] {
        let c = client(Some(clients.client(d.path(), name, uris)));
        let (status, a) = op(&c, publish("x"));
        assert_eq!(status, 401, "{name}: {a}");
        assert!(
            a["error"]["message"].as_str().unwrap().contains(says),
            "{name}: {a}"
        );
    }
    // Signed by another CA: no connection at all.
    let stranger = TestCa::new();
    let e = client(Some(stranger.client(
        d.path(),
        "stranger",
        &["agentledger:operator"],
    )))
    .post(format!("{}/v1/ops", s.url))
    .body(publish("x").to_string())
    .send()
    .unwrap_err();
    assert!(e.is_connect() || e.is_request(), "{e:?}");
    // No certificate: a bearer token, or 401.
    let (status, _) = op(&client(None), publish("x"));
    assert_eq!(status, 401);
    let r = client(None)
        .post(format!("{}/v1/ops", s.url))
        .header("authorization", bearer(&s.url))
        .body(publish("ops").to_string())
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // A bearer token speaks for its request even on a certificate's
    // connection.
    let r = agent
        .post(format!("{}/v1/ops", s.url))
        .header("authorization", bearer(&s.url))
        .body(publish("ops2").to_string())
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    drop(s);

    let d2 = tempfile::tempdir().unwrap();
    let (code, _, err) = common::cli(
        d2.path(),
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--tls-cert",
            &path(&cert),
            "--tls-key",
            &path(&key),
            "--client-ca",
            &path(&key),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--client-ca") && err.contains("no PEM certificate"),
        "{err}"
    );
    assert!(!d2.path().join("serve.addr").exists());
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// No credential a server saw appears anywhere it writes: a server on
/// Kafka over SASL_SSL, logging at debug level, is used with the session
/// token, an issued token, a revoked one and made-up ones; afterwards its
/// log, every file of its data dir, and what the CLI printed (trail,
/// export, token list, status, metrics) are searched for each token and
/// the Kafka password.
#[test]
fn no_credential_appears_in_logs_files_trails_or_exports() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let kafka = (
        common::required_env(common::KAFKA_SECURE_ENV),
        common::unique_prefix("no-credential"),
    );
    let password_file = common::required_env(common::KAFKA_SASL_PASSWORD_FILE_ENV);
    let password = std::fs::read_to_string(&password_file)
        .unwrap()
        .trim()
        .to_owned();
    let ca = common::required_env(common::KAFKA_TLS_CA_ENV);
    let user = common::required_env(common::KAFKA_SASL_USER_ENV);
    let secure = [
        "--kafka-tls-ca",
        ca.as_str(),
        "--kafka-user",
        user.as_str(),
        "--kafka-password-file",
        password_file.as_str(),
    ];
    let s = start_with_env(&data, Some(&kafka), &secure, &[("RUST_LOG", "debug")]);
    let session = SESSIONS.lock().unwrap()[&s.url].clone();
    let printed = std::cell::RefCell::new(String::new());
    let cli = |args: &[&str]| {
        let (code, out, err) = common::cli(&data, args);
        printed.borrow_mut().push_str(&out);
        printed.borrow_mut().push_str(&err);
        (code, out)
    };
    // `token issue` prints the token once, by design: not searched.
    let issue = |principal: &str, scope: &[&str]| {
        let mut args = vec!["token", "issue", "--principal", principal];
        args.extend(scope);
        let (code, out, err) = common::cli(&data, &args);
        assert_eq!(code, 0, "{out} {err}");
        out.split_whitespace()
            .find(|w| w.starts_with("alt_"))
            .unwrap_or_else(|| panic!("no token in {out}"))
            .to_owned()
    };
    let platform = issue("platform:acme", &["--scope", "acme"]);
    let revoked = issue("auditor", &[]);
    let (_, list) = cli(&["token", "list", "--json"]);
    let revoked_id = list
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|t| t["principal"] == "auditor")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(cli(&["token", "revoke", &revoked_id]).0, 0);

    let http = reqwest::blocking::Client::new();
    let op = |token: &str, body: Value| {
        let r = http
            .post(format!("{}/v1/ops", s.url))
            .header("authorization", format!("Bearer {token}"))
            .body(body.to_string())
            .send()
            .unwrap();
        let status = r.status().as_u16();
        (status, r.text().unwrap())
    };
    for body in [
        json!({"op":"publish_agent","agent":"hotel","scope":"acme/travel","emits":[{"event":"booked","context":"booking","artifacts":["plan"]}]}),
        json!({"op":"open_run","run":"h1","agent":"hotel"}),
        json!({"op":"close_run","run":"h1","status":"succeeded","artifacts":{"plan":"room 12"}}),
    ] {
        let (status, text) = op(&platform, body);
        assert_eq!(status, 200, "{text}");
    }
    let made_up = "alt_bm90LWEtcmVhbC10b2tlbi1idXQtbG9va3MtbGlrZS1vbmUw";
    let jwt_like = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJvcGVyYXRvciJ9.c2VjcmV0LXNpZ25hdHVyZQ";
    for token in [revoked.as_str(), made_up, jwt_like, "short"] {
        let (status, text) = op(token, json!({"op":"dispatch"}));
        assert_eq!(status, 401, "{text}");
        printed.borrow_mut().push_str(&text);
    }
    for args in [
        &["trail", "h1", "--json"][..],
        &["trail", "h1"][..],
        &["export", "--run", "h1"][..],
        &["status", "--json"][..],
        &["token", "list"][..],
    ] {
        let (code, out) = cli(args);
        assert_eq!(code, 0, "{args:?}: {out}");
    }
    printed.borrow_mut().push_str(
        &http
            .get(format!("{}/metrics", s.url))
            .header("authorization", format!("Bearer {session}"))
            .send()
            .unwrap()
            .text()
            .unwrap(),
    );
    let printed = printed.into_inner();
    assert!(printed.contains("h1"), "the outputs searched are real ones");
    let _ = Command::new("kill")
        .args(["-TERM", &s.child.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while data.join("serve.addr").exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !data.join("serve.token").exists(),
        "the session token is removed at shutdown"
    );
    let log = std::fs::read_to_string(&s.stderr).unwrap();
    assert!(log.contains("DEBUG"), "the server logged at debug level");
    let needles = [
        ("the session token", session.as_str()),
        ("the platform's token", platform.as_str()),
        ("the revoked token", revoked.as_str()),
        ("a made-up token", made_up),
        ("a JWT", jwt_like),
        ("the Kafka password", password.as_str()),
    ];
    let mut haystacks = vec![("the server's log".to_string(), log.into_bytes())];
    haystacks.push(("what the CLI and HTTP printed".into(), printed.into_bytes()));
    for f in files_under(&data) {
        haystacks.push((f.display().to_string(), std::fs::read(&f).unwrap()));
    }
    for (what, needle) in needles {
        for (place, bytes) in &haystacks {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "{what} appears in {place}"
            );
        }
    }
}

/// A serving ledger with a checkpoint key signs what it writes within
/// `--checkpoint-ms`, without waiting for 1024 records: `GET
/// /v1/verify?key=` (and the CLI's `verify --key` through the server) soon
/// find every record under a signed checkpoint. A key that is not one is a
/// 400 naming it.
#[test]
fn a_serving_ledger_signs_its_records_within_the_checkpoint_interval() {
    let d = tempfile::tempdir().unwrap();
    let data = d.path().join("data");
    let (code, key, err) = common::cli(&data, &["key", "generate", "--name", "serving"]);
    assert_eq!(code, 0, "{err}");
    let key = key.trim().to_owned();
    let s = start(&data, None, &["--checkpoint-ms", "200"]);
    let c = http(&s.url);
    for op in [
        json!({"op":"publish_agent","agent":"hotel","scope":"acme/travel"}),
        json!({"op":"open_run","run":"h1","agent":"hotel"}),
    ] {
        let r = c
            .post(format!("{}/v1/ops", s.url))
            .body(op.to_string())
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let v = loop {
        let r = c
            .get(format!("{}/v1/verify", s.url))
            .query(&[("key", key.as_str())])
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
        let v: Value = r.json().unwrap();
        if v["ok"] == true || Instant::now() > deadline {
            break v;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["signed"]["attested"], v["records"], "{v}");
    let (code, out, err) = common::cli(&data, &["verify", "--key", &key]);
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("signed by serving+"), "{out}");
    let r = c
        .get(format!("{}/v1/verify", s.url))
        .query(&[("key", "not-a-key")])
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().unwrap().contains("key:"));
}

/// A WebSocket message over the body limit is answered `line_too_long`
/// and the socket goes on; one far over it (past twice the limit) closes
/// the socket with 1009 and a reason, not a bare close.
#[test]
fn a_websocket_message_over_the_limit_is_answered_and_the_socket_goes_on() {
    let d = tempfile::tempdir().unwrap();
    let s = start(d.path(), None, &["--max-body-bytes", "1000"]);
    let ws_url = s.url.replace("http://", "ws://") + "/v1/ws";
    let (mut ws, _) = tungstenite::connect(ws_request(&ws_url)).unwrap();
    let mut ask = |text: String| -> Value {
        ws.send(tungstenite::Message::text(text)).unwrap();
        loop {
            if let tungstenite::Message::Text(t) = ws.read().unwrap() {
                break serde_json::from_str(t.as_str()).unwrap();
            }
        }
    };
    let over = json!({"op":"publish_agent","agent":"a","scope":"acme/x","pad":"x".repeat(1000)});
    let a = ask(over.to_string());
    assert_eq!(a["error"]["code"], "line_too_long", "{a}");
    assert!(
        a["error"]["message"].as_str().unwrap().contains("1000"),
        "{a}"
    );
    let a = ask(json!({"op":"dispatch"}).to_string());
    assert_eq!(a["ok"], true, "{a}");
    ws.send(tungstenite::Message::text("x".repeat(2500)))
        .unwrap();
    let closed = loop {
        match ws.read() {
            Ok(tungstenite::Message::Close(f)) => break f,
            Ok(_) => continue,
            Err(e) => panic!("closed without a close frame: {e}"),
        }
    };
    let f = closed.expect("a close frame with a code");
    assert_eq!(u16::from(f.code), 1009, "{f:?}");
    assert!(!f.reason.is_empty(), "{f:?}");
}

/// An event stream lasts as long as its credential: revoking the token
/// that opened it ends it (SSE here; a subscribed socket the same way).
#[test]
fn revoking_a_token_ends_the_event_streams_it_opened() {
    let d = tempfile::tempdir().unwrap();
    let s = start(d.path(), None, &[]);
    let (code, out, err) = common::cli(
        d.path(),
        &["--json", "token", "issue", "--principal", "consumer"],
    );
    assert_eq!(code, 0, "{err}");
    let issued: Value = serde_json::from_str(out.trim()).unwrap();
    let token = issued["token"].as_str().unwrap().to_owned();
    let id = issued["id"].as_str().unwrap().to_owned();
    let stream = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
        .get(format!("{}/v1/events?from=beginning", s.url))
        .header("authorization", format!("Bearer {token}"))
        .send()
        .unwrap();
    assert_eq!(stream.status().as_u16(), 200);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut stream = stream;
        let mut sink = Vec::new();
        let _ = stream.read_to_end(&mut sink);
        let _ = done_tx.send(());
    });
    // Still open while the token stands.
    assert!(done_rx.recv_timeout(Duration::from_secs(3)).is_err());
    let (code, _, err) = common::cli(d.path(), &["token", "revoke", &id]);
    assert_eq!(code, 0, "{err}");
    assert!(
        done_rx.recv_timeout(Duration::from_secs(15)).is_ok(),
        "the stream outlived its revoked token"
    );
}

/// Every error is the answer object, also where the framework refuses a
/// path, a query or a method, and for routes that do not exist.
#[test]
fn every_error_is_the_answer_object() {
    let d = tempfile::tempdir().unwrap();
    let s = start(d.path(), None, &[]);
    let c = http(&s.url);
    for (path, status, code) in [
        ("/v1/nothing-here", 404, "not_found"),
        ("/v1/runs/r1/trail?chain=maybe", 400, "invalid_request"),
        ("/v1/log/ledger/-1/checkpoint", 400, "invalid_request"),
        ("/v1/runs/%ff/trail", 400, "invalid_request"),
        ("/v1/ops", 405, "invalid_request"),
        ("/v1/runs/a%2Fb/trail", 400, "invalid_name"),
        ("/v1/runs/r%00/trail", 400, "invalid_name"),
        ("/v1/agents/%00", 400, "invalid_name"),
        ("/v1/tasks/a%20b/stats", 400, "invalid_name"),
        ("/v1/runs/r1/chain?as_of=0", 400, "invalid_request"),
        ("/v1/agents/a?as_of=zz", 400, "invalid_request"),
        ("/v1/status?chain=true", 400, "invalid_request"),
        ("/v1/events?scope=acme/platform/..", 400, "invalid_scope"),
        ("/v1/events?scope=acme/platform/", 400, "invalid_scope"),
        ("/v1/events?event=a%20b", 400, "invalid_name"),
        ("/v1/verify?witnesses=1", 400, "invalid_request"),
        ("/v1/verify?all_witnessed=true", 400, "invalid_request"),
    ] {
        let r = c.get(format!("{}{path}", s.url)).send().unwrap();
        assert_eq!(r.status().as_u16(), status, "{path}");
        assert_eq!(r.headers()["content-type"], "application/json", "{path}");
        let a: Value = serde_json::from_str(&r.text().unwrap()).unwrap();
        assert_eq!(a["ok"], false, "{path}: {a}");
        assert_eq!(a["error"]["code"], code, "{path}: {a}");
        assert!(!a["error"]["message"].as_str().unwrap().is_empty(), "{a}");
    }
    // The chain page holds names to the same.
    for path in ["/chains/..%2F..%2F", "/chains/a%20b"] {
        let r = c.get(format!("{}{path}", s.url)).send().unwrap();
        assert_eq!(r.status().as_u16(), 400, "{path}");
        assert!(r.text().unwrap().contains("invalid_name"), "{path}");
    }
    // Nor is it a name an operation may give.
    for v in [
        json!({"op":"publish_agent","agent":"..","scope":"acme"}),
        json!({"op":"open_run","run":".","agent":"a"}),
    ] {
        let r = c
            .post(format!("{}/v1/ops", s.url))
            .header("content-type", "application/json")
            .body(v.to_string())
            .send()
            .unwrap();
        let a: Value = r.json().unwrap();
        assert_eq!(a["error"]["code"], "invalid_name", "{v}: {a}");
    }
    // A name of 50,000 characters is not echoed whole.
    let long = "x".repeat(50_000);
    let r = c
        .get(format!("{}/v1/runs/{long}!/trail", s.url))
        .send()
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    assert!(r.text().unwrap().len() < 1000);
}

/// A socket that subscribes again keeps its one stream slot: back-to-back
/// subscribes are each answered, while another socket past the limit is
/// told `overloaded`.
#[test]
fn subscribing_again_on_one_socket_keeps_its_stream_slot() {
    let d = tempfile::tempdir().unwrap();
    let s = start(d.path(), None, &["--max-streams", "1"]);
    let ws_url = s.url.replace("http://", "ws://") + "/v1/ws";
    let (mut ws, _) = tungstenite::connect(ws_request(&ws_url)).unwrap();
    let ask = |ws: &mut tungstenite::WebSocket<_>, v: Value| -> Value {
        ws.send(tungstenite::Message::text(v.to_string())).unwrap();
        loop {
            if let tungstenite::Message::Text(t) = ws.read().unwrap() {
                let a: Value = serde_json::from_str(t.as_str()).unwrap();
                if a.get("published").is_none() {
                    break a;
                }
            }
        }
    };
    for i in 0..6 {
        let a = ask(&mut ws, json!({"op":"subscribe","from":"end"}));
        assert_eq!(a["subscribed"], true, "subscribe {i}: {a}");
    }
    let (mut other, _) = tungstenite::connect(ws_request(&ws_url)).unwrap();
    let a = ask(&mut other, json!({"op":"subscribe","from":"end"}));
    assert_eq!(a["error"]["code"], "overloaded", "{a}");
}
