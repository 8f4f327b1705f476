//! The engine: the imperative shell around the rules. Every operation reads
//! the views, asks a pure rule what to do, appends the decided records to
//! the log (durably), and projects them into the views. Refusals that the
//! trail must show are recorded before the refusal is answered.

mod context;
mod dispatcher;
mod open;
mod recent;
mod registry;
mod runs;

pub use context::{SendAnswer, TaskStats};
pub use dispatcher::{DispatchAnswer, OpenedListener, RefusedListener, WithheldRun};
pub(crate) use open::guarded;
pub use open::DataDir;
pub use registry::{PublishAgent, PublishAnswer};
pub use runs::{CloseAnswer, CloseRun, OpenAnswer, ReadAnswer};

use crate::audit::checkpoint::CHAINED_TOPICS;
use crate::codec;
use crate::codes::Code;
use crate::content_store::ContentStore;
use crate::error::{LedgerError, Refusal, Result};
use crate::log::embedded::{EmbeddedConfig, EmbeddedLog};
use crate::log::{Log, Topic};
use crate::loops::{AgentIndex, LoopBounds};
use crate::model::LedgerEvent;
use crate::projector::{self, Position};
use crate::views::Views;
use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How many records the projector folds into one atomic view batch.
pub const PROJECT_BATCH: usize = 2000;

/// Milliseconds since the Unix epoch.
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

pub fn system_clock() -> Clock {
    Arc::new(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    })
}

/// Options of an engine instance.
#[derive(Clone)]
pub struct EngineOptions {
    pub writer: String,
    pub clock: Clock,
    pub loop_bounds: LoopBounds,
    pub embedded: EmbeddedConfig,
    /// How old the views may be when an operation is decided. Zero (the
    /// default) catches up with the log before every operation; on Kafka
    /// that is a round trip to the broker, so a small bound saves it on
    /// back-to-back operations. Records another writer appended meanwhile
    /// are never lost: a commit that finds them projects them first, and an
    /// operation that lost a race for the same step is answered `conflict`.
    pub max_staleness: Duration,
}

impl Default for EngineOptions {
    fn default() -> Self {
        Self {
            writer: format!("agentledger-{}", env!("CARGO_PKG_VERSION")),
            clock: system_clock(),
            loop_bounds: LoopBounds::default(),
            embedded: EmbeddedConfig::default(),
            max_staleness: Duration::ZERO,
        }
    }
}

/// One record the engine decided to write.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub topic: Topic,
    pub key: String,
    pub event_id: String,
    pub step: u32,
    pub event: LedgerEvent,
}

impl Pending {
    /// The next step of an existing run's trail, keyed on its chain.
    pub(crate) fn step(run: &crate::views::RunState, step: u32, event: LedgerEvent) -> Self {
        Pending {
            topic: Topic::Ledger,
            key: runs::chain_key(run),
            event_id: crate::model::ids::step_event_id(&run.run, step),
            step,
            event,
        }
    }
}

pub struct Engine {
    log: Arc<dyn Log>,
    views: Views,
    store: ContentStore,
    opts: EngineOptions,
    /// In-memory index of current agent versions for the loop search, and
    /// the registry offset it is up to date with; built from the views on
    /// first use (see `registry::agent_index`).
    agent_index: Option<(AgentIndex, u64)>,
    /// When the views last caught up with the whole log.
    caught_up_at: Option<std::time::Instant>,
    recent: recent::RecentDigests,
    /// The checkpoint mark last read per partition. Marks only move
    /// forward, so it is a floor: while fewer records than an interval lie
    /// past it, no checkpoint is due and the mark need not be read again.
    mark_floor: HashMap<(Topic, u32), u64>,
    /// Follow-ups of durable operations that failed (see `commit`).
    follow_ups: Vec<String>,
    _lock: Option<File>,
}

impl Engine {
    /// Open the engine on the embedded log in `data`, projecting whatever
    /// the views have not seen yet.
    pub fn open_embedded(data: impl AsRef<Path>, opts: EngineOptions) -> Result<Self> {
        let dd = DataDir::new(data);
        let lock = dd.lock()?;
        let log = Arc::new(EmbeddedLog::open(dd.log(), &opts.embedded)?);
        Self::open_on(dd, lock, log, opts)
    }

