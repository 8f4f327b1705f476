//! The roster of the instances serving one ledger on Kafka: each announces
//! itself (`Member`: id, URL, owned partitions, epoch, time) on the
//! compacted `members` topic, keyed by its id, and reads every other
//! one's announcements from it. A leaving instance writes a tombstone;
//! one that died leaves its last announcement, which its age gives away.

use super::config::{base_config, log_to_tracing, KafkaConfig};
use super::read::consumer_config;
use crate::log::group::Member;
use crate::log::LogError;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;

/// The topic's name after the prefix.
pub(super) const MEMBERS_TOPIC: &str = "members";

struct RosterCtx;

impl ClientContext for RosterCtx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_to_tracing(level, fac, message)
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(target: "librdkafka", "members: {error}: {reason}");
    }
}

impl ConsumerContext for RosterCtx {}

impl ProducerContext for RosterCtx {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            tracing::warn!("announcing this instance on the members topic: {e}");
        }
    }
}

pub(super) struct Roster {
    topic: String,
    producer: BaseProducer<RosterCtx>,
    reader: BaseConsumer<RosterCtx>,
    seen: BTreeMap<String, Member>,
    /// The id this instance announced, for its tombstone.
    me: Option<String>,
    timeout: Duration,
}

fn unavailable(what: &str, e: impl std::fmt::Display) -> LogError {
    LogError::Unavailable(format!("the members topic: {what}: {e}"))
}

impl Roster {
    /// Create the members topic if it is missing and start reading it
    /// from its beginning.
    pub(super) fn open(config: &KafkaConfig) -> Result<Self, LogError> {
        let topic = format!("{}{MEMBERS_TOPIC}", config.topic_prefix);
        let admin: AdminClient<RosterCtx> = base_config(config)
            .create_with_context(RosterCtx)
            .map_err(|e| unavailable("cannot create the admin client", e))?;
        let mut nt = NewTopic::new(
            &topic,
            1,
            TopicReplication::Fixed(config.replication_factor as i32),
        )
        // Only each instance's latest announcement matters.
        .set("cleanup.policy", "compact")
        .set("segment.ms", "3600000")
        .set("delete.retention.ms", "3600000");
        let min_isr = config.min_insync_replicas.map(|m| m.to_string());
        if let Some(m) = &min_isr {
            nt = nt.set("min.insync.replicas", m);
        }
        let opts = AdminOptions::new()
            .request_timeout(Some(config.timeout))
            .operation_timeout(Some(config.timeout));
        let created = futures_executor::block_on(admin.create_topics(&[nt], &opts))
            .map_err(|e| unavailable(&format!("cannot create {topic}"), e))?;
        for r in created {
            match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((name, code)) => {
                    return Err(unavailable(&format!("cannot create {name}"), code))
                }
            }
        }
        let mut pc = base_config(config);
        pc.set("acks", "all").set("enable.idempotence", "true");
        let producer: BaseProducer<RosterCtx> = pc
            .create_with_context(RosterCtx)
            .map_err(|e| unavailable("cannot create its producer", e))?;
        let mut cc = consumer_config(config);
        cc.set("auto.offset.reset", "earliest");
        let reader: BaseConsumer<RosterCtx> = cc
            .create_with_context(RosterCtx)
            .map_err(|e| unavailable("cannot create its reader", e))?;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Beginning)
            .map_err(|e| unavailable("cannot assign it", e))?;
        reader
            .assign(&tpl)
            .map_err(|e| unavailable("cannot assign it", e))?;
        Ok(Self {
            topic,
            producer,
            reader,
            seen: BTreeMap::new(),
            me: None,
            timeout: config.timeout,
        })
    }

    /// Write this instance's announcement (sent in the background; a
    /// failure is logged, and the next announcement tries again).
    pub(super) fn announce(&mut self, me: &Member) -> Result<(), LogError> {
        let body = serde_json::to_vec(me).map_err(|e| unavailable("encoding", e))?;
        self.me = Some(me.id.clone());
        self.producer
            .send(BaseRecord::to(&self.topic).key(&me.id).payload(&body))
            .map_err(|(e, _)| unavailable("cannot announce this instance", e))?;
        self.producer.poll(Duration::ZERO);
        Ok(())
    }

    /// Every announcement read so far, after reading what is new.
    pub(super) fn members(&mut self) -> Result<Vec<Member>, LogError> {
        self.producer.poll(Duration::ZERO);
        while let Some(m) = self.reader.poll(Duration::ZERO) {
            let m = match m {
                Ok(m) => m,
                Err(e) => {
                    tracing::debug!("reading the members topic: {e}");
                    break;
                }
            };
            let Some(id) = m.key().map(|k| String::from_utf8_lossy(k).into_owned()) else {
                continue;
            };
            match m.payload() {
                None => {
                    self.seen.remove(&id);
                }
                Some(p) => match serde_json::from_slice::<Member>(p) {
                    Ok(member) if member.id == id => {
                        self.seen.insert(id, member);
                    }
                    _ => {
                        tracing::warn!(member = %id, "an announcement on the members topic that does not parse: skipped")
                    }
                },
            }
        }
        Ok(self.seen.values().cloned().collect())
    }
}

impl Drop for Roster {
    /// Leaving: a tombstone for this instance's announcements.
    fn drop(&mut self) {
        if let Some(id) = self.me.take() {
            let tombstone = BaseRecord::<String, [u8]>::to(&self.topic).key(&id);
            // Bounded: a stop must not wait on an unreachable cluster (the
            // announcement then ages into `stale`).
            if self.producer.send(tombstone).is_ok() {
                let _ = self
                    .producer
                    .flush(self.timeout.min(Duration::from_secs(1)));
            }
        }
    }
}
