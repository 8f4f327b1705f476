//! The Kafka backend: rdkafka over the bundled librdkafka.
//!
//! Topics are `<prefix>ledger` (N partitions), `<prefix>registry` (1),
//! `<prefix>published` (N), `<prefix>checkpoints` (1) and `<prefix>blobs`
//! (N, compacted: the content instances share, `crate::content::share`) and
//! `<prefix>keys` (1, compacted: task keys, wrapped, `crate::erasure::shared`).
//! `connect` creates the missing ones explicitly with the AdminClient
//! (infinite retention for everything but `published`, the configured
//! replication factor and `min.insync.replicas`) and reads the partition
//! counts of existing ones back from the metadata; it never relies on
//! broker-side auto-creation.
//!
//! Writes go through one idempotent producer (`enable.idempotence`,
//! `acks=all`); each record's partition is chosen as the Java client's
//! default partitioner does (murmur2 of the key), so a key always lands in
//! the same partition, also for Java clients, and the engine knows which
//! before the broker answers (`partition_of`). `append`
//! returns only when the broker has acknowledged every record of the call
//! (all in-sync replicas); a record that failed or timed out makes the whole
//! call an error — it is never dropped silently. Records of one call keep
//! their order per partition (the idempotent producer never reorders).
//!
//! Reads use one `BaseConsumer` with a manual assignment at the requested
//! offset (no subscription, no offset commits: the projector keeps its
//! offsets itself) and stop at the high watermark read when the call starts.
//! Sequential reads of one partition reuse the assignment and whatever it
//! has prefetched.
//!
//! Every network wait is bounded by [`KafkaConfig::timeout`]: connecting,
//! metadata, delivery (`message.timeout.ms`), fetching and offset queries.
//! `read`, `end_offset` and `connect` return within about the timeout;
//! `append` within about twice the timeout at worst (a record already in
//! flight is failed only when its request times out).
//!
//! librdkafka notes: offset queries (`ListOffsets`) on a partition that was
//! just created, or whose leader just moved, fail with
//! NOT_LEADER_FOR_PARTITION for a moment although the metadata already names
//! a leader (KRaft propagates leadership asynchronously), so they are retried
//! until the timeout. A manual `assign` needs a `group.id` (librdkafka has no
//! assignment without a consumer group); nothing is committed to it.

mod admin;
mod config;
mod group;
mod members;
mod produce;
mod read;
mod security;

use super::{Log, LogError, LogRecord};
use crate::model::Topic;
use admin::{ensure_topics, probe};
use config::base_config;
pub use config::{GroupProtocol, KafkaConfig};
use produce::{Appender, Ctx, Producers};
use rdkafka::admin::AdminClient;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use read::{consumer_config, new_reader, watermarks, KafkaTailWatch, Reader, SharedReader};
pub use security::{KafkaSecurity, Password, SaslLogin, SaslMechanism};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Largest record (key + payload) the Kafka log accepts: the same limit as
/// the embedded log, so both backends refuse the same records.
pub const MAX_RECORD_BYTES: usize = super::embedded::MAX_FRAME_BYTES;

/// The topics this backend keeps: the ledger's, and the shared content.
const KAFKA_TOPICS: [Topic; 6] = [
    Topic::Ledger,
    Topic::Registry,
    Topic::Published,
    Topic::Checkpoints,
    Topic::Blobs,
    Topic::Keys,
];

/// Room for record-batch framing above [`MAX_RECORD_BYTES`], used for the
/// topics' `max.message.bytes` and the producer's `message.max.bytes`.
const FRAMING_BYTES: usize = 1024 * 1024;

/// `5s`, `1500ms`: durations as a person writes them in an error message.
fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}

/// The `Log` on an Apache Kafka cluster.
pub struct KafkaLog {
    config: KafkaConfig,
    /// Topic names with the prefix, by topic.
    names: BTreeMap<Topic, String>,
    partitions: BTreeMap<Topic, u32>,
    /// Metadata and watermark queries (never blocked behind a read).
    admin: AdminClient<Ctx>,
    /// Replaced when librdkafka reports a fatal (idempotence) error.
    producer: Arc<Producers>,
    /// One consumer per partition read, each staying assigned where its
    /// last read ended: re-assigning one shared consumer on every switch of
    /// partition restarts its fetcher and costs a round of fetch waits.
    readers: Mutex<BTreeMap<(Topic, u32), SharedReader>>,
    /// A consumer kept for batched end-offset queries.
    offsets_reader: Mutex<Reader>,
}

