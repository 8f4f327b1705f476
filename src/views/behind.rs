//! Write-behind for the views: committed view changes wait here briefly and
//! reach sled together, in one batch, written by a thread of their own. An
//! operation on Kafka is answered after the broker's acknowledgement; a
//! sled batch per operation on top of that round trip cost a quarter of the
//! ingest rate, while one batch every few milliseconds, written while the
//! engine waits for the broker, costs it little (sled's price is per batch
//! far more than per key, and a run rewritten by consecutive operations is
//! written once).
//!
//! Every read of the views looks here first, so no reader can tell the
//! difference; changes leave the buffer only once sled holds them. What is
//! lost if the process dies before a flush is exactly what sled itself
//! loses before its own fsync: view changes whose offsets were not written
//! either, so the projector applies those records again. Each flush carries
//! whole commits (the buffer only ever holds complete ones), and flushes are
//! written one at a time in order, so views on disk always sit at a commit
//! boundary.
//!
//! Changes may also be *held* (`hold` … `release` or `discard`): a commit
//! group on Kafka projects each operation's records before the broker has
//! acknowledged them, at the offsets it expects them to get. Held changes
//! are read like any other, but nothing of them reaches sled (nor the
//! buffer the writer takes from) until the acknowledgements confirm those
//! offsets; if they do not, the held changes are dropped whole and the
//! views are set straight from the log.

use super::ViewError;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// One key's latest value; `None` removes it.
pub(crate) type Change = (Vec<u8>, Option<Vec<u8>>);

/// When buffered changes go to sled.
#[derive(Debug, Clone, Copy)]
pub struct FlushPolicy {
    /// Oldest a buffered change may get before it is written.
    pub max_age: Duration,
    /// Keys buffered that start a write at once.
    pub max_keys: usize,
}

impl Default for FlushPolicy {
    fn default() -> Self {
        Self {
            max_age: Duration::from_millis(20),
            max_keys: 4096,
        }
    }
}

/// A commit at least this large goes straight to sled when nothing is
/// buffered: the projector's catch-up batches gain nothing from waiting.
const DIRECT_KEYS: usize = 256;

/// Buffered keys past which a commit waits for a write itself, should
/// the writer thread fall behind.
const BACKPRESSURE: usize = 4;

#[derive(Default)]
pub(crate) struct Buffer {
    /// key → (generation of the commit that set it, value).
    changes: BTreeMap<Vec<u8>, (u64, Option<Vec<u8>>)>,
    generation: u64,
    /// When the oldest change not yet taken for a write came in.
    oldest: Option<Instant>,
    /// Keys changed since the last write was taken.
    fresh: usize,
    policy: FlushPolicy,
    /// Changes held back from sled (see the module comment): newer than
    /// everything in `changes`.
    held: Option<BTreeMap<Vec<u8>, Option<Vec<u8>>>>,
}

impl Buffer {
    /// Nothing waits to be written (held changes do not count: they are
    /// not to be written yet).
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// What the buffer says of a key: `Some(None)` means removed.
    pub fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        if let Some(v) = self.held.as_ref().and_then(|h| h.get(key)) {
            return Some(v.as_deref());
        }
        self.changes.get(key).map(|(_, v)| v.as_deref())
    }

    /// Whether changes are being held back.
    pub fn holding(&self) -> bool {
        self.held.is_some()
    }

    /// Hold every change from now on until `release` or `discard`.
    pub fn hold(&mut self) {
        self.held.get_or_insert_with(BTreeMap::new);
    }

    /// The held changes become ordinary ones, as one commit.
    pub fn release(&mut self) {
        if let Some(held) = self.held.take() {
            if !held.is_empty() {
                self.absorb(held);
            }
        }
    }

    /// Forget the held changes: reads see what they saw before `hold`.
    pub fn discard(&mut self) {
        self.held = None;
    }

    /// Take one commit's changes: held back while holding, else buffered.
    fn commit(&mut self, changes: Vec<Change>) {
        match self.held.as_mut() {
            Some(held) => held.extend(changes),
            None => self.absorb(changes),
        }
    }

    pub fn absorb(&mut self, changes: impl IntoIterator<Item = Change>) {
        self.generation += 1;
        self.oldest.get_or_insert_with(Instant::now);
        for (k, v) in changes {
            self.fresh += 1;
            self.changes.insert(k, (self.generation, v));
        }
    }

    pub fn due(&self) -> bool {
        self.fresh >= self.policy.max_keys
            || self
                .oldest
                .is_some_and(|t| t.elapsed() >= self.policy.max_age)
    }

    /// Everything buffered as one sled batch, and the generation it
    /// reaches; the changes stay readable here until `retire`.
    pub fn take_batch(&mut self) -> (u64, sled::Batch) {
        self.oldest = None;
        self.fresh = 0;
        let batch = batch_of(
            self.changes
                .iter()
                .map(|(k, (_, v))| (k.clone(), v.clone())),
        );
        (self.generation, batch)
    }

    /// Sled holds everything up to `generation`: drop what was not
    /// changed again since.
    pub fn retire(&mut self, generation: u64) {
        self.changes.retain(|_, (g, _)| *g > generation);
    }

    /// The buffered changes inside a key range, in key order (held ones
    /// over the others).
    pub fn range(&self, range: (Bound<Vec<u8>>, Bound<Vec<u8>>)) -> Vec<Change> {
        let buffered = self
            .changes
            .range(range.clone())
            .map(|(k, (_, v))| (k.clone(), v.clone()));
        let Some(held) = self.held.as_ref() else {
            return buffered.collect();
        };
        let mut merged: BTreeMap<Vec<u8>, Option<Vec<u8>>> = buffered.collect();
        merged.extend(held.range(range).map(|(k, v)| (k.clone(), v.clone())));
        merged.into_iter().collect()
    }
}

