//! `verify`'s pass over the whole log. Each partition is a chain checked
//! in offset order, but hashing its records — nearly all the work — is
//! not: partitions are cut into chunks that any worker digests, and the
//! chunks of a partition are checked in order by whichever worker finds
//! the next one ready. Reading the checkpoints is one more job; workers
//! digest chunks meanwhile, within a memory budget, and check them once the
//! checkpoints are known. With one job per partition, 4 ledger partitions
//! on 2 cores left one core idle for the last fifth of the run.

mod chain;
mod chunk;
#[cfg(test)]
mod tests;

use super::checkpoint::{self, Header, CHAINED_TOPICS};
use super::digests::Digests;
use super::findings::{mismatch, Mismatch, VerifyReport};
use super::hashchain::DigestKind;
use crate::error::{LedgerError, Result};
use crate::log::Log;
use crate::model::Topic;
use chain::{check_bodies_later, ChainCheck, PartitionOutcome};
use chunk::{covered_spans, Chunk, Rec};
use std::collections::BTreeMap;
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
