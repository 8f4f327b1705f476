//! Rebuild while serving: fresh views projected from the log on a thread
//! of their own, in a directory beside the live views, while the engine
//! keeps answering from the live ones. When the thread is done the engine
//! catches both up to the same place in the log, compares their digests
//! and swaps the fresh ones in between two operations
//! (`Engine::finish_rebuild`); the data dir's `views.current` then names
//! the fresh directory, so a restart opens them too.

use crate::error::{LedgerError, Result};
use crate::log::Log;
use crate::projector::project_all;
use crate::views::Views;
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

/// Where a rebuild stands, as `status`, `/v1/rebuild` and `rebuild`
/// through a server show it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct RebuildStatus {
    /// Counts the rebuilds this process started (1, 2, …).
    pub id: u64,
    /// `running`, `swapped` or `failed`.
    pub state: RebuildState,
    /// Records projected into the fresh views so far.
    pub projected: u64,
    /// Records in the log when the rebuild started.
    pub total: u64,
    pub started_at_ms: u64,
    /// Seconds from start to swap (or failure); so far while running.
    pub seconds: f64,
    /// Digest of the fresh views, once swapped in.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub digest: Option<String>,
    /// Digest of the views they replaced, at the same place in the log;
    /// `None` when the log kept moving and no such place was found.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub previous_digest: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RebuildState {
    Running,
    Swapped,
    Failed,
}

impl RebuildStatus {
    /// Whether the fresh views equal the ones they replaced.
    pub fn identical(&self) -> Option<bool> {
        Some(self.digest.as_ref()? == self.previous_digest.as_ref()?)
    }
}

/// A build running beside the live views.
pub struct Beside {
    pub(crate) id: u64,
    /// The directory the fresh views are built in, and its name in the
    /// data dir.
    pub(crate) dir: PathBuf,
    pub(crate) name: String,
    started: Instant,
    started_at_ms: u64,
    total: u64,
    projected: Arc<AtomicU64>,
    thread: Option<JoinHandle<Result<Views>>>,
}

impl Beside {
    /// Start projecting `log` into fresh views in `dir` (emptied first):
    /// its ledger partitions in `scope`, like the live views.
    pub fn start(
        id: u64,
        dir: PathBuf,
        name: String,
        log: Arc<dyn Log>,
        keys: Arc<crate::erasure::KeyStore>,
        scope: Option<std::collections::BTreeSet<u32>>,
        now_ms: u64,
    ) -> Result<Self> {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(LedgerError::io(
                    format!("clear {} for the rebuild", dir.display()),
                    e,
                ))
            }
        }
        let total = super::projected_records_in(log.as_ref(), scope.as_ref())?;
        let projected = Arc::new(AtomicU64::new(0));
        let counter = projected.clone();
        let at = dir.clone();
        let thread = std::thread::Builder::new()
            .name("agentledger-rebuild".into())
            .spawn(move || -> Result<Views> {
                let mut views = Views::open(&at)?;
                views.set_keys(keys);
                project_all(log.as_ref(), &views, scope.as_ref(), &|n| {
                    counter.fetch_add(n, Ordering::Relaxed);
                })?;
                views.flush()?;
                Ok(views)
            })
            .map_err(|e| LedgerError::io("start the rebuild thread", e))?;
        tracing::info!(id, dir = %dir.display(), total, "rebuilding the views beside the live ones");
        Ok(Self {
            id,
            dir,
            name,
            started: Instant::now(),
            started_at_ms: now_ms,
            total,
            projected,
            thread: Some(thread),
        })
    }

    /// Whether the thread is done (the views are built, or it failed).
    pub fn finished(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Where it stands now.
    pub fn status(&self) -> RebuildStatus {
        RebuildStatus {
            id: self.id,
            state: RebuildState::Running,
            projected: self.projected.load(Ordering::Relaxed),
            total: self.total,
            started_at_ms: self.started_at_ms,
            seconds: self.started.elapsed().as_secs_f64(),
            digest: None,
            previous_digest: None,
            error: None,
        }
    }

    /// The built views (blocks until the thread is done).
    pub fn join(&mut self) -> Result<Views> {
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(LedgerError::Internal("the rebuild thread panicked")),
            None => Err(LedgerError::Internal("the rebuild was joined twice")),
        }
    }
}
