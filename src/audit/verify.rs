//! `verify`: recompute every record's body digest and every partition's
//! hash chain from the log, compare with every checkpoint, and name the
//! first record that does not match. Also verifies an export offline.

use super::checkpoint::{self, Checkpoint, Header, CHAINED_TOPICS};
use super::hashchain::{
    check_body, digest_by, from_hex32, record_digest, DigestKind, Link, GENESIS,
};
use crate::error::Result;
use crate::log::{Log, Topic};
use serde::Serialize;
use std::collections::BTreeMap;
use std::ops::ControlFlow;

/// A record (or checkpoint) that does not match what was attested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub what: String,
    pub expected: String,
    pub found: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}@{}: {}: expected {}, found {}",
            self.topic, self.partition, self.offset, self.what, self.expected, self.found
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    pub records: u64,
    pub checkpoints: u64,
    /// Records attested by at least one checkpoint.
    pub covered: u64,
    /// The first mismatch of each partition that has one, in log order.
    pub mismatches: Vec<Mismatch>,
    /// What a verifier key's signatures attest (`verify --key`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed: Option<super::signed::SignedSummary>,
}

impl VerifyReport {
    pub fn first(&self) -> Option<&Mismatch> {
        self.mismatches.first()
    }
    pub fn clean(&self) -> bool {
        self.mismatches.is_empty()
    }
}

pub(crate) fn mismatch(
    topic: &str,
    partition: u32,
    offset: u64,
    what: impl Into<String>,
    expected: impl Into<String>,
    found: impl Into<String>,
) -> Mismatch {
    Mismatch {
        topic: topic.to_string(),
        partition,
        offset,
        what: what.into(),
        expected: expected.into(),
        found: found.into(),
    }
}

/// The mismatch naming a record whose body does not match its envelope.
fn broken_body(topic: &str, partition: u32, offset: u64, e: crate::codec::CodecError) -> Mismatch {
    mismatch(
        topic,
        partition,
        offset,
        "record body does not match its digest",
        "a record whose body matches its digest",
        e.to_string(),
    )
}

/// A record's digests of each kind, computed when first asked for: from
/// its bytes, or — digested ahead, before the checkpoints were read —
/// its leaf digest alone.
struct Digests<'a> {
    topic: &'a str,
    partition: u32,
    offset: u64,
    payload: Option<&'a [u8]>,
    leaf: Option<[u8; 32]>,
    envelope: Option<[u8; 32]>,
}

impl<'a> Digests<'a> {
    fn of(topic: &'a str, partition: u32, offset: u64, payload: &'a [u8]) -> Self {
        Digests {
            topic,
            partition,
            offset,
            payload: Some(payload),
            leaf: None,
            envelope: None,
        }
    }

    fn leaf(topic: &'a str, partition: u32, offset: u64, leaf: [u8; 32]) -> Self {
        Digests {
            topic,
            partition,
            offset,
            payload: None,
            leaf: Some(leaf),
            envelope: None,
        }
    }

    fn get(&mut self, kind: DigestKind) -> std::result::Result<[u8; 32], Mismatch> {
        let cached = match kind {
            DigestKind::Leaf => self.leaf,
            DigestKind::Envelope => self.envelope,
        };
        if let Some(d) = cached {
            return Ok(d);
        }
        let Some(payload) = self.payload else {
            // Only leaf digests are taken ahead, and only for partitions
            // whose checkpoints are all v2 (`finish_partition`).
            return Err(mismatch(
                self.topic,
                self.partition,
                self.offset,
                "record digest could not be computed",
                format!("{kind:?} digest"),
                "only the leaf digest",
            ));
        };
        let d = digest_by(kind, payload)
            .map_err(|e| broken_body(self.topic, self.partition, self.offset, e))?;
        match kind {
            DigestKind::Leaf => self.leaf = Some(d),
            DigestKind::Envelope => self.envelope = Some(d),
        }
        Ok(d)
    }

    /// Check the body against its envelope; `None` when the bytes are not
    /// at hand (the caller checks them later).
    fn body(&mut self) -> Option<std::result::Result<(), Mismatch>> {
        if self.envelope.is_some() {
            return Some(Ok(()));
        }
        let payload = self.payload?;
        Some(
            check_body(payload)
                .map_err(|e| broken_body(self.topic, self.partition, self.offset, e)),
        )
    }
}

