//! The embedded log: our own append-only segment files, no server.
//!
//! Layout: `<dir>/<prefix><topic>/<partition>/<base offset>.seg`. A frame is
//! `u32 LE len | u32 LE crc32 | u32 LE key len | key | payload`, where `len`
//! counts everything after the crc and the crc covers the same bytes.
//!
//! Durability: `append` writes its frames and returns only after an fsync
//! that covers them. Concurrent appenders share fsyncs (group commit): one
//! caller syncs for every frame written before it, so throughput under load
//! is not one fsync per record. Readers never see a record before it is
//! synced. On open, a torn tail (a frame cut short or failing its checksum
//! at the end of the last segment, as a crash mid-write leaves it) is cut
//! off and logged; a bad frame followed by good ones is corruption, not a
//! tear, and opening fails naming the file and position, cutting nothing.

pub mod frame;
mod partition;
mod syncing;
#[cfg(test)]
mod tests;

use super::{partition_for_key, GroupSync, Log, LogError, LogRecord, RecordRef};
use crate::model::Topic;
use frame::TornTail;
use partition::{sync_dir, Partition};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};
use syncing::{Due, Held, SealedGroup};

const HEADER: usize = 8;
/// Largest frame the log accepts (key + payload).
pub const MAX_FRAME_BYTES: usize = 16 * 1024 * 1024;
const SEGMENT_ROLL_BYTES: u64 = 128 * 1024 * 1024;

/// Partition counts of a new embedded log.
#[derive(Debug, Clone)]
pub struct EmbeddedConfig {
    pub topic_prefix: String,
    pub ledger_partitions: u32,
    pub segment_roll_bytes: u64,
}

impl Default for EmbeddedConfig {
    fn default() -> Self {
        Self {
            topic_prefix: String::new(),
            ledger_partitions: 4,
            segment_roll_bytes: SEGMENT_ROLL_BYTES,
        }
    }
}

pub struct EmbeddedLog {
    dir: PathBuf,
    topics: BTreeMap<Topic, Vec<Arc<Partition>>>,
    /// Inside a group (`Log::begin_group`): appends are given their
    /// offsets but written only by `seal_group`, and made durable — and
    /// visible — by its sync, with one fdatasync per partition written for
    /// the whole group.
    grouping: std::sync::atomic::AtomicBool,
    /// Where the group being appended stands in its phases.
    phasing: std::sync::Mutex<Phasing>,
    /// Threads that sync a group's partitions of one topic together.
    helpers: Arc<syncing::Helpers>,
    /// fdatasync calls made for appends, shared with every partition.
    syncs: Arc<std::sync::atomic::AtomicU64>,
    /// Torn tails a read-only open found and left in place.
    torn: Vec<TornTail>,
    #[cfg(test)]
    journal: Arc<std::sync::Mutex<Vec<(String, u64)>>>,
}

/// How a partition is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// A writer: creates what is missing and cuts a torn tail.
    Write,
    /// A reader that changes nothing.
    ReadOnly,
}

fn poisoned(label: &str) -> LogError {
    LogError::Unavailable(format!("{label}: a writer panicked while holding the lock"))
}

/// Where the checkpoints on the topic end, per (topic, partition): the
/// offset after the last record some checkpoint attests. Records below it
/// were durable before their checkpoint was written, so a bad frame there
/// is damage, never a crash's tear. Read only when a tail is to be cut;
/// a checkpoint record that does not parse attests nothing here.
fn attested_ends(checkpoints: &[Arc<Partition>]) -> BTreeMap<(String, u32), u64> {
    #[derive(serde::Deserialize)]
    struct Span {
        topic: String,
        partition: u32,
        to: u64,
    }
    let mut ends: BTreeMap<(String, u32), u64> = BTreeMap::new();
    for part in checkpoints {
        let mut at = 0;
        loop {
            let mut seen = 0u64;
            let after = part.scan(at, 256, &mut |r| {
                seen += 1;
                if let Ok(span) = serde_json::from_slice::<Span>(r.payload) {
                    let e = ends.entry((span.topic, span.partition)).or_default();
                    *e = (*e).max(span.to);
                }
                std::ops::ControlFlow::Continue(())
            });
            match after {
                Ok(a) if seen > 0 && a > at => at = a,
                _ => break,
            }
        }
    }
    ends
}

