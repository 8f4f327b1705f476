//! `verify`'s pass over the whole log. Each partition is a chain checked
//! in offset order, but hashing its records — nearly all the work — is
//! not: partitions are cut into chunks that any worker digests, and the
//! chunks of a partition are checked in order by whichever worker finds
//! the next one ready. Reading the checkpoints is one more job; workers
//! digest chunks meanwhile, within a memory budget, and check them once the
//! checkpoints are known. With one job per partition, 4 ledger partitions
//! on 2 cores left one core idle for the last fifth of the run.

use super::checkpoint::{self, Header, CHAINED_TOPICS};
use super::digests::Digests;
use super::findings::{broken_body, mismatch, Mismatch, VerifyReport};
use super::hashchain::{check_body, digest_by, from_hex32, DigestKind, Link, GENESIS};
use crate::error::{LedgerError, Result};
use crate::log::Log;
use crate::model::Topic;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};

/// Records per chunk: large enough that locks are rare, small enough that
/// the last chunks keep every core busy to the end (~4 ms of hashing).
const CHUNK: u64 = 16_384;

/// Records digested before the checkpoints are known, over all partitions
/// (48 bytes each): bounds the memory of that overlap.
const DIGEST_AHEAD: usize = 1 << 21;

/// Verify the whole log. `progress` is told how many records were read.
pub fn verify_log(log: &dyn Log, progress: &(dyn Fn(u64) + Sync)) -> Result<VerifyReport> {
    Ok(verify_log_inner(log, progress, false)?.0)
}

/// Roots of each partition's Merkle tree, by tree size.
pub type Roots = BTreeMap<(Topic, u32), BTreeMap<u64, super::merkle::Hash>>;

/// [`verify_log`], also building each partition's Merkle tree from the
/// same leaf digests (v2 checkpoints list exactly those): the roots at
/// the end of every checkpoint, for `verify --key` to compare with the
/// signed notes without reading and hashing the log a second time. A
/// partition with v1 checkpoints, or whose check stopped at a mismatch,
/// has roots up to where its leaves were taken in order, if any.
pub fn verify_log_with_roots(
    log: &dyn Log,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(VerifyReport, Roots)> {
    verify_log_inner(log, progress, true).map(|(r, roots, _)| (r, roots))
}

/// What `verify --key` takes from the pass over the log besides its
/// report: every partition's tree roots at checkpoint ends, and every
/// checkpoint that carries a note, as read (duplicates too), so the notes
/// are checked without reading the checkpoints topic again.
pub struct ForKey {
    pub roots: Roots,
    pub noted: Vec<Header>,
}

/// [`verify_log_with_roots`], keeping the checkpoints with notes.
pub fn verify_log_for_key(
    log: &dyn Log,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(VerifyReport, ForKey)> {
    verify_log_inner(log, progress, true).map(|(r, roots, noted)| (r, ForKey { roots, noted }))
}

fn verify_log_inner(
    log: &dyn Log,
    progress: &(dyn Fn(u64) + Sync),
    trees: bool,
) -> Result<(VerifyReport, Roots, Vec<Header>)> {
    let pass = Pass::new(log, progress, trees, CHUNK, DIGEST_AHEAD)?;
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers).map(|_| s.spawn(|| pass.work())).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or(Err(LedgerError::Internal("a verify thread panicked")))
            })
            .collect()
    });
    for r in results {
        r?;
    }
    pass.report()
}

/// What a worker does next.
#[derive(Debug, PartialEq, Eq)]
enum Job {
    Headers,
    /// Digest partition `.0` from `.1` up to `.2` (to its end: `None`).
    Chunk(usize, u64, Option<u64>),
    /// Check partition `.0` alone from its start (v1 checkpoints).
    Whole(usize),
    /// Nothing may be digested until the checkpoints are read.
    Wait,
    Done,
}

/// A partition's records digested by one job.
struct Chunk {
    from: u64,
    /// Where the next chunk starts; for the last, where the log ends.
    to: u64,
    last: bool,
    recs: Vec<Rec>,
    /// The first record whose body does not match its envelope (no
    /// checkpoint covering it); `recs` stop before it.
    broken: Option<Mismatch>,
    /// The chunk's own Merkle frontier, when trees are built and the
    /// checkpoints' ends were known as it was digested.
    tree: Option<ChunkTree>,
}

/// The Merkle frontier of a chunk's leaves, built by the worker that
/// digested it, and its frontiers at the checkpoint ends inside it: the
/// check joins them to the partition's tree in order (a chunk is aligned
/// to its power-of-two size) instead of hashing the tree's nodes alone.
#[derive(Default)]
struct ChunkTree {
    frontier: super::merkle::Frontier,
    at_ends: Vec<(u64, super::merkle::Frontier)>,
}

struct Rec {
    offset: u64,
    leaf: [u8; 32],
    /// No checkpoint covers it and its body was found to match.
    body_checked: bool,
}

/// One partition's state in the pass.
struct Part<'a> {
    topic: Topic,
    p: u32,
    /// Its end when the pass began, for cutting chunks (the last chunk
    /// reads to wherever the log ends).
    end_hint: u64,
    /// The offset ranges its checkpoints cover, merged, once read.
    covered: OnceLock<Vec<(u64, u64)>>,
    /// Where its checkpoints end, sorted, once read.
    ends: OnceLock<Vec<u64>>,
    seq: Mutex<Seq<'a>>,
}

#[derive(Default)]
struct Seq<'a> {
    /// There once the checkpoints are read; out while a worker checks.
    check: Option<ChainCheck<'a>>,
    /// Where the next chunk to check starts.
    expect: u64,
    parked: BTreeMap<u64, Chunk>,
    /// Checked by one `Job::Whole` instead of chunks.
    whole: bool,
    outcome: Option<PartitionOutcome>,
}

/// Which chunks are handed out next.
struct Claims {
    next: Vec<u64>,
    closed: Vec<bool>,
    wholes: Vec<usize>,
}

struct Pass<'a> {
    log: &'a dyn Log,
    progress: &'a (dyn Fn(u64) + Sync),
    trees: bool,
    chunk: u64,
    parts: Vec<Part<'a>>,
    claims: Mutex<Claims>,
    headers_taken: AtomicBool,
    /// Set once the checkpoints are read and every partition has its
    /// check: the checkpoints naming partitions the log does not have.
    ready: Mutex<Option<ByPartition>>,
    ready_cv: Condvar,
    /// How many checkpoints, and the unreadable ones.
    checkpoints: Mutex<(u64, Vec<Mismatch>)>,
    /// The checkpoints with notes (kept when trees are built).
    noted: Mutex<Vec<Header>>,
    budget: AtomicUsize,
    /// Record buffers of checked chunks, for the next ones: fresh memory
    /// costs the kernel a zeroed page per 4 KiB.
    pool: Mutex<Vec<Vec<Rec>>>,
}

