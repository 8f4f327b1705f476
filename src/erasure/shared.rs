//! Task keys shared between the instances of one ledger on Kafka, so that
//! context sealed by one instance opens on another. Each key travels in
//! the compacted `keys` topic (record key: the task's tag, the SHA-256 of
//! its id), wrapped — sealed with ChaCha20-Poly1305 under the fleet's seal
//! key, which every instance holds in `<data>/seal.key` and which never
//! enters the log — together with the task id and the key's expiry.
//! Erasing a task's key writes a tombstone: every instance drops its copy
//! when it sees it (`sync_erasures`), and compaction removes the wrapped
//! key from the brokers (the topic rolls segments hourly).
//!
//! A key is published (acknowledged by every in-sync replica) before
//! anything sealed with it is written, as a key file is made durable first
//! on a single instance. An instance with another seal key cannot unwrap
//! the keys it finds: it reads the task's context as unreadable, never as
//! another task's.

use super::seal::TaskKey;
use crate::log::{Log, LogError};
use crate::model::Topic;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::{Arc, Mutex};

/// What the topic holds for a tag.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wrapped {
    v: u8,
    /// base64 of the sealed `key ‖ task id`.
    wrapped: String,
    expires_at: u64,
}

/// A key the topic holds, as this instance can read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fetched {
    /// The task's key and when it expires.
    Held(TaskKey, u64),
    /// A tombstone: the key was erased.
    Erased,
    /// Nothing for this tag.
    Unknown,
    /// Wrapped with another seal key, or damaged.
    Unopenable,
}

/// An expired key the topic holds, unwrapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedExpired {
    pub task: String,
    pub expires_at: u64,
}

#[derive(Default)]
struct Index {
    /// By tag: the wrapped key, or `None` for a tombstone.
    by_tag: HashMap<String, Option<Wrapped>>,
    scanned: u64,
    /// Tags tombstoned since `sync_erasures` last asked.
    newly_erased: Vec<String>,
}

/// The keys topic of one log, and the seal key that unwraps it.
pub struct SharedKeys {
    log: Arc<dyn Log>,
    seal: TaskKey,
    index: Mutex<Index>,
}

fn aad(tag: &str) -> Vec<u8> {
    format!("agentledger task key v1 {tag}").into_bytes()
}

/// Why the shared keys could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum SharedKeyError {
    #[error("{0}")]
    Log(#[from] LogError),
    #[error("no randomness for a task key")]
    Random,
}

impl SharedKeys {
    /// The keys topic of `log` unwrapped with `seal`, if the backend
    /// keeps one (the embedded log does not: its keys stay in the data dir).
    pub fn over(log: Arc<dyn Log>, seal: TaskKey) -> Option<Self> {
        (log.partitions(Topic::Keys) > 0).then(|| Self {
            log,
            seal,
            index: Mutex::new(Index::default()),
        })
    }

    fn index(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publish a task's key (made or extended), durably.
    pub fn publish(
        &self,
        tag: &str,
        task: &str,
        key: &TaskKey,
        expires_at: u64,
    ) -> Result<(), SharedKeyError> {
        let mut plain = key.0.to_vec();
        plain.extend_from_slice(task.as_bytes());
        let sealed = self
            .seal
            .seal(&aad(tag), &plain)
            .map_err(|_| SharedKeyError::Random)?;
        let w = Wrapped {
            v: 1,
            wrapped: B64.encode(sealed),
            expires_at,
        };
        let json = serde_json::to_vec(&w).unwrap_or_default();
        self.log
            .append(Topic::Keys, &[(tag.as_bytes().to_vec(), json)])?;
        self.index().by_tag.insert(tag.to_owned(), Some(w));
        Ok(())
    }

    /// End a task's key in the topic (a tombstone).
    pub fn erase(&self, tag: &str) -> Result<(), SharedKeyError> {
        self.log
            .append(Topic::Keys, &[(tag.as_bytes().to_vec(), Vec::new())])?;
        self.index().by_tag.insert(tag.to_owned(), None);
        Ok(())
    }

    /// The key the topic holds for `tag` (the task's id checked).
    pub fn fetch(&self, tag: &str, task: &str) -> Result<Fetched, SharedKeyError> {
        let mut index = self.index();
        self.scan(&mut index)?;
        Ok(match index.by_tag.get(tag) {
            None => Fetched::Unknown,
            Some(None) => Fetched::Erased,
            Some(Some(w)) => match self.unwrap(tag, w) {
                Some((key, t, expires_at)) if t == task => Fetched::Held(key, expires_at),
                _ => Fetched::Unopenable,
            },
        })
    }

    /// Tags erased in the topic since the last call (by any instance).
    pub fn newly_erased(&self) -> Result<Vec<String>, SharedKeyError> {
        let mut index = self.index();
        self.scan(&mut index)?;
        Ok(std::mem::take(&mut index.newly_erased))
    }

    /// Keys in the topic past their expiry at `now`, that this instance can
    /// unwrap: whoever made them may be gone, any instance erases them.
    pub fn expired(&self, now: u64) -> Result<Vec<SharedExpired>, SharedKeyError> {
        let mut index = self.index();
        self.scan(&mut index)?;
        let mut out = Vec::new();
        for (tag, w) in &index.by_tag {
            let Some(w) = w.as_ref().filter(|w| w.expires_at <= now) else {
                continue;
            };
            if let Some((_, task, expires_at)) = self.unwrap(tag, w) {
                out.push(SharedExpired { task, expires_at });
            }
        }
        Ok(out)
    }

    fn unwrap(&self, tag: &str, w: &Wrapped) -> Option<(TaskKey, String, u64)> {
        let sealed = B64.decode(&w.wrapped).ok()?;
        let plain = self.seal.open(&aad(tag), &sealed).ok()?;
        if plain.len() < 32 {
            return None;
        }
        let (key, task) = plain.split_at(32);
        let key: [u8; 32] = key.try_into().ok()?;
        let task = String::from_utf8(task.to_vec()).ok()?;
        Some((TaskKey(key), task, w.expires_at))
    }

    /// Read the topic from where the last scan stopped to its end.
    fn scan(&self, index: &mut Index) -> Result<(), SharedKeyError> {
        let end = self.log.end_offset(Topic::Keys, 0)?;
        while index.scanned < end {
            let mut seen: Vec<(String, Option<Wrapped>)> = Vec::new();
            let from = index.scanned;
            let next = self.log.scan(Topic::Keys, 0, from, 1024, &mut |r| {
                let Ok(tag) = std::str::from_utf8(r.key) else {
                    return ControlFlow::Continue(());
                };
                if r.payload.is_empty() {
                    seen.push((tag.to_owned(), None));
                } else if let Ok(w) = serde_json::from_slice::<Wrapped>(r.payload) {
                    seen.push((tag.to_owned(), Some(w)));
                } else {
                    tracing::warn!(
                        tag,
                        offset = r.offset,
                        "a record of the keys topic does not read as a wrapped key"
                    );
                }
                ControlFlow::Continue(())
            })?;
            for (tag, w) in seen {
                if w.is_none() {
                    index.newly_erased.push(tag.clone());
                }
                index.by_tag.insert(tag, w);
            }
            if next == from {
                break;
            }
            index.scanned = next;
        }
        Ok(())
    }
}