/// The name of the file holding a topic's partition count.
const PARTITIONS_FILE: &str = "partitions";

/// How many partitions a topic has: fixed when it is created and written
/// beside them, so a directory added or lost later is named rather than
/// taken as another partition count (which would move chains to other
/// partitions, or drop one's records unseen). A topic from before the
/// file counts its directories, which must then run 0, 1, … without a gap.
fn partition_count(
    tdir: &Path,
    topic: Topic,
    config: &EmbeddedConfig,
    access: Access,
) -> Result<u32, LogError> {
    let mut existing: Vec<u32> = match fs::read_dir(tdir) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()))
            .collect(),
        Err(_) => Vec::new(),
    };
    existing.sort_unstable();
    let file = tdir.join(PARTITIONS_FILE);
    let recorded = match fs::read_to_string(&file) {
        Ok(t) => Some(
            t.trim()
                .parse::<u32>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    LogError::Corrupt(format!(
                        "{}: not a partition count: {:?}",
                        file.display(),
                        t.chars().take(40).collect::<String>()
                    ))
                })?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(LogError::io(format!("read {}", file.display()), e)),
    };
    let count = match recorded {
        Some(n) => n,
        None if existing.is_empty() => match topic {
            Topic::Ledger => config.ledger_partitions.max(1),
            _ => 1,
        },
        None => existing.last().map_or(1, |m| m + 1),
    };
    let want: Vec<u32> = (0..count).collect();
    let fresh = existing.is_empty() && recorded.is_none();
    if !fresh && existing != want {
        let missing: Vec<u32> = want
            .iter()
            .filter(|p| !existing.contains(p))
            .copied()
            .collect();
        let extra: Vec<u32> = existing
            .iter()
            .filter(|p| !want.contains(p))
            .copied()
            .collect();
        return Err(LogError::Corrupt(format!(
            "{}: the topic has {count} partitions{}, but {}{}; nothing was opened (restore or remove the directories named)",
            tdir.display(),
            if recorded.is_some() { format!(" ({})", file.display()) } else { String::new() },
            if missing.is_empty() { String::new() } else { format!("partition directories {missing:?} are missing") },
            if extra.is_empty() { String::new() } else { format!("{}directories {extra:?} are not its partitions", if missing.is_empty() { "" } else { " and " }) },
        )));
    }
    if access == Access::Write && recorded.is_none() {
        crate::log::private_files::create_dir_all(tdir)
            .map_err(|e| LogError::io(format!("create {}", tdir.display()), e))?;
        let tmp = tdir.join(format!("{PARTITIONS_FILE}.tmp"));
        crate::log::private_files::write(&tmp, format!("{count}\n"))
            .and_then(|_| File::open(&tmp).and_then(|f| f.sync_all()))
            .and_then(|_| fs::rename(&tmp, &file))
            .map_err(|e| LogError::io(format!("write {}", file.display()), e))?;
        sync_dir(tdir)?;
    }
    Ok(count)
}

impl EmbeddedLog {
    /// Open (or create) the embedded log in `dir`. The partition count of a
    /// topic is fixed when the topic is first created and read back after.
    /// A torn tail is cut (see the module comment).
    pub fn open(dir: impl AsRef<Path>, config: &EmbeddedConfig) -> Result<Self, LogError> {
        Self::open_as(dir.as_ref(), config, Access::Write)
    }

    /// Open an existing embedded log to read it only: nothing is created,
    /// cut or appended (appends answer [`LogError::ReadOnly`]). A torn tail
    /// is reported by [`EmbeddedLog::torn_tails`] and left for the next
    /// writer to cut, so an audit never changes what it audits.
    pub fn open_read_only(
        dir: impl AsRef<Path>,
        config: &EmbeddedConfig,
    ) -> Result<Self, LogError> {
        let dir = dir.as_ref();
        if !dir.is_dir() {
            return Err(LogError::NoLedger(dir.display().to_string()));
        }
        Self::open_as(dir, config, Access::ReadOnly)
    }

    /// Every fdatasync of the log so far, in order: (partition, records
    /// durable after it).
    #[cfg(test)]
    pub(crate) fn sync_journal(&self) -> Vec<(String, u64)> {
        self.journal.lock().map(|j| j.clone()).unwrap_or_default()
    }

    /// Torn tails found and left in place by a read-only open.
    pub fn torn_tails(&self) -> &[TornTail] {
        &self.torn
    }

