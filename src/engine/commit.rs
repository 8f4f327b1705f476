//! Committing an operation's decided records: encode them, append them
//! durably, then project them — from the bytes in hand when nothing else
//! landed first (ahead of the acknowledgement on Kafka), else from the log,
//! answering `conflict` when another writer decided the same step first.

use super::{Decided, Engine};
use crate::audit::checkpoint::CHAINED_TOPICS;
use crate::audit::recent::RecentDigests;
use crate::codec;
use crate::codes::Code;
use crate::codes::Refusal;
use crate::error::{LedgerError, Result};
use crate::log::Log;
use crate::model::LedgerEvent;
use crate::model::Topic;
use crate::projector::driver::{evolve_batch, prepare_batch, project_partition, DecodedBatch};
use crate::projector::Position;
use crate::views::Views;

/// What the end of a commit group found.
#[derive(Debug, Default)]
pub struct GroupEnd {
    /// Operations (by their index in the group, see
    /// [`Engine::group_op`]) whose answer must be replaced: by a conflict
    /// (another writer decided the same thing first) or by the log's error
    /// (their records were not acknowledged, or could not be checked).
    pub changed: Vec<(usize, LedgerError)>,
}

impl Engine {
    /// Encode and durably append decided records, then project them.
    ///
    /// Once the log has the records the operation has happened, whatever
    /// fails after: projecting them (the views catch up from the log on the
    /// next operation) or writing a due checkpoint (written by the next
    /// operation on that partition, or by `serve`). Such a failure is kept
    /// as a follow-up warning for the answer ([`Engine::take_follow_ups`]),
    /// never as the operation's error. Only a `conflict` found while
    /// projecting (another writer decided the same step first) fails it.
    pub(crate) fn commit(&mut self, pending: Vec<Decided>) -> Result<Vec<Position>> {
        if pending.is_empty() {
            return Ok(Vec::new());
        }
        let now = self.now_ms();
        self.closed += pending
            .iter()
            .filter(|p| matches!(p.event, LedgerEvent::RunClosed(_)))
            .count() as u64;
        let mut encoded: Vec<Vec<u8>> = Vec::with_capacity(pending.len());
        for p in &pending {
            let bytes = codec::encode_by(
                &p.event,
                &p.event_id,
                &p.key,
                now,
                &self.opts.writer,
                p.step,
                codec::Cause {
                    principal: &self.principal,
                    span: self.span,
                },
            )
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
        if self.pipeline.is_some() {
            return self.commit_in_flight(pending, encoded);
        }
        // The records as projection takes them, from what encoded them:
        // decoding the bytes just encoded would give them back at a cost
        // (a twentieth of an open+close pair's instructions).
        let records = pending
            .iter()
            .zip(&encoded)
            .map(|(p, bytes)| {
                Ok(codec::Record {
                    event_id: p.event_id.clone(),
                    chain_key: p.key.clone(),
                    time_ms: now,
                    writer: self.opts.writer.clone(),
                    step: p.step,
                    principal: self.principal.clone(),
                    span: self.span,
                    body_digest: codec::body_digest(bytes)?,
                    event: p.event.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let by_topic = by_topic(&pending, &encoded);
        let mut positions = vec![
            Position {
                partition: 0,
                offset: 0
            };
            pending.len()
        ];
        // A call whose records all go to one partition (one operation on
        // one chain: the usual case) is projected while the log makes it
        // durable, as if it lands right after what the views hold; it is
        // written to the views only if it landed exactly there.
        let mut ahead: Option<Ahead<'_>> = None;
        let single = by_topic.len() == 1;
        for (topic, idx, recs) in by_topic {
            let appending = self.log.append_begin(topic, &recs)?;
            if single {
                ahead = project_ahead(
                    self.log.as_ref(),
                    &self.views,
                    topic,
                    &recs,
                    (&encoded, &records),
                )
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
            Some(ahead) => write_if_landed(ahead, &positions, &mut self.attestation.recent),
            None => Ok(None),
        }
        .and_then(|done| match done {
            Some(touched) => Ok(touched),
            None => self.project_own(&pending, (&encoded, &records), &positions),
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
        // Inside a group the records are not readable yet: checkpoints wait
        // for the group's end.
        if self.grouping {
            return Ok(positions);
        }
        if let Err(e) = self.checkpoint_partitions(false, &touched) {
            self.follow_up_failed(format!(
                "the operation's records are in the log, but writing a due checkpoint failed \
                 (retried on the next operation on that partition, and by `serve`): {e}"
            ));
        }
        Ok(positions)
    }

    /// Group commit: the operations decided until [`Engine::end_group`]
    /// are appended as they are decided, each seeing the ones before it in
    /// the views, and made durable together by one sync per partition
    /// written. Nothing decided in a group may be answered before
    /// `end_group` returns ok. Only operations may run inside a group:
    /// reads of the log (trails, exports) see only what is durable.
    ///
    /// On a log that pipelines groups (Kafka) the records are handed over
    /// without waiting and projected where they are expected to land; the
    /// group's end checks that they did (see `pipeline`).
    pub fn begin_group(&mut self) {
        self.grouping = true;
        if self.log.pipelines_groups() {
            self.start_pipeline();
        } else {
            self.log.begin_group();
        }
    }

    /// Make the group durable; then write the checkpoints it made due. An
    /// error means no operation of the group may be answered ok (their
    /// records may or may not be in the log; the views are set straight
    /// from the log when the engine is next opened). Ok says which
    /// operations must be answered otherwise than they were decided
    /// (pipelined groups: see `pipeline`).
    pub fn end_group(&mut self) -> Result<GroupEnd> {
        self.seal_group(false)?;
        let end = self.group_synced()?;
        self.after_groups();
        Ok(end)
    }

    /// A follow-up of a durable operation failed: keep it for the answer.
    fn follow_up_failed(&mut self, what: String) {
        tracing::warn!("{what}");
        self.follow_ups.push(what);
    }

    /// Follow-ups that failed since the last call (see `Engine::commit`):
    /// the operation they belong to happened; these say what is still to
    /// be done and will be retried.
    pub fn take_follow_ups(&mut self) -> Vec<String> {
        std::mem::take(&mut self.follow_ups)
    }

    /// Project the records this call appended; returns the partitions of
    /// chained topics they touched (where a checkpoint may now be due).
    fn project_own(
        &mut self,
        pending: &[Decided],
        (encoded, records): (&[Vec<u8>], &[codec::Record]),
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
                    .map(|(offset, i)| Ok((*offset, records[*i].clone())))
                    .collect::<Result<DecodedBatch>>()?;
                evolve_batch(&self.views, topic, part, batch)?;
                if CHAINED_TOPICS.contains(&topic) {
                    for (offset, i) in &recs {
                        let digest = crate::audit::checkpoint::digest_now(&encoded[*i]);
                        self.attestation.recent.record(topic, part, *offset, digest);
                    }
                }
            } else {
                self.attestation.recent.forget(topic, part);
                let until = recs.last().map(|(o, _)| o + 1);
                project_partition(self.log.as_ref(), &self.views, topic, part, until, &|_| {})?;
                for (offset, i) in &recs {
                    self.check_landed(&pending[*i], part, *offset)?;
                }
            }
        }
        Ok(touched)
    }

    /// After projecting records of other writers that came before ours:
    /// fail the operation if one of ours was kept out as a second decision
    /// for something another writer had already decided.
    pub(super) fn check_landed(&self, p: &Decided, partition: u32, offset: u64) -> Result<()> {
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

/// A call's records of one topic: indexes into the call's decisions, and
/// the (key, bytes) to append.
pub(super) type TopicBatch = (Topic, Vec<usize>, Vec<(Vec<u8>, Vec<u8>)>);

/// A call's records per topic, registry first: a run record may name a
/// version published in the same call.
pub(super) fn by_topic(pending: &[Decided], encoded: &[Vec<u8>]) -> Vec<TopicBatch> {
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
    by_topic.sort_by_key(|(t, _, _)| *t != Topic::Registry);
    by_topic
}

/// The digests the checkpoints will list for a call's own records of
/// `topic` (none on topics without a hash chain).
pub(super) fn own_digests<'b>(
    topic: Topic,
    payloads: impl Iterator<Item = &'b [u8]>,
) -> Vec<[u8; 32]> {
    if !CHAINED_TOPICS.contains(&topic) {
        return Vec::new();
    }
    payloads.map(crate::audit::checkpoint::digest_now).collect()
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

/// Project `recs` (encoded as `encoded`, which decode to `records`, in
/// call order) as if appended now to a log nobody else writes; `None` when
/// they span partitions.
fn project_ahead<'a>(
    log: &dyn Log,
    views: &'a Views,
    topic: Topic,
    recs: &[(Vec<u8>, Vec<u8>)],
    (encoded, records): (&[Vec<u8>], &[codec::Record]),
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
    let batch = records
        .iter()
        .enumerate()
        .map(|(i, record)| (first + i as u64, record.clone()))
        .collect::<DecodedBatch>();
    let digests = own_digests(topic, encoded.iter().map(Vec::as_slice));
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
    recent: &mut RecentDigests,
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
