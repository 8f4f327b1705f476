//! Content store: sha256-addressed bytes on local disk. The ledger keeps
//! refs, digests, sizes and labels; the bytes live only here (R8, R15).
//! Blobs are written to a temporary file, fsynced and renamed into place, so
//! a crash leaves either the whole blob or none.
//!
//! The store knows nothing of expiry. The same bytes may be held by many
//! references at once — an artifact, a blob grant of one task with a TTL of a
//! second, another task's grant of an hour — and each reference carries its
//! own deadline in the ledger (see `views::ContentRefs`). Reads never delete
//! anything: bytes go only in a [`ContentStore::sweep`] (run by `serve` and
//! by `agentledger gc`), and only when no live reference holds them.
//!
//! On a distributed backend the store is a cache in front of the content
//! the instances share through the log (`crate::content::share`): `put`
//! publishes there too before answering, a read that misses here fetches
//! from there, checks the digest and keeps a copy, and the sweep ends what
//! no live reference holds there as well.

use crate::content::share::{SharedContent, SharedSweep};
use crate::log::private_files;
use crate::log::LogError;
use crate::model::cas::ContentRef;
use sha2::{Digest, Sha256};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::model::limits::MAX_BLOB_BYTES;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not a content ref: {0:?} (expected cas://sha256/<64 lowercase hex digits>)")]
    BadRef(String),
    #[error("no blob {0} in the content store")]
    Missing(String),
    #[error("blob {uri} is damaged: its bytes hash to sha256:{found}")]
    DigestMismatch { uri: String, found: String },
    #[error("content of {size} bytes exceeds the limit of {MAX_BLOB_BYTES} bytes")]
    TooLarge { size: usize },
    /// The content shared through the log could not be written or read.
    #[error("shared content: {0}")]
    Shared(LogError),
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> StoreError {
    let context = context.into();
    move |source| StoreError::Io { context, source }
}

/// Where a blob was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBlob {
    /// `cas://sha256/<hex>`
    pub uri: String,
    /// `sha256:<hex>`
    pub digest: String,
    pub sha256: [u8; 32],
    pub size: u64,
}

/// The hex digest inside a `cas://sha256/<hex>` ref.
fn hex_of(uri: &str) -> Result<String, StoreError> {
    ContentRef::parse(uri)
        .map(|r| r.hex().to_owned())
        .map_err(|e| StoreError::BadRef(e.uri))
}

/// What a sweep found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SweepReport {
    /// Blobs looked at.
    pub examined: u64,
    /// Blobs a live reference holds.
    pub kept: u64,
    /// Blobs no live reference holds, left alone because they were written
    /// (or written again) within the grace period: their reference may not
    /// be in the views yet.
    pub in_grace: u64,
    pub removed: u64,
    pub removed_bytes: u64,
    /// The content shared through the log, when there is any.
    pub shared: Option<SharedSweep>,
}

pub struct ContentStore {
    dir: PathBuf,
    share: Option<std::sync::Arc<SharedContent>>,
}

impl ContentStore {
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, StoreError> {
        let dir = dir.as_ref().to_path_buf();
        private_files::create_dir_all(&dir.join("tmp"))
            .map_err(io(format!("create {}", dir.display())))?;
        Ok(Self { dir, share: None })
    }

    /// Share content through the log as well (see the module comment).
    pub fn with_share(mut self, share: Option<std::sync::Arc<SharedContent>>) -> Self {
        self.share = share;
        self
    }

    /// Whether content is shared through the log.
    pub fn is_shared(&self) -> bool {
        self.share.is_some()
    }

    fn path_of(&self, hex: &str) -> PathBuf {
        self.dir.join(&hex[..2]).join(hex)
    }

    /// Store bytes; storing the same bytes again only marks them as written
    /// now, so a sweep gives the new reference its grace period.
    pub fn put(&self, bytes: &[u8]) -> Result<StoredBlob, StoreError> {
        if bytes.len() > MAX_BLOB_BYTES {
            return Err(StoreError::TooLarge { size: bytes.len() });
        }
        let sha256: [u8; 32] = Sha256::digest(bytes).into();
        let stored = self.put_local(&sha256, bytes)?;
        if let Some(share) = &self.share {
            share.publish(&sha256, bytes).map_err(StoreError::Shared)?;
        }
        Ok(stored)
    }

