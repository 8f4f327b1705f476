//! Digests of the records this engine appended and projected itself, by
//! partition, so that the checkpoint over them is built without reading
//! them back. On Kafka, reading a thousand records back cost a few hundred
//! milliseconds — as much as all of the engine's own work for those
//! thousand operations. Only an unbroken stretch of the partition is kept;
//! anything else (another writer's records, a restart) falls back to
//! reading the log.

use crate::audit::checkpoint::{Span, CHECKPOINT_INTERVAL};
use crate::audit::hashchain::HexDigest;
use crate::model::Topic;
use std::collections::HashMap;

/// Most digests held per partition; past it the older half goes.
const MAX_HELD: usize = 8 * CHECKPOINT_INTERVAL as usize;

#[derive(Default)]
pub(crate) struct RecentDigests {
    by_partition: HashMap<(Topic, u32), Stretch>,
}

/// The digests of offsets `[from, from + digests.len())`.
struct Stretch {
    from: u64,
    digests: Vec<HexDigest>,
}

impl RecentDigests {
    /// The digest of the record at `offset`; a gap starts a new stretch.
    pub fn record(&mut self, topic: Topic, partition: u32, offset: u64, digest: [u8; 32]) {
        let s = self
            .by_partition
            .entry((topic, partition))
            .or_insert(Stretch {
                from: offset,
                digests: Vec::new(),
            });
        if s.from + s.digests.len() as u64 != offset {
            s.from = offset;
            s.digests.clear();
        }
        s.digests.push(HexDigest(digest));
        if s.digests.len() > MAX_HELD {
            let drop = MAX_HELD / 2;
            s.digests.drain(..drop);
            s.from += drop as u64;
        }
    }

    /// Records of this partition went by that were not recorded here.
    pub fn forget(&mut self, topic: Topic, partition: u32) {
        self.by_partition.remove(&(topic, partition));
    }

    /// The digests of a span if every one of them is held. Digests before
    /// the span's end are let go either way: checkpoints only move forward.
    pub fn take(&mut self, span: &Span) -> Option<Vec<HexDigest>> {
        let s = self.by_partition.get_mut(&(span.topic, span.partition))?;
        let end = s.from + s.digests.len() as u64;
        let held = (s.from <= span.from && span.to <= end).then(|| {
            let at = (span.from - s.from) as usize;
            s.digests[at..at + (span.to - span.from) as usize].to_vec()
        });
        let spent = (span.to.saturating_sub(s.from) as usize).min(s.digests.len());
        s.digests.drain(..spent);
        s.from += spent as u64;
        held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(from: u64, to: u64) -> Span {
        Span {
            topic: Topic::Ledger,
            partition: 1,
            from,
            to,
            prev_head: [0; 32],
        }
    }

    fn d(i: u64) -> [u8; 32] {
        let mut d = [0u8; 32];
        d[..8].copy_from_slice(&i.to_be_bytes());
        d
    }

    fn offsets(v: &[HexDigest]) -> Vec<u64> {
        v.iter()
            .map(|h| u64::from_be_bytes(h.0[..8].try_into().unwrap()))
            .collect()
    }

    #[test]
    fn a_held_span_is_handed_out_once_and_what_precedes_it_let_go() {
        let mut r = RecentDigests::default();
        for o in 10..20 {
            r.record(Topic::Ledger, 1, o, d(o));
        }
        assert_eq!(offsets(&r.take(&span(12, 15)).unwrap()), [12, 13, 14]);
        // Spent: 10..15 is gone, 15..20 is still held.
        assert!(r.take(&span(12, 15)).is_none());
        assert_eq!(
            offsets(&r.take(&span(15, 20)).unwrap()),
            [15, 16, 17, 18, 19]
        );
        assert!(r.take(&span(20, 21)).is_none());
    }

    #[test]
    fn a_span_not_wholly_held_is_not_handed_out() {
        let mut r = RecentDigests::default();
        for o in 5..8 {
            r.record(Topic::Ledger, 1, o, d(o));
        }
        assert!(r.take(&span(4, 6)).is_none(), "starts before the stretch");
        assert!(r.take(&span(6, 9)).is_none(), "ends after it");
        let mut other = span(5, 6);
        other.partition = 2;
        assert!(r.take(&other).is_none(), "another partition");
    }

    #[test]
    fn a_gap_or_a_forget_starts_over() {
        let mut r = RecentDigests::default();
        r.record(Topic::Ledger, 1, 0, d(0));
        r.record(Topic::Ledger, 1, 1, d(1));
        r.record(Topic::Ledger, 1, 5, d(5));
        assert!(r.take(&span(0, 2)).is_none());
        r.record(Topic::Ledger, 1, 6, d(6));
        assert_eq!(offsets(&r.take(&span(5, 7)).unwrap()), [5, 6]);
        r.record(Topic::Ledger, 1, 7, d(7));
        r.forget(Topic::Ledger, 1);
        assert!(r.take(&span(7, 8)).is_none());
    }

    #[test]
    fn memory_stays_bounded_when_no_checkpoint_takes_them() {
        let mut r = RecentDigests::default();
        let n = 3 * MAX_HELD as u64;
        for o in 0..n {
            r.record(Topic::Ledger, 1, o, d(o));
        }
        let s = &r.by_partition[&(Topic::Ledger, 1)];
        assert!(s.digests.len() <= MAX_HELD);
        assert_eq!(s.from + s.digests.len() as u64, n);
        assert_eq!(offsets(&r.take(&span(n - 2, n)).unwrap()), [n - 2, n - 1]);
    }
}
