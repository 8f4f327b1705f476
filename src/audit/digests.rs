//! A record's digests of each kind, computed at most once, and their check
//! against the checkpoints covering the record: shared by the log's and
//! the export's verifier.

use super::checkpoint::Checkpoint;
use super::findings::{broken_body, mismatch, Mismatch};
use super::hashchain::{check_body, digest_by, DigestKind};

/// A record's digests of each kind, computed when first asked for: from
/// its bytes, or — digested ahead, before the checkpoints were read —
/// its leaf digest alone.
pub(super) struct Digests<'a> {
    topic: &'a str,
    partition: u32,
    offset: u64,
    payload: Option<&'a [u8]>,
    leaf: Option<[u8; 32]>,
    envelope: Option<[u8; 32]>,
    /// Its body was checked against its envelope (without keeping the
    /// bytes).
    body_ok: bool,
}

impl<'a> Digests<'a> {
    pub(super) fn of(topic: &'a str, partition: u32, offset: u64, payload: &'a [u8]) -> Self {
        Digests {
            topic,
            partition,
            offset,
            payload: Some(payload),
            leaf: None,
            envelope: None,
            body_ok: false,
        }
    }

    pub(super) fn leaf(topic: &'a str, partition: u32, offset: u64, leaf: [u8; 32]) -> Self {
        Digests {
            topic,
            partition,
            offset,
            payload: None,
            leaf: Some(leaf),
            envelope: None,
            body_ok: false,
        }
    }

    /// Its body was found to match its envelope when it was digested.
    pub(super) fn body_checked(mut self) -> Self {
        self.body_ok = true;
        self
    }

    pub(super) fn get(&mut self, kind: DigestKind) -> std::result::Result<[u8; 32], Mismatch> {
        let cached = match kind {
            DigestKind::Leaf => self.leaf,
            DigestKind::Envelope => self.envelope,
        };
        if let Some(d) = cached {
            return Ok(d);
        }
        let Some(payload) = self.payload else {
            // Only leaf digests are taken ahead, and only for partitions
            // whose checkpoints are all v2 (`finish_partition`).
            return Err(mismatch(
                self.topic,
                self.partition,
                self.offset,
                "record digest could not be computed",
                format!("{kind:?} digest"),
                "only the leaf digest",
            ));
        };
        let d = digest_by(kind, payload)
            .map_err(|e| broken_body(self.topic, self.partition, self.offset, e))?;
        match kind {
            DigestKind::Leaf => self.leaf = Some(d),
            DigestKind::Envelope => self.envelope = Some(d),
        }
        Ok(d)
    }

    /// Check the body against its envelope; `None` when the bytes are not
    /// at hand (the caller checks them later).
    pub(super) fn body(&mut self) -> Option<std::result::Result<(), Mismatch>> {
        if self.envelope.is_some() || self.body_ok {
            return Some(Ok(()));
        }
        let payload = self.payload?;
        Some(
            check_body(payload)
                .map_err(|e| broken_body(self.topic, self.partition, self.offset, e)),
        )
    }
}

/// A record's digests against the checkpoints covering it, each of the
/// kind its checkpoint lists; shared by the log and the export verifier.
pub(super) fn check_digests<'a>(
    digests: &mut Digests<'_>,
    cps: impl IntoIterator<Item = &'a Checkpoint>,
) -> std::result::Result<(), Mismatch> {
    for cp in cps {
        if let Some(want) = cp.digest_at(digests.offset) {
            let d = digests.get(cp.kind())?;
            if *want != d {
                return Err(mismatch(
                    digests.topic,
                    digests.partition,
                    digests.offset,
                    "record digest differs from checkpoint",
                    hex::encode(want),
                    hex::encode(d),
                ));
            }
        }
    }
    Ok(())
}
