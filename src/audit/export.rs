//! `export`: the records of a run or a chain as JSON lines, each with its
//! stored bytes (hex) and digest, followed by the checkpoints that cover
//! them, so `verify --export` can check the file with nothing else.

use super::checkpoint::Checkpoint;
use crate::codec;
use crate::error::Result;
use crate::log::{Log, Topic};
use crate::views::TrailStep;
use serde_json::json;
use std::io::Write;

/// Write an export of `steps` (a run's or chain's trail, already filtered
/// as of a point) with the checkpoints in `checkpoints` that cover them.
pub fn write_export(
    log: &dyn Log,
    what: serde_json::Value,
    steps: &[(String, TrailStep)],
    checkpoints: &[Checkpoint],
    out: &mut dyn Write,
) -> Result<(u64, u64)> {
    let io = |e: std::io::Error| crate::error::LedgerError::io("writing the export", e);
    writeln!(out, "{}", json!({"type": "header", "format": "agentledger.export.v1", "selection": what, "records": steps.len()})).map_err(io)?;
    let mut used: Vec<&Checkpoint> = Vec::new();
    for (run, s) in steps {
        let raw = log
            .read(Topic::Ledger, s.partition, s.offset, 1)?
            .pop()
            .ok_or(crate::error::LedgerError::MissingRecord {
                topic: Topic::Ledger,
                partition: s.partition,
                offset: s.offset,
            })?;
        let digest = hex::encode(super::hashchain::record_digest(&raw.payload)?);
        let rec = codec::decode(&raw.payload)?;
        writeln!(
            out,
            "{}",
            json!({"type": "record", "topic": "ledger", "partition": s.partition, "offset": s.offset,
                   "run": run, "step": s.step, "kind": rec.event.kind(), "event_id": rec.event_id,
                   "digest": digest, "payload_hex": hex::encode(&raw.payload)})
        )
        .map_err(io)?;
        if let Some(cp) = checkpoints.iter().find(|c| {
            c.topic == "ledger" && c.partition == s.partition && c.digest_at(s.offset).is_some()
        }) {
            if !used.contains(&cp) {
                used.push(cp);
            }
        }
    }
    for cp in &used {
        writeln!(out, "{}", json!({"type": "checkpoint", "checkpoint": cp})).map_err(io)?;
    }
    Ok((steps.len() as u64, used.len() as u64))
}
