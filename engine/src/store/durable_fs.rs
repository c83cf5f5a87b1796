//! File-system steps the local store ([`super::local`]) and its reuse pool
//! ([`super::recycle`]) share: the fsync fault hooks, the directory sync
//! after publishing a file (with its `DurabilityUnknown` answer), durable
//! creation of missing directories, and `LocalFileSystem`'s e-tag of a file.
//!
//! Invariant: a file is published (linked or renamed under an object's name)
//! only after its bytes are synced, and a put answers Ok only after the
//! directory that names it is synced too.

use object_store::Result;
use strata_manifest::store::DurabilityUnknown;

use super::sync_point::{SyncPoint, SyncWrite};

/// Fault hooks compiled into test builds only (feature `fault-hooks`).
#[derive(Debug, Clone, Default)]
pub(super) struct Hooks {
    #[cfg(feature = "fault-hooks")]
    pub(super) faults: std::sync::Arc<super::fsync_faults::FsyncFaults>,
}

impl Hooks {
    /// Runs before each fsync a write depends on: a test may fail it.
    pub(super) fn before_sync(&self, write: SyncWrite, point: SyncPoint) -> std::io::Result<()> {
        #[cfg(feature = "fault-hooks")]
        self.faults.check(write, point)?;
        let _ = (write, point);
        Ok(())
    }
}

pub(super) fn generic(
    source: impl std::error::Error + Send + Sync + 'static,
) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalCas",
        source: Box::new(source),
    }
}

/// After a new file was published under the object's name: `fsync` the
/// directory. If that fails the object's durability is unknown (it is
/// readable now and may be gone after a power loss), so the file and the
/// directory are synced again; if that fails too, the answer is
/// [`DurabilityUnknown`], which no writer retries or settles by reading back.
pub(super) fn sync_published(
    hooks: &Hooks,
    write: SyncWrite,
    file: &std::fs::File,
    dir: &std::path::Path,
    location: &str,
) -> Result<()> {
    let sync_dir = || -> std::io::Result<()> {
        hooks.before_sync(write, SyncPoint::Dir)?;
        std::fs::File::open(dir)?.sync_all()
    };
    let Err(first) = sync_dir() else {
        return Ok(());
    };
    tracing::warn!(%location, error = %first, "directory fsync after publishing failed; syncing again");
    let again = (|| {
        hooks.before_sync(write, SyncPoint::File)?;
        file.sync_all()?;
        sync_dir()
    })();
    match again {
        Ok(()) => Ok(()),
        Err(second) => Err(DurabilityUnknown {
            path: location.to_string(),
            reason: format!("directory fsync failed ({first}), and again ({second})"),
        }
        .into_store_error("LocalCas")),
    }
}

/// The e-tag `LocalFileSystem` reports for a file, without the version
/// (checked against it in tests).
pub(super) fn local_etag(metadata: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    let mtime = metadata
        .modified()
        .ok()
        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
        .unwrap_or_default()
        .as_micros();
    format!("\"{:x}-{:x}-{:x}\"", metadata.ino(), mtime, metadata.len())
}

/// Creates missing directories and fsyncs each parent whose entries changed.
pub(super) fn create_dirs_durably(dir: &std::path::Path) -> std::io::Result<()> {
    let mut missing = Vec::new();
    let mut at = Some(dir);
    while let Some(d) = at {
        if d.exists() {
            break;
        }
        missing.push(d.to_path_buf());
        at = d.parent();
    }
    std::fs::create_dir_all(dir)?;
    let synced = missing.iter().rev().try_for_each(|d| match d.parent() {
        Some(parent) => std::fs::File::open(parent)?.sync_all(),
        None => Ok(()),
    });
    if synced.is_err() {
        // Undo what can be undone (empty directories), so that a retry
        // creates and syncs them again instead of finding them present.
        for d in &missing {
            let _ = std::fs::remove_dir(d);
        }
    }
    synced
}

/// A path as the C string a system call takes.
fn c_path(path: &std::path::Path) -> std::io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)
}

/// The error of a system call that answered `rc`, if it failed.
fn os_result(rc: libc::c_int) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Names the unnamed (`O_TMPFILE`) `file` `to` with `linkat`, which fails
/// with `AlreadyExists` when `to` exists.
pub(super) fn link_unnamed(file: &std::fs::File, to: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::io::AsRawFd;
    let from = c_path(std::path::Path::new(&format!(
        "/proc/self/fd/{}",
        file.as_raw_fd()
    )))?;
    let to = c_path(to)?;
    // SAFETY: both paths are NUL-terminated C strings that outlive the call.
    os_result(unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    })
}

/// `renameat2(from, to, RENAME_NOREPLACE)`: fails with `AlreadyExists`
/// when `to` exists.
pub(super) fn rename_no_replace(
    from: &std::path::Path,
    to: &std::path::Path,
) -> std::io::Result<()> {
    let from = c_path(from)?;
    let to = c_path(to)?;
    // SAFETY: both paths are NUL-terminated C strings that outlive the call.
    os_result(unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    })
}

/// Opens an unnamed file in `dir` (Linux's `O_TMPFILE`), to be written and
/// then named with [`link_unnamed`]: no name exists until it is whole.
pub(super) fn open_unnamed(dir: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .mode(0o644)
        .custom_flags(libc::O_TMPFILE)
        .open(dir)
}

/// Whether [`open_unnamed`] failed because the file system has no
/// `O_TMPFILE`.
pub(super) fn unnamed_unsupported(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EOPNOTSUPP | libc::EISDIR | libc::EINVAL)
    )
}

/// The answer to a create-only put whose name exists.
pub(super) fn already_exists(location: &str, e: std::io::Error) -> object_store::Error {
    object_store::Error::AlreadyExists {
        path: location.to_string(),
        source: Box::new(e),
    }
}
