//! `verify`: recompute every record's body digest and every partition's
//! hash chain from the log, compare with every checkpoint, and name the
//! first record that does not match. Also verifies an export offline.

use super::checkpoint::{self, Checkpoint, CHAINED_TOPICS};
use super::hashchain::{fold, record_digest, GENESIS};
use crate::error::Result;
use crate::log::{Log, Topic};
use serde::Serialize;
use std::collections::BTreeMap;

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
        write!(
            f,
            "{}/{}@{}: {}: expected {}, found {}",
            self.topic, self.partition, self.offset, self.what, self.expected, self.found
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
}

impl VerifyReport {
    pub fn first(&self) -> Option<&Mismatch> {
        self.mismatches.first()
    }
    pub fn clean(&self) -> bool {
        self.mismatches.is_empty()
    }
}

fn mismatch(
    topic: &str,
    partition: u32,
    offset: u64,
    what: &str,
    expected: impl Into<String>,
    found: impl Into<String>,
) -> Mismatch {
    Mismatch {
        topic: topic.to_string(),
        partition,
        offset,
        what: what.to_string(),
        expected: expected.into(),
        found: found.into(),
    }
}

/// Checks of one record against the checkpoints covering it; shared by the
/// log and the export verifier.
fn check_record(
    topic: &str,
    partition: u32,
    offset: u64,
    payload: &[u8],
    cps: &[&Checkpoint],
) -> std::result::Result<[u8; 32], Mismatch> {
    let d = record_digest(payload).map_err(|e| {
        mismatch(
            topic,
            partition,
            offset,
            "record body does not match its digest",
            "a record whose body matches its digest",
            e.to_string(),
        )
    })?;
    for cp in cps {
        if let Some(expected) = cp.digest_at(offset) {
            // Compare bytes; build strings only for the report.
            let mut want = [0u8; 32];
            if hex::decode_to_slice(expected, &mut want).is_err() || want != d {
                return Err(mismatch(
                    topic,
                    partition,
                    offset,
                    "record digest differs from checkpoint",
                    expected,
                    hex::encode(d),
                ));
            }
        }
    }
    Ok(d)
}

/// Verify the whole log. `progress` is told how many records were read.
/// Partitions are independent chains, so they are verified in parallel, one
/// thread per core.
pub fn verify_log(log: &dyn Log, progress: &(dyn Fn(u64) + Sync)) -> Result<VerifyReport> {
    let mut report = VerifyReport::default();
    let mut by_tp: BTreeMap<(String, u32), Vec<Checkpoint>> = BTreeMap::new();
    for (at, cp) in checkpoint::read_all(log)? {
        report.checkpoints += 1;
        match cp {
            Ok(cp) => {
                // No self-check here: folding the log's records against
                // the checkpoint's digests and head below covers it.
                let list = by_tp.entry((cp.topic.clone(), cp.partition)).or_default();
                if !list.contains(&cp) {
                    list.push(cp);
                }
            }
            Err(e) => report.mismatches.push(mismatch(
                Topic::Checkpoints.name(),
                0,
                at,
                "checkpoint is not readable",
                "checkpoint JSON",
                e,
            )),
        }
    }
    let mut jobs = Vec::new();
    for topic in CHAINED_TOPICS {
        for p in 0..log.partitions(topic) {
            let cps: Vec<Checkpoint> = by_tp
                .remove(&(topic.name().to_string(), p))
                .unwrap_or_default();
            jobs.push((topic, p, cps));
        }
    }
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(jobs.len().max(1));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<Result<Vec<(usize, PartitionOutcome)>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let Some((topic, p, cps)) = jobs.get(i) else {
                            return Ok(done);
                        };
                        done.push((i, verify_partition(log, *topic, *p, cps, progress)?));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(crate::error::LedgerError::Other(
                        "a verify thread panicked".into(),
                    ))
                })
            })
            .collect()
    });
    let mut outcomes: Vec<(usize, PartitionOutcome)> = Vec::new();
    for r in results {
        outcomes.extend(r?);
    }
    // Report in log order, whatever order the threads finished in.
    outcomes.sort_by_key(|(i, _)| *i);
    for (_, o) in outcomes {
        report.records += o.records;
        report.covered += o.covered;
        if let Some(m) = o.mismatch {
            report.mismatches.push(m);
        }
    }
    for ((topic, p), cps) in by_tp {
        report.mismatches.push(mismatch(
            &topic,
            p,
            cps[0].from,
            "checkpoint names a partition the log does not have",
            "an existing partition",
            "none",
        ));
    }
    Ok(report)
}

/// What verifying one partition found.
struct PartitionOutcome {
    records: u64,
    covered: u64,
    mismatch: Option<Mismatch>,
}

