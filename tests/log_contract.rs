//! The contract of the `Log` trait, written once and run against every
//! backend: `embedded::<contract>` on a temporary directory and
//! `kafka::<contract>` on the 1-node test cluster (`AGENTLEDGER_TEST_KAFKA`,
//! set by `tools/test`; without it the Kafka tests fail, they never skip).
//! Each Kafka test gets topics of its own (a unique prefix), so tests never
//! see each other's records.

mod common;

use agentledger::log::kafka::KafkaConfig;
use agentledger::log::kafka::KafkaLog;
use agentledger::log::{Log, LogError};
use agentledger::model::Topic;
use common::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

type Records = Vec<(Vec<u8>, Vec<u8>)>;

fn rec(key: &str, payload: impl Into<Vec<u8>>) -> (Vec<u8>, Vec<u8>) {
    (key.as_bytes().to_vec(), payload.into())
}

/// Check that the positions an append returned hold exactly those records.
fn assert_positions(log: &dyn Log, topic: Topic, records: &Records, positions: &[(u32, u64)]) {
    assert_eq!(positions.len(), records.len(), "one position per record");
    for ((key, payload), (p, o)) in records.iter().zip(positions) {
        let got = log.read(topic, *p, *o, 1).expect("read one");
        assert_eq!(got.len(), 1, "record at {topic}/{p}@{o}");
        assert_eq!(got[0].partition, *p);
        assert_eq!(got[0].offset, *o);
        assert_eq!(&got[0].key, key);
        assert_eq!(&got[0].payload, payload);
    }
}

// --------------------------------------------------------------------------
// The contract.

fn contract_topics_have_their_partitions(log: &dyn Log) {
    assert_eq!(log.partitions(Topic::Ledger), 4);
    assert_eq!(log.partitions(Topic::Registry), 1);
    assert_eq!(log.partitions(Topic::Checkpoints), 1);
    assert!(log.partitions(Topic::Published) >= 1);
    for topic in Topic::ALL {
        for p in 0..log.partitions(topic) {
            assert_eq!(
                log.end_offset(topic, p).unwrap(),
                0,
                "{topic}/{p} starts empty"
            );
            assert!(log.read(topic, p, 0, 10).unwrap().is_empty());
        }
    }
    assert!(!log.describe().is_empty());
}

fn contract_append_then_read_back_in_order(log: &dyn Log) {
    let records: Records = (0..10)
        .map(|i| rec("agent-v", format!("version {i}")))
        .collect();
    let pos = log.append(Topic::Registry, &records).unwrap();
    assert_eq!(
        pos,
        (0..10).map(|o| (0u32, o as u64)).collect::<Vec<_>>(),
        "offsets dense from 0 in call order"
    );
    let got = log.read(Topic::Registry, 0, 0, 100).unwrap();
    assert_eq!(got.len(), 10);
    for (i, r) in got.iter().enumerate() {
        assert_eq!(r.partition, 0);
        assert_eq!(r.offset, i as u64);
        assert_eq!(r.key, b"agent-v");
        assert_eq!(r.payload, format!("version {i}").into_bytes());
    }
}

fn contract_offsets_are_dense_from_zero(log: &dyn Log) {
    let mut expected: BTreeMap<u32, u64> = BTreeMap::new();
    for call in 0..5 {
        let records: Records = (0..7)
            .map(|i| {
                rec(
                    &format!("root-{}", (call * 7 + i) % 11),
                    vec![call as u8, i as u8],
                )
            })
            .collect();
        for (p, o) in log.append(Topic::Ledger, &records).unwrap() {
            let next = expected.entry(p).or_insert(0);
            assert_eq!(o, *next, "offsets of partition {p} are dense");
            *next += 1;
        }
    }
    for p in 0..log.partitions(Topic::Ledger) {
        let n = expected.get(&p).copied().unwrap_or(0);
        assert_eq!(log.end_offset(Topic::Ledger, p).unwrap(), n);
        let got = read_all(log, Topic::Ledger, p, 100);
        assert_eq!(
            got.iter().map(|r| r.offset).collect::<Vec<_>>(),
            (0..n).collect::<Vec<_>>()
        );
    }
    assert_eq!(expected.values().sum::<u64>(), 35);
}

