//! `verify --key`: what the ledger's checkpoint key signed, checked against
//! the log by someone who holds only the verifier key. Each signed note
//! names a partition and a tree size; the partition's Merkle tree (RFC
//! 9162) is recomputed from the stored bytes and must have the signed root
//! at every signed size. Every record must lie under a signed checkpoint.
//!
//! This is what the hash chain alone cannot give: whoever rewrites a record
//! can recompute digests, heads and CRCs, but not the signature over a root
//! that commits to the original bytes; emptying the checkpoints or leaving
//! records past the last one leaves records that no signature attests.

use super::checkpoint::{self, CHAINED_TOPICS};
use super::merkle::{Frontier, Hash};
use super::note::{origin, CheckpointBody, VerifierKey};
use super::verify::{mismatch as bad, Mismatch};
use crate::error::Result;
use crate::log::{Log, Topic};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::Serialize;
use std::collections::BTreeMap;

/// What the signatures of one key attest.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SignedSummary {
    /// The verifier key checked against.
    pub key: String,
    /// Checkpoints whose note that key signed.
    pub signed_checkpoints: u64,
    /// Records under a signed checkpoint whose root matched.
    pub attested: u64,
}

/// A signed size of a partition: its root and where its checkpoint is.
struct Signed {
    root: Hash,
    at: u64,
}

/// Check every signed checkpoint and the records under them.
pub fn verify_signed(log: &dyn Log, key: &VerifierKey) -> Result<(SignedSummary, Vec<Mismatch>)> {
    let mut summary = SignedSummary {
        key: key.to_string(),
        ..SignedSummary::default()
    };
    let mut mismatches = Vec::new();
    let mut sizes: BTreeMap<(Topic, u32), BTreeMap<u64, Signed>> = BTreeMap::new();
    for (at, cp) in checkpoint::read_all(log)? {
        let Ok(cp) = cp else { continue };
        let (Some(note), Some(topic)) = (&cp.note, cp.topic()) else {
            continue;
        };
        let here = |what: &str, expected: String, found: String| {
            bad(
                "checkpoints",
                0,
                at,
                format!("checkpoint of {}/{}: {what}", cp.topic, cp.partition),
                expected,
                found,
            )
        };
        let text = match key.open(note) {
            Ok(t) => t,
            Err(e) => {
                mismatches.push(here(
                    "signature",
                    format!("a note signed by {}", key.name()),
                    e.to_string(),
                ));
                continue;
            }
        };
        let body = match CheckpointBody::parse(text) {
            Ok(b) => b,
            Err(e) => {
                mismatches.push(here("note", "a tlog-checkpoint".to_owned(), e.to_string()));
                continue;
            }
        };
        let want = origin(key.name(), topic, cp.partition);
        if body.origin != want || body.size != cp.to {
            mismatches.push(here(
                "origin and size",
                format!("{want} at {}", cp.to),
                format!("{} at {}", body.origin, body.size),
            ));
            continue;
        }
        summary.signed_checkpoints += 1;
        let by_size = sizes.entry((topic, cp.partition)).or_default();
        match by_size.get(&body.size) {
            Some(s) if s.root != body.root => mismatches.push(here(
                "a second root for the same size (two histories signed)",
                B64.encode(s.root),
                B64.encode(body.root),
            )),
            Some(_) => {}
            None => {
                by_size.insert(
                    body.size,
                    Signed {
                        root: body.root,
                        at,
                    },
                );
            }
        }
    }
    // Partitions are independent trees: one thread per core, largest
    // first, results kept in partition order.
    let mut jobs: Vec<(Topic, u32, u64, BTreeMap<u64, Signed>)> = Vec::new();
    for topic in CHAINED_TOPICS {
        for p in 0..log.partitions(topic) {
            let signed = sizes.remove(&(topic, p)).unwrap_or_default();
            jobs.push((topic, p, log.end_offset(topic, p)?, signed));
        }
    }
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(jobs[i].2));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(jobs.len().max(1));
    type Outcome = (usize, Result<(u64, Option<Mismatch>)>);
    let mut outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    while let Some(&i) =
                        order.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                    {
                        let (topic, p, _, signed) = &jobs[i];
                        done.push((i, check_partition(log, *topic, *p, signed)));
                    }
                    done
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join().unwrap_or_else(|_| {
                    vec![(
                        usize::MAX,
                        Err(crate::error::LedgerError::Internal(
                            "a verify thread panicked",
                        )),
                    )]
                })
            })
            .collect()
    });
    outcomes.sort_by_key(|(i, _)| *i);
    for (_, outcome) in outcomes {
        let (attested, m) = outcome?;
        summary.attested += attested;
        mismatches.extend(m);
    }
    for ((topic, p), signed) in sizes {
        if let Some((size, s)) = signed.into_iter().next() {
            mismatches.push(bad(
                "checkpoints",
                0,
                s.at,
                format!("signed checkpoint of {topic}/{p} at size {size}"),
                "a partition the log has",
                "none",
            ));
        }
    }
    Ok((summary, mismatches))
}

