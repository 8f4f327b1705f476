//! Opening a data dir: its paths, its lock, and views that can be trusted.
//!
//! Views are a projection of the log and nothing else, so whenever they
//! cannot be trusted — sled fails or panics opening or reading them, they
//! are in an older format, or they claim records the log does not hold (its
//! tail was cut or lost) — they are set aside and projected again from the
//! log, and the engine says so on stderr. Nothing here ever needs the old
//! views, so a damaged store never stops a command, `rebuild` included.

use crate::erasure::KeyStore;
use crate::error::{LedgerError, Result};
use crate::log::Log;
use crate::model::Topic;
use crate::views::{ViewError, Views};
use std::collections::BTreeSet;
use std::fs::File;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The directories the views may live in: the live one, and the one a
/// rebuild while serving builds beside it.
const VIEWS_DIRS: [&str; 2] = ["views", "views.b"];

/// Paths inside a data directory.
pub struct DataDir {
    pub root: PathBuf,
}

impl DataDir {
    pub fn new(root: impl AsRef<Path>) -> Self {
        Self {
            root: root.as_ref().to_path_buf(),
        }
    }
    pub fn log(&self) -> PathBuf {
        self.root.join("log")
    }
    /// The live views: `views`, or the directory `views.current` names
    /// (a rebuild while serving builds beside the live views and points
    /// here at the fresh ones, see `crate::rebuild::beside`).
    pub fn views(&self) -> PathBuf {
        self.root.join(self.views_name())
    }

    /// The live views' directory name.
    pub fn views_name(&self) -> String {
        match std::fs::read_to_string(self.views_pointer()) {
            Ok(name) if VIEWS_DIRS.contains(&name.trim()) => name.trim().to_string(),
            _ => VIEWS_DIRS[0].to_string(),
        }
    }

    /// The directory the next rebuild beside the live views builds in.
    pub fn views_beside(&self) -> (String, PathBuf) {
        let live = self.views_name();
        let name = VIEWS_DIRS
            .iter()
            .find(|n| **n != live)
            .unwrap_or(&VIEWS_DIRS[1])
            .to_string();
        let dir = self.root.join(&name);
        (name, dir)
    }

    fn views_pointer(&self) -> PathBuf {
        self.root.join("views.current")
    }

