//! Checkpoints: JSON records on the `checkpoints` topic
//! (schemas/checkpoint.json). One covers offsets `[from, to)` of one
//! partition: the chain head before it, every record's digest, and the head
//! after it. They are written every [`CHECKPOINT_INTERVAL`] records and on
//! demand (`agentledger checkpoint`); consecutive checkpoints chain.

use super::hashchain::{digest_by, from_hex32, link_head, DigestKind, HexDigest};
use crate::error::{LedgerError, Result};
use crate::log::Log;
use crate::model::Topic;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Records per automatic checkpoint.
pub const CHECKPOINT_INTERVAL: u64 = 1024;

/// The topics whose partitions are chained.
pub const CHAINED_TOPICS: [Topic; 2] = [Topic::Registry, Topic::Ledger];

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub schema: String,
    pub topic: String,
    pub partition: u32,
    pub from: u64,
    pub to: u64,
    pub prev_head: String,
    pub head: String,
    /// sha256 (hex) of each record in `[from, to)`, in offset order.
    pub digests: Vec<HexDigest>,
    pub time_ms: u64,
    pub writer: String,
    /// The signed note of the partition's Merkle tree over `[0, to)`
    /// (when the ledger has a checkpoint key).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The schema of the checkpoints written now: v2, whose digests are the
/// records' Merkle leaf hashes (see [`DigestKind`]).
pub const SCHEMA: &str = "agentledger.checkpoint.v2";

/// Checkpoints written before v2 (their digests are [`DigestKind::Envelope`]);
/// still verified.
pub const SCHEMA_V1: &str = "agentledger.checkpoint.v1";

/// The digest kind of the checkpoints written now.
pub const DIGEST: DigestKind = DigestKind::Leaf;

/// A record's digest as the checkpoints written now list it (its leaf
/// hash: nothing to check, nothing to fail).
pub fn digest_now(payload: &[u8]) -> [u8; 32] {
    super::merkle::leaf_hash(payload)
}

/// How a checkpoint of this schema digests its records (anything but v2
/// is read as v1, whose digests then will not match, naming the record,
/// rather than passing unchecked).
fn kind_of(schema: &str) -> DigestKind {
    if schema == SCHEMA {
        DigestKind::Leaf
    } else {
        DigestKind::Envelope
    }
}

fn chained_topic(name: &str) -> Option<Topic> {
    CHAINED_TOPICS.into_iter().find(|t| t.name() == name)
}

impl Checkpoint {
    /// How this checkpoint digests its records (see `kind_of`).
    pub fn kind(&self) -> DigestKind {
        kind_of(&self.schema)
    }

    pub fn topic(&self) -> Option<Topic> {
        chained_topic(&self.topic)
    }

    /// The checkpoint is internally consistent: its digests fold from
    /// `prev_head` to `head`.
    pub fn self_check(&self) -> std::result::Result<(), CheckpointFault> {
        let prev = from_hex32(&self.prev_head).ok_or(CheckpointFault::BadPrevHead)?;
        if self.to < self.from || (self.to - self.from) as usize != self.digests.len() {
            return Err(CheckpointFault::WrongCount {
                from: self.from,
                to: self.to,
                listed: self.digests.len(),
            });
        }
        let head = link_head(&prev, self.from, self.digests.iter().map(|d| &d.0));
        if hex::encode(head) != self.head {
            return Err(CheckpointFault::HeadMismatch);
        }
        Ok(())
    }

    pub fn digest_at(&self, offset: u64) -> Option<&[u8; 32]> {
        if offset < self.from || offset >= self.to {
            return None;
        }
        self.digests
            .get((offset - self.from) as usize)
            .map(|d| &d.0)
    }
}

/// How a checkpoint contradicts itself.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointFault {
    #[error("prev_head is not 32 hex bytes")]
    BadPrevHead,
    #[error("covers [{from}, {to}) but lists {listed} digests")]
    WrongCount { from: u64, to: u64, listed: usize },
    #[error("its digests do not fold to its head")]
    HeadMismatch,
}

