//! Syncing a sealed group's partitions: topic by topic in the order that
//! keeps premises durable first, and the partitions of one topic at once.
//! No record of a topic stands on another partition of the same topic,
//! and concurrent fdatasyncs share the filesystem's journal commits and
//! the device's flushes, where one after another each pays for its own
//! (a group on four ledger partitions paid four in a row). The helper
//! threads are kept for the log's life rather than spawned per group.

use super::partition::{Chunk, Partition};
use crate::log::{GroupSync, LogError};
use crate::model::Topic;
use std::fs::File;
use std::sync::{mpsc, Arc, Mutex};

/// One partition of a group to sync: where its records end, and the file
/// holding the last of them.
pub(super) struct Due {
    pub(super) topic: Topic,
    pub(super) part: Arc<Partition>,
    pub(super) end: u64,
    pub(super) file: Arc<File>,
}

impl Due {
    fn sync(&self) -> Result<(), LogError> {
        self.part.sync_through(self.end, &self.file)
    }
}

type Job = (Arc<Due>, mpsc::Sender<Result<(), LogError>>);

/// Threads that sync one partition each while the caller syncs another.
#[derive(Default)]
pub(super) struct Helpers {
    workers: Mutex<Vec<mpsc::Sender<Job>>>,
}

impl Helpers {
    /// Sync `due` together: the first here, the others on helpers.
    fn sync_together(&self, due: &[Arc<Due>]) -> Result<(), LogError> {
        let Some((first, others)) = due.split_first() else {
            return Ok(());
        };
        let (done_tx, done) = mpsc::channel();
        let mut sent = 0;
        if !others.is_empty() {
            let mut workers = self
                .workers
                .lock()
                .map_err(|_| LogError::Unavailable("the sync helpers' lock is poisoned".into()))?;
            while workers.len() < others.len() {
                workers.push(spawn_helper()?);
            }
            for (due, worker) in others.iter().zip(workers.iter()) {
                if worker.send((due.clone(), done_tx.clone())).is_ok() {
                    sent += 1;
                } else {
                    // A helper that ended: sync its share here.
                    due.sync()?;
                }
            }
        }
        drop(done_tx);
        let mine = first.sync();
        let theirs = (0..sent).try_for_each(|_| {
            done.recv()
                .map_err(|_| LogError::Unavailable("a sync helper ended mid-sync".into()))?
        });
        mine.and(theirs)
    }
}

fn spawn_helper() -> Result<mpsc::Sender<Job>, LogError> {
    let (tx, rx) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("agentledger-fsync".into())
        .spawn(move || {
            for (due, reply) in rx {
                let _ = reply.send(due.sync());
            }
        })
        .map_err(|e| LogError::io("starting a sync helper thread", e))?;
    Ok(tx)
}

/// Frames of a later phase of a sealed group, written only once the
/// phases before it are durable (written before, an earlier phase's
/// fdatasync of the same file would make them durable ahead of their
/// premises).
pub(super) struct Held {
    pub(super) topic: Topic,
    pub(super) part: Arc<Partition>,
    pub(super) chunk: Chunk,
}

/// A sealed group: its first phase written, partitions in
/// [`super::SYNC_ORDER`]; its later phases held, in phase order and
/// within one in `SYNC_ORDER`.
pub(super) struct SealedGroup {
    pub(super) due: Vec<Arc<Due>>,
    pub(super) held: Vec<Held>,
    pub(super) helpers: Arc<Helpers>,
}

impl SealedGroup {
    /// Sync `due` topic by topic, the partitions of one together.
    fn sync_in_order(&self, mut due: &[Arc<Due>]) -> Result<(), LogError> {
        while let Some(first) = due.first() {
            let n = due.iter().take_while(|d| d.topic == first.topic).count();
            let (now, rest) = due.split_at(n);
            self.helpers.sync_together(now)?;
            due = rest;
        }
        Ok(())
    }
}

impl GroupSync for SealedGroup {
    fn wait(self: Box<Self>) -> Result<(), LogError> {
        self.sync_in_order(&self.due)?;
        let mut held = self.held.as_slice();
        while let Some(first) = held.first() {
            let n = held
                .iter()
                .take_while(|h| h.chunk.phase == first.chunk.phase)
                .count();
            let (now, rest) = held.split_at(n);
            let mut due = Vec::with_capacity(n);
            for h in now {
                let (end, file) = h.part.write_held(&h.chunk)?;
                due.push(Arc::new(Due {
                    topic: h.topic,
                    part: h.part.clone(),
                    end,
                    file,
                }));
            }
            self.sync_in_order(&due)?;
            held = rest;
        }
        Ok(())
    }
}
