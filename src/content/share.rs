//! Content shared through the log: on a distributed backend (Kafka) the
//! bytes of artifacts and blobs travel with the ledger, in the `blobs`
//! topic, so any instance can serve what another stored. The content store
//! (`crate::content::store`) stays each instance's local cache.
//!
//! Layout of the topic (compacted, one partition per blob):
//! - chunks of at most [`CHUNK_BYTES`], key `<hex>/<i>`, payload the bytes;
//! - then a manifest, key `<hex>`, payload JSON [`Manifest`] naming the
//!   chunks' offsets;
//! - a tombstone (null value) on each of those keys ends the blob: the
//!   sweep writes them when no live reference holds it any more, and
//!   compaction removes the bytes from the brokers.
//!
//! The backend puts every key `<hex>…` in the partition of `<hex>`, so a
//! reader looks for a digest in one partition, and a blob's chunks are
//! read in order. Chunks and manifest are appended (acknowledged by every
//! in-sync replica) before `publish` returns, and `publish` returns before
//! the ledger record naming the bytes is appended: a record never names
//! bytes the cluster does not hold.
//!
//! Reading is by digest: each instance indexes the manifests of the
//! partitions it has looked in (scanning a partition from where it last
//! stopped), reads the chunks the newest manifest names and hands the
//! bytes back unchecked: the content store checks the digest, so a
//! tampered chunk is refused `digest_mismatch`, never served. A manifest
//! whose chunks compaction has replaced (the blob was published again)
//! sends the reader back to scan the partition afresh.

use crate::log::{Log, LogError};
use crate::model::Topic;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Largest chunk record: well under the log's record limit, so a blob of
/// the largest size the content store accepts is 32 chunks.
pub const CHUNK_BYTES: usize = 512 * 1024;

/// The most chunks a manifest may name: the largest blob the content
/// store accepts, in chunks.
const MAX_CHUNKS: usize = crate::model::limits::MAX_BLOB_BYTES.div_ceil(CHUNK_BYTES);

/// Records read per fetch when scanning or reading chunks (bounds memory:
/// at most this many chunks in hand at once).
const READ_BATCH: usize = 16;

/// What a manifest says of a blob. `chunks` are offsets in the manifest's
/// own partition, in the order their bytes join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub v: u8,
    pub size: u64,
    pub chunks: Vec<u64>,
    /// When it was published (ms since the epoch): a sweep leaves a blob no
    /// reference holds alone for its grace period after this.
    pub written_ms: u64,
    /// For a task's sealed blob (filed under [`sealed_id`], not under the
    /// digest of its bytes): the sha256 (hex) of the plaintext, which the
    /// task's references name and the sweep asks about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed_for: Option<String>,
}

/// Where a task's sealed blob is filed in the topic: a digest of the
/// task's tag and the plaintext's sha256 (the sealed bytes are checked by
/// opening them with the task's key, not by their own digest).
pub fn sealed_id(tag: &str, sha256: &[u8; 32]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::new()
        .chain_update(b"agentledger sealed blob ")
        .chain_update(tag.as_bytes())
        .chain_update(sha256)
        .finalize()
        .into()
}

/// A manifest and where it lies.
#[derive(Debug, Clone)]
struct Located {
    partition: u32,
    manifest: Manifest,
}

#[derive(Default)]
struct Index {
    blobs: HashMap<[u8; 32], Located>,
    /// Per partition, the offset up to which manifests are indexed.
    scanned: HashMap<u32, u64>,
}

impl Index {
    /// Forget what was indexed of a partition (a manifest turned out stale).
    fn reset(&mut self, partition: u32) {
        self.blobs.retain(|_, l| l.partition != partition);
        self.scanned.remove(&partition);
    }
}

/// What a sweep of the shared content did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SharedSweep {
    /// Blobs the topic holds (manifests without a tombstone).
    pub examined: u64,
    /// Blobs ended with tombstones: no live reference held them.
    pub removed: u64,
}

