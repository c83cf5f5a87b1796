//! The local-directory store: `object_store`'s `LocalFileSystem` with fsync on,
//! plus the `If-Match` compare-and-swap it lacks.
//!
//! Durability: every put writes a staged file, `fsync`s it, publishes it by
//! hard link (create-only) or rename (overwrite) and `fsync`s the directory
//! before returning, so an acknowledged write is on disk.
//!
//! Create-only puts (every WAL object) use Linux's `O_TMPFILE`: an unnamed file
//! in the target directory is written and `fdatasync`ed, then linked under its
//! final name with `linkat`, which fails if the name exists. No staging name is
//! created and unlinked, so each object costs one directory change instead of
//! three (the directory lock and inode allocation dominate the cost of small
//! objects). Where `O_TMPFILE` is unsupported, `LocalFileSystem`'s staging path
//! is used.
//!
//! Compare-and-swap (`PutMode::Update`): an exclusive `flock` on a lock file next
//! to the object (`<name>#0`, a name `LocalFileSystem` never lists) serialises
//! every conditional replace of that object across processes on this host;
//! under the lock the current e-tag is compared and the new bytes written to a
//! staging file, fsynced, and published by rename, then the directory fsynced.
//! A missing object answers `Precondition`, as on S3.
//!
//! E-tags are `LocalFileSystem`'s `"<inode>-<mtime µs>-<size>"`. Kernel mtimes
//! are coarse (a clock tick), so a reused inode with the same size could repeat
//! an old e-tag and let a stale compare-and-swap succeed. Replacements therefore
//! set the new file's mtime strictly after the current version's, so the
//! versions of one object never share an e-tag.

use std::fs::OpenOptions;
use std::io::Write;
use std::sync::Arc;

use async_trait::async_trait;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, PutResult, Result};

use super::layer::{Layered, StoreLayer};

/// The compare-and-swap layer over a `LocalFileSystem`.
#[derive(Debug)]
pub struct LocalCas {
    fs: Arc<LocalFileSystem>,
}

/// Opens (creating if needed) a local-directory store rooted at `dir`.
pub fn local_store(dir: &std::path::Path) -> std::io::Result<Layered<LocalCas>> {
    std::fs::create_dir_all(dir)?;
    let fs = LocalFileSystem::new_with_prefix(dir)
        .map_err(std::io::Error::other)?
        .with_fsync(true);
    let fs = Arc::new(fs);
    Ok(Layered::new(fs.clone(), LocalCas { fs }))
}

fn generic(source: impl std::error::Error + Send + Sync + 'static) -> object_store::Error {
    object_store::Error::Generic {
        store: "LocalCas",
        source: Box::new(source),
    }
}

#[async_trait]
impl StoreLayer for LocalCas {
    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let expected = match &opts.mode {
            PutMode::Update(v) => v.clone(),
            PutMode::Create if opts.attributes.is_empty() => {
                let object_path = self.fs.path_to_filesystem(location)?;
                let location_text = location.to_string();
                let staged = payload.clone();
                let created = tokio::task::spawn_blocking(move || {
                    create_with_tmpfile(&object_path, &staged, &location_text)
                })
                .await
                .map_err(generic)?;
                return match created {
                    Some(result) => result,
                    None => inner.put_opts(location, payload, opts).await,
                };
            }
            _ => return inner.put_opts(location, payload, opts).await,
        };
        let Some(expected_tag) = expected.e_tag else {
            return Err(generic(std::io::Error::other(
                "conditional update needs an e-tag",
            )));
        };
        let object_path = self.fs.path_to_filesystem(location)?;
        let location_text = location.to_string();
        tokio::task::spawn_blocking(move || {
            replace_if_match(&object_path, &expected_tag, &payload, &location_text)
        })
        .await
        .map_err(generic)?
    }
}

fn precondition(path: &str, reason: String) -> object_store::Error {
    object_store::Error::Precondition {
        path: path.to_string(),
        source: reason.into(),
    }
}

