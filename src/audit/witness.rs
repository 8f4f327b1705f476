//! Witnesses (C2SP tlog-witness, tlog-cosignature): a witness follows each
//! of the ledger's logs and cosigns a checkpoint only if it extends the
//! last one the witness cosigned for that log — an RFC 9162 consistency
//! proof from the old size to the new. A ledger that shows one history to
//! one auditor and another to a second (a split view), rolls back, or
//! rewrites a record and re-signs, is refused by any witness that saw the
//! other history first: auditors who require its cosignature are safe.
//!
//! Here: what a witness decides given what it saw ([`judge`], pure), and
//! what the ledger does with cosignatures posted to it ([`accept`]): it
//! keeps them only over checkpoints of its own (its key signed the note
//! and its tree has that root at that size), on the checkpoints topic, so
//! they travel with the log and survive a rebuild.

use super::checkpoint::{self, Cosigned};
use super::merkle::{root, verify_consistency, Hash};
use super::note::{self, origin, CheckpointBody, SignerKey, VerifierKey};
use crate::codes::Code;
use crate::codes::Refusal;
use crate::error::{LedgerError, Result};
use crate::log::Log;
use crate::model::Topic;
use crate::views::Views;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

/// What a witness remembers of a log: the checkpoint it last cosigned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub size: u64,
    /// Base64 root hash.
    pub root: String,
}

/// Why a witness refuses to cosign.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{origin}: the log went back from {seen} records to {now} (rolled back, or a second history)")]
    RolledBack { origin: String, seen: u64, now: u64 },
    #[error("{origin}: two roots for {size} records, {seen} cosigned and {now} now (a split view: two histories shown)")]
    Forked {
        origin: String,
        size: u64,
        seen: String,
        now: String,
    },
    #[error("{origin}: the checkpoint at {now} does not extend the one cosigned at {seen}: {why} (history was rewritten)")]
    Inconsistent {
        origin: String,
        seen: u64,
        now: u64,
        why: String,
    },
}

/// The witness's decision on a new checkpoint `now` of a log whose last
/// cosigned checkpoint was `seen` (none: the first seen is trusted, as a
/// witness must start somewhere). `proof` gives the consistency proof
/// from `seen.size` to `now.size`, computed by whoever serves the tree:
/// it is checked here, so it need not be trusted.
pub fn judge(
    seen: Option<&Seen>,
    now: &CheckpointBody,
    proof: impl FnOnce(u64) -> std::result::Result<Vec<Hash>, Box<dyn std::error::Error + Send + Sync>>,
) -> std::result::Result<(), Refused> {
    let Some(seen) = seen else {
        return Ok(());
    };
    let now_root = B64.encode(now.root);
    if now.size < seen.size {
        return Err(Refused::RolledBack {
            origin: now.origin.clone(),
            seen: seen.size,
            now: now.size,
        });
    }
    if now.size == seen.size {
        return if now_root == seen.root {
            Ok(())
        } else {
            Err(Refused::Forked {
                origin: now.origin.clone(),
                size: now.size,
                seen: seen.root.clone(),
                now: now_root,
            })
        };
    }
    let inconsistent = |why: String| Refused::Inconsistent {
        origin: now.origin.clone(),
        seen: seen.size,
        now: now.size,
        why,
    };
    let old_root: Hash = B64
        .decode(&seen.root)
        .ok()
        .and_then(|r| r.try_into().ok())
        .ok_or_else(|| inconsistent("the remembered root is not base64 SHA-256".into()))?;
    if seen.size == 0 {
        return Ok(());
    }
    let p = proof(seen.size).map_err(|e| inconsistent(format!("no proof: {e}")))?;
    verify_consistency(seen.size, now.size, &old_root, &now.root, &p)
        .map_err(|e| inconsistent(e.to_string()))
}

/// Cosignature lines one post may carry.
const MAX_POSTED_LINES: usize = 8;
/// Cosignature lines kept for one checkpoint (when the ledger was not
/// told its witnesses' keys, any well-formed line counts).
const MAX_KEPT_LINES: usize = 64;
/// Bytes of a C2SP Ed25519 cosignature: key id, time, signature.
const COSIGNATURE_BYTES: usize = 4 + 8 + 64;

fn refuse(why: impl Into<String>) -> LedgerError {
    Refusal::new(Code::InvalidRequest, why).into()
}

