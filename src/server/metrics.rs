//! `GET /metrics` in the Prometheus text format: operations and refusals
//! by code, withheld events by reason, loop warnings, listeners opened,
//! operation latency; lags (projector, dispatcher) are read from the
//! engine when scraped.

use crate::engine::{DispatchAnswer, Engine};
use crate::model::Topic;
use crate::protocol::{Answer, Reply};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Duration;

type Labels = Vec<(&'static str, String)>;

/// The server's counters; cheap to update from any thread.
pub struct Metrics {
    registry: Registry,
    operations: Family<Labels, Counter>,
    refusals: Family<Labels, Counter>,
    withheld: Family<Labels, Counter>,
    loop_warnings: Counter,
    listeners_opened: Counter,
    listeners_refused: Family<Labels, Counter>,
    latency: Family<Labels, Histogram>,
    http: Family<Labels, Counter>,
    lag: Family<Labels, Gauge>,
    log_syncs: Counter,
    log_syncs_seen: std::sync::atomic::AtomicU64,
    otlp_spans: Family<Labels, Counter>,
    otlp_failures: Counter,
    rebuild: Family<Labels, Gauge>,
    unrecorded: Family<Labels, Counter>,
    forwarded: Counter,
    located: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("agentledger");
        let operations = Family::<Labels, Counter>::default();
        let refusals = Family::<Labels, Counter>::default();
        let withheld = Family::<Labels, Counter>::default();
        let loop_warnings = Counter::default();
        let listeners_opened = Counter::default();
        let listeners_refused = Family::<Labels, Counter>::default();
        // 50 µs to ~26 s.
        let latency = Family::<Labels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.000_05, 2.0, 20))
        });
        let http = Family::<Labels, Counter>::default();
        let lag = Family::<Labels, Gauge>::default();
        let log_syncs = Counter::default();
        let forwarded = Counter::default();
        registry.register(
            "forwarded_requests",
            "Requests (or an ndjson request's lines for one owner) forwarded to the instance that owns their chain's ledger partition, and questions to other instances where a run or task lives",
            forwarded.clone(),
        );
        let located = Counter::default();
        registry.register(
            "located",
            "Runs and tasks not held here (nor by the owner guessed) that another instance said where to find",
            located.clone(),
        );
        registry.register(
            "log_syncs",
            "Syncs to stable storage the log's appends cost (embedded log)",
            log_syncs.clone(),
        );
        registry.register(
            "operations",
            "Operations answered, by op and outcome (ok, refused, failed)",
            operations.clone(),
        );
        registry.register(
            "refusals",
            "Operations not carried out, by code",
            refusals.clone(),
        );
        registry.register(
            "withheld_events",
            "Declared events not published when their run closed, by reason",
            withheld.clone(),
        );
        registry.register(
            "loop_warnings",
            "Loops named when agent versions were published",
            loop_warnings.clone(),
        );
        registry.register(
            "listeners_opened",
            "Listener runs opened by dispatch",
            listeners_opened.clone(),
        );
        registry.register(
            "listeners_refused",
            "Listeners not opened, by reason",
            listeners_refused.clone(),
        );
        registry.register(
            "operation_duration_seconds",
            "Time to decide, append and answer an operation, by op",
            latency.clone(),
        );
        registry.register(
            "http_responses",
            "HTTP responses by route and status",
            http.clone(),
        );
        registry.register(
            "lag_records",
            "Records of the log not yet projected (kind=projector) or dispatched (kind=dispatch), by topic and partition",
            lag.clone(),
        );
        let otlp_spans = Family::<Labels, Counter>::default();
        registry.register(
            "otlp_spans",
            "Spans given to the OTLP collector (outcome=exported) or dropped from a full queue (outcome=dropped)",
            otlp_spans.clone(),
        );
        let otlp_failures = Counter::default();
        registry.register(
            "otlp_export_failures",
            "OTLP export requests the collector did not take (retried)",
            otlp_failures.clone(),
        );
        let rebuild = Family::<Labels, Gauge>::default();
        registry.register(
            "rebuild_records",
            "The rebuild of the views beside the live ones: records projected so far (kind=projected) of those in the log when it started (kind=total); kind=running is 1 while it runs",
            rebuild.clone(),
        );
        let unrecorded = Family::<Labels, Counter>::default();
        registry.register(
            "forbidden_unrecorded",
            "Refusals of principals that write nothing (auditor, consumer) not kept on a trail: at most one a minute each is, by principal",
            unrecorded.clone(),
        );
        Metrics {
            unrecorded,
            rebuild,
            otlp_spans,
            otlp_failures,
            registry,
            operations,
            refusals,
            withheld,
            loop_warnings,
            listeners_opened,
            listeners_refused,
            latency,
            http,
            lag,
            log_syncs,
            log_syncs_seen: Default::default(),
            forwarded,
            located,
        }
    }

    /// Count one run or task found at another instance.
    pub fn located(&self) {
        self.located.inc();
    }

    /// Count one request forwarded to another instance.
    pub fn forwarded(&self) {
        self.forwarded.inc();
    }

    /// Count one answered operation.
    pub fn answered(&self, op: Option<&str>, reply: &Reply, took: Duration) {
        // A line that never became an operation (not JSON, too long).
        let op = op.unwrap_or("unparsed").to_string();
        let outcome = match reply {
            Reply::Done(_) => "ok",
            Reply::Failed(f) if f.error.code.is_refusal() => "refused",
            Reply::Failed(_) => "failed",
        };
        self.operations
            .get_or_create(&vec![("op", op.clone()), ("outcome", outcome.into())])
            .inc();
        self.latency
            .get_or_create(&vec![("op", op)])
            .observe(took.as_secs_f64());
        match reply {
            Reply::Failed(f) => {
                self.refusals
                    .get_or_create(&vec![("code", f.error.code.as_str().into())])
                    .inc();
            }
            Reply::Done(d) => match &d.answer {
                Answer::CloseRun(c) => {
                    if let Some(w) = &c.withheld {
                        self.withheld
                            .get_or_create(&vec![("reason", w.reason.clone())])
                            .inc_by(w.events.len() as u64);
                    }
                }
                Answer::PublishAgent(p) => {
                    self.loop_warnings.inc_by(p.warnings.len() as u64);
                }
                Answer::Dispatch(d) => {
                    self.listeners_opened.inc_by(d.opened.len() as u64);
                    for r in &d.refused {
                        self.listeners_refused
                            .get_or_create(&vec![("reason", r.reason.clone())])
                            .inc();
                    }
                }
                _ => {}
            },
        }
    }

    /// Count what a dispatch opened and refused (by `serve` or by a
    /// `dispatch` operation).
    pub fn dispatched(&self, a: &DispatchAnswer) {
        self.listeners_opened.inc_by(a.opened.len() as u64);
        for r in &a.refused {
            self.listeners_refused
                .get_or_create(&vec![("reason", r.reason.code().into())])
                .inc();
        }
    }

    pub fn otlp_exported(&self, n: u64) {
        self.otlp_spans
            .get_or_create(&vec![("outcome", "exported".into())])
            .inc_by(n);
    }

    pub fn otlp_dropped(&self, n: u64) {
        self.otlp_spans
            .get_or_create(&vec![("outcome", "dropped".into())])
            .inc_by(n);
    }

    pub fn otlp_failed(&self) {
        self.otlp_failures.inc();
    }

    pub fn http(&self, route: &'static str, status: u16) {
        self.http
            .get_or_create(&vec![
                ("route", route.into()),
                ("status", status.to_string()),
            ])
            .inc();
    }

    /// Read the lags from the engine (on the ledger thread).
    pub fn observe_lags(&self, engine: &Engine) {
        let log = engine.log();
        let syncs = log.syncs();
        let seen = self
            .log_syncs_seen
            .swap(syncs, std::sync::atomic::Ordering::Relaxed);
        self.log_syncs.inc_by(syncs.saturating_sub(seen));
        for (principal, n) in engine.refusals_unrecorded() {
            let c = self
                .unrecorded
                .get_or_create(&vec![("principal", principal)]);
            c.inc_by(n.saturating_sub(c.get()));
        }
        if let Some(r) = engine.rebuild_status() {
            let running = r.state == crate::rebuild::beside::RebuildState::Running;
            for (kind, v) in [
                ("projected", r.projected as i64),
                ("total", r.total as i64),
                ("running", running as i64),
            ] {
                self.rebuild
                    .get_or_create(&vec![("kind", kind.into())])
                    .set(v);
            }
        }
        let views = engine.views();
        for topic in [Topic::Ledger, Topic::Registry] {
            for p in 0..log.partitions(topic) {
                let Ok(end) = log.end_offset(topic, p) else {
                    continue;
                };
                if let Ok(projected) = views.offset(topic, p) {
                    self.lag
                        .get_or_create(&vec![
                            ("kind", "projector".into()),
                            ("topic", topic.name().into()),
                            ("partition", p.to_string()),
                        ])
                        .set(end.saturating_sub(projected) as i64);
                }
                if topic == Topic::Ledger {
                    if let Ok(cursor) = views.dispatch_cursor(p) {
                        self.lag
                            .get_or_create(&vec![
                                ("kind", "dispatch".into()),
                                ("topic", topic.name().into()),
                                ("partition", p.to_string()),
                            ])
                            .set(end.saturating_sub(cursor) as i64);
                    }
                }
            }
        }
    }

    /// The text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = encode(&mut out, &self.registry);
        out
    }
}
