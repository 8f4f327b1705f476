//! Setting up on Kafka: the first probe of the cluster (with the refusals
//! that name a wrong address, listener or credential), and the topics the
//! ledger needs created explicitly with their settings.

use super::config::{log_to_tracing, KafkaConfig};
use super::produce::Ctx;
use super::read::{consumer_config, watermarks};
use super::{human, FRAMING_BYTES, KAFKA_TOPICS, MAX_RECORD_BYTES};
use crate::log::LogError;
use crate::model::Topic;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::metadata::Metadata;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Keeps the brokers' last complaint (a refused login, a failed TLS
/// handshake) for the error `connect` gives.
#[derive(Default)]
pub(super) struct ProbeCtx {
    pub(super) last: Mutex<Option<(Option<RDKafkaErrorCode>, String)>>,
    /// The first refusal (login, certificate) seen: kept, where later
    /// errors of the same failure ("all brokers down") would replace it.
    pub(super) refused: Mutex<Option<String>>,
}

/// What librdkafka says when the brokers refuse the client itself, rather
/// than cannot be reached: reported at once instead of waiting out the
/// timeout. Its logs carry these even when no error event is delivered
/// (seen on a loaded machine).
pub(super) fn is_refusal(message: &str) -> bool {
    [
        "SSL handshake failed",
        "certificate verify failed",
        "SASL authentication error",
        "Authentication failed",
    ]
    .iter()
    .any(|m| message.contains(m))
}

impl ProbeCtx {
    pub(super) fn refuse(&self, reason: &str) {
        let mut r = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if r.is_none() {
            *r = Some(reason.to_owned());
        }
    }
}

impl ClientContext for ProbeCtx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        if is_refusal(message) {
            self.refuse(message);
        }
        log_to_tracing(level, fac, message)
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(target: "librdkafka", "{error}: {reason}");
        let code = error.rdkafka_error_code();
        if matches!(
            code,
            Some(RDKafkaErrorCode::Authentication | RDKafkaErrorCode::SSL)
        ) || is_refusal(reason)
        {
            self.refuse(reason);
        }
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some((code, reason.to_owned()));
    }
}

impl ConsumerContext for ProbeCtx {}

/// The cluster's metadata, asked for in short slices until `config.timeout`
/// so that a login or certificate the brokers refuse ends the wait at once,
/// with their reason (librdkafka itself would retry until the timeout).
pub(super) fn probe(
    config: &KafkaConfig,
    unreachable: impl Fn(String) -> LogError,
) -> Result<Metadata, LogError> {
    let probe: BaseConsumer<ProbeCtx> = consumer_config(config)
        .create_with_context(ProbeCtx::default())
        .map_err(|e| LogError::Config(format!("cannot create a Kafka client: {e}")))?;
    let deadline = Instant::now() + config.timeout;
    let mut problem = String::from("no answer");
    loop {
        // Serves the client's event queue: the brokers' complaints reach
        // the context through it.
        let _ = probe.poll(Duration::ZERO);
        let refused = probe
            .context()
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(reason) = refused {
            return Err(LogError::Config(format!(
                "Kafka at {} refused the connection over {}: {reason}",
                config.brokers,
                config.security.describe()
            )));
        }
        let last = probe
            .context()
            .last
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            if let Some((_, reason)) = last {
                problem = format!("{problem}; last broker error: {reason}");
            }
            return Err(unreachable(problem));
        }
        match probe.fetch_metadata(None, left.min(Duration::from_millis(250))) {
            Ok(md) if !md.brokers().is_empty() => return Ok(md),
            Ok(_) => problem = "the cluster lists no brokers".into(),
            Err(e) => problem = e.to_string(),
        }
    }
}

