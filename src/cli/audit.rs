//! Auditor commands: verify (the log or an export), checkpoint, export.

use super::{open_engine, Cli};
use agentledger::audit::{self, verify::verify_export, VerifyReport};
use agentledger::report;
use anyhow::{Context, Result};
use serde_json::json;

/// Print a verify report; `torn` are torn tails found and left in place (a
/// crash's leftovers, or evidence: they are shown either way).
fn print_report(cli: &Cli, report: &VerifyReport, torn: &[String], subject: &str) -> Result<i32> {
    if cli.json {
        outln!(
            "{}",
            json!({"ok": report.clean(), "records": report.records, "checkpoints": report.checkpoints,
                   "covered": report.covered, "first_mismatch": report.first(), "mismatches": report.mismatches,
                   "torn_tails": torn})
        );
    } else {
        outln!(
            "{subject}: {} records, {} checkpoints, {} records attested by a checkpoint",
            report.records,
            report.checkpoints,
            report.covered
        );
        for t in torn {
            outln!("{t}");
        }
        match report.first() {
            None => outln!("clean: every digest and chain head matches"),
            Some(m) => {
                outln!("MISMATCH at {m}");
                for other in report.mismatches.iter().skip(1) {
                    outln!("  also: {other}");
                }
            }
        }
    }
    Ok(if report.clean() { 0 } else { 1 })
}

/// `verify`: 0 clean, 1 mismatch, 2 unable to read.
pub fn verify(cli: &Cli, export: Option<&std::path::Path>) -> Result<i32> {
    if let Some(path) = export {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let report =
            verify_export(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        return print_report(cli, &report, &[], &format!("export {}", path.display()));
    }
    let (_lock, log) = super::open_log_read_only(cli)?;
    let total = agentledger::rebuild::projected_records(log.as_ref())?;
    let bar = super::progress_bar(cli, total, "verifying");
    let report = audit::verify::verify_log(log.as_ref(), &|n| bar.inc(n))?;
    bar.finish_and_clear();
    let torn = log.torn_tails();
    print_report(cli, &report, &torn, &log.describe())
}

pub fn checkpoint(cli: &Cli) -> Result<i32> {
    let mut engine = open_engine(cli)?;
    let written = engine.checkpoint(true)?;
    for cp in &written {
        if cli.json {
            outln!(
                "{}",
                json!({"topic": cp.topic, "partition": cp.partition, "from": cp.from, "to": cp.to, "head": cp.head})
            );
        } else {
            outln!(
                "{}/{} [{}, {}) head {}",
                cp.topic,
                cp.partition,
                cp.from,
                cp.to,
                cp.head
            );
        }
    }
    if written.is_empty() && !cli.json {
        outln!("every record is already attested by a checkpoint");
    }
    Ok(0)
}

pub fn export(
    cli: &Cli,
    run: Option<&str>,
    chain: Option<&str>,
    as_of: Option<u64>,
    out: Option<&std::path::Path>,
) -> Result<i32> {
    let mut engine = open_engine(cli)?;
    let (subject, whole_chain) = match (run, chain) {
        (Some(r), None) => (r, false),
        (None, Some(c)) => (c, true),
        _ => anyhow::bail!("give exactly one of --run RUN or --chain ROOT"),
    };
    // Everything exported must be attested: cover the tail first.
    engine.checkpoint(true)?;
    let mut steps =
        match report::collect_trail(engine.views(), engine.log().as_ref(), subject, whole_chain) {
            Ok(s) => s,
            Err(e) if e.is_refusal() => {
                eprintln!("agentledger: {}: {e}", e.code());
                return Ok(1);
            }
            Err(e) => return Err(e.into()),
        };
    if let Some(limit) = as_of {
        steps.retain(|(_, s)| s.offset <= limit);
    }
    let checkpoints: Vec<_> = audit::checkpoint::read_all(engine.log().as_ref())?
        .into_iter()
        .filter_map(|(_, c)| c.ok())
        .collect();
    let what = json!({"run": run, "chain": chain, "as_of": as_of});
    let mut sink: Box<dyn std::io::Write> = match out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => Box::new(std::io::stdout().lock()),
    };
    let (records, cps) = audit::export::write_export(
        engine.log().as_ref(),
        what,
        &steps,
        &checkpoints,
        &mut *sink,
    )?;
    sink.flush()?;
    if out.is_some() && !cli.json {
        outln!("exported {records} records with {cps} covering checkpoints");
    }
    Ok(0)
}
