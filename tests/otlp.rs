//! Chains as OpenTelemetry GenAI spans: `trail --chain --otlp FILE` on the
//! demo (one trace per chain, an `invoke_agent` span per run parented by
//! the run that opened it, `execute_tool` reads, span events for withheld
//! events and refused listeners), taken by a real OpenTelemetry Collector
//! (`AGENTLEDGER_TEST_OTELCOL`, built by `tools/otelcol/build.sh`), and
//! `serve --otlp-endpoint` sending each run to the collector as it closes —
//! also when the collector only comes up after the run closed.

mod common;

use common::server;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn otelcol() -> String {
    match std::env::var("AGENTLEDGER_TEST_OTELCOL") {
        Ok(v) if !v.trim().is_empty() => v,
        _ => panic!(
            "AGENTLEDGER_TEST_OTELCOL is not set: run the tests with `tools/test` (it builds the \
             collector with tools/otelcol/build.sh), or export AGENTLEDGER_TEST_OTELCOL=$(tools/otelcol/build.sh)"
        ),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A collector with the OTLP/HTTP receiver on `port`, writing what it
/// receives to `out` as OTLP/JSON lines. Killed when dropped.
struct Collector {
    child: Child,
    out: PathBuf,
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Collector {
    fn start(dir: &Path, port: u16) -> Collector {
        let out = dir.join(format!("received-{port}.jsonl"));
        let config = dir.join(format!("otelcol-{port}.yaml"));
        std::fs::write(
            &config,
            format!(
                "receivers:\n  otlp:\n    protocols:\n      http:\n        endpoint: 127.0.0.1:{port}\n\
                 exporters:\n  file:\n    path: {}\n    format: json\n    flush_interval: 100ms\n\
                 service:\n  pipelines:\n    traces:\n      receivers: [otlp]\n      exporters: [file]\n\
                 \x20 telemetry:\n    metrics:\n      level: none\n",
                out.display()
            ),
        )
        .unwrap();
        let child = Command::new(otelcol())
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(format!("otelcol-{port}.log"))).unwrap())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the collector did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Collector { child, out }
    }

    fn url(&self, port: u16) -> String {
        format!("http://127.0.0.1:{port}")
    }

    /// Every span received so far.
    fn spans(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .flat_map(|req| spans_of(&req))
            .collect()
    }

    /// Wait until `want` says the spans received are enough.
    fn wait_for(&self, what: &str, want: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans();
            if want(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "the collector did not receive {what}: {spans:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

fn spans_of(request: &Value) -> Vec<Value> {
    request["resourceSpans"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|rs| rs["scopeSpans"].as_array().cloned().unwrap_or_default())
        .flat_map(|ss| ss["spans"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

fn string_attr(span: &Value, key: &str) -> String {
    attr(span, key)
        .and_then(|v| v["stringValue"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The `invoke_agent` spans by their run.
fn runs(spans: &[Value]) -> BTreeMap<String, Value> {
    spans
        .iter()
        .filter(|s| {
            s["name"]
                .as_str()
                .unwrap_or("")
                .starts_with("invoke_agent ")
        })
        .map(|s| (string_attr(s, "agentledger.run"), s.clone()))
        .collect()
}

#[test]
fn a_chain_as_otlp_json_a_collector_takes() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    common::demo(&dir);
    let file = tmp.path().join("dev-0.json");
    let (rc, _, err) = common::cli(
        &dir,
        &[
            "trail",
            "dev-0",
            "--chain",
            "--otlp",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(rc, 0, "{err}");
    let text = std::fs::read_to_string(&file).unwrap();
    let request: Value = serde_json::from_str(&text).unwrap();
    let spans = spans_of(&request);
    let by_run = runs(&spans);
    assert_eq!(by_run.len(), 9, "an invoke_agent span per run");
    let trace = spans[0]["traceId"].as_str().unwrap().to_string();
    assert_eq!(trace.len(), 32);
    assert!(
        spans.iter().all(|s| s["traceId"] == trace.as_str()),
        "one trace"
    );
    for s in by_run.values() {
        assert_eq!(string_attr(s, "gen_ai.operation.name"), "invoke_agent");
        assert_eq!(string_attr(s, "gen_ai.conversation.id"), "dev-0");
        assert!(!string_attr(s, "gen_ai.agent.name").is_empty());
        assert!(string_attr(s, "gen_ai.agent.id").contains("@v"));
        // Parent: the run that opened it (its trigger), none for the root.
        let parent = s["parentSpanId"].as_str().unwrap_or("");
        if string_attr(s, "agentledger.run") == "dev-0" {
            assert!(parent.is_empty());
        } else {
            assert!(
                by_run.values().any(|p| p["spanId"] == parent),
                "{s}: parent is a run of the chain"
            );
        }
    }
    let last = by_run
        .values()
        .find(|s| attr(s, "agentledger.hop").and_then(|v| v["intValue"].as_str()) == Some("8"))
        .expect("the run at hop 8");
    let withheld = last["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "agentledger.events_withheld")
        .expect("the withheld event");
    assert!(withheld.to_string().contains("hop_limit"));

    // The incident chain: a read span, and the scope barrier's refusal.
    let (rc, inc, err) = common::cli(&dir, &["trail", "inc-1", "--chain", "--otlp", "-"]);
    assert_eq!(rc, 0, "{err}");
    let inc_spans = spans_of(&serde_json::from_str(&inc).unwrap());
    let read = inc_spans
        .iter()
        .find(|s| s["name"] == "execute_tool read_artifact")
        .expect("a read span");
    assert_eq!(string_attr(read, "gen_ai.operation.name"), "execute_tool");
    assert_eq!(string_attr(read, "gen_ai.tool.name"), "read_artifact");
    let reader = runs(&inc_spans)
        .into_values()
        .find(|s| s["spanId"] == read["parentSpanId"])
        .expect("the read's parent is its run's span");
    assert_eq!(string_attr(&reader, "gen_ai.agent.name"), "responder");
    assert!(inc.contains("agentledger.listener_refused") && inc.contains("scope_barrier"));

    // The same through a server, and a real collector takes the file.
    let srv = server::start(&dir, None, &[]);
    let r = server::http(&srv.url)
        .get(format!("{}/v1/runs/dev-0/trace", srv.url))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert!(
        r.text().unwrap() == text,
        "the server's trace is the file's"
    );
    drop(srv);
    let port = free_port();
    let collector = Collector::start(tmp.path(), port);
    let r = reqwest::blocking::Client::new()
        .post(format!("{}/v1/traces", collector.url(port)))
        .header("content-type", "application/json")
        .body(text)
        .send()
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().unwrap_or_default());
    let got = collector.wait_for("the file's spans", |s| s.len() == spans.len());
    assert_eq!(runs(&got).len(), 9);
}

#[test]
fn serve_exports_each_run_as_it_closes_even_to_a_collector_that_comes_late() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let endpoint = format!("http://127.0.0.1:{port}");
    // Nothing listens there yet: the ledger goes on regardless.
    let srv = server::start(&tmp.path().join("d"), None, &["--otlp-endpoint", &endpoint]);
    let url = srv.url.clone();
    for (agent, listens, emits, art) in [
        ("developer", "review.done", "code.ready", "patch"),
        ("reviewer", "code.ready", "review.done", "review"),
    ] {
        server::post_ok(
            &url,
            json!({"op":"publish_agent","agent":agent,"scope":"acme/platform","listens":[listens],
                   "emits":[{"event":emits,"context":"c","artifacts":[art]}]}),
        );
    }
    server::post_ok(
        &url,
        json!({"op":"open_run","run":"r0","agent":"developer"}),
    );
    let started = Instant::now();
    server::post_ok(
        &url,
        json!({"op":"close_run","run":"r0","status":"succeeded","artifacts":{"patch":"p"}}),
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a collector that is down does not hold up a close"
    );
    let r1 = server::wait_chain(&srv, "r0", 2, Duration::from_secs(20))[1].clone();
    server::post_ok(&url, json!({"op":"read_artifact","run":r1,"name":"patch"}));
    server::post_ok(
        &url,
        json!({"op":"close_run","run":r1,"status":"succeeded","artifacts":{"review":"r"}}),
    );
    let r2 = server::wait_chain(&srv, "r0", 3, Duration::from_secs(20))[2].clone();
    std::thread::sleep(Duration::from_millis(500));

    // The collector comes up: what waited is sent, then what closes next.
    let collector = Collector::start(tmp.path(), port);
    collector.wait_for("r0 and r1", |s| {
        let r = runs(s);
        r.contains_key("r0") && r.contains_key(&r1)
    });
    server::post_ok(
        &url,
        json!({"op":"close_run","run":r2,"status":"failed","artifacts":{}}),
    );
    let spans = collector.wait_for("r2", |s| runs(s).contains_key(&r2));
    let by_run = runs(&spans);
    assert_eq!(by_run.len(), 3, "each closed run once: {by_run:?}");
    let trace = by_run["r0"]["traceId"].clone();
    assert!(by_run.values().all(|s| s["traceId"] == trace));
    assert_eq!(by_run[&r1]["parentSpanId"], by_run["r0"]["spanId"]);
    assert_eq!(by_run[&r2]["parentSpanId"], by_run[&r1]["spanId"]);
    assert_eq!(by_run[&r2]["status"]["code"], json!(2), "failed: ERROR");
    let read = spans
        .iter()
        .find(|s| s["name"] == "execute_tool read_artifact")
        .expect("r1's read");
    assert_eq!(read["parentSpanId"], by_run[&r1]["spanId"]);
    // Counted for Prometheus.
    let metrics = server::http(&url)
        .get(format!("{url}/metrics"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        metrics.contains("agentledger_otlp_spans_total{outcome=\"exported\"} 4"),
        "{metrics}"
    );
    assert!(metrics
        .lines()
        .any(|l| l.starts_with("agentledger_otlp_export_failures_total ") && !l.ends_with(" 0")));
}

#[test]
fn a_collector_url_that_cannot_be_used_is_refused_before_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, _, err) = common::cli(
        &tmp.path().join("d"),
        &["serve", "--otlp-endpoint", "ftp://collector:4318"],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("ftp://collector:4318/v1/traces") && err.contains("not an http"),
        "{err}"
    );
    assert!(!err.contains("listening"), "{err}");
}

/// Each MCP request to a run's endpoint is a SERVER span exported live,
/// named `{mcp.method.name} {gen_ai.tool.name}` with the conventions'
/// attributes; a `traceparent` in the call's `_meta` makes the caller's
/// span its parent, and a refused call says `error.type = tool_error`.
#[test]
fn mcp_requests_are_server_spans_under_the_callers_trace() {
    let tmp = tempfile::tempdir().unwrap();
    let port = free_port();
    let collector = Collector::start(tmp.path(), port);
    let srv = server::start(
        &tmp.path().join("d"),
        None,
        &[
            "--otlp-endpoint",
            &collector.url(port),
            "--dispatch",
            "manual",
        ],
    );
    let url = srv.url.clone();
    server::post_ok(
        &url,
        json!({"op":"publish_agent","agent":"triager","scope":"acme/platform",
            "emits":[{"event":"incident.triaged","context":"c","artifacts":["triage_summary"]}]}),
    );
    server::post_ok(
        &url,
        json!({"op":"publish_agent","agent":"responder","scope":"acme/platform","listens":["incident.triaged"]}),
    );
    server::post_ok(
        &url,
        json!({"op":"open_run","run":"inc-1","agent":"triager"}),
    );
    server::post_ok(
        &url,
        json!({"op":"close_run","run":"inc-1","status":"succeeded","artifacts":{"triage_summary":"t"}}),
    );
    let d = server::post_ok(&url, json!({"op":"dispatch"}));
    let run = d["opened"][0]["run"].as_str().unwrap().to_string();
    let token = server::issue(&url, "agent:responder", &[]);
    let endpoint = format!("{url}/v1/runs/{run}/mcp");
    let client = reqwest::blocking::Client::new();
    let mut session: Option<String> = None;
    let mut post = |body: Value| {
        let mut r = client
            .post(&endpoint)
            .bearer_auth(&token)
            .header("accept", "application/json, text/event-stream")
            .header("content-type", "application/json")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(s) = &session {
            r = r.header("mcp-session-id", s);
        }
        let r = r.body(body.to_string()).send().unwrap();
        assert!(r.status().is_success(), "{body}: {}", r.status());
        if let Some(s) = r.headers().get("mcp-session-id") {
            session = Some(s.to_str().unwrap().to_string());
        }
        // Read whole: a span ends when its answer has been sent.
        r.text().unwrap()
    };
    post(
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{
        "protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}),
    );
    post(json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    post(
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{
        "name":"read_artifact","arguments":{"name":"triage_summary"},"_meta":{"traceparent":parent}}}),
    );
    post(
        json!({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{
        "name":"read_artifact","arguments":{"name":"root_cause"}}}),
    );

    let calls = |s: &[Value]| -> Vec<Value> {
        s.iter()
            .filter(|s| s["name"] == "tools/call read_artifact")
            .cloned()
            .collect()
    };
    let spans = collector.wait_for("the two calls", |s| calls(s).len() == 2);
    let calls = calls(&spans);
    let by_id = |id: &str| {
        calls
            .iter()
            .find(|s| string_attr(s, "jsonrpc.request.id") == id)
            .unwrap_or_else(|| panic!("call {id}: {calls:?}"))
    };
    let read = by_id("2");
    assert_eq!(read["kind"], json!(2), "SERVER: {read}");
    assert_eq!(
        read["traceId"], "0af7651916cd43dd8448eb211c80319c",
        "{read}"
    );
    assert_eq!(read["parentSpanId"], "b7ad6b7169203331", "{read}");
    for (key, want) in [
        ("mcp.method.name", "tools/call"),
        ("gen_ai.tool.name", "read_artifact"),
        ("gen_ai.operation.name", "execute_tool"),
        ("mcp.protocol.version", "2025-11-25"),
        ("agentledger.run", run.as_str()),
    ] {
        assert_eq!(string_attr(read, key), want, "{key}: {read}");
    }
    assert_eq!(
        string_attr(read, "mcp.session.id"),
        session.clone().unwrap()
    );
    assert_eq!(string_attr(read, "error.type"), "", "{read}");
    let refused = by_id("3");
    assert_eq!(
        string_attr(refused, "error.type"),
        "tool_error",
        "{refused}"
    );
    assert_ne!(
        refused["traceId"], read["traceId"],
        "no traceparent: the chain's trace"
    );
    assert!(
        spans.iter().any(|s| s["name"] == "initialize"),
        "every request is a span"
    );

    // The chain's own spans of the same two reads link to those live spans
    // (built from the records, which name the span of the call that made
    // them), and the trail says each record's traceparent.
    let get = |path: &str| -> Value {
        server::http(&url)
            .get(format!("{url}{path}"))
            .send()
            .unwrap()
            .json()
            .unwrap()
    };
    let trace = get(&format!("/v1/runs/{run}/trace?chain=false"));
    let tools: Vec<Value> = spans_of(&trace)
        .into_iter()
        .filter(|s| s["name"] == "execute_tool read_artifact")
        .collect();
    assert_eq!(tools.len(), 2, "{trace}");
    for (tool, live) in tools.iter().zip([read, refused]) {
        let links = tool["links"].as_array().unwrap_or_else(|| panic!("{tool}"));
        assert_eq!(links.len(), 1, "{tool}");
        assert_eq!(links[0]["traceId"], live["traceId"], "{tool}");
        assert_eq!(links[0]["spanId"], live["spanId"], "{tool}");
        assert_ne!(tool["spanId"], live["spanId"], "two spans, one call");
    }
    // One JSON line per step.
    let trail = server::http(&url)
        .get(format!("{url}/v1/runs/{run}/trail?format=json"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    let parents: Vec<String> = trail
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|s| s["traceparent"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        parents,
        [read, refused].map(|live| format!(
            "00-{}-{}-01",
            live["traceId"].as_str().unwrap(),
            live["spanId"].as_str().unwrap()
        )),
        "{trail}"
    );
}
