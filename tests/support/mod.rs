//! Helpers shared by the log backend tests (`log_contract`, `kafka_fault`):
//! where the test brokers are, unique topic prefixes, reading a partition
//! whole, and the Java client's key → partition function.
#![allow(dead_code)]

use agentledger::log::embedded::{EmbeddedConfig, EmbeddedLog};
use agentledger::log::kafka::{KafkaConfig, KafkaLog};
use agentledger::log::{Log, LogRecord, Topic};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Bootstrap string of the 1-node test cluster.
pub const KAFKA_ENV: &str = "AGENTLEDGER_TEST_KAFKA";
/// Bootstrap string of the 3-node test cluster.
pub const KAFKA3_ENV: &str = "AGENTLEDGER_TEST_KAFKA3";
/// `KAFKA_BASE` of the 3-node test cluster (for `tools/kafka/kafka.sh kill/restart`).
pub const KAFKA3_BASE_ENV: &str = "AGENTLEDGER_TEST_KAFKA3_BASE";

/// The value of a test-cluster variable; fails the test (never skips it)
/// when it is not set.
pub fn required_env(var: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => v,
        _ => panic!(
            "{var} is not set: the Kafka tests need running brokers. Run them with `tools/test` \
             (it starts a 1-node and a 3-node cluster with tools/kafka/kafka.sh and exports \
             {KAFKA_ENV}, {KAFKA3_ENV} and {KAFKA3_BASE_ENV}), or start a cluster yourself and \
             export the variable."
        ),
    }
}

/// A topic prefix no other test or test run uses.
pub fn unique_prefix(test: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name: String = test
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(80)
        .collect();
    format!("t{millis}-{}-{n}-{name}.", std::process::id())
}

/// A Kafka log on the 1-node test cluster, with topics of its own.
pub fn kafka_log(test: &str) -> KafkaLog {
    let config = KafkaConfig {
        topic_prefix: unique_prefix(test),
        timeout: Duration::from_secs(30),
        ..KafkaConfig::new(required_env(KAFKA_ENV))
    };
    KafkaLog::connect(&config).unwrap_or_else(|e| panic!("connect to the test cluster: {e}"))
}

/// An embedded log in a fresh temporary directory (kept alive by the guard).
pub fn embedded_log() -> (EmbeddedLog, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = EmbeddedLog::open(dir.path(), &EmbeddedConfig::default()).expect("open embedded log");
    (log, dir)
}

/// Every record of a partition, read in chunks of `chunk`, from 0 to the end.
pub fn read_all(log: &dyn Log, topic: Topic, partition: u32, chunk: usize) -> Vec<LogRecord> {
    let end = log.end_offset(topic, partition).expect("end offset");
    let mut out = Vec::new();
    let mut from = 0;
    while from < end {
        let got = log
            .read(topic, partition, from, chunk)
            .unwrap_or_else(|e| panic!("read {topic}/{partition} from {from}: {e}"));
        assert!(
            !got.is_empty(),
            "read {topic}/{partition} from {from} returned nothing before the end {end}"
        );
        from = got.last().map(|r| r.offset + 1).unwrap_or(from);
        out.extend(got);
    }
    out
}

/// Kafka's Java `Utils.murmur2`, which `partitioner=murmur2_random` matches.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let len = data.len();
    let mut h: u32 = SEED ^ (len as u32);
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    match tail.len() {
        3 => {
            h ^= (tail[2] as u32) << 16;
            h ^= (tail[1] as u32) << 8;
            h ^= tail[0] as u32;
            h = h.wrapping_mul(M);
        }
        2 => {
            h ^= (tail[1] as u32) << 8;
            h ^= tail[0] as u32;
            h = h.wrapping_mul(M);
        }
        1 => {
            h ^= tail[0] as u32;
            h = h.wrapping_mul(M);
        }
        _ => {}
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition the Java client's default partitioner picks for a key.
pub fn java_partition(key: &[u8], partitions: u32) -> u32 {
    ((murmur2(key) & 0x7fff_ffff) as u32) % partitions
}

/// Runs `tools/kafka/kafka.sh` on the 3-node cluster; when dropped (also
/// when the test fails) it restarts any node that is down.
pub struct Cluster {
    pub script: PathBuf,
    pub base: String,
}

impl Cluster {
    pub fn run(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("bash")
            .arg(&self.script)
            .args(args)
            .env("KAFKA_BASE", &self.base)
            .output()
            .map_err(|e| format!("cannot run kafka.sh {args:?}: {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(format!(
                "kafka.sh {args:?} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let status = Command::new("bash")
            .arg(&self.script)
            .arg("status")
            .env("KAFKA_BASE", &self.base)
            .output();
        // Exit 3: some nodes are down.
        if matches!(status, Ok(ref o) if o.status.code() == Some(3)) {
            eprintln!("restarting the stopped broker(s) of the 3-node cluster");
            if let Err(e) = self.run(&["restart", "all"]) {
                eprintln!("could not restart the cluster: {e}");
            }
        }
    }
}

impl Cluster {
    /// The 3-node test cluster named by the environment (fails without it).
    pub fn from_env() -> Self {
        Cluster {
            script: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tools/kafka/kafka.sh"),
            base: required_env(KAFKA3_BASE_ENV),
        }
    }
}