fn verify_partition(
    log: &dyn Log,
    topic: Topic,
    p: u32,
    cps: &[Checkpoint],
    progress: &(dyn Fn(u64) + Sync),
) -> Result<PartitionOutcome> {
    let mut out = PartitionOutcome {
        records: 0,
        covered: 0,
        mismatch: None,
    };
    let found = verify_partition_inner(log, topic, p, cps, &mut out, progress)?;
    out.mismatch = found;
    Ok(out)
}

fn verify_partition_inner(
    log: &dyn Log,
    topic: Topic,
    p: u32,
    cps: &[Checkpoint],
    report: &mut PartitionOutcome,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Option<Mismatch>> {
    let name = topic.name();
    // Checkpoints in the order they start; `active` are those covering the
    // current offset (normally one), so each record costs O(1) lookups.
    let mut order: Vec<&Checkpoint> = cps.iter().collect();
    order.sort_by_key(|c| (c.from, c.to));
    let mut next = 0usize;
    let mut active: Vec<&Checkpoint> = Vec::new();
    let mut head = GENESIS;
    let mut at = 0u64;
    loop {
        let recs = log.read(topic, p, at, 4096)?;
        if recs.is_empty() {
            break;
        }
        progress(recs.len() as u64);
        for r in recs {
            report.records += 1;
            let o = r.offset;
            active.retain(|c| c.to > o);
            while next < order.len() && order[next].from <= o {
                let c = order[next];
                next += 1;
                if c.to <= o {
                    continue;
                }
                // A checkpoint's prev_head must be the chain head where it starts.
                if c.from == o && c.prev_head != hex::encode(head) {
                    return Ok(Some(mismatch(
                        name,
                        p,
                        o,
                        "chain head before this record differs from checkpoint",
                        &c.prev_head,
                        hex::encode(head),
                    )));
                }
                active.push(c);
            }
            if !active.is_empty() {
                report.covered += 1;
            }
            let d = match check_record(name, p, o, &r.payload, &active) {
                Ok(d) => d,
                Err(m) => return Ok(Some(m)),
            };
            head = fold(&head, o, &d);
            if let Some(c) = active
                .iter()
                .find(|c| c.to == o + 1 && c.head != hex::encode(head))
            {
                return Ok(Some(mismatch(
                    name,
                    p,
                    o,
                    "chain head after this record differs from checkpoint",
                    &c.head,
                    hex::encode(head),
                )));
            }
            at = o + 1;
        }
    }
    if let Some(c) = cps.iter().filter(|c| c.to > at).max_by_key(|c| c.to) {
        return Ok(Some(mismatch(
            name,
            p,
            at,
            "log is shorter than its checkpoints",
            format!("records up to offset {}", c.to - 1),
            format!("log ends at offset {at}"),
        )));
    }
    Ok(None)
}

/// Verify an export file (JSON lines written by `export`) on its own.
pub fn verify_export(text: &str) -> std::result::Result<VerifyReport, String> {
    let mut report = VerifyReport::default();
    let mut cps: Vec<Checkpoint> = Vec::new();
    let mut records = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("line {}: not JSON: {e}", i + 1))?;
        match v["type"].as_str() {
            Some("header") => {}
            Some("checkpoint") => {
                let cp: Checkpoint = serde_json::from_value(v["checkpoint"].clone())
                    .map_err(|e| format!("line {}: bad checkpoint: {e}", i + 1))?;
                report.checkpoints += 1;
                if let Err(why) = cp.self_check() {
                    report.mismatches.push(mismatch(
                        &cp.topic,
                        cp.partition,
                        cp.from,
                        "checkpoint is inconsistent",
                        "digests folding to its head",
                        why,
                    ));
                }
                cps.push(cp);
            }
            Some("record") => records.push((i + 1, v)),
            other => return Err(format!("line {}: unknown line type {other:?}", i + 1)),
        }
    }
    for (line, v) in records {
        let topic = v["topic"].as_str().unwrap_or_default().to_string();
        let p = v["partition"].as_u64().unwrap_or(u64::MAX) as u32;
        let o = v["offset"]
            .as_u64()
            .ok_or_else(|| format!("line {line}: record without offset"))?;
        let payload = hex::decode(v["payload_hex"].as_str().unwrap_or_default())
            .map_err(|e| format!("line {line}: payload is not hex: {e}"))?;
        report.records += 1;
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
        if let Err(m) = check_record(&topic, p, o, &payload, &covering) {
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
    report
        .mismatches
        .sort_by(|a, b| (&a.topic, a.partition, a.offset).cmp(&(&b.topic, b.partition, b.offset)));
    Ok(report)
}