/// Create the missing topics, wait until every topic has leaders for all of
/// its partitions, and return the partition counts.
pub(super) fn ensure_topics(
    admin: &AdminClient<Ctx>,
    config: &KafkaConfig,
    names: &BTreeMap<Topic, String>,
    md: &Metadata,
) -> Result<BTreeMap<Topic, u32>, LogError> {
    let deadline = Instant::now() + config.timeout;
    let exists = |name: &str| {
        md.topics()
            .iter()
            .any(|t| t.name() == name && t.error().is_none() && !t.partitions().is_empty())
    };
    let max_message = (MAX_RECORD_BYTES + FRAMING_BYTES).to_string();
    let min_isr = config.min_insync_replicas.map(|m| m.to_string());
    let mut wanted: Vec<(Topic, &str, i32)> = Vec::new();
    for topic in KAFKA_TOPICS {
        let name = names[&topic].as_str();
        if !exists(name) {
            let count = match topic {
                Topic::Ledger | Topic::Published | Topic::Blobs => config.ledger_partitions,
                Topic::Registry | Topic::Checkpoints | Topic::Keys => 1,
            };
            wanted.push((topic, name, count.min(i32::MAX as u32) as i32));
        }
    }
    if !wanted.is_empty() {
        let new_topics: Vec<NewTopic<'_>> = wanted
            .iter()
            .map(|(topic, name, count)| {
                let mut nt = NewTopic::new(
                    name,
                    *count,
                    TopicReplication::Fixed(config.replication_factor as i32),
                )
                .set("max.message.bytes", &max_message);
                if *topic != Topic::Published {
                    nt = nt.set("retention.ms", "-1");
                }
                if matches!(topic, Topic::Blobs | Topic::Keys) {
                    // A blob's records are keyed by digest (and chunk), a
                    // task key by its tag: compaction keeps the latest of
                    // each and removes what a tombstone ended. Compaction
                    // never touches the active segment, so segments roll
                    // hourly: what was ended leaves the brokers within a
                    // few hours, not the default week.
                    nt = nt
                        .set("cleanup.policy", "compact")
                        .set("segment.ms", "3600000")
                        .set("delete.retention.ms", "3600000");
                }
                if let Some(m) = &min_isr {
                    nt = nt.set("min.insync.replicas", m);
                }
                nt
            })
            .collect();
        let opts = AdminOptions::new()
            .request_timeout(Some(config.timeout))
            .operation_timeout(Some(config.timeout));
        let results =
            futures_executor::block_on(admin.create_topics(&new_topics, &opts)).map_err(|e| {
                LogError::Unavailable(format!(
                    "cannot create topics on Kafka at {}: {e}",
                    config.brokers
                ))
            })?;
        for r in results {
            match r {
                Ok(name) => tracing::info!(topic = %name, "created Kafka topic"),
                // Another instance created it between our look and our create.
                Err((name, RDKafkaErrorCode::TopicAlreadyExists)) => {
                    tracing::debug!(topic = %name, "Kafka topic already exists")
                }
                Err((name, code)) => {
                    return Err(LogError::Unavailable(format!(
                        "cannot create topic {name} on Kafka at {} (replication factor {}, min.insync.replicas {}): {code}",
                        config.brokers,
                        config.replication_factor,
                        min_isr.as_deref().unwrap_or("broker default"),
                    )))
                }
            }
        }
    }
    // Topic creation is asynchronous on the broker side: wait until the
    // metadata shows every partition with a leader.
    let mut counts = BTreeMap::new();
    for topic in KAFKA_TOPICS {
        let name = names[&topic].as_str();
        let mut last_problem;
        loop {
            last_problem = match admin.inner().fetch_metadata(
                Some(name),
                deadline.saturating_duration_since(Instant::now()),
            ) {
                Ok(md) => match md.topics().iter().find(|t| t.name() == name) {
                    Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
                        if t.partitions().iter().all(|p| p.leader() >= 0) {
                            // The leaders answer offset queries only once
                            // they have taken the partition over.
                            for p in 0..t.partitions().len() as u32 {
                                watermarks(admin, config, name, p, deadline)?;
                            }
                            counts.insert(topic, t.partitions().len() as u32);
                            break;
                        }
                        "some partitions have no leader yet".to_string()
                    }
                    Some(t) => format!("topic error {:?}", t.error()),
                    None => "topic not in the metadata".to_string(),
                },
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                return Err(LogError::Unavailable(format!(
                    "topic {name} on Kafka at {} is not ready within {}: {last_problem}",
                    config.brokers,
                    human(config.timeout)
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    if counts.get(&Topic::Ledger) != Some(&config.ledger_partitions) {
        tracing::info!(
            topic = %names[&Topic::Ledger],
            existing = counts.get(&Topic::Ledger).copied().unwrap_or(0),
            configured = config.ledger_partitions,
            "the ledger topic exists with another partition count; using the existing one"
        );
    }
    Ok(counts)
}
