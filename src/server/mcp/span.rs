//! The span of each MCP request to a run's endpoint: what the gate saw of
//! it, the span id drawn as it arrives (the records of a tool call name
//! it), and the span queued for the OTLP exporter once the answer is gone.

use super::Bound;
use axum::body::Body;
use axum::response::Response;
use std::sync::Arc;

/// What the gate saw of an MCP request, for its span.
pub(super) struct Seen {
    pub(super) request: crate::trace::mcp::McpRequest,
    /// The span's own id, drawn as the request arrives (the records of a
    /// tool call name it).
    id: opentelemetry::trace::SpanId,
    tool_error: Arc<std::sync::atomic::AtomicBool>,
}

impl Seen {
    pub(super) fn of(
        message: &serde_json::Value,
        parts: &axum::http::request::Parts,
        b: &Bound,
    ) -> Seen {
        let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
        let method = text(&message["method"]);
        let params = &message["params"];
        let header = parts
            .headers
            .get("mcp-protocol-version")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Seen {
            request: crate::trace::mcp::McpRequest {
                tool: (method.as_deref() == Some("tools/call"))
                    .then(|| text(&params["name"]))
                    .flatten(),
                method,
                request_id: message.get("id").map(|id| match id {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                }),
                protocol: header.or_else(|| text(&params["protocolVersion"])),
                session: b.binding.session.clone(),
                traceparent: text(&params["_meta"]["traceparent"]),
                run: b.binding.run.clone(),
                root: b.root.clone(),
                tool_error: false,
                status: 0,
                start: std::time::SystemTime::now(),
                end: std::time::SystemTime::now(),
            },
            id: {
                use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};
                RandomIdGenerator::default().new_span_id()
            },
            tool_error: b.tool_error.clone(),
        }
    }

    /// The request's span as a record names it.
    pub(super) fn span_ref(&self) -> crate::codec::SpanRef {
        crate::codec::SpanRef {
            trace_id: crate::trace::mcp::trace_of(&self.request).to_bytes(),
            span_id: self.id.to_bytes(),
        }
    }

    /// `answer`, whose body makes the request's span when it has been
    /// sent (or abandoned): the tool runs while the body streams, so only
    /// then is its outcome known.
    pub(super) fn span_when_answered(
        self,
        answer: Response,
        live: Arc<LiveSpans>,
        session: Option<String>,
        metrics: Arc<crate::server::metrics::Metrics>,
    ) -> Response {
        use futures_util::StreamExt as _;
        let (parts, body) = answer.into_parts();
        let done = Answering {
            seen: Some(self),
            live,
            session,
            status: parts.status.as_u16(),
            metrics,
        };
        let stream = body.into_data_stream().map(move |chunk| {
            // Held until the body is gone.
            let _ = &done;
            chunk
        });
        Response::from_parts(parts, Body::from_stream(stream))
    }
}

type LiveSpans = std::sync::Mutex<std::collections::VecDeque<opentelemetry_sdk::trace::SpanData>>;

/// A request answered: its span is queued for the exporter once the
/// answer's body is gone (the oldest dropped past the queue's bound, as
/// the exporter's own queue does).
struct Answering {
    seen: Option<Seen>,
    live: Arc<LiveSpans>,
    session: Option<String>,
    status: u16,
    metrics: Arc<crate::server::metrics::Metrics>,
}

impl Drop for Answering {
    fn drop(&mut self) {
        let Some(seen) = self.seen.take() else { return };
        let mut r = seen.request;
        r.end = std::time::SystemTime::now();
        r.status = self.status;
        r.session = r.session.take().or(self.session.take());
        r.tool_error = seen.tool_error.load(std::sync::atomic::Ordering::SeqCst);
        let span = crate::trace::mcp::server_span(&r, seen.id);
        if let Ok(mut q) = self.live.lock() {
            q.push_back(span);
            if q.len() > crate::server::otlp::QUEUE_SPANS {
                q.pop_front();
                self.metrics.otlp_dropped(1);
            }
        }
    }
}
