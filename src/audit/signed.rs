//! `verify --key`: what the ledger's checkpoint key signed, checked against
//! the log by someone who holds only the verifier key. Each signed note
//! names a partition and a tree size; the partition's Merkle tree (RFC
//! 9162) is recomputed from the stored bytes and must have the signed root
//! at every signed size. Every record must lie under a signed checkpoint.
//!
//! This is what the hash chain alone cannot give: whoever rewrites a record
//! can recompute digests, heads and CRCs, but not the signature over a root
//! that commits to the original bytes; emptying the checkpoints or leaving
//! records past the last one leaves records that no signature attests.

use super::checkpoint::{self, CHAINED_TOPICS};
use super::findings::{mismatch as bad, Mismatch, SignedSummary, WitnessedLog, WitnessedSummary};
use super::merkle::{Frontier, Hash};
use super::note::{origin, CheckpointBody, VerifierKey};
use crate::error::Result;
use crate::log::Log;
use crate::model::Topic;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use std::collections::BTreeMap;

/// Whom `verify` trusts: the ledger's key, and the witnesses of which
/// `need` must have cosigned (none: signatures alone).
#[derive(Debug, Clone)]
pub struct Trust {
    pub key: VerifierKey,
    pub witnesses: Vec<VerifierKey>,
    pub need: usize,
    /// Records past a log's newest witnessed checkpoint are a mismatch,
    /// not a count: the log's own files can always hide cosignatures
    /// newer than the ones they keep.
    pub all_witnessed: bool,
}

impl Trust {
    pub fn key_only(key: VerifierKey) -> Self {
        Trust {
            key,
            witnesses: Vec::new(),
            need: 0,
            all_witnessed: false,
        }
    }

    /// Require every record under a witnessed checkpoint.
    pub fn requiring_all_witnessed(mut self, yes: bool) -> Self {
        self.all_witnessed = yes;
        self
    }

    /// The ledger's key and witness keys of which `need` (default: all)
    /// must have cosigned; says what is wrong with them.
    pub fn new(
        key: VerifierKey,
        witnesses: Vec<VerifierKey>,
        need: Option<usize>,
    ) -> std::result::Result<Self, BadTrust> {
        use super::note::KeyKind;
        if key.kind() != KeyKind::Checkpoint {
            return Err(BadTrust::NotTheLedgers(key.name().to_owned()));
        }
        if let Some(w) = witnesses.iter().find(|w| w.kind() != KeyKind::Witness) {
            return Err(BadTrust::NotAWitness(w.name().to_owned()));
        }
        let need = need.unwrap_or(witnesses.len());
        if need > witnesses.len() || (need == 0 && !witnesses.is_empty()) {
            return Err(BadTrust::Need {
                need,
                of: witnesses.len(),
            });
        }
        Ok(Trust {
            key,
            witnesses,
            need,
            all_witnessed: false,
        })
    }
}

/// Why the keys given cannot be trusted as asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadTrust {
    #[error("{0}: a witness key where the ledger's belongs")]
    NotTheLedgers(String),
    #[error("{0}: not a witness key (cosignature/v1; `key generate --witness` makes one)")]
    NotAWitness(String),
    #[error("{need} cosignatures required of {of} witness keys")]
    Need { need: usize, of: usize },
}

/// A signed size of a partition: its root and where its checkpoint is.
struct Signed {
    root: Hash,
    at: u64,
}

/// Check every signed checkpoint and the records under them; with
/// witnesses, that each log has a checkpoint enough of them cosigned.
pub fn verify_signed(log: &dyn Log, trust: &Trust) -> Result<(SignedSummary, Vec<Mismatch>)> {
    verify_signed_with(log, trust, None)
}

/// [`verify_signed`] with the partitions' tree roots `verify` already
/// computed from the records (see `verify_log_with_roots`): a partition
/// whose every signed size is among them is not read again.
pub fn verify_signed_with(
    log: &dyn Log,
    trust: &Trust,
    known: Option<&super::log_verify::Roots>,
) -> Result<(SignedSummary, Vec<Mismatch>)> {
    // Headers: the digest lists are not needed here.
    let noted: Vec<checkpoint::Header> = checkpoint::read_headers(log)?
        .into_iter()
        .filter_map(|(_, cp)| cp.ok())
        .filter(|cp| cp.note.is_some())
        .collect();
    verify_signed_given(log, trust, known, &noted)
}

