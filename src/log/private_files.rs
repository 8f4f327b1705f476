//! The ledger's files are its owner's alone: a data dir holds every
//! agent's context, blobs and trails, so directories are created 0700 and
//! files 0600 whatever the umask, and a data dir others can read is
//! reported when it is opened.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::Path;

#[cfg(unix)]
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};

/// Mode of the directories the ledger creates.
pub const DIR_MODE: u32 = 0o700;
/// Mode of the files the ledger creates.
pub const FILE_MODE: u32 = 0o600;

/// Create `path` and any missing parents, each 0700. Directories that
/// already exist keep their mode.
pub fn create_dir_all(path: &Path) -> io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    b.mode(DIR_MODE);
    b.create(path)
}

/// Options that create a file 0600.
pub fn options() -> OpenOptions {
    let mut o = OpenOptions::new();
    #[cfg(unix)]
    o.mode(FILE_MODE);
    o
}

/// Create (or truncate) a file 0600 for writing.
pub fn create(path: &Path) -> io::Result<File> {
    options().write(true).create(true).truncate(true).open(path)
}

/// Write `bytes` to a new or truncated 0600 file.
pub fn write(path: &Path, bytes: impl AsRef<[u8]>) -> io::Result<()> {
    use io::Write;
    create(path)?.write_all(bytes.as_ref())
}

/// Make what another library created under `root` (sled's files) 0700
/// for directories and 0600 for files.
pub fn restrict_tree(root: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        let mut stack = vec![root.to_path_buf()];
        while let Some(dir) = stack.pop() {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(DIR_MODE))?;
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                if entry.file_type()?.is_dir() {
                    stack.push(entry.path());
                } else {
                    std::fs::set_permissions(
                        entry.path(),
                        std::fs::Permissions::from_mode(FILE_MODE),
                    )?;
                }
            }
        }
    }
    #[cfg(not(unix))]
    let _ = root;
    Ok(())
}

/// Why a data dir is not private, when others can read or enter it.
pub fn shared_warning(root: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        let mode = std::fs::metadata(root).ok()?.permissions().mode() & 0o777;
        (mode & 0o077 != 0).then(|| {
            format!(
                "data dir {} has mode {mode:o}: other users of this host can read agents' \
                 context, blobs and trails; run `chmod 700 {}`",
                root.display(),
                root.display()
            )
        })
    }
    #[cfg(not(unix))]
    {
        let _ = root;
        None
    }
}
