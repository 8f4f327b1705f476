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
use super::merkle::{leaf_hash, Frontier, Hash};
use super::note::{origin, CheckpointBody, VerifierKey};
use super::verify::Mismatch;
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

fn bad(
    topic: &str,
    partition: u32,
    offset: u64,
    what: String,
    expected: String,
    found: String,
) -> Mismatch {
    Mismatch {
        topic: topic.to_owned(),
        partition,
        offset,
        what,
        expected,
        found,
    }
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
                mismatches.push(here("note", "a tlog-checkpoint".into(), e.to_string()));
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
    for topic in CHAINED_TOPICS {
        for p in 0..log.partitions(topic) {
            let signed = sizes.remove(&(topic, p)).unwrap_or_default();
            let (attested, m) = check_partition(log, topic, p, &signed)?;
            summary.attested += attested;
            mismatches.extend(m);
        }
    }
    for ((topic, p), signed) in sizes {
        if let Some((size, s)) = signed.into_iter().next() {
            mismatches.push(bad(
                "checkpoints",
                0,
                s.at,
                format!("signed checkpoint of {topic}/{p} at size {size}"),
                "a partition the log has".into(),
                "none".into(),
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
        while f.size() < size {
            let at = f.size();
            let after = log.scan(topic, p, at, (size - at).min(4096) as usize, &mut |r| {
                f.push(leaf_hash(r.payload));
                std::ops::ControlFlow::Continue(())
            })?;
            if after == at {
                return Err(crate::error::LedgerError::MissingRecord {
                    topic,
                    partition: p,
                    offset: at,
                });
            }
        }
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
                "a checkpoint signed by the ledger's key".into(),
                "none (the operator runs `agentledger checkpoint`; `serve` signs within its interval)".into(),
            )),
        ));
    }
    Ok((attested_to, None))
}
