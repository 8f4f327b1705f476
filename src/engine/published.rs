//! What a downstream consumer reads from the `published` topic (and from
//! `subscribe`, the SSE stream and a WebSocket subscription): each agent
//! event that was actually published, as a CloudEvents 1.0 event in
//! structured mode (`application/cloudevents+json`), so any CloudEvents SDK
//! reads it. `data` carries the event's artifact contract — refs, digests,
//! sizes, labels, never bytes. On Kafka the record also carries the Kafka
//! protocol binding's `ce_` headers (the same attributes, for routing
//! without parsing the value) and `content-type`; its key is the chain
//! root, the binding's `partitionkey`. `schemas/published_event.json`
//! describes it.

use crate::encode::path_segment;
use crate::model::{AgentEventOut, ArtifactRef};
use serde::{Deserialize, Serialize};

/// The `content-type` of a structured-mode event (CloudEvents JSON format).
pub const CONTENT_TYPE: &str = "application/cloudevents+json; charset=UTF-8";
/// What `data` is.
pub const DATA_CONTENT_TYPE: &str = "application/json";
/// The schema name `data` carries.
pub const DATA_SCHEMA: &str = "agentledger.published_event.v1";

/// One published agent event, a CloudEvents 1.0 event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloudEvent {
    pub specversion: String,
    /// The event id (a digest of run and event: unique per event, stable
    /// across redelivery — deduplicate by it).
    pub id: String,
    /// `agentledger/<ledger id>/<agent>`: who published it, in which ledger.
    pub source: String,
    /// The agent event's name (`code.ready`).
    #[serde(rename = "type")]
    pub kind: String,
    /// The run whose close published it.
    pub subject: String,
    /// When the dispatcher published it (RFC 3339, UTC, milliseconds).
    pub time: String,
    pub datacontenttype: String,
    /// Extension: the publishing run's hop in its chain.
    pub hop: u32,
    /// Extension: the chain's root run.
    pub root: String,
    /// Extension: the binding's partition key, the chain root (the Kafka
    /// record's key).
    pub partitionkey: String,
    /// Extension: the labels of the event's artifacts, sorted, joined by
    /// one space (CloudEvents attributes are scalars; a label never holds
    /// white space, so the list splits back unambiguously).
    pub labels: String,
    /// Extension: the publishing agent's version.
    pub agentversion: u32,
    pub data: PublishedData,
}

/// `data` of a published event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishedData {
    pub schema: String,
    pub event_id: String,
    pub event: String,
    pub context: String,
    pub source_run: String,
    pub agent: String,
    pub version: u32,
    pub root: String,
    pub hop: u32,
    pub time_ms: u64,
    pub artifacts: Vec<PublishedArtifact>,
}

/// An artifact an event exposes: what a listener may read, by reference.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishedArtifact {
    pub name: String,
    #[serde(rename = "ref")]
    pub content_ref: String,
    pub digest: String,
    pub size: u64,
    pub source_run: String,
    pub labels: Vec<String>,
}

impl From<&ArtifactRef> for PublishedArtifact {
    fn from(a: &ArtifactRef) -> Self {
        PublishedArtifact {
            name: a.name.clone(),
            content_ref: a.content_ref(),
            digest: a.digest(),
            size: a.size,
            source_run: a.source_run.clone(),
            labels: a.labels.clone(),
        }
    }
}

/// Who published what, as the dispatcher knows it.
pub struct Publisher<'a> {
    pub ledger: &'a str,
    pub run: &'a str,
    pub agent: &'a str,
    pub version: u32,
    pub root: &'a str,
    pub hop: u32,
}

impl CloudEvent {
    pub fn of(by: &Publisher, ev: &AgentEventOut, time_ms: u64) -> Self {
        let mut labels: Vec<&str> = ev
            .artifacts
            .iter()
            .flat_map(|a| a.labels.iter().map(String::as_str))
            .collect();
        labels.sort_unstable();
        labels.dedup();
        CloudEvent {
            specversion: "1.0".into(),
            id: ev.event_id.clone(),
            source: format!(
                "agentledger/{}/{}",
                path_segment(by.ledger),
                path_segment(by.agent)
            ),
            kind: ev.event.clone(),
            subject: by.run.to_string(),
            time: crate::model::time::rfc3339_ms(time_ms),
            datacontenttype: DATA_CONTENT_TYPE.into(),
            hop: by.hop,
            root: by.root.to_string(),
            partitionkey: by.root.to_string(),
            labels: labels.join(" "),
            agentversion: by.version,
            data: PublishedData {
                schema: DATA_SCHEMA.into(),
                event_id: ev.event_id.clone(),
                event: ev.event.clone(),
                context: ev.context.clone(),
                source_run: by.run.to_string(),
                agent: by.agent.to_string(),
                version: by.version,
                root: by.root.to_string(),
                hop: by.hop,
                time_ms,
                artifacts: ev.artifacts.iter().map(PublishedArtifact::from).collect(),
            },
        }
    }