fn contract_same_key_same_partition_and_order_kept(log: &dyn Log) {
    let keys = ["chain-a", "chain-b", "chain-c", "chain-d", "chain-e"];
    let mut partition_of: BTreeMap<&str, u32> = BTreeMap::new();
    for call in 0..3 {
        let records: Records = (0..50)
            .map(|i| rec(keys[i % keys.len()], format!("{call}:{i:03}")))
            .collect();
        let pos = log.append(Topic::Ledger, &records).unwrap();
        for (i, (p, _)) in pos.iter().enumerate() {
            let key = keys[i % keys.len()];
            let first = *partition_of.entry(key).or_insert(*p);
            assert_eq!(first, *p, "{key} always goes to one partition");
        }
    }
    // Read back: per key, the payloads appear in append order.
    for (key, p) in &partition_of {
        let payloads: Vec<String> = read_all(log, Topic::Ledger, *p, 1000)
            .into_iter()
            .filter(|r| r.key == key.as_bytes())
            .map(|r| String::from_utf8(r.payload).unwrap())
            .collect();
        let want: Vec<String> = (0..3)
            .flat_map(|call| {
                (0..50)
                    .filter(|i| keys[i % keys.len()] == *key)
                    .map(move |i| format!("{call}:{i:03}"))
            })
            .collect();
        assert_eq!(payloads, want, "order of {key}");
    }
}

fn contract_batch_spanning_partitions(log: &dyn Log) {
    let records: Records = (0..64)
        .map(|i| rec(&format!("root-{i}"), format!("event {i}")))
        .collect();
    let pos = log.append(Topic::Ledger, &records).unwrap();
    let used: std::collections::BTreeSet<u32> = pos.iter().map(|(p, _)| *p).collect();
    assert!(used.len() >= 2, "64 keys spread over partitions: {used:?}");
    assert_positions(log, Topic::Ledger, &records, &pos);
    let total: usize = (0..log.partitions(Topic::Ledger))
        .map(|p| read_all(log, Topic::Ledger, p, 1000).len())
        .sum();
    assert_eq!(total, 64);
}

fn contract_read_from_the_middle(log: &dyn Log) {
    let records: Records = (0..20).map(|i| rec("k", format!("r{i}"))).collect();
    log.append(Topic::Checkpoints, &records).unwrap();
    let got = log.read(Topic::Checkpoints, 0, 5, 3).unwrap();
    assert_eq!(
        got.iter().map(|r| r.offset).collect::<Vec<_>>(),
        vec![5, 6, 7]
    );
    assert_eq!(got[0].payload, b"r5");
    let got = log.read(Topic::Checkpoints, 0, 15, 100).unwrap();
    assert_eq!(
        got.iter().map(|r| r.offset).collect::<Vec<_>>(),
        (15..20).collect::<Vec<u64>>()
    );
    assert_eq!(got[4].payload, b"r19");
    // Going back returns the same records.
    let again = log.read(Topic::Checkpoints, 0, 0, 2).unwrap();
    assert_eq!(again[1].payload, b"r1");
    let got = log.read(Topic::Checkpoints, 0, 2, 1).unwrap();
    assert_eq!(got[0].payload, b"r2");
}

fn contract_read_past_the_end_is_empty(log: &dyn Log) {
    assert!(log.read(Topic::Registry, 0, 0, 10).unwrap().is_empty());
    assert!(log.read(Topic::Registry, 0, 7, 10).unwrap().is_empty());
    log.append(Topic::Registry, &[rec("k", "a"), rec("k", "b")])
        .unwrap();
    assert!(log.read(Topic::Registry, 0, 2, 10).unwrap().is_empty());
    assert!(log.read(Topic::Registry, 0, 1000, 10).unwrap().is_empty());
    assert_eq!(log.read(Topic::Registry, 0, 1, 10).unwrap().len(), 1);
    assert!(log.read(Topic::Registry, 0, 0, 0).unwrap().is_empty());
}

fn contract_end_offset_follows_appends(log: &dyn Log) {
    assert_eq!(log.end_offset(Topic::Registry, 0).unwrap(), 0);
    log.append(Topic::Registry, &[rec("k", "1")]).unwrap();
    assert_eq!(log.end_offset(Topic::Registry, 0).unwrap(), 1);
    log.append(
        Topic::Registry,
        &[rec("k", "2"), rec("k", "3"), rec("k", "4")],
    )
    .unwrap();
    assert_eq!(log.end_offset(Topic::Registry, 0).unwrap(), 4);
}

