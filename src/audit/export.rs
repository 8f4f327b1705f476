//! `export`: the records of a run or a chain as JSON lines, each with its
//! stored bytes (base64) and digest, followed by the checkpoints that cover
//! them, so `verify --export` can check the file with nothing else. Where a
//! covering checkpoint is signed, each record also carries its RFC 9162
//! inclusion proof in the partition's tree at that checkpoint's size, so an
//! auditor with the verifier key needs nothing from the ledger's operator.
//! Where witnesses cosigned a checkpoint of the partition that holds the
//! record, the proof is to that checkpoint's tree instead, and the export
//! carries its cosigned note (`{"type":"cosigned",…}`): an auditor can then
//! require the witnesses too (`verify --export --witness-key`), and a ledger
//! that showed the witnesses another history cannot make the proofs hold.

use super::checkpoint::{Checkpoint, Cosigned};
use super::tiles::TileStore;
use crate::codec;
use crate::error::Result;
use crate::log::Log;
use crate::model::Topic;
use crate::views::TrailStep;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::json;
use std::collections::BTreeMap;
use std::io::Write;

/// What an export proves its records with: the checkpoints, the
/// cosigned checkpoints per ledger partition, and the ledger's key now
/// (its notes are preferred where a key replaced another).
pub struct Attestations<'a> {
    pub checkpoints: &'a [Checkpoint],
    pub witnessed: &'a BTreeMap<u32, Cosigned>,
    pub signer: Option<&'a super::note::VerifierKey>,
}

/// Write an export of `steps` (a run's or chain's trail, already filtered
/// as of a point) with the checkpoints in `checkpoints` that cover them,
/// and the cosigned checkpoints of `witnessed` (per ledger partition) its
/// records are proven under.
pub fn write_export(
    log: &dyn Log,
    tiles: &TileStore,
    what: serde_json::Value,
    steps: &[(String, TrailStep)],
    by: &Attestations<'_>,
    out: &mut dyn Write,
) -> Result<(u64, u64)> {
    let &Attestations {
        checkpoints,
        witnessed,
        signer,
    } = by;
    let io = |e: std::io::Error| crate::error::LedgerError::io("writing the export", e);
    writeln!(out, "{}", json!({"type": "header", "format": super::verify::EXPORT_FORMAT, "selection": what, "records": steps.len()})).map_err(io)?;
    let covering = |s: &TrailStep| {
        checkpoints.iter().find(|c| {
            c.topic == "ledger" && c.partition == s.partition && c.digest_at(s.offset).is_some()
        })
    };
    // The tree a record is proven in: a cosigned one that holds it, else
    // its signed covering checkpoint's.
    let cosigned = |s: &TrailStep| witnessed.get(&s.partition).filter(|c| c.size > s.offset);
    // Else the first signed checkpoint past it: one of no records signs
    // the tree over records checkpointed before the key existed. Notes of
    // the ledger's key now first (it may have replaced another), else
    // any.
    let noted = |c: &&Checkpoint, current: bool| {
        c.note
            .as_deref()
            .is_some_and(|n| !current || signer.is_none_or(|k| k.open(n).is_ok()))
    };
    let signed_after = |s: &TrailStep, current: bool| {
        checkpoints
            .iter()
            .filter(|c| {
                c.topic == "ledger"
                    && c.partition == s.partition
                    && c.to > s.offset
                    && noted(c, current)
            })
            .min_by_key(|c| c.to)
    };
    let signed = |s: &TrailStep| {
        [true, false].into_iter().find_map(|current| {
            covering(s)
                .filter(|c| noted(c, current))
                .or_else(|| signed_after(s, current))
        })
    };
    let proven_at = |s: &TrailStep| {
        cosigned(s)
            .map(|c| c.size)
            .or_else(|| signed(s).map(|c| c.to))
    };
    // Each partition's tree, as far as those go.
    let mut reach: BTreeMap<u32, u64> = BTreeMap::new();
    for (_, s) in steps {
        if let Some(size) = proven_at(s) {
            let r = reach.entry(s.partition).or_default();
            *r = (*r).max(size);
        }
    }
    // Proofs from the tiles: a few reads each, whatever the partition's
    // size. Derived data is fine here: the auditor checks every proof
    // against the signed root.
    for (&p, &to) in &reach {
        super::checkpoint::sync_tiles(tiles, log, Topic::Ledger, p, to)?;
    }
    let mut used: Vec<&Checkpoint> = Vec::new();
    let mut used_cosigned: Vec<&Cosigned> = Vec::new();
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
        let mut line = json!({"type": "record", "topic": "ledger", "partition": s.partition, "offset": s.offset,
               "run": run, "step": s.step, "kind": rec.event.kind(), "event_id": rec.event_id,
               "digest": digest, "record_b64": B64.encode(&raw.payload)});
        if let Some(size) = proven_at(s) {
            let nodes = tiles.nodes(Topic::Ledger, s.partition);
            let proof = super::merkle::inclusion_proof(&nodes, s.offset, size)?.unwrap_or_default();
            line["inclusion"] = json!({"tree_size": size, "leaf_index": s.offset,
                "hashes": proof.iter().map(|h| B64.encode(h)).collect::<Vec<_>>()});
        }
        if let Some(c) = cosigned(s) {
            if !used_cosigned.contains(&c) {
                used_cosigned.push(c);
            }
        }
        writeln!(out, "{line}").map_err(io)?;
        let proving = cosigned(s).is_none().then(|| signed(s)).flatten();
        for cp in covering(s).into_iter().chain(proving) {
            if !used.contains(&cp) {
                used.push(cp);
            }
        }
    }
    for cp in &used {
        writeln!(out, "{}", json!({"type": "checkpoint", "checkpoint": cp})).map_err(io)?;
    }
    for c in &used_cosigned {
        writeln!(
            out,
            "{}",
            json!({"type": "cosigned", "topic": c.topic, "partition": c.partition,
            "size": c.size, "note": c.note})
        )
        .map_err(io)?;
    }
    Ok((steps.len() as u64, used.len() as u64))
}
