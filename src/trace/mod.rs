//! A chain as OpenTelemetry traces, following the GenAI semantic
//! conventions: one trace per chain (its id derived from the root), an
//! `invoke_agent` span per run (`gen_ai.agent.name`, `gen_ai.agent.id`,
//! `gen_ai.conversation.id` = the root, hop, status) whose parent is the
//! run that opened it, `execute_tool` spans for artifact and blob reads,
//! and span events for withheld events, refused listeners (scope barrier,
//! self-listen), forbidden requests and loop warnings.
//!
//! Spans are built here as the OpenTelemetry SDK's [`SpanData`], from a
//! run's state and trail alone, with ids derived from what they name — the
//! same run gives the same span whenever and wherever it is built, so a
//! span exported live as its run closes and the file written later agree,
//! and a child names its parent without reading it. [`otlp`] writes them
//! as OTLP/JSON (the `opentelemetry-proto` types) and exports them live
//! over OTLP/HTTP (`opentelemetry-otlp`).

pub mod mcp;
pub mod otlp;

use crate::context::ContextEvent;
use crate::model::{LedgerEvent, Run, RunStatus};
use crate::views::TrailStep;
use opentelemetry::trace::{
    Event, Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The instrumentation scope every span carries.
pub const SCOPE: &str = "agentledger";

/// One run as its spans need it: its state, its trail, and the loop
/// warnings its agent version was published with.
pub struct RunTrail<'a> {
    pub run: &'a Run,
    pub steps: &'a [TrailStep],
    pub loop_warnings: &'a [String],
}

fn digest(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    h.finalize().into()
}

/// The trace of the chain rooted at `root`.
pub fn trace_id(root: &str) -> TraceId {
    let d = digest(&[b"agentledger trace", root.as_bytes()]);
    TraceId::from_bytes(d[..16].try_into().expect("16 bytes"))
}

/// The `invoke_agent` span of a run.
pub fn run_span_id(run: &str) -> SpanId {
    let d = digest(&[b"agentledger run span", run.as_bytes()]);
    SpanId::from_bytes(d[..8].try_into().expect("8 bytes"))
}

fn step_span_id(run: &str, step: u32) -> SpanId {
    let d = digest(&[
        b"agentledger step span",
        run.as_bytes(),
        &step.to_be_bytes(),
    ]);
    SpanId::from_bytes(d[..8].try_into().expect("8 bytes"))
}

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn context(trace: TraceId, span: SpanId) -> SpanContext {
    SpanContext::new(
        trace,
        span,
        TraceFlags::SAMPLED,
        false,
        TraceState::default(),
    )
}