/// The stretch of a partition a checkpoint covers: `[from, to)`, starting
/// from the chain head `prev_head`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub topic: Topic,
    pub partition: u32,
    pub from: u64,
    pub to: u64,
    pub prev_head: [u8; 32],
}

/// Build the checkpoint of a span, reading its records from the log.
pub fn build(log: &dyn Log, span: Span, time_ms: u64, writer: &str) -> Result<Checkpoint> {
    let digests = read_digests(log, &span)?;
    Ok(assemble(span, digests, time_ms, writer))
}

/// The checkpoint of a span from its records' digests, in offset order.
pub fn assemble(span: Span, digests: Vec<HexDigest>, time_ms: u64, writer: &str) -> Checkpoint {
    let head = link_head(&span.prev_head, span.from, digests.iter().map(|d| &d.0));
    Checkpoint {
        schema: SCHEMA.into(),
        topic: span.topic.name().into(),
        partition: span.partition,
        from: span.from,
        to: span.to,
        prev_head: hex::encode(span.prev_head),
        head: hex::encode(head),
        digests,
        time_ms,
        writer: writer.into(),
        note: None,
    }
}

fn read_digests(log: &dyn Log, span: &Span) -> Result<Vec<HexDigest>> {
    let &Span {
        topic,
        partition,
        from,
        to,
        ..
    } = span;
    let mut digests = Vec::with_capacity((to - from) as usize);
    let mut at = from;
    while at < to {
        let recs = log.read(topic, partition, at, (to - at).min(4096) as usize)?;
        if recs.is_empty() {
            return Err(LedgerError::MissingRecord {
                topic,
                partition,
                offset: at,
            });
        }
        for r in recs {
            // Never attest a record whose body does not match its envelope
            // (a leaf digest alone would not notice).
            let d = super::hashchain::check_body(&r.payload)
                .and_then(|()| digest_by(DIGEST, &r.payload))
                .map_err(|source| LedgerError::Undecodable {
                    topic,
                    partition,
                    offset: r.offset,
                    source,
                })?;
            digests.push(HexDigest(d));
            at = r.offset + 1;
        }
    }
    Ok(digests)
}

/// A checkpoint as read from the topic: unreadable ones are kept as the
/// JSON error, so `verify` can name them.
pub type ReadCheckpoint = std::result::Result<Checkpoint, serde_json::Error>;

/// Every checkpoint on the topic, in log order, with its offset.
pub fn read_all(log: &dyn Log) -> Result<Vec<(u64, ReadCheckpoint)>> {
    let mut out = Vec::new();
    scan_checkpoints_topic(log, &mut |_, r| {
        // A record filed as a cosignature is not a checkpoint: hiding a
        // checkpoint that way only leaves its records unattested.
        if !is_cosigned(r.key) {
            out.push((r.offset, serde_json::from_slice::<Checkpoint>(r.payload)));
        }
    })?;
    Ok(out)
}

/// A checkpoint without its digest list, as `verify` reads the log's: the
/// head attests every record of the span, so the list — a thousand hex
/// digests per checkpoint, as many bytes to decode as the records it
/// covers — is only checked for shape and counted here, and read in full
/// (from `at`) once a head does not match, to name the record.
#[derive(Debug, Clone, Deserialize)]
pub struct Header {
    pub schema: String,
    pub topic: String,
    pub partition: u32,
    pub from: u64,
    pub to: u64,
    pub prev_head: String,
    pub head: String,
    /// How many digests it lists.
    #[serde(rename = "digests")]
    pub listed: Listed,
    /// The signed note, when there is one.
    #[serde(default)]
    pub note: Option<String>,
    /// Where the checkpoint is: (partition, offset) on the checkpoints topic.
    #[serde(skip)]
    pub at: (u32, u64),
}

impl Header {
    /// See [`Checkpoint::kind`].
    pub fn kind(&self) -> DigestKind {
        kind_of(&self.schema)
    }

    pub fn topic(&self) -> Option<Topic> {
        chained_topic(&self.topic)
    }