    /// Keep bytes in this instance's directory (a put, or a copy of what
    /// the shared content served).
    fn put_local(&self, sha256: &[u8; 32], bytes: &[u8]) -> Result<StoredBlob, StoreError> {
        let sha256 = *sha256;
        let content_ref = ContentRef::for_sha256(&sha256);
        let hex = content_ref.hex().to_owned();
        let path = self.path_of(&hex);
        // A copy already there is kept only if it still holds these bytes
        // (a damaged one is replaced, not left to fail every later read),
        // and dated now; read and dated through one open, since a put of
        // bytes already held is the common case (the same artifact again).
        let refreshed = fs::File::options()
            .read(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| {
                let mut held = Vec::with_capacity(bytes.len());
                std::io::Read::read_to_end(&mut f, &mut held)?;
                if held != bytes {
                    tracing::warn!(blob = %path.display(), "stored copy does not match its digest; replacing it with the bytes put now");
                    return Err(std::io::Error::other("damaged"));
                }
                f.set_modified(SystemTime::now())
            });
        if refreshed.is_err() {
            let parent = path.parent().unwrap_or(&self.dir).to_path_buf();
            private_files::create_dir_all(&parent)
                .map_err(io(format!("create {}", parent.display())))?;
            let tmp = self
                .dir
                .join("tmp")
                .join(format!("{hex}.{}", std::process::id()));
            let mut f =
                private_files::create(&tmp).map_err(io(format!("create {}", tmp.display())))?;
            f.write_all(bytes)
                .and_then(|_| f.sync_all())
                .map_err(io(format!("write {}", tmp.display())))?;
            fs::rename(&tmp, &path).map_err(io(format!("rename into {}", path.display())))?;
        }
        Ok(StoredBlob {
            uri: content_ref.to_string(),
            digest: content_ref.digest(),
            sha256,
            size: bytes.len() as u64,
        })
    }