    fn open_as(dir: &Path, config: &EmbeddedConfig, access: Access) -> Result<Self, LogError> {
        crate::model::ids::check_topic_prefix(&config.topic_prefix)
            .map_err(|e| LogError::Config(e.to_string()))?;
        let dir = dir.to_path_buf();
        if access == Access::Write {
            crate::log::private_files::create_dir_all(&dir)
                .map_err(|e| LogError::io(format!("create {}", dir.display()), e))?;
        }
        let mut torn = Vec::new();
        let mut topics: BTreeMap<Topic, Vec<Arc<Partition>>> = BTreeMap::new();
        let syncs: Arc<std::sync::atomic::AtomicU64> = Default::default();
        #[cfg(test)]
        let journal: Arc<std::sync::Mutex<Vec<(String, u64)>>> = Default::default();
        // The checkpoints first: a tail of a ledger or registry partition
        // that a checkpoint attests is not cut as a tear (see `attested`).
        let order = std::iter::once(Topic::Checkpoints)
            .chain(Topic::ALL.into_iter().filter(|t| *t != Topic::Checkpoints));
        let attested: std::cell::OnceCell<BTreeMap<(String, u32), u64>> =
            std::cell::OnceCell::new();
        for topic in order {
            let tdir = dir.join(format!("{}{}", config.topic_prefix, topic.name()));
            let count = partition_count(&tdir, topic, config, access)?;
            let mut parts = Vec::with_capacity(count as usize);
            for p in 0..count {
                // Read only when a tail is to be cut.
                let attested_end = || -> Option<u64> {
                    if topic == Topic::Checkpoints {
                        return None;
                    }
                    let ends = attested.get_or_init(|| {
                        attested_ends(topics.get(&Topic::Checkpoints).map_or(&[][..], |v| v))
                    });
                    ends.get(&(topic.name().to_string(), p)).copied()
                };
                let (part, tail) = Partition::open(
                    tdir.join(p.to_string()),
                    format!("{}/{}", topic.name(), p),
                    config.segment_roll_bytes,
                    access,
                    &attested_end,
                )?;
                let mut part = part;
                part.syncs = syncs.clone();
                #[cfg(test)]
                {
                    part.journal = journal.clone();
                }
                parts.push(Arc::new(part));
                torn.extend(tail);
            }
            topics.insert(topic, parts);
        }
        if access == Access::Write {
            sync_dir(&dir)?;
        }
        Ok(Self {
            dir,
            topics,
            torn,
            grouping: Default::default(),
            phasing: Default::default(),
            helpers: Default::default(),
            syncs,
            #[cfg(test)]
            journal,
        })
    }

    fn partition(&self, topic: Topic, partition: u32) -> Result<&Partition, LogError> {
        self.topics
            .get(&topic)
            .and_then(|p| p.get(partition as usize))
            .map(|p| &**p)
            .ok_or(LogError::NoSuchPartition { topic, partition })
    }
}

/// The order a group's partitions are made durable in, so that a crash
/// between two syncs never leaves a record durable whose premise is not:
/// agent versions before the runs that name them, published events before
/// the ledger's note that they were published, the ledger before the
/// checkpoints that cover it.
const SYNC_ORDER: [Topic; 4] = [
    Topic::Registry,
    Topic::Published,
    Topic::Ledger,
    Topic::Checkpoints,
];

fn sync_rank(topic: Topic) -> usize {
    SYNC_ORDER
        .iter()
        .position(|t| *t == topic)
        .unwrap_or(SYNC_ORDER.len())
}

/// A commit group's phases. `SYNC_ORDER` says which topic's records may
/// stand on which, but within a group a record may also stand on one
/// appended before it to a topic synced later: a run's events go out
/// (`published`) only once its close (`ledger`) is durable, and a close
/// and the dispatch of its run may share a group. So an append to a topic
/// synced before one the current phase already holds starts a new phase,
/// and the seal makes the phases durable one after another, each in
/// `SYNC_ORDER` — a crash between two syncs leaves durable only records
/// whose premises are.
#[derive(Default)]
struct Phasing {
    phase: u32,
    /// The latest-synced topic appended to in this phase.
    top: Option<usize>,
}