/// A record's digests against the checkpoints covering it, each of the
/// kind its checkpoint lists; shared by the log and the export verifier.
fn check_digests<'a>(
    digests: &mut Digests<'_>,
    cps: impl IntoIterator<Item = &'a Checkpoint>,
) -> std::result::Result<(), Mismatch> {
    for cp in cps {
        if let Some(want) = cp.digest_at(digests.offset) {
            let d = digests.get(cp.kind())?;
            if *want != d {
                return Err(mismatch(
                    digests.topic,
                    digests.partition,
                    digests.offset,
                    "record digest differs from checkpoint",
                    hex::encode(want),
                    hex::encode(d),
                ));
            }
        }
    }
    Ok(())
}

/// The checkpoints once read, by (topic, partition). Partition workers wait
/// for them; until they are there, they compute digests ahead.
struct Attestations {
    ready: std::sync::Mutex<Option<ByPartition>>,
    cv: std::sync::Condvar,
}

impl Attestations {
    fn set(&self, by_tp: ByPartition) {
        if let Ok(mut g) = self.ready.lock() {
            *g = Some(by_tp);
        }
        self.cv.notify_all();
    }

    /// Asked once per batch of records digested ahead, so a lock is cheap.
    fn is_set(&self) -> bool {
        self.ready.lock().map_or(true, |g| g.is_some())
    }

    /// The checkpoints of one partition, waiting until they are read.
    fn of(&self, topic: Topic, p: u32) -> Result<Vec<Header>> {
        let poisoned = || crate::error::LedgerError::Internal("a verify thread panicked");
        let mut g = self.ready.lock().map_err(|_| poisoned())?;
        while g.is_none() {
            g = self.cv.wait(g).map_err(|_| poisoned())?;
        }
        Ok(g.as_mut()
            .and_then(|m| m.remove(&(topic.name().to_string(), p)))
            .unwrap_or_default())
    }
}

/// Records digested ahead, over all partitions, while the checkpoints are
/// still being read (40 bytes each): bounds the memory of that overlap.
const DIGEST_AHEAD: usize = 1 << 21;

/// A partition's records digested before its checkpoints were known:
/// their leaf digests (what v2 checkpoints list).
struct Ahead {
    topic: Topic,
    p: u32,
    digests: Vec<(u64, [u8; 32])>,
    /// The offset after the last record digested.
    at: u64,
}

/// Verify the whole log. `progress` is told how many records were read.
/// Partitions are independent chains, so they are verified in parallel, one
/// thread per core; reading the checkpoints is one more job, and the
/// partitions digest their records meanwhile.
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
    verify_log_inner(log, progress, true)
}

