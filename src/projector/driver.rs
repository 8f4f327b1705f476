//! The projection driver: reads the log partition by partition and folds
//! its records into the views in atomic batches ([`super::evolve`] per
//! record), the views' offsets in the same batch. The engine catches up
//! with it, `rebuild` builds fresh views with it.

use super::Position;
use super::PROJECT_BATCH;
use crate::codec;
use crate::error::{LedgerError, Result};
use crate::log::Log;
use crate::model::Topic;
use crate::views::Views;
use std::collections::BTreeSet;

/// Fold the log into the views from their stored offsets to the log's end:
/// the registry and checkpoints whole, and the ledger partitions in
/// `scope` (every one when `None`; a serve instance in a group projects
/// only those it owns, the others' chains are their owners' business).
pub fn project_all(
    log: &dyn Log,
    views: &Views,
    scope: Option<&BTreeSet<u32>>,
    progress: &dyn Fn(u64),
) -> Result<u64> {
    let mut applied = 0u64;
    // Ask for every projected topic's ends at once (on Kafka each is a
    // round trip), then read only partitions that have something new.
    let topics = [Topic::Registry, Topic::Ledger, Topic::Checkpoints];
    let ends = log.end_offsets_of(&topics)?;
    let mut checkpoints_behind = false;
    for (topic, ends) in topics.into_iter().zip(ends) {
        for (p, end) in ends.into_iter().enumerate() {
            let p = p as u32;
            let outside = topic == Topic::Ledger && scope.is_some_and(|s| !s.contains(&p));
            if outside || views.offset(topic, p)? >= end {
                continue;
            }
            match topic {
                Topic::Checkpoints => checkpoints_behind = true,
                _ => applied += project_partition(log, views, topic, p, None, progress)?,
            }
        }
    }
    if checkpoints_behind {
        crate::audit::attest::project_checkpoints(log, views)?;
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
        applied += evolve_batch(views, topic, p, batch)?;
    }
    progress(applied);
    Ok(applied)
}

pub(crate) type DecodedBatch = Vec<(u64, crate::codec::Record)>;

fn decode_batch(topic: Topic, p: u32, recs: Vec<crate::log::LogRecord>) -> Result<DecodedBatch> {
    recs.into_iter()
        .map(|r| {
            codec::decode_for_projection(&r.payload)
                .map(|rec| (r.offset, rec))
                .map_err(|source| LedgerError::Undecodable {
                    topic,
                    partition: p,
                    offset: r.offset,
                    source,
                })
        })
        .collect()
}

/// Apply one decoded batch and the offset it reaches in one atomic write.
pub(crate) fn evolve_batch(
    views: &Views,
    topic: Topic,
    p: u32,
    batch: DecodedBatch,
) -> Result<u64> {
    let (write, n) = prepare_batch(views, topic, p, batch)?;
    write.commit()?;
    Ok(n)
}

/// The view changes of one decoded batch and the offset it reaches, ready
/// to be written at once; and how many records it holds.
pub(crate) fn prepare_batch(
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
        super::evolve(
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
            let n = evolve_batch(views, topic, p, batch)?;
            applied += n;
            progress(n);
        }
        Ok(applied)
    })
}
