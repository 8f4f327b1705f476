//! The ledger thread: the one thread that owns the engine. It takes jobs
//! from the network face in groups — decides them, commits each group
//! with one sync, projects it — and between groups follows the log's tail,
//! sweeps expired keys and dispatches, until it is told to stop.

use crate::codes::Code;
use crate::engine::{DispatchAnswer, Engine};
use crate::error::LedgerError;
use crate::model::Topic;
pub use crate::protocol::Line;
use crate::protocol::{self, Reply};
use crate::server::cluster::{Announcer, ClusterView};
use crate::server::ledger::{
    grant_of, Caller, Job, Jobs, LedgerHandle, LoopOptions, OpsAnswer, Shared, Summary,
};
use crate::server::metrics::Metrics;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

impl Jobs {
    /// Answer the jobs waiting, as the ledger thread would, waiting up to
    /// `wait` for the first. Says whether there was any.
    pub fn answer_waiting(&self, engine: &mut Engine, wait: Duration) -> Result<bool, LedgerError> {
        match self.rx.recv_timeout(wait) {
            Ok(job) => {
                let mut summary = Summary::default();
                run_jobs(
                    engine,
                    Some(job),
                    &self.rx,
                    &self.metrics,
                    &mut summary,
                    None,
                )?;
                Ok(true)
            }
            Err(_) => Ok(false),
        }
    }
}

/// Open the engine on a thread of its own (with `open`) and run the serve
/// loop there until `stop` is set (then the jobs already sent are
/// answered) or every handle is dropped. Returns once the engine is open
/// (or failed to open).
pub fn start(
    open: impl FnOnce() -> Result<Engine, LedgerError> + Send + 'static,
    opts: LoopOptions,
    metrics: Arc<Metrics>,
    stop: Arc<AtomicBool>,
) -> Result<(LedgerHandle, JoinHandle<Result<Summary, LedgerError>>), LedgerError> {
    let live_spans = opts.otlp.as_ref().map(|_| Arc::default());
    let (tx, rx) = mpsc::channel::<Job>();
    let wake_tx = tx.clone();
    let handles = Arc::new(());
    let loop_handles = handles.clone();
    let (opened_tx, opened_rx) = mpsc::sync_channel(1);
    let ready = Arc::new(AtomicBool::new(false));
    let ended = Arc::new(AtomicBool::new(false));
    let thread_ready = ready.clone();
    let thread_ended = ended.clone();
    let thread_metrics = metrics.clone();
    let cluster = Arc::new(std::sync::Mutex::new(ClusterView {
        group: opts.group.clone(),
        ..ClusterView::default()
    }));
    let thread_cluster = cluster.clone();
    let thread = std::thread::Builder::new()
        .name("agentledger-ledger".into())
        .spawn(move || {
            let engine = match open() {
                Ok(e) => {
                    let _ = opened_tx.send(Ok(e.log().clone()));
                    e
                }
                Err(e) => {
                    let _ = opened_tx.send(Err(e));
                    return Err(LedgerError::Internal("the engine did not open"));
                }
            };
            let watcher = match engine.log().tail_watch(Topic::Ledger) {
                Ok(Some(w)) => Some(super::tail::watch_tail(w, wake_tx, stop.clone())),
                Ok(None) => None,
                Err(e) => {
                    tracing::warn!("cannot follow the ledger's tail ({e}); polling it instead");
                    None
                }
            };
            let result = serve_loop(
                engine,
                rx,
                &opts,
                Shared {
                    stop: &stop,
                    ready: &thread_ready,
                    metrics: &thread_metrics,
                    handles: &loop_handles,
                    cluster: &thread_cluster,
                },
            );
            if let Some(w) = watcher {
                // It looks at the stop flag at least every 100 ms.
                stop.store(true, Ordering::SeqCst);
                let _ = w.join();
            }
            if let Err(e) = &result {
                tracing::error!("the serve loop stopped: {e}");
            }
            thread_ended.store(true, Ordering::SeqCst);
            result
        })
        .map_err(|e| LedgerError::Io {
            context: "starting the ledger thread".into(),
            source: e,
        })?;
    let log = match opened_rx.recv() {
        Ok(Ok(log)) => log,
        Ok(Err(e)) => {
            let _ = thread.join();
            return Err(e);
        }
        Err(_) => {
            return Err(LedgerError::Internal(
                "the ledger thread ended while opening the engine",
            ))
        }
    };
    Ok((
        LedgerHandle {
            tx,
            log,
            ready,
            ended,
            metrics,
            cluster,
            live_spans,
            _alive: handles,
        },
        thread,
    ))
}

