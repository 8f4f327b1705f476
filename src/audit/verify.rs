//! `verify`: recompute every record's body digest and every partition's
//! hash chain from the log, compare with every checkpoint, and name the
//! first record that does not match. Also verifies an export offline.
//! The pass over the log is `log_verify`; this module holds what both
//! share and the export's check.

use super::checkpoint::Checkpoint;
use super::hashchain::{check_body, digest_by, record_digest, DigestKind};
pub use super::log_verify::{verify_log, verify_log_with_roots, Roots};
use serde::Serialize;

/// A record (or checkpoint) that does not match what was attested.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Mismatch {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub what: String,
    pub expected: String,
    pub found: String,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Every field may come from the log or an export under audit:
        // escaped, so none can forge a line or drive the terminal.
        use crate::encode::text;
        write!(
            f,
            "{}/{}@{}: {}: expected {}, found {}",
            text(&self.topic),
            self.partition,
            self.offset,
            text(&self.what),
            text(&self.expected),
            text(&self.found)
        )
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    pub records: u64,
    pub checkpoints: u64,
    /// Records attested by at least one checkpoint.
    pub covered: u64,
    /// The first mismatch of each partition that has one, in log order.
    pub mismatches: Vec<Mismatch>,
    /// What a verifier key's signatures attest (`verify --key`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signed: Option<super::signed::SignedSummary>,
    /// Whether the log extends an older signed checkpoint (`verify
    /// --since`); a log that does not also has a mismatch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<super::signed::Since>,
    /// Published events held against the ledger (`verify --published`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published: Option<u64>,
}

impl VerifyReport {
    pub fn first(&self) -> Option<&Mismatch> {
        self.mismatches.first()
    }
    pub fn clean(&self) -> bool {
        self.mismatches.is_empty()
    }
}

pub(crate) fn mismatch(
    topic: &str,
    partition: u32,
    offset: u64,
    what: impl Into<String>,
    expected: impl Into<String>,
    found: impl Into<String>,
) -> Mismatch {
    Mismatch {
        topic: topic.to_string(),
        partition,
        offset,
        what: what.into(),
        expected: expected.into(),
        found: found.into(),
    }
}

/// The mismatch naming a record whose body does not match its envelope.
pub(super) fn broken_body(
    topic: &str,
    partition: u32,
    offset: u64,
    e: crate::codec::CodecError,
) -> Mismatch {
    mismatch(
        topic,
        partition,
        offset,
        "record body does not match its digest",
        "a record whose body matches its digest",
        e.to_string(),
    )
}

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
fn check_digests<'a>(
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

/// The export format `export` writes and `verify --export` reads.
pub const EXPORT_FORMAT: &str = "agentledger.export.v2";

/// Why an export file cannot be checked at all (a record that does not
/// match is a [`Mismatch`] in the report instead).
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("line {line}: not JSON: {source}")]
    NotJson {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("line {line}: bad checkpoint: {source}")]
    BadCheckpoint {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("line {line}: bad cosigned checkpoint: {source}")]
    BadCosigned {
        line: usize,
        #[source]
        source: serde_json::Error,
    },
    #[error("line {line}: the export has no header line first (an export starts with {{\"type\":\"header\",…}})")]
    NoHeader { line: usize },
    #[error("line {line}: a second header line")]
    SecondHeader { line: usize },
    #[error(
        "line {line}: export format {found:?} is not one this version reads ({EXPORT_FORMAT})"
    )]
    Format { line: usize, found: String },
    #[error("line {line}: unknown line type {found}")]
    UnknownLine { line: usize, found: String },
    #[error("line {line}: record without offset")]
    NoOffset { line: usize },
    #[error("line {line}: record without a partition number (0 to 4294967295)")]
    NoPartition { line: usize },
    #[error(
        "line {header_line}: the header's selection names neither one run nor one chain: {found}"
    )]
    NoSelection { header_line: usize, found: String },
    #[error("line {line}: record_b64 is not base64")]
    NotBase64 { line: usize },
    #[error("line {line}: payload is not hex: {source}")]
    NotHex {
        line: usize,
        #[source]
        source: hex::FromHexError,
    },
}

