//! Commit groups on a log that pipelines them (Kafka): every operation of
//! the group hands its records to the producer and goes on without waiting
//! for the broker, its records projected at the offsets they are expected
//! to get, so the next operation decides on views that include it. The
//! view changes are held back from sled (`views::behind`) until the
//! acknowledgements arrive. Then either every record landed where it was
//! expected — the held changes stand and every answer with them — or
//! something else landed in between (another writer) or an append failed:
//! the held changes are dropped, the views are projected from the log
//! itself, and each operation is answered by what the projector kept of
//! it (`conflict` when another writer decided the same thing first, the
//! log's error when its records were not acknowledged). One round trip to
//! the brokers for a whole group instead of one per operation; answers as
//! exact as one operation at a time.

use super::{Decided, Engine, GroupEnd};
use crate::codec;
use crate::error::{LedgerError, Result};
use crate::log::Appending;
use crate::model::Topic;
use crate::projector::driver::{evolve_batch, project_partition, DecodedBatch};
use crate::projector::Position;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Topics the views project: a record of these is projected ahead.
const PROJECTED: [Topic; 3] = [Topic::Registry, Topic::Ledger, Topic::Checkpoints];

/// A catch-up this recent when a group begins counts as one inside it.
const FRESH_BEFORE: Duration = Duration::from_millis(10);

/// One append in flight inside a pipelined group.
struct InFlight {
    handle: Box<dyn Appending + Send>,
    topic: Topic,
    /// Where each record is expected to land (append order), when the
    /// views projected it ahead; `None` for topics the views do not keep
    /// (only the acknowledgement matters).
    expected: Option<Vec<(u32, u64)>>,
    /// The decisions the records carry, in append order (empty for
    /// records that are not decisions, e.g. published events).
    decided: Vec<Decided>,
    /// Digests of the records of chained topics, in append order.
    digests: Vec<[u8; 32]>,
    /// The group's operation it belongs to (`None`: the dispatch sweep).
    op: Option<usize>,
}

/// A pipelined group under way.
pub(super) struct Pipeline {
    in_flight: Vec<InFlight>,
    /// A projection ahead failed: the views must be set from the log.
    dirty: bool,
    /// The operation being decided now.
    op: Option<usize>,
    /// Operations whose answer is not what they said: refused or failed
    /// once their records were checked (first reason per operation).
    changed: BTreeMap<usize, LedgerError>,
    pub(super) started: Instant,
}

impl Engine {
    /// Inside a group: the operation decided from now on (its index in the
    /// group), so that what the end of the group finds about its records
    /// is told about it. `None` for work that is no caller's (a sweep).
    pub fn group_op(&mut self, op: Option<usize>) {
        if let Some(p) = self.pipeline.as_mut() {
            p.op = op;
        }
    }

    pub(super) fn start_pipeline(&mut self) {
        self.views.hold();
        // Views caught up right before the group (the serve loop does, the
        // moment before it starts one) count as caught up within it.
        let now = Instant::now();
        let started = self
            .caught_up_at
            .filter(|t| now.duration_since(*t) <= self.opts.max_staleness.max(FRESH_BEFORE))
            .unwrap_or(now);
        self.pipeline = Some(Pipeline {
            in_flight: Vec::new(),
            dirty: false,
            op: None,
            changed: BTreeMap::new(),
            started,
        });
    }

    /// End a pipelined group: settle what is in flight, stop holding.
    pub(super) fn finish_pipeline(&mut self) -> GroupEnd {
        self.settle_in_flight();
        self.views.release_held();
        let changed = self
            .pipeline
            .take()
            .map(|p| p.changed.into_iter().collect())
            .unwrap_or_default();
        GroupEnd { changed }
    }

    /// Whether the views may be caught up inside the group without
    /// settling: they were, since the group began.
    pub(super) fn caught_up_in_pipeline(&self) -> Option<bool> {
        let p = self.pipeline.as_ref()?;
        Some(self.caught_up_at.is_some_and(|t| t >= p.started))
    }

    /// Hand a commit's records to the log without waiting and project
    /// them ahead; returns where each is expected to land.
    pub(super) fn commit_in_flight(
        &mut self,
        pending: Vec<Decided>,
        encoded: Vec<Vec<u8>>,
    ) -> Result<Vec<Position>> {
        let mut positions = vec![
            Position {
                partition: 0,
                offset: 0
            };
            pending.len()
        ];
        let by_topic = super::commit::by_topic(&pending, &encoded);
        let mut slots: Vec<Option<Decided>> = pending.into_iter().map(Some).collect();
        for (topic, idx, recs) in by_topic {
            let handle = self.log.append_begin(topic, &recs)?;
            let decided: Vec<Decided> = idx.iter().filter_map(|&i| slots[i].take()).collect();
            let (expected, digests) = if PROJECTED.contains(&topic) {
                let expected = self.project_ahead_in_flight(topic, &recs);
                let digests =
                    super::commit::own_digests(topic, recs.iter().map(|(_, b)| b.as_slice()));
                (Some(expected), digests)
            } else {
                (None, Vec::new())
            };
            if let Some(expected) = &expected {
                for (&i, &(partition, offset)) in idx.iter().zip(expected) {
                    positions[i] = Position { partition, offset };
                }
            }
            self.push_in_flight(InFlight {
                handle,
                topic,
                expected,
                decided,
                digests,
                op: None,
            });
        }
        Ok(positions)
    }