/// A note opened by the ledger's key and read as a tlog-checkpoint, or
/// what is wrong with it: (what, expected, found).
type Opened = std::result::Result<CheckpointBody, (&'static str, String, String)>;

fn open_note(key: &VerifierKey, cp: &checkpoint::Header) -> Option<Opened> {
    let (note, topic) = (cp.note.as_ref()?, cp.topic()?);
    let opened = key
        .open(note)
        .map_err(|e| {
            let what = match e {
                super::note::NoteError::Unsigned(_) => "other key",
                _ => "signature",
            };
            (
                what,
                format!("a note signed by {}", key.name()),
                e.to_string(),
            )
        })
        .and_then(|text| {
            CheckpointBody::parse(text)
                .map_err(|e| ("note", "a tlog-checkpoint".to_owned(), e.to_string()))
        })
        .and_then(|body| {
            let want = origin(key.name(), topic, cp.partition);
            if body.origin != want || body.size != cp.to {
                Err((
                    "origin and size",
                    format!("{want} at {}", cp.to),
                    format!("{} at {}", body.origin, body.size),
                ))
            } else {
                Ok(body)
            }
        });
    Some(opened)
}

/// [`verify_signed_with`] over checkpoints already read (those with a
/// note, as `verify_log_for_key` keeps them): the signatures are checked
/// on every core.
pub fn verify_signed_given(
    log: &dyn Log,
    trust: &Trust,
    known: Option<&super::log_verify::Roots>,
    noted: &[checkpoint::Header],
) -> Result<(SignedSummary, Vec<Mismatch>)> {
    let key = &trust.key;
    let mut summary = SignedSummary {
        key: key.to_string(),
        ..SignedSummary::default()
    };
    let mut mismatches = Vec::new();
    let mut sizes: BTreeMap<(Topic, u32), BTreeMap<u64, Signed>> = BTreeMap::new();
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let per = noted.len().div_ceil(workers).max(1);
    let opened: Vec<Option<Opened>> = std::thread::scope(|s| {
        let parts: Vec<_> = noted
            .chunks(per)
            .map(|part| {
                s.spawn(move || part.iter().map(|cp| open_note(key, cp)).collect::<Vec<_>>())
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_default())
            .collect()
    });
    if opened.len() != noted.len() {
        return Err(crate::error::LedgerError::Internal(
            "a verify thread panicked",
        ));
    }
    for (cp, opened) in noted.iter().zip(opened) {
        let (Some(opened), Some(topic)) = (opened, cp.topic()) else {
            continue;
        };
        let at = cp.at.1;
        let here = |what: &str, expected: String, found: String| {
            bad(
                "checkpoints",
                0,
                at,
                format!("checkpoint of {}/{}: {what}", cp.topic, cp.partition),
                expected,
                found,
            )
        };
        let body = match opened {
            Ok(b) => b,
            Err(("other key", ..)) => {
                summary.other_keys += 1;
                continue;
            }
            Err((what, expected, found)) => {
                mismatches.push(here(what, expected, found));
                continue;
            }
        };
        let by_size = sizes.entry((topic, cp.partition)).or_default();
        if !by_size.contains_key(&body.size) {
            summary.signed_checkpoints += 1;
        }
        match by_size.get(&body.size) {
            Some(s) if s.root != body.root => mismatches.push(here(
                "a second root for the same size (two histories signed)",
                B64.encode(s.root),
                B64.encode(body.root),
            )),
            Some(_) => {}
            None => {
                by_size.insert(
                    body.size,
                    Signed {
                        root: body.root,
                        at,
                    },
                );
            }
        }
    }
    let roots: BTreeMap<(Topic, u32), BTreeMap<u64, Hash>> = sizes
        .iter()
        .map(|(k, v)| (*k, v.iter().map(|(n, s)| (*n, s.root)).collect()))
        .collect();
    // Partitions are independent trees: one thread per core, largest
    // first, results kept in partition order.
    let mut jobs: Vec<(Topic, u32, u64, BTreeMap<u64, Signed>)> = Vec::new();
    for topic in CHAINED_TOPICS {
        for p in 0..log.partitions(topic) {
            let signed = sizes.remove(&(topic, p)).unwrap_or_default();
            jobs.push((topic, p, log.end_offset(topic, p)?, signed));
        }
    }
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(jobs[i].2));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(jobs.len().max(1));
    type Outcome = (usize, Result<(u64, Option<Mismatch>)>);
    let mut outcomes: Vec<Outcome> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    while let Some(&i) =
                        order.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
                    {
                        let (topic, p, _, signed) = &jobs[i];
                        let known = known.and_then(|k| k.get(&(*topic, *p)));
                        done.push((i, check_partition(log, *topic, *p, signed, known)));
                    }
                    done
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| {
                h.join().unwrap_or_else(|_| {
                    vec![(
                        usize::MAX,
                        Err(crate::error::LedgerError::Internal(
                            "a verify thread panicked",
                        )),
                    )]
                })
            })
            .collect()
    });
    outcomes.sort_by_key(|(i, _)| *i);
    let mut attested_to: BTreeMap<(Topic, u32), u64> = BTreeMap::new();
    for (i, outcome) in outcomes {
        let (attested, m) = outcome?;
        summary.attested += attested;
        mismatches.extend(m);
        if let Some((topic, p, ..)) = jobs.get(i) {
            attested_to.insert((*topic, *p), attested);
        }
    }
    if !trust.witnesses.is_empty() {
        let ends: BTreeMap<(Topic, u32), u64> = jobs.iter().map(|j| ((j.0, j.1), j.2)).collect();
        let (w, m) = check_witnessed(log, trust, &roots, &attested_to, &ends)?;
        summary.witnessed = Some(w);
        mismatches.extend(m);
    }
    for ((topic, p), signed) in sizes {
        if let Some((size, s)) = signed.into_iter().next() {
            mismatches.push(bad(
                "checkpoints",
                0,
                s.at,
                format!("signed checkpoint of {topic}/{p} at size {size}"),
                "a partition the log has",
                "none",
            ));
        }
    }
    Ok((summary, mismatches))
}