/// The e-tag `LocalFileSystem` reports for a file (checked against it in tests).
fn local_etag(metadata: &std::fs::Metadata) -> String {
    use std::os::unix::fs::MetadataExt;
    let mtime = metadata
        .modified()
        .ok()
        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
        .unwrap_or_default()
        .as_micros();
    format!("\"{:x}-{:x}-{:x}\"", metadata.ino(), mtime, metadata.len())
}

/// Create-only write through an unnamed `O_TMPFILE` file and `linkat`.
/// `None` when the filesystem does not support `O_TMPFILE` (use the fallback).
fn create_with_tmpfile(
    object_path: &std::path::Path,
    payload: &PutPayload,
    location: &str,
) -> Option<Result<PutResult>> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::io::AsRawFd;

    let dir = object_path.parent()?;
    let open = || {
        OpenOptions::new()
            .write(true)
            .mode(0o644)
            .custom_flags(libc::O_TMPFILE)
            .open(dir)
    };
    let mut file = match open() {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Err(e) = create_dirs_durably(dir) {
                return Some(Err(generic(e)));
            }
            match open() {
                Ok(f) => f,
                Err(e) => return unsupported_or(e),
            }
        }
        Err(e) => return unsupported_or(e),
    };
    let written = (|| {
        for chunk in payload.iter() {
            file.write_all(chunk)?;
        }
        file.sync_data()
    })();
    if let Err(e) = written {
        return Some(Err(generic(e)));
    }
    let proc_path = CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    let target = CString::new(object_path.as_os_str().as_bytes()).ok()?;
    // SAFETY: both paths are NUL-terminated C strings that outlive the call.
    let linked = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            proc_path.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if linked != 0 {
        let e = std::io::Error::last_os_error();
        return Some(Err(match e.kind() {
            std::io::ErrorKind::AlreadyExists => object_store::Error::AlreadyExists {
                path: location.to_string(),
                source: Box::new(e),
            },
            _ => generic(e),
        }));
    }
    let published = (|| {
        std::fs::File::open(dir)?.sync_all()?;
        std::fs::metadata(object_path)
    })();
    Some(match published {
        Ok(metadata) => Ok(PutResult {
            e_tag: Some(local_etag(&metadata)),
            version: None,
            extensions: Default::default(),
        }),
        Err(e) => Err(generic(e)),
    })
}

/// `None` (use the fallback) when `O_TMPFILE` is not supported here.
fn unsupported_or(e: std::io::Error) -> Option<Result<PutResult>> {
    match e.raw_os_error() {
        Some(libc::EOPNOTSUPP) | Some(libc::EISDIR) | Some(libc::EINVAL) => None,
        _ => Some(Err(generic(e))),
    }
}

/// Creates missing directories and fsyncs each parent whose entries changed.
fn create_dirs_durably(dir: &std::path::Path) -> std::io::Result<()> {
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
    for d in missing.iter().rev() {
        if let Some(parent) = d.parent() {
            std::fs::File::open(parent)?.sync_all()?;
        }
    }
    Ok(())
}

