//! Commit groups on a log that pipelines them (as Kafka does): operations
//! are decided on views that include the not-yet-acknowledged records
//! before them, and the group's end checks that every record landed where
//! it was projected. Driven here over a log whose acknowledgements arrive
//! only when waited for, and can be made to fail, so that another writer's
//! record can land in between and an append can be lost — deterministic,
//! no broker needed. The same path on a real cluster is in
//! `tests/multi_writer.rs`.

mod common;

use agentledger::content::store::ContentStore;
use agentledger::engine::Engine;
use agentledger::log::embedded::{EmbeddedConfig, EmbeddedLog};
use agentledger::log::{Appending, Log, LogError, LogRecord};
use agentledger::model::Topic;
use agentledger::projector::project_all;
use agentledger::views::Views;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An embedded log whose appends land only when their acknowledgement is
/// waited for, in the order waited; appends named in `fail` never land.
struct Deferred {
    inner: Arc<EmbeddedLog>,
    begun: AtomicUsize,
    fail: Mutex<HashSet<usize>>,
}

struct DeferredAppend {
    inner: Arc<EmbeddedLog>,
    topic: Topic,
    records: Vec<(Vec<u8>, Vec<u8>)>,
    fail: bool,
}

impl Appending for DeferredAppend {
    fn wait(self: Box<Self>) -> Result<Vec<(u32, u64)>, LogError> {
        if self.fail {
            return Err(LogError::Unavailable("not acknowledged (injected)".into()));
        }
        self.inner.append(self.topic, &self.records)
    }
}

