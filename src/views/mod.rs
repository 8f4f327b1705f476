//! Views: projections of the log kept in sled. They are disposable — the log
//! is the truth, and any damaged view is rebuilt from it. Everything lives in
//! one sled tree under short key prefixes, so that one atomic batch carries a
//! whole projector step: the view changes *and* the log offsets they reach
//! (a crash never applies a record twice or skips one).

mod behind;
pub mod db;
mod forget;
pub mod keys;
pub mod state;
pub mod txn;

pub use behind::{FlushPolicy, Merged};
pub use state::*;
pub use txn::ViewTxn;

use crate::codec;
use crate::model::Topic;
use crate::rules::decide::{LedgerRead, StateError};
use behind::{Change, WriteBehind};
use db::open_db;
use sha2::{Digest, Sha256};
use std::ops::Bound;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("sled: {0}")]
    Sled(#[from] sled::Error),
    #[error("damaged view value under {key}: {source}; run `agentledger rebuild`")]
    Damaged {
        key: String,
        #[source]
        source: codec::CodecError,
    },
    #[error("the views in {0} are held by another process (sled's lock)")]
    Locked(String),
    #[error("views are inconsistent: {0}; run `agentledger rebuild`")]
    Inconsistent(String),
    #[error(
        "views were written in format {found}, this build keeps format {want}; \
         run `agentledger rebuild` (the log has everything)"
    )]
    StaleFormat { found: u32, want: u32 },
}

/// Version of what the views hold and how. Views are a projection of the
/// log, so a change only means rebuilding them; this says when to.
/// 1: first page of a run's trail under its own key. 2: inside the run state.
/// 3: a chain of its root run alone is not stored (read off the run state).
/// 4: content references and their deadlines (the sweep's index).
/// 5: a run's domain state apart from where its steps sit in the log.
/// 6: who opened each run (the principal on its opening record).
pub const VIEWS_FORMAT: u32 = 6;

/// The deadline of a reference that never expires (an artifact).
pub const NEVER: u64 = u64::MAX;

pub struct Views {
    db: sled::Db,
    tree: sled::Tree,
    /// The partitions' Merkle tiles (see `audit::tiles`), beside the views.
    tiles: crate::audit::tiles::TileStore,
    /// The task keys that open sealed context records and task states
    /// (none until the data dir's are set).
    keys: std::sync::Arc<dyn crate::erasure::TaskKeys + Send>,
    /// Committed changes not yet in sled (see `behind`).
    behind: WriteBehind,
}

/// Entries of a key range: sled's, overlaid with buffered changes.
pub type Entries = Merged<sled::Iter>;

pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    key: &[u8],
    bytes: &[u8],
) -> Result<T, ViewError> {
    codec::from_bytes(bytes).map_err(|source| ViewError::Damaged {
        key: String::from_utf8_lossy(key).into_owned(),
        source,
    })
}

pub(crate) fn encode<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // View state types are plain data; encoding them cannot fail.
    codec::to_bytes(value).unwrap_or_default()
}

impl Views {
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, ViewError> {
        let db = open_db(dir.as_ref())?;
        let tree = db.open_tree("views")?;
        let found = match tree.get(keys::format())? {
            Some(v) => decode::<u32>(&keys::format(), &v)?,
            None if tree.is_empty() => {
                tree.insert(keys::format(), encode(&VIEWS_FORMAT))?;
                VIEWS_FORMAT
            }
            None => 1,
        };
        if found != VIEWS_FORMAT {
            return Err(ViewError::StaleFormat {
                found,
                want: VIEWS_FORMAT,
            });
        }
        let tiles = crate::audit::tiles::TileStore::new(db.open_tree("tiles")?);
        Ok(Self {
            db,
            behind: WriteBehind::new(tree.clone()),
            tree,
            tiles,
            keys: std::sync::Arc::new(crate::erasure::NoKeys),
        })
    }

    /// Open sealed records and task states with these keys.
    pub fn set_keys(&mut self, keys: std::sync::Arc<dyn crate::erasure::TaskKeys + Send>) {
        self.keys = keys;
    }

    /// The task keys the views open sealed things with.
    pub fn keys(&self) -> &dyn crate::erasure::TaskKeys {
        self.keys.as_ref()
    }

    /// The Merkle tiles kept beside the views.
    pub fn tiles(&self) -> &crate::audit::tiles::TileStore {
        &self.tiles
    }

