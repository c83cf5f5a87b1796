//! The local-directory store: `object_store`'s `LocalFileSystem` with fsync on,
//! plus the `If-Match` compare-and-swap it lacks.
//!
//! Durability: every put writes a staged file, `fsync`s it, publishes it by
//! hard link (create-only) or rename (overwrite) and `fsync`s the directory
//! before returning, so an acknowledged write is on disk.
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