    /// Open the engine on an existing embedded log for commands that only
    /// read the ledger (auditors, status): the log is opened read-only, so
    /// a torn tail is reported and left in place, and any operation that
    /// would append is refused by the log. The views may still be projected.
    pub fn open_embedded_read_only(data: impl AsRef<Path>, opts: EngineOptions) -> Result<Self> {
        let dd = DataDir::new(data);
        let log = Arc::new(EmbeddedLog::open_read_only(dd.log(), &opts.embedded)?);
        let lock = dd.lock()?;
        Self::open_on(dd, lock, log, opts)
    }

    /// The data dir's views and content store around a log, caught up.
    fn open_on(dd: DataDir, lock: File, log: Arc<dyn Log>, opts: EngineOptions) -> Result<Self> {
        let views = open::open_views(&dd, log.as_ref())?;
        let store = ContentStore::open(dd.blobs())?;
        let mut engine = Self::with_parts(log, views, store, opts);
        engine._lock = Some(lock);
        engine.caught_up_at = Some(std::time::Instant::now());
        Ok(engine)
    }

    /// Open the engine on Kafka: the log is the cluster's topics; the views
    /// and the content store live in `data` on this machine.
    pub fn open_kafka(
        data: impl AsRef<Path>,
        kafka: &crate::log::kafka::KafkaConfig,
        opts: EngineOptions,
    ) -> Result<Self> {
        let dd = DataDir::new(data);
        let lock = dd.lock()?;
        let log = Arc::new(crate::log::kafka::KafkaLog::connect(kafka)?);
        Self::open_on(dd, lock, log, opts)
    }

    /// Assemble an engine from parts (any log backend).
    pub fn with_parts(
        log: Arc<dyn Log>,
        views: Views,
        store: ContentStore,
        opts: EngineOptions,
    ) -> Self {
        Self {
            log,
            views,
            store,
            opts,
            agent_index: None,
            caught_up_at: None,
            recent: Default::default(),
            mark_floor: HashMap::new(),
            follow_ups: Vec::new(),
            _lock: None,
        }
    }

    pub fn views(&self) -> &Views {
        &self.views
    }

    pub fn log(&self) -> &Arc<dyn Log> {
        &self.log
    }

    pub fn store(&self) -> &ContentStore {
        &self.store
    }

    pub fn now_ms(&self) -> u64 {
        (self.opts.clock)()
    }

    /// A run's trail (or its chain's), records read back from the log.
    pub fn trail(&self, run: &str, whole_chain: bool) -> Result<Vec<crate::views::TrailStep>> {
        Ok(
            crate::report::collect_trail(&self.views, self.log.as_ref(), run, whole_chain)?
                .into_iter()
                .map(|(_, s)| s)
                .collect(),
        )
    }

    /// Remove from the content store the bytes that no live reference in
    /// the ledger holds (every artifact is live; a task's blob grant until
    /// its TTL passes), once they are older than `grace`. Catches up first,
    /// so references another writer recorded count.
    pub fn sweep_content(&mut self, grace: Duration) -> Result<crate::content_store::SweepReport> {
        self.catch_up(&|_| {})?;
        let now = self.now_ms();
        let views = &self.views;
        self.store.sweep(
            &mut |sha| Ok(views.content_deadline(sha)?.is_some_and(|d| d > now)),
            grace,
        )
    }

    /// Make sure view writes reach disk (the CLI calls it before exiting).
    pub fn flush(&self) -> Result<()> {
        self.views.flush()?;
        Ok(())
    }

