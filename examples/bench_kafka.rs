//! Kafka ingest and projection, measured in one run against one broker:
//! - ingest through the engine (`open_run` operations via `apply`, each
//!   acknowledged by the broker before it is answered) versus a raw rdkafka
//!   producer sending the same record bytes with the same guarantees
//!   (idempotent, acks=all, each send awaited before the next; rdkafka's
//!   `ThreadedProducer`, its delivery reports served by its polling thread);
//! - the engine's own log layer alone (`KafkaLog::append` of the same bytes,
//!   one record per call), to tell the engine's work from the log's;
//! - the raw producer pipelined (all sends in flight, then flush), for scale;
//! - projector throughput: rebuilding views from the Kafka topics.
//!
//! Run through `tools/bench-kafka [OPS] [REBUILD_EVENTS]`.

use agentledger::apply::apply_value;
use agentledger::engine::{Engine, EngineOptions};
use agentledger::log::kafka::KafkaConfig;
use agentledger::log::kafka::KafkaLog;
use agentledger::log::Log;
use agentledger::model::Topic;
use agentledger::projector::project_all;

// Only the median is used here.
#[allow(dead_code)]
mod support;
use agentledger::engine::synthetic::write_synthetic_log;
use agentledger::views::Views;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::util::Timeout;
use serde_json::json;
use std::sync::mpsc;
use std::time::{Duration, Instant};
use support::median;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

struct Ctx(std::sync::Mutex<Option<mpsc::Sender<bool>>>);
impl rdkafka::ClientContext for Ctx {}
impl rdkafka::producer::ProducerContext for Ctx {
    type DeliveryOpaque = ();
    fn delivery(&self, r: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        if let Some(tx) = self.0.lock().unwrap().as_ref() {
            let _ = tx.send(r.is_ok());
        }
    }
}

fn raw_producer(brokers: &str, tx: mpsc::Sender<bool>) -> ThreadedProducer<Ctx> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "0")
        .set("partitioner", "murmur2_random")
        .create_with_context(Ctx(std::sync::Mutex::new(Some(tx))))
        .unwrap()
}

/// Operations per turn of engine and raw producer within a rep.
const BLOCK: usize = 100;

/// As the CLI runs on Kafka: views may be up to 100 ms old when an
/// operation is decided (`--max-staleness-ms`, its default).
fn options() -> EngineOptions {
    EngineOptions {
        max_staleness: Duration::from_millis(100),
        ..EngineOptions::default()
    }
}

/// Every record of the ledger topic from `from` (per partition) on, and
/// where each partition ends now.
/// (key, payload) of each record.
type Records = Vec<(Vec<u8>, Vec<u8>)>;

