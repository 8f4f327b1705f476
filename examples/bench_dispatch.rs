//! How long the next agent waits: from a run's close being answered to its
//! listener's run being open (visible through the server), with `serve
//! --listen` on the embedded log and, given a Kafka bootstrap, on Kafka —
//! there both with the close sent through the server (dispatched by the
//! same process) and written by another writer (another engine on the
//! same topics: the server learns of it from the log's tail). Prints the
//! distribution (p50, p90, p99, max) of SAMPLES closes per case, with the
//! serve loop's poll at its default 200 ms: what a poll would cost is
//! what the numbers do not show. Run through `tools/bench-dispatch`.
//!
//! Usage: bench_dispatch [SAMPLES=200] [KAFKA_BOOTSTRAP]

use agentledger::engine::{Engine, EngineOptions};
use agentledger::log::kafka::KafkaConfig;
use agentledger::server::HttpOptions;

#[allow(dead_code)]
mod support;
use serde_json::{json, Value};
use std::path::Path;
use std::time::{Duration, Instant};
use support::{Open, Served};

/// A served ledger and a client holding its operator's token.
struct Running {
    served: Option<Served>,
    url: String,
    http: reqwest::blocking::Client,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(s) = self.served.take() {
            s.stop();
        }
    }
}

impl Running {
    fn start(data: &Path, open: Open) -> Running {
        let served = Served::start(data, open, HttpOptions::default());
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            "authorization",
            format!("Bearer {}", served.session).parse().unwrap(),
        );
        let http = reqwest::blocking::Client::builder()
            .default_headers(headers)
            .build()
            .unwrap();
        Running {
            url: served.url.clone(),
            served: Some(served),
            http,
        }
    }

    fn op(&self, v: Value) -> Value {
        let a: Value = self
            .http
            .post(format!("{}/v1/ops", self.url))
            .header("content-type", "application/json")
            .body(v.to_string())
            .send()
            .unwrap()
            .json()
            .unwrap();
        assert_eq!(a["ok"], json!(true), "{v} -> {a}");
        a
    }

    fn chain_len(&self, run: &str) -> usize {
        let v: Value = self
            .http
            .get(format!("{}/v1/runs/{run}/chain", self.url))
            .send()
            .unwrap()
            .json()
            .unwrap();
        v["runs"].as_array().map_or(0, |r| r.len())
    }

    /// Wait until `run`'s listener is open; the instant it was seen.
    fn await_listener(&self, run: &str) -> Instant {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if self.chain_len(run) >= 2 {
                return Instant::now();
            }
            assert!(Instant::now() < deadline, "no listener opened for {run}");
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

fn agents() -> [Value; 2] {
    [
        json!({"op":"publish_agent","agent":"producer","scope":"acme/platform",
               "emits":[{"event":"work.done","context":"c","artifacts":[]}]}),
        json!({"op":"publish_agent","agent":"consumer","scope":"acme/platform",
               "listens":["work.done"],"emits":[]}),
    ]
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn report(case: &str, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    println!(
        "{case:<52} n={:<4} p50 {:>7.2} ms  p90 {:>7.2} ms  p99 {:>7.2} ms  max {:>7.2} ms",
        ms.len(),
        percentile(&ms, 0.5),
        percentile(&ms, 0.9),
        percentile(&ms, 0.99),
        ms.last().unwrap()
    );
}

/// Closes sent through the server: close answered → listener open.
fn through_server(s: &Running, samples: usize, tag: &str) -> Vec<f64> {
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        let run = format!("{tag}-{i}");
        s.op(json!({"op":"open_run","run":run,"agent":"producer"}));
        s.op(json!({"op":"close_run","run":run,"status":"succeeded","artifacts":{}}));
        let closed = Instant::now();
        let opened = s.await_listener(&run);
        out.push((opened - closed).as_secs_f64() * 1e3);
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let samples: usize = args.first().map_or(200, |s| s.parse().expect("SAMPLES"));
    let kafka = args.get(1).cloned();
    let tmp = tempfile::tempdir().unwrap();

    println!("close answered → listener's run open, seen through the server (serve --poll-ms 200)");
    {
        let data = tmp.path().join("embedded");
        let d = data.clone();
        let s = Running::start(
            &data,
            Box::new(move || Engine::open_embedded(&d, EngineOptions::default())),
        );
        for a in agents() {
            s.op(a);
        }
        through_server(&s, 10, "warm");
        report(
            "embedded log, close through serve",
            through_server(&s, samples, "e"),
        );
    }
    if let Some(bootstrap) = kafka {
        let config = KafkaConfig {
            topic_prefix: format!("bench-dispatch-{}-", std::process::id()),
            ..KafkaConfig::new(bootstrap)
        };
        let data = tmp.path().join("kafka");
        let (d, c) = (data.clone(), config.clone());
        let s = Running::start(
            &data,
            Box::new(move || Engine::open_kafka(&d, &c, EngineOptions::default())),
        );
        for a in agents() {
            s.op(a);
        }
        through_server(&s, 10, "kwarm");
        report(
            "Kafka (1 node), close through serve",
            through_server(&s, samples, "k"),
        );
        // Another writer closes: the server hears of it from the tail.
        let mut other =
            Engine::open_kafka(tmp.path().join("other"), &config, EngineOptions::default())
                .expect("a second engine on the same topics");
        let mut out = Vec::with_capacity(samples);
        for i in 0..samples + 10 {
            let run = format!("o-{i}");
            let apply = |e: &mut Engine, v: Value| {
                let a = agentledger::apply::apply_value(e, &v).unwrap();
                assert_eq!(a["ok"], json!(true), "{v} -> {a}");
            };
            apply(
                &mut other,
                json!({"op":"open_run","run":run,"agent":"producer"}),
            );
            apply(
                &mut other,
                json!({"op":"close_run","run":run,"status":"succeeded","artifacts":{}}),
            );
            let closed = Instant::now();
            let opened = s.await_listener(&run);
            if i >= 10 {
                out.push((opened - closed).as_secs_f64() * 1e3);
            }
        }
        report("Kafka (1 node), close by another writer", out);
    }
}
