//! A run's trail (or its chain's) as stored: the steps the views point
//! to, their records read back from the log in offset order.

use crate::codec;
use crate::codes::{Code, Refusal};
use crate::error::{LedgerError, Result};
use crate::log::Log;
use crate::model::Topic;
use crate::views::{TrailStep, Views};

/// The steps of one run, or of its whole chain in log order, with their
/// records read back from the log.
pub fn collect_trail(
    views: &Views,
    log: &dyn Log,
    run: &str,
    whole_chain: bool,
) -> Result<Vec<(String, TrailStep)>> {
    let state = views
        .run(run)?
        .ok_or_else(|| Refusal::new(Code::UnknownRun, format!("no run {run:?} in the ledger")))?;
    let runs = match (&state.root, whole_chain) {
        (Some(root), true) => views
            .chain(root)?
            .map(|c| c.runs)
            .unwrap_or_else(|| vec![run.to_string()]),
        _ => vec![run.to_string()],
    };
    let mut wanted: Vec<(u32, u64, String, u32)> = Vec::new();
    for r in runs {
        for (step, ptr) in views.trail_pointers(&r)? {
            wanted.push((ptr.partition, ptr.offset, r.clone(), step));
        }
    }
    // Read in offset order and in ranges: on Kafka every jump to another
    // offset costs a fetch round trip, reading on does not.
    wanted.sort();
    let mut steps = Vec::with_capacity(wanted.len());
    let mut fetched: Vec<crate::log::LogRecord> = Vec::new();
    for (partition, offset, run, step) in wanted {
        let have = fetched
            .iter()
            .position(|r| r.partition == partition && r.offset == offset);
        let raw = match have {
            Some(i) => fetched.swap_remove(i),
            None => {
                fetched = log.read(Topic::Ledger, partition, offset, 256)?;
                fetched.retain(|r| r.offset >= offset);
                if fetched.first().map(|r| r.offset) != Some(offset) {
                    return Err(LedgerError::MissingRecord {
                        topic: Topic::Ledger,
                        partition,
                        offset,
                    });
                }
                fetched.remove(0)
            }
        };
        let mut rec = codec::decode(&raw.payload)?;
        // Sealed context records read in clear while their task's key is held.
        rec.event = crate::erasure::seal::open_event(views.keys(), rec.event);
        steps.push((
            run,
            TrailStep {
                step,
                partition,
                offset,
                time_ms: rec.time_ms,
                event_id: rec.event_id,
                writer: rec.writer,
                principal: rec.principal,
                span: rec.span,
                event: rec.event,
            },
        ));
    }
    // A chain lives in one partition, so its offsets order it.
    steps.sort_by_key(|(_, s)| (s.partition, s.offset));
    Ok(steps)
}
