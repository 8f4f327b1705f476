//! The Kafka backend: rdkafka over the bundled librdkafka.
//!
//! Topics are `<prefix>ledger` (N partitions), `<prefix>registry` (1),
//! `<prefix>published` (N), `<prefix>checkpoints` (1) and `<prefix>blobs`
//! (N, compacted: the content instances share, `crate::content_share`) and
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

use super::kafka_config::{base_config, log_to_tracing, ms, KafkaConfig};
pub use super::kafka_security::{KafkaSecurity, Password, SaslLogin, SaslMechanism};
use super::{Log, LogError, LogRecord};
use crate::model::Topic;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::metadata::Metadata;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex, RwLock};
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

// ---------------------------------------------------------------------------
// librdkafka context: logs through tracing, routes delivery reports.

/// One record of an `append` call, handed to librdkafka and back.
struct InFlight {
    batch: Arc<Batch>,
    index: usize,
}

/// What the broker said of one record: where it landed, or why not.
type Delivery = Result<(u32, u64), DeliveryFailure>;

#[derive(Debug, Clone, thiserror::Error)]
enum DeliveryFailure {
    #[error("the broker acknowledged the record without an offset (partition {partition}, offset {offset})")]
    NoOffset { partition: i32, offset: i64 },
    #[error(transparent)]
    Kafka(#[from] KafkaError),
}

/// The delivery reports of one `append` call.
struct Batch {
    state: Mutex<BatchState>,
    done: Condvar,
}

struct BatchState {
    results: Vec<Option<Delivery>>,
    reported: usize,
}

impl Batch {
    fn new(n: usize) -> Self {
        Self {
            state: Mutex::new(BatchState {
                results: vec![None; n],
                reported: 0,
            }),
            done: Condvar::new(),
        }
    }

    fn report(&self, index: usize, result: Delivery) {
        // A poisoned lock only means an appender panicked; the report still
        // belongs in the state.
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let st = &mut *guard;
        if let Some(slot) = st.results.get_mut(index) {
            if slot.is_none() {
                st.reported += 1;
            }
            *slot = Some(result);
        }
        drop(guard);
        self.done.notify_all();
    }

    fn reported(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reported
    }

    fn results(&self) -> Vec<Option<Delivery>> {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .results
            .clone()
    }

    /// Wait until `expected` reports arrived or `deadline` passed.
    fn wait(&self, expected: usize, deadline: Instant) {
        wait_until(&self.state, &self.done, deadline, |st| {
            st.reported >= expected
        });
    }
}

struct Ctx;

impl ClientContext for Ctx {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_to_tracing(level, fac, message)
    }

    fn error(&self, error: KafkaError, reason: &str) {
        // Mostly transient (a broker went away, all brokers down); the calls
        // that are affected fail on their own with their own errors.
        tracing::warn!(target: "librdkafka", "{error}: {reason}");
    }
}

impl ConsumerContext for Ctx {}

impl ProducerContext for Ctx {
    type DeliveryOpaque = Box<InFlight>;

    fn delivery(&self, result: &DeliveryResult<'_>, pending: Box<InFlight>) {
        let outcome = match result {
            Ok(m) if m.partition() >= 0 && m.offset() >= 0 => {
                Ok((m.partition() as u32, m.offset() as u64))
            }
            Ok(m) => Err(DeliveryFailure::NoOffset {
                partition: m.partition(),
                offset: m.offset(),
            }),
            Err((e, _)) => Err(DeliveryFailure::Kafka(e.clone())),
        };
        pending.batch.report(pending.index, outcome);
    }
}

// ---------------------------------------------------------------------------

/// The producer and who serves its delivery reports: the thread waiting
/// for an append polls librdkafka itself, woken by librdkafka when a report
/// arrives, so an acknowledgement wakes it directly — a background polling
/// thread (rdkafka's `ThreadedProducer`) is one more thread to wake on every
/// append. One waiter polls at a time and hands the other batches' reports
/// over through their condition variables.
struct Appender {
    producer: BaseProducer<Ctx>,
    /// A handle on the producer's event queue, to learn when it holds
    /// something (librdkafka calls `queue_filled` then).
    queue: EventQueue,
    filled: Box<Filled>,
    polling: Mutex<()>,
}