fn scope() -> InstrumentationScope {
    InstrumentationScope::builder(SCOPE)
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

/// Where a span sits: its trace, its id, its parent's id.
struct Place {
    trace: TraceId,
    id: SpanId,
    parent: SpanId,
}

fn span(
    Place { trace, id, parent }: Place,
    name: String,
    (start, end): (u64, u64),
    attributes: Vec<KeyValue>,
    events: Vec<Event>,
    status: Status,
) -> SpanData {
    SpanData {
        span_context: context(trace, id),
        parent_span_id: parent,
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: Cow::Owned(name),
        start_time: at(start),
        end_time: at(end.max(start)),
        attributes,
        dropped_attributes_count: 0,
        events: {
            let mut e = SpanEvents::default();
            e.events = events;
            e
        },
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope(),
    }
}

fn event(name: &'static str, ms: u64, attributes: Vec<KeyValue>) -> Event {
    Event::new(name, at(ms), attributes, 0)
}

fn tool(
    t: &RunTrail,
    trace: TraceId,
    s: &TrailStep,
    tool: &'static str,
    mut attributes: Vec<KeyValue>,
    status: Status,
) -> SpanData {
    let mut a = vec![
        KeyValue::new("gen_ai.operation.name", "execute_tool"),
        KeyValue::new("gen_ai.tool.name", tool),
        KeyValue::new("gen_ai.tool.call.id", s.event_id.clone()),
        KeyValue::new("gen_ai.agent.name", t.run.agent.clone()),
        KeyValue::new("agentledger.run", t.run.run.clone()),
        KeyValue::new("agentledger.step", i64::from(s.step)),
    ];
    a.append(&mut attributes);
    let mut d = span(
        Place {
            trace,
            id: step_span_id(&t.run.run, s.step),
            parent: run_span_id(&t.run.run),
        },
        format!("execute_tool {tool}"),
        (s.time_ms, s.time_ms),
        a,
        Vec::new(),
        status,
    );
    // The same call as its MCP request's live span saw it: linked, so a
    // backend shows both and counts the call once.
    if let Some(live) = &s.span {
        let to = SpanContext::new(
            TraceId::from_bytes(live.trace_id),
            SpanId::from_bytes(live.span_id),
            TraceFlags::SAMPLED,
            true,
            TraceState::default(),
        );
        d.links.links.push(Link::new(
            to,
            vec![KeyValue::new("agentledger.link", "mcp_request")],
            0,
        ));
    }
    d
}

/// A run's spans: its `invoke_agent` span, then one `execute_tool` span
/// per read. `root` is its chain's root (the run itself when it has none).
pub fn run_spans(t: &RunTrail) -> Vec<SpanData> {
    let run = t.run;
    let root = run.root.clone().unwrap_or_else(|| run.run.clone());
    let trace = trace_id(&root);
    let opened = t.steps.first().map_or(0, |s| s.time_ms);
    let mut ended = t.steps.last().map_or(opened, |s| s.time_ms);
    let mut events = Vec::new();
    let mut spans = Vec::new();
    for w in t.loop_warnings {
        events.push(event(
            "agentledger.loop_warning",
            opened,
            vec![KeyValue::new("agentledger.loop", w.clone())],
        ));
    }
    for s in t.steps {
        match &s.event {
            LedgerEvent::RunClosed(c) => {
                ended = s.time_ms;
                if let Some(w) = &c.withheld {
                    events.push(event(
                        "agentledger.events_withheld",
                        s.time_ms,
                        vec![
                            KeyValue::new("agentledger.reason", w.reason.code()),
                            KeyValue::new("agentledger.events", w.events.join(",")),
                        ],
                    ));
                }
            }
            LedgerEvent::ListenerRefused(f) => events.push(event(
                "agentledger.listener_refused",
                s.time_ms,
                vec![
                    KeyValue::new("agentledger.listener", f.agent.clone()),
                    KeyValue::new("agentledger.event", f.event.clone()),
                    KeyValue::new("agentledger.reason", f.reason.code()),
                ],
            )),
            LedgerEvent::Forbidden(f) => events.push(event(
                "agentledger.forbidden",
                s.time_ms,
                vec![
                    KeyValue::new("agentledger.op", f.op.clone()),
                    KeyValue::new("agentledger.message", f.message.clone()),
                ],
            )),
            LedgerEvent::ArtifactRead(r) => spans.push(tool(
                t,
                trace,
                s,
                "read_artifact",
                vec![
                    KeyValue::new("agentledger.artifact.name", r.artifact.name.clone()),
                    KeyValue::new("agentledger.artifact.digest", r.artifact.digest()),
                    KeyValue::new("agentledger.artifact.size", r.artifact.size as i64),
                    KeyValue::new(
                        "agentledger.artifact.source_run",
                        r.artifact.source_run.clone(),
                    ),
                ],
                Status::Ok,
            )),
            LedgerEvent::ReadRefused(r) => spans.push(tool(
                t,
                trace,
                s,
                "read_artifact",
                vec![
                    KeyValue::new("agentledger.artifact.name", r.requested.clone()),
                    KeyValue::new("error.type", r.code.clone()),
                ],
                Status::error(format!("{}: {}", r.code, r.message)),
            )),
            LedgerEvent::Context(c) => match &c.event {
                ContextEvent::BlobRead {
                    task,
                    reader,
                    uri,
                    digest,
                    ..
                } => spans.push(tool(
                    t,
                    trace,
                    s,
                    "get_blob",
                    vec![
                        KeyValue::new("agentledger.task", task.clone()),
                        KeyValue::new("agentledger.reader", reader.clone()),
                        KeyValue::new("agentledger.blob.uri", uri.clone()),
                        KeyValue::new("agentledger.blob.digest", digest.clone()),
                    ],
                    Status::Ok,
                )),
                ContextEvent::Refused {
                    task,
                    op,
                    code,
                    message,
                    ..
                } if op == "get_blob" => spans.push(tool(
                    t,
                    trace,
                    s,
                    "get_blob",
                    vec![
                        KeyValue::new("agentledger.task", task.clone()),
                        KeyValue::new("error.type", code.clone()),
                    ],
                    Status::error(format!("{code}: {message}")),
                )),
                _ => {}
            },
            // Sealed: what happened is in clear, what was read is not.
            LedgerEvent::SealedContext(c) if c.kind == "blob_read" => spans.push(tool(
                t,
                trace,
                s,
                "get_blob",
                vec![KeyValue::new("agentledger.task", c.task.clone())],
                Status::Ok,
            )),
            _ => {}
        }
    }
    let status = match run.status {
        None => Status::Unset,
        Some(RunStatus::Succeeded) => Status::Ok,
        Some(other) => Status::error(other.as_str()),
    };
    let mut attributes = vec![
        KeyValue::new("gen_ai.operation.name", "invoke_agent"),
        KeyValue::new("gen_ai.agent.name", run.agent.clone()),
        KeyValue::new("gen_ai.agent.id", format!("{}@v{}", run.agent, run.version)),
        KeyValue::new("gen_ai.conversation.id", root.clone()),
        KeyValue::new("agentledger.run", run.run.clone()),
        KeyValue::new("agentledger.agent.version", i64::from(run.version)),
        KeyValue::new(
            "agentledger.status",
            run.status.map_or("open", RunStatus::as_str),
        ),
        KeyValue::new("agentledger.scope", run.scope.clone()),
        KeyValue::new("agentledger.labels", run.labels.join(" ")),
    ];
    if let Some(h) = run.hop {
        attributes.push(KeyValue::new("agentledger.hop", i64::from(h)));
    }
    if let Some(tr) = &run.trigger {
        attributes.push(KeyValue::new("agentledger.trigger.event", tr.event.clone()));
    }
    let parent = match &run.trigger {
        Some(tr) => run_span_id(&tr.source_run),
        None => SpanId::INVALID,
    };
    let mut out = vec![span(
        Place {
            trace,
            id: run_span_id(&run.run),
            parent,
        },
        format!("invoke_agent {}", run.agent),
        (opened, ended),
        attributes,
        events,
        status,
    )];
    out.append(&mut spans);
    out
}

/// Every span of a chain, run by run in the order given.
pub fn chain_spans(runs: &[RunTrail]) -> Vec<SpanData> {
    runs.iter().flat_map(run_spans).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{ArtifactRead, ArtifactRef, RunClosed, Withheld, WithheldReason};
    use crate::picture::tests::eight_hops;

    fn step(step: u32, ms: u64, event: LedgerEvent) -> TrailStep {
        TrailStep {
            step,
            partition: 0,
            offset: u64::from(step),
            time_ms: ms,
            event_id: format!("e{step}"),
            writer: "w".into(),
            principal: "operator".into(),
            span: None,
            event,
        }
    }

    /// Run `run` reads r0's `patch`.
    fn read_patch(run: &str) -> LedgerEvent {
        LedgerEvent::ArtifactRead(ArtifactRead {
            run: run.into(),
            artifact: ArtifactRef {
                name: "patch".into(),
                sha256: [1; 32],
                size: 4,
                source_run: "r0".into(),
                labels: Vec::new(),
            },
            labels_after: Vec::new(),
        })
    }

    /// A read made through an MCP tool call names the call's live span; its
    /// `execute_tool` span links to it (and a read made otherwise has no link).
    #[test]
    fn a_read_links_to_the_live_span_of_its_tool_call() {
        let (runs, _) = eight_hops();
        let read = |n: u32| step(n, 5, read_patch(&runs[0].run));
        let live = crate::codec::SpanRef {
            trace_id: [7; 16],
            span_id: [9; 8],
        };
        let steps = vec![
            TrailStep {
                span: Some(live),
                ..read(1)
            },
            read(2),
        ];
        let spans = run_spans(&RunTrail {
            run: &runs[0],
            steps: &steps,
            loop_warnings: &[],
        });
        let reads: Vec<&SpanData> = spans
            .iter()
            .filter(|s| s.name == "execute_tool read_artifact")
            .collect();
        assert_eq!(reads.len(), 2);
        let link = &reads[0].links.links;
        assert_eq!(link.len(), 1);
        assert_eq!(
            link[0].span_context.trace_id(),
            TraceId::from_bytes([7; 16])
        );
        assert_eq!(link[0].span_context.span_id(), SpanId::from_bytes([9; 8]));
        assert!(link[0].span_context.is_remote());
        assert_eq!(
            reads[0].span_context.trace_id(),
            trace_id("r0"),
            "the read stays in its chain's trace"
        );
        assert!(reads[1].links.links.is_empty());
    }

    fn closed(run: &str, withheld: Option<Withheld>) -> LedgerEvent {
        LedgerEvent::RunClosed(RunClosed {
            run: run.into(),
            status: RunStatus::Succeeded,
            summary: String::new(),
            artifacts: Vec::new(),
            labels: Vec::new(),
            published: Vec::new(),
            withheld,
        })
    }

    #[test]
    fn a_chain_is_one_trace_of_runs_parented_by_who_opened_them() {
        let (runs, _) = eight_hops();
        let trails: Vec<Vec<TrailStep>> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let t = 1000 * i as u64;
                let w = r.withheld.clone();
                vec![
                    step(
                        0,
                        t,
                        LedgerEvent::Forbidden(crate::model::Forbidden {
                            run: r.run.clone(),
                            op: "x".into(),
                            message: "m".into(),
                        }),
                    ),
                    step(1, t + 5, read_patch(&r.run)),
                    step(2, t + 9, closed(&r.run, w)),
                ]
            })
            .collect();
        let warnings = vec!["developer → reviewer → developer".to_string()];
        let rt: Vec<RunTrail> = runs
            .iter()
            .zip(&trails)
            .map(|(r, s)| RunTrail {
                run: r,
                steps: s,
                loop_warnings: &warnings,
            })
            .collect();
        let spans = chain_spans(&rt);
        assert_eq!(spans.len(), 18, "a run span and a read span per run");
        let trace = trace_id("r0");
        assert!(spans.iter().all(|s| s.span_context.trace_id() == trace));
        let runs_spans: Vec<&SpanData> = spans
            .iter()
            .filter(|s| s.name.starts_with("invoke_agent"))
            .collect();
        assert_eq!(runs_spans.len(), 9);
        assert_eq!(runs_spans[0].parent_span_id, SpanId::INVALID);
        for (i, s) in runs_spans.iter().enumerate().skip(1) {
            assert_eq!(s.parent_span_id, run_span_id(&format!("r{}", i - 1)));
            assert_eq!(s.span_context.span_id(), run_span_id(&format!("r{i}")));
        }
        let last = runs_spans[8];
        assert_eq!(last.start_time, at(8000));
        assert_eq!(last.end_time, at(8009));
        let names: Vec<&str> = last.events.iter().map(|e| e.name.as_ref()).collect();
        assert_eq!(
            names,
            [
                "agentledger.loop_warning",
                "agentledger.forbidden",
                "agentledger.events_withheld"
            ]
        );
        assert!(last
            .attributes
            .contains(&KeyValue::new("gen_ai.conversation.id", "r0")));
        let read = spans
            .iter()
            .find(|s| s.name == "execute_tool read_artifact")
            .unwrap();
        assert_eq!(read.parent_span_id, run_span_id("r0"));
        assert_eq!(read.status, Status::Ok);
        // The same run gives the same spans, built again.
        assert_eq!(
            run_spans(&rt[3])[0].span_context,
            runs_spans[3].span_context
        );
        let _ = WithheldReason::ChainUnknown;
    }
}