/// Each log must have a checkpoint that `trust.need` of the witnesses
/// cosigned, and every cosigned checkpoint must be one the log has — a
/// cosigned root the log does not have is a history shown to the
/// witnesses and not to this auditor (a split view).
fn check_witnessed(
    log: &dyn Log,
    trust: &Trust,
    roots: &BTreeMap<(Topic, u32), BTreeMap<u64, Hash>>,
    attested_to: &BTreeMap<(Topic, u32), u64>,
    ends: &BTreeMap<(Topic, u32), u64>,
) -> Result<(WitnessedSummary, Vec<Mismatch>)> {
    let key = &trust.key;
    let mut mismatches = Vec::new();
    // Per log, per size: the witnesses whose cosignature verified.
    let mut by: BTreeMap<(Topic, u32), BTreeMap<u64, Vec<String>>> = BTreeMap::new();
    for (at, c) in checkpoint::read_cosigned(log)? {
        let Ok(body) = key
            .open(&c.note)
            .map_err(|_| ())
            .and_then(|t| CheckpointBody::parse(t).map_err(|_| ()))
        else {
            continue;
        };
        let Some((topic, p)) = CHAINED_TOPICS
            .into_iter()
            .flat_map(|t| (0..log.partitions(t)).map(move |p| (t, p)))
            .find(|&(t, p)| origin(key.name(), t, p) == body.origin)
        else {
            continue;
        };
        let names: Vec<String> = trust
            .witnesses
            .iter()
            .filter(|w| w.cosigned(&c.note).is_ok())
            .map(|w| w.name().to_owned())
            .collect();
        if names.is_empty() {
            continue;
        }
        let genuine = roots
            .get(&(topic, p))
            .and_then(|r| r.get(&body.size))
            .is_some_and(|r| *r == body.root)
            && attested_to.get(&(topic, p)).copied().unwrap_or(0) >= body.size;
        if !genuine {
            mismatches.push(bad(
                "checkpoints",
                0,
                at,
                format!(
                    "checkpoint of {topic}/{p} at {} cosigned by {}",
                    body.size,
                    names.join(", ")
                ),
                "a root this log has at that size".to_owned(),
                format!(
                    "{} (the witnesses were shown another history: a split view)",
                    B64.encode(body.root)
                ),
            ));
            continue;
        }
        let who = by
            .entry((topic, p))
            .or_default()
            .entry(body.size)
            .or_default();
        for n in names {
            if !who.contains(&n) {
                who.push(n);
            }
        }
    }
    let need = trust.need.max(1);
    let mut summary = WitnessedSummary {
        witnesses: trust.witnesses.iter().map(|w| w.to_string()).collect(),
        required: need,
        ..WitnessedSummary::default()
    };
    for (&(topic, p), &end) in ends {
        let best = by.get(&(topic, p)).and_then(|sizes| {
            sizes
                .iter()
                .rev()
                .find(|(_, who)| who.len() >= need)
                .map(|(size, who)| (*size, who.clone()))
        });
        match best {
            Some((size, who)) => {
                summary.witnessed += size;
                summary.unwitnessed += end.saturating_sub(size);
                if trust.all_witnessed && end > size {
                    mismatches.push(bad(
                        topic.name(),
                        p,
                        size,
                        format!("records of {topic}/{p} past its newest witnessed checkpoint"),
                        format!(
                            "every record under a checkpoint cosigned by {need} of the witnesses"
                        ),
                        format!("{} records after the {size} cosigned", end - size),
                    ));
                }
                summary.logs.push(WitnessedLog {
                    log: format!("{topic}/{p}"),
                    size,
                    by: who,
                });
            }
            None if end > 0 => {
                summary.unwitnessed += end;
                let most = by
                    .get(&(topic, p))
                    .and_then(|s| s.values().map(Vec::len).max())
                    .unwrap_or(0);
                mismatches.push(bad(
                    topic.name(),
                    p,
                    0,
                    format!("records of {topic}/{p} under a witnessed checkpoint"),
                    format!("a checkpoint cosigned by {need} of the witnesses"),
                    format!("at most {most} cosigned one"),
                ));
            }
            None => {}
        }
    }
    Ok((summary, mismatches))
}