fn poisoned<T>(_: T) -> LedgerError {
    LedgerError::Internal("a verify thread panicked")
}

impl<'a> Pass<'a> {
    fn new(
        log: &'a dyn Log,
        progress: &'a (dyn Fn(u64) + Sync),
        trees: bool,
        chunk: u64,
        budget: usize,
    ) -> Result<Self> {
        let mut parts = Vec::new();
        for topic in CHAINED_TOPICS {
            for p in 0..log.partitions(topic) {
                parts.push(Part {
                    topic,
                    p,
                    end_hint: log.end_offset(topic, p)?,
                    covered: OnceLock::new(),
                    ends: OnceLock::new(),
                    seq: Mutex::new(Seq::default()),
                });
            }
        }
        let n = parts.len();
        Ok(Pass {
            log,
            progress,
            trees,
            chunk: chunk.max(1),
            parts,
            claims: Mutex::new(Claims {
                next: vec![0; n],
                closed: vec![false; n],
                wholes: Vec::new(),
            }),
            headers_taken: AtomicBool::new(false),
            ready: Mutex::new(None),
            ready_cv: Condvar::new(),
            checkpoints: Mutex::new((0, Vec::new())),
            noted: Mutex::new(Vec::new()),
            budget: AtomicUsize::new(budget),
            pool: Mutex::new(Vec::new()),
        })
    }

    fn work(&self) -> Result<()> {
        loop {
            match self.claim()? {
                Job::Headers => self.read_headers()?,
                Job::Wait => self.wait_ready()?,
                Job::Chunk(i, from, to) => {
                    let chunk = self.digest(i, from, to)?;
                    self.submit(i, chunk)?;
                }
                Job::Whole(i) => self.whole(i)?,
                Job::Done => return self.drain_all(),
            }
        }
    }

    fn is_ready(&self) -> Result<bool> {
        Ok(self.ready.lock().map_err(poisoned)?.is_some())
    }

    fn wait_ready(&self) -> Result<()> {
        let mut g = self.ready.lock().map_err(poisoned)?;
        while g.is_none() {
            g = self.ready_cv.wait(g).map_err(poisoned)?;
        }
        Ok(())
    }

    fn set_ready(&self, left: ByPartition) -> Result<()> {
        *self.ready.lock().map_err(poisoned)? = Some(left);
        self.ready_cv.notify_all();
        Ok(())
    }

