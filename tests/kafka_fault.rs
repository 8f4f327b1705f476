//! Fault test on the 3-node test cluster (`AGENTLEDGER_TEST_KAFKA3`, its
//! `KAFKA_BASE` in `AGENTLEDGER_TEST_KAFKA3_BASE`; both set by `tools/test`):
//! records stream through `KafkaLog::append` from one thread while broker 2
//! is killed with SIGKILL and later restarted. Every acknowledged record
//! must then be in the log exactly once, at the position `append` reported.
//!
//! An append that returned `Err` is not acknowledged and is retried with the
//! same sequence numbers under a new attempt number; each payload carries
//! both, so a record written by a failed attempt is told apart from the
//! acknowledged copy.

mod common;

use agentledger::log::kafka::KafkaConfig;
use agentledger::log::kafka::KafkaLog;
use agentledger::log::Log;
use agentledger::model::Topic;
use common::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BATCH: u64 = 100;
const MIN_RECORDS: u64 = 10_000;
/// Records appended after the killed broker is back, at least.
const AFTER_RESTART: u64 = 2_000;
const KILL_AFTER: u64 = 2_000;
const NODE: &str = "2";
const TEST_DEADLINE: Duration = Duration::from_secs(240);

#[derive(Debug, Default)]
struct Timeline {
    killed: Option<Instant>,
    fenced: Option<Instant>,
    back: Option<Instant>,
}

fn payload(seq: u64, attempt: u64) -> Vec<u8> {
    // Some padding so batches have a realistic size.
    format!("seq={seq:08} attempt={attempt:06} {}", "p".repeat(100)).into_bytes()
}

fn parse(payload: &[u8]) -> (u64, u64) {
    let s = std::str::from_utf8(payload).expect("utf8 payload");
    let seq = s[4..12].parse().expect("seq");
    let attempt = s[21..27].parse().expect("attempt");
    (seq, attempt)
}

