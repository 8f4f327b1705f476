//! `verify`: recompute every record's body digest and every partition's
//! hash chain from the log, compare with every checkpoint, and name the
//! first record that does not match. Also verifies an export offline.
//! The pass over the log is `log_verify`; this module holds the export's
//! check and is where callers find both.

use super::checkpoint::Checkpoint;
use super::digests::{check_digests, Digests};
use super::findings::mismatch;
pub use super::findings::{Mismatch, VerifyReport};
use super::hashchain::record_digest;
pub use super::log_verify::{verify_log, verify_log_with_roots, Roots};

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
