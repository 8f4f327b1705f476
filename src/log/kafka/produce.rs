//! Writing to Kafka: the idempotent producer, its delivery reports served
//! by the thread waiting for an append (woken by librdkafka when one
//! arrives), a producer replaced after a fatal error, and the pipelined
//! appends the group commit uses.

use super::config::{base_config, log_to_tracing, ms, KafkaConfig};
use super::{human, KafkaLog, FRAMING_BYTES, MAX_RECORD_BYTES};
use crate::log::{Log, LogError};
use crate::model::Topic;
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use std::ffi::c_void;
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------
// librdkafka context: logs through tracing, routes delivery reports.

/// One record of an `append` call, handed to librdkafka and back.
pub(super) struct InFlight {
    pub(super) batch: Arc<Batch>,
    pub(super) index: usize,
}

/// What the broker said of one record: where it landed, or why not.
pub(super) type Delivery = Result<(u32, u64), DeliveryFailure>;

#[derive(Debug, Clone, thiserror::Error)]
pub(super) enum DeliveryFailure {
    #[error("the broker acknowledged the record without an offset (partition {partition}, offset {offset})")]
    NoOffset { partition: i32, offset: i64 },
    #[error(transparent)]
    Kafka(#[from] KafkaError),
}

/// The delivery reports of one `append` call.
pub(super) struct Batch {
    pub(super) state: Mutex<BatchState>,
    pub(super) done: Condvar,
}

pub(super) struct BatchState {
    pub(super) results: Vec<Option<Delivery>>,
    pub(super) reported: usize,
}

impl Batch {
    pub(super) fn new(n: usize) -> Self {
        Self {
            state: Mutex::new(BatchState {
                results: vec![None; n],
                reported: 0,
            }),
            done: Condvar::new(),
        }
    }

    pub(super) fn report(&self, index: usize, result: Delivery) {
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

    pub(super) fn reported(&self) -> usize {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .reported
    }

    pub(super) fn results(&self) -> Vec<Option<Delivery>> {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .results
            .clone()
    }

    /// Wait until `expected` reports arrived or `deadline` passed.
    pub(super) fn wait(&self, expected: usize, deadline: Instant) {
        wait_until(&self.state, &self.done, deadline, |st| {
            st.reported >= expected
        });
    }
}

pub(super) struct Ctx;

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
pub(super) struct Appender {
    pub(super) producer: BaseProducer<Ctx>,
    /// A handle on the producer's event queue, to learn when it holds
    /// something (librdkafka calls `queue_filled` then).
    pub(super) queue: EventQueue,
    pub(super) filled: Box<Filled>,
    pub(super) polling: Mutex<()>,
}

/// librdkafka's queue handle; its functions may be called from any thread.
pub(super) struct EventQueue(*mut rdkafka::bindings::rd_kafka_queue_t);
// SAFETY: librdkafka queue handles are thread-safe.
unsafe impl Send for EventQueue {}
unsafe impl Sync for EventQueue {}

/// Counts the times the event queue went from empty to filled.
#[derive(Default)]
pub(super) struct Filled {
    pub(super) times: Mutex<u64>,
    pub(super) cond: Condvar,
}

impl Filled {
    pub(super) fn times(&self) -> u64 {
        *self.times.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wait until the queue filled again since it had filled `seen` times.
    pub(super) fn wait_past(&self, seen: u64, deadline: Instant) {
        wait_until(&self.times, &self.cond, deadline, |times| *times != seen);
    }
}

/// Block on `cond` until `done` holds for the guarded state or `deadline`
/// passes. A poisoned lock only means another waiter panicked; the state
/// is still what the reports made it.
pub(super) fn wait_until<T>(
    lock: &Mutex<T>,
    cond: &Condvar,
    deadline: Instant,
    done: impl Fn(&T) -> bool,
) {
    let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
    let left = deadline.saturating_duration_since(Instant::now());
    let waited = cond.wait_timeout_while(guard, left, |st| !done(st));
    drop(waited.unwrap_or_else(|p| p.into_inner()));
}

/// Called by librdkafka (on its own thread, holding the queue's lock) when
/// the producer's event queue goes from empty to filled.
pub(super) unsafe extern "C" fn queue_filled(
    _rk: *mut rdkafka::bindings::rd_kafka_t,
    opaque: *mut c_void,
) {
    // SAFETY: `opaque` is the `Filled` the Appender registered, which
    // outlives the registration (see `Drop for Appender`).
    let filled = unsafe { &*(opaque as *const Filled) };
    *filled.times.lock().unwrap_or_else(|p| p.into_inner()) += 1;
    filled.cond.notify_all();
}

impl Appender {
    pub(super) fn new(config: &KafkaConfig) -> Result<Self, KafkaError> {
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

    pub(super) fn queued(&self) -> usize {
        // SAFETY: the handle is valid until Drop.
        unsafe { rdkafka::bindings::rd_kafka_queue_length(self.queue.0) }
    }

    /// Wait until `expected` reports of `batch` arrived or `deadline`
    /// passed; returns the reports so far.
    pub(super) fn wait(
        &self,
        batch: &Batch,
        expected: usize,
        deadline: Instant,
    ) -> Vec<Option<Delivery>> {
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

pub(super) fn producer_config(config: &KafkaConfig) -> ClientConfig {
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

/// The producer every append goes through, and the way to replace it.
pub(super) struct Producers {
    pub(super) config: KafkaConfig,
    pub(super) current: RwLock<Arc<Appender>>,
}

impl Producers {
    pub(super) fn current(&self) -> Arc<Appender> {
        match self.current.read() {
            Ok(p) => p.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// After a failed append: an idempotent producer that hit a fatal error
    /// (e.g. an unrecoverable sequence gap) refuses everything after; start
    /// a fresh one so later appends can succeed.
    pub(super) fn replace_if_fatal(&self, failed: &Arc<Appender>) {
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
pub(super) struct KafkaAppending {
    pub(super) producers: Arc<Producers>,
    pub(super) name: String,
    pub(super) producer: Arc<Appender>,
    pub(super) batch: Arc<Batch>,
    pub(super) records: usize,
    pub(super) enqueued: usize,
    pub(super) enqueue_error: Option<String>,
}

impl crate::log::Appending for KafkaAppending {
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
    /// [`Log::append_begin`], with each record's headers when given.
    pub(super) fn append_begin_with(
        &self,
        topic: Topic,
        records: &[(Vec<u8>, Vec<u8>)],
        headers: Option<&[crate::log::Headers]>,
    ) -> Result<Box<dyn crate::log::Appending + Send>, LogError> {
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