impl KafkaLog {
    /// Connect to the cluster, create the missing topics and read the
    /// partition counts back. Fails within about `config.timeout` when no
    /// broker answers, naming the brokers.
    pub fn connect(config: &KafkaConfig) -> Result<KafkaLog, LogError> {
        if config.brokers.trim().is_empty() {
            return Err(LogError::Config(
                "no Kafka brokers given (bootstrap servers are empty)".into(),
            ));
        }
        crate::model::ids::check_topic_prefix(&config.topic_prefix)
            .map_err(|e| LogError::Config(e.to_string()))?;
        if config.replication_factor == 0 || config.ledger_partitions == 0 {
            return Err(LogError::Config(format!(
                "invalid Kafka layout: replication factor {} and ledger partitions {} must be at least 1",
                config.replication_factor, config.ledger_partitions
            )));
        }
        let t = config.timeout;
        let unreachable = |why: String| {
            LogError::Unavailable(format!(
                "cannot reach Kafka at {} within {}: {why}",
                config.brokers,
                human(t)
            ))
        };
        config.security.check()?;
        let md = probe(config, unreachable)?;
        let admin: AdminClient<Ctx> = base_config(config)
            .create_with_context(Ctx)
            .map_err(|e| unreachable(format!("cannot create a client: {e}")))?;
        tracing::info!(
            brokers = %config.brokers,
            security = %config.security.describe(),
            listed = md.brokers().len(),
            "connected to Kafka"
        );

        let names: BTreeMap<Topic, String> = KAFKA_TOPICS
            .iter()
            .map(|t| (*t, format!("{}{}", config.topic_prefix, t.name())))
            .collect();
        let partitions = ensure_topics(&admin, config, &names, &md)?;

        let producer = Appender::new(config)
            .map_err(|e| LogError::Config(format!("cannot create the Kafka producer: {e}")))?;
        // Fail at connect, not at the first read, if consumers cannot be made.
        new_reader(config)?;
        Ok(KafkaLog {
            config: config.clone(),
            names,
            partitions,
            admin,
            producer: Arc::new(Producers {
                config: config.clone(),
                current: RwLock::new(Arc::new(producer)),
            }),
            readers: Mutex::new(BTreeMap::new()),
            offsets_reader: Mutex::new(new_reader(config)?),
        })
    }

    /// The configuration this log was opened with.
    pub fn config(&self) -> &KafkaConfig {
        &self.config
    }

    /// The full (prefixed) topic name on the broker.
    pub fn topic_name(&self, topic: Topic) -> &str {
        self.names.get(&topic).map(String::as_str).unwrap_or("")
    }

    fn check_partition(&self, topic: Topic, partition: u32) -> Result<(), LogError> {
        if partition < self.partitions(topic) {
            Ok(())
        } else {
            Err(LogError::NoSuchPartition { topic, partition })
        }
    }

    fn producer(&self) -> Arc<Appender> {
        self.producer.current()
    }

    /// Low and high watermarks of a partition (the high one is the offset
    /// the next record gets). Retried until the timeout: a partition that
    /// was just created, or whose leader just moved, answers
    /// NOT_LEADER_FOR_PARTITION for a moment although the metadata already
    /// names a leader.
    fn watermarks(
        &self,
        topic: Topic,
        partition: u32,
        deadline: Instant,
    ) -> Result<(u64, u64), LogError> {
        watermarks(
            &self.admin,
            &self.config,
            self.topic_name(topic),
            partition,
            deadline,
        )
    }
}

impl Log for KafkaLog {
    fn partitions(&self, topic: Topic) -> u32 {
        self.partitions.get(&topic).copied().unwrap_or(0)
    }

