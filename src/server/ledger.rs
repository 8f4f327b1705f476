//! The one thread that owns the engine while `serve` runs. Between the
//! jobs the network hands it (operations, questions) it does what `serve`
//! always did: catch up with the log, dispatch the partitions this
//! instance owns, write checkpoints, sweep the content store. The engine
//! decides one operation at a time, so one owner keeps it simple and
//! correct; the transports only wait for their answers.

use crate::auth::Grant;
use crate::codes::Code;
use crate::engine::Engine;
use crate::log::Log;
use crate::protocol::{Failure, Reply};
use crate::server::metrics::Metrics;
use opentelemetry_sdk::trace::SpanData;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;

/// Where the serve loop tells the operator what changed (which ledger
/// partitions it dispatches): the CLI prints it on stderr.
pub type Say = Arc<dyn Fn(&str) + Send + Sync>;

/// How the serve loop paces itself, and whom it tells.
#[derive(Clone)]
pub struct LoopOptions {
    /// Consumer group of the instances serving one ledger (Kafka).
    pub group: String,
    /// How long to wait for work when there is none.
    pub poll: Duration,
    pub gc_interval: Duration,
    pub gc_grace: Duration,
    /// Checkpoint every partition's new records at least this often, so
    /// the records no checkpoint attests yet are bounded in time, not
    /// only in count.
    pub checkpoint_every: Duration,
    pub say: Say,
    /// Export each run this instance closes as OpenTelemetry spans.
    pub otlp: Option<Arc<crate::trace::otlp::LiveExporter>>,
    /// Dispatch finished runs in the loop (`--dispatch auto`, the
    /// default), or only when a client sends `dispatch` (`manual`: the
    /// platform learns of every listener opened from that op's answer).
    pub dispatch: bool,
}

/// What the serve loop shares with the server around it.
pub(crate) struct Shared<'a> {
    /// Set to stop the loop (the jobs already sent are answered).
    pub(crate) stop: &'a AtomicBool,
    /// Set once the views have caught up with the log.
    pub(crate) ready: &'a AtomicBool,
    pub(crate) metrics: &'a Metrics,
    /// Counts the handles (see `LedgerHandle::_alive`).
    pub(crate) handles: &'a Arc<()>,
    /// The group's members, for `GET /v1/cluster`.
    pub(crate) cluster: &'a std::sync::Mutex<super::cluster::ClusterView>,
}

pub use crate::protocol::Line;

/// Who sent a request, as far as the transport could tell: the operator
/// (it showed the server's own session token), or the hash of a bearer
/// token the views are asked about on this thread, where they live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    Operator,
    Token([u8; 32]),
    /// Authenticated at the edge already (a JWT that verified, a client
    /// certificate): the grant, and when the credential lapses (ms since
    /// the epoch), if it does. A connection that outlives its credential
    /// is refused from then on, each message and each stream recheck.
    Granted(Arc<Grant>, Option<u64>),
}

impl Caller {
    /// Whose share of the server's slots a request of this caller takes
    /// (see `shares`): the operator's session has none of its own.
    pub fn share(&self) -> Option<String> {
        match self {
            Caller::Operator => None,
            Caller::Token(sha) => Some(format!("token:{}", hex::encode(&sha[..16]))),
            Caller::Granted(grant, _) => Some(grant.principal.to_string()),
        }
    }
}

/// The grant `caller` has: `unauthenticated` for a token unknown, revoked
/// or expired.
pub fn grant_of(engine: &mut Engine, caller: &Caller) -> Result<Grant, Failure> {
    match caller {
        Caller::Operator => Ok(Grant::operator()),
        Caller::Granted(grant, Some(lapses)) if wall_clock_ms() >= *lapses => Err(Failure::new(
            Code::Unauthenticated,
            "the credential this connection showed has expired; connect again with a fresh one",
        )),
        Caller::Granted(grant, _) => Ok(grant.as_ref().clone()),
        Caller::Token(sha) => match engine.authenticate(sha) {
            Ok(Ok(grant)) => Ok(grant),
            Ok(Err(u)) => Err(Failure::new(Code::Unauthenticated, u.0)),
            Err(e) => Err(Failure::new(e.code(), e.to_string())),
        },
    }
}

/// Now, by the wall clock credentials are dated by.
pub(super) fn wall_clock_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What a job of operations is answered: one reply per line, or one
/// failure for all of them (the caller is not authenticated).
pub type OpsAnswer = Result<Vec<Reply>, Failure>;

/// A question for the engine, run on the ledger thread.
pub(super) type Call = Box<dyn FnOnce(&mut Engine) + Send>;

