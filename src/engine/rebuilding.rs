//! Rebuild while serving, the engine's part: start fresh views beside the
//! live ones, say where the build stands, and swap them in between two
//! operations once built (the thread's part is `crate::rebuild::beside`).
//! Until the swap every read and write is answered from the live views.

use super::Engine;
use crate::audit::checkpoint::CHAINED_TOPICS;
use crate::codes::{Code, Refusal};
use crate::error::{LedgerError, Result};
use crate::log::Log;
use crate::model::Topic;
use crate::projector::project_all;
use crate::rebuild::beside::{Beside, RebuildState, RebuildStatus};
use crate::views::Views;

/// The engine's rebuilds: the one running, and how the last one ended.
#[derive(Default)]
pub(crate) struct Rebuilds {
    running: Option<Beside>,
    last: Option<RebuildStatus>,
    started: u64,
}

/// How many times the swap catches both views up before giving up on
/// finding them at one place in a log other writers keep appending to.
const ALIGN_TRIES: usize = 10;

impl Engine {
    /// Start building fresh views beside the live ones (nothing happens
    /// when one is running already: its status is answered).
    pub fn start_rebuild(&mut self) -> Result<RebuildStatus> {
        if let Some(b) = &self.rebuild.running {
            return Ok(b.status());
        }
        let (Some(dd), Some(keys)) = (&self.data, &self.keys) else {
            return Err(Refusal::new(
                Code::InvalidRequest,
                "this engine has no data dir to build views in",
            )
            .into());
        };
        let (name, dir) = dd.views_beside();
        self.rebuild.started += 1;
        let b = Beside::start(
            self.rebuild.started,
            dir,
            name,
            self.log.clone(),
            keys.clone(),
            self.scope.clone(),
            self.now_ms(),
        )?;
        let status = b.status();
        self.rebuild.running = Some(b);
        Ok(status)
    }

    /// The rebuild running, else the last one, if any.
    pub fn rebuild_status(&self) -> Option<RebuildStatus> {
        match &self.rebuild.running {
            Some(b) => Some(b.status()),
            None => self.rebuild.last.clone(),
        }
    }

    /// Once a rebuild's thread is done, swap its views in (or record why
    /// it failed): the status it ended with. Nothing while it runs, or
    /// inside a commit group.
    pub fn finish_rebuild(&mut self) -> Result<Option<RebuildStatus>> {
        if self.grouping || !self.rebuild.running.as_ref().is_some_and(Beside::finished) {
            return Ok(None);
        }
        let Some(mut b) = self.rebuild.running.take() else {
            return Ok(None);
        };
        let mut status = b.status();
        match b.join().and_then(|fresh| self.swap_in(fresh, &b)) {
            Ok((digest, previous)) => {
                status.state = RebuildState::Swapped;
                status.digest = Some(digest);
                status.previous_digest = previous;
                tracing::info!(
                    id = status.id,
                    identical = ?status.identical(),
                    "rebuilt views swapped in"
                );
            }
            Err(e) => {
                status.state = RebuildState::Failed;
                status.error = Some(e.to_string());
                tracing::error!(id = status.id, "the rebuild failed: {e}");
                let _ = std::fs::remove_dir_all(&b.dir);
            }
        }
        status.seconds = b.status().seconds;
        self.rebuild.last = Some(status.clone());
        Ok(Some(status))
    }

    /// Catch the fresh views and the live ones up to one place in the log,
    /// compare them, and make the fresh ones live: here and, through the
    /// data dir's pointer, for the next process. Returns both digests (the
    /// live one `None` when no common place was found).
    fn swap_in(&mut self, fresh: Views, b: &Beside) -> Result<(String, Option<String>)> {
        let log = self.log.clone();
        let mut aligned = false;
        for _ in 0..ALIGN_TRIES {
            self.catch_up(&|_| {})?;
            project_all(log.as_ref(), &fresh, self.scope.as_ref(), &|_| {})?;
            if positions(&self.views, log.as_ref())? == positions(&fresh, log.as_ref())? {
                aligned = true;
                break;
            }
        }
        // The Merkle tiles are derived data too, as far as checkpoints go.
        for t in CHAINED_TOPICS {
            for p in 0..log.partitions(t) {
                let to = fresh.checkpoint_mark(t, p)?.to;
                crate::audit::checkpoint::sync_tiles(fresh.tiles(), log.as_ref(), t, p, to)?;
            }
        }
        fresh.flush()?;
        // Both digests at once: the pause the swap costs is one pass over
        // the views, not two.
        let live = &self.views;
        let (digest, previous) = std::thread::scope(|s| {
            let theirs = aligned.then(|| s.spawn(|| live.digest()));
            let ours = fresh.digest();
            let theirs = theirs.map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(crate::views::ViewError::Inconsistent(
                        "digesting the live views panicked".into(),
                    ))
                })
            });
            (ours, theirs)
        });
        let digest = digest?;
        let previous = match previous {
            Some(d) => Some(d?),
            None => {
                tracing::warn!("the log kept moving: the rebuilt views are not compared");
                None
            }
        };
        let dd = self
            .data
            .as_ref()
            .ok_or(LedgerError::Internal("a rebuild without a data dir"))?;
        let old_dir = dd.views();
        dd.point_views_at(&b.name)?;
        let old = std::mem::replace(&mut self.views, fresh);
        // Built from the old views: built again from the new on next use.
        self.agent_index = None;
        if super::guarded(move || drop(old)).is_err() {
            tracing::warn!("closing the replaced views failed; removing them anyway");
        }
        if let Err(e) = std::fs::remove_dir_all(&old_dir) {
            tracing::warn!(
                "cannot remove the replaced views {}: {e}",
                old_dir.display()
            );
        }
        Ok((digest, previous))
    }
}

/// Where views stand in every partition they project.
fn positions(views: &Views, log: &dyn Log) -> Result<Vec<u64>> {
    let mut at = Vec::new();
    for topic in [Topic::Registry, Topic::Ledger, Topic::Checkpoints] {
        for p in 0..log.partitions(topic) {
            at.push(views.offset(topic, p)?);
        }
    }
    Ok(at)
}
