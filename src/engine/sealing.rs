//! A commit group's end in two steps, so that the serve loop can decide
//! the next group while this one's sync runs: `seal_group` hands the
//! group's records to the log and starts their sync — on a thread of its
//! own when asked to, where the disk's wait and the kernel's work for it
//! leave the ledger thread free — and `group_synced` waits for it. The
//! next group may be decided in between (its records are held back by
//! the log until it is sealed) but is sealed only after; nothing of either
//! is answered before its own sync. Checkpoints wait until no group is in
//! flight (`after_groups`): they attest what the views hold, which must
//! then be what the log holds.

use super::{Engine, GroupEnd};
use crate::error::{LedgerError, Result};
use crate::log::{GroupSync, LogError};
use std::sync::mpsc;

/// Where a sealed group's sync stands.
pub(super) enum Sealed {
    /// Durable already (a pipelined group, settled when sealed).
    Done(GroupEnd),
    /// To be synced by whoever waits.
    Waiting(Box<dyn GroupSync>),
    /// Syncing on the sync thread.
    Syncing,
    /// Synced on the sync thread, with this result, not yet taken.
    Finished(Result<(), LogError>),
}

/// The thread that syncs sealed groups, one at a time, in order.
pub(super) struct Syncer {
    jobs: mpsc::Sender<Box<dyn GroupSync>>,
    done: mpsc::Receiver<Result<(), LogError>>,
}

impl Syncer {
    fn start() -> Result<Self> {
        let (jobs, todo) = mpsc::channel::<Box<dyn GroupSync>>();
        let (finished, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("agentledger-sync".into())
            .spawn(move || {
                // Ends when the engine (the only sender) is dropped.
                for sync in todo {
                    if finished.send(sync.wait()).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| LedgerError::Io {
                context: "starting the sync thread".into(),
                source: e,
            })?;
        Ok(Self { jobs, done })
    }

    fn wait(&self) -> Result<(), LogError> {
        self.done
            .recv()
            .map_err(|_| LogError::Unavailable("the sync thread ended".into()))?
    }
}

impl Engine {
    /// Seal the group begun by [`Engine::begin_group`]: its records are
    /// handed to the log and their sync starts — on the sync thread when
    /// `background`, so that the caller can decide the next group
    /// meanwhile. Until [`Engine::group_synced`] returns, nothing of the
    /// group may be answered and no other group may be sealed.
    pub fn seal_group(&mut self, background: bool) -> Result<()> {
        if self.sealed.is_some() {
            return Err(LedgerError::Internal(
                "a commit group was sealed before the one before it was synced",
            ));
        }
        self.grouping = false;
        let sealed = if self.pipeline.is_some() {
            Sealed::Done(self.finish_pipeline())
        } else {
            let sync = self.log.seal_group()?;
            if background {
                if self.syncer.is_none() {
                    self.syncer = Some(Syncer::start()?);
                }
                let syncer = self
                    .syncer
                    .as_ref()
                    .ok_or(LedgerError::Internal("no sync thread"))?;
                syncer
                    .jobs
                    .send(sync)
                    .map_err(|_| LogError::Unavailable("the sync thread ended".into()))?;
                Sealed::Syncing
            } else {
                Sealed::Waiting(sync)
            }
        };
        self.sealed = Some(sealed);
        Ok(())
    }

    /// Wait for the sealed group's records to be durable. An error means
    /// no operation of it may be answered ok, nor of any group decided
    /// since (they may stand on it). Ok says which operations must be
    /// answered otherwise than they were decided (pipelined groups).
    pub fn group_synced(&mut self) -> Result<GroupEnd> {
        match self.sealed.take() {
            None => Ok(GroupEnd::default()),
            Some(Sealed::Done(end)) => Ok(end),
            Some(Sealed::Waiting(sync)) => Ok(sync.wait().map(|()| GroupEnd::default())?),
            Some(Sealed::Finished(r)) => Ok(r.map(|()| GroupEnd::default())?),
            Some(Sealed::Syncing) => {
                let syncer = self
                    .syncer
                    .as_ref()
                    .ok_or(LedgerError::Internal("no sync thread"))?;
                Ok(syncer.wait().map(|()| GroupEnd::default())?)
            }
        }
    }

    /// Whether the sealed group's sync has ended (or is not one that
    /// runs on its own): [`Engine::group_synced`] will not wait for it.
    pub fn group_synced_yet(&mut self) -> bool {
        if !matches!(self.sealed, Some(Sealed::Syncing)) {
            return true;
        }
        let Some(syncer) = self.syncer.as_ref() else {
            return true;
        };
        let r = match syncer.done.try_recv() {
            Ok(r) => r,
            Err(mpsc::TryRecvError::Empty) => return false,
            Err(mpsc::TryRecvError::Disconnected) => {
                Err(LogError::Unavailable("the sync thread ended".into()))
            }
        };
        self.sealed = Some(Sealed::Finished(r));
        true
    }

    /// Whether a sealed group's sync has not been waited for.
    pub fn group_in_flight(&self) -> bool {
        self.sealed.is_some()
    }

    /// Once no group is being decided or synced: write the checkpoints the
    /// groups made due (they attest what the views hold).
    pub fn after_groups(&mut self) {
        if self.grouping || self.sealed.is_some() {
            return;
        }
        if let Err(e) = self.checkpoint(false) {
            tracing::warn!(
                "writing due checkpoints after a group (retried by the next operation and by `serve`): {e}"
            );
        }
    }
}
