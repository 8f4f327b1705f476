//! Attestation (R16): writing the checkpoints that chain each partition's
//! records, and folding the checkpoints topic into the marks the views keep
//! (how far each partition is attested, and its head).

use super::checkpoint::Checkpoint;
use super::hashchain::link_head;
use super::note::{origin, CheckpointBody, SignerKey};
use super::recent::RecentDigests;
use crate::error::Result;
use crate::log::Log;
use crate::model::Topic;
use crate::views::Views;
use std::collections::HashMap;

/// What the engine remembers between operations to checkpoint cheaply.
#[derive(Default)]
pub struct Attestation {
    /// Digests of the records the engine appended and projected itself.
    pub(crate) recent: RecentDigests,
    /// The checkpoint mark last read per partition. Marks only move
    /// forward, so it is a floor: while fewer records than an interval lie
    /// past it, no checkpoint is due and the mark need not be read again.
    mark_floor: HashMap<(Topic, u32), u64>,
    /// Per partition, the size at which its held note was last found
    /// signed by this engine's key: nothing to sign again until it grows.
    signed_at: HashMap<(Topic, u32), u64>,
}

/// Who writes the checkpoints, when, and with which key they are signed.
pub struct Author<'a> {
    pub now_ms: u64,
    pub writer: &'a str,
    pub signer: Option<&'a SignerKey>,
}

impl Attestation {
    /// Write the checkpoints due on `partitions`: every full interval of
    /// records not yet covered, and with `force` the partial tail too.
    pub fn checkpoint(
        &mut self,
        log: &dyn Log,
        views: &Views,
        partitions: &[(Topic, u32)],
        force: bool,
        by: &Author<'_>,
    ) -> Result<Vec<Checkpoint>> {
        let Author {
            now_ms,
            writer,
            signer,
        } = *by;
        use super::checkpoint::{self, CHECKPOINT_INTERVAL};
        let mut written = Vec::new();
        let mut unfolded = false;
        for &(topic, p) in partitions {
            let end = views.offset(topic, p)?;
            let below_floor = |floor: &u64| end.saturating_sub(*floor) < CHECKPOINT_INTERVAL;
            if !force && self.mark_floor.get(&(topic, p)).is_some_and(below_floor) {
                continue;
            }
            let mut mark = views.checkpoint_mark(topic, p)?;
            // Read the views again next time if a checkpoint is written below.
            if end.saturating_sub(mark.to) < CHECKPOINT_INTERVAL {
                self.mark_floor.insert((topic, p), mark.to);
            } else {
                self.mark_floor.remove(&(topic, p));
            }
            loop {
                let to = if end - mark.to.min(end) >= CHECKPOINT_INTERVAL {
                    mark.to + CHECKPOINT_INTERVAL
                } else if force && end > mark.to {
                    end
                } else {
                    break;
                };
                let span = checkpoint::Span {
                    topic,
                    partition: p,
                    from: mark.to,
                    to,
                    prev_head: mark.head,
                };
                let mut cp = match self.recent.take(&span) {
                    Some(digests) => checkpoint::assemble(span, digests, now_ms, writer),
                    None => checkpoint::build(log, span, now_ms, writer)?,
                };
                if let Some(key) = signer {
                    cp.note = Some(sign(log, views, topic, p, to, key)?);
                }
                unfolded |= !fold_own(log, views, &cp)?;
                let head = super::hashchain::from_hex32(&cp.head).unwrap_or(super::GENESIS);
                mark = crate::views::CheckpointMark { to, head };
                written.push(cp);
            }
            if let Some(key) = signer.filter(|_| force && end > 0 && mark.to == end) {
                if let Some(cp) = self.sign_attested(log, views, (topic, p), mark, key, by)? {
                    unfolded |= !fold_own(log, views, &cp)?;
                    written.push(cp);
                }
            }
        }
        if unfolded {
            project_checkpoints(log, views)?;
        }
        Ok(written)
    }
}

impl Attestation {
    /// Records every checkpoint already covers, but no note signed by
    /// `key` attests at the log's end (the key is new, or replaced one
    /// whose notes its verifier cannot open): a checkpoint of no records
    /// at the end carries the signed note of the whole tree, so
    /// `checkpoint` after `key generate` attests what is there without
    /// waiting for new records.
    fn sign_attested(
        &mut self,
        log: &dyn Log,
        views: &Views,
        (topic, p): (Topic, u32),
        mark: crate::views::CheckpointMark,
        key: &SignerKey,
        by: &Author<'_>,
    ) -> Result<Option<Checkpoint>> {
        if self.signed_at.get(&(topic, p)) == Some(&mark.to) {
            return Ok(None);
        }
        let held = views.checkpoint_note(topic, p)?;
        let signed_here = held.as_deref().is_some_and(|note| {
            key.verifier()
                .open(note)
                .ok()
                .and_then(|text| CheckpointBody::parse(text).ok())
                .is_some_and(|b| b.size == mark.to && b.origin == origin(key.name(), topic, p))
        });
        self.signed_at.insert((topic, p), mark.to);
        if signed_here {
            return Ok(None);
        }
        let span = super::checkpoint::Span {
            topic,
            partition: p,
            from: mark.to,
            to: mark.to,
            prev_head: mark.head,
        };
        let mut cp = super::checkpoint::assemble(span, Vec::new(), by.now_ms, by.writer);
        cp.note = Some(sign(log, views, topic, p, mark.to, key)?);
        Ok(Some(cp))
    }
}