    /// Encode and durably append decided records, then project them.
    ///
    /// Once the log has the records the operation has happened, whatever
    /// fails after: projecting them (the views catch up from the log on the
    /// next operation) or writing a due checkpoint (written by the next
    /// operation on that partition, or by `serve`). Such a failure is kept
    /// as a follow-up warning for the answer ([`Engine::take_follow_ups`]),
    /// never as the operation's error. Only a `conflict` found while
    /// projecting (another writer decided the same step first) fails it.
    pub(crate) fn commit(&mut self, pending: Vec<Pending>) -> Result<Vec<Position>> {
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now_ms();
        let mut encoded: Vec<Vec<u8>> = Vec::with_capacity(pending.len());
        for p in &pending {
            let bytes = codec::encode(&p.event, &p.event_id, &p.key, now, &self.opts.writer, p.step)
                .map_err(|e| match e {
                    codec::CodecError::TooLarge(size) => LedgerError::from(Refusal::new(Code::TooLarge,
                        format!(
                            "the {} record of this operation is {size} bytes; the log takes records of at most {} bytes",
                            p.event.kind(),
                            codec::MAX_RECORD_BYTES
                        ),
                    )),
                    other => other.into(),
                })?;
            encoded.push(bytes);
        }
        // Per topic: indexes into `pending`, and the (key, bytes) to append.
        type TopicBatch = (Topic, Vec<usize>, Vec<(Vec<u8>, Vec<u8>)>);
        let mut by_topic: Vec<TopicBatch> = Vec::new();
        for (i, p) in pending.iter().enumerate() {
            let rec = (p.key.clone().into_bytes(), encoded[i].clone());
            match by_topic.iter_mut().find(|(t, _, _)| *t == p.topic) {
                Some((_, idx, recs)) => {
                    idx.push(i);
                    recs.push(rec);
                }
                None => by_topic.push((p.topic, vec![i], vec![rec])),
            }
        }
        let mut positions = vec![
            Position {
                partition: 0,
                offset: 0
            };
            pending.len()
        ];
        // Registry first: a run record may name a version published in the same call.
        by_topic.sort_by_key(|(t, _, _)| *t != Topic::Registry);
        // A call whose records all go to one partition (one operation on
        // one chain: the usual case) is projected while the log makes it
        // durable, as if it lands right after what the views hold; it is
        // written to the views only if it landed exactly there.
        let mut ahead: Option<Ahead<'_>> = None;
        let single = by_topic.len() == 1;
        for (topic, idx, recs) in by_topic {
            let appending = self.log.append_begin(topic, &recs)?;
            if single {
                ahead = project_ahead(self.log.as_ref(), &self.views, topic, &recs, &encoded)
                    .unwrap_or_else(|e| {
                        tracing::debug!("projecting ahead of the acknowledgement: {e}");
                        None
                    });
            }
            let placed = appending.wait()?;
            for (i, (partition, offset)) in idx.into_iter().zip(placed) {
                positions[i] = Position { partition, offset };
            }
        }
        // The records are durable: from here on nothing fails the operation
        // but a conflict.
        let projected = match ahead {
            Some(ahead) => write_if_landed(ahead, &positions, &mut self.recent),
            None => Ok(None),
        }
        .and_then(|done| match done {
            Some(touched) => Ok(touched),
            None => self.project_own(&pending, &encoded, &positions),
        });
        let touched = match projected {
            Ok(touched) => touched,
            Err(e) if e.is_refusal() => return Err(e),
            Err(e) => {
                self.caught_up_at = None;
                self.follow_up_failed(format!(
                    "the operation's records are in the log, but projecting them failed \
                     (the views catch up on the next operation): {e}"
                ));
                Vec::new()
            }
        };
        // Only the partitions this call wrote can have reached an interval.
        if let Err(e) = self.checkpoint_partitions(false, &touched) {
            self.follow_up_failed(format!(
                "the operation's records are in the log, but writing a due checkpoint failed \
                 (retried on the next operation on that partition, and by `serve`): {e}"
            ));
        }
        Ok(positions)
    }

    /// A follow-up of a durable operation failed: keep it for the answer.
    fn follow_up_failed(&mut self, what: String) {
        tracing::warn!("{what}");
        self.follow_ups.push(what);
    }

    /// Follow-ups that failed since the last call (see [`Engine::commit`]):
    /// the operation they belong to happened; these say what is still to
    /// be done and will be retried.
    pub fn take_follow_ups(&mut self) -> Vec<String> {
        std::mem::take(&mut self.follow_ups)
    }