    /// The Kafka record's headers: `content-type` for structured mode, and
    /// every attribute but `data` as a `ce_` header (UTF-8), as the
    /// CloudEvents Kafka protocol binding names them.
    pub fn kafka_headers(&self) -> Vec<(String, Vec<u8>)> {
        let mut h = vec![("content-type".to_string(), CONTENT_TYPE.as_bytes().to_vec())];
        let attrs: [(&str, String); 12] = [
            ("specversion", self.specversion.clone()),
            ("id", self.id.clone()),
            ("source", self.source.clone()),
            ("type", self.kind.clone()),
            ("subject", self.subject.clone()),
            ("time", self.time.clone()),
            ("datacontenttype", self.datacontenttype.clone()),
            ("hop", self.hop.to_string()),
            ("root", self.root.clone()),
            ("partitionkey", self.partitionkey.clone()),
            ("labels", self.labels.clone()),
            ("agentversion", self.agentversion.to_string()),
        ];
        h.extend(
            attrs
                .into_iter()
                .map(|(k, v)| (format!("ce_{k}"), v.into_bytes())),
        );
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> AgentEventOut {
        AgentEventOut {
            event_id: "ev-1".into(),
            event: "code.ready".into(),
            context: "change".into(),
            artifacts: vec![
                ArtifactRef {
                    name: "patch".into(),
                    sha256: [7; 32],
                    size: 12,
                    source_run: "r1".into(),
                    labels: vec!["untrusted".into(), "area:acme/platform".into()],
                },
                ArtifactRef {
                    name: "notes".into(),
                    sha256: [8; 32],
                    size: 3,
                    source_run: "r0".into(),
                    labels: vec!["area:acme/platform".into()],
                },
            ],
        }
    }

    fn publisher() -> Publisher<'static> {
        Publisher {
            ledger: "acme prod",
            run: "r1",
            agent: "developer",
            version: 2,
            root: "r0",
            hop: 1,
        }
    }

    #[test]
    fn attributes_and_data_say_what_was_published() {
        let e = CloudEvent::of(&publisher(), &event(), 1_700_000_000_123);
        assert_eq!(e.specversion, "1.0");
        assert_eq!(e.id, "ev-1");
        assert_eq!(e.source, "agentledger/acme%20prod/developer");
        assert_eq!(e.kind, "code.ready");
        assert_eq!(e.subject, "r1");
        assert_eq!(e.time, "2023-11-14T22:13:20.123Z");
        assert_eq!(e.labels, "area:acme/platform untrusted");
        assert_eq!(e.partitionkey, "r0");
        assert_eq!(
            e.data.artifacts[0].digest,
            format!("sha256:{}", "07".repeat(32))
        );
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["type"], "code.ready");
        assert_eq!(
            v["data"]["artifacts"][0]["ref"],
            format!("cas://sha256/{}", "07".repeat(32))
        );
        let back: CloudEvent = serde_json::from_value(v).unwrap();
        assert_eq!(back, e);
    }

    #[test]
    fn kafka_headers_repeat_every_attribute_but_data() {
        let e = CloudEvent::of(&publisher(), &event(), 0);
        let h = e.kafka_headers();
        let get = |k: &str| {
            h.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| String::from_utf8(v.clone()).unwrap())
        };
        assert_eq!(get("content-type").unwrap(), CONTENT_TYPE);
        assert_eq!(get("ce_id").unwrap(), "ev-1");
        assert_eq!(get("ce_type").unwrap(), "code.ready");
        assert_eq!(get("ce_hop").unwrap(), "1");
        assert_eq!(get("ce_specversion").unwrap(), "1.0");
        assert!(get("ce_data").is_none());
        assert_eq!(h.len(), 13);
    }
}