fn verify_log_inner(
    log: &dyn Log,
    progress: &(dyn Fn(u64) + Sync),
    trees: bool,
) -> Result<(VerifyReport, Roots)> {
    let mut report = VerifyReport::default();
    let mut roots = Roots::new();
    let mut parts = Vec::new();
    for topic in CHAINED_TOPICS {
        for p in 0..log.partitions(topic) {
            parts.push((topic, p));
        }
    }
    let attested = Attestations {
        ready: std::sync::Mutex::new(None),
        cv: std::sync::Condvar::new(),
    };
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(parts.len() + 1);
    // Job 0 reads the checkpoints; the others verify partitions, largest
    // first so the threads finish together. Outcomes keep `parts` order.
    let mut by_size: Vec<usize> = (0..parts.len()).collect();
    let sizes: Vec<u64> = parts
        .iter()
        .map(|(t, p)| log.end_offset(*t, *p))
        .collect::<std::result::Result<_, _>>()?;
    by_size.sort_by_key(|&j| std::cmp::Reverse(sizes[j]));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let budget = std::sync::atomic::AtomicUsize::new(DIGEST_AHEAD);
    let parked: std::sync::Mutex<Vec<(usize, Ahead)>> = std::sync::Mutex::new(Vec::new());
    let mut unreadable = Vec::new();
    let results: Vec<Result<Vec<(usize, PartitionOutcome)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        if i == 0 {
                            let read = read_checkpoints(log);
                            let (by_tp, bad, n) = match read {
                                Ok(x) => x,
                                Err(e) => {
                                    // Unblock the others before failing.
                                    attested.set(BTreeMap::new());
                                    return Err(e);
                                }
                            };
                            attested.set(by_tp);
                            done.push((0, PartitionOutcome::checkpoints(n, bad)));
                            continue;
                        }
                        if let Some(&j) = by_size.get(i - 1) {
                            let (topic, p) = parts[j];
                            let ahead = digest_ahead(log, topic, p, &attested, &budget, progress)?;
                            if attested.is_set() {
                                done.push((
                                    j + 1,
                                    finish_partition(log, ahead, &attested, progress, trees)?,
                                ));
                            } else if let Ok(mut parked) = parked.lock() {
                                // Checkpoints still being read: digest the
                                // next partition rather than wait.
                                parked.push((j + 1, ahead));
                            }
                            continue;
                        }
                        let job = parked.lock().ok().and_then(|mut q| q.pop());
                        let Some((j, ahead)) = job else {
                            return Ok(done);
                        };
                        done.push((j, finish_partition(log, ahead, &attested, progress, trees)?));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(crate::error::LedgerError::Internal(
                        "a verify thread panicked",
                    ))
                })
            })
            .collect()
    });
    let mut outcomes: Vec<(usize, PartitionOutcome)> = Vec::new();
    for r in results {
        outcomes.extend(r?);
    }
    // Report in log order, whatever order the threads finished in.
    outcomes.sort_by_key(|(i, _)| *i);
    for (i, o) in outcomes {
        if let (Some(&(topic, p)), false) = (
            i.checked_sub(1).and_then(|j| parts.get(j)),
            o.roots.is_empty(),
        ) {
            roots.insert((topic, p), o.roots);
        }
        report.records += o.records;
        report.covered += o.covered;
        report.checkpoints += o.checkpoints;
        unreadable.extend(o.unreadable);
        if let Some(m) = o.mismatch {
            report.mismatches.push(m);
        }
    }
    // Unreadable checkpoints first, as before the partitions.
    unreadable.append(&mut report.mismatches);
    report.mismatches = unreadable;
    let left = attested
        .ready
        .into_inner()
        .ok()
        .flatten()
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
    Ok((report, roots))
}

/// Checkpoints by (topic name, partition).
type ByPartition = BTreeMap<(String, u32), Vec<Header>>;

/// Every checkpoint, by (topic, partition) without duplicates; the
/// unreadable ones as mismatches; how many there were.
type ReadCheckpoints = (ByPartition, Vec<Mismatch>, u64);

