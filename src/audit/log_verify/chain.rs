//! One partition's hash chain checked in offset order against its
//! checkpoints: heads, spans, digest lists and the Merkle roots at each
//! checkpoint's end, naming the first record that does not match.

use super::chunk::ChunkTree;
use crate::audit::checkpoint::{self, Header, CHAINED_TOPICS};
use crate::audit::digests::Digests;
use crate::audit::findings::{broken_body, mismatch, Mismatch};
use crate::audit::hashchain::{check_body, digest_by, from_hex32, DigestKind, Link, GENESIS};
use crate::error::Result;
use crate::log::Log;
use crate::model::Topic;
use std::collections::BTreeMap;
use std::ops::ControlFlow;

/// The head verified at an offset, as a mismatch shows it.
pub(super) fn head_shown(known: &[[u8; 32]]) -> String {
    known
        .first()
        .map(hex::encode)
        .unwrap_or_else(|| "no checkpoint ending here".into())
}

/// What the check of one partition found.
pub(super) struct PartitionOutcome {
    pub(super) records: u64,
    pub(super) covered: u64,
    pub(super) mismatch: Option<Mismatch>,
    /// The partition's tree roots at checkpoint ends (when asked for).
    pub(super) roots: BTreeMap<u64, crate::audit::merkle::Hash>,
}

/// The records no checkpoint covered whose bytes were not at hand when
/// they were digested: check their bodies against their envelopes now,
/// keeping the first mismatch in log order.
pub(super) fn check_bodies_later(
    log: &dyn Log,
    topic: Topic,
    check: &mut ChainCheck<'_>,
) -> Result<()> {
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
pub(super) struct ChainCheck<'a> {
    /// Where a checkpoint's digest list is read from once its head does
    /// not match.
    pub(super) log: &'a dyn Log,
    pub(super) name: &'a str,
    pub(super) p: u32,
    pub(super) cps: Vec<Header>,
    // Checkpoints (indices into `cps`) in the order they start; `active`
    // are those covering the current offset (normally one) with their link
    // being computed, so each record costs O(1) work.
    pub(super) order: Vec<usize>,
    pub(super) next: usize,
    pub(super) active: Vec<(usize, Link)>,
    // Heads verified so far, by the offset they end at: where the next link
    // must start from. Several writers may each have chained checkpoints
    // with different boundaries, hence a list.
    pub(super) heads: BTreeMap<u64, Vec<[u8; 32]>>,
    pub(super) records: u64,
    pub(super) covered: u64,
    pub(super) found: Option<Mismatch>,
    /// Records no checkpoint covers whose bodies are still to be checked
    /// (digested ahead, without their bytes), in offset order.
    pub(super) bodies_later: Vec<u64>,
    /// The partition's Merkle tree over the leaf digests so far (when
    /// asked for; dropped should a record come out of order), and its
    /// roots at checkpoint ends.
    pub(super) tree: Option<crate::audit::merkle::Frontier>,
    pub(super) roots: BTreeMap<u64, crate::audit::merkle::Hash>,
    /// The tree grows leaf by leaf here (else by chunks, see `graft`).
    pub(super) tree_inline: bool,
}

impl<'a> ChainCheck<'a> {
    pub(super) fn new(log: &'a dyn Log, name: &'a str, p: u32, cps: Vec<Header>) -> Self {
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

    pub(super) fn fail(&mut self, m: Mismatch) -> ControlFlow<()> {
        self.found = Some(m);
        ControlFlow::Break(())
    }

    pub(super) fn record(&mut self, o: u64, digests: &mut Digests<'_>) -> ControlFlow<()> {
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
    pub(super) fn empty_differs(&mut self, ci: usize) -> Option<Mismatch> {
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
    pub(super) fn graft(&mut self, from: u64, chunk: ChunkTree) {
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
    pub(super) fn head_differs(&self, c: &Header, o: u64, head: [u8; 32]) -> Mismatch {
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
    pub(super) fn first_unlisted(&self, c: &Header, until: u64) -> Option<Mismatch> {
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
    pub(super) fn end(&mut self, at: u64) {
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

    pub(super) fn outcome(self) -> PartitionOutcome {
        PartitionOutcome {
            roots: self.roots,
            records: self.records,
            covered: self.covered,
            mismatch: self.found,
        }
    }
}
