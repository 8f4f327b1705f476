//! The serve loop's commit groups with the sync overlapped: a group
//! decided while the one before it syncs is answered only after both are
//! durable, and never when the one before it failed to sync.

use super::*;
use crate::content::store::ContentStore;
use crate::engine::EngineOptions;
use crate::log::embedded::{EmbeddedConfig, EmbeddedLog};
use crate::log::{GroupSync, Log, LogError, LogRecord};
use crate::server::ledger::Caller;
use crate::views::Views;
use serde_json::json;
use std::sync::atomic::AtomicBool;

/// The embedded log, whose next sealed group's sync fails when armed.
struct FailingSync {
    inner: Arc<EmbeddedLog>,
    fail_next: AtomicBool,
    sealed: std::sync::atomic::AtomicUsize,
}

struct Failed;

impl GroupSync for Failed {
    fn wait(self: Box<Self>) -> Result<(), LogError> {
        Err(LogError::Unavailable("fdatasync failed (injected)".into()))
    }
}

impl Log for FailingSync {
    fn partitions(&self, topic: Topic) -> u32 {
        self.inner.partitions(topic)
    }
    fn append(&self, topic: Topic, r: &[(Vec<u8>, Vec<u8>)]) -> Result<Vec<(u32, u64)>, LogError> {
        self.inner.append(topic, r)
    }
    fn begin_group(&self) {
        self.inner.begin_group()
    }
    fn end_group(&self) -> Result<(), LogError> {
        self.seal_group()?.wait()
    }
    fn seal_group(&self) -> Result<Box<dyn GroupSync>, LogError> {
        self.sealed.fetch_add(1, Ordering::SeqCst);
        let sync = self.inner.seal_group()?;
        if self.fail_next.swap(false, Ordering::SeqCst) {
            return Ok(Box::new(Failed));
        }
        Ok(sync)
    }
    fn read(&self, t: Topic, p: u32, from: u64, max: usize) -> Result<Vec<LogRecord>, LogError> {
        self.inner.read(t, p, from, max)
    }
    fn end_offset(&self, topic: Topic, partition: u32) -> Result<u64, LogError> {
        self.inner.end_offset(topic, partition)
    }
    fn wait_beyond(&self, t: Topic, p: u32, o: u64, d: Duration) -> Result<u64, LogError> {
        self.inner.wait_beyond(t, p, o, d)
    }
    fn describe(&self) -> String {
        "the embedded log with a sync that can be made to fail".into()
    }
}

fn setup(dir: &std::path::Path) -> (Arc<FailingSync>, Engine) {
    let inner = Arc::new(EmbeddedLog::open(dir.join("log"), &EmbeddedConfig::default()).unwrap());
    let log = Arc::new(FailingSync {
        inner,
        fail_next: AtomicBool::new(false),
        sealed: Default::default(),
    });
    let mut engine = Engine::with_parts(
        log.clone(),
        Views::open(dir.join("views")).unwrap(),
        ContentStore::open(dir.join("blobs")).unwrap(),
        EngineOptions::default(),
    );
    engine.catch_up(&|_| {}).unwrap();
    let publish = json!({"op":"publish_agent","agent":"developer","scope":"acme/platform"});
    let g = crate::protocol::reply_group(
        &mut engine,
        [(&crate::auth::Grant::operator(), None, Ok(publish))],
        None::<fn(&mut Engine)>,
    );
    assert!(g.answered[0].reply.is_ok(), "{:?}", g.answered[0].reply);
    (log, engine)
}

/// Jobs of `per_job` run opens each (runs `{prefix}-{job}-{i}`), sent
/// before the loop looks: the first ones fill a group
/// (`MAX_GROUP_LINES`), the rest make the next.
fn send(
    tx: &mpsc::Sender<Job>,
    prefix: &str,
    jobs: usize,
    per_job: usize,
) -> Vec<oneshot::Receiver<OpsAnswer>> {
    (0..jobs)
        .map(|j| {
            let lines = (0..per_job)
                .map(|i| Ok(json!({"op":"open_run","run":format!("{prefix}-{j}-{i}"),"agent":"developer"})))
                .collect();
            let (reply, rx) = oneshot::channel();
            tx.send(Job::Ops {
                caller: Caller::Operator,
                span: None,
                refer: false,
                lines,
                reply,
            })
            .unwrap();
            rx
        })
        .collect()
}

