//! Following the ledger's tail for the serve loop: one thread waits on
//! the log's tail watch and wakes the loop whenever another writer (an
//! instance, `apply`) appends, so its closes are dispatched at once.

use super::ledger::Job;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Wake the serve loop whenever another writer appends to a ledger
/// partition (another instance closed a run): one consumer over every
/// partition, woken by any of them, instead of polling each.
pub(crate) fn watch_tail(
    mut watch: Box<dyn crate::log::TailWatch>,
    tx: mpsc::Sender<Job>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name("agentledger-tail".into())
        .spawn(move || {
            let mut failing = false;
            while !stop.load(Ordering::SeqCst) {
                match watch.wait(Duration::from_millis(100)) {
                    Ok(true) => {
                        failing = false;
                        if tx.send(Job::Wake).is_err() {
                            return;
                        }
                    }
                    Ok(false) => failing = false,
                    Err(e) => {
                        if !failing {
                            tracing::warn!("following the ledger's tail: {e}");
                            failing = true;
                        }
                        std::thread::sleep(Duration::from_millis(200));
                    }
                }
            }
        })
        .expect("spawn the tail watcher")
}
