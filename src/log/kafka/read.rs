//! Reading from Kafka: a consumer per partition kept assigned where its
//! last read ended, the watermark queries, and the tail watch that wakes a
//! follower when a partition grows.

use super::config::{base_config, KafkaConfig};
use super::human;
use super::produce::Ctx;
use crate::log::LogError;
use rdkafka::admin::AdminClient;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the reading consumer stands: the next offset it will return for the
/// partition it is assigned to, so sequential reads need no re-assignment.
pub(super) type SharedReader = Arc<Mutex<Reader>>;

pub(super) struct Reader {
    pub(super) consumer: BaseConsumer<Ctx>,
    pub(super) position: Option<(String, i32, u64)>,
}

pub(super) fn new_reader(config: &KafkaConfig) -> Result<Reader, LogError> {
    let consumer: BaseConsumer<Ctx> = consumer_config(config)
        .create_with_context(Ctx)
        .map_err(|e| LogError::Config(format!("cannot create the Kafka consumer: {e}")))?;
    Ok(Reader {
        consumer,
        position: None,
    })
}

pub(super) fn consumer_config(config: &KafkaConfig) -> ClientConfig {
    let mut c = base_config(config);
    // A group id is needed for a manual assignment; nothing is ever
    // committed to it (no subscription, no auto commit).
    c.set(
        "group.id",
        format!("{}agentledger-reader", config.topic_prefix),
    )
    .set("enable.auto.commit", "false")
    .set("enable.auto.offset.store", "false")
    .set("enable.partition.eof", "false")
    // Reading below the log start is an error, never a silent skip.
    .set("auto.offset.reset", "error")
    // The end of a read is the high watermark; no transactions are used.
    .set("isolation.level", "read_uncommitted")
    // A read of records just appended can wait out a fetch already held
    // at the broker: at 100 ms that was the p99 of a listener opening
    // after another writer's close (tools/bench-dispatch: 106 ms; 34 ms at
    // 25). Lower costs more idle fetches per reader.
    .set("fetch.wait.max.ms", "25")
    .set("queued.max.messages.kbytes", "32768");
    c
}

pub(super) fn watermarks(
    admin: &AdminClient<Ctx>,
    config: &KafkaConfig,
    name: &str,
    partition: u32,
    deadline: Instant,
) -> Result<(u64, u64), LogError> {
    let mut pause = Duration::from_millis(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match admin.inner().fetch_watermarks(
            name,
            partition as i32,
            left.max(Duration::from_millis(1)),
        ) {
            Ok((low, high)) => return Ok((low.max(0) as u64, high.max(0) as u64)),
            Err(e) => {
                if Instant::now() + pause >= deadline {
                    return Err(LogError::Unavailable(format!(
                        "cannot read the offsets of {name}/{partition} from Kafka at {} within {}: {e}",
                        config.brokers,
                        human(config.timeout)
                    )));
                }
                tracing::debug!(topic = %name, partition, "offset query failed, retrying: {e}");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(500));
            }
        }
    }
}

/// A consumer assigned to every partition of a topic from its end: a fetch
/// the broker holds until a record arrives wakes it, whichever partition
/// the record is in.
pub(super) struct KafkaTailWatch {
    pub(super) consumer: BaseConsumer<Ctx>,
}

impl crate::log::TailWatch for KafkaTailWatch {
    fn wait(&mut self, timeout: Duration) -> Result<bool, LogError> {
        let mut any = match self.consumer.poll(timeout) {
            None => return Ok(false),
            Some(Ok(_)) => true,
            Some(Err(e)) => {
                return Err(LogError::Config(format!("following the tail: {e}")));
            }
        };
        // Take what else is already here, so one wake covers a burst.
        for _ in 0..4096 {
            match self.consumer.poll(Duration::ZERO) {
                Some(Ok(_)) => any = true,
                _ => break,
            }
        }
        Ok(any)
    }
}