    fn push_in_flight(&mut self, mut f: InFlight) {
        if let Some(p) = self.pipeline.as_mut() {
            f.op = p.op;
            p.in_flight.push(f);
        }
    }

    /// Project records as landing right after what the views hold of
    /// their partitions; returns where each is expected. A failure marks
    /// the group to be set straight from the log when it settles.
    fn project_ahead_in_flight(
        &mut self,
        topic: Topic,
        recs: &[(Vec<u8>, Vec<u8>)],
    ) -> Vec<(u32, u64)> {
        let dirty = self.pipeline.as_ref().is_some_and(|p| p.dirty);
        let mut next: BTreeMap<u32, u64> = BTreeMap::new();
        let mut batches: Vec<(u32, DecodedBatch)> = Vec::new();
        let mut expected = Vec::with_capacity(recs.len());
        let mut failed: Option<LedgerError> = None;
        for (key, b) in recs {
            let partition = self.log.partition_of(topic, key);
            let offset = match next.get(&partition) {
                Some(o) => *o,
                None => self.views.offset(topic, partition).unwrap_or_else(|e| {
                    failed.get_or_insert(e.into());
                    0
                }),
            };
            next.insert(partition, offset + 1);
            expected.push((partition, offset));
            if dirty || failed.is_some() {
                continue;
            }
            match codec::decode_for_projection(b) {
                Ok(rec) => match batches.iter_mut().find(|(p, _)| *p == partition) {
                    Some((_, batch)) => batch.push((offset, rec)),
                    None => batches.push((partition, vec![(offset, rec)])),
                },
                Err(e) => failed = Some(e.into()),
            }
        }
        if failed.is_none() && !dirty {
            for (partition, batch) in batches {
                if let Err(e) = evolve_batch(&self.views, topic, partition, batch) {
                    failed = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = failed {
            tracing::warn!("projecting a group's records ahead of the acknowledgement: {e}; the group's views will be set from the log");
            if let Some(p) = self.pipeline.as_mut() {
                p.dirty = true;
            }
        }
        expected
    }

    /// Wait for everything in flight and settle the views: the held
    /// changes stand if every record landed where expected, else the views
    /// are projected from the log and each operation's records checked.
    /// The group goes on holding afterwards.
    pub(super) fn settle_in_flight(&mut self) {
        let Some(p) = self.pipeline.as_mut() else {
            return;
        };
        let in_flight = std::mem::take(&mut p.in_flight);
        let dirty = std::mem::take(&mut p.dirty);
        if in_flight.is_empty() && !dirty {
            return;
        }
        let mut as_expected = !dirty;
        let mut acked = Vec::with_capacity(in_flight.len());
        for f in in_flight {
            let InFlight {
                handle,
                topic,
                expected,
                decided,
                digests,
                op,
            } = f;
            let got = handle.wait();
            match (&got, &expected) {
                (Ok(at), Some(e)) if at != e => as_expected = false,
                (Err(_), _) => as_expected = false,
                _ => {}
            }
            acked.push((topic, expected, decided, digests, op, got));
        }
        if as_expected {
            self.views.release_held();
            self.views.hold();
            for (topic, expected, _, digests, _, _) in acked {
                for ((partition, offset), digest) in
                    expected.unwrap_or_default().into_iter().zip(digests)
                {
                    self.attestation
                        .recent
                        .record(topic, partition, offset, digest);
                }
            }
            return;
        }
        // Something else landed in between, or an append failed: what the
        // log holds decides.
        self.views.discard_held();
        self.views.hold();
        if acked.iter().any(|a| a.0 == Topic::Registry) {
            self.agent_index = None;
        }
        let mut until: BTreeMap<(bool, Topic, u32), u64> = BTreeMap::new();
        for (topic, _, _, _, _, got) in &acked {
            if let Ok(at) = got {
                for (partition, offset) in at {
                    self.attestation.recent.forget(*topic, *partition);
                    if PROJECTED.contains(topic) {
                        // Registry first: runs name versions.
                        let e = until
                            .entry((*topic != Topic::Registry, *topic, *partition))
                            .or_insert(0);
                        *e = (*e).max(offset + 1);
                    }
                }
            }
        }
        let caught_up = until.iter().try_for_each(|(&(_, topic, partition), &to)| {
            project_partition(
                self.log.as_ref(),
                &self.views,
                topic,
                partition,
                Some(to),
                &|_| {},
            )
            .map(|_| ())
        });
        if caught_up.is_err() {
            self.caught_up_at = None;
        }
        let mut changed: Vec<(Option<usize>, LedgerError)> = Vec::new();
        for (_, _, decided, _, op, got) in acked {
            let verdict = match (got, &caught_up) {
                (Err(e), _) => Err(LedgerError::from(e)),
                (Ok(_), Err(e)) => Err(LedgerError::Log(crate::log::LogError::Unavailable(
                    format!(
                    "the operation's records were acknowledged, but the views could not be set \
                     from the log to check them (they catch up on the next operation): {e}"
                ),
                ))),
                (Ok(at), Ok(())) => {
                    decided
                        .iter()
                        .zip(at)
                        .try_for_each(|(d, (partition, offset))| {
                            self.check_landed(d, partition, offset)
                        })
                }
            };
            if let Err(e) = verdict {
                changed.push((op, e));
            }
        }
        let Some(p) = self.pipeline.as_mut() else {
            return;
        };
        for (op, e) in changed {
            match op {
                Some(op) => {
                    p.changed.entry(op).or_insert(e);
                }
                None => tracing::warn!("the dispatch sweep's records: {e}"),
            }
        }
    }
}