impl Phasing {
    /// The phase of an append to `topic`.
    fn enter(&mut self, topic: Topic) -> u32 {
        let rank = sync_rank(topic);
        match self.top {
            Some(top) if rank < top => {
                self.phase += 1;
                self.top = Some(rank);
            }
            _ => self.top = Some(self.top.map_or(rank, |t| t.max(rank))),
        }
        self.phase
    }
}

impl Log for EmbeddedLog {
    fn partitions(&self, topic: Topic) -> u32 {
        self.topics.get(&topic).map(|p| p.len() as u32).unwrap_or(0)
    }

    fn begin_group(&self) {
        self.grouping
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn syncs(&self) -> u64 {
        self.syncs.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn end_group(&self) -> Result<(), LogError> {
        self.seal_group()?.wait()
    }

    fn seal_group(&self) -> Result<Box<dyn GroupSync>, LogError> {
        self.grouping
            .store(false, std::sync::atomic::Ordering::SeqCst);
        *self
            .phasing
            .lock()
            .map_err(|_| poisoned("the group's phases"))? = Phasing::default();
        let mut due = Vec::new();
        let mut held = Vec::new();
        for topic in SYNC_ORDER {
            for p in self.topics.get(&topic).into_iter().flatten() {
                let (written, later) = p.flush()?;
                if let Some((end, file)) = written {
                    due.push(Arc::new(Due {
                        topic,
                        part: p.clone(),
                        end,
                        file,
                    }));
                }
                held.extend(later.into_iter().map(|c| Held {
                    topic,
                    part: p.clone(),
                    chunk: c,
                }));
            }
        }
        // Phase by phase, each in `SYNC_ORDER` (stable: `held` is in it).
        held.sort_by_key(|h| h.chunk.phase);
        Ok(Box::new(SealedGroup {
            due,
            held,
            helpers: self.helpers.clone(),
        }))
    }

    fn append(
        &self,
        topic: Topic,
        records: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<Vec<(u32, u64)>, LogError> {
        let n = self.partitions(topic);
        // Group by partition, keeping each partition's records in call order.
        let mut by_part: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (i, (k, _)) in records.iter().enumerate() {
            by_part.entry(partition_for_key(k, n)).or_default().push(i);
        }
        let mut out = vec![(0u32, 0u64); records.len()];
        let phase = if self.grouping.load(std::sync::atomic::Ordering::SeqCst) {
            Some(
                self.phasing
                    .lock()
                    .map_err(|_| poisoned("the group's phases"))?
                    .enter(topic),
            )
        } else {
            None
        };
        for (p, idxs) in by_part {
            let frames: Vec<(Vec<u8>, Vec<u8>)> =
                idxs.iter().map(|&i| records[i].clone()).collect();
            let offsets = self.partition(topic, p)?.append(&frames, phase)?;
            for (i, off) in idxs.into_iter().zip(offsets) {
                out[i] = (p, off);
            }
        }
        Ok(out)
    }

    fn read(
        &self,
        topic: Topic,
        partition: u32,
        from: u64,
        max: usize,
    ) -> Result<Vec<LogRecord>, LogError> {
        let mut recs = self.partition(topic, partition)?.read(from, max)?;
        for r in &mut recs {
            r.partition = partition;
        }
        Ok(recs)
    }

    fn scan(
        &self,
        topic: Topic,
        partition: u32,
        from: u64,
        max: usize,
        visit: &mut dyn FnMut(RecordRef<'_>) -> ControlFlow<()>,
    ) -> Result<u64, LogError> {
        self.partition(topic, partition)?.scan(from, max, visit)
    }

    fn end_offset(&self, topic: Topic, partition: u32) -> Result<u64, LogError> {
        self.partition(topic, partition)?.visible_end()
    }

    fn wait_beyond(
        &self,
        topic: Topic,
        partition: u32,
        offset: u64,
        timeout: Duration,
    ) -> Result<u64, LogError> {
        let part = self.partition(topic, partition)?;
        let deadline = Instant::now() + timeout;
        let mut synced = part.synced.lock().map_err(|_| poisoned(&part.label))?;
        while *synced <= offset {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let (g, _) = part
                .synced_cv
                .wait_timeout(synced, deadline - now)
                .map_err(|_| poisoned(&part.label))?;
            synced = g;
        }
        Ok(*synced)
    }

    fn describe(&self) -> String {
        format!("embedded log at {}", self.dir.display())
    }

    fn torn_tails(&self) -> Vec<String> {
        self.torn.iter().map(ToString::to_string).collect()
    }
}
