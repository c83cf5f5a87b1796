//! The local-directory store: `object_store`'s `LocalFileSystem` with fsync on,
//! plus the `If-Match` compare-and-swap it lacks.
//!
//! Durability: every put writes a staged file, `fsync`s it, publishes it by
//! hard link (create-only) or rename (overwrite) and `fsync`s the directory
//! before returning, so an acknowledged write is on disk. A failed fsync
//! before publishing is an ordinary error (nothing was published); after
//! publishing, the file and directory are synced again, and if that fails the
//! answer is `DurabilityUnknown` (readable now, maybe gone after a power
//! loss), which writers neither retry nor settle by reading back. Tests
//! inject fsync failures through the `fault-hooks` feature.
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
//! E-tags are `LocalFileSystem`'s `"<inode>-<mtime µs>-<size>"` with the
//! object's version appended: `"<inode>-<mtime µs>-<size>-<version>"`. Kernel
//! mtimes are coarse (a clock tick, or a second on some file systems), and
//! file systems reuse inodes, so the first three parts alone can repeat an
//! old version's e-tag and let a stale compare-and-swap succeed. The version
//! is kept in the lock file and bumped under its exclusive lock by every
//! replace (and by a create or overwrite once a lock file exists); reads take
//! the lock shared, so a file and its version are always read together.

use std::fs::OpenOptions;
use std::io::Write;
use std::sync::Arc;

use async_trait::async_trait;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ObjectStore, PutMode, PutOptions, PutPayload, PutResult, Result,
};

use strata_manifest::store::DurabilityUnknown;

use super::durable_fs::{
    already_exists, create_dirs_durably, generic, link_unnamed, local_etag, open_unnamed,
    sync_published, unnamed_unsupported, Hooks,
};
use super::layer::{Layered, StoreLayer};
use super::recycle::{count_created, PoolLimits, Recycler, Reused};
use super::sync_point::{SyncPoint, SyncWrite};

/// The compare-and-swap layer over a `LocalFileSystem`.
#[derive(Debug)]
pub struct LocalCas {
    fs: Arc<LocalFileSystem>,
    hooks: Hooks,
    recycler: Arc<Recycler>,
}

impl LocalCas {
    /// The pool of deleted objects' files that creates reuse.
    pub fn recycler(&self) -> &Arc<Recycler> {
        &self.recycler
    }
}

#[cfg(feature = "fault-hooks")]
impl LocalCas {
    /// The store's fsync fault hooks (test builds only).
    pub fn fsync_faults(&self) -> &Arc<super::fsync_faults::FsyncFaults> {
        &self.hooks.faults
    }
}

/// Opens (creating if needed) a local-directory store rooted at `dir`.
pub fn local_store(dir: &std::path::Path) -> std::io::Result<Layered<LocalCas>> {
    local_store_with(dir, PoolLimits::default())
}

