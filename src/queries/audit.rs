//! Questions an auditor asks: the export of a selection, and `verify`
//! with what it is told to trust.

use super::Said;
use crate::codes::Code;
use crate::engine::Engine;
use crate::error::LedgerError;
use crate::model::Topic;
use serde_json::json;
use std::fmt::Write as _;

pub(super) fn export(
    engine: &mut Engine,
    run: Option<&str>,
    chain: Option<&str>,
    as_of: Option<u64>,
) -> Result<Said, LedgerError> {
    let (subject, whole_chain) = match (run, chain) {
        (Some(r), None) => (r, false),
        (None, Some(c)) => (c, true),
        _ => {
            return Ok(Said::refused(
                Code::InvalidRequest,
                "give exactly one of run or chain",
            ))
        }
    };
    engine.checkpoint(true)?;
    let mut steps = crate::engine::trail::collect_trail(
        engine.views(),
        engine.log().as_ref(),
        subject,
        whole_chain,
    )?;
    if let Some(limit) = as_of {
        steps.retain(|(_, s)| s.offset <= limit);
    }
    let checkpoints: Vec<_> = crate::audit::checkpoint::read_all(engine.log().as_ref())?
        .into_iter()
        .filter_map(|(_, c)| c.ok())
        .collect();
    let witnessed =
        crate::audit::checkpoint::latest_cosigned(engine.log().as_ref(), Topic::Ledger)?;
    let what = json!({"run": run, "chain": chain, "as_of": as_of});
    let mut out = Vec::new();
    crate::audit::export::write_export(
        engine.log().as_ref(),
        engine.views().tiles(),
        what,
        &steps,
        &crate::audit::export::Attestations {
            checkpoints: &checkpoints,
            witnessed: &witnessed,
            signer: engine.signer().map(|k| k.verifier()).as_ref(),
        },
        &mut out,
    )?;
    Ok(Said::answered(String::from_utf8(out).map_err(|_| {
        LedgerError::Internal("an export that is not UTF-8")
    })?))
}

/// What `verify` says of a report: `torn` are torn tails found and left in
/// place (a crash's leftovers, or evidence: shown either way). Records no
/// checkpoint attests are said in any case, and with `require_attested`
/// fail the check.
pub fn verify_said(
    report: &crate::audit::VerifyReport,
    torn: &[String],
    subject: &str,
    json: bool,
    require_attested: bool,
) -> Said {
    let mut out = String::new();
    let unattested = report.records.saturating_sub(report.covered);
    let refused = require_attested && unattested > 0;
    let ok = report.clean() && !refused;
    if json {
        line!(
            out,
            "{}",
            json!({"ok": ok, "records": report.records, "checkpoints": report.checkpoints,
                   "covered": report.covered, "unattested": unattested,
                   "first_mismatch": report.first(), "mismatches": report.mismatches,
                   "torn_tails": torn, "signed": report.signed, "since": report.since,
                   "published": report.published})
        );
    } else {
        line!(
            out,
            "{subject}: {} records, {} checkpoints, {} records attested by a checkpoint",
            report.records,
            report.checkpoints,
            report.covered
        );
        if let Some(s) = &report.signed {
            line!(
                out,
                "signed by {}: {} signed checkpoints attest {} records",
                s.key,
                s.signed_checkpoints,
                s.attested
            );
            if s.other_keys > 0 {
                line!(
                    out,
                    "  {} checkpoints carry notes of other keys (one this key replaced?): they attest nothing to it",
                    s.other_keys
                );
            }
            if let Some(w) = &s.witnessed {
                line!(
                    out,
                    "witnessed ({} of {} witnesses per checkpoint): {} records",
                    w.required,
                    w.witnesses.len(),
                    w.witnessed
                );
                for l in &w.logs {
                    line!(out, "  {} up to {} by {}", l.log, l.size, l.by.join(", "));
                }
                if w.unwitnessed > 0 {
                    line!(
                        out,
                        "  {} records past the newest cosigned checkpoints rest on the ledger's key alone (--all-witnessed refuses them; --since with a witness's own latest cosigned note proves the log extends it)",
                        w.unwitnessed
                    );
                }
            }
        }
        if let Some(n) = report.published {
            line!(
                out,
                "published topic: {n} events held against the ledger's records"
            );
        }
        if let Some(s) = report.since.as_ref().filter(|s| s.fault.is_none()) {
            line!(
                out,
                "{}: the log at {} extends the checkpoint at {} (consistency proof of {} hashes checked)",
                s.origin,
                s.new_size,
                s.old_size,
                s.proof.len()
            );
        }
        for t in torn {
            line!(out, "{t}");
        }
        match report.first() {
            None if report.signed.is_some() => line!(
                out,
                "clean: every digest and chain head matches, and every record lies under a signed checkpoint whose Merkle root matches"
            ),
            None if unattested == 0 => {
                line!(out, "clean: every digest and chain head matches")
            }
            None => line!(
                out,
                "clean: every digest and chain head matches; {} of {} records are not yet attested by any checkpoint (`agentledger checkpoint` attests them, signed once `agentledger key generate` made a key)",
                if unattested == report.records { "all".to_string() } else { unattested.to_string() },
                report.records
            ),
            Some(m) => {
                line!(out, "MISMATCH at {m}");
                for other in report.mismatches.iter().skip(1) {
                    line!(out, "  also: {other}");
                }
            }
        }
    }
    if refused && !json {
        line!(
            out,
            "NOT ATTESTED: {unattested} records lie under no checkpoint (--require-attested)"
        );
    }
    Said {
        out,
        failure: None,
        unclean: !ok,
    }
}

/// `verify` of a whole log (read only; safe beside a writer, which it
/// does not block).
pub fn verify(
    log: &dyn crate::log::Log,
    json: bool,
    progress: &(dyn Fn(u64) + Sync),
    trust: Option<&crate::audit::signed::Trust>,
    since: Option<&str>,
    published: bool,
    require_attested: bool,
) -> Result<Said, LedgerError> {
    let (mut report, for_key) = match trust {
        // One pass: the leaf digests the checkpoints are checked with
        // build the trees the signed notes are checked against, and the
        // checkpoints it reads carry the notes.
        Some(_) => {
            let (r, k) = crate::audit::log_verify::verify_log_for_key(log, progress)?;
            (r, Some(k))
        }
        None => (crate::audit::verify::verify_log(log, progress)?, None),
    };
    if let (Some(trust), Some(k)) = (trust, for_key) {
        let (summary, mismatches) =
            crate::audit::signed::verify_signed_given(log, trust, Some(&k.roots), &k.noted)?;
        report.mismatches.extend(mismatches);
        report.signed = Some(summary);
        if let Some(old) = since {
            let s = crate::audit::since::verify_since(log, &trust.key, old)?;
            if let Some(why) = &s.fault {
                report.mismatches.push(crate::audit::Mismatch {
                    topic: Topic::Checkpoints.name().to_owned(),
                    partition: 0,
                    offset: 0,
                    what: format!("the log of {} since the old checkpoint", s.origin),
                    expected: format!("a log extending the one of {} records", s.old_size),
                    found: why.clone(),
                });
            }
            report.since = Some(s);
        }
    }
    if published {
        let check = crate::audit::published_check::check_published(log)?;
        report.mismatches.extend(check.mismatches);
        report.published = Some(check.events);
    }
    Ok(verify_said(
        &report,
        &log.torn_tails(),
        &log.describe(),
        json,
        require_attested,
    ))
}