    /// Project the records this call appended; returns the partitions of
    /// chained topics they touched (where a checkpoint may now be due).
    fn project_own(
        &mut self,
        pending: &[Pending],
        encoded: &[Vec<u8>],
        positions: &[Position],
    ) -> Result<Vec<(Topic, u32)>> {
        // Project what this call appended (registry first), partition by
        // partition. When nothing else arrived before our records — the
        // usual case — apply them from the bytes we hold instead of reading
        // them back from the log (on Kafka a read is a round trip).
        // (topic, partition) → (offset, index into `pending`) of our records.
        type Group = ((Topic, u32), Vec<(u64, usize)>);
        let mut groups: Vec<Group> = Vec::new();
        for (i, (p, pos)) in pending.iter().zip(positions).enumerate() {
            let key = (p.topic, pos.partition);
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => v.push((pos.offset, i)),
                None => groups.push((key, vec![(pos.offset, i)])),
            }
        }
        groups.sort_by_key(|((t, part), _)| (*t != Topic::Registry, *part));
        let touched: Vec<(Topic, u32)> = groups
            .iter()
            .map(|(k, _)| *k)
            .filter(|(t, _)| CHAINED_TOPICS.contains(t))
            .collect();
        for ((topic, part), mut recs) in groups {
            recs.sort();
            let first = recs[0].0;
            let contiguous = recs.windows(2).all(|w| w[1].0 == w[0].0 + 1);
            if contiguous && self.views.offset(topic, part)? == first {
                let batch = recs
                    .iter()
                    .map(|(offset, i)| Ok((*offset, codec::decode_for_projection(&encoded[*i])?)))
                    .collect::<Result<DecodedBatch>>()?;
                apply_batch(&self.views, topic, part, batch)?;
                if CHAINED_TOPICS.contains(&topic) {
                    for (offset, i) in &recs {
                        let digest = crate::audit::hashchain::record_digest(&encoded[*i])?;
                        self.recent.record(topic, part, *offset, digest);
                    }
                }
            } else {
                self.recent.forget(topic, part);
                let until = recs.last().map(|(o, _)| o + 1);
                project_partition(self.log.as_ref(), &self.views, topic, part, until, &|_| {})?;
                for (offset, i) in &recs {
                    self.check_landed(&pending[*i], part, *offset)?;
                }
            }
        }
        Ok(touched)
    }

    /// Write checkpoints (R16): every full interval of records not yet
    /// covered, and with `force` also the partial tail, so that everything
    /// in the log is attested. Returns what was written.
    pub fn checkpoint(&mut self, force: bool) -> Result<Vec<crate::audit::Checkpoint>> {
        let all: Vec<(Topic, u32)> = CHAINED_TOPICS
            .into_iter()
            .flat_map(|t| (0..self.log.partitions(t)).map(move |p| (t, p)))
            .collect();
        self.checkpoint_partitions(force, &all)
    }

    fn checkpoint_partitions(
        &mut self,
        force: bool,
        partitions: &[(Topic, u32)],
    ) -> Result<Vec<crate::audit::Checkpoint>> {
        use crate::audit::checkpoint::{self, CHECKPOINT_INTERVAL};
        let mut written = Vec::new();
        let mut unfolded = false;
        for &(topic, p) in partitions {
            let end = self.views.offset(topic, p)?;
            let below_floor = |floor: &u64| end.saturating_sub(*floor) < CHECKPOINT_INTERVAL;
            if !force && self.mark_floor.get(&(topic, p)).is_some_and(below_floor) {
                continue;
            }
            let mut mark = self.views.checkpoint_mark(topic, p)?;
            // Read the views again next time if a checkpoint is written below.
            if end.saturating_sub(mark.to) < CHECKPOINT_INTERVAL {
                self.mark_floor.insert((topic, p), mark.to);
            } else {
                self.mark_floor.remove(&(topic, p));
            }
            loop {
                let to = if end - mark.to.min(end) >= CHECKPOINT_INTERVAL {
                    mark.to + CHECKPOINT_INTERVAL
                } else if force && end > mark.to {
                    end
                } else {
                    break;
                };
                let span = checkpoint::Span {
                    topic,
                    partition: p,
                    from: mark.to,
                    to,
                    prev_head: mark.head,
                };
                let cp = match self.recent.take(&span) {
                    Some(digests) => {
                        checkpoint::assemble(span, digests, self.now_ms(), &self.opts.writer)
                    }
                    None => checkpoint::build(
                        self.log.as_ref(),
                        span,
                        self.now_ms(),
                        &self.opts.writer,
                    )?,
                };
                let placed = checkpoint::append(self.log.as_ref(), std::slice::from_ref(&cp))?;
                // Fold our own checkpoint in from what we hold when
                // nothing came before it (a read on Kafka costs more
                // than the append did).
                match placed.first() {
                    Some(&(cp_part, at))
                        if self.views.offset(Topic::Checkpoints, cp_part)? == at =>
                    {
                        let mut txn = self.views.txn();
                        fold_checkpoint(&mut txn, &cp)?;
                        txn.set_offset(Topic::Checkpoints, cp_part, at + 1);
                        txn.commit()?;
                    }
                    _ => unfolded = true,
                }
                let head =
                    crate::audit::hashchain::from_hex32(&cp.head).unwrap_or(crate::audit::GENESIS);
                mark = crate::views::CheckpointMark { to, head };
                written.push(cp);
            }
        }
        if unfolded {
            project_checkpoints(self.log.as_ref(), &self.views)?;
        }
        Ok(written)
    }

    /// Project every record the views have not applied yet. Registry first,
    /// so a run's version is always known by the time its records arrive.
    pub fn catch_up(&mut self, progress: &dyn Fn(u64)) -> Result<u64> {
        let started = std::time::Instant::now();
        let applied = project_all(self.log.as_ref(), &self.views, progress)?;
        self.caught_up_at = Some(started);
        Ok(applied)
    }

    /// Catch up unless the views are younger than `max_staleness`; says
    /// whether it did.
    pub fn refresh(&mut self) -> Result<bool> {
        let young = self
            .caught_up_at
            .is_some_and(|t| t.elapsed() < self.opts.max_staleness);
        if young {
            return Ok(false);
        }
        self.catch_up(&|_| {})?;
        Ok(true)
    }

    /// After projecting records of other writers that came before ours:
    /// fail the operation if one of ours was kept out as a second decision
    /// for something another writer had already decided.
    fn check_landed(&self, p: &Pending, partition: u32, offset: u64) -> Result<()> {
        let conflict = |what: String| -> LedgerError {
            Refusal::new(Code::Conflict,
                format!(
                    "{what} was decided by another writer first; this operation was not applied \
                     (its record at {}/{partition}@{offset} is kept out of the views); decide it again",
                    p.topic
                ),
            )
            .into()
        };
        match &p.event {
            LedgerEvent::AgentPublished(v) => {
                if self.views.version(&v.agent, v.version)?.as_ref() != Some(v) {
                    return Err(conflict(format!(
                        "version {} of agent {:?}",
                        v.version, v.agent
                    )));
                }
            }
            ev => {
                if let Some(run) = ev.trail_run() {
                    let held = self.views.trail_pointer(run, p.step)?;
                    if !held.is_some_and(|h| h.partition == partition && h.offset == offset) {
                        return Err(conflict(format!("step {} of run {run:?}", p.step)));
                    }
                }
            }
        }
        Ok(())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        // sled batches become durable on flush; a crash before it only makes
        // the projector redo them from the offsets written with them.
        if let Err(e) = self.views.flush() {
            tracing::warn!("flushing views on close: {e}");
        }
    }
}

