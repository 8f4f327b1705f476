//! `verify --published`: the `published` topic held against the ledger.
//! Published events are derived data — the dispatcher writes them from the
//! runs' closing records — so no checkpoint covers them; what makes them
//! trustworthy is that every one is what the ledger's attested records
//! say was published. Each event must be one a run's close published (its
//! run, agent, version, chain, event, context and artifacts with their
//! labels, as the dispatcher builds it), and every event of a run whose
//! dispatch is recorded must be on the topic, dated no earlier than its
//! run's close. An event edited, made up, or taken away after its
//! dispatch is named. The ledger id in `source` is what the dispatcher
//! was configured with, recorded nowhere: it is not checked.

use super::findings::{mismatch, Mismatch};
use crate::codec;
use crate::engine::published::{CloudEvent, Publisher};
use crate::error::Result;
use crate::log::Log;
use crate::model::Topic;
use crate::model::{ids, LedgerEvent, Run};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;

/// What the check found: how many events it held against the ledger,
/// and the first mismatch of each kind it met, in topic order.
#[derive(Debug, Default)]
pub struct PublishedCheck {
    pub events: u64,
    pub mismatches: Vec<Mismatch>,
}

/// How far before its run's close (by the closing record's clock) an
/// event's time may lie: the dispatcher may run on another instance,
/// whose clock differs a little.
const CLOCK_SKEW_MS: u64 = 60_000;

/// Every run of the ledger as its records make it (which were
/// dispatched, too), and when each closed.
fn runs_of(log: &dyn Log) -> Result<(BTreeMap<String, Run>, BTreeMap<String, u64>)> {
    let mut runs: BTreeMap<String, Run> = BTreeMap::new();
    let mut closed: BTreeMap<String, u64> = BTreeMap::new();
    for p in 0..log.partitions(Topic::Ledger) {
        scan_all(log, Topic::Ledger, p, &mut |_, payload| {
            // Undecodable records are `verify`'s to name.
            let Ok(rec) = codec::decode(payload) else {
                return;
            };
            match &rec.event {
                LedgerEvent::RunOpened(e) => {
                    runs.insert(e.run.clone(), Run::opened(e, rec.step));
                }
                ev => {
                    if let Some(run) = ev.trail_run().and_then(|r| runs.get_mut(r)) {
                        run.evolve(rec.step, ev);
                        if matches!(ev, LedgerEvent::RunClosed(_)) {
                            closed.insert(run.run.clone(), rec.time_ms);
                        }
                    }
                }
            }
        })?;
    }
    Ok((runs, closed))
}

fn scan_all(log: &dyn Log, topic: Topic, p: u32, each: &mut dyn FnMut(u64, &[u8])) -> Result<()> {
    let mut at = 0;
    loop {
        let after = log.scan(topic, p, at, 4096, &mut |r| {
            each(r.offset, r.payload);
            ControlFlow::Continue(())
        })?;
        if after == at {
            return Ok(());
        }
        at = after;
    }
}

/// The event the dispatcher publishes for `ev` of `run`, at `time_ms`,
/// in the ledger `source` names.
fn expected(run: &Run, ev: &crate::model::AgentEventOut, time_ms: u64, ledger: &str) -> CloudEvent {
    let by = Publisher {
        ledger,
        run: &run.run,
        agent: &run.agent,
        version: run.version,
        root: ids::chain_key(run.root.as_deref(), &run.run),
        hop: run.hop.unwrap_or(0),
    };
    CloudEvent::of(&by, ev, time_ms)
}

/// The ledger id a `source` (`agentledger/<ledger>/<agent>`) names, as
/// written there.
fn ledger_of(source: &str) -> &str {
    source
        .strip_prefix("agentledger/")
        .and_then(|s| s.rsplit_once('/'))
        .map_or("", |(ledger, _)| ledger)
}