    /// Two records carrying the same checkpoint.
    pub fn same(&self, other: &Header) -> bool {
        (
            &self.schema,
            &self.topic,
            self.partition,
            self.from,
            self.to,
            &self.prev_head,
            &self.head,
        ) == (
            &other.schema,
            &other.topic,
            other.partition,
            other.from,
            other.to,
            &other.prev_head,
            &other.head,
        )
    }
}

/// The number of digests a checkpoint lists, each checked to be 64 hex
/// digits' worth of text (not decoded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed(pub usize);

impl<'de> Deserialize<'de> for Listed {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Listed;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a list of sha256 digests as 64 hex digits")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> std::result::Result<Listed, A::Error> {
                let mut n = 0;
                // As bytes: the length is all that is checked, and taking
                // them as text would validate UTF-8 first (measured: the
                // headers parse 1.8× faster this way).
                while let Some(d) = seq.next_element::<&[u8]>()? {
                    if d.len() != 64 {
                        return Err(serde::de::Error::invalid_length(d.len(), &"64 hex digits"));
                    }
                    n += 1;
                }
                Ok(Listed(n))
            }
        }
        d.deserialize_seq(V)
    }
}

/// A checkpoint header as read from the topic (see [`ReadCheckpoint`]).
pub type ReadHeader = std::result::Result<Header, serde_json::Error>;

/// Every checkpoint's header on the topic, in log order, with its offset.
pub fn read_headers(log: &dyn Log) -> Result<Vec<(u64, ReadHeader)>> {
    let mut out = Vec::new();
    scan_checkpoints_topic(log, &mut |p, r| {
        if !is_cosigned(r.key) {
            let h = serde_json::from_slice::<Header>(r.payload).map(|mut h| {
                h.at = (p, r.offset);
                h
            });
            out.push((r.offset, h));
        }
    })?;
    Ok(out)
}

/// The whole checkpoint whose header is `h`.
pub fn read_at(log: &dyn Log, h: &Header) -> Result<ReadCheckpoint> {
    let (p, offset) = h.at;
    let rec =
        log.read(Topic::Checkpoints, p, offset, 1)?
            .pop()
            .ok_or(LedgerError::MissingRecord {
                topic: Topic::Checkpoints,
                partition: p,
                offset,
            })?;
    Ok(serde_json::from_slice::<Checkpoint>(&rec.payload))
}

fn scan_checkpoints_topic(
    log: &dyn Log,
    each: &mut dyn FnMut(u32, crate::log::RecordRef<'_>),
) -> Result<()> {
    for p in 0..log.partitions(Topic::Checkpoints) {
        let mut at = 0;
        loop {
            // Parsed straight from the read buffer, a few at a time: each
            // checkpoint lists a thousand digests, so copies would dominate.
            let after = log.scan(Topic::Checkpoints, p, at, 64, &mut |r| {
                each(p, r);
                std::ops::ControlFlow::Continue(())
            })?;
            if after == at {
                break;
            }
            at = after;
        }
    }
    Ok(())
}

/// Witness cosignatures of a signed checkpoint, kept on the checkpoints
/// topic (key `cosignature/<topic>/<partition>`): the checkpoint's note
/// with the witnesses' C2SP tlog-cosignature lines after the ledger's own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cosigned {
    pub topic: String,
    pub partition: u32,
    pub size: u64,
    pub note: String,
}

const COSIGNED_KEY: &[u8] = b"cosignature/";

/// Whether a checkpoints-topic record is filed as cosignatures.
pub fn is_cosigned(key: &[u8]) -> bool {
    key.starts_with(COSIGNED_KEY)
}

/// Append witness cosignatures; says where they landed.
pub fn append_cosigned(log: &dyn Log, c: &Cosigned) -> Result<(u32, u64)> {
    let key = [
        COSIGNED_KEY,
        format!("{}/{}", c.topic, c.partition).as_bytes(),
    ]
    .concat();
    let placed = log.append(
        Topic::Checkpoints,
        &[(key, serde_json::to_vec(c).unwrap_or_default())],
    )?;
    placed
        .first()
        .copied()
        .ok_or(LedgerError::Internal("an append that placed nothing"))
}