fn contract_unknown_partition_is_an_error(log: &dyn Log) {
    let n = log.partitions(Topic::Registry);
    assert!(matches!(
        log.read(Topic::Registry, n, 0, 1),
        Err(LogError::NoSuchPartition { .. })
    ));
    assert!(matches!(
        log.end_offset(Topic::Ledger, log.partitions(Topic::Ledger)),
        Err(LogError::NoSuchPartition { .. })
    ));
}

fn contract_wait_beyond_times_out(log: &dyn Log) {
    let start = Instant::now();
    let end = log
        .wait_beyond(Topic::Registry, 0, 0, Duration::from_millis(400))
        .unwrap();
    assert_eq!(end, 0);
    // It waited for its timeout (less a clock's grain), not less; a hang
    // would stop the suite.
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(350),
        "returned early: {took:?}"
    );
    // Already beyond: returns the end without waiting for the timeout,
    // which is longer than the suite would sit through.
    log.append(Topic::Registry, &[rec("k", "x")]).unwrap();
    assert_eq!(
        log.wait_beyond(Topic::Registry, 0, 0, Duration::from_secs(3600))
            .unwrap(),
        1
    );
}

fn contract_wait_beyond_wakes_when_another_thread_appends(log: &dyn Log) {
    let before = log.end_offset(Topic::Registry, 0).unwrap();
    let (waiting, go) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            // Append once the other thread is about to wait.
            go.recv().unwrap();
            log.append(Topic::Registry, &[rec("k", "wake up")]).unwrap();
        });
        waiting.send(()).unwrap();
        // Woken by the append: an hour-long wait that returned.
        let end = log
            .wait_beyond(Topic::Registry, 0, before, Duration::from_secs(3600))
            .unwrap();
        assert_eq!(end, before + 1);
    });
}