    /// The next job: the checkpoints first, then a v1 partition if any,
    /// else the next chunk of the partition with the most left.
    fn claim(&self) -> Result<Job> {
        if !self.headers_taken.swap(true, Ordering::SeqCst) {
            return Ok(Job::Headers);
        }
        let ready = self.is_ready()?;
        let mut c = self.claims.lock().map_err(poisoned)?;
        if let Some(i) = c.wholes.pop() {
            return Ok(Job::Whole(i));
        }
        let pick = (0..self.parts.len())
            .filter(|&i| !c.closed[i])
            .max_by_key(|&i| {
                (
                    self.parts[i].end_hint.saturating_sub(c.next[i]),
                    std::cmp::Reverse(i),
                )
            });
        let Some(i) = pick else {
            return Ok(Job::Done);
        };
        if !ready {
            let n = self.chunk as usize;
            if self
                .budget
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(n))
                .is_err()
            {
                return Ok(Job::Wait);
            }
        }
        let from = c.next[i];
        if from.saturating_add(self.chunk) >= self.parts[i].end_hint {
            c.closed[i] = true;
            return Ok(Job::Chunk(i, from, None));
        }
        c.next[i] = from + self.chunk;
        Ok(Job::Chunk(i, from, Some(from + self.chunk)))
    }

    /// Read the checkpoints and give each partition its check; then check
    /// whatever was digested meanwhile.
    fn read_headers(&self) -> Result<()> {
        let (mut by_tp, bad, n) = match read_checkpoints(self.log, self.trees) {
            Ok((by_tp, bad, n, noted)) => {
                *self.noted.lock().map_err(poisoned)? = noted;
                (by_tp, bad, n)
            }
            Err(e) => {
                // Unblock the others before failing.
                self.set_ready(ByPartition::new())?;
                return Err(e);
            }
        };
        *self.checkpoints.lock().map_err(poisoned)? = (n, bad);
        for (i, part) in self.parts.iter().enumerate() {
            let cps = by_tp
                .remove(&(part.topic.name().to_string(), part.p))
                .unwrap_or_default();
            let _ = part.covered.set(covered_spans(&cps));
            let mut ends: Vec<u64> = cps.iter().map(|c| c.to).collect();
            ends.sort_unstable();
            ends.dedup();
            let _ = part.ends.set(ends);
            let whole = !cps.iter().all(|c| c.kind() == DigestKind::Leaf);
            let mut check = ChainCheck::new(self.log, part.topic.name(), part.p, cps);
            if self.trees {
                check.tree = Some(super::merkle::Frontier::new());
            }
            let mut seq = part.seq.lock().map_err(poisoned)?;
            seq.check = Some(check);
            if whole {
                // Leaf digests do not serve v1 checkpoints: read it again
                // from its start, in one job.
                seq.whole = true;
                self.recycle(std::mem::take(&mut seq.parked).into_values());
                let mut c = self.claims.lock().map_err(poisoned)?;
                c.closed[i] = true;
                c.wholes.push(i);
            }
        }
        self.set_ready(by_tp)?;
        self.drain_all()
    }

    /// Digest the records of `[from, to)` (to the end for `None`); once
    /// the checkpoints are known, bodies no checkpoint covers are checked
    /// here too, while their bytes are at hand.
    fn digest(&self, i: usize, from: u64, to: Option<u64>) -> Result<Chunk> {
        let part = &self.parts[i];
        let (name, p) = (part.topic.name(), part.p);
        let covered = part.covered.get();
        let mut span = covered.map_or(0, |s| s.partition_point(|&(_, e)| e <= from));
        let mut recs = self
            .pool
            .lock()
            .map_err(poisoned)?
            .pop()
            .unwrap_or_default();
        recs.clear();
        let limit = to.unwrap_or(u64::MAX);
        let mut broken = None;
        // The chunk's share of the partition's tree, when it can be built
        // here: the checkpoints' ends known, chunks aligned.
        let ends = part
            .ends
            .get()
            .filter(|_| self.trees && self.chunk.is_power_of_two())
            .map(Vec::as_slice);
        let mut tree = ends.map(|_| ChunkTree::default());
        let ends = ends.unwrap_or_default();
        let mut next_end = ends.partition_point(|&e| e <= from);
        let mut at = from;
        while at < limit && broken.is_none() {
            let before = recs.len();
            let mut past = false;
            let after = self.log.scan(
                part.topic,
                p,
                at,
                (limit - at).min(4096) as usize,
                &mut |r| {
                    if r.offset >= limit {
                        past = true;
                        return ControlFlow::Break(());
                    }
                    let body_checked = match covered {
                        Some(spans) if !is_covered(spans, &mut span, r.offset) => {
                            if let Err(e) = check_body(r.payload) {
                                broken = Some(broken_body(name, p, r.offset, e));
                                return ControlFlow::Break(());
                            }
                            true
                        }
                        _ => false,
                    };
                    let leaf = super::merkle::leaf_hash(r.payload);
                    if let Some(t) = tree.as_mut() {
                        if from + t.frontier.size() == r.offset {
                            t.frontier.push(leaf);
                            let size = r.offset + 1;
                            while ends.get(next_end).is_some_and(|&e| e < size) {
                                next_end += 1;
                            }
                            if ends.get(next_end) == Some(&size) {
                                t.at_ends.push((size, t.frontier.clone()));
                                next_end += 1;
                            }
                        } else {
                            tree = None;
                        }
                    }
                    recs.push(Rec {
                        offset: r.offset,
                        leaf,
                        body_checked,
                    });
                    ControlFlow::Continue(())
                },
            )?;
            (self.progress)((recs.len() - before) as u64);
            if after == at || past {
                break;
            }
            at = after;
        }
        let end = match to {
            Some(to) => to,
            None => recs.last().map_or(from, |r| r.offset + 1),
        };
        Ok(Chunk {
            from,
            to: end,
            last: to.is_none(),
            recs,
            broken,
            tree,
        })
    }

    fn recycle(&self, chunks: impl IntoIterator<Item = Chunk>) {
        if let Ok(mut pool) = self.pool.lock() {
            pool.extend(chunks.into_iter().map(|c| c.recs));
        }
    }

    /// Hand a digested chunk to its partition: checked now if it is the
    /// next and nobody is checking, else left for whoever is.
    fn submit(&self, i: usize, chunk: Chunk) -> Result<()> {
        let mut seq = self.parts[i].seq.lock().map_err(poisoned)?;
        if seq.whole || seq.outcome.is_some() {
            drop(seq);
            self.recycle([chunk]);
            return Ok(());
        }
        seq.parked.insert(chunk.from, chunk);
        self.drain(i, seq)
    }

    fn drain_all(&self) -> Result<()> {
        for (i, part) in self.parts.iter().enumerate() {
            self.drain(i, part.seq.lock().map_err(poisoned)?)?;
        }
        Ok(())
    }

    /// Check the partition's parked chunks that are next in order. The
    /// check is taken out while it runs, so one worker at a time checks a
    /// partition and the others digest on.
    fn drain<'s>(&'s self, i: usize, mut seq: MutexGuard<'s, Seq<'a>>) -> Result<()> {
        loop {
            if seq.whole {
                return Ok(());
            }
            let expect = seq.expect;
            if !seq.parked.contains_key(&expect) {
                return Ok(());
            }
            let Some(mut check) = seq.check.take() else {
                // Checkpoints not read yet, someone else checking, or done.
                return Ok(());
            };
            let chunk = seq
                .parked
                .remove(&expect)
                .ok_or(LedgerError::Internal("a verify chunk went missing"))?;
            drop(seq);
            match self.check_chunk(&mut check, chunk) {
                Some(to) => {
                    seq = self.parts[i].seq.lock().map_err(poisoned)?;
                    seq.expect = to;
                    seq.check = Some(check);
                }
                None => {
                    let outcome = self.finish(i, check)?;
                    seq = self.parts[i].seq.lock().map_err(poisoned)?;
                    seq.outcome = Some(outcome);
                    self.recycle(std::mem::take(&mut seq.parked).into_values());
                    self.claims.lock().map_err(poisoned)?.closed[i] = true;
                    return Ok(());
                }
            }
        }
    }

    /// Feed a chunk to the check; where the next chunk starts, or `None`
    /// once the partition is done (its end, or a mismatch).
    fn check_chunk(&self, check: &mut ChainCheck<'a>, mut chunk: Chunk) -> Option<u64> {
        let (name, p) = (check.name, check.p);
        let tree = chunk.tree.take();
        // Without the chunk's own frontier the check grows the tree.
        check.tree_inline = tree.is_none();
        for r in &chunk.recs {
            let mut d = Digests::leaf(name, p, r.offset, r.leaf);
            if r.body_checked {
                d = d.body_checked();
            }
            if check.record(r.offset, &mut d).is_break() {
                break;
            }
        }
        if check.found.is_none() {
            check.found = chunk.broken.clone();
        }
        let (from, to, last) = (chunk.from, chunk.to, chunk.last);
        self.recycle([chunk]);
        if check.found.is_some() {
            return None;
        }
        if let Some(t) = tree {
            check.graft(from, t);
        }
        if last {
            check.end(to);
            return None;
        }
        Some(to)
    }

    fn finish(&self, i: usize, mut check: ChainCheck<'a>) -> Result<PartitionOutcome> {
        check_bodies_later(self.log, self.parts[i].topic, &mut check)?;
        Ok(check.outcome())
    }

    /// A partition whose checkpoints are not all v2, checked from its
    /// start by one worker.
    fn whole(&self, i: usize) -> Result<()> {
        let part = &self.parts[i];
        let check = self.parts[i].seq.lock().map_err(poisoned)?.check.take();
        let Some(mut check) = check else {
            return Err(LedgerError::Internal("a verify partition has no check"));
        };
        let (name, p) = (part.topic.name(), part.p);
        let mut at = 0;
        while check.found.is_none() {
            let after = self.log.scan(part.topic, p, at, 4096, &mut |r| {
                check.record(r.offset, &mut Digests::of(name, p, r.offset, r.payload))
            })?;
            if check.found.is_some() {
                break;
            }
            if after == at {
                check.end(at);
                break;
            }
            (self.progress)(after - at);
            at = after;
        }
        let outcome = self.finish(i, check)?;
        self.parts[i].seq.lock().map_err(poisoned)?.outcome = Some(outcome);
        Ok(())
    }

    /// The report, once every worker is done.
    fn report(self) -> Result<(VerifyReport, Roots, Vec<Header>)> {
        let (n, unreadable) = self.checkpoints.into_inner().map_err(poisoned)?;
        let mut report = VerifyReport {
            checkpoints: n,
            // Unreadable checkpoints first, as before the partitions.
            mismatches: unreadable,
            ..Default::default()
        };
        let mut roots = Roots::new();
        for part in self.parts {
            let seq = part.seq.into_inner().map_err(poisoned)?;
            let o = seq
                .outcome
                .ok_or(LedgerError::Internal("verify left a partition unchecked"))?;
            if !o.roots.is_empty() {
                roots.insert((part.topic, part.p), o.roots);
            }
            report.records += o.records;
            report.covered += o.covered;
            if let Some(m) = o.mismatch {
                report.mismatches.push(m);
            }
        }
        let left = self
            .ready
            .into_inner()
            .map_err(poisoned)?
            .unwrap_or_default();
        for ((topic, p), cps) in left {
            report.mismatches.push(mismatch(
                &topic,
                p,
                cps[0].from,
                "checkpoint names a partition the log does not have",
                "an existing partition",
                "none",
            ));
        }
        let noted = self.noted.into_inner().map_err(poisoned)?;
        Ok((report, roots, noted))
    }
}

