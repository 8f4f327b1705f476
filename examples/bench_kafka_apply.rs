//! `apply` of a file of operations on Kafka against a raw rdkafka producer
//! sending the very records that `apply` wrote: read back from the topics
//! after each rep (same count, keys, payloads and partitions), to topics
//! created as the engine creates its own, idempotent with acks=all, and
//! pipelined the same way — a commit group's records all in flight, then
//! every acknowledgement awaited before the next group's. What the ratio
//! judges is the engine's work: parsing, deciding, encoding, projecting.
//!
//! Run through `tools/bench-kafka` (`BENCH_KAFKA_APPLY_OPS`, default
//! 100,000 operations: open and close of half as many runs).

use agentledger::apply::{apply_stream, MAX_GROUP_LINES, MAX_LINE_BYTES};
use agentledger::engine::{Engine, EngineOptions};
use agentledger::log::kafka::{KafkaConfig, KafkaLog};
use agentledger::log::Log;
use agentledger::model::Topic;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, ThreadedProducer};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[allow(dead_code)]
mod support;
use support::{median, send_queued};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Delivery reports, each sent to the benchmark as ok or not.
struct Ctx(mpsc::Sender<bool>);
impl rdkafka::ClientContext for Ctx {}
impl rdkafka::producer::ProducerContext for Ctx {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        let _ = self.0.send(r.is_ok());
    }
}

/// One record as `apply` left it: topic, partition, key, payload.
type Written = (Topic, u32, Vec<u8>, Vec<u8>);

/// Every record of every topic past `from` (end offsets per topic).
fn records_since(log: &dyn Log, from: &[Vec<u64>]) -> Vec<Written> {
    let mut out = Vec::new();
    for (t, topic) in Topic::ALL.into_iter().enumerate() {
        for p in 0..log.partitions(topic) {
            let mut at = from[t].get(p as usize).copied().unwrap_or(0);
            loop {
                let recs = log.read(topic, p, at, 4096).unwrap();
                let Some(last) = recs.last().map(|r| r.offset) else {
                    break;
                };
                out.extend(recs.into_iter().map(|r| (topic, p, r.key, r.payload)));
                at = last + 1;
            }
        }
    }
    out
}

fn ends(log: &dyn Log) -> Vec<Vec<u64>> {
    log.end_offsets_of(&Topic::ALL).unwrap()
}

/// The operations file: open and close of `ops / 2` runs, in that order
/// per run, runs interleaved as a platform's would be.
fn operations(rep: usize, ops: usize) -> Vec<u8> {
    let runs = ops / 2;
    let mut file = Vec::new();
    for i in 0..runs {
        let open = serde_json::json!({"op":"open_run","run":format!("r{rep}-{i}"),"agent":"a"});
        file.extend_from_slice(open.to_string().as_bytes());
        file.push(b'\n');
        if i >= 8 {
            let close = serde_json::json!({"op":"close_run","run":format!("r{rep}-{}", i - 8),"status":"succeeded"});
            file.extend_from_slice(close.to_string().as_bytes());
            file.push(b'\n');
        }
    }
    for i in runs.saturating_sub(8)..runs {
        let close =
            serde_json::json!({"op":"close_run","run":format!("r{rep}-{i}"),"status":"succeeded"});
        file.extend_from_slice(close.to_string().as_bytes());
        file.push(b'\n');
    }
    file
}

/// `apply` the file on a fresh ledger; the seconds it took and the
/// records it wrote.
fn apply_rep(
    brokers: &str,
    prefix: &str,
    file: &[u8],
    dir: &std::path::Path,
) -> (f64, Vec<Written>) {
    let cfg = KafkaConfig {
        topic_prefix: prefix.to_string(),
        ..KafkaConfig::new(brokers.to_string())
    };
    let opts = EngineOptions {
        max_staleness: Duration::from_millis(100),
        ..EngineOptions::default()
    };
    let mut engine = Engine::open_kafka(dir, &cfg, opts).unwrap();
    let publish = br#"{"op":"publish_agent","agent":"a","scope":"acme/x"}
"#;
    apply_stream(
        &mut engine,
        &mut &publish[..],
        &mut std::io::sink(),
        MAX_LINE_BYTES,
    )
    .unwrap();
    let before = ends(engine.log().as_ref());
    let t = Instant::now();
    let mut input = file;
    let summary = apply_stream(
        &mut engine,
        &mut input,
        &mut std::io::sink(),
        MAX_LINE_BYTES,
    )
    .unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert!(!summary.failed && summary.refused == 0, "{summary:?}");
    let written = records_since(engine.log().as_ref(), &before);
    (secs, written)
}