pub fn check_published(log: &dyn Log) -> Result<PublishedCheck> {
    let (runs, closed) = runs_of(log)?;
    let mut out = PublishedCheck::default();
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    let name = Topic::Published.name();
    for p in 0..log.partitions(Topic::Published) {
        scan_all(log, Topic::Published, p, &mut |o, payload| {
            out.events += 1;
            let mut fault = |what: String, expected: String, found: String| {
                out.mismatches
                    .push(mismatch(name, p, o, what, expected, found));
            };
            let e: CloudEvent = match serde_json::from_slice(payload) {
                Ok(e) => e,
                Err(err) => {
                    return fault(
                        "published event is not a CloudEvent of this ledger".into(),
                        "the dispatcher's CloudEvent JSON".into(),
                        err.to_string(),
                    )
                }
            };
            let Some(run) = runs.get(&e.subject) else {
                return fault(
                    format!(
                        "event {} names run {}, which the ledger does not have",
                        e.id, e.subject
                    ),
                    "a run of the ledger".into(),
                    "none".into(),
                );
            };
            let (events, _) = crate::rules::chain::dispatchable(run);
            let Some(ev) = events.iter().find(|ev| ev.event_id == e.id) else {
                return fault(
                    format!(
                        "event {} of run {} was not published by its close",
                        e.id, e.subject
                    ),
                    "an event the run's closing record publishes".into(),
                    format!("{} ({})", e.kind, e.id),
                );
            };
            seen.insert((e.subject.clone(), e.id.clone()));
            let close = closed.get(&e.subject).copied().unwrap_or(0);
            if e.data.time_ms.saturating_add(CLOCK_SKEW_MS) < close {
                return fault(
                    format!(
                        "event {} of run {} is dated before the run closed",
                        e.id, e.subject
                    ),
                    format!(
                        "a time at or after {} (the close)",
                        crate::model::time::rfc3339_ms(close)
                    ),
                    e.time.clone(),
                );
            }
            // The ledger's id is whatever the dispatcher was told; the
            // rest is the run's records, and the time the event says.
            let want = expected(run, ev, e.data.time_ms, ledger_of(&e.source));
            if want != e {
                let (w, f) = (
                    serde_json::to_value(&want).unwrap_or_default(),
                    serde_json::to_value(&e).unwrap_or_default(),
                );
                let field = first_difference(&w, &f);
                fault(
                    format!(
                        "event {} of run {}: {field} is not what the ledger published",
                        e.id, e.subject
                    ),
                    w.pointer(&field).map(|v| v.to_string()).unwrap_or_default(),
                    f.pointer(&field).map(|v| v.to_string()).unwrap_or_default(),
                );
            }
        })?;
    }
    // A run's events are on the topic before its dispatch is recorded.
    for run in runs.values().filter(|r| r.dispatched) {
        let (events, _) = crate::rules::chain::dispatchable(run);
        for ev in events {
            if !seen.contains(&(run.run.clone(), ev.event_id.clone())) {
                // Named where it belongs: its chain's partition, at the end.
                let key = ids::chain_key(run.root.as_deref(), &run.run);
                let p =
                    crate::log::partition_for_key(key.as_bytes(), log.partitions(Topic::Published));
                out.mismatches.push(mismatch(
                    name,
                    p,
                    log.end_offset(Topic::Published, p)?,
                    format!(
                        "event {} ({}) of run {}, dispatched, is not on the published topic",
                        ev.event_id, ev.event, run.run
                    ),
                    "the event, published before the run's dispatch",
                    "none",
                ));
            }
        }
    }
    Ok(out)
}

/// The JSON pointer of the first field where `a` and `b` differ.
fn first_difference(a: &serde_json::Value, b: &serde_json::Value) -> String {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (u, v) = (x.get(k), y.get(k));
                if u != v {
                    let inner = match (u, v) {
                        (Some(u), Some(v)) => first_difference(u, v),
                        _ => String::new(),
                    };
                    return format!("/{}{inner}", k.replace('~', "~0").replace('/', "~1"));
                }
            }
            String::new()
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .position(|(u, v)| u != v)
            .map(|i| format!("/{i}{}", first_difference(&x[i], &y[i])))
            .unwrap_or_default(),
        _ => String::new(),
    }
}