    /// Make `name` the live views from now on, atomically and durably.
    pub fn point_views_at(&self, name: &str) -> Result<()> {
        let io = |what: &str, e: std::io::Error| {
            LedgerError::io(format!("{what} {}", self.views_pointer().display()), e)
        };
        let tmp = self.root.join("views.current.tmp");
        {
            use std::io::Write;
            let mut f = crate::log::private_files::create(&tmp).map_err(|e| io("create", e))?;
            f.write_all(name.as_bytes())
                .and_then(|_| f.sync_all())
                .map_err(|e| io("write", e))?;
        }
        std::fs::rename(&tmp, self.views_pointer()).map_err(|e| io("replace", e))?;
        File::open(&self.root)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("sync the directory of", e))
    }
    /// Where views that could not be trusted are moved (the last set only).
    pub fn views_set_aside(&self) -> PathBuf {
        self.root.join("views.set-aside")
    }
    /// Task keys (see `crate::erasure`): beside the content store.
    pub fn keys(&self) -> PathBuf {
        self.root.join("keys")
    }
    /// The task keys of this data dir.
    pub fn key_store(&self) -> Result<Arc<KeyStore>> {
        Ok(Arc::new(KeyStore::open(self.keys())?))
    }
    pub fn blobs(&self) -> PathBuf {
        self.root.join("blobs")
    }
    pub fn lock_path(&self) -> PathBuf {
        self.root.join("LOCK")
    }

    /// Take the data directory for this process: the embedded log and sled
    /// both assume a single writer.
    pub fn lock(&self) -> Result<File> {
        use fs2::FileExt;
        crate::log::private_files::create_dir_all(&self.root)
            .map_err(|e| LedgerError::io(format!("create data dir {}", self.root.display()), e))?;
        if let Some(warning) = crate::log::private_files::shared_warning(&self.root) {
            tracing::warn!("{warning}");
        }
        let f = crate::log::private_files::create(&self.lock_path())
            .map_err(|e| LedgerError::io(format!("create {}", self.lock_path().display()), e))?;
        // A lock just let go can linger for a moment: a process that forks
        // while another thread holds the lock file open shares it until the
        // child execs (the descriptor is close-on-exec). So a held lock is
        // asked again for half a second before the dir is said to be in use.
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(500);
        while f.try_lock_exclusive().is_err() {
            if std::time::Instant::now() >= deadline {
                return Err(LedgerError::DataDirInUse(self.root.clone()));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Ok(f)
    }
}

/// A panic caught while opening or reading the views, with its message.
#[derive(Debug)]
pub(crate) struct Panicked(pub String);

impl std::fmt::Display for Panicked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Run `f`, turning a panic into its message (sled panics on some kinds of
/// damage instead of returning an error).
pub(crate) fn guarded<T>(f: impl FnOnce() -> T) -> std::result::Result<T, Panicked> {
    catch_unwind(AssertUnwindSafe(f)).map_err(|panic| {
        Panicked(
            panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into()),
        )
    })
}

/// Why views were not trusted, or an error that is not theirs to mend
/// (the log's, or views another process holds).
enum Distrust {
    Views(String),
    Log(LedgerError),
}

/// The views of `dd`, caught up with `log`: the ones on disk when they can
/// be trusted, else fresh ones projected from the log (the old ones are
/// moved to [`DataDir::views_set_aside`]).
pub(crate) fn open_views(
    dd: &DataDir,
    log: &dyn Log,
    keys: &Arc<KeyStore>,
    scope: Option<&BTreeSet<u32>>,
) -> Result<Views> {
    let why = match trusted_views(&dd.views(), log, keys, scope) {
        Ok(views) => return Ok(views),
        Err(Distrust::Log(e)) => return Err(e),
        Err(Distrust::Views(why)) => why,
    };
    let aside = dd.views_set_aside();
    tracing::warn!(
        "{why}; the views are set aside in {} and projected again from the log",
        aside.display()
    );
    if aside.exists() {
        // An earlier set-aside is kept under its own name, not replaced:
        // it may be what an operator still means to look at.
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let older = aside.with_extension(format!("set-aside.{ms}"));
        match std::fs::rename(&aside, &older) {
            Ok(()) => tracing::warn!("the views set aside before are kept in {}", older.display()),
            Err(_) => {
                let _ = std::fs::remove_dir_all(&aside);
            }
        }
    }
    if std::fs::rename(dd.views(), &aside).is_err() && dd.views().exists() {
        std::fs::remove_dir_all(dd.views()).map_err(|e| {
            LedgerError::io(
                format!("set aside or remove the views {}", dd.views().display()),
                e,
            )
        })?;
    }
    match trusted_views(&dd.views(), log, keys, scope) {
        Ok(views) => Ok(views),
        Err(Distrust::Log(e)) => Err(e),
        Err(Distrust::Views(why)) => Err(crate::views::ViewError::Inconsistent(format!(
            "fresh views in {} failed too: {why}",
            dd.views().display()
        ))
        .into()),
    }
}

/// Open the views in `dir` and catch them up with the log, or say why they
/// cannot be trusted.
fn trusted_views(
    dir: &Path,
    log: &dyn Log,
    keys: &Arc<KeyStore>,
    scope: Option<&BTreeSet<u32>>,
) -> std::result::Result<Views, Distrust> {
    let mut views = match guarded(|| Views::open(dir)) {
        Ok(Ok(v)) => v,
        Ok(Err(ViewError::StaleFormat { found, want })) => {
            return Err(Distrust::Views(format!(
                "the views are in format {found}, this build keeps format {want}"
            )))
        }
        // Busy is not damaged: never set aside views someone holds.
        Ok(Err(e @ ViewError::Locked(_))) => return Err(Distrust::Log(e.into())),
        Ok(Err(e)) => return Err(Distrust::Views(format!("the views cannot be opened: {e}"))),
        Err(panic) => {
            return Err(Distrust::Views(format!(
                "the views are damaged (sled panicked opening them: {panic})"
            )))
        }
    };
    views.set_keys(keys.clone());
    let checked = check_and_catch_up(&views, log, scope);
    match checked {
        Ok(()) => Ok(views),
        Err(e) => {
            // Closing damaged views may fail the same way; it must not
            // take the process with it.
            let _ = guarded(move || drop(views));
            Err(e)
        }
    }
}

/// Refuse views that claim more than the log holds, then project what
/// they have not seen yet.
fn check_and_catch_up(
    views: &Views,
    log: &dyn Log,
    scope: Option<&BTreeSet<u32>>,
) -> std::result::Result<(), Distrust> {
    let topics = [Topic::Registry, Topic::Ledger, Topic::Checkpoints];
    let ends = log
        .end_offsets_of(&topics)
        .map_err(|e| Distrust::Log(e.into()))?;
    for (topic, ends) in topics.into_iter().zip(ends) {
        for (p, end) in ends.into_iter().enumerate() {
            match guarded(|| views.offset(topic, p as u32)) {
                Ok(Ok(projected)) if projected <= end => {}
                Ok(Ok(projected)) => {
                    return Err(Distrust::Views(format!(
                        "the views hold {topic}/{p} up to offset {projected} but the log ends at \
                         {end} (its tail was cut or lost)"
                    )))
                }
                Ok(Err(e)) => return Err(Distrust::Views(format!("the views are damaged: {e}"))),
                Err(panic) => {
                    return Err(Distrust::Views(format!(
                        "the views are damaged (sled panicked reading them: {panic})"
                    )))
                }
            }
        }
    }
    match guarded(|| crate::projector::project_all(log, views, scope, &|_| {})) {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(LedgerError::Views(e))) => {
            Err(Distrust::Views(format!("the views are damaged: {e}")))
        }
        Ok(Err(e)) => Err(Distrust::Log(e)),
        Err(panic) => Err(Distrust::Views(format!(
            "the views are damaged (sled panicked projecting into them: {panic})"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_views_pointer_names_only_the_two_view_directories() {
        let d = tempfile::tempdir().unwrap();
        let dd = DataDir::new(d.path());
        assert_eq!(dd.views_name(), "views");
        assert_eq!(dd.views_beside().0, "views.b");
        dd.point_views_at("views.b").unwrap();
        assert_eq!(dd.views(), d.path().join("views.b"));
        assert_eq!(dd.views_beside().0, "views");
        // Whatever else the file says, the views stay inside the data dir.
        for hostile in ["../../etc", "/tmp", "views.b/../../x", "", "views.c"] {
            std::fs::write(d.path().join("views.current"), hostile).unwrap();
            assert_eq!(dd.views_name(), "views", "{hostile:?}");
        }
        std::fs::write(d.path().join("views.current"), "views.b\n").unwrap();
        assert_eq!(dd.views_name(), "views.b");
    }

    /// A lock let go a moment later (a forked child holding it until it
    /// execs) is waited for; one held on is refused as in use.
    #[test]
    fn a_lock_let_go_at_once_is_taken_and_one_held_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let dd = DataDir::new(d.path());
        let held = dd.lock().unwrap();
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(150));
            drop(held);
        });
        let taken = dd.lock().expect("taken once the holder let go");
        letting_go.join().unwrap();
        let started = std::time::Instant::now();
        assert!(matches!(dd.lock(), Err(LedgerError::DataDirInUse(_))));
        assert!(started.elapsed() >= std::time::Duration::from_millis(500));
        drop(taken);
    }
}