pub(crate) fn serve_loop(
    mut engine: Engine,
    rx: mpsc::Receiver<Job>,
    opts: &LoopOptions,
    shared: Shared<'_>,
) -> Result<Summary, LedgerError> {
    let Shared {
        stop,
        ready,
        metrics,
        handles,
        cluster,
    } = shared;
    let mut member = engine.log().join(&opts.group)?;
    let mut announcer = Announcer::default();
    tracing::info!(
        "serving {} as {}",
        engine.log().describe(),
        member.describe()
    );
    let mut summary = Summary::default();
    let mut last_sweep: Option<Instant> = None;
    let mut last_forced = Instant::now();
    let mut last_step: Option<Instant> = None;
    let mut owned_before = None;
    let mut busy = false;
    loop {
        if stop.load(Ordering::SeqCst) {
            // Answer what was sent before the stop, then end.
            while let Ok(job) = rx.try_recv() {
                run_jobs(&mut engine, Some(job), &rx, metrics, &mut summary, None)?;
            }
            break;
        }
        // Jobs first: a caller is waiting. The background work runs at
        // least once per poll interval even under load; the stop flag is
        // looked at every 100 ms at most.
        let due = |busy: bool, last: Option<Instant>| {
            busy || last.is_none_or(|t| t.elapsed() >= opts.poll)
        };
        let wait = if due(busy, last_step) {
            Duration::ZERO
        } else {
            opts.poll.min(Duration::from_millis(100))
        };
        let job = match rx.recv_timeout(wait) {
            // New records from another writer: dispatch now, not at the
            // next poll.
            Ok(Job::Wake) => {
                busy = true;
                None
            }
            Ok(job) => Some(job),
            // Every handle dropped (this loop holds one count of its own).
            Err(mpsc::RecvTimeoutError::Timeout) if Arc::strong_count(handles) == 1 => break,
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        if !due(busy, last_step) {
            if job.is_some() {
                let closed = engine.closed_runs();
                run_jobs(&mut engine, job, &rx, metrics, &mut summary, None)?;
                // A run closed here starts its listeners at once: the
                // next turn sweeps without waiting for the poll.
                busy = opts.dispatch && engine.closed_runs() != closed;
            }
            continue;
        }
        let owned = member.owned()?;
        announcer.turn(&mut *member, engine.writer(), &owned, cluster);
        let placement = cluster
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .placement(&owned);
        engine.place(placement);
        // In a group, the views follow what this instance owns: a
        // partition gained is caught up below, before any job of it.
        if member.shared() {
            engine.scope(&owned)?;
        }
        if owned_before.as_ref() != Some(&owned) {
            (opts.say)(&format!(
                "dispatching ledger partitions {:?}",
                owned.iter().collect::<Vec<_>>()
            ));
            owned_before = Some(owned.clone());
        }
        // Views rebuilt beside the live ones go in between operations.
        if let Some(r) = engine.finish_rebuild()? {
            (opts.say)(&match r.identical() {
                Some(true) => format!(
                    "rebuild {}: swapped in, identical to the views it replaced",
                    r.id
                ),
                Some(false) => format!(
                    "rebuild {}: swapped in; the views it replaced had DRIFTED",
                    r.id
                ),
                None if r.error.is_some() => format!(
                    "rebuild {} failed: {}",
                    r.id,
                    r.error.as_deref().unwrap_or("")
                ),
                None => format!(
                    "rebuild {}: swapped in (not compared: the log kept moving)",
                    r.id
                ),
            });
        }
        engine.catch_up(&|_| {})?;
        ready.store(true, Ordering::SeqCst);
        // The dispatch sweep joins the operations waiting now in one
        // commit group (ahead of them: it dispatches the closes of
        // groups before): one durable sync per partition for all of them.
        let mut sweep = |e: &mut Engine| e.dispatch_partitions(&|p| owned.contains(&p));
        if !opts.dispatch {
            // Manual: the jobs, without a sweep.
            run_jobs(&mut engine, job, &rx, metrics, &mut summary, None)?;
            busy = false;
        } else {
            let closed = engine.closed_runs();
            match run_jobs(
                &mut engine,
                job,
                &rx,
                metrics,
                &mut summary,
                Some(&mut sweep),
            )? {
                Some(Ok(a)) => {
                    summary.opened += a.opened.len() as u64;
                    summary.dispatched_runs += a.dispatched_runs;
                    metrics.dispatched(&a);
                    // Runs closed by the operations after the sweep are
                    // dispatched by the next turn, at once.
                    busy = a.dispatched_runs > 0 || engine.closed_runs() != closed;
                }
                // Another instance dispatched the same run first (this one was
                // too slow to notice its partition had moved): its records
                // stand, ours were kept out of the views. Carry on.
                Some(Err(LedgerError::Refused(r))) if r.code == Code::Conflict => {
                    tracing::warn!("{}", r.message);
                    busy = true;
                }
                Some(Err(e)) => return Err(e),
                // An operation of the group found the log failing: the sweep
                // was not run; the group's end says what happened.
                None => busy = true,
            }
        }
        let force = last_forced.elapsed() >= opts.checkpoint_every;
        engine.checkpoint(force)?;
        if force {
            last_forced = Instant::now();
        }
        if last_sweep.is_none_or(|t| t.elapsed() >= opts.gc_interval) {
            match engine.sweep_content(opts.gc_grace) {
                Ok(r) if r.removed > 0 || r.shared.as_ref().is_some_and(|s| s.removed > 0) => {
                    tracing::info!(
                        removed = r.removed,
                        bytes = r.removed_bytes,
                        shared_removed = r.shared.as_ref().map_or(0, |s| s.removed),
                        "content no live reference holds was removed"
                    )
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("sweeping the content store: {e}"),
            }
            last_sweep = Some(Instant::now());
        }
        last_step = Some(Instant::now());
    }
    drop(member);
    engine.flush()?;
    Ok(summary)
}

/// Most request lines decided in one commit group.
pub(crate) const MAX_GROUP_LINES: usize = 4096;

/// The serve loop's dispatch sweep, run inside a commit group.
pub(crate) type Sweep<'a> = &'a mut dyn FnMut(&mut Engine) -> Result<DispatchAnswer, LedgerError>;

/// Most commit groups decided in a row before the loop's work between
/// groups (checkpoints, questions, sweeps) gets a turn.
const MAX_PIPELINED: usize = 16;

/// Run `first` and, when it carries operations, every operation job
/// already waiting behind it as one commit group, with `sweep` (the
/// dispatch sweep) ahead of them in the same group: decided in order, made
/// durable together, answered after. While the group syncs (on the
/// engine's sync thread), operations that arrived meanwhile are decided
/// as the next group, sealed once this one has landed, and so on while
/// more keep coming (at most `MAX_PIPELINED` groups). A question waiting
/// among them runs after the last group has landed (it may read the log,
/// which shows only what is durable). Returns what the sweep did, when it
/// ran.
pub(crate) fn run_jobs(
    engine: &mut Engine,
    first: Option<Job>,
    rx: &mpsc::Receiver<Job>,
    metrics: &Metrics,
    summary: &mut Summary,
    sweep: Option<Sweep<'_>>,
) -> Result<Option<Result<DispatchAnswer, LedgerError>>, LedgerError> {
    let mut after = None;
    let mut group = Vec::new();
    match first {
        None | Some(Job::Wake) => {}
        Some(Job::Call(f)) => after = Some(f),
        Some(Job::Ops {
            caller,
            span,
            refer,
            lines,
            reply,
        }) => {
            group.push((caller, span, refer, lines, reply));
            gather(rx, &mut group, &mut after, MAX_GROUP_LINES);
        }
    }
    let mut swept = None;
    if !group.is_empty() || sweep.is_some() {
        let mut sweep = sweep;
        let mut flight: Option<Flight> = None;
        for round in 1.. {
            let mut next = decide(engine, group, sweep.take());
            // A group lands before the next one is sealed. Until its sync
            // ends, what arrives is decided into the next group.
            if let Some(f) = flight.take() {
                while after.is_none() && !engine.group_synced_yet() {
                    let mut more = Vec::new();
                    let room = MAX_GROUP_LINES.saturating_sub(next.decided.len());
                    gather(rx, &mut more, &mut after, room);
                    if more.is_empty() {
                        break;
                    }
                    decide_into(engine, &mut next, more);
                }
                match land(engine, f, metrics, summary) {
                    Ok(then) => swept = then.or(swept),
                    Err(e) => {
                        let abandoned = next.decided.abandon(&e);
                        let _ = answer(abandoned, next.senders, next.started, metrics, summary);
                        return Err(e);
                    }
                }
            }
            let mut more = Vec::new();
            if after.is_none() && round < MAX_PIPELINED {
                gather(rx, &mut more, &mut after, MAX_GROUP_LINES);
            }
            // With operations waiting, this group syncs on the sync thread
            // while they are decided; alone, it syncs here.
            next.decided.seal(engine, !more.is_empty());
            if engine.group_synced_yet() {
                // Durable when sealed (Kafka's pipelined groups), or to be
                // synced here: answered before anything else is decided.
                swept = land(engine, next, metrics, summary)?.or(swept);
            } else {
                flight = Some(next);
            }
            if more.is_empty() {
                break;
            }
            group = more;
        }
        if let Some(f) = flight {
            swept = land(engine, f, metrics, summary)?.or(swept);
        }
        engine.after_groups();
    }
    if let Some(f) = after {
        f(engine);
    }
    Ok(swept)
}

/// Take the operation jobs waiting, until `group` holds `limit` lines,
/// stopping at a question (kept in `after`).
fn gather(
    rx: &mpsc::Receiver<Job>,
    group: &mut Vec<OpsJob>,
    after: &mut Option<crate::server::ledger::Call>,
    limit: usize,
) {
    let mut lines: usize = group.iter().map(|(_, _, _, l, _)| l.len()).sum();
    while lines < limit {
        match rx.try_recv() {
            Ok(Job::Ops {
                caller,
                span,
                refer,
                lines: l,
                reply,
            }) => {
                lines += l.len();
                group.push((caller, span, refer, l, reply));
            }
            Ok(Job::Call(f)) => {
                *after = Some(f);
                break;
            }
            // The sweep this group is followed by looks anyway.
            Ok(Job::Wake) => {}
            Err(_) => break,
        }
    }
}

pub(crate) type OpsJob = (
    Caller,
    Option<crate::codec::SpanRef>,
    bool,
    Vec<Line>,
    oneshot::Sender<OpsAnswer>,
);

type Swept = Result<DispatchAnswer, LedgerError>;

/// A group decided, waiting to be answered once durable.
struct Flight {
    decided: protocol::Decided<Swept>,
    /// Each caller's line count and where its answers go.
    senders: Vec<(usize, oneshot::Sender<OpsAnswer>)>,
    started: Instant,
}

/// Decide a group of operation jobs (and the sweep) without sealing it.
fn decide(engine: &mut Engine, group: Vec<OpsJob>, sweep: Option<Sweep<'_>>) -> Flight {
    let started = Instant::now();
    let mut senders = Vec::with_capacity(group.len());
    let (grants, lines) = authenticated(engine, group, &mut senders);
    let mut decided = protocol::decide_group(engine, std::iter::empty(), sweep);
    decide_lines(engine, &mut decided, &grants, lines);
    Flight {
        decided,
        senders,
        started,
    }
}

/// Decide more operation jobs into a group not yet sealed.
fn decide_into(engine: &mut Engine, flight: &mut Flight, group: Vec<OpsJob>) {
    let (grants, lines) = authenticated(engine, group, &mut flight.senders);
    decide_lines(engine, &mut flight.decided, &grants, lines);
}

/// Decide the lines of a group's jobs, each job's with its own referring.
fn decide_lines(
    engine: &mut Engine,
    decided: &mut protocol::Decided<Swept>,
    grants: &[(crate::auth::Grant, bool)],
    lines: Lines,
) {
    let mut lines = lines.into_iter().peekable();
    while let Some(&(i, _, _)) = lines.peek() {
        let (grant, refer) = &grants[i];
        engine.refer(*refer);
        let job = std::iter::from_fn(|| lines.next_if(|(j, _, _)| *j == i));
        decided.decide_more(engine, job.map(|(_, span, line)| (grant, span, line)));
    }
    engine.refer(false);
}

type Lines = Vec<(usize, Option<crate::codec::SpanRef>, Line)>;

/// The grants of a group's callers (each with whether its lines are
/// referred elsewhere) and their lines (each with the index of its
/// grant); where each caller's answers go is added to `senders`.
fn authenticated(
    engine: &mut Engine,
    group: Vec<OpsJob>,
    senders: &mut Vec<(usize, oneshot::Sender<OpsAnswer>)>,
) -> (Vec<(crate::auth::Grant, bool)>, Lines) {
    let mut grants = Vec::with_capacity(group.len());
    let mut lines = Vec::new();
    for (caller, span, refer, l, reply) in group {
        // A caller that is not authenticated is answered at once, and
        // nothing of its request is decided or recorded.
        match grant_of(engine, &caller) {
            Ok(grant) => {
                senders.push((l.len(), reply));
                lines.extend(l.into_iter().map(|line| (grants.len(), span, line)));
                grants.push((grant, refer));
            }
            Err(f) => {
                let _ = reply.send(Err(f));
            }
        }
    }
    (grants, lines)
}

/// Wait for a sealed group's sync and answer its callers. A log that
/// cannot sync cannot be trusted with more: the error stops serving.
fn land(
    engine: &mut Engine,
    flight: Flight,
    metrics: &Metrics,
    summary: &mut Summary,
) -> Result<Option<Swept>, LedgerError> {
    let done = flight.decided.land(engine);
    answer(done, flight.senders, flight.started, metrics, summary)
}

/// Send a group's answers; returns what its sweep did once durable.
fn answer(
    done: protocol::Group<Swept>,
    senders: Vec<(usize, oneshot::Sender<OpsAnswer>)>,
    started: Instant,
    metrics: &Metrics,
    summary: &mut Summary,
) -> Result<Option<Swept>, LedgerError> {
    let took = started.elapsed();
    let mut answered = done.answered.into_iter();
    for (n, reply) in senders {
        let replies: Vec<Reply> = answered
            .by_ref()
            .take(n)
            .map(|a| {
                // A line referred to its owner is counted there.
                if a.reply.referral().is_none() {
                    summary.ops += 1;
                    metrics.answered(a.op.as_deref(), &a.reply, took);
                }
                a.reply
            })
            .collect();
        // The caller may have gone (timeout, disconnect): the operations
        // happened regardless, as with `apply`.
        let _ = reply.send(Ok(replies));
    }
    done.durable?;
    Ok(done.then)
}

#[cfg(test)]
#[path = "ledger_thread_tests.rs"]
mod tests;
