//! The log: the only copy of the truth. One trait, with the embedded backend
//! always available; the same behaviour is expected of every backend.
//!
//! Guarantee of `append`: when it returns `Ok`, every record of the call is
//! durable (on the embedded log: written and fsynced; on Kafka: acknowledged
//! by all in-sync replicas) and will be returned by `read` at the offsets it
//! reports, in order.

pub mod embedded;
pub mod group;
pub mod kafka;
mod murmur2;
pub mod private_files;

use crate::model::Topic;
use std::ops::ControlFlow;
use std::time::Duration;

/// One record as stored in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub partition: u32,
    pub offset: u64,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
}

/// A record borrowed from the backend's read buffer (see [`Log::scan`]).
#[derive(Debug, Clone, Copy)]
pub struct RecordRef<'a> {
    pub offset: u64,
    pub key: &'a [u8],
    pub payload: &'a [u8],
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("corrupt log: {0}")]
    Corrupt(String),
    #[error("topic {topic} has no partition {partition}")]
    NoSuchPartition { topic: Topic, partition: u32 },
    #[error("record of {size} bytes exceeds the log's limit of {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    #[error("{0}")]
    Unavailable(String),
    #[error(
        "{0}: the log was opened read-only (by an auditor or status command); nothing is appended"
    )]
    ReadOnly(String),
    #[error("configuration: {0}")]
    Config(String),
    #[error("no ledger at {0}: nothing has been written there yet")]
    NoLedger(String),
}

impl LogError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        LogError::Io {
            context: context.into(),
            source,
        }
    }
}

/// The sync of a sealed commit group (see [`Log::seal_group`]).
pub trait GroupSync: Send {
    /// Make the group durable and visible. An error means none of the
    /// group may be taken as written.
    fn wait(self: Box<Self>) -> Result<(), LogError>;
}

/// A group that was durable when it was sealed.
struct Synced;

impl GroupSync for Synced {
    fn wait(self: Box<Self>) -> Result<(), LogError> {
        Ok(())
    }
}

/// A record's message headers: (name, value) pairs.
pub type Headers = Vec<(String, Vec<u8>)>;

/// A partitioned, append-only log with per-partition offsets.
pub trait Log: Send + Sync {
    /// Number of partitions of a topic.
    fn partitions(&self, topic: Topic) -> u32;

