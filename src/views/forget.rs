//! Forgetting a ledger partition: a `serve` instance that lost a partition
//! to another instance drops what its views hold of it — the runs of its
//! chains with their trail pages and chains, its tasks, its queue of
//! finished runs and dispatch cursor — and sets its offset back to the
//! start, so the views hold only what the instance owns. Should the
//! partition come back, it is projected again from the log (the projector
//! skips what is still there). Runs are found by a pass over the run keys
//! (a run's partition is its chain root's), rare enough — a partition
//! moves — not to need an index.

use super::keys;
use super::state::RunState;
use super::{decode, ViewError, Views};
use crate::model::{ids, Topic};

/// Keys removed in one write.
const FORGET_BATCH: usize = 2000;

impl Views {
    /// Drop everything these views hold of ledger partition `p`, where
    /// `partition_of` says which partition a chain key lands in. Returns
    /// how many runs were dropped.
    pub fn forget_partition(
        &self,
        p: u32,
        partition_of: &dyn Fn(&str) -> u32,
    ) -> Result<u64, ViewError> {
        // The offset first: should this stop half-way, the partition is
        // projected again from the start if it comes back.
        let mut txn = self.txn();
        txn.set_offset(Topic::Ledger, p, 0);
        txn.del(keys::dispatch_cursor(p));
        txn.commit()?;
        let mut doomed = Vec::new();
        let mut runs = 0u64;
        // Tasks before runs: a task's partition is its master run's.
        for task_prefix in [keys::TASK, keys::SEALED_TASK] {
            for kv in self.scan_prefix(&[task_prefix]) {
                let (k, _) = kv?;
                let task = String::from_utf8_lossy(&k[1..]).into_owned();
                let master = match task_prefix {
                    keys::TASK => self.task_master_unsealed(&task)?,
                    _ => self.sealed_task_master(&task)?,
                };
                let Some(master) = master else { continue };
                if self.run_partition(&master, partition_of)? == Some(p) {
                    doomed.push(k);
                }
            }
        }
        for kv in self.scan_prefix(&[keys::RUN]) {
            let (k, v) = kv?;
            let run: RunState = decode(&k, &v)?;
            let key = ids::chain_key(run.state.root.as_deref(), &run.state.run);
            if partition_of(key) != p {
                continue;
            }
            runs += 1;
            for page in self.scan_prefix(&keys::trail_prefix(&run.state.run)) {
                doomed.push(page?.0);
            }
            doomed.push(keys::chain(key));
            doomed.push(k);
            if doomed.len() >= FORGET_BATCH {
                self.remove(std::mem::take(&mut doomed))?;
            }
        }
        let finished = keys::finished(p, 0);
        for kv in self.scan_prefix(&finished[..5]) {
            doomed.push(kv?.0);
        }
        self.remove(doomed)?;
        Ok(runs)
    }

    fn remove(&self, doomed: Vec<Vec<u8>>) -> Result<(), ViewError> {
        let mut txn = self.txn();
        for k in doomed {
            txn.del(k);
        }
        txn.commit()
    }

    fn run_partition(
        &self,
        run: &str,
        partition_of: &dyn Fn(&str) -> u32,
    ) -> Result<Option<u32>, ViewError> {
        Ok(self
            .run(run)?
            .map(|r| partition_of(ids::chain_key(r.state.root.as_deref(), &r.state.run))))
    }

    /// The master run of a task whose state is not sealed.
    fn task_master_unsealed(&self, task: &str) -> Result<Option<String>, ViewError> {
        Ok(self
            .get_typed::<crate::context::TaskState>(&keys::task(task))?
            .map(|t| t.master_run))
    }
}