/// The head verified at an offset, as a mismatch shows it.
fn head_shown(known: &[[u8; 32]]) -> String {
    known
        .first()
        .map(hex::encode)
        .unwrap_or_else(|| "no checkpoint ending here".into())
}

/// The offset ranges some checkpoint covers, sorted and merged.
fn covered_spans(cps: &[Header]) -> Vec<(u64, u64)> {
    let mut spans: Vec<(u64, u64)> = cps
        .iter()
        .filter(|c| c.from < c.to)
        .map(|c| (c.from, c.to))
        .collect();
    spans.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(spans.len());
    for (s, e) in spans {
        match merged.last_mut() {
            Some(last) if s <= last.1 => last.1 = last.1.max(e),
            _ => merged.push((s, e)),
        }
    }
    merged
}

/// Whether `o` is in `spans`, for offsets asked in increasing order
/// (`at` remembers where the last answer was).
fn is_covered(spans: &[(u64, u64)], at: &mut usize, o: u64) -> bool {
    while spans.get(*at).is_some_and(|&(_, e)| e <= o) {
        *at += 1;
    }
    spans.get(*at).is_some_and(|&(s, _)| s <= o)
}

/// Checkpoints by (topic name, partition).
type ByPartition = BTreeMap<(String, u32), Vec<Header>>;

/// Every checkpoint, by (topic, partition) without duplicates; the
/// unreadable ones as mismatches; how many there were; with `noted`, every
/// one that carries a note.
type ReadCheckpoints = (ByPartition, Vec<Mismatch>, u64, Vec<Header>);

fn read_checkpoints(log: &dyn Log, noted: bool) -> Result<ReadCheckpoints> {
    let mut by_tp = ByPartition::new();
    let mut bad = Vec::new();
    let mut with_notes = Vec::new();
    let mut n = 0;
    for (at, cp) in checkpoint::read_headers(log)? {
        n += 1;
        match cp {
            Ok(cp) => {
                if noted && cp.note.is_some() {
                    with_notes.push(cp.clone());
                }
                // The digests' fold is checked against the log's records
                // (`ChainCheck`); their number here.
                if cp.to < cp.from || (cp.to - cp.from) as usize != cp.listed.0 {
                    bad.push(mismatch(
                        &cp.topic,
                        cp.partition,
                        cp.from,
                        "checkpoint is inconsistent",
                        format!(
                            "{} digests for [{}, {})",
                            cp.to.saturating_sub(cp.from),
                            cp.from,
                            cp.to
                        ),
                        format!("{} listed", cp.listed.0),
                    ));
                }
                let list = by_tp.entry((cp.topic.clone(), cp.partition)).or_default();
                if !list.iter().any(|c| c.same(&cp)) {
                    list.push(cp);
                }
            }
            Err(e) => bad.push(mismatch(
                Topic::Checkpoints.name(),
                0,
                at,
                "checkpoint is not readable",
                "checkpoint JSON",
                e.to_string(),
            )),
        }
    }
    Ok((by_tp, bad, n, with_notes))
}

/// What the check of one partition found.
struct PartitionOutcome {
    records: u64,
    covered: u64,
    mismatch: Option<Mismatch>,
    /// The partition's tree roots at checkpoint ends (when asked for).
    roots: BTreeMap<u64, super::merkle::Hash>,
}

