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
//! under the lock the current e-tag is compared and the new bytes published by
//! rename. A missing object answers `Precondition`, as on S3.

use std::fs::OpenOptions;
use std::sync::Arc;

use async_trait::async_trait;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, PutResult, Result,
};

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
        let mut lock_path = object_path.into_os_string();
        lock_path.push("#0");
        let lock = tokio::task::spawn_blocking(move || {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)?;
            file.lock()?;
            Ok::<_, std::io::Error>(file)
        })
        .await
        .map_err(generic)?;
        let lock = match lock {
            Ok(lock) => lock,
            // No directory, so no object: the precondition cannot hold.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(object_store::Error::Precondition {
                    path: location.to_string(),
                    source: Box::new(e),
                })
            }
            Err(e) => return Err(generic(e)),
        };
        let current = match inner.head(location).await {
            Ok(meta) => meta.e_tag,
            Err(object_store::Error::NotFound { path, source }) => {
                return Err(object_store::Error::Precondition { path, source })
            }
            Err(e) => return Err(e),
        };
        if current.as_deref() != Some(expected_tag.as_str()) {
            return Err(object_store::Error::Precondition {
                path: location.to_string(),
                source: format!("e-tag {current:?} does not match {expected_tag:?}").into(),
            });
        }
        let overwrite = PutOptions {
            mode: PutMode::Overwrite,
            ..opts
        };
        let result = inner.put_opts(location, payload, overwrite).await;
        drop(lock);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::UpdateVersion;

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