/// Send `written` to topics of `prefix` (created as the engine creates its
/// own) at the same partitions, `groups` chunks each fully in flight
/// before its acknowledgements are awaited; the seconds it took.
fn raw_rep(brokers: &str, prefix: &str, written: &[Written], groups: usize) -> f64 {
    let raw_log = KafkaLog::connect(&KafkaConfig {
        topic_prefix: prefix.to_string(),
        ..KafkaConfig::new(brokers.to_string())
    })
    .unwrap();
    let (tx, acks) = mpsc::channel();
    let producer: ThreadedProducer<Ctx> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "0")
        .create_with_context(Ctx(tx))
        .unwrap();
    // Warm the connection outside the timing, as the engine's was.
    let warm = raw_log.topic_name(Topic::Registry).to_string();
    send_queued(
        &producer,
        BaseRecord::to(&warm).key(&b"warm"[..]).payload(&b"up"[..]),
    );
    assert!(acks.recv_timeout(Duration::from_secs(30)).unwrap());
    let chunk = written.len().div_ceil(groups.max(1)).max(1);
    let t = Instant::now();
    for group in written.chunks(chunk) {
        for (topic, p, key, payload) in group {
            let name = raw_log.topic_name(*topic);
            let rec = BaseRecord::to(name)
                .partition(*p as i32)
                .key(&key[..])
                .payload(&payload[..]);
            send_queued(&producer, rec);
        }
        for _ in 0..group.len() {
            assert!(
                acks.recv_timeout(Duration::from_secs(60)).unwrap(),
                "not acknowledged"
            );
        }
    }
    t.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let brokers = args
        .get(1)
        .expect("usage: bench_kafka_apply BROKERS [OPS] [REPS]")
        .clone();
    let ops: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let reps: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(3).max(1);
    let stamp = std::process::id();
    let dir = tempfile::tempdir().unwrap();
    println!("apply of {ops} operations on Kafka vs a raw producer sending the same records:");
    println!(
        "{:>4} {:>12} {:>10} {:>14} {:>14} {:>12}",
        "rep", "apply ops/s", "records", "apply rec/s", "raw rec/s", "apply ÷ raw"
    );
    let mut ratios = Vec::new();
    // Rep 0 warms up a freshly started broker (not counted).
    for rep in 0..=reps {
        let n = if rep == 0 { ops.min(4000) } else { ops };
        let file = operations(rep, n);
        let groups = n.div_ceil(MAX_GROUP_LINES);
        let (apply_secs, written) = apply_rep(
            &brokers,
            &format!("bench{stamp}a{rep}."),
            &file,
            &dir.path().join(format!("engine-{rep}")),
        );
        let raw_secs = raw_rep(&brokers, &format!("bench{stamp}r{rep}."), &written, groups);
        let ratio = raw_secs / apply_secs;
        println!(
            "{:>4} {:>12.0} {:>10} {:>14.0} {:>14.0} {:>12.2}{}",
            rep,
            n as f64 / apply_secs,
            written.len(),
            written.len() as f64 / apply_secs,
            written.len() as f64 / raw_secs,
            ratio,
            if rep == 0 { "  (warm-up)" } else { "" }
        );
        if rep > 0 {
            ratios.push(ratio);
        }
    }
    println!(
        "apply ÷ raw producer, median of {reps}: {:.2} (goal ≥ 0.5)",
        median(ratios)
    );
}
