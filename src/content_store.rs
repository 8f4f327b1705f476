//! Content store: sha256-addressed blobs on local disk. The ledger keeps
//! refs, digests, sizes and labels; the bytes live only here (R8, R15).
//! Blobs are written to a temporary file, fsynced and renamed into place, so
//! a crash leaves either the whole blob or none. Expiry (R15) is a deadline
//! written beside the blob: past it the bytes are deleted and reads answer
//! `expired`, while the digest stays in the ledger.

use sha2::{Digest, Sha256};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Largest blob the store accepts.
pub const MAX_BLOB_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("not a content ref: {0:?} (expected cas://sha256/<64 hex digits>)")]
    BadRef(String),
    #[error("no blob {0} in the content store")]
    Missing(String),
    #[error("blob {uri} is damaged: its bytes hash to sha256:{found}")]
    DigestMismatch { uri: String, found: String },
    #[error("blob of {size} bytes exceeds the limit of {MAX_BLOB_BYTES} bytes")]
    TooLarge { size: usize },
    #[error("blob {0} has expired; its bytes are gone")]
    Expired(String),
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

pub fn uri_for_hex(hex: &str) -> String {
    format!("cas://sha256/{hex}")
}

/// The hex digest inside a `cas://sha256/<hex>` ref.
pub fn parse_uri(uri: &str) -> Result<&str, StoreError> {
    let hex = uri
        .strip_prefix("cas://sha256/")
        .ok_or_else(|| StoreError::BadRef(uri.to_string()))?;
    if hex.len() != 64
        || !hex
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return Err(StoreError::BadRef(uri.to_string()));
    }
    Ok(hex)
}

pub struct ContentStore {
    dir: PathBuf,
}

impl ContentStore {
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, StoreError> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(dir.join("tmp")).map_err(io(format!("create {}", dir.display())))?;
        Ok(Self { dir })
    }

    fn path_of(&self, hex: &str) -> PathBuf {
        self.dir.join(&hex[..2]).join(hex)
    }

    fn expiry_path(&self, hex: &str) -> PathBuf {
        self.dir.join(&hex[..2]).join(format!("{hex}.expires"))
    }

    /// Store bytes; storing the same bytes twice is a no-op. `expires_at_ms`
    /// sets (or, for a blob already stored, extends) the deadline.
    pub fn put(&self, bytes: &[u8], expires_at_ms: Option<u64>) -> Result<StoredBlob, StoreError> {
        if bytes.len() > MAX_BLOB_BYTES {
            return Err(StoreError::TooLarge { size: bytes.len() });
        }
        let sha256: [u8; 32] = Sha256::digest(bytes).into();
        let hex = hex::encode(sha256);
        let path = self.path_of(&hex);
        if !path.exists() {
            let parent = path.parent().unwrap_or(&self.dir).to_path_buf();
            fs::create_dir_all(&parent).map_err(io(format!("create {}", parent.display())))?;
            let tmp = self
                .dir
                .join("tmp")
                .join(format!("{hex}.{}", std::process::id()));
            let mut f = fs::File::create(&tmp).map_err(io(format!("create {}", tmp.display())))?;
            f.write_all(bytes)
                .and_then(|_| f.sync_all())
                .map_err(io(format!("write {}", tmp.display())))?;
            fs::rename(&tmp, &path).map_err(io(format!("rename into {}", path.display())))?;
        }
        match expires_at_ms {
            Some(t) => {
                let ep = self.expiry_path(&hex);
                let current = fs::read_to_string(&ep)
                    .ok()
                    .and_then(|s| s.trim().parse::<u64>().ok());
                if current.is_none_or(|c| c < t) {
                    fs::write(&ep, t.to_string()).map_err(io(format!("write {}", ep.display())))?;
                }
            }
            None => {
                // A permanent copy outlives any earlier deadline.
                let _ = fs::remove_file(self.expiry_path(&hex));
            }
        }
        Ok(StoredBlob {
            uri: uri_for_hex(&hex),
            digest: format!("sha256:{hex}"),
            sha256,
            size: bytes.len() as u64,
        })
    }

    /// Read a blob by ref, checking its digest; past its deadline the bytes
    /// are deleted and the read answers `Expired`.
    pub fn get(&self, uri: &str, now_ms: u64) -> Result<Vec<u8>, StoreError> {
        let hex = parse_uri(uri)?;
        if let Some(deadline) = self.expires_at(hex) {
            if now_ms >= deadline {
                let _ = fs::remove_file(self.path_of(hex));
                return Err(StoreError::Expired(uri.to_string()));
            }
        }
        let path = self.path_of(hex);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::Missing(uri.to_string()))
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
    /// digest itself and decides what a mismatch means); `None` if absent.
    pub fn read_raw(&self, uri: &str) -> Option<Vec<u8>> {
        let hex = parse_uri(uri).ok()?;
        fs::read(self.path_of(hex)).ok()
    }

    /// Delete a blob's bytes (its deadline passed); the ledger keeps its digest.
    pub fn forget(&self, uri: &str) {
        if let Ok(hex) = parse_uri(uri) {
            let _ = fs::remove_file(self.path_of(hex));
            let _ = fs::remove_file(self.expiry_path(hex));
        }
    }

    fn expires_at(&self, hex: &str) -> Option<u64> {
        fs::read_to_string(self.expiry_path(hex))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    /// The on-disk path of a blob (tests use it to tamper).
    pub fn blob_path(&self, uri: &str) -> Result<PathBuf, StoreError> {
        Ok(self.path_of(parse_uri(uri)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_and_tamper() {
        let d = tempfile::tempdir().unwrap();
        let s = ContentStore::open(d.path()).unwrap();
        let b = s.put(b"hello", None).unwrap();
        assert_eq!(b.size, 5);
        assert_eq!(s.get(&b.uri, 0).unwrap(), b"hello");
        fs::write(s.blob_path(&b.uri).unwrap(), b"HELLO").unwrap();
        assert!(matches!(
            s.get(&b.uri, 0),
            Err(StoreError::DigestMismatch { .. })
        ));
    }

    #[test]
    fn expiry_deletes_bytes() {
        let d = tempfile::tempdir().unwrap();
        let s = ContentStore::open(d.path()).unwrap();
        let b = s.put(b"short-lived", Some(1000)).unwrap();
        assert!(s.get(&b.uri, 999).is_ok());
        assert!(matches!(s.get(&b.uri, 1000), Err(StoreError::Expired(_))));
        assert!(!s.blob_path(&b.uri).unwrap().exists());
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
            assert!(matches!(s.get(bad, 0), Err(StoreError::BadRef(_))), "{bad}");
        }
    }
}
