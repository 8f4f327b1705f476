//! Throughput and latency of `serve --listen` on the embedded log, beside
//! the same-run baseline: a raw loop of 400-byte appends, each followed by
//! fdatasync, on the same disk (what one durable operation at a time can
//! do at best). 1, 8 and 64 concurrent HTTP clients each open and close
//! runs (`open_run` then `close_run`, two operations) for SECONDS; prints
//! operations/s, p50/p99 latency and the ratio to the raw rate. Each load
//! runs three times: with the server's session token over HTTP (the
//! operator: no lookup, no policy), with an issued platform token over
//! HTTP, and with it over HTTPS: the cost of authentication and of TLS.
//! Given a broker, the same loads run against `serve` on Kafka too, beside
//! that run's baseline: raw rdkafka pipelined (idempotent, acks=all, every
//! 400-byte record in flight at once, then flushed).
//! First, the headline: `serve --listen` as the binary runs it (this
//! build's, and an older build's when `BENCH_SERVE_OLD_BIN` names one)
//! beside the baseline of `support/baseline.rs` — the same HTTP stack,
//! bodies, parsing, record encoding and group commit, without the ledger's
//! own work — at 1, 8 and 64 clients, each ratio measured in the same run.
//! Run through `tools/bench-serve [SECONDS=5]` (it starts a 1-node broker).

#[path = "../tests/common/tls.rs"]
#[allow(dead_code)]
mod tls;

use agentledger::engine::{Engine, EngineOptions};
use agentledger::server::{self, HttpOptions};

#[path = "support/baseline.rs"]
mod baseline;
#[allow(dead_code)]
mod support;
use serde_json::json;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::Served;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Raw appends of 400-byte records, each made durable with fdatasync.
fn raw_sync_rate(dir: &std::path::Path, secs: f64) -> f64 {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("raw.bin"))
        .unwrap();
    let record = [7u8; 400];
    let t = Instant::now();
    let mut n = 0u64;
    while t.elapsed().as_secs_f64() < secs {
        f.write_all(&record).unwrap();
        f.sync_data().unwrap();
        n += 1;
    }
    n as f64 / t.elapsed().as_secs_f64()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// `clients` threads opening and closing runs for `secs`: (ops/s, latencies ms).