/// [`local_store`] with other bounds for its pool of reusable files.
pub fn local_store_with(
    dir: &std::path::Path,
    pool: PoolLimits,
) -> std::io::Result<Layered<LocalCas>> {
    std::fs::create_dir_all(dir)?;
    let fs = LocalFileSystem::new_with_prefix(dir)
        .map_err(std::io::Error::other)?
        .with_fsync(true);
    let fs = Arc::new(fs);
    Ok(Layered::new(
        fs.clone(),
        LocalCas {
            fs,
            hooks: Hooks::default(),
            recycler: Arc::new(Recycler::open_with(dir, pool)?),
        },
    ))
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
        let object_path = self.fs.path_to_filesystem(location)?;
        let location_text = location.to_string();
        if let PutMode::Update(expected) = &opts.mode {
            let Some(expected_tag) = expected.e_tag.clone() else {
                return Err(generic(std::io::Error::other(
                    "conditional update needs an e-tag",
                )));
            };
            let hooks = self.hooks.clone();
            return tokio::task::spawn_blocking(move || {
                replace_if_match(
                    &object_path,
                    &expected_tag,
                    &payload,
                    &location_text,
                    &hooks,
                )
            })
            .await
            .map_err(generic)?;
        }
        // A create or an overwrite of an object that has been replaced before
        // (it has a lock file) takes its lock and bumps its version, so that a
        // re-created or overwritten object never repeats an older e-tag.
        let create = matches!(opts.mode, PutMode::Create);
        let tmpfile = create && opts.attributes.is_empty();
        let staged = payload.clone();
        let hooks = self.hooks.clone();
        let recycler = self.recycler.clone();
        let (lock, version, created) = tokio::task::spawn_blocking(move || {
            let (lock, version) = bump_if_locked(&object_path, create, &location_text)?;
            let created = tmpfile
                .then(|| create_only(&recycler, &object_path, &staged, &location_text, &hooks))
                .flatten();
            Ok::<_, object_store::Error>((lock, version, created))
        })
        .await
        .map_err(generic)??;
        let written = match created {
            Some(result) => result,
            None if create => self.create_by_staging(inner, location, payload, opts).await,
            None => inner.put_opts(location, payload, opts).await,
        };
        drop(lock);
        let mut result = written?;
        result.e_tag = result.e_tag.map(|tag| versioned_etag(&tag, version));
        Ok(result)
    }

    /// Moves the object's file into the reuse pool when it fits
    /// ([`Recycler::recycle`]); otherwise deletes it.
    async fn delete(&self, inner: &Arc<dyn ObjectStore>, location: &Path) -> Result<()> {
        let object_path = self.fs.path_to_filesystem(location)?;
        let recycler = self.recycler.clone();
        let recycled = tokio::task::spawn_blocking(move || recycler.recycle(&object_path))
            .await
            .map_err(generic)?;
        if recycled {
            return Ok(());
        }
        object_store::ObjectStoreExt::delete(inner.as_ref(), location).await
    }

    async fn get_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        options: GetOptions,
    ) -> Result<GetResult> {
        let object_path = self.fs.path_to_filesystem(location)?;
        // `If-Match` / `If-None-Match` compare this layer's e-tags, not
        // `LocalFileSystem`'s: they are checked here.
        let mut plain = options;
        let conditions = GetOptions {
            if_match: plain.if_match.take(),
            if_none_match: plain.if_none_match.take(),
            ..GetOptions::default()
        };
        // The shared lock keeps every replace (exclusive, from before its
        // version changes until after the new file is published) out while
        // the file's metadata and its version are read. Most objects (WAL
        // objects, segments, runs) were never replaced and have no lock file:
        // for them this is one failed open, done here; waiting for the lock
        // is done on a blocking thread.
        let (lock, version) = match ObjectLock::open_shared(&object_path).map_err(generic)? {
            None => (None, 0),
            Some(lock) => tokio::task::spawn_blocking(move || {
                lock.file.lock_shared()?;
                let version = lock.version()?;
                Ok::<_, std::io::Error>((Some(lock), version))
            })
            .await
            .map_err(generic)?
            .map_err(generic)?,
        };
        let got = inner.get_opts(location, plain).await;
        drop(lock);
        let mut got = got?;
        got.meta.e_tag = got.meta.e_tag.map(|tag| versioned_etag(&tag, version));
        conditions.check_preconditions(&got.meta)?;
        Ok(got)
    }
}

/// Takes an existing lock file of `object_path` exclusively and bumps the
/// version before a create or an overwrite (a create of an object that
/// exists is refused without a bump). `(None, 0)` when there is no lock file.
fn bump_if_locked(
    object_path: &std::path::Path,
    create: bool,
    location: &str,
) -> Result<(Option<ObjectLock>, u64)> {
    let Some(lock) = ObjectLock::open(object_path, false).map_err(generic)? else {
        return Ok((None, 0));
    };
    lock.file.lock().map_err(generic)?;
    if create && object_path.exists() {
        return Err(object_store::Error::AlreadyExists {
            path: location.to_string(),
            source: "object exists".into(),
        });
    }
    let version = lock.version().map_err(generic)? + 1;
    lock.set_version(version).map_err(generic)?;
    Ok((Some(lock), version))
}

