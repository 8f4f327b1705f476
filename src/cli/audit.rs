//! Auditor commands: verify (the log or an export), checkpoint, export.

use super::{open_engine, Cli};
use agentledger::audit::verify::verify_export;
use agentledger::queries::{self, Query};
use anyhow::{Context, Result};
use serde_json::json;

/// `verify`: 0 clean, 1 mismatch, 2 unable to read.
pub fn verify(cli: &Cli, export: Option<&std::path::Path>) -> Result<i32> {
    if let Some(path) = export {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let report =
            verify_export(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        let subject = format!("export {}", path.display());
        return super::inspect::print(&queries::verify_said(&report, &[], &subject, cli.json));
    }
    if let Some(server) = super::remote::server_for(cli)? {
        return super::inspect::print(&server.verify(cli.json)?);
    }
    let (_lock, log) = super::open_log_read_only(cli)?;
    let total = agentledger::rebuild::projected_records(log.as_ref())?;
    let bar = super::progress_bar(cli, total, "verifying");
    let said = queries::verify(log.as_ref(), cli.json, &|n| bar.inc(n))?;
    bar.finish_and_clear();
    super::inspect::print(&said)
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
    let q = Query::Export {
        run: run.map(str::to_string),
        chain: chain.map(str::to_string),
        as_of,
    };
    let said = match super::remote::server_for(cli)? {
        Some(server) => server.query(&q, true)?,
        None => {
            let mut engine = open_engine(cli)?;
            queries::answer(&mut engine, &q, true)?
        }
    };
    let Some(path) = out else {
        return super::inspect::print(&said);
    };
    if said.failure.is_some() {
        return super::inspect::print(&said);
    }
    std::fs::write(path, &said.out).with_context(|| format!("writing {}", path.display()))?;
    if !cli.json {
        let count = |kind: &str| {
            said.out
                .lines()
                .filter(|l| l.starts_with(&format!("{{\"type\":\"{kind}\"")))
                .count()
        };
        outln!(
            "exported {} records with {} covering checkpoints",
            count("record"),
            count("checkpoint")
        );
    }
    Ok(0)
}