/// librdkafka's queue handle; its functions may be called from any thread.
struct EventQueue(*mut rdkafka::bindings::rd_kafka_queue_t);
// SAFETY: librdkafka queue handles are thread-safe.
unsafe impl Send for EventQueue {}
unsafe impl Sync for EventQueue {}

/// Counts the times the event queue went from empty to filled.
#[derive(Default)]
struct Filled {
    times: Mutex<u64>,
    cond: Condvar,
}

impl Filled {
    fn times(&self) -> u64 {
        *self.times.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait until the queue filled again since it had filled `seen` times.
    fn wait_past(&self, seen: u64, deadline: Instant) {
        wait_until(&self.times, &self.cond, deadline, |times| *times != seen);
    }
}

/// Block on `cond` until `done` holds for the guarded state or `deadline`
/// passes. A poisoned lock only means another waiter panicked; the state
/// is still what the reports made it.
fn wait_until<T>(lock: &Mutex<T>, cond: &Condvar, deadline: Instant, done: impl Fn(&T) -> bool) {
    let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
    let left = deadline.saturating_duration_since(Instant::now());
    let waited = cond.wait_timeout_while(guard, left, |st| !done(st));
    drop(waited.unwrap_or_else(|p| p.into_inner()));
}

/// Called by librdkafka (on its own thread, holding the queue's lock) when
/// the producer's event queue goes from empty to filled.
unsafe extern "C" fn queue_filled(_rk: *mut rdkafka::bindings::rd_kafka_t, opaque: *mut c_void) {
    // SAFETY: `opaque` is the `Filled` the Appender registered, which
    // outlives the registration (see `Drop for Appender`).
    let filled = unsafe { &*(opaque as *const Filled) };
    *filled.times.lock().unwrap_or_else(|p| p.into_inner()) += 1;
    filled.cond.notify_all();
}

impl Appender {
    fn new(config: &KafkaConfig) -> Result<Self, KafkaError> {
        let producer: BaseProducer<Ctx> = producer_config(config).create_with_context(Ctx)?;
        let filled = Box::<Filled>::default();
        // SAFETY: the client pointer is valid while `producer` lives; the
        // queue handle is released in Drop, after the callback is removed.
        let queue = unsafe {
            let q = rdkafka::bindings::rd_kafka_queue_get_main(producer.client().native_ptr());
            rdkafka::bindings::rd_kafka_queue_cb_event_enable(
                q,
                Some(queue_filled),
                &*filled as *const Filled as *mut c_void,
            );
            EventQueue(q)
        };
        Ok(Self {
            producer,
            queue,
            filled,
            polling: Mutex::new(()),
        })
    }

    fn queued(&self) -> usize {
        // SAFETY: the handle is valid until Drop.
        unsafe { rdkafka::bindings::rd_kafka_queue_length(self.queue.0) }
    }

