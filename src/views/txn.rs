//! A write-set over the views: reads see what the batch already wrote, and
//! `commit` applies everything in one atomic sled batch. Run and chain states
//! are kept decoded until commit, so a batch that touches one run a hundred
//! times writes it once (sled's write rate is the projector's bottleneck).

use super::{
    decode, encode, keys, ChainState, RunState, TrailPage, TrailPointer, ViewError, Views,
};
use crate::model::Topic;
use std::collections::{BTreeMap, HashMap};

pub struct ViewTxn<'a> {
    views: &'a Views,
    raw: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Keys this batch created that cannot have existed before it: deleting
    /// one again within the batch leaves no trace, not even a remove op.
    fresh: std::collections::HashSet<Vec<u8>>,
    runs: HashMap<String, RunState>,
    chains: HashMap<String, ChainState>,
    pages: HashMap<Vec<u8>, TrailPage>,
}

impl<'a> ViewTxn<'a> {
    pub(super) fn new(views: &'a Views) -> Self {
        Self {
            views,
            raw: BTreeMap::new(),
            fresh: Default::default(),
            runs: HashMap::new(),
            chains: HashMap::new(),
            pages: HashMap::new(),
        }
    }

    pub fn get_raw(&self, key: &[u8]) -> Result<Option<Vec<u8>>, ViewError> {
        if let Some(v) = self.raw.get(key) {
            return Ok(v.clone());
        }
        self.views.read(key, |v| Ok(v.to_vec()))
    }

    pub fn contains(&self, key: &[u8]) -> Result<bool, ViewError> {
        if let Some(v) = self.raw.get(key) {
            return Ok(v.is_some());
        }
        Ok(self.views.read(key, |_| Ok(()))?.is_some())
    }

    pub fn get<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, ViewError> {
        match self.get_raw(key)? {
            Some(v) => Ok(Some(decode(key, &v)?)),
            None => Ok(None),
        }
    }

    /// The keys of the views this batch writes to.
    pub fn task_keys(&self) -> &dyn crate::erasure::TaskKeys {
        self.views.keys()
    }

    pub fn put<T: serde::Serialize>(&mut self, key: Vec<u8>, value: &T) {
        self.raw.insert(key, Some(encode(value)));
    }

    /// Put a key that is new by construction (e.g. named by a log position).
    pub fn put_new<T: serde::Serialize>(&mut self, key: Vec<u8>, value: &T) {
        self.fresh.insert(key.clone());
        self.put(key, value);
    }

    pub fn del(&mut self, key: Vec<u8>) {
        if self.fresh.remove(&key) {
            self.raw.remove(&key);
        } else {
            self.raw.insert(key, None);
        }
    }

    /// A run's state, loaded once into the batch for in-place updates.
    pub fn run_mut(&mut self, run: &str) -> Result<Option<&mut RunState>, ViewError> {
        if !self.runs.contains_key(run) {
            match self.views.run(run)? {
                Some(s) => {
                    self.runs.insert(run.to_string(), s);
                }
                None => return Ok(None),
            }
        }
        Ok(self.runs.get_mut(run))
    }

    /// Whether this batch already holds a chain's state.
    pub fn has_chain(&self, root: &str) -> bool {
        self.chains.contains_key(root)
    }

    pub fn run_exists(&mut self, run: &str) -> Result<bool, ViewError> {
        Ok(self.run_mut(run)?.is_some())
    }

    pub fn insert_run(&mut self, state: RunState) {
        self.runs.insert(state.run.clone(), state);
    }

    pub fn chain_mut(&mut self, root: &str) -> Result<&mut ChainState, ViewError> {
        if !self.chains.contains_key(root) {
            let stored = match self.views.stored_chain(root)? {
                Some(s) => Some(s),
                // The root run may be in this batch, not in the views yet.
                None => self
                    .run_mut(root)?
                    .and_then(|r| ChainState::of_root_alone(r)),
            };
            let s = stored.unwrap_or(ChainState {
                root: root.to_string(),
                runs: Vec::new(),
                max_hop: 0,
            });
            self.chains.insert(root.to_string(), s);
        }
        Ok(self
            .chains
            .entry(root.to_string())
            .or_insert_with(|| ChainState {
                root: root.to_string(),
                runs: Vec::new(),
                max_hop: 0,
            }))
    }

    /// The pointer held for a run's step, if any.
    pub fn trail_step(&mut self, run: &str, step: u32) -> Result<Option<TrailPointer>, ViewError> {
        let page = self.page_mut(run, step)?;
        Ok(page.iter().find(|(s, _)| *s == step).map(|(_, p)| *p))
    }

    /// Record where a run's step sits in the log.
    pub fn set_trail_step(
        &mut self,
        run: &str,
        step: u32,
        ptr: TrailPointer,
    ) -> Result<(), ViewError> {
        let page = self.page_mut(run, step)?;
        match page.binary_search_by_key(&step, |(s, _)| *s) {
            Ok(i) => page[i].1 = ptr,
            Err(i) => page.insert(i, (step, ptr)),
        }
        Ok(())
    }

    fn page_mut(&mut self, run: &str, step: u32) -> Result<&mut TrailPage, ViewError> {
        if step < keys::TRAIL_PAGE {
            // The first page lives in the run state.
            return match self.run_mut(run)? {
                Some(state) => Ok(&mut state.trail),
                None => Err(ViewError::Inconsistent(format!(
                    "trail step {step} of run {run:?}, which the views do not hold"
                ))),
            };
        }
        let key = keys::trail_page(run, step);
        if !self.pages.contains_key(&key) {
            let page: TrailPage = self
                .views
                .read(&key, |v| decode(&key, v))?
                .unwrap_or_default();
            self.pages.insert(key.clone(), page);
        }
        Ok(self.pages.entry(key).or_default())
    }

    pub fn set_offset(&mut self, topic: Topic, partition: u32, next: u64) {
        self.put(keys::offset(topic, partition), &next);
    }

    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
            && self.runs.is_empty()
            && self.chains.is_empty()
            && self.pages.is_empty()
    }

    /// Apply every change as one atomic unit.
    pub fn commit(self) -> Result<(), ViewError> {
        self.prepare().commit()
    }

    /// Encode the batch's changes without writing them yet: all of a
    /// commit's work but the write, for a caller that learns only later
    /// whether it may write them.
    pub fn prepare(self) -> Prepared<'a> {
        let mut changes: Vec<_> = self.raw.into_iter().collect();
        changes.reserve(self.runs.len() + self.chains.len() + self.pages.len());
        for (id, s) in self.runs {
            changes.push((keys::run(&id), Some(encode(&s))));
        }
        for (root, s) in self.chains {
            changes.push((keys::chain(&root), Some(encode(&s))));
        }
        for (key, page) in self.pages {
            changes.push((key, Some(encode(&page))));
        }
        Prepared {
            views: self.views,
            changes,
        }
    }
}

/// A batch's encoded changes (see [`ViewTxn::prepare`]); dropping it
/// writes nothing.
pub struct Prepared<'a> {
    views: &'a Views,
    changes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Prepared<'_> {
    /// Write the changes in one atomic batch.
    pub fn commit(self) -> Result<(), ViewError> {
        self.views.write(self.changes)
    }
}