/// Fold the log into the views from their stored offsets to the log's end.
pub fn project_all(log: &dyn Log, views: &Views, progress: &dyn Fn(u64)) -> Result<u64> {
    let mut applied = 0u64;
    // Ask for every projected topic's ends at once (on Kafka each is a
    // round trip), then read only partitions that have something new.
    let topics = [Topic::Registry, Topic::Ledger, Topic::Checkpoints];
    let ends = log.end_offsets_of(&topics)?;
    let mut checkpoints_behind = false;
    for (topic, ends) in topics.into_iter().zip(ends) {
        for (p, end) in ends.into_iter().enumerate() {
            let p = p as u32;
            if views.offset(topic, p)? >= end {
                continue;
            }
            match topic {
                Topic::Checkpoints => checkpoints_behind = true,
                _ => applied += project_partition(log, views, topic, p, None, progress)?,
            }
        }
    }
    if checkpoints_behind {
        project_checkpoints(log, views)?;
    }
    Ok(applied)
}

/// Fold one partition into the views, to its end or (when the caller knows
/// what it just appended) until `until` is projected, which spares asking
/// the log where its end is once more.
pub fn project_partition(
    log: &dyn Log,
    views: &Views,
    topic: Topic,
    p: u32,
    until: Option<u64>,
    progress: &dyn Fn(u64),
) -> Result<u64> {
    if until.is_none() {
        return project_partition_pipelined(log, views, topic, p, progress);
    }
    let mut applied = 0u64;
    loop {
        let from = views.offset(topic, p)?;
        if until.is_some_and(|u| from >= u) {
            break;
        }
        let recs = log.read(topic, p, from, PROJECT_BATCH)?;
        if recs.is_empty() {
            break;
        }
        let batch = decode_batch(topic, p, recs)?;
        applied += apply_batch(views, topic, p, batch)?;
    }
    progress(applied);
    Ok(applied)
}