    /// Read a blob by ref, checking its digest. Whether the reference the
    /// caller holds is still live is the ledger's question, not the store's.
    pub fn get(&self, uri: &str) -> Result<Vec<u8>, StoreError> {
        let hex = hex_of(uri)?;
        let path = self.path_of(&hex);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match self.fetch_shared(&hex).map_err(StoreError::Shared)? {
                    Some(b) => b,
                    None => return Err(StoreError::Missing(uri.to_string())),
                }
            }
            Err(e) => return Err(io(format!("read {}", path.display()))(e)),
        };
        let found = hex::encode(Sha256::digest(&bytes));
        if found != hex {
            return Err(StoreError::DigestMismatch {
                uri: uri.to_string(),
                found,
            });
        }
        Ok(bytes)
    }

    /// The bytes stored under a ref, unchecked (the caller verifies the
    /// digest itself and decides what a mismatch means); `None` if absent
    /// (or the shared content cannot be reached: logged).
    pub fn read_raw(&self, uri: &str) -> Option<Vec<u8>> {
        let hex = hex_of(uri).ok()?;
        match fs::read(self.path_of(&hex)) {
            Ok(b) => Some(b),
            Err(_) => self.fetch_shared(&hex).unwrap_or_else(|e| {
                tracing::warn!(blob = %hex, "cannot read the shared content: {e}");
                None
            }),
        }
    }

    /// Bytes the shared content holds under a digest, unchecked; a copy is
    /// kept here when they match it.
    fn fetch_shared(&self, hex: &str) -> Result<Option<Vec<u8>>, LogError> {
        let Some(share) = &self.share else {
            return Ok(None);
        };
        let mut sha = [0u8; 32];
        if hex::decode_to_slice(hex, &mut sha).is_err() {
            return Ok(None);
        }
        let Some(bytes) = share.fetch(&sha)? else {
            return Ok(None);
        };
        if <[u8; 32]>::from(Sha256::digest(&bytes)) == sha {
            if let Err(e) = self.put_local(&sha, &bytes) {
                tracing::warn!(blob = %hex, "cannot keep a copy of shared content: {e}");
            }
        }
        Ok(Some(bytes))
    }

    /// Remove the bytes no live reference holds. `live` says, for a blob's
    /// sha256, whether some reference in the ledger still holds it; a blob
    /// no reference holds is removed once it is older than `grace` (the
    /// ledger record naming bytes is written after the bytes, and another
    /// instance sharing the directory may not have projected it yet).
    /// Leftovers of interrupted writes and of older stores (`*.expires`
    /// files: expiry no longer lives beside the bytes) go too.
    pub fn sweep<E: From<StoreError> + From<crate::log::LogError>>(
        &self,
        live: &mut dyn FnMut(&[u8; 32]) -> Result<bool, E>,
        grace: Duration,
    ) -> Result<SweepReport, E> {
        let mut report = SweepReport::default();
        let now = SystemTime::now();
        let old = |meta: &fs::Metadata| {
            meta.modified()
                .ok()
                .and_then(|m| now.duration_since(m).ok())
                .is_some_and(|age| age >= grace)
        };
        let listing = |dir: &Path| -> Result<Vec<fs::DirEntry>, StoreError> {
            match fs::read_dir(dir) {
                Ok(rd) => Ok(rd.filter_map(|e| e.ok()).collect()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
                Err(e) => Err(io(format!("list {}", dir.display()))(e)),
            }
        };
        let mut shards: Vec<PathBuf> = Vec::new();
        for top in listing(&self.dir)? {
            let name = top.file_name();
            let name = name.to_string_lossy();
            if name == "tmp" {
                for f in listing(&top.path())? {
                    if f.metadata().is_ok_and(|m| old(&m)) {
                        let _ = fs::remove_file(f.path());
                    }
                }
            } else if name == "sealed" {
                // A sealed task's blobs: the same rule, per task directory.
                shards.extend(listing(&top.path())?.iter().map(|d| d.path()));
            } else if name.len() == 2 && top.path().is_dir() {
                shards.push(top.path());
            }
        }
        for shard in shards {
            if !shard.is_dir() {
                continue;
            }
            for f in listing(&shard)? {
                let file_name = f.file_name();
                let file_name = file_name.to_string_lossy();
                if file_name.ends_with(".expires") {
                    let _ = fs::remove_file(f.path());
                    continue;
                }
                let mut sha = [0u8; 32];
                if hex::decode_to_slice(file_name.as_bytes(), &mut sha).is_err() {
                    continue;
                }
                report.examined += 1;
                if live(&sha)? {
                    report.kept += 1;
                    continue;
                }
                let Ok(meta) = f.metadata() else { continue };
                if !old(&meta) {
                    report.in_grace += 1;
                    continue;
                }
                match fs::remove_file(f.path()) {
                    Ok(()) => {
                        report.removed += 1;
                        report.removed_bytes += meta.len();
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(io(format!("remove {}", f.path().display()))(e).into()),
                }
            }
        }
        if let Some(share) = &self.share {
            report.shared = Some(share.sweep(live, grace)?);
        }
        Ok(report)
    }

    /// Where a sealed task's blobs live: a directory per task (`tag`, a hash
    /// of the task id), a file per plaintext digest, sealed with the task's
    /// key by the engine (see `crate::erasure`).
    fn sealed_dir(&self, tag: &str) -> PathBuf {
        self.dir.join("sealed").join(tag)
    }

    /// Store a task's sealed blob (already checked for size and sealed).
    pub fn put_sealed(
        &self,
        tag: &str,
        sha256: &[u8; 32],
        sealed: &[u8],
    ) -> Result<(), StoreError> {
        self.keep_sealed(tag, &hex::encode(sha256), sealed)?;
        if let Some(share) = &self.share {
            let id = crate::content::share::sealed_id(tag, sha256);
            share
                .publish_as(&id, sealed, Some(sha256))
                .map_err(StoreError::Shared)?;
        }
        Ok(())
    }

    /// Keep a task's sealed blob in this instance's directory.
    fn keep_sealed(&self, tag: &str, hex: &str, sealed: &[u8]) -> Result<(), StoreError> {
        let dir = self.sealed_dir(tag);
        private_files::create_dir_all(&dir).map_err(io(format!("create {}", dir.display())))?;
        let path = dir.join(hex);
        let tmp = self
            .dir
            .join("tmp")
            .join(format!("{tag}-{hex}.{}", std::process::id()));
        let mut f = private_files::create(&tmp).map_err(io(format!("create {}", tmp.display())))?;
        f.write_all(sealed)
            .and_then(|_| f.sync_all())
            .map_err(io(format!("write {}", tmp.display())))?;
        fs::rename(&tmp, &path).map_err(io(format!("rename into {}", path.display())))
    }

    /// The on-disk path of a sealed task's blob (tests use it to tamper).
    pub fn sealed_path(&self, tag: &str, uri: &str) -> Result<PathBuf, StoreError> {
        Ok(self.sealed_dir(tag).join(hex_of(uri)?))
    }

    /// A task's sealed blob, as stored (or as the shared content holds
    /// it: a copy is kept here); `None` if absent. Unchecked: opening it
    /// with the task's key is the check.
    pub fn read_sealed(&self, tag: &str, uri: &str) -> Option<Vec<u8>> {
        let hex = hex_of(uri).ok()?;
        if let Ok(b) = fs::read(self.sealed_dir(tag).join(&hex)) {
            return Some(b);
        }
        let share = self.share.as_ref()?;
        let mut sha = [0u8; 32];
        hex::decode_to_slice(&hex, &mut sha).ok()?;
        let id = crate::content::share::sealed_id(tag, &sha);
        let bytes = match share.fetch(&id) {
            Ok(b) => b?,
            Err(e) => {
                tracing::warn!(blob = %hex, "cannot read the shared content: {e}");
                return None;
            }
        };
        if let Err(e) = self.keep_sealed(tag, &hex, &bytes) {
            tracing::warn!(blob = %hex, "cannot keep a copy of a shared sealed blob: {e}");
        }
        Some(bytes)
    }

    /// Remove every sealed blob of a task (its key is gone: they are noise).
    pub fn drop_sealed(&self, tag: &str) -> Result<(), StoreError> {
        match fs::remove_dir_all(self.sealed_dir(tag)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(format!("remove {}", self.sealed_dir(tag).display()))(e)),
        }
    }

    /// Whether bytes with this sha256 are in the store.
    pub fn holds(&self, sha256: &[u8; 32]) -> bool {
        self.path_of(ContentRef::for_sha256(sha256).hex()).exists()
    }

    /// The on-disk path of a blob (tests use it to tamper).
    pub fn blob_path(&self, uri: &str) -> Result<PathBuf, StoreError> {
        Ok(self.path_of(&hex_of(uri)?))
    }
}

