//! What `verify --export` checks beyond digests: that each record line
//! says what its bytes say (kind, run, step, event id), that every run's
//! steps run from 0 without a gap or a repeat, and — with a verifier key —
//! that every record is proven, by its RFC 9162 inclusion proof, to be in
//! a tree whose root the key signed. An export edited, cut, reordered or
//! made up from nothing fails one of them, naming the record.

use super::checkpoint::{Checkpoint, Cosigned, CHAINED_TOPICS};
use super::findings::{mismatch as fault, Mismatch, SignedSummary, WitnessedLog, WitnessedSummary};
use super::merkle::{leaf_hash, verify_inclusion, Hash};
use super::note::{origin, CheckpointBody, VerifierKey};
use super::signed::Trust;
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

/// Where a record stands: topic, partition, offset.
type At = (String, u32, u64);

/// What the header says the export selected, held against the records'
/// own bytes: an export of run R holds R's records only; an export of a
/// chain holds runs of one chain, R's among them, its root, and every run
/// its records say was opened from it (a dispatch's `opened`, a run's
/// trigger) — a run left out whole, or another run's records under the
/// header of R, is named. With `as_of`, no record lies past it.
pub struct Selection {
    run: Option<String>,
    chain: Option<String>,
    as_of: Option<u64>,
    /// Per run present: its chain's root (once its opening is seen) and
    /// where its first record stands.
    runs: BTreeMap<String, (Option<String>, At)>,
    /// Runs the records name as opened from, or triggering, a run here.
    named: Vec<(String, At, &'static str)>,
    faults: Vec<Mismatch>,
}

impl Selection {
    /// From the header's `selection`; `None` unless it names exactly one
    /// of a run or a chain.
    pub fn of(selection: &Value) -> Option<Self> {
        let name = |k: &str| selection[k].as_str().map(str::to_owned);
        let (run, chain) = (name("run"), name("chain"));
        if run.is_some() == chain.is_some() {
            return None;
        }
        Some(Selection {
            run,
            chain,
            as_of: selection["as_of"].as_u64(),
            runs: BTreeMap::new(),
            named: Vec::new(),
            faults: Vec::new(),
        })
    }

    pub fn note(&mut self, topic: &str, p: u32, o: u64, payload: &[u8]) {
        // Undecodable bytes are named by the digest checks.
        let Ok(rec) = codec::decode(payload) else {
            return;
        };
        let at: At = (topic.to_owned(), p, o);
        let mut fault = |what: String, expected: String, found: String| {
            self.faults.push(fault(topic, p, o, what, expected, found));
        };
        if let Some(limit) = self.as_of.filter(|&l| o > l) {
            fault(
                "record past the export's as_of".into(),
                format!("offsets up to {limit}"),
                format!("offset {o}"),
            );
        }
        let Some(run) = rec.event.trail_run().filter(|_| topic == "ledger") else {
            // Registry records are steps of no run: no selection holds them.
            return fault(
                format!(
                    "a {} record, of no run, in an export of runs",
                    rec.event.kind()
                ),
                "ledger records of the selected runs".into(),
                format!("{topic} record {}", rec.event_id),
            );
        };
        let run = run.to_owned();
        if let Some(want) = self.run.as_ref().filter(|w| **w != run) {
            fault(
                format!("a record of run {run} in an export of run {want}"),
                format!("run {want}"),
                format!("run {run}"),
            );
        }
        let seen = self.runs.entry(run.clone()).or_insert((None, at.clone()));
        use crate::model::event::LedgerEvent;
        match &rec.event {
            LedgerEvent::RunOpened(e) => {
                seen.0 = Some(e.root.clone().unwrap_or_else(|| run.clone()));
                if let Some(t) = &e.trigger {
                    self.named
                        .push((t.source_run.clone(), at, "whose close triggered this run"));
                }
            }
            LedgerEvent::RunDispatched(e) => {
                for child in &e.opened {
                    self.named
                        .push((child.clone(), at.clone(), "which this dispatch opened"));
                }
            }
            _ => {}
        }
    }

    /// What the records say is missing from, or foreign to, the selection.
    pub fn faults(mut self) -> Vec<Mismatch> {
        let Some(chain) = self.chain.clone() else {
            return self.faults;
        };
        // As of a point before it opened, the run named has no record
        // (the header is not signed: `as_of` narrows, it does not prove).
        let root = match self.runs.get(&chain).cloned() {
            Some((root, _)) => root.unwrap_or_else(|| chain.clone()),
            None if self.as_of.is_some() => match self.runs.values().find_map(|(r, _)| r.clone()) {
                Some(root) => root,
                None => return self.faults,
            },
            None => {
                self.faults.push(fault(
                    "export",
                    0,
                    0,
                    format!("run {chain}, whose chain the header names, has no record here"),
                    format!("the records of run {chain}"),
                    "none",
                ));
                return self.faults;
            }
        };
        for (run, (r, (topic, p, o))) in &self.runs {
            if r.as_ref().is_some_and(|r| *r != root) {
                self.faults.push(fault(
                    topic,
                    *p,
                    *o,
                    format!("run {run} belongs to another chain than {chain}'s"),
                    format!("root {root}"),
                    format!("root {}", r.as_deref().unwrap_or_default()),
                ));
            }
        }
        if !self.runs.contains_key(&root) {
            self.faults.push(fault(
                "export",
                0,
                0,
                format!("the chain's root run {root} has no record here"),
                format!("the records of run {root}"),
                "none",
            ));
        }
        for (run, (topic, p, o), how) in &self.named {
            if !self.runs.contains_key(run) {
                self.faults.push(fault(
                    topic,
                    *p,
                    *o,
                    format!("run {run}, {how}, is left out of the chain's export"),
                    format!("the records of run {run}"),
                    "none",
                ));
            }
        }
        self.faults
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
            let body = key.open(note).and_then(CheckpointBody::parse);
            match body {
                // Another key's note: nothing to this key, no fault.
                Err(super::note::NoteError::Unsigned(_)) => s.summary.other_keys += 1,
                Err(e) => s.faults.push(here("signature", e.to_string())),
                Ok(b) if b.origin != origin(key.name(), topic, cp.partition) || b.size != cp.to => {
                    s.faults.push(here(
                        "origin and size",
                        format!("{} at {}", b.origin, b.size),
                    ))
                }
                Ok(b) => {
                    let at = (cp.topic.clone(), cp.partition, b.size);
                    if s.roots.insert(at, b.root).is_none() {
                        s.summary.signed_checkpoints += 1;
                    }
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
                // An export's record not witnessed is a mismatch already.
                unwitnessed: 0,
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
