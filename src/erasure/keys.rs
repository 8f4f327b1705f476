//! Task keys on disk: one file per task under `<data>/keys`, named by the
//! SHA-256 of the task id, holding the task id, the key and when it
//! expires; mode 0600. A key is durable (file and directory fsynced)
//! before anything sealed with it is written, and deleting its file is
//! the erasure: nothing else holds it.

use super::seal::{KeyStatus, TaskKey, TaskKeys};
use super::shared::SharedKeyError;
use crate::log::private_files;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("task keys in {dir}: {source}")]
    Io {
        dir: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the key file of task {0:?} is damaged")]
    Damaged(String),
    #[error("no randomness for a task key")]
    Random,
    /// The task keys shared through the log could not be read or written.
    #[error("shared task keys: {0}")]
    Shared(crate::log::LogError),
}

impl From<SharedKeyError> for KeyError {
    fn from(e: SharedKeyError) -> Self {
        match e {
            SharedKeyError::Log(e) => KeyError::Shared(e),
            SharedKeyError::Random => KeyError::Random,
        }
    }
}

#[derive(Serialize, Deserialize)]
struct KeyFile {
    task: String,
    key: String,
    expires_at: u64,
}

/// The task keys of a data dir; on Kafka with a seal key, also the keys
/// every instance shares through the log (`super::shared`), of which the
/// data dir then keeps copies.
pub struct KeyStore {
    dir: PathBuf,
    /// Keys read or made by this process (files are the truth).
    cache: Mutex<HashMap<String, Option<TaskKey>>>,
    shared: Option<super::shared::SharedKeys>,
}

/// An expired key, for the sweep to erase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired {
    pub task: String,
    pub expires_at: u64,
}

impl KeyStore {
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, KeyError> {
        let dir = dir.as_ref().to_path_buf();
        private_files::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        Ok(KeyStore {
            dir,
            cache: Mutex::new(HashMap::new()),
            shared: None,
        })
    }

    /// Share the keys through the log as well.
    pub fn with_shared(mut self, shared: Option<super::shared::SharedKeys>) -> Self {
        self.shared = shared;
        self
    }

    /// Whether keys are shared between instances.
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    fn path(&self, task: &str) -> PathBuf {
        self.dir.join(format!("{}.key", tag(task)))
    }

