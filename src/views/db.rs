//! The views' sled database: opened with a page cache sized from the
//! machine's memory (or `--cache-mb`), and the errors of opening it.

use crate::views::ViewError;
use std::path::Path;

/// The page cache of every views store this process opens, in bytes (0:
/// not set, [`default_cache_bytes`]).
pub(crate) static CACHE_BYTES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Bound the page cache of the views stores this process opens from now on
/// (`--cache-mb`): what the views keep in memory besides the log's.
pub fn set_cache_bytes(bytes: u64) {
    CACHE_BYTES.store(bytes.max(1 << 20), std::sync::atomic::Ordering::Relaxed);
}

/// The cache when none is set: a sixteenth of the machine's memory, at
/// least 64 MiB and at most 256 MiB.
pub fn default_cache_bytes() -> u64 {
    let total = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(4 << 30, |kb| kb * 1024);
    (total / 16).clamp(64 << 20, 256 << 20)
}

/// The cache a views store opened now gets.
pub fn cache_bytes() -> u64 {
    match CACHE_BYTES.load(std::sync::atomic::Ordering::Relaxed) {
        0 => default_cache_bytes(),
        b => b,
    }
}

/// Open the sled database, waiting a moment for its lock: sled's io
/// threads finish writing a just-closed database in the background and hold
/// its file lock until they have (seen reopening views in one process).
pub(crate) fn open_db(dir: &Path) -> Result<sled::Db, ViewError> {
    if !dir.exists() {
        crate::log::private_files::create_dir_all(dir)
            .map_err(|e| ViewError::Sled(sled::Error::Io(e)))?;
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let opened = sled::Config::new()
            .path(dir)
            .cache_capacity(cache_bytes())
            .open();
        match opened {
            Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                if std::time::Instant::now() >= deadline {
                    return Err(ViewError::Locked(dir.display().to_string()));
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            other => {
                let db = other?;
                // sled made its files with the umask's mode. Not fatal: a
                // reader that does not own them (an audit) still reads.
                if let Err(e) = crate::log::private_files::restrict_tree(dir) {
                    tracing::warn!("making {} private: {e}", dir.display());
                }
                return Ok(db);
            }
        }
    }
}