fn read_checkpoints(log: &dyn Log) -> Result<ReadCheckpoints> {
    let mut by_tp = ByPartition::new();
    let mut bad = Vec::new();
    let mut n = 0;
    for (at, cp) in checkpoint::read_headers(log)? {
        n += 1;
        match cp {
            Ok(cp) => {
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
    Ok((by_tp, bad, n))
}

/// What one job of `verify_log` found.
#[derive(Default)]
struct PartitionOutcome {
    records: u64,
    covered: u64,
    checkpoints: u64,
    unreadable: Vec<Mismatch>,
    mismatch: Option<Mismatch>,
    /// The partition's tree roots at checkpoint ends (when asked for).
    roots: BTreeMap<u64, super::merkle::Hash>,
}

impl PartitionOutcome {
    fn checkpoints(n: u64, unreadable: Vec<Mismatch>) -> Self {
        PartitionOutcome {
            checkpoints: n,
            unreadable,
            ..Default::default()
        }
    }
}

/// Digest a partition's records from the start while the checkpoints are
/// being read, within the shared `budget` of records.
fn digest_ahead(
    log: &dyn Log,
    topic: Topic,
    p: u32,
    attested: &Attestations,
    budget: &std::sync::atomic::AtomicUsize,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Ahead> {
    use std::sync::atomic::Ordering;
    let mut ahead = Ahead {
        topic,
        p,
        digests: Vec::new(),
        at: 0,
    };
    const BATCH: usize = 4096;
    while !attested.is_set()
        && budget
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |b| b.checked_sub(BATCH))
            .is_ok()
    {
        let after = log.scan(topic, p, ahead.at, BATCH, &mut |r| {
            ahead
                .digests
                .push((r.offset, super::merkle::leaf_hash(r.payload)));
            ControlFlow::Continue(())
        })?;
        if after == ahead.at {
            break;
        }
        progress(after - ahead.at);
        ahead.at = after;
    }
    Ok(ahead)
}

/// Check a partition against its checkpoints (waiting for them): first the
/// records digested ahead, then the rest read from the log.
fn finish_partition(
    log: &dyn Log,
    ahead: Ahead,
    attested: &Attestations,
    progress: &(dyn Fn(u64) + Sync),
    tree: bool,
) -> Result<PartitionOutcome> {
    let Ahead {
        topic,
        p,
        digests,
        at: ahead_at,
    } = ahead;
    let name = topic.name();
    let cps = attested.of(topic, p)?;
    let mut check = ChainCheck::new(log, name, p, &cps);
    if tree {
        check.tree = Some(super::merkle::Frontier::new());
    }
    // Leaf digests taken ahead serve only checkpoints that list leaf
    // digests; a partition with v1 checkpoints is read again from its start.
    let mut at = 0;
    if cps.iter().all(|c| c.kind() == DigestKind::Leaf) {
        for (o, d) in digests {
            if check
                .record(o, &mut Digests::leaf(name, p, o, d))
                .is_break()
            {
                break;
            }
        }
        at = ahead_at;
    }
    while check.found.is_none() {
        let after = log.scan(topic, p, at, 4096, &mut |r| {
            check.record(r.offset, &mut Digests::of(name, p, r.offset, r.payload))
        })?;
        if check.found.is_some() {
            break;
        }
        if after == at {
            check.end(at);
            break;
        }
        progress(after - at);
        at = after;
    }
    check_bodies_later(log, topic, &mut check)?;
    Ok(check.outcome())
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
    cps: &'a [Header],
    // Checkpoints in the order they start; `active` are those covering the
    // current offset (normally one) with their link being computed, so each
    // record costs O(1) work.
    order: Vec<&'a Header>,
    next: usize,
    active: Vec<(&'a Header, Link)>,
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
}

impl<'a> ChainCheck<'a> {
    fn new(log: &'a dyn Log, name: &'a str, p: u32, cps: &'a [Header]) -> Self {
        let mut order: Vec<&Header> = cps.iter().collect();
        order.sort_by_key(|c| (c.from, c.to));
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
        }
    }

    fn fail(&mut self, m: Mismatch) -> ControlFlow<()> {
        self.found = Some(m);
        ControlFlow::Break(())
    }

    fn record(&mut self, o: u64, digests: &mut Digests<'_>) -> ControlFlow<()> {
        let (name, p) = (self.name, self.p);
        self.records += 1;
        while self.next < self.order.len() && self.order[self.next].from <= o {
            let c = self.order[self.next];
            self.next += 1;
            if c.to <= o {
                continue;
            }
            // A link must start from a head already verified at its start.
            let prev = from_hex32(&c.prev_head);
            let known = self
                .heads
                .get(&c.from)
                .map(Vec::as_slice)
                .unwrap_or_default();
            if c.from != o || !prev.is_some_and(|h| known.contains(&h)) {
                let found = known
                    .first()
                    .map(hex::encode)
                    .unwrap_or_else(|| "no checkpoint ending here".into());
                return self.fail(mismatch(
                    name,
                    p,
                    o,
                    "chain head before this record differs from checkpoint",
                    &c.prev_head,
                    found,
                ));
            }
            self.active
                .push((c, Link::new(&prev.unwrap_or(GENESIS), c.from, c.to)));
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
        for (c, link) in &mut self.active {
            match digests.get(c.kind()) {
                Ok(d) => link.push(&d),
                Err(m) => {
                    self.found = Some(m);
                    return ControlFlow::Break(());
                }
            }
        }
        if let Some(tree) = self.tree.as_mut() {
            match digests.get(DigestKind::Leaf) {
                Ok(leaf) if tree.size() == o => tree.push(leaf),
                _ => self.tree = None,
            }
        }
        while let Some(i) = self.active.iter().position(|(c, _)| c.to == o + 1) {
            let (c, link) = self.active.swap_remove(i);
            let head = link.head();
            if from_hex32(&c.head) != Some(head) {
                return self.fail(self.head_differs(c, o, head));
            }
            let known = self.heads.entry(c.to).or_default();
            if !known.contains(&head) {
                known.push(head);
            }
            if let Some(tree) = &self.tree {
                self.roots.entry(c.to).or_insert_with(|| tree.root());
            }
        }
        ControlFlow::Continue(())
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
        let unlisted = self
            .active
            .iter()
            .filter_map(|(c, _)| self.first_unlisted(c, at))
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
            ..Default::default()
        }
    }
}

/// Why an export file cannot be checked at all (a record that does not
/// match is a [`Mismatch`] in the report instead).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("line {line}: not JSON: {source}")]
    NotJson {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("line {line}: bad checkpoint: {source}")]
    BadCheckpoint {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("line {line}: bad cosigned checkpoint: {source}")]
    BadCosigned {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("line {line}: unknown line type {found}")]
    UnknownLine { line: usize, found: String },
    #[error("line {line}: record without offset")]
    NoOffset { line: usize },
    #[error("line {line}: record_b64 is not base64")]
    NotBase64 { line: usize },
    #[error("line {line}: payload is not hex: {source}")]
    NotHex {
        line: usize,
        #[source]
        source: hex::FromHexError,
    },
}

/// Verify an export file (JSON lines written by `export`) on its own:
/// every record against the checkpoints in the file, its metadata against
/// its own bytes, every run's steps complete from 0; with `key`, every
/// record's inclusion proof against a root that key signed.
pub fn verify_export(
    text: &str,
    key: Option<&super::note::VerifierKey>,
) -> std::result::Result<VerifyReport, ExportError> {
    let trust = key.map(|k| super::signed::Trust::key_only(k.clone()));
    verify_export_trusting(text, trust.as_ref())
}

/// [`verify_export`] trusting the ledger's key and, when `trust` names
/// witnesses, requiring every record to be proven under a checkpoint
/// enough of them cosigned (the export's `cosigned` lines).
pub fn verify_export_trusting(
    text: &str,
    trust: Option<&super::signed::Trust>,
) -> std::result::Result<VerifyReport, ExportError> {
    let key = trust.map(|t| &t.key);
    let mut report = VerifyReport::default();
    let mut cosigned: Vec<(usize, super::checkpoint::Cosigned)> = Vec::new();
    let mut cps: Vec<Checkpoint> = Vec::new();
    let mut records = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|source| ExportError::NotJson {
                line: i + 1,
                source,
            })?;
        match v["type"].as_str() {
            Some("header") => {}
            Some("checkpoint") => {
                let cp: Checkpoint =
                    serde_json::from_value(v["checkpoint"].clone()).map_err(|source| {
                        ExportError::BadCheckpoint {
                            line: i + 1,
                            source,
                        }
                    })?;
                report.checkpoints += 1;
                if let Err(why) = cp.self_check() {
                    report.mismatches.push(mismatch(
                        &cp.topic,
                        cp.partition,
                        cp.from,
                        "checkpoint is inconsistent",
                        "digests folding to its head",
                        why.to_string(),
                    ));
                }
                cps.push(cp);
            }
            Some("record") => records.push((i + 1, v)),
            Some("cosigned") => {
                let mut fields = v.clone();
                if let Some(o) = fields.as_object_mut() {
                    o.remove("type");
                }
                let c =
                    serde_json::from_value(fields).map_err(|source| ExportError::BadCosigned {
                        line: i + 1,
                        source,
                    })?;
                cosigned.push((i + 1, c));
            }
            other => {
                return Err(ExportError::UnknownLine {
                    line: i + 1,
                    found: format!(
                        "{:?}",
                        other.map(|o| o.chars().take(100).collect::<String>())
                    ),
                })
            }
        }
    }
    let mut signed = key.map(|k| super::export_proof::SignedRoots::from_checkpoints(k, &cps));
    if let (Some(s), Some(t)) = (&mut signed, trust) {
        s.add_cosigned(&cosigned, t);
        report.mismatches.append(&mut s.faults);
    }
    let mut steps = super::export_proof::RunSteps::default();
    for (line, v) in records {
        let topic = v["topic"].as_str().unwrap_or_default().to_string();
        let p = v["partition"].as_u64().unwrap_or(u64::MAX) as u32;
        let o = v["offset"].as_u64().ok_or(ExportError::NoOffset { line })?;
        let payload = match v["record_b64"].as_str() {
            Some(b) => {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|_| ExportError::NotBase64 { line })?
            }
            None => hex::decode(v["payload_hex"].as_str().unwrap_or_default())
                .map_err(|source| ExportError::NotHex { line, source })?,
        };
        report.records += 1;
        steps.note(&v);
        if let Some(m) = super::export_proof::metadata_fault(&topic, p, o, &v, &payload) {
            report.mismatches.push(m);
        }
        if let Some(s) = &mut signed {
            if let Some(m) = s.prove(&topic, p, o, &v, &payload) {
                report.mismatches.push(m);
            }
        }
        let covering: Vec<&Checkpoint> = cps
            .iter()
            .filter(|c| c.topic == topic && c.partition == p && c.digest_at(o).is_some())
            .collect();
        if covering.is_empty() {
            report.mismatches.push(mismatch(
                &topic,
                p,
                o,
                "record is not covered by any checkpoint in the export",
                "a covering checkpoint",
                "none",
            ));
            continue;
        }
        report.covered += 1;
        let mut digests = Digests::of(&topic, p, o, &payload);
        let checked = digests
            .body()
            .unwrap_or(Ok(()))
            .and_then(|()| check_digests(&mut digests, covering.iter().copied()));
        if let Err(m) = checked {
            report.mismatches.push(m);
            continue;
        }
        let claimed = v["digest"].as_str().unwrap_or_default();
        let found = record_digest(&payload)
            .map(hex::encode)
            .unwrap_or_else(|e| e.to_string());
        if claimed != found {
            report.mismatches.push(mismatch(
                &topic,
                p,
                o,
                "record digest differs from the export's own",
                claimed,
                found,
            ));
        }
    }
    report.mismatches.extend(steps.gaps());
    report.signed = signed.map(|s| s.finish());
    report
        .mismatches
        .sort_by(|a, b| (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset)));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::embedded::{EmbeddedConfig, EmbeddedLog};
    use std::sync::atomic::AtomicUsize;

    fn attestations() -> Attestations {
        Attestations {
            ready: std::sync::Mutex::new(None),
            cv: std::sync::Condvar::new(),
        }
    }

    /// A log of synthetic events plus one ledger record whose body does not
    /// match its digest; returns where that record is.
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

    #[test]
    fn a_broken_record_found_while_digesting_ahead_is_named() {
        let d = tempfile::tempdir().unwrap();
        let (log, p, off) = log_with_a_broken_record(d.path());
        let att = attestations();
        let budget = AtomicUsize::new(DIGEST_AHEAD);
        let ahead = digest_ahead(&log, Topic::Ledger, p, &att, &budget, &|_| {}).unwrap();
        // Leaf digests do not look inside: the body is checked once it is
        // known that no checkpoint covers the record.
        assert_eq!(ahead.digests.last().map(|(o, _)| *o), Some(off));
        att.set(ByPartition::new());
        let out = finish_partition(&log, ahead, &att, &|_| {}, false).unwrap();
        let m = out.mismatch.expect("a mismatch");
        assert_eq!((m.partition, m.offset), (p, off));
        assert!(m.what.contains("body does not match"), "{m}");
    }

    #[test]
    fn digesting_ahead_stops_at_the_budget_and_the_rest_is_read_after() {
        let d = tempfile::tempdir().unwrap();
        let log = EmbeddedLog::open(d.path(), &EmbeddedConfig::default()).unwrap();
        crate::synthetic::write_synthetic_log(&log, 20_000).unwrap();
        let p = (0..log.partitions(Topic::Ledger))
            .max_by_key(|p| log.end_offset(Topic::Ledger, *p).unwrap())
            .unwrap();
        let end = log.end_offset(Topic::Ledger, p).unwrap();
        assert!(end > 4096, "partition too small for the test: {end}");
        let att = attestations();
        let budget = AtomicUsize::new(4096);
        let ahead = digest_ahead(&log, Topic::Ledger, p, &att, &budget, &|_| {}).unwrap();
        assert_eq!(ahead.digests.len(), 4096);
        assert_eq!(ahead.at, 4096);
        // A second partition gets nothing ahead: the budget is spent.
        let other = digest_ahead(&log, Topic::Registry, 0, &att, &budget, &|_| {}).unwrap();
        assert!(other.digests.is_empty());
        att.set(ByPartition::new());
        let out = finish_partition(&log, ahead, &att, &|_| {}, false).unwrap();
        assert!(out.mismatch.is_none());
        assert_eq!(out.records, end);
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