    /// Wait until `expected` reports of `batch` arrived or `deadline`
    /// passed; returns the reports so far.
    fn wait(&self, batch: &Batch, expected: usize, deadline: Instant) -> Vec<Option<Delivery>> {
        loop {
            let now = Instant::now();
            if batch.reported() >= expected || now >= deadline {
                return batch.results();
            }
            match self.polling.try_lock() {
                Ok(_serving) => {
                    let seen = self.filled.times();
                    // Serve what is queued (a zero-timeout poll serves one
                    // event; each may report several records), bounded in
                    // case the queue holds something a poll does not take.
                    for _ in 0..1024 {
                        if self.queued() == 0 {
                            break;
                        }
                        self.producer.poll(Duration::ZERO);
                    }
                    if batch.reported() < expected {
                        self.filled
                            .wait_past(seen, deadline.min(now + Duration::from_millis(100)));
                    }
                }
                // Another waiter serves the reports; take over if it is
                // gone before ours arrived.
                Err(_) => batch.wait(expected, deadline.min(now + Duration::from_millis(2))),
            }
        }
    }
}

impl Drop for Appender {
    fn drop(&mut self) {
        // SAFETY: unregister before `filled` is freed, then release the
        // handle; the producer itself is dropped after this.
        unsafe {
            rdkafka::bindings::rd_kafka_queue_cb_event_enable(
                self.queue.0,
                None,
                std::ptr::null_mut(),
            );
            rdkafka::bindings::rd_kafka_queue_destroy(self.queue.0);
        }
    }
}

/// Where the reading consumer stands: the next offset it will return for the
/// partition it is assigned to, so sequential reads need no re-assignment.
type SharedReader = Arc<Mutex<Reader>>;

struct Reader {
    consumer: BaseConsumer<Ctx>,
    position: Option<(String, i32, u64)>,
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

fn producer_config(config: &KafkaConfig) -> ClientConfig {
    let mut c = base_config(config);
    c.set("enable.idempotence", "true")
        .set("acks", "all")
        .set("partitioner", "murmur2_random")
        // An append waits for its acknowledgement, so batching by waiting
        // only adds latency; concurrent appends still share requests.
        .set("linger.ms", "0")
        .set("message.timeout.ms", ms(config.timeout).max(1).to_string())
        .set(
            "request.timeout.ms",
            ms(config.timeout).clamp(1, 30_000).to_string(),
        )
        .set(
            "message.max.bytes",
            (MAX_RECORD_BYTES + FRAMING_BYTES).to_string(),
        )
        // Request buffers are sized for a batch: keep batches small so a
        // 16 MiB record limit does not make every small append costly (a
        // larger record still goes out alone).
        .set("batch.size", "262144");
    c
}

fn new_reader(config: &KafkaConfig) -> Result<Reader, LogError> {
    let consumer: BaseConsumer<Ctx> = consumer_config(config)
        .create_with_context(Ctx)
        .map_err(|e| LogError::Config(format!("cannot create the Kafka consumer: {e}")))?;
    Ok(Reader {
        consumer,
        position: None,
    })
}

fn consumer_config(config: &KafkaConfig) -> ClientConfig {
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

/// Keeps the brokers' last complaint (a refused login, a failed TLS
/// handshake) for the error `connect` gives.
#[derive(Default)]
struct ProbeCtx {
    last: Mutex<Option<(Option<RDKafkaErrorCode>, String)>>,
    /// The first refusal (login, certificate) seen: kept, where later
    /// errors of the same failure ("all brokers down") would replace it.
    refused: Mutex<Option<String>>,
}

/// What librdkafka says when the brokers refuse the client itself, rather
/// than cannot be reached: reported at once instead of waiting out the
/// timeout. Its logs carry these even when no error event is delivered
/// (seen on a loaded machine).
fn is_refusal(message: &str) -> bool {
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
    fn refuse(&self, reason: &str) {
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
fn probe(
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

/// The producer every append goes through, and the way to replace it.
struct Producers {
    config: KafkaConfig,
    current: RwLock<Arc<Appender>>,
}

impl Producers {
    fn current(&self) -> Arc<Appender> {
        match self.current.read() {
            Ok(p) => p.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// After a failed append: an idempotent producer that hit a fatal error
    /// (e.g. an unrecoverable sequence gap) refuses everything after; start
    /// a fresh one so later appends can succeed.
    fn replace_if_fatal(&self, failed: &Arc<Appender>) {
        let Some((code, reason)) = failed.producer.client().fatal_error() else {
            return;
        };
        let mut slot = match self.current.write() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if !Arc::ptr_eq(&slot, failed) {
            return; // another appender replaced it already
        }
        tracing::error!(%code, %reason, "the Kafka producer hit a fatal error; starting a new one");
        match Appender::new(&self.config) {
            Ok(p) => *slot = Arc::new(p),
            Err(e) => tracing::error!("cannot create a new Kafka producer: {e}"),
        }
    }
}

/// An append whose records are with librdkafka, awaiting their delivery
/// reports.
struct KafkaAppending {
    producers: Arc<Producers>,
    name: String,
    producer: Arc<Appender>,
    batch: Arc<Batch>,
    records: usize,
    enqueued: usize,
    enqueue_error: Option<String>,
}

impl super::Appending for KafkaAppending {
    fn wait(self: Box<Self>) -> Result<Vec<(u32, u64)>, LogError> {
        // Every enqueued record gets a delivery report within
        // message.timeout.ms of its enqueueing, except that a record already
        // in flight is only failed when its request times out
        // (request.timeout.ms, at most the timeout too): so at worst twice
        // the timeout, plus a margin.
        let timeout = self.producers.config.timeout;
        let wait_deadline = Instant::now() + timeout * 2 + Duration::from_secs(5);
        let results = self
            .producer
            .wait(&self.batch, self.enqueued, wait_deadline);

        let mut out = Vec::with_capacity(self.records);
        let mut failed = 0usize;
        let mut first_error = self.enqueue_error;
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Some(Ok(pos)) => out.push(pos),
                Some(Err(e)) => {
                    failed += 1;
                    first_error.get_or_insert_with(|| format!("record {i}: {e}"));
                }
                None => {
                    failed += 1;
                    if i < self.enqueued {
                        first_error.get_or_insert_with(|| {
                            format!("record {i}: no delivery report within {}", human(timeout))
                        });
                    }
                }
            }
        }
        if failed == 0 && first_error.is_none() {
            return Ok(out);
        }
        self.producers.replace_if_fatal(&self.producer);
        tracing::warn!(
            topic = %self.name,
            failed,
            total = self.records,
            "append to Kafka not acknowledged"
        );
        Err(LogError::Unavailable(format!(
                "append to {} on Kafka at {}: {failed} of {} records not acknowledged (the call may be retried): {}",
                self.name,
                self.producers.config.brokers,
                self.records,
                first_error.unwrap_or_default()
            )))
    }
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

fn watermarks(
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

/// Create the missing topics, wait until every topic has leaders for all of
/// its partitions, and return the partition counts.
fn ensure_topics(
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

/// A consumer assigned to every partition of a topic from its end: a fetch
/// the broker holds until a record arrives wakes it, whichever partition
/// the record is in.
struct KafkaTailWatch {
    consumer: BaseConsumer<Ctx>,
}

impl super::TailWatch for KafkaTailWatch {
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

impl KafkaLog {
    /// [`Log::append_begin`], with each record's headers when given.
    fn append_begin_with(
        &self,
        topic: Topic,
        records: &[(Vec<u8>, Vec<u8>)],
        headers: Option<&[super::Headers]>,
    ) -> Result<Box<dyn super::Appending + Send>, LogError> {
        let header_size = |i: usize| {
            headers
                .and_then(|h| h.get(i))
                .map_or(0, |h| h.iter().map(|(k, v)| k.len() + v.len()).sum())
        };
        for (i, (k, p)) in records.iter().enumerate() {
            let size = k.len() + p.len() + header_size(i);
            if size > MAX_RECORD_BYTES {
                return Err(LogError::TooLarge {
                    size,
                    limit: MAX_RECORD_BYTES,
                });
            }
        }
        let name = self.topic_name(topic);
        let producer = self.producer();
        let batch = Arc::new(Batch::new(records.len()));
        let timeout = self.config.timeout;
        let enqueue_deadline = Instant::now() + timeout;
        let mut enqueued = 0usize;
        let mut enqueue_error: Option<String> = None;
        for (index, (key, payload)) in records.iter().enumerate() {
            let pending = Box::new(InFlight {
                batch: batch.clone(),
                index,
            });
            // The partition is chosen here, as the Java client's default
            // partitioner would, so that callers can know it in advance
            // (`partition_of`).
            let mut record = BaseRecord::with_opaque_to(name, pending)
                .partition(self.partition_of(topic, key) as i32)
                .key(key.as_slice());
            // On the compacted blobs and keys topics an empty payload is a
            // tombstone (a null value); a chunk, manifest or key never is.
            if !(matches!(topic, Topic::Blobs | Topic::Keys) && payload.is_empty()) {
                record = record.payload(payload.as_slice());
            }
            if let Some(h) = headers.and_then(|h| h.get(index)) {
                record = record.headers(h.iter().fold(OwnedHeaders::new(), |o, (k, v)| {
                    o.insert(Header {
                        key: k,
                        value: Some(v),
                    })
                }));
            }
            loop {
                match producer.producer.send(record) {
                    Ok(()) => {
                        enqueued += 1;
                        break;
                    }
                    Err((e, back))
                        if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull)
                            && Instant::now() < enqueue_deadline =>
                    {
                        // The local queue drains as the broker acknowledges.
                        record = back;
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    Err((e, _)) => {
                        enqueue_error = Some(format!("record {index} not enqueued: {e}"));
                        break;
                    }
                }
            }
            if enqueue_error.is_some() {
                break;
            }
        }
        Ok(Box::new(KafkaAppending {
            producers: self.producer.clone(),
            name: name.to_string(),
            producer,
            batch,
            records: records.len(),
            enqueued,
            enqueue_error,
        }))
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
        Ok(Box::new(super::kafka_group::KafkaMembership::join(
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
