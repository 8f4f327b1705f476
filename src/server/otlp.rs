//! `serve --otlp-endpoint URL`: runs exported as OpenTelemetry spans while
//! they close. A thread of its own follows the ledger partitions from
//! where they ended when `serve` started; for every run closed by a record
//! this instance wrote (so that a fleet exports each run once), it asks
//! the ledger thread for the run's spans and sends them over OTLP/HTTP.
//! The spans the server makes of MCP requests go out the same way. A
//! collector that is down does not slow the ledger: spans wait in a
//! bounded queue and are retried; past the bound the oldest are dropped,
//! counted and said in the log.

use super::ledger::LedgerHandle;
use crate::engine::Engine;
use crate::model::LedgerEvent;
use crate::model::Topic;
use crate::trace::otlp::LiveExporter;
use opentelemetry_sdk::trace::SpanData;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Most spans kept for a collector that does not answer.
pub const QUEUE_SPANS: usize = 65_536;
/// Most spans in one export request.
const BATCH_SPANS: usize = 512;

/// Where the exporter stands in each ledger partition.
type Cursor = Vec<u64>;

/// The runs closed by `writer` (this instance) since `cursor`; moves it.
/// Read here, off the ledger thread: it only builds the spans.
fn closed_since(log: &dyn crate::log::Log, writer: &str, cursor: &mut Cursor) -> Vec<String> {
    let mut runs = Vec::new();
    for (p, next) in cursor.iter_mut().enumerate() {
        let Ok(end) = log.end_offset(Topic::Ledger, p as u32) else {
            continue;
        };
        while *next < end {
            let Ok(batch) = log.read(Topic::Ledger, p as u32, *next, 512) else {
                break;
            };
            let Some(last) = batch.last() else { break };
            *next = last.offset + 1;
            for r in &batch {
                let Ok(rec) = crate::codec::decode(&r.payload) else {
                    continue;
                };
                if let LedgerEvent::RunClosed(c) = &rec.event {
                    if rec.writer == writer {
                        runs.push(c.run.clone());
                    }
                }
            }
        }
    }
    runs
}

/// The spans of `runs` (on the ledger thread: they read the views, which
/// have folded every record this instance wrote before the job runs).
fn spans_of(engine: &Engine, runs: &[String]) -> Vec<SpanData> {
    let mut spans = Vec::new();
    for run in runs {
        match crate::queries::spans(engine, run, false) {
            Ok(s) => spans.extend(s),
            Err(e) => tracing::warn!(run, "no spans for a closed run: {e}"),
        }
    }
    spans
}

/// Follow the ledger and export until `stop` (then once more, so runs
/// closed just before are not left behind) or the ledger thread ends.
pub fn follow(
    handle: LedgerHandle,
    exporter: Arc<LiveExporter>,
    poll: Duration,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("agentledger-otlp".into())
        .spawn(move || {
            let log = handle.log.clone();
            let mut cursor: Cursor = (0..log.partitions(Topic::Ledger))
                .map(|p| log.end_offset(Topic::Ledger, p).unwrap_or(0))
                .collect();
            let Ok(writer) = futures_executor::block_on(handle.call(|e| e.writer().to_string()))
            else {
                return;
            };
            let mut queue: VecDeque<SpanData> = VecDeque::new();
            let mut failing = false;
            loop {
                let last = stop.load(Ordering::SeqCst) || handle.ended.load(Ordering::SeqCst);
                if let Some(live) = &handle.live_spans {
                    if let Ok(mut live) = live.lock() {
                        queue.extend(live.drain(..));
                    }
                }
                let mut c = cursor.clone();
                let runs = closed_since(log.as_ref(), &writer, &mut c);
                if runs.is_empty() {
                    cursor = c;
                } else if let Ok(spans) =
                    futures_executor::block_on(handle.call(move |e| spans_of(e, &runs)))
                {
                    cursor = c;
                    queue.extend(spans);
                }
                let over = queue.len().saturating_sub(QUEUE_SPANS);
                if over > 0 {
                    queue.drain(..over);
                    handle.metrics.otlp_dropped(over as u64);
                    tracing::warn!(
                        dropped = over,
                        "the OTLP queue is full: the oldest spans were dropped"
                    );
                }
                while !queue.is_empty() {
                    let n = queue.len().min(BATCH_SPANS);
                    let batch: Vec<SpanData> = queue.iter().take(n).cloned().collect();
                    match exporter.export(batch) {
                        Ok(()) => {
                            queue.drain(..n);
                            handle.metrics.otlp_exported(n as u64);
                            if failing {
                                tracing::info!(
                                    endpoint = exporter.endpoint(),
                                    "OTLP export works again"
                                );
                                failing = false;
                            }
                        }
                        Err(e) => {
                            handle.metrics.otlp_failed();
                            if !failing {
                                tracing::warn!("{e}; retrying");
                                failing = true;
                            }
                            break;
                        }
                    }
                }
                if last {
                    if !queue.is_empty() {
                        tracing::warn!(
                            spans = queue.len(),
                            "stopping with spans the collector did not take"
                        );
                    }
                    return;
                }
                std::thread::sleep(poll);
            }
        })
        .expect("spawn the OTLP exporter thread")
}