fn load(
    url: &str,
    http: &reqwest::blocking::Client,
    clients: usize,
    secs: f64,
    tag: &str,
) -> (f64, Vec<f64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let workers: Vec<_> = (0..clients)
        .map(|c| {
            let url = url.to_string();
            let stop = stop.clone();
            let tag = tag.to_string();
            let http = http.clone();
            std::thread::spawn(move || {
                let mut lat = Vec::new();
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let run = format!("{tag}-{c}-{i}");
                    i += 1;
                    for op in [
                        json!({"op":"open_run","run":run,"agent":"developer"}),
                        json!({"op":"close_run","run":run,"status":"succeeded","artifacts":{"patch":"diff"}}),
                    ] {
                        let t = Instant::now();
                        let r = http
                            .post(format!("{url}/v1/ops"))
                            .body(op.to_string())
                            .send()
                            .unwrap();
                        assert!(r.status().is_success(), "{op}: {:?}", r.text());
                        lat.push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                }
                lat
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let mut lat: Vec<f64> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    let rate = lat.len() as f64 / started.elapsed().as_secs_f64();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (rate, lat)
}

/// A client that shows `token` on every request and trusts `ca`.
fn client(token: &str, ca: Option<&[u8]>) -> reqwest::blocking::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert("authorization", format!("Bearer {token}").parse().unwrap());
    let mut b = reqwest::blocking::Client::builder().default_headers(headers);
    if let Some(pem) = ca {
        b = b.add_root_certificate(reqwest::Certificate::from_pem(pem).unwrap());
    }
    b.build().unwrap()
}

/// A certificate authority (PEM) and a certificate for 127.0.0.1 it
/// signed, written into `dir`.
fn certificate(dir: &std::path::Path) -> (Vec<u8>, server::TlsFiles) {
    let ca = tls::TestCa::new();
    let (cert, key) = ca.server(dir, "bench");
    let files = server::TlsFiles {
        cert,
        key,
        client_ca: None,
    };
    (ca.pem().into_bytes(), files)
}

/// Raw rdkafka pipelined: `n` 400-byte records sent at once (idempotent,
/// acks=all, as the ledger's producer), then flushed; records/s.
fn raw_kafka_pipelined(brokers: &str, topic_prefix: &str, n: usize) -> f64 {
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    // A ledger topic laid out as the server's (partitions, replication)
    // but of its own: raw bytes in the server's would not decode.
    let log = agentledger::log::kafka::KafkaLog::connect(&kafka_config(
        brokers,
        &format!("{topic_prefix}raw."),
    ))
    .expect("connect to Kafka");
    let topic = log
        .topic_name(agentledger::model::Topic::Ledger)
        .to_string();
    let producer: ThreadedProducer<rdkafka::producer::DefaultProducerContext> =
        rdkafka::config::ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "0")
            .create()
            .unwrap();
    let payload = [7u8; 400];
    let t = Instant::now();
    for i in 0..n {
        let key = format!("raw-{i}");
        support::send_queued(
            &producer,
            BaseRecord::to(&topic)
                .key(key.as_bytes())
                .payload(&payload[..]),
        );
    }
    producer
        .flush(rdkafka::util::Timeout::After(Duration::from_secs(120)))
        .unwrap();
    n as f64 / t.elapsed().as_secs_f64()
}

fn kafka_config(brokers: &str, topic_prefix: &str) -> agentledger::log::kafka::KafkaConfig {
    agentledger::log::kafka::KafkaConfig {
        topic_prefix: topic_prefix.to_string(),
        ..agentledger::log::kafka::KafkaConfig::new(brokers)
    }
}

/// The same loads through `serve` on Kafka, beside raw rdkafka pipelined.
/// `embedded`: session/HTTP ops/s on the embedded log at 1, 8 and 64
/// clients measured earlier in this run, if it was (the ratio the issue
/// asks of Kafka: at least 0.5 at 64 clients, the broker on the same cores).
fn kafka_leg(dir: &std::path::Path, brokers: &str, secs: f64, embedded: &[f64]) {
    let prefix = format!("bench-serve-{}.", std::process::id());
    let open_dir = dir.join("data-kafka");
    let config = kafka_config(brokers, &prefix);
    let served = Served::start(
        &open_dir.clone(),
        Box::new(move || {
            Engine::open_kafka(
                &open_dir,
                &config,
                EngineOptions {
                    max_staleness: Duration::from_millis(100),
                    ..EngineOptions::default()
                },
            )
        }),
        HttpOptions::default(),
    );
    let http = client(&served.session, None);
    let resp = http
        .post(format!("{}/v1/ops", served.url))
        .body(developer().to_string())
        .send()
        .unwrap();
    assert!(resp.status().is_success());
    let raw = raw_kafka_pipelined(brokers, &prefix, 100_000);
    println!("Kafka at {brokers}: raw rdkafka pipelined (400 B, acks=all): {raw:.0} records/s");
    println!(
        "{:>8} {:>16} {:>10} {:>9} {:>9} {:>14} {:>12}",
        "clients", "caller", "ops/s", "p50 ms", "p99 ms", "ratio to raw", "vs embedded"
    );
    for (i, clients) in [1usize, 8, 64].into_iter().enumerate() {
        let (rate, lat) = load(
            &served.url,
            &http,
            clients,
            secs,
            &format!("kafka{clients}"),
        );
        let vs = embedded
            .get(i)
            .map_or(String::new(), |e| format!("{:.2}", rate / e));
        println!(
            "{clients:>8} {:>16} {rate:>10.0} {:>9.2} {:>9.2} {:>14.2} {vs:>12}",
            "session/http",
            percentile(&lat, 0.5),
            percentile(&lat, 0.99),
            rate / raw
        );
    }
    let url = served.url.clone();
    let ops = served.stop().ops;
    println!("server on Kafka at {url} answered {ops} operations");
}

/// `serve --listen 127.0.0.1:0` of binary `bin` on data dir `data`, as
/// an operator starts it: killed when dropped.
struct Spawned {
    child: std::process::Child,
    url: String,
    token: String,
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// Reaped by `Spawned`'s drop.
#[allow(clippy::zombie_processes)]
fn spawn_serve(bin: &std::path::Path, data: &std::path::Path) -> Spawned {
    std::fs::create_dir_all(data).unwrap();
    let err = data.with_extension("err");
    let mut child = std::process::Command::new(bin)
        .arg("--data")
        .arg(data)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e}", bin.display()));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(&err).unwrap_or_default();
        if let Some(url) = text
            .lines()
            .find_map(|l| l.strip_prefix("agentledger: listening on "))
        {
            let token = std::fs::read_to_string(data.join("serve.token")).unwrap();
            return Spawned {
                child,
                url: url.trim().to_string(),
                token: token.trim().to_string(),
            };
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} did not listen: {text}", bin.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The headline: the binaries beside the baseline that does the same work
/// minus the ledger's, at 1, 8 and 64 clients, in this run.
fn binaries_leg(dir: &std::path::Path, secs: f64) {
    let new_bin = std::env::var("BENCH_SERVE_NEW_BIN")
        .unwrap_or_else(|_| "target/release/agentledger".into());
    let base = baseline::start(&dir.join("baseline"));
    let mut servers: Vec<(String, String, String, Option<Spawned>)> = vec![(
        "baseline".into(),
        base.url.clone(),
        base.token.clone(),
        None,
    )];
    let mut binaries = vec![("serve (this build)".to_string(), new_bin)];
    if let Ok(old) = std::env::var("BENCH_SERVE_OLD_BIN") {
        let rev = std::env::var("BENCH_SERVE_OLD_REV").unwrap_or_else(|_| "old".into());
        binaries.push((format!("serve ({rev})"), old));
    }
    for (i, (label, bin)) in binaries.into_iter().enumerate() {
        let s = spawn_serve(std::path::Path::new(&bin), &dir.join(format!("bin-{i}")));
        let ok = client(&s.token, None)
            .post(format!("{}/v1/ops", s.url))
            .body(developer().to_string())
            .send()
            .unwrap();
        assert!(ok.status().is_success());
        servers.push((label, s.url.clone(), s.token.clone(), Some(s)));
    }
    println!(
        "{:>8} {:>24} {:>10} {:>9} {:>9} {:>12}",
        "clients", "server", "ops/s", "p50 ms", "p99 ms", "vs baseline"
    );
    for clients in [1usize, 8, 64] {
        let mut base_rate = f64::NAN;
        for (i, (label, url, token, _)) in servers.iter().enumerate() {
            let http = client(token, None);
            let (rate, lat) = load(url, &http, clients, secs, &format!("b{i}-{clients}"));
            if i == 0 {
                base_rate = rate;
            }
            println!(
                "{clients:>8} {label:>24} {rate:>10.0} {:>9.2} {:>9.2} {:>12.2}",
                percentile(&lat, 0.5),
                percentile(&lat, 0.99),
                rate / base_rate
            );
        }
    }
}

/// A server on its own data dir, on its own thread.
fn start(data: &std::path::Path, tls: Option<server::TlsFiles>) -> Served {
    let open_dir = data.to_path_buf();
    Served::start(
        data,
        Box::new(move || Engine::open_embedded(&open_dir, EngineOptions::default())),
        HttpOptions {
            tls,
            ..HttpOptions::default()
        },
    )
}

/// The agent every leg's runs are of.
fn developer() -> serde_json::Value {
    json!({"op":"publish_agent","agent":"developer","scope":"acme/platform",
        "emits":[{"event":"code.ready","context":"change","artifacts":["patch"]}]})
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    // Load alone, against a server running elsewhere (`tools/profile-serve`).
    if let Ok(url) = std::env::var("BENCH_SERVE_LOAD_URL") {
        let token = std::env::var("BENCH_SERVE_LOAD_TOKEN").expect("BENCH_SERVE_LOAD_TOKEN");
        let clients = std::env::var("BENCH_SERVE_LOAD_CLIENTS")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(64);
        let http = client(&token, None);
        // Already there after a first load: answered, not refused.
        let _ = http
            .post(format!("{url}/v1/ops"))
            .body(developer().to_string())
            .send();
        let tag = format!("load-{}", std::process::id());
        let (rate, lat) = load(&url, &http, clients, secs, &tag);
        println!(
            "{clients} clients: {rate:.0} ops/s, p50 {:.2} ms, p99 {:.2} ms",
            percentile(&lat, 0.5),
            percentile(&lat, 0.99)
        );
        return;
    }
    let dir = tempfile_dir();
    // BENCH_SERVE_EMBEDDED=0: the Kafka leg alone.
    if std::env::var("BENCH_SERVE_EMBEDDED").as_deref() == Ok("0") {
        if let Some(brokers) = std::env::args().nth(2) {
            kafka_leg(&dir, &brokers, secs, &[]);
        }
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    binaries_leg(&dir, secs);
    let raw = raw_sync_rate(&dir, secs);
    println!("raw append+fdatasync (400 B): {raw:.0} records/s");

    // The same ledger twice: over plain HTTP, and over HTTPS (rustls) with
    // a certificate made here.
    let plain = start(&dir.join("data"), None);
    let (ca_pem, tls) = certificate(&dir);
    let https = start(&dir.join("data-tls"), Some(tls));
    let platform = agentledger::auth::tokens::generate().unwrap();
    for r in [&plain, &https] {
        let http = client(&r.session, Some(&ca_pem));
        let ok = |op: serde_json::Value| {
            let resp = http
                .post(format!("{}/v1/ops", r.url))
                .body(op.to_string())
                .send()
                .unwrap();
            assert!(resp.status().is_success());
        };
        ok(developer());
        // A platform's token, issued as `token issue` does: each request
        // is looked up in the views and put through the policy.
        ok(
            json!({"op":"issue_token","principal":"platform:acme","scopes":["acme"],
            "sha256": hex::encode(agentledger::auth::tokens::hash(&platform))}),
        );
    }
    println!(
        "{:>8} {:>16} {:>10} {:>9} {:>9} {:>14} {:>12}",
        "clients", "caller", "ops/s", "p50 ms", "p99 ms", "ratio to raw", "vs session"
    );
    let mut embedded = Vec::new();
    for clients in [1usize, 8, 64] {
        let mut session_rate = f64::NAN;
        let runs = [
            ("session/http", &plain, plain.session.clone()),
            ("platform/http", &plain, platform.clone()),
            ("platform/https", &https, platform.clone()),
        ];
        for (caller, server, token) in runs {
            let tag = format!("{}{clients}", caller.replace('/', "-"));
            let http = client(&token, Some(&ca_pem));
            let (rate, lat) = load(&server.url, &http, clients, secs, &tag);
            let vs = if caller == "session/http" {
                session_rate = rate;
                embedded.push(rate);
                String::new()
            } else {
                format!("{:.2}", rate / session_rate)
            };
            println!(
                "{clients:>8} {caller:>16} {rate:>10.0} {:>9.2} {:>9.2} {:>14.2} {vs:>12}",
                percentile(&lat, 0.5),
                percentile(&lat, 0.99),
                rate / raw
            );
        }
    }
    for r in [plain, https] {
        let url = r.url.clone();
        let ops = r.stop().ops;
        println!("server at {url} answered {ops} operations");
    }
    if let Some(brokers) = std::env::args().nth(2) {
        kafka_leg(&dir, &brokers, secs, &embedded);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A scratch directory beside the build (same disk as the data dir).
fn tempfile_dir() -> std::path::PathBuf {
    let d = std::env::current_dir()
        .unwrap()
        .join("target")
        .join(format!("bench-serve-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}