fn ledger_records(log: &dyn Log, from: &[u64]) -> (Records, Vec<u64>) {
    let mut records = Vec::new();
    let mut ends = Vec::new();
    for p in 0..log.partitions(Topic::Ledger) {
        let mut at = from.get(p as usize).copied().unwrap_or(0);
        loop {
            let recs = log.read(Topic::Ledger, p, at, 4096).unwrap();
            let Some(last) = recs.last().map(|r| r.offset) else {
                break;
            };
            records.extend(recs.into_iter().map(|r| (r.key, r.payload)));
            at = last + 1;
        }
        ends.push(at);
    }
    (records, ends)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let brokers = args
        .get(1)
        .expect("usage: bench_kafka BROKERS [OPS] [REBUILD_EVENTS] [REPS]")
        .clone();
    let ops: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3000);
    let rebuild_events: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(200_000);
    let reps: usize = args.get(4).and_then(|s| s.parse().ok()).unwrap_or(5).max(1);
    let stamp = std::process::id();
    let dir = tempfile::tempdir().unwrap();
    let cfg = KafkaConfig {
        topic_prefix: format!("bench{stamp}."),
        ..KafkaConfig::new(brokers.clone())
    };

    let mut engine = Engine::open_kafka(dir.path().join("engine"), &cfg, options()).unwrap();
    apply_value(
        &mut engine,
        &json!({"op":"publish_agent","agent":"a","scope":"acme/x","listens":[],"emits":[]}),
    )
    .unwrap();
    let log = engine.log().clone();
    let (_, mut seen) = ledger_records(log.as_ref(), &[]);

    // The raw producer's topic: a ledger topic created exactly as the
    // engine creates its own (partitions, retention, record size limit).
    let raw_log = KafkaLog::connect(&KafkaConfig {
        topic_prefix: format!("bench{stamp}.raw."),
        ..cfg.clone()
    })
    .unwrap();
    let topic = raw_log.topic_name(Topic::Ledger).to_string();
    let (tx, rx) = mpsc::channel();
    let producer = raw_producer(&brokers, tx);
    // Warm up the connection outside the timing, as the engine's was.
    producer
        .send(
            BaseRecord::<Vec<u8>, Vec<u8>>::to(&topic)
                .key(&b"warm".to_vec())
                .payload(&b"up".to_vec()),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    assert!(rx.recv_timeout(Duration::from_secs(30)).unwrap());

    // Engine and raw producer take turns, so that both meet the same
    // moods of the broker and the machine; each rep's ratio compares the
    // two sides' total times over that rep's blocks. The first turn warms up a freshly started
    // broker's JIT and is not counted (it measured 0.3–0.5 of later ones).
    let (mut engine_rates, mut raw_rates, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut log_rates, mut log_ratios) = (Vec::new(), Vec::new());
    let mut all = Vec::new();
    for rep in 0..=reps {
        // Within a rep, engine and raw producer alternate every BLOCK
        // operations (the raw producer sending the block the engine just
        // wrote), so that a slow spell of the machine hits both alike.
        let (mut engine_secs, mut raw_secs, mut log_secs) = (0.0, 0.0, 0.0);
        let mut records = Vec::with_capacity(ops);
        let mut i = 0;
        while i < ops {
            let block_end = (i + BLOCK).min(ops);
            // 1. Through the engine.
            let t = Instant::now();
            for j in i..block_end {
                apply_value(
                    &mut engine,
                    &json!({"op":"open_run","run":format!("r{rep}-{j}"),"agent":"a"}),
                )
                .unwrap();
            }
            engine_secs += t.elapsed().as_secs_f64();
            // The exact bytes the engine wrote, for the raw producer to send.
            let (block, ends) = ledger_records(log.as_ref(), &seen);
            seen = ends;
            assert_eq!(block.len(), block_end - i, "one record per open_run");

            // 2. Raw producer, same bytes, each send awaited.
            let t = Instant::now();
            for (k, p) in &block {
                producer
                    .send(BaseRecord::to(&topic).key(k).payload(p))
                    .map_err(|(e, _)| e)
                    .unwrap();
                assert!(rx.recv_timeout(Duration::from_secs(30)).unwrap());
            }
            raw_secs += t.elapsed().as_secs_f64();

            // 3. The engine's own log layer alone (`KafkaLog::append`, one
            // record per call), same bytes, same topic as the raw producer.
            let t = Instant::now();
            for rec in &block {
                raw_log
                    .append(Topic::Ledger, std::slice::from_ref(rec))
                    .unwrap();
            }
            log_secs += t.elapsed().as_secs_f64();
            records.extend(block);
            i = block_end;
        }
        let n = records.len() as f64;
        println!(
            "  {}: engine {:>6.0}/s, raw {:>6.0}/s, ratio {:.2}; log layer {:>6.0}/s",
            if rep == 0 {
                "warm-up (not counted)".to_string()
            } else {
                format!("rep {rep}")
            },
            n / engine_secs,
            n / raw_secs,
            raw_secs / engine_secs,
            n / log_secs
        );
        if rep == 0 {
            continue;
        }
        engine_rates.push(n / engine_secs);
        raw_rates.push(n / raw_secs);
        ratios.push(raw_secs / engine_secs);
        log_rates.push(n / log_secs);
        log_ratios.push(log_secs / engine_secs);
        all.extend(records);
    }
    drop(engine);

    // 3. Raw producer pipelined, every rep's bytes at once.
    let t = Instant::now();
    for (k, p) in &all {
        support::send_queued(
            &producer,
            BaseRecord::to(&topic).key(&k[..]).payload(&p[..]),
        );
    }
    producer
        .flush(Timeout::After(Duration::from_secs(60)))
        .unwrap();
    for _ in 0..all.len() {
        assert!(rx.recv_timeout(Duration::from_secs(30)).unwrap());
    }
    let piped_secs = t.elapsed().as_secs_f64();

    let bytes: usize = all.iter().map(|(_, p)| p.len()).sum::<usize>() / reps;
    println!("ingest of {ops} records ({bytes} bytes) per rep, {reps} reps, on {brokers}:");
    println!(
        "  engine (apply open_run, acked each)   {:>8.0} records/s median",
        median(engine_rates)
    );
    println!(
        "  raw rdkafka, same bytes, acked each   {:>8.0} records/s median",
        median(raw_rates)
    );
    println!(
        "  KafkaLog::append alone, same bytes    {:>8.0} records/s median (engine / log layer {:.2})",
        median(log_rates),
        median(log_ratios)
    );
    println!(
        "  raw rdkafka, pipelined                {:>8.0} records/s",
        all.len() as f64 / piped_secs
    );
    let mut sorted = ratios.clone();
    sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "  ratio engine / raw (same guarantee)   {:>8.2}  median of {reps} (min {:.2}, max {:.2}; goal >= 0.8)",
        median(ratios),
        sorted[0],
        sorted[sorted.len() - 1]
    );

    // 4. Projector throughput from Kafka.
    let plog = KafkaLog::connect(&KafkaConfig {
        topic_prefix: format!("bench{stamp}.proj."),
        ..cfg.clone()
    })
    .unwrap();
    write_synthetic_log(&plog, rebuild_events).unwrap();
    let views = Views::open(dir.path().join("views")).unwrap();
    let t = Instant::now();
    let applied = project_all(&plog, &views, None, &|_| {}).unwrap();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "projector from Kafka: {applied} events in {secs:.1}s = {:.0} events/s",
        applied as f64 / secs
    );
}