fn contract_concurrent_appends_each_get_their_answer(log: &dyn Log) {
    // Several threads appending one record at a time: every call comes
    // back (each thread's acknowledgements may be served by another
    // waiting thread) with its own records, in order.
    let threads = 4;
    let each = 150;
    let answers: Vec<Vec<(u32, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    (0..each)
                        .map(|i| {
                            let pos = log
                                .append(
                                    Topic::Ledger,
                                    &[rec(&format!("writer-{t}"), format!("{t}:{i}"))],
                                )
                                .unwrap();
                            assert_eq!(pos.len(), 1);
                            pos[0]
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (t, positions) in answers.iter().enumerate() {
        let p = log.partition_of(Topic::Ledger, format!("writer-{t}").as_bytes());
        assert!(
            positions.iter().all(|(q, _)| *q == p),
            "writer-{t} in one partition"
        );
        assert!(
            positions.windows(2).all(|w| w[0].1 < w[1].1),
            "writer-{t}'s offsets increase"
        );
        let mine: Vec<String> = read_all(log, Topic::Ledger, p, 1000)
            .into_iter()
            .filter(|r| r.key == format!("writer-{t}").as_bytes())
            .map(|r| String::from_utf8(r.payload).unwrap())
            .collect();
        let want: Vec<String> = (0..each).map(|i| format!("{t}:{i}")).collect();
        assert_eq!(mine, want, "writer-{t}'s records, once each, in order");
    }
}

fn contract_large_record_of_a_few_mb(log: &dyn Log) {
    let big: Vec<u8> = (0..3 * 1024 * 1024 + 17)
        .map(|i: u32| (i % 251) as u8)
        .collect();
    let records = vec![
        rec("k", "before"),
        (b"k".to_vec(), big.clone()),
        rec("k", "after"),
    ];
    let pos = log.append(Topic::Registry, &records).unwrap();
    assert_eq!(pos, vec![(0, 0), (0, 1), (0, 2)]);
    let got = log.read(Topic::Registry, 0, 0, 10).unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(got[1].payload.len(), big.len());
    assert!(got[1].payload == big, "large payload intact");
    assert_eq!(got[2].payload, b"after");
}

fn contract_oversized_record_is_refused_whole(log: &dyn Log) {
    let too_big = vec![7u8; 16 * 1024 * 1024 + 1];
    let err = log
        .append(
            Topic::Registry,
            &[rec("k", "small"), (b"k".to_vec(), too_big)],
        )
        .expect_err("a record above the limit is refused");
    assert!(matches!(err, LogError::TooLarge { .. }), "{err}");
    assert_eq!(
        log.end_offset(Topic::Registry, 0).unwrap(),
        0,
        "nothing of the call written"
    );
}

fn contract_batch_of_2000_records(log: &dyn Log) {
    let records: Records = (0..2000)
        .map(|i| {
            rec(
                &format!("chain-{}", i % 37),
                format!("{i:05}:{}", "x".repeat(i % 50)),
            )
        })
        .collect();
    let start = Instant::now();
    let pos = log.append(Topic::Ledger, &records).unwrap();
    eprintln!("2000-record append took {:?}", start.elapsed());
    assert_eq!(pos.len(), 2000);
    let mut by_pos: BTreeMap<(u32, u64), usize> = BTreeMap::new();
    for (i, p) in pos.iter().enumerate() {
        assert!(by_pos.insert(*p, i).is_none(), "position {p:?} given twice");
    }
    let mut seen = 0;
    for p in 0..log.partitions(Topic::Ledger) {
        // Odd chunk size: sequential reads that stop mid-stream.
        for r in read_all(log, Topic::Ledger, p, 333) {
            let i = by_pos[&(p, r.offset)];
            assert_eq!((r.key.clone(), r.payload.clone()), records[i]);
            seen += 1;
        }
    }
    assert_eq!(seen, 2000);
}

fn contract_records_land_in_their_partition_of(log: &dyn Log) {
    let records: Records = (0..64)
        .map(|i| rec(&format!("root-{i}{}", "x".repeat(i % 4)), "x"))
        .collect();
    let pos = log.append(Topic::Ledger, &records).unwrap();
    for ((key, _), (p, _)) in records.iter().zip(&pos) {
        assert_eq!(
            *p,
            log.partition_of(Topic::Ledger, key),
            "{}",
            String::from_utf8_lossy(key)
        );
    }
}

fn contract_append_begin_then_wait_is_an_append(log: &dyn Log) {
    let first: Records = (0..10).map(|i| rec("chain-a", format!("a{i}"))).collect();
    let p = log.partition_of(Topic::Ledger, b"chain-a");
    let before = log.end_offset(Topic::Ledger, p).unwrap();
    let appending = log.append_begin(Topic::Ledger, &first).unwrap();
    let pos = appending.wait().unwrap();
    let want: Vec<(u32, u64)> = (0..10).map(|i| (p, before + i)).collect();
    assert_eq!(pos, want, "dense offsets in the key's partition");
    assert_positions(log, Topic::Ledger, &first, &pos);
    // An oversized record is refused, by one half or the other, and
    // nothing of it written.
    let big = vec![rec("chain-a", vec![0u8; 20 << 20])];
    let refused = log.append_begin(Topic::Ledger, &big).and_then(|a| a.wait());
    assert!(
        matches!(refused, Err(LogError::TooLarge { .. })),
        "{refused:?}"
    );
    assert_eq!(log.end_offset(Topic::Ledger, p).unwrap(), before + 10);
}

macro_rules! contract_suite {
    ($($name:ident => $contract:ident),* $(,)?) => {
        /// The contract on the embedded log.
        mod embedded {
            $(
                #[test]
                fn $name() {
                    let (log, _dir) = super::embedded_log();
                    super::$contract(&log);
                }
            )*
        }
        /// The contract on the 1-node Kafka test cluster.
        mod kafka {
            $(
                #[test]
                fn $name() {
                    let log = super::kafka_log(stringify!($name));
                    super::$contract(&log);
                }
            )*
        }
    };
}

contract_suite! {
    topics_have_their_partitions => contract_topics_have_their_partitions,
    append_then_read_back_in_order => contract_append_then_read_back_in_order,
    offsets_are_dense_from_zero => contract_offsets_are_dense_from_zero,
    same_key_same_partition_and_order_kept => contract_same_key_same_partition_and_order_kept,
    batch_spanning_partitions => contract_batch_spanning_partitions,
    read_from_the_middle => contract_read_from_the_middle,
    read_past_the_end_is_empty => contract_read_past_the_end_is_empty,
    end_offset_follows_appends => contract_end_offset_follows_appends,
    unknown_partition_is_an_error => contract_unknown_partition_is_an_error,
    wait_beyond_times_out => contract_wait_beyond_times_out,
    wait_beyond_wakes_when_another_thread_appends => contract_wait_beyond_wakes_when_another_thread_appends,
    large_record_of_a_few_mb => contract_large_record_of_a_few_mb,
    oversized_record_is_refused_whole => contract_oversized_record_is_refused_whole,
    batch_of_2000_records => contract_batch_of_2000_records,
    records_land_in_their_partition_of => contract_records_land_in_their_partition_of,
    append_begin_then_wait_is_an_append => contract_append_begin_then_wait_is_an_append,
    concurrent_appends_each_get_their_answer => contract_concurrent_appends_each_get_their_answer,
}

// --------------------------------------------------------------------------
// Kafka only.

#[test]
fn unreachable_broker_is_a_clear_error_within_the_timeout() {
    // A port that was just free: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("pick a port");
    let address = format!("127.0.0.1:{port}");
    let config = KafkaConfig {
        timeout: Duration::from_secs(3),
        ..KafkaConfig::new(address.clone())
    };
    let start = Instant::now();
    let err = KafkaLog::connect(&config)
        .err()
        .expect("connecting to a closed port fails");
    let took = start.elapsed();
    let msg = err.to_string();
    eprintln!("after {took:?}: {msg}");
    assert!(took < Duration::from_secs(5), "took {took:?}: {msg}");
    assert!(msg.contains(&address), "names the address: {msg}");
    assert!(msg.contains("3s"), "names the timeout: {msg}");
    assert!(matches!(err, LogError::Unavailable(_)), "{msg}");
}

#[test]
fn murmur2_matches_the_java_client() {
    // Test vectors of Kafka's own UtilsTest.testMurmur2.
    for (key, want) in [
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        (
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58897971,
        ),
        ("abc", 479470107),
    ] {
        assert_eq!(murmur2(key.as_bytes()), want, "{key}");
    }
}

#[test]
fn kafka_keys_go_where_the_java_client_puts_them() {
    let log = kafka_log("java-partitioning");
    let n = log.partitions(Topic::Ledger);
    let records: Records = (0..40).map(|i| rec(&format!("run-{i}"), "x")).collect();
    let pos = log.append(Topic::Ledger, &records).unwrap();
    for ((key, _), (p, _)) in records.iter().zip(&pos) {
        assert_eq!(
            *p,
            java_partition(key, n),
            "{}",
            String::from_utf8_lossy(key)
        );
    }
}

#[test]
fn kafka_reconnect_reads_the_existing_topics() {
    let first = kafka_log("reconnect");
    first.append(Topic::Registry, &[rec("k", "kept")]).unwrap();
    // Another partition count in the config does not change existing topics.
    let config = KafkaConfig {
        ledger_partitions: 7,
        ..first.config().clone()
    };
    let second = KafkaLog::connect(&config).unwrap();
    assert_eq!(second.partitions(Topic::Ledger), 4);
    assert_eq!(second.partitions(Topic::Published), 4);
    let got = second.read(Topic::Registry, 0, 0, 10).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].payload, b"kept");
}

#[test]
fn kafka_topics_keep_records_forever() {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::config::ClientConfig;

    let log = kafka_log("retention");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &log.config().brokers)
        .create()
        .unwrap();
    let names: Vec<String> = Topic::ALL
        .iter()
        .map(|t| log.topic_name(*t).to_string())
        .collect();
    let specs: Vec<ResourceSpecifier<'_>> =
        names.iter().map(|n| ResourceSpecifier::Topic(n)).collect();
    let opts = AdminOptions::new().request_timeout(Some(Duration::from_secs(20)));
    let results = futures_executor::block_on(admin.describe_configs(&specs, &opts)).unwrap();
    for (topic, result) in Topic::ALL.iter().zip(results) {
        let resource = result.unwrap();
        let retention = resource
            .get("retention.ms")
            .and_then(|e| e.value.clone())
            .unwrap_or_default();
        if *topic == Topic::Published {
            assert_ne!(retention, "-1", "published keeps the broker default");
        } else {
            assert_eq!(retention, "-1", "{topic} keeps records forever");
        }
    }
}