type DecodedBatch = Vec<(u64, crate::codec::Record)>;

fn decode_batch(topic: Topic, p: u32, recs: Vec<crate::log::LogRecord>) -> Result<DecodedBatch> {
    recs.into_iter()
        .map(|r| {
            codec::decode_for_projection(&r.payload)
                .map(|rec| (r.offset, rec))
                .map_err(|e| {
                    LedgerError::Other(format!(
                        "record {topic}/{p}@{} cannot be projected: {e} (run `agentledger verify`)",
                        r.offset
                    ))
                })
        })
        .collect()
}

/// A call's records projected before the log acknowledged them: the view
/// changes they make if they land at `first`, `first + 1`, … of
/// `partition`, and their digests for the checkpoints.
struct Ahead<'a> {
    topic: Topic,
    partition: u32,
    first: u64,
    write: crate::views::txn::Prepared<'a>,
    digests: Vec<[u8; 32]>,
}

/// Project `recs` (encoded as `encoded`, in call order) as if appended now
/// to a log nobody else writes; `None` when they span partitions.
fn project_ahead<'a>(
    log: &dyn Log,
    views: &'a Views,
    topic: Topic,
    recs: &[(Vec<u8>, Vec<u8>)],
    encoded: &[Vec<u8>],
) -> Result<Option<Ahead<'a>>> {
    let Some(partition) = recs.first().map(|(k, _)| log.partition_of(topic, k)) else {
        return Ok(None);
    };
    if recs
        .iter()
        .any(|(k, _)| log.partition_of(topic, k) != partition)
    {
        return Ok(None);
    }
    let first = views.offset(topic, partition)?;
    let batch = encoded
        .iter()
        .enumerate()
        .map(|(i, bytes)| Ok((first + i as u64, codec::decode_for_projection(bytes)?)))
        .collect::<Result<DecodedBatch>>()?;
    let digests = if CHAINED_TOPICS.contains(&topic) {
        encoded
            .iter()
            .map(|bytes| Ok(crate::audit::hashchain::record_digest(bytes)?))
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    let (write, _) = prepare_batch(views, topic, partition, batch)?;
    Ok(Some(Ahead {
        topic,
        partition,
        first,
        write,
        digests,
    }))
}

/// Write a projection made ahead of the acknowledgement if the records
/// landed where it assumed; returns the partition it touched, or `None`
/// (nothing written) when something else landed first.
fn write_if_landed(
    ahead: Ahead<'_>,
    positions: &[Position],
    recent: &mut recent::RecentDigests,
) -> Result<Option<Vec<(Topic, u32)>>> {
    let landed = positions
        .iter()
        .enumerate()
        .all(|(i, pos)| pos.partition == ahead.partition && pos.offset == ahead.first + i as u64);
    if !landed {
        return Ok(None);
    }
    ahead.write.commit()?;
    for (i, digest) in ahead.digests.into_iter().enumerate() {
        recent.record(ahead.topic, ahead.partition, ahead.first + i as u64, digest);
    }
    Ok(Some(vec![(ahead.topic, ahead.partition)]))
}