/// The records no checkpoint covered whose bytes were not at hand when
/// they were digested: check their bodies against their envelopes now,
/// keeping the first mismatch in log order.
fn check_bodies_later(log: &dyn Log, topic: Topic, check: &mut ChainCheck<'_>) -> Result<()> {
    let before = check.found.as_ref().map_or(u64::MAX, |m| m.offset);
    let later: Vec<u64> = std::mem::take(&mut check.bodies_later)
        .into_iter()
        .filter(|o| *o < before)
        .collect();
    let (Some(&first), Some(&last)) = (later.first(), later.last()) else {
        return Ok(());
    };
    let (name, p) = (check.name, check.p);
    let mut broken = None;
    let mut at = first;
    while at <= last && broken.is_none() {
        let after = log.scan(topic, p, at, 4096, &mut |r| {
            if r.offset > last {
                return ControlFlow::Break(());
            }
            if later.binary_search(&r.offset).is_ok() {
                if let Err(e) = check_body(r.payload) {
                    broken = Some(broken_body(name, p, r.offset, e));
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        })?;
        if after == at {
            break;
        }
        at = after;
    }
    if broken.is_some() {
        check.found = broken;
    }
    Ok(())
}

/// The check of one partition's records, fed in offset order, against its
/// checkpoints: digests where listed, and each checkpoint's link from the
/// head before it to its head.
struct ChainCheck<'a> {
    /// Where a checkpoint's digest list is read from once its head does
    /// not match.
    log: &'a dyn Log,
    name: &'a str,
    p: u32,
    cps: Vec<Header>,
    // Checkpoints (indices into `cps`) in the order they start; `active`
    // are those covering the current offset (normally one) with their link
    // being computed, so each record costs O(1) work.
    order: Vec<usize>,
    next: usize,
    active: Vec<(usize, Link)>,
    // Heads verified so far, by the offset they end at: where the next link
    // must start from. Several writers may each have chained checkpoints
    // with different boundaries, hence a list.
    heads: BTreeMap<u64, Vec<[u8; 32]>>,
    records: u64,
    covered: u64,
    found: Option<Mismatch>,
    /// Records no checkpoint covers whose bodies are still to be checked
    /// (digested ahead, without their bytes), in offset order.
    bodies_later: Vec<u64>,
    /// The partition's Merkle tree over the leaf digests so far (when
    /// asked for; dropped should a record come out of order), and its
    /// roots at checkpoint ends.
    tree: Option<super::merkle::Frontier>,
    roots: BTreeMap<u64, super::merkle::Hash>,
    /// The tree grows leaf by leaf here (else by chunks, see `graft`).
    tree_inline: bool,
}

impl<'a> ChainCheck<'a> {
    fn new(log: &'a dyn Log, name: &'a str, p: u32, cps: Vec<Header>) -> Self {
        let mut order: Vec<usize> = (0..cps.len()).collect();
        order.sort_by_key(|&i| (cps[i].from, cps[i].to));
        ChainCheck {
            log,
            name,
            p,
            cps,
            order,
            next: 0,
            active: Vec::new(),
            heads: BTreeMap::from([(0, vec![GENESIS])]),
            records: 0,
            covered: 0,
            found: None,
            bodies_later: Vec::new(),
            tree: None,
            roots: BTreeMap::new(),
            tree_inline: true,
        }
    }

    fn fail(&mut self, m: Mismatch) -> ControlFlow<()> {
        self.found = Some(m);
        ControlFlow::Break(())
    }

    fn record(&mut self, o: u64, digests: &mut Digests<'_>) -> ControlFlow<()> {
        let (name, p) = (self.name, self.p);
        self.records += 1;
        while self.next < self.order.len() && self.cps[self.order[self.next]].from <= o {
            let ci = self.order[self.next];
            let c = &self.cps[ci];
            self.next += 1;
            if c.to <= o {
                if c.from == c.to {
                    if let Some(m) = self.empty_differs(ci) {
                        return self.fail(m);
                    }
                }
                continue;
            }
            // A link must start from a head already verified at its start.
            let prev = from_hex32(&c.prev_head);
            let known = self
                .heads
                .get(&c.from)
                .map(Vec::as_slice)
                .unwrap_or_default();
            if c.from != o {
                // The checkpoint starts at a record the log does not hold:
                // records before this one were removed.
                let m = mismatch(
                    name,
                    p,
                    o,
                    "records a checkpoint covers are missing from the log",
                    format!("record {} next", c.from),
                    format!("record {o} next (records [{}, {o}) missing)", c.from),
                );
                return self.fail(m);
            }
            if !prev.is_some_and(|h| known.contains(&h)) {
                let found = head_shown(known);
                let m = mismatch(
                    name,
                    p,
                    o,
                    "chain head before this record differs from checkpoint",
                    &c.prev_head,
                    found,
                );
                return self.fail(m);
            }
            let link = Link::new(&prev.unwrap_or(GENESIS), c.from, c.to);
            self.active.push((ci, link));
        }
        if self.active.is_empty() {
            // Nothing attests this record: at least its body must match
            // its envelope.
            match digests.body() {
                Some(Ok(())) => {}
                Some(Err(m)) => return self.fail(m),
                None => self.bodies_later.push(o),
            }
        } else {
            self.covered += 1;
        }
        for (ci, link) in &mut self.active {
            match digests.get(self.cps[*ci].kind()) {
                Ok(d) => link.push(&d),
                Err(m) => {
                    self.found = Some(m);
                    return ControlFlow::Break(());
                }
            }
        }
        if let Some(tree) = self.tree.as_mut().filter(|_| self.tree_inline) {
            match digests.get(DigestKind::Leaf) {
                Ok(leaf) if tree.size() == o => tree.push(leaf),
                _ => self.tree = None,
            }
        }
        while let Some(i) = self
            .active
            .iter()
            .position(|(ci, _)| self.cps[*ci].to == o + 1)
        {
            let (ci, link) = self.active.swap_remove(i);
            let head = link.head();
            if from_hex32(&self.cps[ci].head) != Some(head) {
                let m = self.head_differs(&self.cps[ci], o, head);
                return self.fail(m);
            }
            let to = self.cps[ci].to;
            let known = self.heads.entry(to).or_default();
            if !known.contains(&head) {
                known.push(head);
            }
            if let Some(tree) = self.tree.as_ref().filter(|_| self.tree_inline) {
                self.roots.entry(to).or_insert_with(|| tree.root());
            }
        }
        ControlFlow::Continue(())
    }

    /// A checkpoint of no records (it brings a signed note of the tree
    /// at its offset, see `Attestation::sign_attested`) must link from a
    /// head verified there and fold to the head of nothing after it; its
    /// root is the tree's at that size.
    fn empty_differs(&mut self, ci: usize) -> Option<Mismatch> {
        let c = &self.cps[ci];
        let known = self
            .heads
            .get(&c.from)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let prev = from_hex32(&c.prev_head).filter(|h| known.contains(h));
        let Some(prev) = prev else {
            let found = head_shown(known);
            return Some(mismatch(
                self.name,
                self.p,
                c.from,
                "chain head of a checkpoint of no records differs",
                &c.prev_head,
                found,
            ));
        };
        let head = Link::new(&prev, c.from, c.to).head();
        if from_hex32(&c.head) != Some(head) {
            return Some(mismatch(
                self.name,
                self.p,
                c.from,
                "head of a checkpoint of no records is not the head of nothing",
                hex::encode(head),
                &c.head,
            ));
        }
        if let Some(tree) = self.tree.as_ref().filter(|t| t.size() == c.to) {
            self.roots.entry(c.to).or_insert_with(|| tree.root());
        }
        None
    }

    /// Join a chunk's frontier, built by the worker that digested it, to
    /// the partition's tree, with the roots at the checkpoint ends inside
    /// it; the tree is dropped if the chunk does not follow on from it.
    fn graft(&mut self, from: u64, chunk: ChunkTree) {
        let Some(tree) = self.tree.as_mut() else {
            return;
        };
        if tree.size() != from {
            self.tree = None;
            return;
        }
        for (size, part) in &chunk.at_ends {
            let mut at = tree.clone();
            if !at.append(part) {
                self.tree = None;
                return;
            }
            self.roots.entry(*size).or_insert_with(|| at.root());
        }
        if !tree.append(&chunk.frontier) {
            self.tree = None;
        }
    }

    /// A checkpoint whose head the records do not fold to: the first
    /// record whose digest its list does not have, else (the list agrees,
    /// the head does not) the head itself.
    fn head_differs(&self, c: &Header, o: u64, head: [u8; 32]) -> Mismatch {
        self.first_unlisted(c, o + 1).unwrap_or_else(|| {
            mismatch(
                self.name,
                self.p,
                o,
                "chain head after this record differs from checkpoint",
                &c.head,
                hex::encode(head),
            )
        })
    }

    /// The first record of `[c.from, until)` whose digest the checkpoint's
    /// list does not have at its offset (both read from the log again:
    /// this is the rare path, taken once a head did not match).
    fn first_unlisted(&self, c: &Header, until: u64) -> Option<Mismatch> {
        let Ok(Ok(full)) = checkpoint::read_at(self.log, c) else {
            return None;
        };
        let topic = CHAINED_TOPICS.into_iter().find(|t| t.name() == c.topic)?;
        // Read, not scanned: this runs inside the scan feeding the check.
        let mut at = c.from;
        while at < until {
            let recs = self
                .log
                .read(topic, self.p, at, (until - at).min(1024) as usize)
                .ok()?;
            let Some(last) = recs.last().map(|r| r.offset) else {
                break;
            };
            for r in recs.iter().filter(|r| r.offset < until) {
                let d = digest_by(c.kind(), &r.payload);
                match (full.digest_at(r.offset), d) {
                    (Some(want), Ok(d)) if *want == d => {}
                    (want, d) => {
                        return Some(mismatch(
                            self.name,
                            self.p,
                            r.offset,
                            "record digest differs from checkpoint",
                            want.map(hex::encode)
                                .unwrap_or_else(|| "a listed digest".into()),
                            d.map(hex::encode).unwrap_or_else(|e| e.to_string()),
                        ))
                    }
                }
            }
            at = last + 1;
        }
        None
    }

    /// The log ends at `at`: checkpoints must not reach past it. A record
    /// before the end that a checkpoint lists otherwise (one dropped, say)
    /// is named rather than the end.
    fn end(&mut self, at: u64) {
        while let Some(&ci) = self.order.get(self.next) {
            let c = &self.cps[ci];
            if c.from != at || c.to != at {
                break;
            }
            self.next += 1;
            if let Some(m) = self.empty_differs(ci) {
                self.found = Some(m);
                return;
            }
        }
        let unlisted = self
            .active
            .iter()
            .filter_map(|(ci, _)| self.first_unlisted(&self.cps[*ci], at))
            .min_by_key(|m| m.offset);
        if let Some(m) = unlisted {
            self.found = Some(m);
            return;
        }
        if let Some(c) = self.cps.iter().filter(|c| c.to > at).max_by_key(|c| c.to) {
            let m = mismatch(
                self.name,
                self.p,
                at,
                "log is shorter than its checkpoints",
                format!("records up to offset {}", c.to - 1),
                format!("log ends at offset {at}"),
            );
            self.found = Some(m);
        }
    }

    fn outcome(self) -> PartitionOutcome {
        PartitionOutcome {
            roots: self.roots,
            records: self.records,
            covered: self.covered,
            mismatch: self.found,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::hashchain::record_digest;
    use crate::audit::Checkpoint;
    use crate::log::embedded::{EmbeddedConfig, EmbeddedLog};

    fn log_with_a_broken_record(dir: &std::path::Path) -> (EmbeddedLog, u32, u64) {
        let log = EmbeddedLog::open(dir, &EmbeddedConfig::default()).unwrap();
        crate::synthetic::write_synthetic_log(&log, 6000).unwrap();
        // A copy of a real record with its last body byte flipped.
        let mut rec = log.read(Topic::Ledger, 0, 0, 1).unwrap().remove(0);
        let n = rec.payload.len();
        rec.payload[n - 1] ^= 1;
        let at = log
            .append(Topic::Ledger, &[(rec.key, rec.payload)])
            .unwrap();
        (log, at[0].0, at[0].1)
    }

    /// Run a pass by hand: every job in the order `order` picks among
    /// those claimed so far (claims taken until the pass is done).
    fn run_by_hand(pass: &Pass<'_>, order: impl Fn(usize) -> usize) {
        let mut claimed = Vec::new();
        loop {
            match pass.claim().unwrap() {
                Job::Done => break,
                Job::Wait => break,
                j => claimed.push(j),
            }
        }
        while !claimed.is_empty() {
            let j = claimed.remove(order(claimed.len()) % claimed.len());
            match j {
                Job::Headers => pass.read_headers().unwrap(),
                Job::Chunk(i, from, to) => {
                    let c = pass.digest(i, from, to).unwrap();
                    pass.submit(i, c).unwrap();
                }
                Job::Whole(i) => pass.whole(i).unwrap(),
                Job::Wait | Job::Done => unreachable!(),
            }
            if claimed.is_empty() {
                loop {
                    match pass.claim().unwrap() {
                        Job::Done | Job::Wait => break,
                        j => claimed.push(j),
                    }
                }
            }
        }
        pass.drain_all().unwrap();
    }

    #[test]
    fn a_broken_record_digested_before_the_checkpoints_are_read_is_named() {
        let d = tempfile::tempdir().unwrap();
        let (log, p, off) = log_with_a_broken_record(d.path());
        let pass = Pass::new(&log, &|_| {}, false, 1000, DIGEST_AHEAD).unwrap();
        assert_eq!(pass.claim().unwrap(), Job::Headers);
        // Every chunk digested and handed over before the checkpoints are
        // read: leaf digests do not look inside, so the body is checked
        // once it is known that no checkpoint covers the record.
        let mut jobs = Vec::new();
        loop {
            match pass.claim().unwrap() {
                Job::Chunk(i, from, to) => jobs.push((i, from, to)),
                Job::Done => break,
                j => panic!("unexpected {j:?}"),
            }
        }
        for (i, from, to) in jobs {
            let c = pass.digest(i, from, to).unwrap();
            assert!(c.broken.is_none());
            pass.submit(i, c).unwrap();
        }
        pass.read_headers().unwrap();
        let (report, _, _) = pass.report().unwrap();
        let m = report.first().expect("a mismatch");
        assert_eq!((m.partition, m.offset), (p, off));
        assert!(m.what.contains("body does not match"), "{m}");
    }

    #[test]
    fn a_broken_record_digested_after_the_checkpoints_are_read_is_named_in_the_chunk() {
        let d = tempfile::tempdir().unwrap();
        let (log, p, off) = log_with_a_broken_record(d.path());
        let pass = Pass::new(&log, &|_| {}, false, 1000, DIGEST_AHEAD).unwrap();
        assert_eq!(pass.claim().unwrap(), Job::Headers);
        pass.read_headers().unwrap();
        let i = pass
            .parts
            .iter()
            .position(|x| x.topic == Topic::Ledger && x.p == p)
            .unwrap();
        let c = pass.digest(i, off - off % 1000, None).unwrap();
        let m = c.broken.as_ref().expect("named while digesting");
        assert_eq!(m.offset, off);
        assert_eq!(c.recs.last().map(|r| r.offset + 1), Some(off));
    }

    #[test]
    fn digesting_ahead_stops_at_the_budget_and_the_rest_is_digested_after() {
        let d = tempfile::tempdir().unwrap();
        let log = EmbeddedLog::open(d.path(), &EmbeddedConfig::default()).unwrap();
        crate::synthetic::write_synthetic_log(&log, 20_000).unwrap();
        let records: u64 = CHAINED_TOPICS
            .into_iter()
            .flat_map(|t| (0..log.partitions(t)).map(move |p| (t, p)))
            .map(|(t, p)| log.end_offset(t, p).unwrap())
            .sum();
        let pass = Pass::new(&log, &|_| {}, false, 1000, 3000).unwrap();
        assert_eq!(pass.claim().unwrap(), Job::Headers);
        for _ in 0..3 {
            assert!(matches!(pass.claim().unwrap(), Job::Chunk(..)));
        }
        // The budget is spent: nothing more until the checkpoints are read.
        assert_eq!(pass.claim().unwrap(), Job::Wait);
        pass.read_headers().unwrap();
        assert!(matches!(pass.claim().unwrap(), Job::Chunk(..)));
        // The three chunks claimed above are never digested: the pass can
        // not be done, and says so rather than report a short log.
        run_by_hand(&pass, |_| 0);
        assert!(pass.report().is_err());
        // Run properly, every record is counted.
        let pass = Pass::new(&log, &|_| {}, false, 1000, 3000).unwrap();
        run_by_hand(&pass, |_| 0);
        let (report, _, _) = pass.report().unwrap();
        assert!(report.clean(), "{:?}", report.first());
        assert_eq!(report.records, records);
    }

    #[test]
    fn chunks_checked_in_any_order_give_the_same_report() {
        let d = tempfile::tempdir().unwrap();
        let log = EmbeddedLog::open(d.path(), &EmbeddedConfig::default()).unwrap();
        crate::synthetic::write_synthetic_log(&log, 20_000).unwrap();
        // Checkpoints over part of each partition, the rest uncovered.
        let mut cps = Vec::new();
        for topic in CHAINED_TOPICS {
            for p in 0..log.partitions(topic) {
                let end = log.end_offset(topic, p).unwrap();
                let (mut from, mut head) = (0, GENESIS);
                while from + 700 <= end.saturating_sub(300) {
                    let span = checkpoint::Span {
                        topic,
                        partition: p,
                        from,
                        to: from + 700,
                        prev_head: head,
                    };
                    let cp = checkpoint::build(&log, span, 0, "w").unwrap();
                    head = from_hex32(&cp.head).unwrap();
                    from += 700;
                    cps.push(cp);
                }
            }
        }
        checkpoint::append(&log, &cps).unwrap();
        let (want, want_roots) = verify_log_with_roots(&log, &|_| {}).unwrap();
        assert!(want.clean(), "{:?}", want.first());
        assert!(want.covered > 0 && want.covered < want.records);
        // The roots, leaf by leaf, as the definition has them.
        let mut direct = Roots::new();
        for c in &cps {
            let topic = c.topic().unwrap();
            let mut f = crate::audit::merkle::Frontier::new();
            checkpoint::leaf_hashes(&log, topic, c.partition, 0, c.to, &mut |h| f.push(h)).unwrap();
            direct
                .entry((topic, c.partition))
                .or_default()
                .insert(c.to, f.root());
        }
        assert_eq!(want_roots, direct);
        // Chunks of a power-of-two size join their own frontiers to the
        // tree (those digested before the checkpoints were read grow it
        // leaf by leaf); others always grow it leaf by leaf.
        for chunk in [333, 256, 64] {
            for order in [0usize, 1, 7, 1000] {
                let pass = Pass::new(&log, &|_| {}, true, chunk, 2000).unwrap();
                run_by_hand(&pass, |n| (n * order + order / 3) % n.max(1));
                let (got, roots, _) = pass.report().unwrap();
                assert_eq!(got, want, "chunk {chunk} order {order}");
                assert_eq!(roots, direct, "chunk {chunk} order {order}");
            }
        }
    }

    #[test]
    fn verify_log_finds_the_broken_record_whatever_the_schedule() {
        let d = tempfile::tempdir().unwrap();
        let (log, p, off) = log_with_a_broken_record(d.path());
        let report = verify_log(&log, &|_| {}).unwrap();
        let m = report.first().expect("a mismatch");
        assert_eq!(
            (m.topic.as_str(), m.partition, m.offset),
            ("ledger", p, off)
        );
        assert_eq!(report.mismatches.len(), 1);
    }

    /// A checkpoint of `[from, to)` as ledgers before v2 wrote them:
    /// envelope digests, schema v1.
    fn v1_checkpoint(
        log: &dyn Log,
        topic: Topic,
        p: u32,
        from: u64,
        to: u64,
        prev: [u8; 32],
    ) -> Checkpoint {
        let digests: Vec<super::super::hashchain::HexDigest> = log
            .read(topic, p, from, (to - from) as usize)
            .unwrap()
            .iter()
            .map(|r| super::super::hashchain::HexDigest(record_digest(&r.payload).unwrap()))
            .collect();
        let mut cp = checkpoint::assemble(
            checkpoint::Span {
                topic,
                partition: p,
                from,
                to,
                prev_head: prev,
            },
            digests,
            0,
            "old-writer",
        );
        cp.schema = checkpoint::SCHEMA_V1.into();
        cp
    }

    #[test]
    fn ledgers_checkpointed_before_v2_and_after_verify_each_by_its_own_digests() {
        let d = tempfile::tempdir().unwrap();
        let log = EmbeddedLog::open(d.path(), &EmbeddedConfig::default()).unwrap();
        crate::synthetic::write_synthetic_log(&log, 3000).unwrap();
        let mut cps = Vec::new();
        let mut wrong = None;
        for topic in CHAINED_TOPICS {
            for p in 0..log.partitions(topic) {
                let end = log.end_offset(topic, p).unwrap();
                if end < 2 {
                    continue;
                }
                // The older half under a v1 checkpoint, the rest under v2
                // continuing its chain.
                let half = end / 2;
                let old = v1_checkpoint(&log, topic, p, 0, half, GENESIS);
                let prev = from_hex32(&old.head).unwrap();
                let new = checkpoint::build(
                    &log,
                    checkpoint::Span {
                        topic,
                        partition: p,
                        from: half,
                        to: end,
                        prev_head: prev,
                    },
                    0,
                    "new-writer",
                )
                .unwrap();
                assert_eq!(new.schema, checkpoint::SCHEMA);
                assert_eq!(new.kind(), DigestKind::Leaf);
                assert_ne!(old.digests[0], new.digests[0], "the kinds differ");
                if wrong.is_none() && topic == Topic::Ledger {
                    wrong = Some((p, old.clone()));
                }
                cps.push(old);
                cps.push(new);
            }
        }
        checkpoint::append(&log, &cps).unwrap();
        let report = verify_log(&log, &|_| {}).unwrap();
        assert!(report.clean(), "{:?}", report.first());
        assert_eq!(report.covered, report.records);

        // A v1 checkpoint listing a leaf digest (what v2 would list) for
        // one of its records is not satisfied by it: each kind is checked
        // as its schema says.
        let d2 = tempfile::tempdir().unwrap();
        let log2 = EmbeddedLog::open(d2.path(), &EmbeddedConfig::default()).unwrap();
        crate::synthetic::write_synthetic_log(&log2, 3000).unwrap();
        let (p, _) = wrong.unwrap();
        let end = log2.end_offset(Topic::Ledger, p).unwrap();
        let old = v1_checkpoint(&log2, Topic::Ledger, p, 0, end, GENESIS);
        let r = log2.read(Topic::Ledger, p, 3, 1).unwrap().remove(0);
        let mut digests = old.digests.clone();
        digests[3] =
            super::super::hashchain::HexDigest(super::super::merkle::leaf_hash(&r.payload));
        // Consistent in itself (its head folds its list), wrong for the log.
        let mut old = checkpoint::assemble(
            checkpoint::Span {
                topic: Topic::Ledger,
                partition: p,
                from: 0,
                to: end,
                prev_head: GENESIS,
            },
            digests,
            0,
            "old-writer",
        );
        old.schema = checkpoint::SCHEMA_V1.into();
        checkpoint::append(&log2, &[old]).unwrap();
        let report = verify_log(&log2, &|_| {}).unwrap();
        let m = report.first().expect("a mismatch");
        assert_eq!(
            (m.topic.as_str(), m.partition, m.offset),
            ("ledger", p, 3),
            "{m}"
        );
        assert!(m.what.contains("differs from checkpoint"), "{m}");
    }

    #[test]
    fn the_roots_verify_builds_on_its_way_are_the_trees_of_the_log() {
        let d = tempfile::tempdir().unwrap();
        let log = EmbeddedLog::open(d.path(), &EmbeddedConfig::default()).unwrap();
        crate::synthetic::write_synthetic_log(&log, 5000).unwrap();
        let mut cps = Vec::new();
        for topic in CHAINED_TOPICS {
            for p in 0..log.partitions(topic) {
                let end = log.end_offset(topic, p).unwrap();
                let (mut from, mut head) = (0, GENESIS);
                while from < end {
                    let to = (from + 700).min(end);
                    let span = checkpoint::Span {
                        topic,
                        partition: p,
                        from,
                        to,
                        prev_head: head,
                    };
                    let cp = checkpoint::build(&log, span, 0, "w").unwrap();
                    head = from_hex32(&cp.head).unwrap();
                    cps.push(cp);
                    from = to;
                }
            }
        }
        checkpoint::append(&log, &cps).unwrap();
        let (report, roots) = verify_log_with_roots(&log, &|_| {}).unwrap();
        assert!(report.clean(), "{:?}", report.first());
        let mut compared = 0;
        for cp in &cps {
            let topic = cp.topic().unwrap();
            let mut f = super::super::merkle::Frontier::new();
            checkpoint::leaf_hashes(&log, topic, cp.partition, 0, cp.to, &mut |h| f.push(h))
                .unwrap();
            assert_eq!(
                roots[&(topic, cp.partition)][&cp.to],
                f.root(),
                "{topic}/{} at {}",
                cp.partition,
                cp.to
            );
            compared += 1;
        }
        assert!(compared > 8);
    }

    #[test]
    fn a_checkpoint_listing_the_wrong_number_or_shape_of_digests_is_named() {
        let d = tempfile::tempdir().unwrap();
        let log = EmbeddedLog::open(d.path(), &EmbeddedConfig::default()).unwrap();
        crate::synthetic::write_synthetic_log(&log, 2000).unwrap();
        let p = 0;
        let end = log.end_offset(Topic::Ledger, p).unwrap();
        assert!(end > 4, "partition too small: {end}");
        let span = checkpoint::Span {
            topic: Topic::Ledger,
            partition: p,
            from: 0,
            to: end,
            prev_head: GENESIS,
        };
        let good = checkpoint::build(&log, span, 0, "w").unwrap();
        // One digest short: the head still folds from the records, the
        // count does not match the span.
        let mut short = serde_json::to_value(&good).unwrap();
        short["digests"].as_array_mut().unwrap().pop();
        // A digest that is not 64 hex digits' worth: not readable.
        let mut stubby = serde_json::to_value(&good).unwrap();
        stubby["digests"][1] = serde_json::json!("abc");
        let recs: Vec<(Vec<u8>, Vec<u8>)> = [short, stubby]
            .iter()
            .map(|v| (b"ledger/0".to_vec(), serde_json::to_vec(v).unwrap()))
            .collect();
        log.append(Topic::Checkpoints, &recs).unwrap();
        let report = verify_log(&log, &|_| {}).unwrap();
        let whats: Vec<&str> = report.mismatches.iter().map(|m| m.what.as_str()).collect();
        assert!(whats.contains(&"checkpoint is inconsistent"), "{whats:?}");
        assert!(whats.contains(&"checkpoint is not readable"), "{whats:?}");
    }
}