/// Append a checkpoint the engine wrote and fold it in from what it holds
/// when nothing came before it on the checkpoints topic (a read on Kafka
/// costs more than the append did); false when it was not folded, and the
/// topic must be projected.
fn fold_own(log: &dyn Log, views: &Views, cp: &Checkpoint) -> Result<bool> {
    let placed = super::checkpoint::append(log, std::slice::from_ref(cp))?;
    match placed.first() {
        Some(&(cp_part, at)) if views.offset(Topic::Checkpoints, cp_part)? == at => {
            let mut txn = views.txn();
            fold_checkpoint(&mut txn, cp)?;
            txn.set_offset(Topic::Checkpoints, cp_part, at + 1);
            txn.commit()?;
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// The signed note of the partition's tree over `[0, to)`, from its tiles
/// (brought up to `to` from the log first, so they are ready to serve).
fn sign(
    log: &dyn Log,
    views: &Views,
    topic: Topic,
    p: u32,
    to: u64,
    key: &SignerKey,
) -> Result<String> {
    let tiles = views.tiles();
    super::checkpoint::sync_tiles(tiles, log, topic, p, to)?;
    let body = CheckpointBody {
        origin: origin(key.name(), topic, p),
        size: to,
        root: super::merkle::root(&tiles.nodes(topic, p), to)?,
    };
    key.sign(&body.text()).map_err(|e| {
        crate::error::LedgerError::Internal(if e == super::note::NoteError::Malformed {
            "a checkpoint body without its final newline"
        } else {
            "signing a checkpoint"
        })
    })
}

/// Follow the checkpoints topic: each partition's mark is the furthest
/// checkpoint that continues the chain from the previous mark.
pub(crate) fn project_checkpoints(log: &dyn Log, views: &Views) -> Result<()> {
    for p in 0..log.partitions(Topic::Checkpoints) {
        loop {
            let from = views.offset(Topic::Checkpoints, p)?;
            let recs = log.read(Topic::Checkpoints, p, from, crate::projector::PROJECT_BATCH)?;
            let Some(last) = recs.last().map(|r| r.offset) else {
                break;
            };
            let mut txn = views.txn();
            for r in &recs {
                if super::checkpoint::is_cosigned(&r.key) {
                    if let Ok(c) = serde_json::from_slice(&r.payload) {
                        fold_cosigned(&mut txn, &c)?;
                    }
                    continue;
                }
                let Ok(cp) = serde_json::from_slice::<Checkpoint>(&r.payload) else {
                    tracing::warn!(
                        offset = r.offset,
                        "unreadable checkpoint record; `agentledger verify` will name it"
                    );
                    continue;
                };
                fold_checkpoint(&mut txn, &cp)?;
            }
            txn.set_offset(Topic::Checkpoints, p, last + 1);
            txn.commit()?;
        }
    }
    Ok(())
}

/// Signature lines a witnessed note keeps at most (the ledger's and its
/// witnesses'): whoever may post cosignatures cannot grow it without end.
pub const MAX_NOTE_SIGNATURES: usize = 32;

/// Cosignatures move their partition's witnessed note forward: a larger
/// size replaces it, the same size adds the lines not held yet. Which
/// lines are valid is for whoever holds the witnesses' keys to check.
pub(crate) fn fold_cosigned(
    txn: &mut crate::views::ViewTxn<'_>,
    c: &super::checkpoint::Cosigned,
) -> Result<()> {
    let Some(topic) = super::checkpoint::CHAINED_TOPICS
        .into_iter()
        .find(|t| t.name() == c.topic)
    else {
        return Ok(());
    };
    let key = crate::views::keys::witnessed_note(topic, c.partition);
    let held: Option<(u64, String)> = txn.get(&key)?;
    let merged = match held {
        Some((size, note)) if size == c.size => {
            let Ok((_, lines)) = super::note::split(&c.note) else {
                return Ok(());
            };
            let mut note = note;
            for (name, sig) in lines {
                let line = format!("\u{2014} {name} {sig}\n");
                if !note.contains(&line) && note.matches('\u{2014}').count() < MAX_NOTE_SIGNATURES {
                    note.push_str(&line);
                }
            }
            note
        }
        Some((size, _)) if size > c.size => return Ok(()),
        _ => c.note.clone(),
    };
    txn.put(key, &(c.size, merged));
    Ok(())
}

/// A checkpoint moves its partition's mark when it continues the chain
/// from there; any other (a duplicate, a forgery) leaves the mark alone.
pub(crate) fn fold_checkpoint(txn: &mut crate::views::ViewTxn<'_>, cp: &Checkpoint) -> Result<()> {
    let (Some(topic), Some(head)) = (cp.topic(), super::hashchain::from_hex32(&cp.head)) else {
        return Ok(());
    };
    let key = crate::views::keys::checkpointed(topic, cp.partition);
    let mark: crate::views::CheckpointMark =
        txn.get(&key)?.unwrap_or(crate::views::CheckpointMark {
            to: 0,
            head: super::GENESIS,
        });
    if cp.from == mark.to && cp.prev_head == hex::encode(mark.head) {
        // A checkpoint of no records leaves the mark (and the head the
        // next one links from) where it was; it only brings a note.
        if cp.to > mark.to {
            txn.put(key, &crate::views::CheckpointMark { to: cp.to, head });
        } else if cp.to < mark.to
            || cp.head != hex::encode(link_head(&mark.head, cp.from, std::iter::empty()))
        {
            return Ok(());
        }
        if let Some(note) = &cp.note {
            txn.put(
                crate::views::keys::checkpoint_note(topic, cp.partition),
                note,
            );
        }
    }
    Ok(())
}