/// The shared content of one log.
pub struct SharedContent {
    log: Arc<dyn Log>,
    index: Mutex<Index>,
}

/// Bytes published less than this long ago are not published again: the
/// same artifact sent by many operations in a burst costs one round trip
/// to the brokers, not one each. Safe because a sweep leaves every blob
/// alone for its grace period after its manifest was written (ten minutes by
/// default), far longer than it takes the ledger record naming the bytes
/// to land; a sweep with a grace shorter than this second races with any
/// fresh publication anyway.
pub const REPUBLISH_AFTER_MS: u64 = 1_000;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn chunk_key(hex: &str, i: usize) -> Vec<u8> {
    format!("{hex}/{i}").into_bytes()
}

impl SharedContent {
    /// The shared content of `log`, if the backend keeps any (the
    /// embedded log has no `blobs` topic: its one writer's content store
    /// is the only one).
    pub fn over(log: Arc<dyn Log>) -> Option<Self> {
        (log.partitions(Topic::Blobs) > 0).then(|| Self {
            log,
            index: Mutex::new(Index::default()),
        })
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make `bytes` (whose sha256 is `sha256`) durable in the topic: the
    /// chunks, then the manifest naming them. Publishing the same bytes
    /// again writes them again (compaction keeps the newest) and restarts
    /// their grace period — unless this instance saw them published less
    /// than [`REPUBLISH_AFTER_MS`] ago (see there).
    pub fn publish(&self, sha256: &[u8; 32], bytes: &[u8]) -> Result<(), LogError> {
        self.publish_as(sha256, bytes, None)
    }

    /// Publish under `id` (a digest, or a [`sealed_id`] with the
    /// plaintext's sha256 in `sealed_for`).
    pub fn publish_as(
        &self,
        id: &[u8; 32],
        bytes: &[u8],
        sealed_for: Option<&[u8; 32]>,
    ) -> Result<(), LogError> {
        let sha256 = id;
        if sealed_for.is_none() && self.published_just_now(sha256, bytes.len()) {
            return Ok(());
        }
        let hex = hex::encode(sha256);
        let chunks: Vec<(Vec<u8>, Vec<u8>)> = bytes
            .chunks(CHUNK_BYTES)
            .enumerate()
            .map(|(i, c)| (chunk_key(&hex, i), c.to_vec()))
            .collect();
        let partition = self.log.partition_of(Topic::Blobs, hex.as_bytes());
        let placed = if chunks.is_empty() {
            Vec::new()
        } else {
            self.log.append(Topic::Blobs, &chunks)?
        };
        if let Some((p, o)) = placed.iter().find(|(p, _)| *p != partition) {
            return Err(LogError::Corrupt(format!(
                "a chunk of blob {hex} landed in partition {p} at {o}, not in its manifest's partition {partition}"
            )));
        }
        let manifest = Manifest {
            v: 1,
            size: bytes.len() as u64,
            chunks: placed.iter().map(|(_, o)| *o).collect(),
            written_ms: now_ms(),
            sealed_for: sealed_for.map(hex::encode),
        };
        let json = serde_json::to_vec(&manifest)
            .map_err(|e| LogError::Corrupt(format!("encoding the manifest of {hex}: {e}")))?;
        self.log
            .append(Topic::Blobs, &[(hex.clone().into_bytes(), json)])?;
        tracing::debug!(blob = %hex, size = bytes.len(), chunks = placed.len(), "published to the shared content");
        self.index().blobs.insert(
            *sha256,
            Located {
                partition,
                manifest,
            },
        );
        Ok(())
    }

    /// Whether plain bytes of this digest and size were published (by any
    /// instance, as far as this one has seen) so recently that no sweep
    /// can have ended them.
    fn published_just_now(&self, sha256: &[u8; 32], size: usize) -> bool {
        let now = now_ms();
        self.index().blobs.get(sha256).is_some_and(|l| {
            l.manifest.sealed_for.is_none()
                && l.manifest.size == size as u64
                && now.saturating_sub(l.manifest.written_ms) < REPUBLISH_AFTER_MS
        })
    }

    /// The bytes the newest manifest of this digest names, unchecked (the
    /// caller compares the digest); `None` when the topic has none.
    pub fn fetch(&self, sha256: &[u8; 32]) -> Result<Option<Vec<u8>>, LogError> {
        let hex = hex::encode(sha256);
        let partition = self.log.partition_of(Topic::Blobs, hex.as_bytes());
        let mut index = self.index();
        for attempt in 0..2 {
            self.scan(&mut index, partition)?;
            let Some(located) = index.blobs.get(sha256) else {
                return Ok(None);
            };
            if let Some(bytes) = self.read_chunks(&hex, located)? {
                return Ok(Some(bytes));
            }
            tracing::debug!(blob = %hex, attempt, "manifest names chunks no longer there; scanning afresh");
            index.reset(partition);
        }
        Err(LogError::Corrupt(format!(
            "blob {hex}: its newest manifest in {}/{partition} names chunks that are not there",
            Topic::Blobs
        )))
    }

    /// Index the manifests and tombstones of a partition from where the
    /// last scan stopped to its end.
    fn scan(&self, index: &mut Index, partition: u32) -> Result<(), LogError> {
        let end = self.log.end_offset(Topic::Blobs, partition)?;
        let mut next = index.scanned.get(&partition).copied().unwrap_or(0);
        while next < end {
            let mut found: Vec<([u8; 32], Option<Manifest>)> = Vec::new();
            let mut bad: Option<String> = None;
            next = self
                .log
                .scan(Topic::Blobs, partition, next, READ_BATCH, &mut |r| {
                    // Chunks (`<hex>/<i>`) are read when wanted, not here.
                    if r.key.len() != 64 {
                        return ControlFlow::Continue(());
                    }
                    let mut sha = [0u8; 32];
                    if hex::decode_to_slice(r.key, &mut sha).is_err() {
                        return ControlFlow::Continue(());
                    }
                    if r.payload.is_empty() {
                        found.push((sha, None));
                        return ControlFlow::Continue(());
                    }
                    match serde_json::from_slice::<Manifest>(r.payload) {
                        // More chunks than the largest blob is cut into:
                        // not a ledger's, and not kept in memory.
                        Ok(m) if m.chunks.len() > MAX_CHUNKS => {
                            bad = Some(format!(
                                "{}/{partition}@{}: {} chunks, more than {MAX_CHUNKS}",
                                Topic::Blobs,
                                r.offset,
                                m.chunks.len()
                            ))
                        }
                        Ok(m) => found.push((sha, Some(m))),
                        // Not ours to serve; the digest check would refuse
                        // whatever it pointed to anyway.
                        Err(e) => {
                            bad = Some(format!("{}/{partition}@{}: {e}", Topic::Blobs, r.offset))
                        }
                    }
                    ControlFlow::Continue(())
                })?;
            if let Some(bad) = bad {
                tracing::warn!("the shared content holds a manifest that does not decode: {bad}");
            }
            for (sha, manifest) in found {
                match manifest {
                    Some(manifest) => {
                        index.blobs.insert(
                            sha,
                            Located {
                                partition,
                                manifest,
                            },
                        );
                    }
                    None => {
                        index.blobs.remove(&sha);
                    }
                }
            }
            index.scanned.insert(partition, next);
        }
        Ok(())
    }

    /// A blob's bytes from its chunks; `None` when a chunk is not where
    /// the manifest says (replaced by a newer publication, or compacted).
    fn read_chunks(&self, hex: &str, located: &Located) -> Result<Option<Vec<u8>>, LogError> {
        let chunks = &located.manifest.chunks;
        let limit = crate::model::limits::MAX_BLOB_BYTES;
        // No blob the store accepts is larger: a manifest saying otherwise
        // was not written by a ledger, and is never read into memory.
        let too_large = |size: u64| {
            LogError::Corrupt(format!(
                "blob {hex}: its manifest in {}/{} names {size} bytes or more, over the limit of {limit} bytes",
                Topic::Blobs,
                located.partition
            ))
        };
        if located.manifest.size > limit as u64 {
            return Err(too_large(located.manifest.size));
        }
        let Some(&last) = chunks.last() else {
            return Ok(Some(Vec::new()));
        };
        let mut out = Vec::with_capacity(located.manifest.size.min(64 << 20) as usize);
        let mut i = 0;
        while i < chunks.len() {
            let from = chunks[i];
            let want = ((last - from + 1) as usize).min(READ_BATCH);
            let records = self.log.read(Topic::Blobs, located.partition, from, want)?;
            if records.first().is_none_or(|r| r.offset != from) {
                return Ok(None);
            }
            for r in records {
                if i >= chunks.len() {
                    break;
                }
                if r.offset > chunks[i] {
                    return Ok(None);
                }
                if r.offset < chunks[i] {
                    continue; // another blob's record between ours
                }
                if r.key != chunk_key(hex, i) || r.payload.is_empty() {
                    return Ok(None);
                }
                if out.len() + r.payload.len() > limit {
                    return Err(too_large((out.len() + r.payload.len()) as u64));
                }
                out.extend_from_slice(&r.payload);
                i += 1;
            }
        }
        Ok(Some(out))
    }

    /// End the blobs no live reference holds, published longer than
    /// `grace` ago: a tombstone on the manifest and each chunk, so every
    /// instance stops finding them and compaction removes the bytes.
    /// `live` is asked per digest after scanning every partition to its
    /// end; a blob published again meanwhile (found by scanning its
    /// partition once more right before the tombstones) is left alone.
    pub fn sweep<E: From<LogError>>(
        &self,
        live: &mut dyn FnMut(&[u8; 32]) -> Result<bool, E>,
        grace: Duration,
    ) -> Result<SharedSweep, E> {
        let mut index = self.index();
        for p in 0..self.log.partitions(Topic::Blobs) {
            self.scan(&mut index, p)?;
        }
        let now = now_ms();
        let grace_ms = grace.as_millis() as u64;
        let mut report = SharedSweep {
            examined: index.blobs.len() as u64,
            ..Default::default()
        };
        let mut dead: Vec<([u8; 32], Located)> = Vec::new();
        for (sha, located) in index.blobs.iter() {
            // A sealed blob lives as long as a reference to its plaintext.
            let mut plain = [0u8; 32];
            let asked = match &located.manifest.sealed_for {
                Some(h) if hex::decode_to_slice(h, &mut plain).is_ok() => &plain,
                _ => sha,
            };
            if now.saturating_sub(located.manifest.written_ms) < grace_ms || live(asked)? {
                continue;
            }
            dead.push((*sha, located.clone()));
        }
        for (sha, located) in dead {
            self.scan(&mut index, located.partition)?;
            match index.blobs.get(&sha) {
                Some(now_there) if now_there.manifest == located.manifest => {}
                _ => continue,
            }
            let hex = hex::encode(sha);
            let mut tombstones: Vec<(Vec<u8>, Vec<u8>)> = (0..located.manifest.chunks.len())
                .map(|i| (chunk_key(&hex, i), Vec::new()))
                .collect();
            tombstones.push((hex.clone().into_bytes(), Vec::new()));
            self.log.append(Topic::Blobs, &tombstones)?;
            index.blobs.remove(&sha);
            report.removed += 1;
            tracing::debug!(blob = %hex, "ended in the shared content: no live reference holds it");
        }
        Ok(report)
    }
}