/// Apply one decoded batch and the offset it reaches in one atomic write.
fn apply_batch(views: &Views, topic: Topic, p: u32, batch: DecodedBatch) -> Result<u64> {
    let (write, n) = prepare_batch(views, topic, p, batch)?;
    write.commit()?;
    Ok(n)
}

/// The view changes of one decoded batch and the offset it reaches, ready
/// to be written at once; and how many records it holds.
fn prepare_batch(
    views: &Views,
    topic: Topic,
    p: u32,
    batch: DecodedBatch,
) -> Result<(crate::views::txn::Prepared<'_>, u64)> {
    let Some(last) = batch.last().map(|(o, _)| *o) else {
        return Ok((views.txn().prepare(), 0));
    };
    let n = batch.len() as u64;
    let mut txn = views.txn();
    for (offset, rec) in batch {
        projector::apply(
            &mut txn,
            Position {
                partition: p,
                offset,
            },
            rec,
        )?;
    }
    txn.set_offset(topic, p, last + 1);
    Ok((txn.prepare(), n))
}

/// A long catch-up (a rebuild): one thread reads and decodes the next batch
/// while this one applies the current one to sled.
fn project_partition_pipelined(
    log: &dyn Log,
    views: &Views,
    topic: Topic,
    p: u32,
    progress: &dyn Fn(u64),
) -> Result<u64> {
    let start = views.offset(topic, p)?;
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<DecodedBatch>>(2);
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut from = start;
            loop {
                let batch = log
                    .read(topic, p, from, PROJECT_BATCH)
                    .map_err(LedgerError::from)
                    .and_then(|recs| decode_batch(topic, p, recs));
                let stop = match &batch {
                    Ok(b) => match b.last() {
                        Some((o, _)) => {
                            from = o + 1;
                            false
                        }
                        None => true,
                    },
                    Err(_) => true,
                };
                if tx.send(batch).is_err() || stop {
                    return;
                }
            }
        });
        let mut applied = 0u64;
        for batch in rx {
            let batch = batch?;
            if batch.is_empty() {
                break;
            }
            let n = apply_batch(views, topic, p, batch)?;
            applied += n;
            progress(n);
        }
        Ok(applied)
    })
}

/// Follow the checkpoints topic: each partition's mark is the furthest
/// checkpoint that continues the chain from the previous mark.
fn project_checkpoints(log: &dyn Log, views: &Views) -> Result<()> {
    for p in 0..log.partitions(Topic::Checkpoints) {
        loop {
            let from = views.offset(Topic::Checkpoints, p)?;
            let recs = log.read(Topic::Checkpoints, p, from, PROJECT_BATCH)?;
            let Some(last) = recs.last().map(|r| r.offset) else {
                break;
            };
            let mut txn = views.txn();
            for r in &recs {
                let Ok(cp) = serde_json::from_slice::<crate::audit::Checkpoint>(&r.payload) else {
                    tracing::warn!(
                        offset = r.offset,
                        "unreadable checkpoint record; `agentledger verify` will name it"
                    );
                    continue;
                };
                fold_checkpoint(&mut txn, &cp)?;
            }
            txn.set_offset(Topic::Checkpoints, p, last + 1);
            txn.commit()?;
        }
    }
    Ok(())
}

/// A checkpoint moves its partition's mark when it continues the chain
/// from there; any other (a duplicate, a forgery) leaves the mark alone.
fn fold_checkpoint(
    txn: &mut crate::views::ViewTxn<'_>,
    cp: &crate::audit::Checkpoint,
) -> Result<()> {
    let (Some(topic), Some(head)) = (cp.topic(), crate::audit::hashchain::from_hex32(&cp.head))
    else {
        return Ok(());
    };
    let key = crate::views::keys::checkpointed(topic, cp.partition);
    let mark: crate::views::CheckpointMark =
        txn.get(&key)?.unwrap_or(crate::views::CheckpointMark {
            to: 0,
            head: crate::audit::GENESIS,
        });
    if cp.from == mark.to && cp.to > mark.to && cp.prev_head == hex::encode(mark.head) {
        txn.put(key, &crate::views::CheckpointMark { to: cp.to, head });
    }
    Ok(())
}