    pub fn set_flush_policy(&mut self, policy: FlushPolicy) {
        self.behind.set_policy(policy);
    }

    /// The sled tree itself, after every buffered change has reached it.
    pub fn tree(&self) -> Result<&sled::Tree, ViewError> {
        self.settle()?;
        Ok(&self.tree)
    }

    /// Buffered changes to sled, and sled to disk.
    pub fn flush(&self) -> Result<(), ViewError> {
        self.settle()?;
        self.db.flush()?;
        Ok(())
    }

    /// Write every buffered change to sled in one batch.
    pub fn settle(&self) -> Result<(), ViewError> {
        self.behind.settle()
    }

    /// Hold every change committed from now on out of sled (see
    /// `behind`): reads see them; [`Views::release_held`] keeps them,
    /// [`Views::discard_held`] forgets them.
    pub(crate) fn hold(&self) {
        self.behind.buffer().hold();
    }

    /// The held changes stand: they go to sled like any others.
    pub(crate) fn release_held(&self) {
        self.behind.buffer().release();
    }

    /// Forget the held changes: the views are as they were at `hold`.
    pub(crate) fn discard_held(&self) {
        self.behind.buffer().discard();
    }

    /// Commit one atomic set of changes (buffered; see `behind`).
    pub(crate) fn write(&self, changes: Vec<Change>) -> Result<(), ViewError> {
        self.behind.write(changes)
    }

    /// A key's value, buffered or stored, handed to `f`.
    pub(crate) fn read<T>(
        &self,
        key: &[u8],
        f: impl FnOnce(&[u8]) -> Result<T, ViewError>,
    ) -> Result<Option<T>, ViewError> {
        if let Some(v) = self.behind.buffer().get(key) {
            return v.map(f).transpose();
        }
        match self.tree.get(key)? {
            Some(v) => f(&v).map(Some),
            None => Ok(None),
        }
    }

    /// The entries of a key range, in key order.
    pub fn range(&self, from: Vec<u8>, to: Bound<Vec<u8>>) -> Entries {
        // The buffer first: a change leaves it only once sled holds it.
        let buffered = self
            .behind
            .buffer()
            .range((Bound::Included(from.clone()), to.clone()));
        Merged::new(self.tree.range((Bound::Included(from), to)), buffered)
    }

    /// The entries whose keys start with `prefix`, in key order.
    pub fn scan_prefix(&self, prefix: &[u8]) -> Entries {
        self.range(prefix.to_vec(), prefix_end(prefix))
    }