#[test]
fn acknowledged_records_survive_a_broker_kill_exactly_once() {
    let brokers = required_env(KAFKA3_ENV);
    let cluster = Cluster {
        script: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/kafka/kafka.sh"),
        base: required_env(KAFKA3_BASE_ENV),
    };
    let started = Instant::now();
    let deadline = started + TEST_DEADLINE;
    let config = KafkaConfig {
        topic_prefix: unique_prefix("fault"),
        ledger_partitions: 4,
        replication_factor: 3,
        min_insync_replicas: Some(2),
        timeout: Duration::from_secs(30),
        ..KafkaConfig::new(brokers)
    };
    let log = KafkaLog::connect(&config).expect("connect to the 3-node cluster");
    assert_eq!(log.partitions(Topic::Ledger), 4);

    // The fault, on its own thread, driven by the number of acknowledged records.
    let acked_count = Arc::new(AtomicU64::new(0));
    let fault_done = Arc::new(AtomicBool::new(false));
    let fault = {
        let acked_count = acked_count.clone();
        let fault_done = fault_done.clone();
        let cluster = Cluster {
            script: cluster.script.clone(),
            base: cluster.base.clone(),
        };
        std::thread::spawn(move || -> Result<Timeline, String> {
            let mut t = Timeline::default();
            let result = (|| {
                while acked_count.load(Ordering::SeqCst) < KILL_AFTER {
                    if Instant::now() >= deadline {
                        return Err("the stream never reached the kill point".to_string());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
                cluster.run(&["kill", NODE])?;
                t.killed = Some(Instant::now());
                eprintln!("broker {NODE} killed");
                // Until the controller fenced it and moved its leaderships.
                cluster.run(&["wait", "2", "60"])?;
                t.fenced = Some(Instant::now());
                eprintln!("broker {NODE} fenced");
                cluster.run(&["restart", NODE])?;
                t.back = Some(Instant::now());
                eprintln!("broker {NODE} back");
                Ok(())
            })();
            fault_done.store(true, Ordering::SeqCst);
            // Dropping this handle restarts the node if it is still down.
            drop(cluster);
            result.map(|_| t)
        })
    };

    // The stream: one thread, batches of BATCH records over 64 keys.
    let mut acked: BTreeMap<u64, (u64, u32, u64, Instant)> = BTreeMap::new();
    let mut failed_attempts: Vec<(u64, u64, String)> = Vec::new(); // (first seq, attempt, error)
    let mut attempt = 0u64;
    let mut seq = 0u64;
    let mut seq_at_fault_done: Option<u64> = None;
    let mut slowest = Duration::ZERO;
    loop {
        if seq_at_fault_done.is_none() && fault_done.load(Ordering::SeqCst) {
            seq_at_fault_done = Some(seq);
        }
        if let Some(s) = seq_at_fault_done {
            if seq >= MIN_RECORDS && seq >= s + AFTER_RESTART {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "fault test ran out of time after {seq} records"
        );
        attempt += 1;
        let seqs: Vec<u64> = (seq..seq + BATCH).collect();
        let records: Vec<(Vec<u8>, Vec<u8>)> = seqs
            .iter()
            .map(|s| {
                (
                    format!("chain-{}", s % 64).into_bytes(),
                    payload(*s, attempt),
                )
            })
            .collect();
        let t0 = Instant::now();
        match log.append(Topic::Ledger, &records) {
            Ok(pos) => {
                slowest = slowest.max(t0.elapsed());
                let now = Instant::now();
                for (s, (p, o)) in seqs.iter().zip(pos) {
                    acked.insert(*s, (attempt, p, o, now));
                }
                seq += BATCH;
                acked_count.store(seq, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => {
                eprintln!("append of seq {seq}.. (attempt {attempt}) failed, retrying: {e}");
                failed_attempts.push((seq, attempt, e.to_string()));
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    let timeline = fault
        .join()
        .expect("fault thread")
        .expect("kill and restart broker 2");
    let streamed = started.elapsed();
    let (killed, fenced, back) = (
        timeline.killed.unwrap(),
        timeline.fenced.unwrap(),
        timeline.back.unwrap(),
    );
    let acked_before = acked.values().filter(|a| a.3 < killed).count();
    let acked_down = acked
        .values()
        .filter(|a| a.3 >= killed && a.3 < back)
        .count();
    let acked_after = acked.values().filter(|a| a.3 >= back).count();

    // Read everything back.
    let t0 = Instant::now();
    let failed_ids: BTreeSet<u64> = failed_attempts.iter().map(|f| f.1).collect();
    let mut found: BTreeMap<(u64, u64), Vec<(u32, u64)>> = BTreeMap::new();
    let mut total = 0usize;
    for p in 0..log.partitions(Topic::Ledger) {
        let mut last_seq_of_key: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        for r in read_all(&log, Topic::Ledger, p, 5000) {
            total += 1;
            let (s, a) = parse(&r.payload);
            found.entry((s, a)).or_default().push((p, r.offset));
            if !failed_ids.contains(&a) {
                // Acknowledged records of one key keep their order.
                if let Some(prev) = last_seq_of_key.insert(r.key.clone(), s) {
                    assert!(
                        prev < s,
                        "key order broken in partition {p}: {prev} then {s}"
                    );
                }
            }
        }
    }
    let read_back = t0.elapsed();

    let mut lost = Vec::new();
    let mut duplicated = Vec::new();
    let mut misplaced = Vec::new();
    for (s, (a, p, o, _)) in &acked {
        match found.get(&(*s, *a)).map(Vec::as_slice) {
            None | Some([]) => lost.push(*s),
            Some([one]) => {
                if *one != (*p, *o) {
                    misplaced.push((*s, (*p, *o), *one));
                }
            }
            Some(many) => duplicated.push((*s, many.to_vec())),
        }
    }
    let phantoms: Vec<(u64, u64)> = found
        .keys()
        .filter(|(s, a)| acked.get(s).map(|x| x.0) != Some(*a) && !failed_ids.contains(a))
        .copied()
        .collect();
    let unacked_written: usize = found
        .iter()
        .filter(|((_, a), _)| failed_ids.contains(a))
        .map(|(_, v)| v.len())
        .sum();

    eprintln!(
        "fault test: {} records acknowledged ({acked_before} before the kill, {acked_down} while broker {NODE} was down or restarting, {acked_after} after), \
         {} failed append calls ({unacked_written} records of failed calls were written anyway), {total} records in the log; \
         fenced {:?} after the kill, back {:?} after the kill; slowest append {slowest:?}; stream {streamed:?}, read-back {read_back:?}",
        acked.len(),
        failed_attempts.len(),
        fenced - killed,
        back - killed,
    );
    assert!(
        lost.is_empty(),
        "{} acknowledged records lost, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(10)]
    );
    assert!(
        duplicated.is_empty(),
        "{} acknowledged records duplicated, e.g. {:?}",
        duplicated.len(),
        &duplicated[..duplicated.len().min(10)]
    );
    assert!(
        misplaced.is_empty(),
        "{} acknowledged records not at the position append reported, e.g. {:?}",
        misplaced.len(),
        &misplaced[..misplaced.len().min(10)]
    );
    assert!(phantoms.is_empty(), "records nobody appended: {phantoms:?}");
    assert!(acked.len() as u64 >= MIN_RECORDS);
    assert_eq!(
        acked.len() as u64,
        seq,
        "every sequence number acknowledged"
    );
    assert_eq!(
        total,
        acked.len() + unacked_written,
        "the log holds the acknowledged records plus what failed calls wrote"
    );
    assert!(acked_before > 0 && acked_after > 0);
    assert!(
        acked_down > 0,
        "appends went on while broker {NODE} was down"
    );
    drop(cluster);
}
