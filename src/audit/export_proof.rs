//! What `verify --export` checks beyond digests: that each record line
//! says what its bytes say (kind, run, step, event id), that every run's
//! steps run from 0 without a gap or a repeat, and — with a verifier key —
//! that every record is proven, by its RFC 9162 inclusion proof, to be in
//! a tree whose root the key signed. An export edited, cut, reordered or
//! made up from nothing fails one of them, naming the record.

use super::checkpoint::{Checkpoint, Cosigned, CHAINED_TOPICS};
use super::merkle::{leaf_hash, verify_inclusion, Hash};
use super::note::{origin, CheckpointBody, VerifierKey};
use super::signed::{SignedSummary, Trust, WitnessedLog, WitnessedSummary};
use super::verify::{mismatch as fault, Mismatch};
use crate::codec;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::Value;
use std::collections::BTreeMap;

/// The first field of a record line that its own bytes contradict.
pub fn metadata_fault(
    topic: &str,
    p: u32,
    o: u64,
    line: &Value,
    payload: &[u8],
) -> Option<Mismatch> {
    let rec = match codec::decode(payload) {
        Ok(r) => r,
        // Undecodable bytes are named by the digest checks.
        Err(_) => return None,
    };
    let claims: [(&str, Value, Value); 4] = [
        ("kind", line["kind"].clone(), Value::from(rec.event.kind())),
        (
            "event_id",
            line["event_id"].clone(),
            Value::from(rec.event_id.clone()),
        ),
        ("step", line["step"].clone(), Value::from(rec.step)),
        (
            "run",
            line["run"].clone(),
            rec.event
                .trail_run()
                .map(Value::from)
                .unwrap_or(Value::Null),
        ),
    ];
    claims
        .into_iter()
        .find(|(_, said, is)| said != is)
        .map(|(field, said, is)| {
            fault(
                topic,
                p,
                o,
                format!("the line's {field} is not the record's"),
                is.to_string(),
                said.to_string(),
            )
        })
}

/// Steps seen per run, to find the missing and the repeated.
#[derive(Default)]
pub struct RunSteps {
    by_run: BTreeMap<String, BTreeMap<u64, (String, u32, u64)>>,
    repeated: Vec<Mismatch>,
}

impl RunSteps {
    pub fn note(&mut self, line: &Value) {
        let (Some(run), Some(step)) = (line["run"].as_str(), line["step"].as_u64()) else {
            return;
        };
        let topic = line["topic"].as_str().unwrap_or_default().to_owned();
        let p = line["partition"].as_u64().unwrap_or_default() as u32;
        let o = line["offset"].as_u64().unwrap_or_default();
        let steps = self.by_run.entry(run.to_owned()).or_default();
        // The export lists each run's steps in order; a line moved
        // earlier or later is named where it stands.
        if let Some((&last, _)) = steps.last_key_value().filter(|(&last, _)| last > step) {
            self.repeated.push(fault(
                &topic,
                p,
                o,
                format!("run {run} step {step} comes after step {last} in the export"),
                "each run's steps in order",
                format!("step {step} after step {last}"),
            ));
        }
        if steps.insert(step, (topic.clone(), p, o)).is_some() {
            self.repeated.push(fault(
                &topic,
                p,
                o,
                format!("run {run} step {step} appears twice"),
                "each step once",
                "a second line",
            ));
        }
    }

    /// Runs whose steps do not run 0, 1, 2, … to their last.
    pub fn gaps(self) -> Vec<Mismatch> {
        let mut out = self.repeated;
        for (run, steps) in self.by_run {
            // A run's steps are appended in order to one partition: a
            // later step at an earlier offset was not where it is said.
            let located: Vec<(&u64, &(String, u32, u64))> = steps.iter().collect();
            if let Some(w) = located.windows(2).find(|w| w[1].1 .2 <= w[0].1 .2) {
                let (step, (topic, p, o)) = w[1];
                out.push(fault(
                    topic,
                    *p,
                    *o,
                    format!(
                        "run {run} step {step} lies before step {} in the log",
                        w[0].0
                    ),
                    format!("an offset after {}", w[0].1 .2),
                    format!("offset {o}"),
                ));
            }
            let missing = (0..).zip(steps.keys()).find(|(want, have)| want != *have);
            if let Some((want, have)) = missing {
                let (topic, p, o) = steps[have].clone();
                out.push(fault(
                    &topic,
                    p,
                    o,
                    format!("run {run} has no step {want} (a record was left out)"),
                    format!("step {want}"),
                    format!("step {have} next"),
                ));
            }
        }
        out
    }
}