    pub fn txn(&self) -> ViewTxn<'_> {
        ViewTxn::new(self)
    }

    fn get_typed<T: serde::de::DeserializeOwned>(
        &self,
        key: &[u8],
    ) -> Result<Option<T>, ViewError> {
        self.read(key, |v| decode(key, v))
    }

    /// The next offset the projector will read of a topic partition.
    pub fn offset(&self, topic: Topic, partition: u32) -> Result<u64, ViewError> {
        Ok(self
            .get_typed(&keys::offset(topic, partition))?
            .unwrap_or(0))
    }

    pub fn run(&self, run: &str) -> Result<Option<RunState>, ViewError> {
        self.get_typed(&keys::run(run))
    }

    pub fn agent(&self, agent: &str) -> Result<Option<AgentState>, ViewError> {
        self.get_typed(&keys::agent(agent))
    }

    pub fn version(
        &self,
        agent: &str,
        version: u32,
    ) -> Result<Option<crate::model::AgentVersion>, ViewError> {
        self.get_typed(&keys::version(agent, version))
    }

    /// The current version of an agent.
    pub fn current_version(
        &self,
        agent: &str,
    ) -> Result<Option<crate::model::AgentVersion>, ViewError> {
        match self.agent(agent)? {
            Some(a) => self.version(agent, a.current),
            None => Ok(None),
        }
    }

    /// Every version of an agent, oldest first.
    pub fn versions(&self, agent: &str) -> Result<Vec<crate::model::AgentVersion>, ViewError> {
        let prefix = keys::version_prefix(agent);
        let mut out = Vec::new();
        for kv in self.scan_prefix(&prefix) {
            let (k, v) = kv?;
            out.push(decode(&k, &v)?);
        }
        Ok(out)
    }

    /// Agents whose current version listens to `event`, sorted by name.
    pub fn listeners(&self, event: &str) -> Result<Vec<String>, ViewError> {
        let prefix = keys::listener_prefix(event);
        let mut out = Vec::new();
        for kv in self.scan_prefix(&prefix) {
            let (k, _) = kv?;
            out.push(String::from_utf8_lossy(&k[prefix.len()..]).into_owned());
        }
        Ok(out)
    }

    /// All agents' current state, sorted by name.
    pub fn agents(&self) -> Result<Vec<AgentState>, ViewError> {
        let mut out = Vec::new();
        for kv in self.scan_prefix(&[keys::AGENT]) {
            let (k, v) = kv?;
            out.push(decode(&k, &v)?);
        }
        Ok(out)
    }

    /// The signed note of the partition's furthest signed checkpoint.
    pub fn checkpoint_note(
        &self,
        topic: Topic,
        partition: u32,
    ) -> Result<Option<String>, ViewError> {
        self.get_typed(&keys::checkpoint_note(topic, partition))
    }

    /// The largest cosigned checkpoint of the partition: size and note.
    pub fn witnessed_note(
        &self,
        topic: Topic,
        partition: u32,
    ) -> Result<Option<(u64, String)>, ViewError> {
        self.get_typed(&keys::witnessed_note(topic, partition))
    }

    pub fn checkpoint_mark(
        &self,
        topic: Topic,
        partition: u32,
    ) -> Result<CheckpointMark, ViewError> {
        Ok(self
            .get_typed(&keys::checkpointed(topic, partition))?
            .unwrap_or(CheckpointMark {
                to: 0,
                head: crate::audit::GENESIS,
            }))
    }

    /// The latest deadline (unix ms) among the ledger's references to the
    /// content with this sha256: an artifact's never passes ([`NEVER`]), a
    /// task's blob grant passes at its TTL. `None`: nothing references it.
    pub fn content_deadline(&self, sha256: &[u8; 32]) -> Result<Option<u64>, ViewError> {
        self.get_typed(&keys::content_ref(sha256))
    }

    /// The token whose SHA-256 is `sha256`.
    pub fn token(&self, sha256: &[u8; 32]) -> Result<Option<TokenState>, ViewError> {
        self.get_typed(&keys::token(sha256))
    }

    /// The SHA-256 of the token with this id.
    pub fn token_hash(&self, id: &str) -> Result<Option<[u8; 32]>, ViewError> {
        self.get_typed(&keys::token_id(id))
    }

    /// Every token issued, revoked and expired ones too, by id.
    pub fn tokens(&self) -> Result<Vec<TokenState>, ViewError> {
        let mut all = Vec::new();
        for entry in self.scan_prefix(&[keys::TOKEN]) {
            let (k, v) = entry?;
            all.push(decode::<TokenState>(&k, &v)?);
        }
        all.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(all)
    }

    /// When the task's context was erased, if it was (unix ms).
    pub fn task_erased_at(&self, task: &str) -> Result<Option<u64>, ViewError> {
        Ok(self.task_erased(task)?.map(|(at, _)| at))
    }

    /// When the task's context was erased, and its master run.
    pub fn task_erased(&self, task: &str) -> Result<Option<(u64, String)>, ViewError> {
        self.get_typed(&keys::erased_task(task))
    }

    /// The master run of a task whose state is sealed (it can be erased),
    /// readable without the key.
    pub fn sealed_task_master(&self, task: &str) -> Result<Option<String>, ViewError> {
        Ok(self
            .get_typed::<(String, Vec<u8>)>(&keys::sealed_task(task))?
            .map(|(m, _)| m))
    }

    /// A task's context-exchange state (R11–R15): sealed with the task's
    /// key where it has one (`None` once the key is erased).
    pub fn task(&self, task: &str) -> Result<Option<crate::context::TaskState>, ViewError> {
        let sealed_key = keys::sealed_task(task);
        if let Some((_, sealed)) = self.get_typed::<(String, Vec<u8>)>(&sealed_key)? {
            return Ok(self
                .keys
                .key(task)
                .and_then(|k| open_task_state(&k, task, &sealed)));
        }
        self.get_typed(&keys::task(task))
    }

    /// A chain: stored once a second run joins it; a chain of its root
    /// run alone (most of them) is read off that run's state.
    pub fn chain(&self, root: &str) -> Result<Option<ChainState>, ViewError> {
        if let Some(stored) = self.get_typed(&keys::chain(root))? {
            return Ok(Some(stored));
        }
        Ok(self.run(root)?.and_then(|r| ChainState::of_root_alone(&r)))
    }

    /// The chain as stored, without deriving a lone root's.
    pub(crate) fn stored_chain(&self, root: &str) -> Result<Option<ChainState>, ViewError> {
        self.get_typed(&keys::chain(root))
    }

    /// Where one step of a run's trail sits in the ledger.
    pub fn trail_pointer(&self, run: &str, step: u32) -> Result<Option<TrailPointer>, ViewError> {
        let page: TrailPage = if step < keys::TRAIL_PAGE {
            match self.run(run)? {
                Some(state) => state.trail,
                None => return Ok(None),
            }
        } else {
            match self.get_typed(&keys::trail_page(run, step))? {
                Some(page) => page,
                None => return Ok(None),
            }
        };
        Ok(page.into_iter().find(|(s, _)| *s == step).map(|(_, p)| p))
    }

    /// Where each step of a run's trail sits in the ledger, in step order.
    pub fn trail_pointers(&self, run: &str) -> Result<Vec<(u32, TrailPointer)>, ViewError> {
        let prefix = keys::trail_prefix(run);
        let mut out = match self.run(run)? {
            Some(state) => state.trail,
            None => Vec::new(),
        };
        for kv in self.scan_prefix(&prefix) {
            let (k, v) = kv?;
            let page: TrailPage = decode(&k, &v)?;
            out.extend(page);
        }
        Ok(out)
    }

    /// Up to `max` finished runs of a ledger partition not yet dispatched,
    /// oldest first, from the one closed after offset `after` (from the
    /// first when `None`). Dispatched runs leave the queue as they are
    /// dispatched, which need not be in order: a platform dispatches only
    /// its own (see `Engine::dispatch_within`), so the queue is read from
    /// its front, not from the dispatch cursor.
    pub fn finished_from(
        &self,
        partition: u32,
        after: Option<u64>,
        max: usize,
    ) -> Result<Vec<(u64, String)>, ViewError> {
        let start = keys::finished(partition, after.map_or(0, |o| o.saturating_add(1)));
        let end = keys::finished(partition, u64::MAX);
        self.range(start, Bound::Excluded(end))
            .take(max)
            .map(|kv| {
                let (k, v) = kv?;
                Ok((keys::finished_offset(&k), decode(&k, &v)?))
            })
            .collect()
    }

    /// Closing records of a partition below this offset have been dispatched (R7).
    pub fn dispatch_cursor(&self, partition: u32) -> Result<u64, ViewError> {
        Ok(self
            .get_typed(&keys::dispatch_cursor(partition))?
            .unwrap_or(0))
    }

    /// Count of keys per prefix, for status output.
    pub fn sizes(&self) -> Result<Vec<(&'static str, u64)>, ViewError> {
        let mut out = Vec::new();
        for (prefix, name) in keys::ALL_PREFIXES {
            out.push((name, self.scan_prefix(&[prefix]).count() as u64));
        }
        Ok(out)
    }

    /// sha256 over every key and value in order: equal digests, equal views.
    pub fn digest(&self) -> Result<String, ViewError> {
        let mut h = Sha256::new();
        for kv in self.tree()?.iter() {
            let (k, v) = kv?;
            h.update((k.len() as u64).to_le_bytes());
            h.update(&k);
            h.update((v.len() as u64).to_le_bytes());
            h.update(&v);
        }
        Ok(hex::encode(h.finalize()))
    }
}