/// Recompute a partition's tree up to its largest signed size; the records
/// attested, and the first thing wrong.
fn check_partition(
    log: &dyn Log,
    topic: Topic,
    p: u32,
    signed: &BTreeMap<u64, Signed>,
) -> Result<(u64, Option<Mismatch>)> {
    let name = topic.name();
    let end = log.end_offset(topic, p)?;
    let last = signed.keys().next_back().copied().unwrap_or(0);
    if last > end {
        let s = &signed[&last];
        return Ok((
            0,
            Some(bad(
                name,
                p,
                end,
                format!("records signed by the checkpoint at checkpoints@{}", s.at),
                format!("{last} records"),
                format!("{end} in the log (records were removed)"),
            )),
        ));
    }
    let mut f = Frontier::new();
    let mut attested_to = 0;
    for (&size, s) in signed {
        checkpoint::leaf_hashes(log, topic, p, f.size(), size, &mut |h| f.push(h))?;
        let root = f.root();
        if root != s.root {
            return Ok((
                attested_to,
                Some(bad(
                    name,
                    p,
                    attested_to,
                    format!(
                        "Merkle root of records [0, {size}) signed at checkpoints@{} (a record in [{attested_to}, {size}) was changed)",
                        s.at
                    ),
                    B64.encode(s.root),
                    B64.encode(root),
                )),
            ));
        }
        attested_to = size;
    }
    if attested_to < end {
        return Ok((
            attested_to,
            Some(bad(
                name,
                p,
                attested_to,
                format!("records [{attested_to}, {end}) under a signed checkpoint"),
                "a checkpoint signed by the ledger's key",
                "none (the operator runs `agentledger checkpoint`; `serve` signs within its interval)",
            )),
        ));
    }
    Ok((attested_to, None))
}

/// What `verify --since` found: the old checkpoint, the newest the log's
/// key signed for the same partition, and the RFC 9162 proof between them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Since {
    pub origin: String,
    pub old_size: u64,
    pub new_size: u64,
    /// Base64 hashes of the consistency proof from `old_size` to `new_size`.
    pub proof: Vec<String>,
    /// Why the log does not extend the old checkpoint, if it does not.
    pub fault: Option<String>,
}

/// Whether today's log extends the one `old_note` attested: the newest
/// checkpoint `key` signed for its partition must be consistent with it,
/// by a consistency proof computed from the log and checked as RFC 9162
/// §2.1.4.2 says, and must itself match the log.
pub fn verify_since(log: &dyn Log, key: &VerifierKey, old_note: &str) -> Result<Since> {
    use super::merkle::{verify_consistency, Gathering, Wanted};
    let refuse = |why: String| {
        crate::error::LedgerError::Refused(crate::error::Refusal::new(
            crate::codes::Code::InvalidRequest,
            why,
        ))
    };
    let old_text = key
        .open(old_note)
        .map_err(|e| refuse(format!("the old checkpoint: {e}")))?;
    let old =
        CheckpointBody::parse(old_text).map_err(|e| refuse(format!("the old checkpoint: {e}")))?;
    let (topic, p) = CHAINED_TOPICS
        .into_iter()
        .flat_map(|t| (0..log.partitions(t)).map(move |p| (t, p)))
        .find(|&(t, p)| origin(key.name(), t, p) == old.origin)
        .ok_or_else(|| {
            refuse(format!(
                "the old checkpoint is of {}, no partition of this log",
                old.origin
            ))
        })?;
    let mut since = Since {
        origin: old.origin.clone(),
        old_size: old.size,
        new_size: old.size,
        proof: Vec::new(),
        fault: None,
    };
    let mut newest: Option<CheckpointBody> = None;
    for (_, cp) in checkpoint::read_all(log)? {
        let Ok(cp) = cp else { continue };
        let Some(note) = &cp.note else { continue };
        let Ok(body) = key
            .open(note)
            .map_err(|_| ())
            .and_then(|t| CheckpointBody::parse(t).map_err(|_| ()))
        else {
            continue;
        };
        if body.origin == old.origin && newest.as_ref().is_none_or(|n| body.size > n.size) {
            newest = Some(body);
        }
    }
    let Some(new) = newest.filter(|n| n.size >= old.size) else {
        since.fault = Some(format!(
            "no checkpoint signed by {} attests {} records or more of {} (records were removed, or the checkpoints)",
            key.name(),
            old.size,
            old.origin
        ));
        return Ok(since);
    };
    since.new_size = new.size;
    let end = log.end_offset(topic, p)?;
    if end < new.size {
        since.fault = Some(format!(
            "the log ends at {end}, below the signed size {}",
            new.size
        ));
        return Ok(since);
    }
    // From the records themselves (not the tiles, which are derived data):
    // the new root and the proof, in one pass and memory O(log n).
    let mut tree = Gathering::new(&[Wanted::Consistency {
        old: old.size,
        size: new.size,
    }]);
    checkpoint::leaf_hashes(log, topic, p, 0, new.size, &mut |h| tree.push(h))?;
    if tree.root_at(new.size) != Some(new.root) {
        since.fault = Some(format!(
            "the log's records [0, {}) do not have the root signed for them",
            new.size
        ));
        return Ok(since);
    }
    if old.size == 0 {
        return Ok(since);
    }
    let proof = tree.consistency(old.size, new.size).unwrap_or_default();
    since.proof = proof.iter().map(|h| B64.encode(h)).collect();
    if let Err(e) = verify_consistency(old.size, new.size, &old.root, &new.root, &proof) {
        since.fault = Some(format!(
            "the log at {} does not extend the checkpoint at {}: {e} (history was rewritten)",
            new.size, old.size
        ));
    }
    Ok(since)
}