/// The roots a verifier key signed, from the export's checkpoints.
pub struct SignedRoots<'k> {
    key: &'k VerifierKey,
    roots: BTreeMap<(String, u32, u64), Hash>,
    /// Checkpoints whose note does not hold up.
    pub faults: Vec<Mismatch>,
    pub summary: SignedSummary,
    /// When witnesses are required: how many, and which of them cosigned
    /// each tree (from the export's `cosigned` lines).
    need: usize,
    witness_names: Vec<String>,
    cosigners: BTreeMap<(String, u32, u64), Vec<String>>,
    /// Per log, the largest tree enough witnesses cosigned that a record
    /// was proven in.
    witnessed_logs: BTreeMap<(String, u32), (u64, Vec<String>)>,
}

impl<'k> SignedRoots<'k> {
    pub fn from_checkpoints(key: &'k VerifierKey, cps: &[Checkpoint]) -> Self {
        let mut s = SignedRoots {
            key,
            roots: BTreeMap::new(),
            faults: Vec::new(),
            summary: SignedSummary {
                key: key.to_string(),
                ..SignedSummary::default()
            },
            need: 0,
            witness_names: Vec::new(),
            cosigners: BTreeMap::new(),
            witnessed_logs: BTreeMap::new(),
        };
        for cp in cps {
            let (Some(note), Some(topic)) = (&cp.note, cp.topic()) else {
                continue;
            };
            let here = |what: &str, found: String| {
                fault(
                    &cp.topic,
                    cp.partition,
                    cp.from,
                    format!("checkpoint up to {}: {what}", cp.to),
                    format!("a note signed by {}", key.name()),
                    found,
                )
            };
            let body = key
                .open(note)
                .map_err(|e| e.to_string())
                .and_then(|t| CheckpointBody::parse(t).map_err(|e| e.to_string()));
            match body {
                Err(e) => s.faults.push(here("signature", e)),
                Ok(b) if b.origin != origin(key.name(), topic, cp.partition) || b.size != cp.to => {
                    s.faults.push(here(
                        "origin and size",
                        format!("{} at {}", b.origin, b.size),
                    ))
                }
                Ok(b) => {
                    s.summary.signed_checkpoints += 1;
                    s.roots
                        .insert((cp.topic.clone(), cp.partition, b.size), b.root);
                }
            }
        }
        s
    }

    /// Take the export's cosigned checkpoints (`(line, cosigned)`): each
    /// must be signed by the ledger's key for its log and size (its root
    /// then proves records like any signed one); the witnesses of `trust`
    /// whose cosignature verifies are noted per tree, and with witnesses
    /// named every record must be proven in a tree `trust.need` of them
    /// cosigned.
    pub fn add_cosigned(&mut self, cosigned: &[(usize, Cosigned)], trust: &Trust) {
        self.need = if trust.witnesses.is_empty() {
            0
        } else {
            trust.need.max(1)
        };
        self.witness_names = trust.witnesses.iter().map(|w| w.to_string()).collect();
        for (line, c) in cosigned {
            let topic = CHAINED_TOPICS.into_iter().find(|t| t.name() == c.topic);
            let body = self
                .key
                .open(&c.note)
                .map_err(|e| e.to_string())
                .and_then(|t| CheckpointBody::parse(t).map_err(|e| e.to_string()));
            let fits = |b: &CheckpointBody| {
                topic.is_some_and(|t| b.origin == origin(self.key.name(), t, c.partition))
                    && b.size == c.size
            };
            let body = match body {
                Ok(b) if fits(&b) => b,
                Ok(b) => {
                    self.faults.push(fault(
                        &c.topic,
                        c.partition,
                        c.size,
                        format!("cosigned checkpoint on line {line}: origin and size"),
                        format!(
                            "{} at {}",
                            topic.map_or("?".to_owned(), |t| origin(
                                self.key.name(),
                                t,
                                c.partition
                            )),
                            c.size
                        ),
                        format!("{} at {}", b.origin, b.size),
                    ));
                    continue;
                }
                Err(e) => {
                    self.faults.push(fault(
                        &c.topic,
                        c.partition,
                        c.size,
                        format!("cosigned checkpoint on line {line}: signature"),
                        format!("a note signed by {}", self.key.name()),
                        e,
                    ));
                    continue;
                }
            };
            let at = (c.topic.clone(), c.partition, c.size);
            self.summary.signed_checkpoints += 1;
            self.roots.insert(at.clone(), body.root);
            let by: Vec<String> = trust
                .witnesses
                .iter()
                .filter(|w| w.cosigned(&c.note).is_ok())
                .map(|w| w.name().to_owned())
                .collect();
            self.cosigners.insert(at, by);
        }
    }