impl From<ViewError> for StateError {
    fn from(e: ViewError) -> Self {
        StateError::Unreadable(Box::new(e))
    }
}

impl LedgerRead for Views {
    fn run(&self, run: &str) -> Result<Option<crate::model::Run>, StateError> {
        Ok(Views::run(self, run)?.map(|r| r.state))
    }
    fn version(
        &self,
        agent: &str,
        version: u32,
    ) -> Result<Option<crate::model::AgentVersion>, StateError> {
        Ok(Views::version(self, agent, version)?)
    }
    fn current_version(
        &self,
        agent: &str,
    ) -> Result<Option<crate::model::AgentVersion>, StateError> {
        Ok(Views::current_version(self, agent)?)
    }
    fn listeners(&self, event: &str) -> Result<Vec<String>, StateError> {
        Ok(Views::listeners(self, event)?)
    }
    fn task(&self, task: &str) -> Result<Option<crate::context::TaskState>, StateError> {
        Ok(Views::task(self, task)?)
    }
}

/// A task state sealed with its task's key.
pub(crate) fn seal_task_state(
    key: &crate::erasure::TaskKey,
    state: &crate::context::TaskState,
) -> Result<Vec<u8>, ViewError> {
    let plain = encode(state);
    key.seal_deterministic(
        &crate::erasure::seal::aad("task_state", &state.task, ""),
        &plain,
    )
    .map_err(|e| {
        ViewError::Inconsistent(format!("sealing the state of task {:?}: {e}", state.task))
    })
}