/// Per partition of `topic`, the largest checkpoint witnesses cosigned,
/// with the cosignature lines of every post at that size in one note (each
/// witness posts its own): what an export carries so that an auditor can
/// require the witnesses without asking the ledger.
pub fn latest_cosigned(log: &dyn Log, topic: Topic) -> Result<BTreeMap<u32, Cosigned>> {
    let mut out: BTreeMap<u32, Cosigned> = BTreeMap::new();
    for (_, c) in read_cosigned(log)? {
        if c.topic != topic.name() {
            continue;
        }
        match out.get_mut(&c.partition) {
            Some(have) if have.size > c.size => {}
            Some(have) if have.size == c.size => {
                for line in c.note.lines().filter(|l| l.starts_with('\u{2014}')) {
                    if !have.note.lines().any(|h| h == line) {
                        have.note.push_str(line);
                        have.note.push('\n');
                    }
                }
            }
            _ => {
                out.insert(c.partition, c);
            }
        }
    }
    Ok(out)
}

/// Every cosignatures record, in log order with its offset; unreadable
/// ones are skipped (they attest nothing).
pub fn read_cosigned(log: &dyn Log) -> Result<Vec<(u64, Cosigned)>> {
    let mut out = Vec::new();
    scan_checkpoints_topic(log, &mut |_, r| {
        if is_cosigned(r.key) {
            if let Ok(c) = serde_json::from_slice::<Cosigned>(r.payload) {
                out.push((r.offset, c));
            }
        }
    })?;
    Ok(out)
}

/// Append checkpoints to the `checkpoints` topic; says where each landed.
pub fn append(log: &dyn Log, cps: &[Checkpoint]) -> Result<Vec<(u32, u64)>> {
    if cps.is_empty() {
        return Ok(Vec::new());
    }
    let recs: Vec<(Vec<u8>, Vec<u8>)> = cps
        .iter()
        .map(|c| {
            (
                format!("{}/{}", c.topic, c.partition).into_bytes(),
                serde_json::to_vec(c).unwrap_or_default(),
            )
        })
        .collect();
    Ok(log.append(Topic::Checkpoints, &recs)?)
}

/// Feed the RFC 9162 leaf hashes of records `[from, to)` of a partition to
/// `push`, in offset order; a record missing below `to` is an error.
/// Bring a partition's tiles up to `to` leaves from the log.
pub fn sync_tiles(
    tiles: &super::tiles::TileStore,
    log: &dyn Log,
    topic: Topic,
    partition: u32,
    to: u64,
) -> Result<()> {
    let mut at = tiles.size(topic, partition)?;
    while at < to {
        let end = to.min(at + super::tiles::SYNC_BATCH);
        let mut leaves = Vec::with_capacity((end - at) as usize);
        leaf_hashes(log, topic, partition, at, end, &mut |h| leaves.push(h))?;
        tiles.extend(topic, partition, &leaves)?;
        at = end;
    }
    Ok(())
}

pub fn leaf_hashes(
    log: &dyn Log,
    topic: Topic,
    partition: u32,
    from: u64,
    to: u64,
    push: &mut dyn FnMut(super::merkle::Hash),
) -> Result<()> {
    let mut at = from;
    while at < to {
        let after = log.scan(
            topic,
            partition,
            at,
            (to - at).min(4096) as usize,
            &mut |r| {
                push(super::merkle::leaf_hash(r.payload));
                std::ops::ControlFlow::Continue(())
            },
        )?;
        if after == at {
            return Err(LedgerError::MissingRecord {
                topic,
                partition,
                offset: at,
            });
        }
        at = after;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_written_now_is_the_v2_kind_and_the_schema_says_so() {
        let payload = b"any stored bytes";
        assert_eq!(digest_now(payload), digest_by(DIGEST, payload).unwrap());
        assert_eq!(kind_of(SCHEMA), DIGEST);
        assert_eq!(kind_of(SCHEMA_V1), DigestKind::Envelope);
        assert_eq!(kind_of("agentledger.checkpoint.v9"), DigestKind::Envelope);
    }
}