fn answers(rxs: Vec<oneshot::Receiver<OpsAnswer>>) -> Vec<Reply> {
    rxs.into_iter()
        .flat_map(|rx| rx.blocking_recv().unwrap().unwrap())
        .collect()
}

/// Run the serve loop's jobs as it would, from the first one waiting.
fn run_waiting(
    engine: &mut Engine,
    rx: &mpsc::Receiver<Job>,
    summary: &mut Summary,
) -> Result<Option<Result<DispatchAnswer, LedgerError>>, LedgerError> {
    let first = rx.recv().unwrap();
    run_jobs(engine, Some(first), rx, &Metrics::new(), summary, None)
}

/// Fresh views projected from what the log holds.
fn projected_again(dir: &std::path::Path, log: &FailingSync) -> Views {
    let views = Views::open(dir.join("views-again")).unwrap();
    crate::projector::project_all(log, &views, None, &|_| {}).unwrap();
    views
}

#[test]
fn groups_decided_while_the_one_before_syncs_are_all_answered_once_durable() {
    let d = tempfile::tempdir().unwrap();
    let (log, mut engine) = setup(d.path());
    let (tx, rx) = mpsc::channel();
    // 3 × 3,000 lines: jobs 0 and 1 make the first group, job 2 the next,
    // decided while the first syncs.
    let rxs = send(&tx, "r", 3, 3000);
    let sealed = log.sealed.load(Ordering::SeqCst);
    let mut summary = Summary::default();
    run_waiting(&mut engine, &rx, &mut summary).unwrap();
    assert_eq!(log.sealed.load(Ordering::SeqCst) - sealed, 2, "two groups");
    assert!(!engine.group_in_flight());
    let replies = answers(rxs);
    assert_eq!(replies.len(), 9000);
    assert!(replies.iter().all(Reply::is_ok));
    assert_eq!(summary.ops, 9000);
    let durable: u64 = log.end_offsets(Topic::Ledger).unwrap().iter().sum();
    assert_eq!(durable, 9000, "every run opened is durable and visible");
    // A fresh engine over the same files finds every run.
    drop(engine);
    let views = projected_again(d.path(), &log);
    for j in 0..3 {
        assert!(views.run(&format!("r-{j}-2999")).unwrap().is_some());
    }
}

#[test]
fn a_group_decided_on_one_whose_sync_failed_is_never_answered_ok_nor_written() {
    let d = tempfile::tempdir().unwrap();
    let (log, mut engine) = setup(d.path());
    let (tx, rx) = mpsc::channel();
    let rxs = send(&tx, "r", 3, 3000);
    log.fail_next.store(true, Ordering::SeqCst);
    let err = run_waiting(&mut engine, &rx, &mut Summary::default())
        .expect_err("a failed sync stops the loop");
    assert!(err.to_string().contains("fdatasync failed"), "{err}");
    let replies = answers(rxs);
    assert_eq!(replies.len(), 9000, "every caller is answered");
    for (i, r) in replies.iter().enumerate() {
        let Reply::Failed(f) = r else {
            panic!("line {i} answered ok after its group's sync failed")
        };
        assert_eq!(f.error.code, Code::LogError, "{}", f.error.message);
        let why = if i < 6000 {
            "could not be made durable: "
        } else {
            "decided after a group whose records could not be made durable"
        };
        assert!(
            f.error.message.contains(why),
            "line {i}: {}",
            f.error.message
        );
    }
    // The second group was never sealed: none of its records reached the
    // log (the first group's did; only its sync was made to fail).
    drop(engine);
    let durable: u64 = log.end_offsets(Topic::Ledger).unwrap().iter().sum();
    assert!(durable <= 6000, "{durable} records durable");
    let views = projected_again(d.path(), &log);
    assert!(views.run("r-2-0").unwrap().is_none());
}