/// A read's view of the store's failure: damaged bytes, or none to be had.
impl From<StoreError> for crate::rules::decide::ContentFault {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::DigestMismatch { .. } => Self::Damaged(e.to_string()),
            e => Self::Unavailable(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_and_tamper() {
        let d = tempfile::tempdir().unwrap();
        let s = ContentStore::open(d.path()).unwrap();
        let b = s.put(b"hello").unwrap();
        assert_eq!(b.size, 5);
        assert_eq!(s.get(&b.uri).unwrap(), b"hello");
        fs::write(s.blob_path(&b.uri).unwrap(), b"HELLO").unwrap();
        assert!(matches!(
            s.get(&b.uri),
            Err(StoreError::DigestMismatch { .. })
        ));
        // The same bytes put again repair the damaged copy.
        assert_eq!(s.put(b"hello").unwrap().uri, b.uri);
        assert_eq!(s.get(&b.uri).unwrap(), b"hello");
    }

    #[test]
    fn a_sweep_removes_only_what_no_live_reference_holds_once_past_grace() {
        let d = tempfile::tempdir().unwrap();
        let s = ContentStore::open(d.path()).unwrap();
        let kept = s.put(b"held by a live reference").unwrap();
        let dead = s.put(b"held by nothing").unwrap();
        // An older store's deadline file beside the bytes is meaningless now.
        let legacy = s.blob_path(&kept.uri).unwrap().with_extension("expires");
        fs::write(&legacy, "1").unwrap();
        let mut live = |sha: &[u8; 32]| Ok::<_, crate::error::LedgerError>(*sha == kept.sha256);
        let r = s.sweep(&mut live, Duration::from_secs(3600)).unwrap();
        assert_eq!((r.kept, r.in_grace, r.removed), (1, 1, 0), "{r:?}");
        assert!(s.holds(&dead.sha256), "within grace nothing goes");
        assert!(!legacy.exists());
        let r = s.sweep(&mut live, Duration::ZERO).unwrap();
        assert_eq!((r.kept, r.removed, r.removed_bytes), (1, 1, 15), "{r:?}");
        assert!(!s.holds(&dead.sha256));
        assert_eq!(s.get(&kept.uri).unwrap(), b"held by a live reference");
    }

    #[test]
    fn putting_bytes_again_restarts_their_grace() {
        let d = tempfile::tempdir().unwrap();
        let s = ContentStore::open(d.path()).unwrap();
        let b = s.put(b"again").unwrap();
        let path = s.blob_path(&b.uri).unwrap();
        let long_ago = SystemTime::now() - Duration::from_secs(7200);
        fs::File::options()
            .append(true)
            .open(&path)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        s.put(b"again").unwrap();
        let r = s
            .sweep(
                &mut |_| Ok::<_, crate::error::LedgerError>(false),
                Duration::from_secs(3600),
            )
            .unwrap();
        assert_eq!((r.in_grace, r.removed), (1, 0), "{r:?}");
    }

    #[test]
    fn bad_refs_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let s = ContentStore::open(d.path()).unwrap();
        for bad in [
            "",
            "cas://sha256/xyz",
            "http://x",
            "cas://sha256/../../etc/passwd",
        ] {
            assert!(matches!(s.get(bad), Err(StoreError::BadRef(_))), "{bad}");
        }
    }
}