    /// The summary, with what the witnesses attest when they were required.
    pub fn finish(mut self) -> SignedSummary {
        if !self.witness_names.is_empty() {
            let mut w = WitnessedSummary {
                witnesses: self.witness_names,
                required: self.need,
                witnessed: self.summary.witnessed.as_ref().map_or(0, |w| w.witnessed),
                logs: Vec::new(),
            };
            for ((topic, p), (size, by)) in self.witnessed_logs {
                w.logs.push(WitnessedLog {
                    log: format!("{topic}/{p}"),
                    size,
                    by,
                });
            }
            self.summary.witnessed = Some(w);
        }
        self.summary
    }

    /// Check a record's inclusion proof; the fault if it does not hold.
    pub fn prove(
        &mut self,
        topic: &str,
        p: u32,
        o: u64,
        line: &Value,
        payload: &[u8],
    ) -> Option<Mismatch> {
        let bad = |what: &str, found: String| {
            Some(fault(
                topic,
                p,
                o,
                what.to_owned(),
                format!("a proof to a root {} signed", self.key.name()),
                found,
            ))
        };
        let inc = &line["inclusion"];
        let (Some(size), Some(index)) = (inc["tree_size"].as_u64(), inc["leaf_index"].as_u64())
        else {
            return bad("record is not proven", "no inclusion proof".to_owned());
        };
        if index != o {
            return bad(
                "inclusion proof is for another offset",
                format!("leaf index {index}"),
            );
        }
        let Some(root) = self.roots.get(&(topic.to_owned(), p, size)) else {
            return bad(
                "inclusion proof's tree is not signed",
                format!("tree size {size}"),
            );
        };
        let hashes: Option<Vec<Hash>> = inc["hashes"].as_array().and_then(|a| {
            a.iter()
                .map(|h| {
                    h.as_str()
                        .and_then(|s| B64.decode(s).ok())
                        .and_then(|b| b.try_into().ok())
                })
                .collect()
        });
        let Some(hashes) = hashes else {
            return bad(
                "inclusion proof",
                "hashes that are not base64 SHA-256".to_owned(),
            );
        };
        if let Err(e) = verify_inclusion(&leaf_hash(payload), index, size, &hashes, root) {
            return bad("record is not in the signed tree", e.to_string());
        }
        self.summary.attested += 1;
        if self.need == 0 {
            return None;
        }
        let by = self
            .cosigners
            .get(&(topic.to_owned(), p, size))
            .cloned()
            .unwrap_or_default();
        if by.len() < self.need {
            return Some(fault(
                topic,
                p,
                o,
                format!(
                    "record is not under a checkpoint {} of the witnesses cosigned",
                    self.need
                ),
                format!("a tree cosigned by {} of the witnesses", self.need),
                match by.len() {
                    0 => format!("the tree of {size} records, cosigned by none of them"),
                    _ => format!("the tree of {size} records, cosigned by {}", by.join(", ")),
                },
            ));
        }
        let w = self
            .summary
            .witnessed
            .get_or_insert_with(WitnessedSummary::default);
        w.witnessed += 1;
        let log = self
            .witnessed_logs
            .entry((topic.to_owned(), p))
            .or_insert((0, Vec::new()));
        if size >= log.0 {
            *log = (size, by);
        }
        None
    }
}