/// Compare-and-swap of one file under its lock (blocking).
fn replace_if_match(
    object_path: &std::path::Path,
    expected_tag: &str,
    payload: &PutPayload,
    location: &str,
) -> Result<PutResult> {
    let mut lock_path = object_path.as_os_str().to_owned();
    lock_path.push("#0");
    let lock = match OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
    {
        Ok(lock) => lock,
        // No directory, so no object: the precondition cannot hold.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(precondition(location, "object does not exist".into()))
        }
        Err(e) => return Err(generic(e)),
    };
    lock.lock().map_err(generic)?;
    let current = match std::fs::metadata(object_path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(precondition(location, "object does not exist".into()))
        }
        Err(e) => return Err(generic(e)),
    };
    let current_tag = local_etag(&current);
    if current_tag != expected_tag {
        return Err(precondition(
            location,
            format!("e-tag {current_tag} does not match {expected_tag}"),
        ));
    }
    // Staging name: `#` + digits, which LocalFileSystem never lists.
    let mut staging = object_path.as_os_str().to_owned();
    staging.push(format!("#9{}", std::process::id()));
    let staging = std::path::PathBuf::from(staging);
    let result = (|| {
        let mut file = std::fs::File::create(&staging)?;
        for chunk in payload.iter() {
            file.write_all(chunk)?;
        }
        let previous = current.modified()?;
        let mtime =
            std::time::SystemTime::now().max(previous + std::time::Duration::from_micros(1));
        file.set_modified(mtime)?;
        file.sync_all()?;
        std::fs::rename(&staging, object_path)?;
        if let Some(dir) = object_path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        std::fs::metadata(object_path)
    })();
    match result {
        Ok(metadata) => Ok(PutResult {
            e_tag: Some(local_etag(&metadata)),
            version: None,
            extensions: Default::default(),
        }),
        Err(e) => {
            let _ = std::fs::remove_file(&staging);
            Err(generic(e))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::{ObjectStoreExt, UpdateVersion};

    #[tokio::test]
    async fn created_objects_are_whole_and_create_only_across_new_directories() {
        let dir = tempfile::tempdir().unwrap();
        let store = local_store(dir.path()).unwrap();
        let create = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let path = Path::from("new/deep/dir/object");
        let payload: PutPayload = vec![
            bytes::Bytes::from_static(b"one-"),
            bytes::Bytes::from_static(b"two"),
        ]
        .into_iter()
        .collect();
        let put = store
            .put_opts(&path, payload, create.clone())
            .await
            .unwrap();
        let head = store.head(&path).await.unwrap();
        assert_eq!(put.e_tag, head.e_tag);
        let body = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(&body[..], b"one-two");
        let again = store
            .put_opts(&path, PutPayload::from_static(b"x"), create)
            .await;
        assert!(matches!(
            again,
            Err(object_store::Error::AlreadyExists { .. })
        ));
        // No stray files: only the object (and no temp names) is listed.
        let listed: Vec<_> = futures::StreamExt::collect::<Vec<_>>(store.list(None)).await;
        assert_eq!(listed.len(), 1);
    }

    #[tokio::test]
    async fn create_only_and_compare_and_swap() {
        let dir = tempfile::tempdir().unwrap();
        let store = local_store(dir.path()).unwrap();
        let path = Path::from("shards/a/manifest");
        let create = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let first = store
            .put_opts(&path, PutPayload::from_static(b"one"), create.clone())
            .await
            .unwrap();
        let again = store
            .put_opts(&path, PutPayload::from_static(b"two"), create)
            .await;
        assert!(matches!(
            again,
            Err(object_store::Error::AlreadyExists { .. })
        ));
        let update = |v: &PutResult| PutOptions {
            mode: PutMode::Update(UpdateVersion {
                e_tag: v.e_tag.clone(),
                version: None,
            }),
            ..Default::default()
        };
        let second = store
            .put_opts(&path, PutPayload::from_static(b"three"), update(&first))
            .await
            .unwrap();
        let stale = store
            .put_opts(&path, PutPayload::from_static(b"four"), update(&first))
            .await;
        assert!(matches!(
            stale,
            Err(object_store::Error::Precondition { .. })
        ));
        store
            .put_opts(&path, PutPayload::from_static(b"five"), update(&second))
            .await
            .unwrap();
        let body = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(&body[..], b"five");
        // The lock file is not an object.
        let listed: Vec<_> = futures::StreamExt::collect::<Vec<_>>(store.list(None)).await;
        assert_eq!(listed.len(), 1);
        let missing = store
            .put_opts(
                &Path::from("nope/x"),
                PutPayload::from_static(b"x"),
                update(&second),
            )
            .await;
        assert!(matches!(
            missing,
            Err(object_store::Error::Precondition { .. })
        ));
    }
}