/// Changes as one sled batch.
fn batch_of(changes: impl IntoIterator<Item = Change>) -> sled::Batch {
    let mut batch = sled::Batch::default();
    for (k, v) in changes {
        match v {
            Some(v) => batch.insert(k, v),
            None => batch.remove(k),
        }
    }
    batch
}

/// What the committing thread and the writer thread share.
struct Shared {
    tree: sled::Tree,
    buffer: Mutex<Buffer>,
    wake: Condvar,
    /// Held for a whole write, so writes reach sled in the order taken.
    writing: Mutex<()>,
    stop: AtomicBool,
    /// A failed background write, reported to the next commit.
    failed: Mutex<Option<String>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Every change under these locks is a single map or field operation;
    // a panic elsewhere cannot leave them half-done.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    /// Write everything buffered to sled.
    fn write_out(&self) -> Result<(), sled::Error> {
        let _order = lock(&self.writing);
        let (generation, batch) = {
            let mut b = lock(&self.buffer);
            if b.is_empty() {
                return Ok(());
            }
            b.take_batch()
        };
        self.tree.apply_batch(batch)?;
        lock(&self.buffer).retire(generation);
        Ok(())
    }

    fn run(&self) {
        loop {
            {
                let mut b = lock(&self.buffer);
                loop {
                    if self.stop.load(Ordering::SeqCst) {
                        return;
                    }
                    if b.due() {
                        break;
                    }
                    let wait = match b.oldest {
                        Some(t) => b.policy.max_age.saturating_sub(t.elapsed()),
                        None => Duration::from_secs(1),
                    };
                    b = self
                        .wake
                        .wait_timeout(b, wait.max(Duration::from_millis(1)))
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
            if let Err(e) = self.write_out() {
                tracing::error!("writing buffered view changes to sled: {e}");
                *lock(&self.failed) = Some(e.to_string());
            }
        }
    }
}

/// The buffer, its writer thread, and the way to sled.
pub(crate) struct WriteBehind {
    shared: Arc<Shared>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl WriteBehind {
    pub fn new(tree: sled::Tree) -> Self {
        let shared = Arc::new(Shared {
            tree,
            buffer: Mutex::new(Buffer::default()),
            wake: Condvar::new(),
            writing: Mutex::new(()),
            stop: AtomicBool::new(false),
            failed: Mutex::new(None),
        });
        let s = shared.clone();
        let writer = std::thread::Builder::new()
            .name("agentledger-views".into())
            .spawn(move || s.run())
            .map_err(|e| tracing::warn!("no view writer thread ({e}); commits write themselves"))
            .ok();
        Self { shared, writer }
    }

    pub fn set_policy(&self, policy: FlushPolicy) {
        lock(&self.shared.buffer).policy = policy;
    }

    pub fn buffer(&self) -> MutexGuard<'_, Buffer> {
        lock(&self.shared.buffer)
    }

    fn failure(&self) -> Result<(), ViewError> {
        match lock(&self.shared.failed).take() {
            Some(e) => Err(ViewError::Inconsistent(format!(
                "an earlier write of view changes failed ({e})"
            ))),
            None => Ok(()),
        }
    }

    /// Commit one atomic set of changes.
    pub fn write(&self, changes: Vec<Change>) -> Result<(), ViewError> {
        self.failure()?;
        let shared = &self.shared;
        if changes.len() >= DIRECT_KEYS {
            let _order = lock(&shared.writing);
            let b = lock(&shared.buffer);
            if b.is_empty() && !b.holding() {
                drop(b);
                shared.tree.apply_batch(batch_of(changes))?;
                return Ok(());
            }
        }
        let (due, backlog) = {
            let mut b = lock(&shared.buffer);
            b.commit(changes);
            (
                b.due(),
                b.changes.len() >= BACKPRESSURE * b.policy.max_keys.max(1),
            )
        };
        if backlog || (due && self.writer.is_none()) {
            shared.write_out()?;
        } else if due {
            shared.wake.notify_one();
        }
        Ok(())
    }

    /// Write everything buffered now.
    pub fn settle(&self) -> Result<(), ViewError> {
        self.failure()?;
        self.shared.write_out()?;
        Ok(())
    }
}

impl Drop for WriteBehind {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.wake.notify_all();
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
        if let Err(e) = self.settle() {
            tracing::warn!("writing buffered view changes on close: {e}");
        }
    }
}

/// Sled's entries in a range overlaid with the buffered changes of that
/// range: a buffered value replaces sled's, a buffered removal hides it.
pub struct Merged<I: Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>> {
    stored: std::iter::Peekable<I>,
    buffered: std::iter::Peekable<std::vec::IntoIter<Change>>,
}

impl<I: Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>> Merged<I> {
    pub fn new(stored: I, buffered: Vec<Change>) -> Self {
        Self {
            stored: stored.peekable(),
            buffered: buffered.into_iter().peekable(),
        }
    }
}

impl<I: Iterator<Item = sled::Result<(sled::IVec, sled::IVec)>>> Iterator for Merged<I> {
    type Item = sled::Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let stored_first = match (self.stored.peek(), self.buffered.peek()) {
                (None, None) => return None,
                (Some(Err(_)), _) => true,
                (Some(Ok((sk, _))), Some((bk, _))) => sk.as_ref() < bk.as_slice(),
                (Some(Ok(_)), None) => true,
                (None, Some(_)) => false,
            };
            if stored_first {
                return self
                    .stored
                    .next()
                    .map(|r| r.map(|(k, v)| (k.to_vec(), v.to_vec())));
            }
            let (key, value) = self.buffered.next()?;
            if matches!(self.stored.peek(), Some(Ok((sk, _))) if sk.as_ref() == key.as_slice()) {
                self.stored.next();
            }
            if let Some(value) = value {
                return Some(Ok((key, value)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(keys: &[(&str, &str)]) -> Vec<sled::Result<(sled::IVec, sled::IVec)>> {
        keys.iter()
            .map(|(k, v)| {
                Ok((
                    sled::IVec::from(k.as_bytes()),
                    sled::IVec::from(v.as_bytes()),
                ))
            })
            .collect()
    }

    fn merged(s: &[(&str, &str)], b: &[(&str, Option<&str>)]) -> Vec<(String, String)> {
        let buffered = b
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
            .collect();
        Merged::new(stored(s).into_iter(), buffered)
            .map(|r| {
                let (k, v) = r.unwrap();
                (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap())
            })
            .collect()
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn buffered_values_replace_insert_and_hide_stored_ones_in_key_order() {
        let got = merged(
            &[("a", "1"), ("c", "3"), ("e", "5"), ("g", "7")],
            &[
                ("b", Some("2")),
                ("c", Some("33")),
                ("e", None),
                ("h", Some("8")),
                ("z", None),
            ],
        );
        assert_eq!(
            got,
            pairs(&[("a", "1"), ("b", "2"), ("c", "33"), ("g", "7"), ("h", "8")])
        );
        assert_eq!(merged(&[], &[("x", None)]), pairs(&[]));
        assert_eq!(merged(&[("x", "1")], &[]), pairs(&[("x", "1")]));
    }

    #[test]
    fn a_stored_error_is_passed_on() {
        let s = vec![Err(sled::Error::Unsupported("boom".into()))];
        let mut m = Merged::new(s.into_iter(), vec![(b"a".to_vec(), Some(b"1".to_vec()))]);
        assert!(m.next().unwrap().is_err());
        assert_eq!(m.next().unwrap().unwrap().0, b"a".to_vec());
    }

    #[test]
    fn the_buffer_is_due_by_size_or_age() {
        let mut b = Buffer {
            policy: FlushPolicy {
                max_age: Duration::from_secs(3600),
                max_keys: 2,
            },
            ..Buffer::default()
        };
        assert!(!b.due());
        b.absorb([(b"a".to_vec(), Some(vec![1]))]);
        assert!(!b.due());
        b.absorb([(b"b".to_vec(), None)]);
        assert!(b.due());
        assert_eq!(b.get(b"b"), Some(None));
        assert_eq!(b.get(b"a"), Some(Some(&[1u8][..])));
        let _ = b.take_batch();
        assert!(!b.due());
        b.policy.max_age = Duration::ZERO;
        b.absorb([(b"c".to_vec(), Some(vec![]))]);
        assert!(b.due());
    }

    #[test]
    fn changes_stay_readable_while_written_and_newer_ones_outlive_the_write() {
        let mut b = Buffer::default();
        b.absorb([
            (b"a".to_vec(), Some(vec![1])),
            (b"b".to_vec(), Some(vec![2])),
        ]);
        let (generation, _batch) = b.take_batch();
        // While sled is being written: still here, and `a` changes again.
        assert_eq!(b.get(b"b"), Some(Some(&[2u8][..])));
        b.absorb([(b"a".to_vec(), Some(vec![3]))]);
        b.retire(generation);
        assert_eq!(b.get(b"b"), None, "written: read from sled from now on");
        assert_eq!(b.get(b"a"), Some(Some(&[3u8][..])), "newer than the write");
    }

    #[test]
    fn held_changes_are_read_first_and_either_released_whole_or_dropped_whole() {
        let mut b = Buffer::default();
        b.absorb([
            (b"a".to_vec(), Some(vec![1])),
            (b"c".to_vec(), Some(vec![3])),
        ]);
        b.hold();
        b.commit(vec![(b"a".to_vec(), None), (b"b".to_vec(), Some(vec![2]))]);
        assert_eq!(
            b.get(b"a"),
            Some(None),
            "held removal hides the buffered value"
        );
        assert_eq!(b.get(b"b"), Some(Some(&[2u8][..])));
        let all = (Bound::Unbounded, Bound::Unbounded);
        let keys = |r: Vec<Change>| {
            r.into_iter()
                .map(|(k, v)| (k, v.is_some()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            keys(b.range(all.clone())),
            vec![
                (b"a".to_vec(), false),
                (b"b".to_vec(), true),
                (b"c".to_vec(), true)
            ]
        );
        // Nothing held is taken for a write.
        assert_eq!(b.changes.len(), 2);
        let (generation, _batch) = b.take_batch();
        b.retire(generation);
        assert!(b.is_empty() && b.holding());
        b.discard();
        assert_eq!(b.get(b"a"), None, "back to what sled holds");
        assert_eq!(b.get(b"b"), None);

        b.hold();
        b.commit(vec![(b"d".to_vec(), Some(vec![4]))]);
        b.release();
        assert!(!b.holding());
        assert_eq!(b.get(b"d"), Some(Some(&[4u8][..])));
        assert_eq!(
            b.changes.len(),
            1,
            "released changes are written like any others"
        );
    }

    #[test]
    fn a_large_commit_while_holding_is_held_not_written_straight_to_sled() {
        let d = tempfile::tempdir().unwrap();
        let db = sled::open(d.path()).unwrap();
        let tree = db.open_tree("t").unwrap();
        let wb = WriteBehind::new(tree.clone());
        wb.buffer().hold();
        let big: Vec<Change> = (0..DIRECT_KEYS as u32 + 1)
            .map(|i| (i.to_be_bytes().to_vec(), Some(vec![1])))
            .collect();
        wb.write(big).unwrap();
        wb.settle().unwrap();
        assert!(tree.is_empty(), "held changes reached sled");
        wb.buffer().discard();
        drop(wb);
        assert!(tree.is_empty(), "discarded changes reached sled on close");
    }

    #[test]
    fn the_writer_thread_writes_once_due_and_closing_writes_the_rest() {
        let d = tempfile::tempdir().unwrap();
        let db = sled::open(d.path()).unwrap();
        let tree = db.open_tree("t").unwrap();
        let wb = WriteBehind::new(tree.clone());
        wb.set_policy(FlushPolicy {
            max_age: Duration::from_millis(5),
            max_keys: 1000,
        });
        wb.write(vec![(b"k".to_vec(), Some(b"v".to_vec()))])
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while wb.buffer().get(b"k").is_some() {
            assert!(Instant::now() < deadline, "never written");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(tree.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
        wb.set_policy(FlushPolicy {
            max_age: Duration::from_secs(3600),
            max_keys: 1000,
        });
        wb.write(vec![(b"k".to_vec(), None), (b"l".to_vec(), Some(vec![]))])
            .unwrap();
        assert!(tree.get(b"l").unwrap().is_none());
        drop(wb);
        assert!(tree.get(b"k").unwrap().is_none());
        assert!(tree.get(b"l").unwrap().is_some());
    }
}
