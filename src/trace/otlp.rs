//! Spans out of the process: as an OTLP/JSON `ExportTraceServiceRequest`
//! (the `opentelemetry-proto` types and their serde mapping: hex ids,
//! nanosecond strings) for `trail --otlp FILE` and `/v1/runs/{run}/trace`,
//! and live over OTLP/HTTP to a collector with `opentelemetry-otlp`.

use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use opentelemetry_sdk::Resource;
use std::time::Duration;

/// Why spans could not be exported.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    #[error("OTLP endpoint {endpoint:?}: {why}")]
    Endpoint { endpoint: String, why: String },
    #[error("exporting {spans} spans to {endpoint}: {why}")]
    Export {
        endpoint: String,
        spans: usize,
        why: String,
    },
}

/// Who the spans come from: the service `agentledger`, naming the ledger.
pub fn resource(ledger: &str) -> Resource {
    Resource::builder_empty()
        .with_service_name("agentledger")
        .with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("agentledger.ledger", ledger.to_string()),
        ])
        .build()
}

/// The spans as one OTLP export request.
pub fn request(spans: Vec<SpanData>, ledger: &str) -> ExportTraceServiceRequest {
    let resource = ResourceAttributesWithSchema::from(&resource(ledger));
    let mut resource_spans = group_spans_by_resource_and_scope(spans, &resource);
    // The SDK keeps resource attributes in a hash map: sort them, so the
    // same chain gives the same bytes.
    for rs in &mut resource_spans {
        if let Some(r) = rs.resource.as_mut() {
            r.attributes.sort_by(|a, b| a.key.cmp(&b.key));
        }
    }
    ExportTraceServiceRequest { resource_spans }
}

/// The spans as OTLP/JSON, one line.
pub fn to_json(spans: Vec<SpanData>, ledger: &str) -> String {
    serde_json::to_string(&request(spans, ledger)).expect("OTLP requests serialise")
}

/// `URL` as the collector's traces endpoint: a base URL (as
/// `OTEL_EXPORTER_OTLP_ENDPOINT` takes it) gets `/v1/traces`.
pub fn traces_url(url: &str) -> String {
    let url = url.trim_end_matches('/');
    if url.ends_with("/v1/traces") {
        url.to_string()
    } else {
        format!("{url}/v1/traces")
    }
}

/// Spans exported live over OTLP/HTTP (protobuf). Blocking: call it from a
/// thread of its own, outside any async runtime.
pub struct LiveExporter {
    exporter: opentelemetry_otlp::SpanExporter,
    endpoint: String,
}

impl LiveExporter {
    pub fn new(url: &str, ledger: &str, timeout: Duration) -> Result<Self, OtlpError> {
        let endpoint = traces_url(url);
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(OtlpError::Endpoint {
                endpoint,
                why: "not an http:// or https:// URL".into(),
            });
        }
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(endpoint.clone())
            .with_timeout(timeout)
            .build()
            .map_err(|e| OtlpError::Endpoint {
                endpoint: endpoint.clone(),
                why: e.to_string(),
            })?;
        exporter.set_resource(&resource(ledger));
        Ok(LiveExporter { exporter, endpoint })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn export(&self, spans: Vec<SpanData>) -> Result<(), OtlpError> {
        let n = spans.len();
        futures_executor::block_on(self.exporter.export(spans)).map_err(|e| OtlpError::Export {
            endpoint: self.endpoint.clone(),
            spans: n,
            why: e.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_is_otlp_json() {
        let (runs, _) = crate::picture::tests::eight_hops();
        let trails: Vec<super::super::RunTrail> = runs
            .iter()
            .map(|r| super::super::RunTrail {
                run: r,
                steps: &[],
                loop_warnings: &[],
            })
            .collect();
        let json = to_json(super::super::chain_spans(&trails), "acme");
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        let rs = &v["resourceSpans"][0];
        let attrs = rs["resource"]["attributes"].as_array().unwrap();
        assert!(attrs
            .iter()
            .any(|a| a["key"] == "service.name" && a["value"]["stringValue"] == "agentledger"));
        let spans = rs["scopeSpans"][0]["spans"].as_array().unwrap();
        assert_eq!(spans.len(), 9);
        assert_eq!(rs["scopeSpans"][0]["scope"]["name"], "agentledger");
        let trace = spans[0]["traceId"].as_str().unwrap();
        assert_eq!(trace.len(), 32, "hex, as OTLP/JSON says");
        assert!(trace.chars().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(spans[1]["parentSpanId"], spans[0]["spanId"]);
        assert_eq!(spans[0]["name"], "invoke_agent dev");
    }

    #[test]
    fn endpoints() {
        assert_eq!(traces_url("http://h:4318"), "http://h:4318/v1/traces");
        assert_eq!(traces_url("http://h:4318/"), "http://h:4318/v1/traces");
        assert_eq!(traces_url("http://h/v1/traces"), "http://h/v1/traces");
        assert!(LiveExporter::new("ftp://x", "l", Duration::from_secs(1)).is_err());
    }
}