/// Verify an export file (JSON lines written by `export`) on its own:
/// every record against the checkpoints in the file, its metadata against
/// its own bytes, every run's steps complete from 0; with `key`, every
/// record's inclusion proof against a root that key signed.
pub fn verify_export(
    text: &str,
    key: Option<&super::note::VerifierKey>,
) -> std::result::Result<VerifyReport, ExportError> {
    let trust = key.map(|k| super::signed::Trust::key_only(k.clone()));
    verify_export_trusting(text, trust.as_ref())
}

/// [`verify_export`] trusting the ledger's key and, when `trust` names
/// witnesses, requiring every record to be proven under a checkpoint
/// enough of them cosigned (the export's `cosigned` lines).
pub fn verify_export_trusting(
    text: &str,
    trust: Option<&super::signed::Trust>,
) -> std::result::Result<VerifyReport, ExportError> {
    let key = trust.map(|t| &t.key);
    let mut report = VerifyReport::default();
    let mut cosigned: Vec<(usize, super::checkpoint::Cosigned)> = Vec::new();
    let mut cps: Vec<Checkpoint> = Vec::new();
    let mut records = Vec::new();
    let mut header: Option<(usize, serde_json::Value)> = None;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|source| ExportError::NotJson {
                line: i + 1,
                source,
            })?;
        // The header comes first, once: what the file claims to hold.
        match (v["type"].as_str(), &header) {
            (Some("header"), None) => {}
            (Some("header"), Some(_)) => return Err(ExportError::SecondHeader { line: i + 1 }),
            (_, None) => return Err(ExportError::NoHeader { line: i + 1 }),
            _ => {}
        }
        match v["type"].as_str() {
            Some("header") => {
                let format = v["format"].as_str().unwrap_or_default();
                if format != EXPORT_FORMAT {
                    return Err(ExportError::Format {
                        line: i + 1,
                        found: format.chars().take(100).collect(),
                    });
                }
                header = Some((i + 1, v));
            }
            Some("checkpoint") => {
                let cp: Checkpoint =
                    serde_json::from_value(v["checkpoint"].clone()).map_err(|source| {
                        ExportError::BadCheckpoint {
                            line: i + 1,
                            source,
                        }
                    })?;
                report.checkpoints += 1;
                if let Err(why) = cp.self_check() {
                    report.mismatches.push(mismatch(
                        &cp.topic,
                        cp.partition,
                        cp.from,
                        "checkpoint is inconsistent",
                        "digests folding to its head",
                        why.to_string(),
                    ));
                }
                cps.push(cp);
            }
            Some("record") => records.push((i + 1, v)),
            Some("cosigned") => {
                let mut fields = v.clone();
                if let Some(o) = fields.as_object_mut() {
                    o.remove("type");
                }
                let c =
                    serde_json::from_value(fields).map_err(|source| ExportError::BadCosigned {
                        line: i + 1,
                        source,
                    })?;
                cosigned.push((i + 1, c));
            }
            other => {
                return Err(ExportError::UnknownLine {
                    line: i + 1,
                    found: format!(
                        "{:?}",
                        other.map(|o| o.chars().take(100).collect::<String>())
                    ),
                })
            }
        }
    }
    let Some((header_line, header)) = header else {
        return Err(ExportError::NoHeader { line: 1 });
    };
    // A file cut short (or padded) is named even where what is left
    // proves itself; a file of no records proves nothing.
    let said = header["records"].as_u64();
    if said != Some(records.len() as u64) || records.is_empty() {
        report.mismatches.push(mismatch(
            "export",
            0,
            header_line as u64,
            if records.is_empty() {
                "export holds no records"
            } else {
                "export holds a different number of records than its header says"
            },
            format!(
                "{} record lines (header, line {header_line})",
                said.map_or("a count of".into(), |n| n.to_string())
            ),
            format!("{} record lines", records.len()),
        ));
    }
    let mut signed = key.map(|k| super::export_proof::SignedRoots::from_checkpoints(k, &cps));
    if let (Some(s), Some(t)) = (&mut signed, trust) {
        s.add_cosigned(&cosigned, t);
        report.mismatches.append(&mut s.faults);
    }
    let mut steps = super::export_proof::RunSteps::default();
    let mut selection =
        super::export_proof::Selection::of(&header["selection"]).ok_or_else(|| {
            ExportError::NoSelection {
                header_line,
                found: header["selection"].to_string().chars().take(100).collect(),
            }
        })?;
    for (line, v) in records {
        let topic = v["topic"].as_str().unwrap_or_default().to_string();
        let p = v["partition"]
            .as_u64()
            .and_then(|p| u32::try_from(p).ok())
            .ok_or(ExportError::NoPartition { line })?;
        let o = v["offset"].as_u64().ok_or(ExportError::NoOffset { line })?;
        let payload = match v["record_b64"].as_str() {
            Some(b) => {
                use base64::Engine as _;
                base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|_| ExportError::NotBase64 { line })?
            }
            None => hex::decode(v["payload_hex"].as_str().unwrap_or_default())
                .map_err(|source| ExportError::NotHex { line, source })?,
        };
        report.records += 1;
        steps.note(&v);
        selection.note(&topic, p, o, &payload);
        if let Some(m) = super::export_proof::metadata_fault(&topic, p, o, &v, &payload) {
            report.mismatches.push(m);
        }
        if let Some(s) = &mut signed {
            if let Some(m) = s.prove(&topic, p, o, &v, &payload) {
                report.mismatches.push(m);
            }
        }
        let covering: Vec<&Checkpoint> = cps
            .iter()
            .filter(|c| c.topic == topic && c.partition == p && c.digest_at(o).is_some())
            .collect();
        if covering.is_empty() {
            report.mismatches.push(mismatch(
                &topic,
                p,
                o,
                "record is not covered by any checkpoint in the export",
                "a covering checkpoint",
                "none",
            ));
            continue;
        }
        report.covered += 1;
        let mut digests = Digests::of(&topic, p, o, &payload);
        let checked = digests
            .body()
            .unwrap_or(Ok(()))
            .and_then(|()| check_digests(&mut digests, covering.iter().copied()));
        if let Err(m) = checked {
            report.mismatches.push(m);
            continue;
        }
        let claimed = v["digest"].as_str().unwrap_or_default();
        let found = record_digest(&payload)
            .map(hex::encode)
            .unwrap_or_else(|e| e.to_string());
        if claimed != found {
            report.mismatches.push(mismatch(
                &topic,
                p,
                o,
                "record digest differs from the export's own",
                claimed,
                found,
            ));
        }
    }
    report.mismatches.extend(steps.gaps());
    report.mismatches.extend(selection.faults());
    report.signed = signed.map(|s| s.finish());
    report
        .mismatches
        .sort_by(|a, b| (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset)));
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An export's fields and a crafted log's names reach these lines:
    /// no control character gets to the terminal as itself.
    #[test]
    fn a_mismatch_line_escapes_what_the_audited_data_put_in_it() {
        let m = mismatch(
            "led\u{0}ger",
            1,
            2,
            "record digest differs",
            "\r\u{1b}[2K\u{1b}[32mclean: every digest and chain head matches",
            "ok\n",
        );
        let line = m.to_string();
        assert!(!line.chars().any(char::is_control), "{line:?}");
        assert!(line.contains("\\u{1b}[32mclean"), "{line}");
        assert!(line.contains("led\\u{0}ger/1@2"), "{line}");
    }
}