impl Log for Deferred {
    fn partitions(&self, topic: Topic) -> u32 {
        self.inner.partitions(topic)
    }
    fn append(
        &self,
        topic: Topic,
        records: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<Vec<(u32, u64)>, LogError> {
        self.append_begin(topic, records)?.wait()
    }
    fn append_begin(
        &self,
        topic: Topic,
        records: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<Box<dyn Appending + Send>, LogError> {
        let n = self.begun.fetch_add(1, Ordering::SeqCst);
        Ok(Box::new(DeferredAppend {
            inner: self.inner.clone(),
            topic,
            records: records.to_vec(),
            fail: self.fail.lock().unwrap().contains(&n),
        }))
    }
    fn pipelines_groups(&self) -> bool {
        true
    }
    fn partition_of(&self, topic: Topic, key: &[u8]) -> u32 {
        self.inner.partition_of(topic, key)
    }
    fn read(
        &self,
        topic: Topic,
        partition: u32,
        from: u64,
        max: usize,
    ) -> Result<Vec<LogRecord>, LogError> {
        self.inner.read(topic, partition, from, max)
    }
    fn end_offset(&self, topic: Topic, partition: u32) -> Result<u64, LogError> {
        self.inner.end_offset(topic, partition)
    }
    fn wait_beyond(
        &self,
        topic: Topic,
        partition: u32,
        offset: u64,
        timeout: Duration,
    ) -> Result<u64, LogError> {
        self.inner.wait_beyond(topic, partition, offset, timeout)
    }
    fn describe(&self) -> String {
        "deferred acknowledgements over the embedded log".into()
    }
}

struct Setup {
    inner: Arc<EmbeddedLog>,
    log: Arc<Deferred>,
    /// The engine whose groups are pipelined.
    a: Engine,
    /// Another writer on the same log, appending at once.
    b: Engine,
    dir: tempfile::TempDir,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let inner = Arc::new(EmbeddedLog::open(d.join("log"), &EmbeddedConfig::default()).unwrap());
    let log = Arc::new(Deferred {
        inner: inner.clone(),
        begun: AtomicUsize::new(0),
        fail: Mutex::new(HashSet::new()),
    });
    let engine = |log: Arc<dyn Log>, name: &str| {
        Engine::with_parts(
            log,
            Views::open(d.join(format!("views-{name}"))).unwrap(),
            ContentStore::open(d.join(format!("blobs-{name}"))).unwrap(),
            common::fixed_clock_options(),
        )
    };
    let mut a = engine(log.clone(), "a");
    let b = engine(inner.clone(), "b");
    a.catch_up(&|_| {}).unwrap();
    Setup {
        inner,
        log,
        a,
        b,
        dir,
    }
}

/// Decide `ops` as one group; the code of each answer (`ok` or the error).
fn group(engine: &mut Engine, ops: &[Value]) -> Vec<String> {
    common::operator_group(engine, ops)
        .iter()
        .map(common::reply_code)
        .collect()
}

/// The views equal a projection of the log from scratch.
fn views_agree_with_the_log(engine: &mut Engine, log: &dyn Log, dir: &Path, name: &str) {
    engine.catch_up(&|_| {}).unwrap();
    let fresh = Views::open(dir.join(name)).unwrap();
    project_all(log, &fresh, None, &|_| {}).unwrap();
    assert_eq!(
        fresh.digest().unwrap(),
        engine.views().digest().unwrap(),
        "the views after the group differ from the log projected afresh"
    );
}

fn publish_worker(engine: &mut Engine) {
    let mut ops = vec![
        json!({"op":"publish_agent","agent":"worker","scope":"acme/ops",
        "emits":[{"event":"job.done","context":"job"}]}),
    ];
    ops.push(
        json!({"op":"publish_agent","agent":"collector","scope":"acme/ops","listens":["job.done"]}),
    );
    assert_eq!(group(engine, &ops), ["ok", "ok"]);
}

#[test]
fn a_group_whose_records_land_where_expected_answers_as_one_at_a_time() {
    let mut s = setup();
    publish_worker(&mut s.a);
    let before = s.log.begun.load(Ordering::SeqCst);
    let codes = group(
        &mut s.a,
        &[
            json!({"op":"open_run","run":"x","agent":"worker"}),
            json!({"op":"open_run","run":"x","agent":"worker"}),
            json!({"op":"close_run","run":"x","status":"succeeded"}),
            json!({"op":"close_run","run":"x","status":"succeeded"}),
            json!({"op":"open_run","run":"y","agent":"nobody"}),
            json!({"op":"dispatch"}),
            json!({"op":"open_run","run":"y","agent":"worker"}),
        ],
    );
    assert_eq!(
        codes,
        [
            "ok",
            "run_exists",
            "ok",
            "run_closed",
            "unknown_agent",
            "ok",
            "ok"
        ]
    );
    assert!(
        s.log.begun.load(Ordering::SeqCst) - before >= 4,
        "the operations' appends went through the pipelined path"
    );
    // The close was dispatched inside the group: its listener is open.
    let x = s.a.views().run("x").unwrap().unwrap();
    assert!(x.dispatched, "{x:?}");
    let trail = s.a.trail("x", false).unwrap();
    assert_eq!(trail.len(), 3, "open, close, dispatched: {trail:?}");
    views_agree_with_the_log(&mut s.a, s.inner.as_ref(), s.dir.path(), "fresh");
}

#[test]
fn another_writers_record_landing_in_between_is_found_and_the_loser_answered_conflict() {
    let mut s = setup();
    publish_worker(&mut s.a);
    s.b.catch_up(&|_| {}).unwrap();
    s.a.begin_group();
    s.a.group_op(Some(0));
    let opened = agentledger::apply::apply_value(
        &mut s.a,
        &json!({"op":"open_run","run":"x","agent":"worker"}),
    );
    assert!(opened.is_ok(), "decided on the views: {opened:?}");
    // Before A's record lands, B opens the same run: B's record lands
    // first, at the offset A's was projected at.
    agentledger::apply::apply_value(
        &mut s.b,
        &json!({"op":"open_run","run":"x","agent":"worker"}),
    )
    .unwrap();
    s.a.group_op(Some(1));
    agentledger::apply::apply_value(
        &mut s.a,
        &json!({"op":"close_run","run":"x","status":"failed"}),
    )
    .unwrap();
    s.a.group_op(Some(2));
    agentledger::apply::apply_value(
        &mut s.a,
        &json!({"op":"open_run","run":"z","agent":"worker"}),
    )
    .unwrap();
    let end = s.a.end_group().unwrap();
    let changed: Vec<(usize, String)> = end
        .changed
        .iter()
        .map(|(i, e)| (*i, e.code().to_string()))
        .collect();
    // A's open lost the race; its close closed the run B opened (as it
    // would have, decided after B's open); z is A's.
    assert_eq!(changed, [(0, "conflict".to_string())]);
    let x = s.a.views().run("x").unwrap().unwrap();
    assert!(!x.is_open(), "{x:?}");
    assert!(s.a.views().run("z").unwrap().is_some());
    s.b.catch_up(&|_| {}).unwrap();
    assert_eq!(
        s.a.trail("x", false).unwrap(),
        s.b.trail("x", false).unwrap()
    );
    views_agree_with_the_log(&mut s.a, s.inner.as_ref(), s.dir.path(), "fresh");
    // A carries on, in a group and out of one.
    assert_eq!(
        group(
            &mut s.a,
            &[json!({"op":"open_run","run":"w","agent":"worker"})]
        ),
        ["ok"]
    );
}

#[test]
fn an_append_not_acknowledged_fails_its_operation_and_what_depended_on_it() {
    let mut s = setup();
    publish_worker(&mut s.a);
    let next = s.log.begun.load(Ordering::SeqCst);
    // The second operation's append (open y) never lands.
    s.log.fail.lock().unwrap().insert(next + 1);
    let codes = group(
        &mut s.a,
        &[
            json!({"op":"open_run","run":"x","agent":"worker"}),
            json!({"op":"open_run","run":"y","agent":"worker"}),
            json!({"op":"close_run","run":"y","status":"succeeded"}),
            json!({"op":"open_run","run":"w","agent":"worker"}),
        ],
    );
    assert_eq!(codes, ["ok", "log_error", "conflict", "ok"]);
    assert!(s.a.views().run("y").unwrap().is_none(), "y never landed");
    assert!(s.a.views().run("x").unwrap().is_some());
    assert!(s.a.views().run("w").unwrap().is_some());
    views_agree_with_the_log(&mut s.a, s.inner.as_ref(), s.dir.path(), "fresh");
    // Retried, as a platform would: it is decided afresh.
    assert_eq!(
        group(
            &mut s.a,
            &[
                json!({"op":"open_run","run":"y","agent":"worker"}),
                json!({"op":"close_run","run":"y","status":"succeeded"}),
            ]
        ),
        ["ok", "ok"]
    );
    views_agree_with_the_log(&mut s.a, s.inner.as_ref(), s.dir.path(), "fresh-2");
}