    fn read(&self, task: &str) -> Result<Option<(TaskKey, u64)>, KeyError> {
        let text = match std::fs::read_to_string(self.path(task)) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io(&self.dir, e)),
        };
        let f: KeyFile =
            serde_json::from_str(&text).map_err(|_| KeyError::Damaged(task.to_owned()))?;
        let key: [u8; 32] = hex::decode(&f.key)
            .ok()
            .and_then(|k| k.try_into().ok())
            .filter(|_| f.task == task)
            .ok_or_else(|| KeyError::Damaged(task.to_owned()))?;
        Ok(Some((TaskKey(key), f.expires_at)))
    }

    fn write(&self, task: &str, key: &TaskKey, expires_at: u64) -> Result<(), KeyError> {
        let path = self.path(task);
        let tmp = path.with_extension("tmp");
        let text = serde_json::to_string(&KeyFile {
            task: task.to_owned(),
            key: hex::encode(key.0),
            expires_at,
        })
        .unwrap_or_default();
        private_files::write(&tmp, text).map_err(|e| io(&self.dir, e))?;
        let sync = |p: &Path| std::fs::File::open(p).and_then(|f| f.sync_all());
        sync(&tmp).map_err(|e| io(&self.dir, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io(&self.dir, e))?;
        sync(&self.dir).map_err(|e| io(&self.dir, e))
    }

    /// The task's key, made (durably) if it has none; a later `expires_at`
    /// than the one held extends it.
    pub fn create(&self, task: &str, expires_at: u64) -> Result<TaskKey, KeyError> {
        let held = match self.read(task)? {
            Some(k) => Some(k),
            // Another instance may have made it: use the same key.
            None => self.fetch_shared(task)?,
        };
        let key = match held {
            Some((key, held)) if held >= expires_at => key,
            Some((key, _)) => {
                self.write(task, &key, expires_at)?;
                self.publish(task, &key, expires_at)?;
                key
            }
            None => {
                let key = TaskKey::generate().map_err(|_| KeyError::Random)?;
                self.write(task, &key, expires_at)?;
                self.publish(task, &key, expires_at)?;
                key
            }
        };
        self.remember(task, Some(key.clone()));
        Ok(key)
    }

    fn publish(&self, task: &str, key: &TaskKey, expires_at: u64) -> Result<(), KeyError> {
        match &self.shared {
            Some(s) => Ok(s.publish(&tag(task), task, key, expires_at)?),
            None => Ok(()),
        }
    }

    /// The key the shared topic holds for a task, kept here as a copy;
    /// `None` when there is none (or it was erased, or does not unwrap).
    fn fetch_shared(&self, task: &str) -> Result<Option<(TaskKey, u64)>, KeyError> {
        let Some(s) = &self.shared else {
            return Ok(None);
        };
        match s.fetch(&tag(task), task)? {
            super::shared::Fetched::Held(key, expires_at) => {
                self.write(task, &key, expires_at)?;
                Ok(Some((key, expires_at)))
            }
            _ => Ok(None),
        }
    }

    /// Drop the copies of keys another instance erased since the last
    /// call; how many were dropped.
    pub fn sync_erasures(&self) -> Result<usize, KeyError> {
        let Some(s) = &self.shared else {
            return Ok(0);
        };
        let mut dropped = 0;
        for t in s.newly_erased()? {
            let path = self.dir.join(format!("{t}.key"));
            match std::fs::remove_file(&path) {
                Ok(()) => dropped += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&self.dir, e)),
            }
            if let Ok(mut c) = self.cache.lock() {
                c.retain(|task, _| tag(task) != t);
            }
        }
        if dropped > 0 {
            std::fs::File::open(&self.dir)
                .and_then(|f| f.sync_all())
                .map_err(|e| io(&self.dir, e))?;
        }
        Ok(dropped)
    }

    /// Delete the task's key: everything sealed with it is erased. Says
    /// whether there was one.
    pub fn forget(&self, task: &str) -> Result<bool, KeyError> {
        self.remember(task, None);
        if let Some(s) = &self.shared {
            s.erase(&tag(task))?;
        }
        match std::fs::remove_file(self.path(task)) {
            Ok(()) => {
                std::fs::File::open(&self.dir)
                    .and_then(|f| f.sync_all())
                    .map_err(|e| io(&self.dir, e))?;
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(io(&self.dir, e)),
        }
    }

    /// Keys past their expiry at `now` (unix ms).
    pub fn expired(&self, now: u64) -> Result<Vec<Expired>, KeyError> {
        let mut out = Vec::new();
        let entries = std::fs::read_dir(&self.dir).map_err(|e| io(&self.dir, e))?;
        for entry in entries {
            let path = entry.map_err(|e| io(&self.dir, e))?.path();
            if path.extension().is_none_or(|x| x != "key") {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            // Only a whole key file in its own task's name counts: a
            // damaged one naming another task must not erase that task's
            // intact key (its file is another), and is left for an operator.
            let named = path.file_stem().and_then(|s| s.to_str());
            match serde_json::from_str::<KeyFile>(&text) {
                Ok(f) if named == Some(tag(&f.task).as_str()) && is_key_hex(&f.key) => {
                    if f.expires_at <= now {
                        out.push(Expired {
                            task: f.task,
                            expires_at: f.expires_at,
                        });
                    }
                }
                _ => tracing::warn!(
                    file = %path.display(),
                    "task key file is damaged (not a key in its own task's name); left in place, not expired"
                ),
            }
        }
        if let Some(s) = &self.shared {
            for e in s.expired(now)? {
                if !out.iter().any(|o| o.task == e.task) {
                    out.push(Expired {
                        task: e.task,
                        expires_at: e.expires_at,
                    });
                }
            }
        }
        out.sort_by(|a, b| a.task.cmp(&b.task));
        Ok(out)
    }

    fn remember(&self, task: &str, key: Option<TaskKey>) {
        if let Ok(mut c) = self.cache.lock() {
            c.insert(task.to_owned(), key);
        }
    }
}

impl TaskKeys for KeyStore {
    fn key(&self, task: &str) -> Option<TaskKey> {
        if let Some(k) = self.cache.lock().ok().and_then(|c| c.get(task).cloned()) {
            return k;
        }
        let key = match self.read(task) {
            Ok(Some((k, _))) => Some(k),
            Ok(None) => match self.fetch_shared(task) {
                Ok(Some((k, _))) => Some(k),
                // Another instance may make it later: asked again then.
                Ok(None) if self.shared.is_some() => return None,
                Ok(None) => None,
                Err(e) => {
                    // Not remembered: the next look asks again.
                    tracing::warn!("{e}");
                    return None;
                }
            },
            Err(e) => {
                tracing::warn!("{e}");
                None
            }
        };
        self.remember(task, key.clone());
        key
    }

    fn status(&self, task: &str) -> KeyStatus {
        match self.read(task) {
            Ok(Some(_)) => KeyStatus::Held,
            Ok(None) => match &self.shared {
                Some(s) => match s.fetch(&tag(task), task) {
                    Ok(super::shared::Fetched::Held(..)) => KeyStatus::Held,
                    Ok(super::shared::Fetched::Unopenable) => KeyStatus::Damaged,
                    _ => KeyStatus::Missing,
                },
                None => KeyStatus::Missing,
            },
            Err(_) => KeyStatus::Damaged,
        }
    }
}

/// A task's tag: the SHA-256 of its id, hex (names its key file and its
/// record in the shared topic; the id itself never shows).
pub fn tag(task: &str) -> String {
    hex::encode(Sha256::digest(task.as_bytes()))
}

/// 32 bytes as hex, as key files hold them.
fn is_key_hex(key: &str) -> bool {
    key.len() == 64 && key.bytes().all(|b| b.is_ascii_hexdigit())
}

fn io(dir: &Path, source: std::io::Error) -> KeyError {
    KeyError::Io {
        dir: dir.display().to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_key_file_naming_another_task_expires_nothing() {
        let d = tempfile::tempdir().unwrap();
        let ks = KeyStore::open(d.path().join("keys")).unwrap();
        let tour = ks.create("tour", 10_000).unwrap();
        ks.create("doctor", 10_000).unwrap();
        let doctor_file = ks.path("doctor");
        // Doctor's file overwritten with text naming tour, long expired.
        std::fs::write(&doctor_file, r#"{"task":"tour","key":"00","expires_at":1}"#).unwrap();
        assert_eq!(ks.expired(5_000).unwrap(), vec![]);
        // A whole key of tour's, but in doctor's file: not tour's either.
        let moved = format!(
            r#"{{"task":"tour","key":"{}","expires_at":1}}"#,
            hex::encode(tour.0)
        );
        std::fs::write(&doctor_file, moved).unwrap();
        assert_eq!(ks.expired(5_000).unwrap(), vec![]);
        // Tour's own key stands, and expires when it should.
        let again = KeyStore::open(d.path().join("keys")).unwrap();
        assert_eq!(again.key("tour"), Some(tour));
        assert_eq!(again.status("doctor"), KeyStatus::Damaged);
        assert_eq!(
            again.expired(10_000).unwrap(),
            vec![Expired {
                task: "tour".into(),
                expires_at: 10_000
            }]
        );
    }

    #[test]
    fn keys_are_made_once_extended_forgotten_and_expire() {
        let d = tempfile::tempdir().unwrap();
        let ks = KeyStore::open(d.path().join("keys")).unwrap();
        assert_eq!(ks.key("t1"), None);
        let k = ks.create("t1", 1_000).unwrap();
        assert_eq!(ks.create("t1", 500).unwrap(), k, "made once");
        assert_eq!(ks.create("t1", 2_000).unwrap(), k, "extended, same key");
        // Another process reads it from the file.
        let again = KeyStore::open(d.path().join("keys")).unwrap();
        assert_eq!(again.key("t1"), Some(k.clone()));
        assert_eq!(again.expired(1_999).unwrap(), vec![]);
        assert_eq!(
            again.expired(2_000).unwrap(),
            vec![Expired {
                task: "t1".into(),
                expires_at: 2_000
            }]
        );
        // The key never appears in the file name, and the file is private.
        let files: Vec<_> = std::fs::read_dir(d.path().join("keys"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1);
        assert!(!files[0].to_string_lossy().contains("t1"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&files[0]).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "{mode:o}");
        }
        assert!(again.forget("t1").unwrap());
        assert!(!again.forget("t1").unwrap());
        assert_eq!(again.key("t1"), None);
        assert_eq!(
            KeyStore::open(d.path().join("keys")).unwrap().key("t1"),
            None
        );
        // A damaged file is named, not trusted.
        ks.create("t2", 9).unwrap();
        let path = ks.path("t2");
        std::fs::write(&path, "{").unwrap();
        let fresh = KeyStore::open(d.path().join("keys")).unwrap();
        assert_eq!(fresh.key("t2"), None);
        assert!(matches!(fresh.create("t2", 9), Err(KeyError::Damaged(_))));
    }
}
