//! `verify --since`: whether today's log extends the one an older signed
//! checkpoint attested, by an RFC 9162 consistency proof computed from the
//! log.

use crate::audit::checkpoint::{self, CHAINED_TOPICS};
use crate::audit::findings::Since;
use crate::audit::note::{origin, CheckpointBody, VerifierKey};
use crate::error::Result;
use crate::log::Log;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;

/// Whether today's log extends the one `old_note` attested: the newest
/// checkpoint `key` signed for its partition must be consistent with it,
/// by a consistency proof computed from the log and checked as RFC 9162
/// §2.1.4.2 says, and must itself match the log.
pub fn verify_since(log: &dyn Log, key: &VerifierKey, old_note: &str) -> Result<Since> {
    use super::merkle::{verify_consistency, Gathering, Wanted};
    let refuse = |why: String| {
        crate::error::LedgerError::Refused(crate::codes::Refusal::new(
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