/// Keep the cosignatures `posted` (the ledger's checkpoint note with the
/// witnesses' lines after its own signature) for the partition's log:
/// refused unless the note is the ledger's own checkpoint of this
/// partition and the lines have the shape of cosignatures. Says how many
/// lines were kept.
pub fn accept(
    log: &dyn Log,
    views: &Views,
    key: &SignerKey,
    witnesses: &[VerifierKey],
    topic: Topic,
    partition: u32,
    posted: &str,
) -> Result<usize> {
    let verifier = key.verifier();
    let text = verifier
        .open(posted)
        .map_err(|e| refuse(format!("the note: {e}")))?;
    let body = CheckpointBody::parse(text).map_err(|e| refuse(format!("the note: {e}")))?;
    let want = origin(key.name(), topic, partition);
    if body.origin != want {
        return Err(refuse(format!(
            "the note is of {}, not of this log ({want})",
            body.origin
        )));
    }
    let attested = views.checkpoint_mark(topic, partition)?.to;
    if body.size > attested {
        return Err(refuse(format!(
            "{want} has no checkpoint of {} records (its latest is of {attested})",
            body.size
        )));
    }
    let tiles = views.tiles();
    super::checkpoint::sync_tiles(tiles, log, topic, partition, body.size)?;
    if root(&tiles.nodes(topic, partition), body.size)? != body.root {
        return Err(refuse(format!(
            "{want} at {} records has another root than the note's",
            body.size
        )));
    }
    let (_, lines) = note::split(posted).map_err(|e| refuse(format!("the note: {e}")))?;
    let mut own = None;
    let mut theirs = Vec::new();
    for (name, sig) in lines {
        let line = format!("\u{2014} {name} {sig}\n");
        if name == key.name() {
            own.get_or_insert(line);
            continue;
        }
        let shaped = B64.decode(sig).is_ok_and(|b| b.len() == COSIGNATURE_BYTES);
        if !shaped {
            return Err(refuse(format!(
                "the line by {name} is not an Ed25519 cosignature (key id, time, signature)"
            )));
        }
        // Told which witnesses to keep: only their valid cosignatures, so
        // no caller can stand in for one or crowd one out.
        if !witnesses.is_empty() {
            let by = witnesses.iter().find(|w| w.name() == name);
            let Some(w) = by else {
                return Err(refuse(format!(
                    "{name} is not a witness this ledger keeps cosignatures of (serve --witness-key)"
                )));
            };
            if w.cosigned(&format!("{text}\n{line}")).is_err() {
                return Err(refuse(format!(
                    "the cosignature by {name} does not verify with its key"
                )));
            }
        }
        if !theirs.contains(&line) {
            theirs.push(line);
        }
    }
    if theirs.is_empty() {
        return Err(refuse("the note carries no cosignature"));
    }
    if theirs.len() > MAX_POSTED_LINES {
        return Err(refuse(format!(
            "{} cosignatures in one post; at most {MAX_POSTED_LINES}",
            theirs.len()
        )));
    }
    // Lines kept already for this checkpoint are neither kept again nor
    // counted: a witness re-posting what it was served is not refused
    // for others' lines, and the topic does not grow by repeats.
    let kept_before: Vec<String> = checkpoint::latest_cosigned(log, topic)?
        .remove(&partition)
        .filter(|c| c.size == body.size)
        .map(|c| {
            c.note
                .lines()
                .filter(|l| l.starts_with('\u{2014}'))
                .map(|l| format!("{l}\n"))
                .collect()
        })
        .unwrap_or_default();
    theirs.retain(|l| !kept_before.contains(l));
    if theirs.is_empty() {
        return Ok(0);
    }
    let others = kept_before
        .iter()
        .filter(|l| own.as_deref() != Some(l.as_str()))
        .count();
    if others + theirs.len() > MAX_KEPT_LINES {
        return Err(refuse(format!(
            "{want} at {} records has {others} cosignatures kept already; at most {MAX_KEPT_LINES}",
            body.size
        )));
    }
    let kept = theirs.len();
    let note = format!("{text}\n{}{}", own.unwrap_or_default(), theirs.concat());
    checkpoint::append_cosigned(
        log,
        &Cosigned {
            topic: topic.name().to_owned(),
            partition,
            size: body.size,
            note,
        },
    )?;
    super::attest::project_checkpoints(log, views)?;
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::super::merkle::{leaf_hash, MemoryTree};
    use super::*;

    fn body(t: &MemoryTree, size: u64) -> CheckpointBody {
        CheckpointBody {
            origin: "agentledger/l/ledger/0".into(),
            size,
            root: t.root_at(size),
        }
    }

    fn seen(b: &CheckpointBody) -> Seen {
        Seen {
            size: b.size,
            root: B64.encode(b.root),
        }
    }

    #[test]
    fn a_witness_cosigns_extensions_only() {
        let mut t = MemoryTree::new();
        for i in 0..20u64 {
            t.push(leaf_hash(&i.to_be_bytes()));
        }
        let proof = |t: &MemoryTree, new| {
            let t = t.clone();
            move |old| t.consistency(old, new).ok_or_else(|| "none".into())
        };
        let old = seen(&body(&t, 7));
        // First sight, same, and an extension proven: cosigned.
        assert_eq!(judge(None, &body(&t, 7), |_| unreachable!()), Ok(()));
        assert_eq!(judge(Some(&old), &body(&t, 7), |_| unreachable!()), Ok(()));
        assert_eq!(judge(Some(&old), &body(&t, 20), proof(&t, 20)), Ok(()));
        // Going back, or another root at the same size: refused.
        assert!(matches!(
            judge(Some(&old), &body(&t, 6), |_| unreachable!()),
            Err(Refused::RolledBack {
                seen: 7,
                now: 6,
                ..
            })
        ));
        let mut other = MemoryTree::new();
        for i in 0..20u64 {
            other.push(leaf_hash(&(i + u64::from(i == 3)).to_be_bytes()));
        }
        assert!(matches!(
            judge(Some(&old), &body(&other, 7), |_| unreachable!()),
            Err(Refused::Forked { size: 7, .. })
        ));
        // A rewritten history, with the server's own proof: refused.
        let e = judge(Some(&old), &body(&other, 20), proof(&other, 20)).unwrap_err();
        assert!(e.to_string().contains("history was rewritten"), "{e}");
        // A server that gives no proof, or the honest tree's proof for the
        // forged root: refused.
        assert!(judge(Some(&old), &body(&t, 20), |_| Err("gone".into())).is_err());
        assert!(judge(Some(&old), &body(&other, 20), proof(&t, 20)).is_err());
    }
}