    fn append(
        &self,
        topic: Topic,
        records: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<Vec<(u32, u64)>, LogError> {
        self.append_begin(topic, records)?.wait()
    }

    fn partition_of(&self, topic: Topic, key: &[u8]) -> u32 {
        // A blob's chunks (`<hex>/<i>`) go where its manifest (`<hex>`)
        // goes, so a reader finds them in one partition, in order.
        let key = match topic {
            Topic::Blobs => key.split(|b| *b == b'/').next().unwrap_or(key),
            _ => key,
        };
        super::murmur2::partition(key, self.partitions(topic))
    }

    fn append_with_headers(
        &self,
        topic: Topic,
        records: &[(Vec<u8>, Vec<u8>)],
        headers: &[super::Headers],
    ) -> Result<Vec<(u32, u64)>, LogError> {
        self.append_begin_with(topic, records, Some(headers))?
            .wait()
    }

    fn append_begin(
        &self,
        topic: Topic,
        records: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<Box<dyn super::Appending + Send>, LogError> {
        self.append_begin_with(topic, records, None)
    }

    fn append_begin_with_headers(
        &self,
        topic: Topic,
        records: &[(Vec<u8>, Vec<u8>)],
        headers: &[super::Headers],
    ) -> Result<Box<dyn super::Appending + Send>, LogError> {
        self.append_begin_with(topic, records, Some(headers))
    }

    fn pipelines_groups(&self) -> bool {
        // Idempotent producer: records of one partition land in the order
        // they were handed over, retries included.
        true
    }

    fn read(
        &self,
        topic: Topic,
        partition: u32,
        from: u64,
        max: usize,
    ) -> Result<Vec<LogRecord>, LogError> {
        self.check_partition(topic, partition)?;
        if max == 0 {
            return Ok(Vec::new());
        }
        // One deadline for the whole call: the offset query and the fetch.
        let timeout = self.config.timeout;
        let deadline = Instant::now() + timeout;
        let (low, high) = self.watermarks(topic, partition, deadline)?;
        if from >= high {
            return Ok(Vec::new());
        }
        let name = self.topic_name(topic);
        if from < low {
            return Err(LogError::Unavailable(format!(
                "{name}/{partition}: offset {from} is below the first offset kept ({low}); the records before it were removed by retention"
            )));
        }
        let end = high.min(from.saturating_add(max as u64));
        let p = partition as i32;

        let slot = {
            let mut readers = self.readers.lock().unwrap_or_else(|e| e.into_inner());
            match readers.get(&(topic, partition)) {
                Some(r) => r.clone(),
                None => {
                    let r = Arc::new(Mutex::new(new_reader(&self.config)?));
                    readers.insert((topic, partition), r.clone());
                    r
                }
            }
        };
        let mut reader = slot.lock().unwrap_or_else(|e| e.into_inner());
        let at = (name.to_string(), p, from);
        if reader.position.as_ref() != Some(&at) {
            reader.position = None;
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(name, p, Offset::Offset(from as i64))
                .and_then(|_| reader.consumer.assign(&tpl))
                .map_err(|e| {
                    LogError::Unavailable(format!(
                        "cannot assign {name}/{partition} at offset {from}: {e}"
                    ))
                })?;
        }

        let mut out: Vec<LogRecord> = Vec::with_capacity((end - from).min(10_000) as usize);
        let mut next = from;
        let mut overshoot = false;
        let mut failure: Option<String> = None;
        while next < end {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            let wait = (deadline - now).min(Duration::from_millis(100));
            match reader.consumer.poll(wait) {
                None => {}
                Some(Ok(m)) => {
                    if m.topic() != name || m.partition() != p || m.offset() < next as i64 {
                        continue; // left over from an earlier assignment
                    }
                    let off = m.offset() as u64;
                    if off >= end {
                        overshoot = true;
                        break;
                    }
                    out.push(LogRecord {
                        partition,
                        offset: off,
                        key: m.key().map(<[u8]>::to_vec).unwrap_or_default(),
                        payload: m.payload().map(<[u8]>::to_vec).unwrap_or_default(),
                    });
                    next = off + 1;
                }
                Some(Err(e)) => match e.rdkafka_error_code() {
                    Some(
                        RDKafkaErrorCode::OffsetOutOfRange
                        | RDKafkaErrorCode::UnknownTopicOrPartition
                        | RDKafkaErrorCode::UnknownTopic
                        | RDKafkaErrorCode::UnknownPartition
                        | RDKafkaErrorCode::TopicAuthorizationFailed
                        | RDKafkaErrorCode::Fatal,
                    ) => {
                        failure = Some(e.to_string());
                        break;
                    }
                    _ => tracing::debug!(topic = %name, partition, "transient consume error: {e}"),
                },
            }
        }
        reader.position = if failure.is_some() || overshoot {
            None
        } else if next >= high {
            // At the end: an assigned consumer would keep fetching every
            // record appended from now on (our own included) into its
            // queue, a second copy of the write traffic. Let it go; the
            // next read, usually much later, assigns again.
            if let Err(e) = reader.consumer.unassign() {
                tracing::debug!(topic = %name, partition, "unassign after reading to the end: {e}");
            }
            None
        } else {
            Some((name.to_string(), p, next))
        };
        drop(reader);
        if let Some(f) = failure {
            return Err(LogError::Unavailable(format!(
                "reading {name}/{partition} from offset {from} on Kafka at {}: {f}",
                self.config.brokers
            )));
        }
        if out.is_empty() {
            return Err(LogError::Unavailable(format!(
                "reading {name}/{partition} from offset {from} (end {high}) on Kafka at {}: no record within {}",
                self.config.brokers,
                human(timeout)
            )));
        }
        if next < end {
            tracing::warn!(
                topic = %name,
                partition,
                from,
                got = out.len(),
                wanted = end - from,
                "read from Kafka cut short by the timeout"
            );
        }
        Ok(out)
    }

    fn end_offset(&self, topic: Topic, partition: u32) -> Result<u64, LogError> {
        self.check_partition(topic, partition)?;
        Ok(self
            .watermarks(topic, partition, Instant::now() + self.config.timeout)?
            .1)
    }

    fn end_offsets(&self, topic: Topic) -> Result<Vec<u64>, LogError> {
        Ok(self.end_offsets_of(&[topic])?.pop().unwrap_or_default())
    }

    fn end_offsets_of(&self, topics: &[Topic]) -> Result<Vec<Vec<u64>>, LogError> {
        // One ListOffsets request ("latest" for every partition of every
        // topic) instead of a round trip per partition.
        let mut tpl = TopicPartitionList::new();
        for t in topics {
            for p in 0..self.partitions(*t) {
                tpl.add_partition_offset(self.topic_name(*t), p as i32, Offset::End)
                    .map_err(|e| LogError::Unavailable(format!("offset query: {e}")))?;
            }
        }
        let answered = {
            let reader = self
                .offsets_reader
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            reader.consumer.offsets_for_times(tpl, self.config.timeout)
        };
        let answered = match answered {
            Ok(list) => list,
            // Fall back to a query per partition (it retries until the timeout).
            Err(e) => {
                tracing::debug!("batched offset query failed ({e}); asking per partition");
                return topics
                    .iter()
                    .map(|t| {
                        (0..self.partitions(*t))
                            .map(|p| self.end_offset(*t, p))
                            .collect()
                    })
                    .collect();
            }
        };
        let mut out = Vec::with_capacity(topics.len());
        for t in topics {
            let name = self.topic_name(*t);
            let mut ends = Vec::with_capacity(self.partitions(*t) as usize);
            for p in 0..self.partitions(*t) {
                let end = match answered
                    .find_partition(name, p as i32)
                    .map(|e| (e.offset(), e.error()))
                {
                    Some((Offset::Offset(o), Ok(()))) if o >= 0 => o as u64,
                    // Anything unexpected: ask this partition on its own.
                    _ => self.end_offset(*t, p)?,
                };
                ends.push(end);
            }
            out.push(ends);
        }
        Ok(out)
    }

    fn wait_beyond(
        &self,
        topic: Topic,
        partition: u32,
        offset: u64,
        timeout: Duration,
    ) -> Result<u64, LogError> {
        self.check_partition(topic, partition)?;
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_millis(10);
        loop {
            // Each offset query may take until the wait's deadline, but gets
            // at least a moment even when the wait is (nearly) over.
            let query_deadline = deadline.max(Instant::now() + Duration::from_secs(1));
            let end = self.watermarks(topic, partition, query_deadline)?.1;
            let now = Instant::now();
            if end > offset || now >= deadline {
                return Ok(end);
            }
            std::thread::sleep(pause.min(deadline - now));
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    fn tail_watch(&self, topic: Topic) -> Result<Option<Box<dyn super::TailWatch>>, LogError> {
        let consumer: BaseConsumer<Ctx> = consumer_config(&self.config)
            // Only that something arrived matters: small fetches.
            .set("max.partition.fetch.bytes", "65536")
            .set("fetch.wait.max.ms", "500")
            .create_with_context(Ctx)
            .map_err(|e| LogError::Config(format!("cannot create the Kafka consumer: {e}")))?;
        let name = self.topic_name(topic);
        // The ends now, not `Offset::End`: that is resolved at the first
        // fetch, and what is appended before it would be missed.
        let ends = self.end_offsets(topic)?;
        let mut tpl = TopicPartitionList::new();
        for (p, end) in ends.iter().enumerate() {
            tpl.add_partition_offset(name, p as i32, Offset::Offset(*end as i64))
                .map_err(|e| LogError::Config(format!("cannot follow {name}/{p}: {e}")))?;
        }
        consumer
            .assign(&tpl)
            .map_err(|e| LogError::Config(format!("cannot follow {name}: {e}")))?;
        Ok(Some(Box::new(KafkaTailWatch { consumer })))
    }

    fn join(&self, group: &str) -> Result<Box<dyn super::group::Membership>, LogError> {
        Ok(Box::new(group::KafkaMembership::join(
            &self.config,
            self.topic_name(Topic::Ledger),
            group,
        )?))
    }

    fn describe(&self) -> String {
        format!(
            "Kafka at {} (topics {}ledger/registry/published/checkpoints/blobs/keys, {} ledger partitions, replication factor {})",
            self.config.brokers,
            self.config.topic_prefix,
            self.partitions(Topic::Ledger),
            self.config.replication_factor
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_a_person_wrote_them() {
        assert_eq!(human(Duration::from_secs(5)), "5s");
        assert_eq!(human(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn defaults() {
        let c = KafkaConfig::new("h:1");
        assert_eq!(c.brokers, "h:1");
        assert_eq!(c.ledger_partitions, 4);
        assert_eq!(c.replication_factor, 1);
        assert_eq!(c.min_insync_replicas, None);
        assert_eq!(c.timeout, Duration::from_secs(30));
    }
}