pub(super) enum Job {
    Ops {
        caller: Caller,
        /// The span the request's records name, if any.
        span: Option<crate::codec::SpanRef>,
        /// Whether lines of chains another instance owns are referred
        /// there (`not_owner`) rather than decided here: the caller's
        /// credential can be forwarded (see `engine::placement`).
        refer: bool,
        lines: Vec<Line>,
        reply: oneshot::Sender<OpsAnswer>,
    },
    Call(Call),
    /// Another writer appended to the ledger (see `tail::watch_tail`): look now.
    Wake,
}

/// The ledger thread has stopped (shut down, or failed): nothing more can
/// be answered.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the ledger is shutting down")]
pub struct Gone;

/// A handle the transports share; the thread stops once every handle is
/// dropped and the jobs already sent are answered.
#[derive(Clone)]
pub struct LedgerHandle {
    pub(super) tx: mpsc::Sender<Job>,
    pub log: Arc<dyn Log>,
    pub ready: Arc<AtomicBool>,
    /// Set when the thread has ended (stopped, or failed).
    pub ended: Arc<AtomicBool>,
    pub metrics: Arc<Metrics>,
    /// The group's members as the serve loop last read them.
    pub cluster: Arc<std::sync::Mutex<super::cluster::ClusterView>>,
    /// Spans made outside the ledger thread (one per MCP request), waiting
    /// for the OTLP exporter; `None` when the server exports none.
    pub live_spans: Option<Arc<std::sync::Mutex<std::collections::VecDeque<SpanData>>>>,
    /// Counts the handles: the tail watcher holds a sender of its own, so
    /// the channel alone cannot say when every handle is gone.
    pub(super) _alive: Arc<()>,
}

impl LedgerHandle {
    /// The cluster as this instance last read it (see `server::cluster`).
    pub fn cluster_view(&self) -> super::cluster::ClusterView {
        self.cluster
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Answer request lines from `caller` in order, as `apply` would.
    pub async fn ops(&self, caller: Caller, lines: Vec<Line>) -> Result<OpsAnswer, Gone> {
        self.send_ops(caller, None, false, lines).await
    }

    /// [`LedgerHandle::ops`]; with `refer`, lines of chains another
    /// instance owns are answered `not_owner` with a referral to it, not
    /// decided here.
    pub async fn ops_referring(
        &self,
        caller: Caller,
        lines: Vec<Line>,
        refer: bool,
    ) -> Result<OpsAnswer, Gone> {
        self.send_ops(caller, None, refer, lines).await
    }

    /// [`LedgerHandle::ops`] for a request whose span the server exports:
    /// the records its lines write name `span`.
    pub async fn ops_within(
        &self,
        caller: Caller,
        span: Option<crate::codec::SpanRef>,
        lines: Vec<Line>,
    ) -> Result<OpsAnswer, Gone> {
        self.send_ops(caller, span, false, lines).await
    }

    async fn send_ops(
        &self,
        caller: Caller,
        span: Option<crate::codec::SpanRef>,
        refer: bool,
        lines: Vec<Line>,
    ) -> Result<OpsAnswer, Gone> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job::Ops {
                caller,
                span,
                refer,
                lines,
                reply,
            })
            .map_err(|_| Gone)?;
        rx.await.map_err(|_| Gone)
    }

    /// Run `f` on the engine, between operations.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Engine) -> T + Send + 'static,
    ) -> Result<T, Gone> {
        let (reply, rx) = oneshot::channel();
        let job = Job::Call(Box::new(move |engine| {
            let _ = reply.send(f(engine));
        }));
        self.tx.send(job).map_err(|_| Gone)?;
        rx.await.map_err(|_| Gone)
    }
}

/// What the serve loop did, said when it stops.
#[derive(Debug, Default, Clone, Copy)]
pub struct Summary {
    pub dispatched_runs: u64,
    pub opened: u64,
    pub ops: u64,
}

/// The jobs the transports send, for a caller that owns the engine itself
/// and answers them between steps of its own: how the tests drive the
/// real transports against an engine they can still look into.
pub struct Jobs {
    pub(super) rx: mpsc::Receiver<Job>,
    pub(super) metrics: Arc<Metrics>,
}

/// A handle (ready at once) and the jobs sent through it.
pub fn channel(log: Arc<dyn Log>, metrics: Arc<Metrics>) -> (LedgerHandle, Jobs) {
    let (tx, rx) = mpsc::channel();
    let handle = LedgerHandle {
        tx,
        log,
        ready: Arc::new(AtomicBool::new(true)),
        ended: Arc::new(AtomicBool::new(false)),
        metrics: metrics.clone(),
        cluster: Default::default(),
        live_spans: None,
        _alive: Arc::new(()),
    };
    (handle, Jobs { rx, metrics })
}
