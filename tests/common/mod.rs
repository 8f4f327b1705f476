//! Shared test harness: a ledger driven through the same JSON operations a
//! platform sends, on a backend chosen by the test (the embedded log today;
//! every test here is written against the engine, not the backend).
#![allow(dead_code)]

use agentledger::apply::apply_value;
use agentledger::engine::{Engine, EngineOptions};
use agentledger::log::embedded::{EmbeddedConfig, EmbeddedLog};
use agentledger::log::kafka::{KafkaConfig, KafkaLog};
use agentledger::log::Log;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

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
        let brokers = match std::env::var("AGENTLEDGER_TEST_KAFKA") {
            Ok(b) if !b.trim().is_empty() => b,
            _ => panic!("AGENTLEDGER_TEST_KAFKA is not set: run the tests with `tools/test`, which starts the test brokers"),
        };
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or(0);
        Backend::Kafka(KafkaConfig {
            topic_prefix: format!("e{stamp}-{}-{test}.", std::process::id()),
            timeout: Duration::from_secs(30),
            ..KafkaConfig::new(brokers)
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

pub struct Ledger {
    pub engine: Engine,
    pub dir: PathBuf,
    pub backend: Backend,
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
        let engine = match backend {
            Backend::Embedded => Engine::open_embedded(dir, opts),
            Backend::Kafka(k) => Engine::open_kafka(dir, k, opts),
        }
        .expect("open engine");
        Self {
            engine,
            dir: dir.to_path_buf(),
            backend: backend.clone(),
        }
    }

    /// Apply and expect success.
    pub fn ok(&mut self, v: Value) -> Value {
        let a = apply_value(&mut self.engine, &v).unwrap_or_else(|e| panic!("{v} refused: {e}"));
        assert_eq!(a["ok"], json!(true), "{v} -> {a}");
        a
    }

    /// Apply and expect a refusal; returns its code.
    pub fn refused(&mut self, v: Value) -> String {
        match apply_value(&mut self.engine, &v) {
            Ok(a) => panic!("{v} was accepted: {a}"),
            Err(e) => e.code().to_string(),
        }
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

    pub fn run(&self, run: &str) -> agentledger::views::RunState {
        self.engine
            .views()
            .run(run)
            .unwrap()
            .unwrap_or_else(|| panic!("no run {run}"))
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
