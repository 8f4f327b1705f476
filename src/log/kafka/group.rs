//! Group membership on Kafka: the instances serving one ledger join one
//! consumer group subscribed to the `ledger` topic, and the group
//! coordinator's assignment says which partitions each dispatches.
//!
//! The group consumer never reads a record: its partitions are paused as
//! soon as they are assigned, since the projector reads the log itself and
//! keeps its offsets with the views. It exists for the protocol alone —
//! heartbeats, rebalances, and leaving the group when dropped, so that a
//! stopped instance's partitions move at once rather than after the
//! session timeout.
//!
//! Rebalances are incremental: only the partitions that must move are
//! revoked, a member keeps the others throughout (KIP-848's consumer
//! protocol by default, `cooperative-sticky` on the classic one). Either
//! way the coordinator hands a partition to its new owner only after the
//! old owner has let it go, and an instance serves the protocol — lets
//! go — only between dispatch sweeps, so two instances never dispatch one
//! partition at the same time while both are alive; should a stalled one
//! be taken out of the group mid-sweep, its late records are caught as a
//! `conflict` when it commits.

use super::config::{base_config, log_to_tracing, ms, GroupProtocol, KafkaConfig};
use super::members::Roster;
use crate::log::group::{Member, Membership};
use crate::log::LogError;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::TopicPartitionList;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the rebalance callbacks learned: the partitions assigned now.
type Owned = Arc<Mutex<BTreeSet<u32>>>;

struct GroupCtx {
    topic: String,
    owned: Owned,
}

impl ClientContext for GroupCtx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_to_tracing(level, fac, message)
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(target: "librdkafka", "group: {error}: {reason}");
    }
}

impl GroupCtx {
    fn partitions(&self, tpl: &TopicPartitionList) -> BTreeSet<u32> {
        tpl.elements_for_topic(&self.topic)
            .iter()
            .filter_map(|e| u32::try_from(e.partition()).ok())
            .collect()
    }
}

impl ConsumerContext for GroupCtx {
    fn pre_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        // Give up ownership before the partitions are gone, not after —
        // only of those revoked (all of them, on an eager protocol).
        if let Rebalance::Revoke(tpl) = rebalance {
            let revoked = self.partitions(tpl);
            let mut owned = self.owned.lock().unwrap_or_else(|e| e.into_inner());
            owned.retain(|p| !revoked.contains(p));
            tracing::info!(revoked = ?revoked, kept = ?*owned, "ledger partitions revoked");
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                // Paused at once: this consumer never reads a record.
                if let Err(e) = consumer.pause(tpl) {
                    tracing::warn!("cannot pause the group consumer's partitions: {e}");
                }
            }
            Rebalance::Error(e) => tracing::warn!("group rebalance failed: {e}"),
            Rebalance::Revoke(_) => {}
        }
        // What the client holds now, whatever the event carried: an
        // incremental assignment names only what it adds, an eager one
        // everything, and after an error only the client knows.
        let now = match consumer.assignment() {
            Ok(a) => self.partitions(&a),
            Err(e) => {
                tracing::warn!(
                    "cannot read the group assignment ({e}); owning none until the next"
                );
                BTreeSet::new()
            }
        };
        let mut owned = self.owned.lock().unwrap_or_else(|e| e.into_inner());
        if *owned != now {
            tracing::info!(partitions = ?now, "ledger partitions owned");
        }
        *owned = now;
    }
}

pub(super) struct KafkaMembership {
    consumer: BaseConsumer<GroupCtx>,
    owned: Owned,
    group: String,
    brokers: String,
    protocol: GroupProtocol,
    roster: Roster,
}

impl KafkaMembership {
    pub fn join(config: &KafkaConfig, ledger_topic: &str, group: &str) -> Result<Self, LogError> {
        if group.is_empty() {
            return Err(LogError::Config("the group name is empty".into()));
        }
        let group_id = format!("{}{group}", config.topic_prefix);
        let owned = Owned::default();
        let mut c = base_config(config);
        c.set("group.id", &group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "false");
        match config.group_protocol {
            // The broker's `group.consumer.session.timeout.ms` and
            // `group.consumer.heartbeat.interval.ms` rule; the client may
            // not set its own.
            GroupProtocol::Consumer => {
                c.set("group.protocol", "consumer");
            }
            GroupProtocol::Classic => {
                c.set("group.protocol", "classic")
                    .set("partition.assignment.strategy", "cooperative-sticky")
                    .set(
                        "session.timeout.ms",
                        ms(config.group_session_timeout).max(1).to_string(),
                    )
                    .set(
                        "heartbeat.interval.ms",
                        (ms(config.group_session_timeout) / 4).max(1).to_string(),
                    );
            }
        }
        let consumer: BaseConsumer<GroupCtx> = c
            .create_with_context(GroupCtx {
                topic: ledger_topic.to_string(),
                owned: owned.clone(),
            })
            .map_err(|e| LogError::Config(format!("cannot create the group consumer: {e}")))?;
        consumer.subscribe(&[ledger_topic]).map_err(|e| {
            LogError::Unavailable(format!(
                "cannot join group {group_id:?} on {}: {e}",
                config.brokers
            ))
        })?;
        Ok(Self {
            consumer,
            owned,
            group: group_id,
            brokers: config.brokers.clone(),
            protocol: config.group_protocol,
            roster: Roster::open(config)?,
        })
    }
}

impl Membership for KafkaMembership {
    fn owned(&mut self) -> Result<BTreeSet<u32>, LogError> {
        // Serves heartbeats' results and rebalance callbacks. Paused
        // partitions deliver nothing; anything else is an event to log.
        match self.consumer.poll(Duration::ZERO) {
            Some(Err(KafkaError::MessageConsumption(code))) if code == RDKafkaErrorCode::Fatal => {
                return Err(LogError::Unavailable(format!(
                    "group {:?} on {}: {code}",
                    self.group, self.brokers
                )));
            }
            Some(Err(e)) => tracing::debug!(group = %self.group, "group consumer: {e}"),
            Some(Ok(_)) | None => {}
        }
        Ok(self.owned.lock().unwrap_or_else(|e| e.into_inner()).clone())
    }

    fn announce(&mut self, me: &Member) -> Result<(), LogError> {
        self.roster.announce(me)
    }

    fn members(&mut self) -> Result<Vec<Member>, LogError> {
        self.roster.members()
    }

    fn shared(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!(
            "member of group {:?} on {} ({} protocol)",
            self.group, self.brokers, self.protocol
        )
    }
}
