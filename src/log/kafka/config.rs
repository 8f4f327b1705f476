//! How the Kafka log reaches its cluster: the settings (`KafkaConfig`),
//! the client configuration every producer, reader and group member
//! starts from, and librdkafka's log lines routed through `tracing`.

use super::security::KafkaSecurity;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use std::time::Duration;

/// How to reach the cluster and how to lay out the topics.
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    /// Bootstrap servers, `host:port[,host:port…]`.
    pub brokers: String,
    /// Prefix of every topic name, e.g. `acme.` → `acme.ledger`.
    pub topic_prefix: String,
    /// Partitions of `ledger` and `published` when they are created.
    pub ledger_partitions: u32,
    /// Replication factor of the topics this log creates.
    pub replication_factor: u16,
    /// `min.insync.replicas` of the topics this log creates (broker default
    /// when `None`).
    pub min_insync_replicas: Option<u16>,
    /// Bound of every network wait: connect, metadata, delivery, fetch.
    pub timeout: Duration,
    /// The consumer group protocol the instances serving one ledger join
    /// with (see [`GroupProtocol`]).
    pub group_protocol: GroupProtocol,
    /// How long the group waits for a silent instance before handing its
    /// ledger partitions to the others (`session.timeout.ms`), on the
    /// classic protocol; on the consumer protocol the broker's
    /// `group.consumer.session.timeout.ms` rules.
    pub group_session_timeout: Duration,
    /// TLS and SASL towards the brokers.
    pub security: KafkaSecurity,
}

impl KafkaConfig {
    /// Defaults (4 ledger partitions, replication factor 1, 30 s timeout)
    /// for the given bootstrap servers.
    pub fn new(brokers: impl Into<String>) -> Self {
        Self {
            brokers: brokers.into(),
            ..Self::default()
        }
    }
}

impl Default for KafkaConfig {
    fn default() -> Self {
        Self {
            brokers: "127.0.0.1:9092".into(),
            topic_prefix: String::new(),
            ledger_partitions: 4,
            replication_factor: 1,
            min_insync_replicas: None,
            timeout: Duration::from_secs(30),
            group_protocol: GroupProtocol::Consumer,
            group_session_timeout: Duration::from_secs(10),
            security: KafkaSecurity::default(),
        }
    }
}

/// How the instances of one ledger form their group. Both rebalance
/// incrementally: a member keeps the partitions that do not move.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupProtocol {
    /// KIP-848's protocol (Kafka 4.0 and later): the broker assigns, and
    /// its `group.consumer.session.timeout.ms` (45 s by default) and
    /// `group.consumer.heartbeat.interval.ms` say how soon a silent
    /// instance's partitions move.
    #[default]
    Consumer,
    /// The classic protocol with the `cooperative-sticky` assignor (brokers
    /// before 4.0); the session timeout is the client's
    /// ([`KafkaConfig::group_session_timeout`]).
    Classic,
}

impl std::fmt::Display for GroupProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GroupProtocol::Consumer => "consumer",
            GroupProtocol::Classic => "classic",
        })
    }
}

impl std::str::FromStr for GroupProtocol {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "consumer" => Ok(GroupProtocol::Consumer),
            "classic" => Ok(GroupProtocol::Classic),
            _ => Err(format!(
                "unknown group protocol {s:?} (expected consumer or classic)"
            )),
        }
    }
}

/// A duration as librdkafka's millisecond settings take it.
pub(crate) fn ms(d: Duration) -> u64 {
    d.as_millis().min(i32::MAX as u128) as u64
}

pub(crate) fn base_config(config: &KafkaConfig) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &config.brokers)
        .set("client.id", "agentledger")
        // Never let a metadata request create a topic with broker defaults.
        .set("allow.auto.create.topics", "false")
        // A request queued for a dead leader just waits; only fresh metadata
        // points it at the new one. librdkafka refreshes every 5 minutes by
        // default — a 5-minute stall of every offset query after a broker
        // dies (measured). Producers notice sooner, consumers do not.
        .set("topic.metadata.refresh.interval.ms", "3000")
        .set(
            "socket.timeout.ms",
            ms(config.timeout).clamp(10, 300_000).to_string(),
        )
        .set_log_level(RDKafkaLogLevel::Info);
    config.security.apply(&mut c);
    c
}

/// librdkafka's log lines, at their level, through `tracing`.
pub(crate) fn log_to_tracing(level: RDKafkaLogLevel, fac: &str, message: &str) {
    {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => {
                tracing::error!(target: "librdkafka", facility = fac, "{message}")
            }
            RDKafkaLogLevel::Warning => {
                tracing::warn!(target: "librdkafka", facility = fac, "{message}")
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", facility = fac, "{message}")
            }
            RDKafkaLogLevel::Debug => {
                tracing::debug!(target: "librdkafka", facility = fac, "{message}")
            }
        }
    }
}