/// An object's lock file, `<object>#0` (a name `LocalFileSystem` never
/// lists): every compare-and-swap of the object holds it exclusively, and it
/// holds the object's version, which every replace increments. It is created
/// by the first replace and never removed.
struct ObjectLock {
    file: std::fs::File,
}

/// Bytes of a stored version: 20 decimal digits and a newline.
const VERSION_BYTES: usize = 21;

impl ObjectLock {
    fn path(object_path: &std::path::Path) -> std::path::PathBuf {
        let mut path = object_path.as_os_str().to_owned();
        path.push("#0");
        path.into()
    }

    /// Opens the lock file, creating it if `create`; `None` when it (or its
    /// directory) does not exist and is not to be created.
    fn open(object_path: &std::path::Path, create: bool) -> std::io::Result<Option<ObjectLock>> {
        let opened = OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .open(Self::path(object_path));
        match opened {
            Ok(file) => Ok(Some(ObjectLock { file })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens the lock file for reading (to be locked shared), `None` for an
    /// object that was never replaced.
    fn open_shared(object_path: &std::path::Path) -> std::io::Result<Option<ObjectLock>> {
        match OpenOptions::new().read(true).open(Self::path(object_path)) {
            Ok(file) => Ok(Some(ObjectLock { file })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// The stored version; an empty lock file (or one written before
    /// versions existed) is version 0.
    fn version(&self) -> std::io::Result<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; VERSION_BYTES];
        let mut len = 0;
        while len < buf.len() {
            match self.file.read_at(&mut buf[len..], len as u64)? {
                0 => break,
                n => len += n,
            }
        }
        let text = std::str::from_utf8(&buf[..len]).unwrap_or("?").trim();
        if text.is_empty() {
            return Ok(0);
        }
        text.parse().map_err(|_| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("lock file holds {text:?}, not a version"),
            )
        })
    }

    fn set_version(&self, version: u64) -> std::io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file
            .write_all_at(format!("{version:020}\n").as_bytes(), 0)
    }
}

/// This store's e-tag: `LocalFileSystem`'s `"<inode>-<mtime>-<size>"` with
/// the object's version appended, `"<inode>-<mtime>-<size>-<version>"`.
fn versioned_etag(tag: &str, version: u64) -> String {
    match tag.strip_suffix('"') {
        Some(open) => format!("{open}-{version:x}\""),
        None => format!("{tag}-{version:x}"),
    }
}

impl LocalCas {
    /// `LocalFileSystem`'s create-only path (staging file, hard link, fsync).
    /// It cannot say whether an error came before or after the object was
    /// published: an error with the object present is reported as of unknown
    /// durability (it may be ours, published, with a failed fsync), never as
    /// a retryable error whose retry would read the object back as written.
    async fn create_by_staging(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let error = match inner.put_opts(location, payload, opts).await {
            Err(e @ object_store::Error::Generic { .. }) => e,
            other => return other,
        };
        match self.fs.path_to_filesystem(location).map(|p| p.exists()) {
            Ok(true) => Err(DurabilityUnknown {
                path: location.to_string(),
                reason: format!("the create failed after the object appeared: {error}"),
            }
            .into_store_error("LocalCas")),
            _ => Err(error),
        }
    }
}

fn precondition(path: &str, reason: String) -> object_store::Error {
    object_store::Error::Precondition {
        path: path.to_string(),
        source: reason.into(),
    }
}

/// Create-only write through a pooled file, else a new one
/// ([`create_with_tmpfile`]); `None` when neither path applies here.
fn create_only(
    recycler: &Arc<Recycler>,
    object_path: &std::path::Path,
    payload: &PutPayload,
    location: &str,
    hooks: &Hooks,
) -> Option<Result<PutResult>> {
    let (created, reused) = match recycler.reuse(object_path, payload, location, hooks) {
        Reused::Done(result) => (Some(result), true),
        Reused::NotReused => (
            create_with_tmpfile(object_path, payload, location, hooks),
            false,
        ),
    };
    if matches!(created, Some(Ok(_))) {
        count_created(reused);
    }
    created
}

/// Create-only write through an unnamed `O_TMPFILE` file and `linkat`.
/// `None` when the filesystem does not support `O_TMPFILE` (use the fallback).
fn create_with_tmpfile(
    object_path: &std::path::Path,
    payload: &PutPayload,
    location: &str,
    hooks: &Hooks,
) -> Option<Result<PutResult>> {
    let dir = object_path.parent()?;
    let open = || open_unnamed(dir);
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
        hooks.before_sync(SyncWrite::Create, SyncPoint::File)?;
        file.sync_data()
    })();
    if let Err(e) = written {
        return Some(Err(generic(e)));
    }
    if let Err(e) = link_unnamed(&file, object_path) {
        return Some(Err(match e.kind() {
            std::io::ErrorKind::AlreadyExists => already_exists(location, e),
            _ => generic(e),
        }));
    }
    if let Err(e) = sync_published(hooks, SyncWrite::Create, &file, dir, location) {
        return Some(Err(e));
    }
    // The linked file's own metadata: the object's (nothing can replace a
    // create-only object but an unconditional overwrite).
    Some(match file.metadata() {
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
    if unnamed_unsupported(&e) {
        return None;
    }
    Some(Err(generic(e)))
}

/// Compare-and-swap of one file under its lock (blocking).
fn replace_if_match(
    object_path: &std::path::Path,
    expected_tag: &str,
    payload: &PutPayload,
    location: &str,
    hooks: &Hooks,
) -> Result<PutResult> {
    let lock = match ObjectLock::open(object_path, true) {
        Ok(Some(lock)) => lock,
        // No directory, so no object: the precondition cannot hold.
        Ok(None) => return Err(precondition(location, "object does not exist".into())),
        Err(e) => return Err(generic(e)),
    };
    lock.file.lock().map_err(generic)?;
    let current = match std::fs::metadata(object_path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(precondition(location, "object does not exist".into()))
        }
        Err(e) => return Err(generic(e)),
    };
    let version = lock.version().map_err(generic)?;
    let current_tag = versioned_etag(&local_etag(&current), version);
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
    let staged = (|| -> std::io::Result<std::fs::File> {
        let mut file = std::fs::File::create(&staging)?;
        for chunk in payload.iter() {
            file.write_all(chunk)?;
        }
        hooks.before_sync(SyncWrite::Replace, SyncPoint::File)?;
        file.sync_all()?;
        Ok(file)
    })();
    let file = match staged {
        Ok(file) => file,
        Err(e) => {
            // Nothing was published: the object is as it was.
            let _ = std::fs::remove_file(&staging);
            return Err(generic(e));
        }
    };
    // The version changes before the new file is published (readers hold
    // the lock shared, so none sees the one without the other). If the
    // rename then fails, the object is unchanged under a new version: a
    // holder of its e-tag loses a compare-and-swap it could have won, never
    // the other way round.
    let published = lock
        .set_version(version + 1)
        .and_then(|()| std::fs::rename(&staging, object_path));
    if let Err(e) = published {
        let _ = std::fs::remove_file(&staging);
        return Err(generic(e));
    }
    let dir = object_path.parent().unwrap_or(std::path::Path::new("/"));
    sync_published(hooks, SyncWrite::Replace, &file, dir, location)?;
    // The published file's own metadata: the lock keeps every other
    // conditional replace out, so it is the object's current version.
    let metadata = file.metadata().map_err(generic)?;
    Ok(PutResult {
        e_tag: Some(versioned_etag(&local_etag(&metadata), version + 1)),
        version: None,
        extensions: Default::default(),
    })
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

    fn update_on(tag: Option<String>) -> PutOptions {
        PutOptions {
            mode: PutMode::Update(UpdateVersion {
                e_tag: tag,
                version: None,
            }),
            ..Default::default()
        }
    }

    fn create_only() -> PutOptions {
        PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        }
    }

    /// Sets a file's mtime as a file system with coarse timestamps would
    /// leave it: every version of the object gets the same one.
    fn force_mtime(path: &std::path::Path) {
        let file = OpenOptions::new().write(true).open(path).unwrap();
        file.set_modified(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000))
            .unwrap();
    }

    /// With a coarse clock every version has the same mtime, and a file
    /// system that reuses inodes (ext4 hands a replaced file's inode to the
    /// next one) gives a later version of the same size the inode of an
    /// earlier one: the e-tag must still never repeat, and a compare-and-swap
    /// on any earlier e-tag must fail.
    #[tokio::test]
    async fn e_tags_never_repeat_under_a_coarse_clock() {
        let dir = tempfile::tempdir().unwrap();
        let store = local_store(dir.path()).unwrap();
        let path = Path::from("shards/a/manifest");
        let file = dir.path().join("shards/a/manifest");
        store
            .put_opts(&path, PutPayload::from_static(b"version-0"), create_only())
            .await
            .unwrap();
        force_mtime(&file);
        let mut tags = vec![store.head(&path).await.unwrap().e_tag];
        for v in 1..=8 {
            let current = tags.last().unwrap().clone();
            let payload = PutPayload::from(format!("version-{v}").into_bytes());
            let put = store
                .put_opts(&path, payload, update_on(current))
                .await
                .unwrap();
            assert_eq!(put.e_tag, store.head(&path).await.unwrap().e_tag);
            force_mtime(&file);
            let head = store.head(&path).await.unwrap();
            let got = store.get(&path).await.unwrap();
            assert_eq!(got.meta.e_tag, head.e_tag, "get and head agree");
            assert!(
                !tags.contains(&head.e_tag),
                "version {v} repeats an e-tag: {tags:?}"
            );
            tags.push(head.e_tag);
        }
        for stale in &tags[..tags.len() - 1] {
            let attempt = store
                .put_opts(
                    &path,
                    PutPayload::from_static(b"stale"),
                    update_on(stale.clone()),
                )
                .await;
            assert!(
                matches!(attempt, Err(object_store::Error::Precondition { .. })),
                "a compare-and-swap on stale e-tag {stale:?} must fail: {attempt:?}"
            );
        }
        let body = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(&body[..], b"version-8");
    }

    /// A deleted and re-created object never repeats an e-tag of the object
    /// it replaced, even with the same inode, size and (coarse) mtime.
    #[tokio::test]
    async fn a_recreated_object_does_not_repeat_an_old_e_tag() {
        let dir = tempfile::tempdir().unwrap();
        let store = local_store(dir.path()).unwrap();
        let path = Path::from("shards/a/manifest");
        let file = dir.path().join("shards/a/manifest");
        let first = store
            .put_opts(&path, PutPayload::from_static(b"one"), create_only())
            .await
            .unwrap();
        store
            .put_opts(
                &path,
                PutPayload::from_static(b"two"),
                update_on(first.e_tag),
            )
            .await
            .unwrap();
        force_mtime(&file);
        let old = store.head(&path).await.unwrap().e_tag;
        let mut seen = vec![old.clone()];
        for _ in 0..4 {
            store.delete(&path).await.unwrap();
            let created = store
                .put_opts(&path, PutPayload::from_static(b"two"), create_only())
                .await
                .unwrap();
            assert_eq!(created.e_tag, store.head(&path).await.unwrap().e_tag);
            force_mtime(&file);
            let tag = store.head(&path).await.unwrap().e_tag;
            assert!(!seen.contains(&tag), "{tag:?} repeats one of {seen:?}");
            seen.push(tag);
        }
        let stale = store
            .put_opts(&path, PutPayload::from_static(b"x"), update_on(old))
            .await;
        assert!(matches!(
            stale,
            Err(object_store::Error::Precondition { .. })
        ));
    }

    /// Conditional reads compare this store's e-tags (with the version).
    #[tokio::test]
    async fn conditional_gets_use_the_versioned_e_tag() {
        let dir = tempfile::tempdir().unwrap();
        let store = local_store(dir.path()).unwrap();
        let path = Path::from("shards/a/manifest");
        let put = store
            .put_opts(&path, PutPayload::from_static(b"one"), create_only())
            .await
            .unwrap();
        let tag = put.e_tag.unwrap();
        assert!(tag.ends_with("-0\""), "{tag}");
        let matching = object_store::GetOptions {
            if_match: Some(tag.clone()),
            ..Default::default()
        };
        assert!(store.get_opts(&path, matching).await.is_ok());
        let unchanged = object_store::GetOptions {
            if_none_match: Some(tag.clone()),
            ..Default::default()
        };
        assert!(matches!(
            store.get_opts(&path, unchanged).await,
            Err(object_store::Error::NotModified { .. })
        ));
        let stale = object_store::GetOptions {
            if_match: Some("\"1-2-3-0\"".into()),
            ..Default::default()
        };
        assert!(matches!(
            store.get_opts(&path, stale).await,
            Err(object_store::Error::Precondition { .. })
        ));
    }

    /// A staging file left by a crash (`<name>#9<pid>`), a partial file of
    /// the fallback path (`<name>#1`) and an old lock file are never listed,
    /// and neither a compare-and-swap nor a create-only put trips over them.
    #[tokio::test]
    async fn torn_staging_files_are_invisible_and_harmless() {
        let dir = tempfile::tempdir().unwrap();
        let store = local_store(dir.path()).unwrap();
        let manifest = Path::from("shards/a/manifest");
        let first = store
            .put_opts(&manifest, PutPayload::from_static(b"one"), create_only())
            .await
            .unwrap();
        let folder = dir.path().join("shards/a");
        std::fs::create_dir_all(folder.join("wal")).unwrap();
        std::fs::write(
            folder.join(format!("manifest#9{}", std::process::id())),
            b"torn",
        )
        .unwrap();
        std::fs::write(folder.join("manifest#94242424"), b"torn by another process").unwrap();
        std::fs::write(folder.join("wal/00000000000000000003#1"), b"partial").unwrap();
        let listed: Vec<_> = futures::StreamExt::collect::<Vec<_>>(store.list(None)).await;
        assert_eq!(listed.len(), 1, "{listed:?}");
        let second = store
            .put_opts(
                &manifest,
                PutPayload::from_static(b"two"),
                update_on(first.e_tag),
            )
            .await
            .unwrap();
        store
            .put_opts(
                &manifest,
                PutPayload::from_static(b"three"),
                update_on(second.e_tag),
            )
            .await
            .unwrap();
        let wal = Path::from("shards/a/wal/00000000000000000003");
        store
            .put_opts(&wal, PutPayload::from_static(b"whole"), create_only())
            .await
            .unwrap();
        assert_eq!(
            &store.get(&wal).await.unwrap().bytes().await.unwrap()[..],
            b"whole"
        );
        assert_eq!(
            &store.get(&manifest).await.unwrap().bytes().await.unwrap()[..],
            b"three"
        );
        let listed: Vec<_> = futures::StreamExt::collect::<Vec<_>>(store.list(None)).await;
        assert_eq!(listed.len(), 2, "{listed:?}");
    }

    fn files_in(dir: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// A file fsync that fails before the new version is published leaves
    /// the object as it was (no staging file left behind), and the write can
    /// be tried again.
    #[tokio::test]
    async fn a_failed_fsync_before_publishing_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = local_store(dir.path()).unwrap();
        let faults = store.layer().fsync_faults().clone();
        let path = Path::from("shards/a/manifest");
        let first = store
            .put_opts(&path, PutPayload::from_static(b"one"), create_only())
            .await
            .unwrap();
        faults.fail(SyncWrite::Replace, SyncPoint::File, 1, 1);
        let failed = store
            .put_opts(
                &path,
                PutPayload::from_static(b"two"),
                update_on(first.e_tag.clone()),
            )
            .await;
        assert!(failed.is_err());
        assert!(!manifest_cas_is_durability_unknown(&failed));
        assert_eq!(
            &store.get(&path).await.unwrap().bytes().await.unwrap()[..],
            b"one"
        );
        assert_eq!(
            files_in(&dir.path().join("shards/a")),
            ["manifest", "manifest#0"]
        );
        store
            .put_opts(
                &path,
                PutPayload::from_static(b"two"),
                update_on(first.e_tag),
            )
            .await
            .unwrap();

        let wal = Path::from("shards/a/wal/00000000000000000000");
        faults.fail(SyncWrite::Create, SyncPoint::File, 1, 1);
        assert!(store
            .put_opts(&wal, PutPayload::from_static(b"w"), create_only())
            .await
            .is_err());
        assert!(matches!(
            store.head(&wal).await,
            Err(object_store::Error::NotFound { .. })
        ));
        store
            .put_opts(&wal, PutPayload::from_static(b"w"), create_only())
            .await
            .unwrap();
        assert_eq!(faults.injected(), 2);
    }

    fn manifest_cas_is_durability_unknown<T>(result: &Result<T>) -> bool {
        result
            .as_ref()
            .err()
            .is_some_and(strata_manifest::store::is_durability_unknown)
    }

    /// After a published file's directory fsync fails, the store syncs the
    /// file and the directory again: success answers Ok; a second failure
    /// answers `DurabilityUnknown` (never a plain, retryable error, whose
    /// retry would read the object back and call it written).
    #[tokio::test]
    async fn a_failed_directory_fsync_is_synced_again_or_durability_unknown() {
        let dir = tempfile::tempdir().unwrap();
        let store = local_store(dir.path()).unwrap();
        let faults = store.layer().fsync_faults().clone();
        let wal = |slot: u64| Path::from(format!("shards/a/wal/{slot:020}"));

        faults.fail(SyncWrite::Create, SyncPoint::Dir, 1, 1);
        let once = store
            .put_opts(&wal(0), PutPayload::from_static(b"a"), create_only())
            .await;
        assert!(once.is_ok(), "synced on the second try: {once:?}");

        faults.fail(SyncWrite::Create, SyncPoint::Dir, 1, 2);
        let twice = store
            .put_opts(&wal(1), PutPayload::from_static(b"b"), create_only())
            .await;
        assert!(manifest_cas_is_durability_unknown(&twice), "{twice:?}");
        assert!(faults.spent());

        let path = Path::from("shards/a/manifest");
        let first = store
            .put_opts(&path, PutPayload::from_static(b"one"), create_only())
            .await
            .unwrap();
        faults.fail(SyncWrite::Replace, SyncPoint::Dir, 1, 1);
        let second = store
            .put_opts(
                &path,
                PutPayload::from_static(b"two"),
                update_on(first.e_tag),
            )
            .await
            .unwrap();
        assert_eq!(second.e_tag, store.head(&path).await.unwrap().e_tag);
        faults.fail(SyncWrite::Replace, SyncPoint::Dir, 1, 2);
        let unknown = store
            .put_opts(
                &path,
                PutPayload::from_static(b"three"),
                update_on(second.e_tag),
            )
            .await;
        assert!(manifest_cas_is_durability_unknown(&unknown), "{unknown:?}");
        assert!(faults.spent());
    }
}