/// Recompute a partition's tree up to its largest signed size; the records
/// attested, and the first thing wrong.
fn check_partition(
    log: &dyn Log,
    topic: Topic,
    p: u32,
    signed: &BTreeMap<u64, Signed>,
    known: Option<&BTreeMap<u64, Hash>>,
) -> Result<(u64, Option<Mismatch>)> {
    let name = topic.name();
    let end = log.end_offset(topic, p)?;
    let last = signed.keys().next_back().copied().unwrap_or(0);
    if last > end {
        let s = &signed[&last];
        return Ok((
            0,
            Some(bad(
                name,
                p,
                end,
                format!("records signed by the checkpoint at checkpoints@{}", s.at),
                format!("{last} records"),
                format!("{end} in the log (records were removed)"),
            )),
        ));
    }
    // Roots computed already from the same records, when every signed
    // size has one; else the tree is built here from the log.
    let known = known.filter(|k| signed.keys().all(|size| k.contains_key(size)));
    let mut f = Frontier::new();
    let mut attested_to = 0;
    for (&size, s) in signed {
        let root = match known.and_then(|k| k.get(&size)) {
            Some(root) => *root,
            None => {
                checkpoint::leaf_hashes(log, topic, p, f.size(), size, &mut |h| f.push(h))?;
                f.root()
            }
        };
        if root != s.root {
            return Ok((
                attested_to,
                Some(bad(
                    name,
                    p,
                    attested_to,
                    format!(
                        "Merkle root of records [0, {size}) signed at checkpoints@{} (a record in [{attested_to}, {size}) was changed)",
                        s.at
                    ),
                    B64.encode(s.root),
                    B64.encode(root),
                )),
            ));
        }
        attested_to = size;
    }
    if attested_to < end {
        return Ok((
            attested_to,
            Some(bad(
                name,
                p,
                attested_to,
                format!("records [{attested_to}, {end}) under a signed checkpoint"),
                "a checkpoint signed by the ledger's key",
                "none (the operator runs `agentledger checkpoint`; `serve` signs within its interval)",
            )),
        ));
    }
    Ok((attested_to, None))
}
