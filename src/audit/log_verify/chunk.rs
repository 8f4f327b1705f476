//! The chunks of a partition that `verify`'s workers digest in any order:
//! each record's digests, and the piece of the partition's Merkle tree
//! built from their leaves, within the memory budget of digesting ahead.

use super::{poisoned, Pass};
use crate::audit::checkpoint::Header;
use crate::audit::findings::{broken_body, Mismatch};
use crate::audit::hashchain::check_body;
use crate::error::Result;
use std::ops::ControlFlow;

/// A partition's records digested by one job.
pub(super) struct Chunk {
    pub(super) from: u64,
    /// Where the next chunk starts; for the last, where the log ends.
    pub(super) to: u64,
    pub(super) last: bool,
    pub(super) recs: Vec<Rec>,
    /// The first record whose body does not match its envelope (no
    /// checkpoint covering it); `recs` stop before it.
    pub(super) broken: Option<Mismatch>,
    /// The chunk's own Merkle frontier, when trees are built and the
    /// checkpoints' ends were known as it was digested.
    pub(super) tree: Option<ChunkTree>,
}

/// The Merkle frontier of a chunk's leaves, built by the worker that
/// digested it, and its frontiers at the checkpoint ends inside it: the
/// check joins them to the partition's tree in order (a chunk is aligned
/// to its power-of-two size) instead of hashing the tree's nodes alone.
#[derive(Default)]
pub(super) struct ChunkTree {
    pub(super) frontier: crate::audit::merkle::Frontier,
    pub(super) at_ends: Vec<(u64, crate::audit::merkle::Frontier)>,
}

pub(super) struct Rec {
    pub(super) offset: u64,
    pub(super) leaf: [u8; 32],
    /// No checkpoint covers it and its body was found to match.
    pub(super) body_checked: bool,
}

impl<'a> Pass<'a> {
    /// Digest the records of `[from, to)` (to the end for `None`); once
    /// the checkpoints are known, bodies no checkpoint covers are checked
    /// here too, while their bytes are at hand.
    pub(super) fn digest(&self, i: usize, from: u64, to: Option<u64>) -> Result<Chunk> {
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
                    let leaf = crate::audit::merkle::leaf_hash(r.payload);
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

    pub(super) fn recycle(&self, chunks: impl IntoIterator<Item = Chunk>) {
        if let Ok(mut pool) = self.pool.lock() {
            pool.extend(chunks.into_iter().map(|c| c.recs));
        }
    }
}

/// The offset ranges some checkpoint covers, sorted and merged.
pub(super) fn covered_spans(cps: &[Header]) -> Vec<(u64, u64)> {
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
pub(super) fn is_covered(spans: &[(u64, u64)], at: &mut usize, o: u64) -> bool {
    while spans.get(*at).is_some_and(|&(_, e)| e <= o) {
        *at += 1;
    }
    spans.get(*at).is_some_and(|&(s, _)| s <= o)
}