    /// Append records (key, payload) durably; returns (partition, offset) of each.
    /// Records with equal keys keep their order within one partition.
    fn append(
        &self,
        topic: Topic,
        records: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<Vec<(u32, u64)>, LogError>;

    /// [`Log::append`] with message headers, one list per record (the
    /// CloudEvents Kafka binding's `ce_` attributes on the `published`
    /// topic). Headers only ever repeat what the payload says: a backend
    /// without them (the embedded log) appends the records alone.
    fn append_with_headers(
        &self,
        topic: Topic,
        records: &[(Vec<u8>, Vec<u8>)],
        headers: &[Headers],
    ) -> Result<Vec<(u32, u64)>, LogError> {
        let _ = headers;
        self.append(topic, records)
    }

    /// Start a group of appends made durable together: until
    /// [`Log::end_group`], an append may return before its records are
    /// durable, and they are neither visible to readers nor to be taken as
    /// written. The engine decides a group's operations in order, each
    /// seeing the ones before it in its views, and answers them only after
    /// `end_group` (group commit: one sync for many operations). Backends
    /// that make every append durable on its own ignore groups.
    fn begin_group(&self) {}

    /// Make every append since [`Log::begin_group`] durable and visible. An
    /// error means none of the group may be taken as written.
    fn end_group(&self) -> Result<(), LogError> {
        Ok(())
    }

    /// Seal the group begun by [`Log::begin_group`]: its appends are
    /// handed to storage, and the returned sync makes them durable and
    /// visible, on whichever thread waits for it. The next group may begin
    /// and be decided before that wait returns (its appends are held back
    /// until it is sealed in turn), but must not be sealed before it: a
    /// sync must never make a later group's records durable ahead of the
    /// premises they have in other partitions. Backends without a sync of
    /// their own end the group here.
    fn seal_group(&self) -> Result<Box<dyn GroupSync>, LogError> {
        self.end_group()?;
        Ok(Box::new(Synced))
    }

    /// How many syncs to stable storage appends have cost so far (the
    /// embedded log's fdatasync calls; 0 where the backend does not count).
    fn syncs(&self) -> u64 {
        0
    }

    /// The partition `append` places a record with this key in.
    fn partition_of(&self, topic: Topic, key: &[u8]) -> u32 {
        partition_for_key(key, self.partitions(topic))
    }

    /// Hand records to the log and return before they are durable: the
    /// caller can do work that needs the records but not their offsets
    /// (on Kafka, while the broker acknowledges them), then
    /// [`Appending::wait`] answers exactly as `append` would have. Nothing
    /// may be taken as written before `wait` says so. The handle stands on
    /// its own (it may be kept while more appends begin, see
    /// [`Log::pipelines_groups`]). Backends that cannot split the two
    /// finish the append here.
    fn append_begin(
        &self,
        topic: Topic,
        records: &[(Vec<u8>, Vec<u8>)],
    ) -> Result<Box<dyn Appending + Send>, LogError> {
        Ok(Box::new(Appended(self.append(topic, records))))
    }

    /// [`Log::append_begin`] with message headers (see
    /// [`Log::append_with_headers`]).
    fn append_begin_with_headers(
        &self,
        topic: Topic,
        records: &[(Vec<u8>, Vec<u8>)],
        headers: &[Headers],
    ) -> Result<Box<dyn Appending + Send>, LogError> {
        Ok(Box::new(Appended(
            self.append_with_headers(topic, records, headers),
        )))
    }

    /// Whether a commit group gains from keeping many appends in flight:
    /// the backend places each record where [`Log::partition_of`] says,
    /// in the order `append_begin` was called per partition, so the engine
    /// can project them at the offsets it expects and check those when
    /// the acknowledgements arrive (Kafka: one round trip for a whole
    /// group instead of one per operation). Backends that make a group
    /// durable with one sync of their own (the embedded log) say no.
    fn pipelines_groups(&self) -> bool {
        false
    }

    /// Up to `max` records of one partition starting at `from`.
    fn read(
        &self,
        topic: Topic,
        partition: u32,
        from: u64,
        max: usize,
    ) -> Result<Vec<LogRecord>, LogError>;

    /// Visit up to `max` records of one partition starting at `from`,
    /// without handing over owned copies: for whole-log passes (verify)
    /// where a copy per record costs more than the work done on it. The
    /// visitor returns `Break` to stop early. Returns the offset after the
    /// last record visited (`from` when there was none).
    fn scan(
        &self,
        topic: Topic,
        partition: u32,
        from: u64,
        max: usize,
        visit: &mut dyn FnMut(RecordRef<'_>) -> ControlFlow<()>,
    ) -> Result<u64, LogError> {
        let mut next = from;
        for r in self.read(topic, partition, from, max)? {
            next = r.offset + 1;
            let flow = visit(RecordRef {
                offset: r.offset,
                key: &r.key,
                payload: &r.payload,
            });
            if flow.is_break() {
                break;
            }
        }
        Ok(next)
    }

    /// The offset the next record of this partition will get.
    fn end_offset(&self, topic: Topic, partition: u32) -> Result<u64, LogError>;

    /// The end offsets of every partition of a topic. Backends where each
    /// query is a round trip override it to ask for all at once.
    fn end_offsets(&self, topic: Topic) -> Result<Vec<u64>, LogError> {
        (0..self.partitions(topic))
            .map(|p| self.end_offset(topic, p))
            .collect()
    }

    /// The end offsets of several topics' partitions, in one go where the
    /// backend can (the projector asks before every operation).
    fn end_offsets_of(&self, topics: &[Topic]) -> Result<Vec<Vec<u64>>, LogError> {
        topics.iter().map(|t| self.end_offsets(*t)).collect()
    }

    /// Block until the partition's end passes `offset` or `timeout` runs out;
    /// returns the end offset. Used to follow the tail.
    fn wait_beyond(
        &self,
        topic: Topic,
        partition: u32,
        offset: u64,
        timeout: Duration,
    ) -> Result<u64, LogError>;

    /// A watch over every partition of `topic` from its end now, for a
    /// thread that must wake as soon as another writer appends (see
    /// [`TailWatch`]). `None` where no other process can write (the
    /// embedded log: its data dir is locked by its one writer).
    fn tail_watch(&self, topic: Topic) -> Result<Option<Box<dyn TailWatch>>, LogError> {
        let _ = topic;
        Ok(None)
    }

    /// A short description for status output.
    fn describe(&self) -> String;

    /// Damage a reader found at the end of the log and left in place (a
    /// read-only open never cuts a torn tail), one line each.
    fn torn_tails(&self) -> Vec<String> {
        Vec::new()
    }

    /// Join the instances that share this log's ledger partitions under
    /// `group`. A backend without groups owns everything.
    fn join(&self, group: &str) -> Result<Box<dyn group::Membership>, LogError> {
        let _ = group;
        Ok(Box::new(group::Alone {
            partitions: self.partitions(Topic::Ledger),
            me: None,
        }))
    }
}

/// Wakes whoever follows a topic when any of its partitions grows.
pub trait TailWatch: Send {
    /// Block until records arrive past what this watch has seen, in any
    /// partition, or `timeout` passes; says whether any arrived.
    fn wait(&mut self, timeout: Duration) -> Result<bool, LogError>;
}

/// An append begun with [`Log::append_begin`].
pub trait Appending {
    /// Block until the records are durable (or have failed); returns
    /// (partition, offset) of each, as `append` does.
    fn wait(self: Box<Self>) -> Result<Vec<(u32, u64)>, LogError>;
}

/// An append that was over before `append_begin` returned.
struct Appended(Result<Vec<(u32, u64)>, LogError>);

impl Appending for Appended {
    fn wait(self: Box<Self>) -> Result<Vec<(u32, u64)>, LogError> {
        self.0
    }
}

/// The partition a key goes to on backends that choose it themselves.
/// FNV-1a: stable across builds and platforms (std's hasher is not).
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in key {
        h ^= *b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    (h % partitions.max(1) as u64) as u32
}
