//! One SERVER span per MCP request to a run's endpoint, as the
//! OpenTelemetry semantic conventions for MCP name and describe it:
//! `{mcp.method.name} {gen_ai.tool.name}` (`tools/call read_artifact`),
//! with the method, tool, JSON-RPC id, protocol version and session, and
//! `error.type` for a tool result that is an error. Its parent is the
//! caller's span when the request carries a W3C `traceparent` in
//! `params._meta`; otherwise it sits in the trace of the run's chain, as
//! the chain's own spans do. Built from what the transport saw; the span's
//! own id is given (the caller draws it at random).

use super::{context, scope, trace_id};
use opentelemetry::trace::{SpanId, SpanKind, Status, TraceId};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
use std::borrow::Cow;
use std::time::SystemTime;

/// What a transport saw of one MCP request.
#[derive(Debug, Clone)]
pub struct McpRequest {
    /// `tools/call`, `initialize`, … (`None` for a message that had none).
    pub method: Option<String>,
    /// The tool a `tools/call` named.
    pub tool: Option<String>,
    /// The JSON-RPC id, as JSON writes it.
    pub request_id: Option<String>,
    pub protocol: Option<String>,
    pub session: Option<String>,
    /// `params._meta.traceparent`, if the caller sent one.
    pub traceparent: Option<String>,
    pub run: String,
    /// The root of the run's chain (`None` for a run outside chains).
    pub root: Option<String>,
    /// The tool result was an error (a refusal).
    pub tool_error: bool,
    /// The HTTP status answered.
    pub status: u16,
    pub start: SystemTime,
    pub end: SystemTime,
}

/// A W3C `traceparent` (`00-<trace>-<span>-<flags>`): its trace and
/// parent span, or `None` when it is not one.
pub fn parse_traceparent(tp: &str) -> Option<(TraceId, SpanId)> {
    let mut parts = tp.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    if version != "00"
        || !hex(trace, 32)
        || !hex(span, 16)
        || !hex(flags, 2)
        || parts.next().is_some()
    {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    (trace != TraceId::INVALID && span != SpanId::INVALID).then_some((trace, span))
}

/// The trace request `r`'s span is in: its caller's, else its chain's.
pub fn trace_of(r: &McpRequest) -> TraceId {
    match r.traceparent.as_deref().and_then(parse_traceparent) {
        Some((trace, _)) => trace,
        None => trace_id(r.root.as_deref().unwrap_or(&r.run)),
    }
}

/// The span of request `r`, whose own id is `id`.
pub fn server_span(r: &McpRequest, id: SpanId) -> SpanData {
    let method = r.method.clone().unwrap_or_else(|| "unknown".into());
    let name = match &r.tool {
        Some(tool) => format!("{method} {tool}"),
        None => method.clone(),
    };
    let parent = r.traceparent.as_deref().and_then(parse_traceparent);
    let trace = trace_of(r);
    let mut attributes = vec![
        KeyValue::new("mcp.method.name", method.clone()),
        KeyValue::new("agentledger.run", r.run.clone()),
        KeyValue::new("http.response.status_code", i64::from(r.status)),
    ];
    let mut add = |k: &'static str, v: &Option<String>| {
        if let Some(v) = v {
            attributes.push(KeyValue::new(k, v.clone()));
        }
    };
    add("gen_ai.tool.name", &r.tool);
    add("jsonrpc.request.id", &r.request_id);
    add("mcp.protocol.version", &r.protocol);
    add("mcp.session.id", &r.session);
    if method == "tools/call" {
        attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
    }
    let error = if r.tool_error {
        Some("tool_error".to_string())
    } else if r.status >= 400 {
        Some(r.status.to_string())
    } else {
        None
    };
    let status = match &error {
        Some(e) => {
            attributes.push(KeyValue::new("error.type", e.clone()));
            Status::error(e.clone())
        }
        None => Status::Unset,
    };
    SpanData {
        span_context: context(trace, id),
        parent_span_id: parent.map_or(SpanId::INVALID, |(_, p)| p),
        parent_span_is_remote: parent.is_some(),
        span_kind: SpanKind::Server,
        name: Cow::Owned(name),
        start_time: r.start,
        end_time: r.end.max(r.start),
        attributes,
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status,
        instrumentation_scope: scope(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> McpRequest {
        let now = SystemTime::now();
        McpRequest {
            method: Some("tools/call".into()),
            tool: Some("read_artifact".into()),
            request_id: Some("7".into()),
            protocol: Some("2025-11-25".into()),
            session: Some("s1".into()),
            traceparent: None,
            run: "r1".into(),
            root: Some("r0".into()),
            tool_error: false,
            status: 200,
            start: now,
            end: now,
        }
    }

    #[test]
    fn a_traceparent_makes_the_callers_span_the_parent() {
        let mut r = request();
        r.traceparent = Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
        let s = server_span(&r, SpanId::from_bytes([1; 8]));
        assert_eq!(s.name, "tools/call read_artifact");
        assert_eq!(s.span_kind, SpanKind::Server);
        assert_eq!(
            s.span_context.trace_id(),
            TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap()
        );
        assert_eq!(
            s.parent_span_id,
            SpanId::from_hex("b7ad6b7169203331").unwrap()
        );
        assert!(s.parent_span_is_remote);
    }

    #[test]
    fn without_one_the_span_sits_in_its_chains_trace() {
        for bad in [
            None,
            Some("01-xyz"),
            Some("00-00000000000000000000000000000000-b7ad6b7169203331-01"),
        ] {
            let mut r = request();
            r.traceparent = bad.map(String::from);
            let s = server_span(&r, SpanId::from_bytes([1; 8]));
            assert_eq!(s.span_context.trace_id(), trace_id("r0"), "{bad:?}");
            assert_eq!(s.parent_span_id, SpanId::INVALID);
        }
    }

    #[test]
    fn a_tool_error_is_said() {
        let mut r = request();
        r.tool_error = true;
        let s = server_span(&r, SpanId::from_bytes([1; 8]));
        assert!(s
            .attributes
            .iter()
            .any(|kv| kv.key.as_str() == "error.type" && kv.value.as_str() == "tool_error"));
        assert!(matches!(s.status, Status::Error { .. }));
    }
}