/// Agents whose runs let events out: the developer's `code.ready`
/// starts the reviewer.
fn with_listeners(engine: &mut Engine) {
    let lines = [
        json!({"op":"publish_agent","agent":"developer","scope":"acme/platform","listens":[],
               "emits":[{"event":"code.ready","context":"change","artifacts":["patch"]}]}),
        json!({"op":"publish_agent","agent":"reviewer","scope":"acme/platform","listens":["code.ready"],"emits":[]}),
        json!({"op":"open_run","run":"r1","agent":"developer"}),
        json!({"op":"open_run","run":"r2","agent":"developer"}),
    ];
    all_ok(engine, lines);
}

/// `lines` by the operator as one group (no sweep), every one answered ok.
fn all_ok<const N: usize>(
    engine: &mut Engine,
    lines: [serde_json::Value; N],
) -> crate::protocol::Group<()> {
    let op = crate::auth::Grant::operator();
    let g = crate::protocol::reply_group(
        engine,
        lines.into_iter().map(|l| (&op, None, Ok(l))),
        None::<fn(&mut Engine)>,
    );
    assert!(
        g.answered.iter().all(|a| a.reply.is_ok()),
        "{:?}",
        g.answered
    );
    g
}

fn close(run: &str) -> serde_json::Value {
    json!({"op":"close_run","run":run,"status":"succeeded","artifacts":{"patch":"a patch"}})
}

/// The rounds of syncs since `from` of the journal: the topic of each
/// (one topic's partitions sync together).
fn synced_topics(log: &FailingSync, from: usize) -> Vec<String> {
    let mut topics: Vec<String> = log.inner.sync_journal()[from..]
        .iter()
        .map(|(p, _)| p.split('/').next().unwrap_or_default().to_string())
        .collect();
    topics.dedup();
    topics
}

#[test]
fn a_close_and_its_dispatch_in_one_group_make_the_close_durable_before_its_events() {
    let d = tempfile::tempdir().unwrap();
    let (log, mut engine) = setup(d.path());
    with_listeners(&mut engine);
    let from = log.inner.sync_journal().len();
    let g = all_ok(&mut engine, [close("r1"), json!({"op":"dispatch"})]);
    assert!(
        g.answered[1].reply.to_value()["opened"][0]["agent"] == "reviewer",
        "the dispatch opened the listener: {:?}",
        g.answered[1].reply
    );
    // A crash between two syncs leaves durable only what stands on what
    // is: the close, then the event it lets out, then the note of it.
    assert_eq!(
        synced_topics(&log, from),
        ["ledger", "published", "ledger"],
        "{:?}",
        log.inner.sync_journal()
    );
}

#[test]
fn the_serve_loops_sweep_goes_first_in_its_group_so_the_group_syncs_in_one_phase() {
    let d = tempfile::tempdir().unwrap();
    let (log, mut engine) = setup(d.path());
    with_listeners(&mut engine);
    all_ok(&mut engine, [close("r1")]);
    // The next group: r2's close, with the sweep dispatching r1.
    let (tx, rx) = mpsc::channel();
    let (reply, answer) = oneshot::channel();
    tx.send(Job::Ops {
        caller: Caller::Operator,
        span: None,
        refer: false,
        lines: vec![Ok(close("r2"))],
        reply,
    })
    .unwrap();
    let from = log.inner.sync_journal().len();
    let mut sweep = |e: &mut Engine| e.dispatch();
    let first = rx.recv().unwrap();
    let swept = run_jobs(
        &mut engine,
        Some(first),
        &rx,
        &Metrics::new(),
        &mut Summary::default(),
        Some(&mut sweep),
    )
    .unwrap();
    let swept = swept.expect("the sweep ran").unwrap();
    assert_eq!(swept.dispatched_runs, 1, "r1 only: r2 closed after it");
    assert!(answer.blocking_recv().unwrap().unwrap()[0].is_ok());
    assert_eq!(
        synced_topics(&log, from),
        ["published", "ledger"],
        "{:?}",
        log.inner.sync_journal()
    );
    assert!(engine
        .views()
        .run("r2")
        .unwrap()
        .is_some_and(|r| !r.dispatched));
}
