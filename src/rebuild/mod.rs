//! Rebuild: project the whole log into fresh views, then swap them in. Views
//! are disposable; the log is the truth. The digest printed afterwards is
//! over every view key and value, so it can be compared with the live
//! views' digest (they must be equal when the live views were whole).

use crate::engine::DataDir;
use crate::error::{LedgerError, Result};
use crate::log::Log;
use crate::model::Topic;
use crate::projector::project_all;
use crate::views::Views;
use std::fs;

pub mod beside;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebuildReport {
    pub records: u64,
    pub digest: String,
    /// Digest of the views replaced (caught up to the log first); `None`
    /// when they could not be read.
    pub previous_digest: Option<String>,
}

/// Total records the projector reads (for a progress bar).
pub fn projected_records(log: &dyn Log) -> Result<u64> {
    projected_records_in(log, None)
}

/// [`projected_records`] of the ledger partitions in `scope` (all: `None`).
pub fn projected_records_in(
    log: &dyn Log,
    scope: Option<&std::collections::BTreeSet<u32>>,
) -> Result<u64> {
    let mut n = 0;
    for topic in [Topic::Registry, Topic::Ledger] {
        for p in 0..log.partitions(topic) {
            if topic == Topic::Ledger && scope.is_some_and(|s| !s.contains(&p)) {
                continue;
            }
            n += log.end_offset(topic, p)?;
        }
    }
    Ok(n)
}

/// Rebuild the views of an embedded data dir. The caller holds the data
/// dir's lock and has no views open.
pub fn rebuild_views(dd: &DataDir, log: &dyn Log, progress: &dyn Fn(u64)) -> Result<RebuildReport> {
    let live = dd.views();
    let fresh = dd.root.join("views.rebuild");
    let old = dd.root.join("views.old");
    let io = |what: &str, e: std::io::Error| LedgerError::io(what, e);
    let _ = fs::remove_dir_all(&fresh);
    let _ = fs::remove_dir_all(&old);
    let keys = dd.key_store()?;
    // The live views are read only to compare digests: damaged ones (sled
    // may panic on them) are simply not compared.
    let previous_digest = if live.exists() {
        let digest = crate::engine::guarded(|| {
            let mut v = Views::open(&live)?;
            v.set_keys(keys.clone());
            project_all(log, &v, None, &|_| {})?;
            Ok::<_, LedgerError>(v.digest()?)
        });
        match digest {
            Ok(Ok(d)) => Some(d),
            Ok(Err(e)) => {
                tracing::warn!("live views unreadable ({e}); rebuilding without comparing");
                None
            }
            Err(panic) => {
                tracing::warn!(
                    "live views damaged (sled panicked: {panic}); rebuilding without comparing"
                );
                None
            }
        }
    } else {
        None
    };
    let (records, digest) = {
        let mut views = Views::open(&fresh)?;
        views.set_keys(keys.clone());
        let records = project_all(log, &views, None, progress)?;
        // The Merkle tiles are derived data too: as far as checkpoints go,
        // so a server can serve them at once.
        for t in crate::audit::checkpoint::CHAINED_TOPICS {
            for p in 0..log.partitions(t) {
                let to = views.checkpoint_mark(t, p)?.to;
                crate::audit::checkpoint::sync_tiles(views.tiles(), log, t, p, to)?;
            }
        }
        views.flush()?;
        (records, views.digest()?)
    };
    if live.exists() {
        fs::rename(&live, &old).map_err(|e| io("move old views aside", e))?;
    }
    fs::rename(&fresh, &live).map_err(|e| io("swap in rebuilt views", e))?;
    let _ = fs::remove_dir_all(&old);
    Ok(RebuildReport {
        records,
        digest,
        previous_digest,
    })
}