/// The task state in `sealed`, if `key` opens it.
pub(crate) fn open_task_state(
    key: &crate::erasure::TaskKey,
    task: &str,
    sealed: &[u8],
) -> Option<crate::context::TaskState> {
    let plain = key
        .open(&crate::erasure::seal::aad("task_state", task, ""), sealed)
        .ok()?;
    codec::from_bytes(&plain).ok()
}

/// The first key after every key that starts with `prefix`.
fn prefix_end(prefix: &[u8]) -> Bound<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Bound::Excluded(end);
        }
    }
    Bound::Unbounded
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_cache_is_sized_to_the_machine_within_bounds() {
        let b = super::db::default_cache_bytes();
        assert!((64 << 20..=256 << 20).contains(&b), "{b}");
    }

    use super::*;
    use std::time::Duration;

    fn held_back(dir: &Path) -> Views {
        let mut v = Views::open(dir).unwrap();
        v.set_flush_policy(FlushPolicy {
            max_age: Duration::from_secs(3600),
            max_keys: 1000,
        });
        v
    }

    fn listener_key(event: &str, agent: &str) -> Vec<u8> {
        let mut k = keys::listener_prefix(event);
        k.extend_from_slice(agent.as_bytes());
        k
    }

    #[test]
    fn buffered_changes_are_read_scanned_and_removed_before_they_reach_sled() {
        let d = tempfile::tempdir().unwrap();
        let v = held_back(d.path());
        let mut t = v.txn();
        t.set_offset(Topic::Ledger, 3, 41);
        t.put(listener_key("e", "b"), &());
        t.commit().unwrap();
        // Straight into sled, behind the buffer's back: a stored neighbour.
        v.tree.insert(listener_key("e", "a"), encode(&())).unwrap();
        v.tree.insert(listener_key("e", "c"), encode(&())).unwrap();
        assert!(v
            .tree
            .get(keys::offset(Topic::Ledger, 3))
            .unwrap()
            .is_none());
        assert_eq!(v.offset(Topic::Ledger, 3).unwrap(), 41);
        assert_eq!(v.listeners("e").unwrap(), ["a", "b", "c"]);

        let mut t = v.txn();
        t.del(listener_key("e", "c"));
        t.set_offset(Topic::Ledger, 3, 42);
        t.commit().unwrap();
        assert_eq!(v.listeners("e").unwrap(), ["a", "b"]);
        assert_eq!(v.offset(Topic::Ledger, 3).unwrap(), 42);

        v.settle().unwrap();
        assert!(v.behind.buffer().is_empty());
        assert!(v.tree.get(listener_key("e", "c")).unwrap().is_none());
        assert_eq!(v.listeners("e").unwrap(), ["a", "b"]);
        drop(v);
        let v = Views::open(d.path()).unwrap();
        assert_eq!(v.offset(Topic::Ledger, 3).unwrap(), 42);
    }

    #[test]
    fn closing_the_views_writes_what_is_buffered() {
        let d = tempfile::tempdir().unwrap();
        {
            let v = held_back(d.path());
            let mut t = v.txn();
            t.set_offset(Topic::Registry, 0, 7);
            t.commit().unwrap();
            assert!(!v.behind.buffer().is_empty());
        }
        let v = Views::open(d.path()).unwrap();
        assert_eq!(v.offset(Topic::Registry, 0).unwrap(), 7);
    }

    #[test]
    fn prefix_ends_skip_every_key_with_the_prefix() {
        assert_eq!(prefix_end(b"ab"), Bound::Excluded(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 255]), Bound::Excluded(vec![2]));
        assert_eq!(prefix_end(&[255, 255]), Bound::Unbounded);
    }
}
