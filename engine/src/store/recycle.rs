//! Reuse of deleted objects' files by create-only puts, on the local store.
//!
//! Every new file costs the file system an inode, and on ext4 allocating one
//! gets expensive right after many were freed: without a journal the
//! allocator skips every inode freed in the last minute or more, one cached
//! block lookup each, so after a burst of deletes a create costs 0.5–0.9 ms of
//! CPU where an overwrite of an existing file costs 0.05 ms (measured in
//! docs/BENCHMARKS.md). The engine deletes WAL objects, after `gc_grace`, at
//! the rate it creates them, so in steady state every WAL object would pay
//! for the one deleted before it.
//!
//! Here a delete moves the object's file into a pool instead, and a
//! create-only put takes a pooled file, writes the new bytes over it, syncs
//! them and renames it under the object's name with `RENAME_NOREPLACE`, then
//! syncs the directory: no inode is allocated or freed.
//!
//! Until deletes fill it (the first `gc_grace` of a run, or a shard that
//! only grows), the pool is refilled with empty files by a thread of its
//! own, at `SCHED_IDLE` priority, whenever a put leaves it below half its
//! target: the inodes are still allocated, but off the path of any put and
//! on a core nothing else wants. The target starts at 16
//! files and doubles each time a put finds the pool empty, up to
//! [`SPARE_FILES_MAX`].
//!
//! Invariants:
//!
//! * A pooled file has one writer. Pool names belong to one store instance
//!   (`#recycled/<pid>-<instance>#<seq>`, `seq` never repeats), and a put
//!   takes the name out of the pool before opening it.
//! * A pooled file is never an object: its name ends in `#` and digits, which
//!   listings skip, and it becomes one only by an atomic rename that refuses
//!   to replace an existing name (create-only, as before).
//! * Publishing is as durable as a new file: the bytes are `fdatasync`ed
//!   before the rename and the directory `fsync`ed after it
//!   ([`super::local`]'s `sync_published`).
//! * The pool is bounded: at most [`POOL_FILES_MAX`] files and
//!   [`POOL_BYTES_MAX`] bytes, files of at most [`POOL_FILE_BYTES_MAX`];
//!   anything else is deleted as before.
//! * Files another instance left (a crashed process's) are deleted when a
//!   store opens, never adopted: a live instance may still be writing into
//!   one it took, and adopting it would give that inode a second writer.
//!   Deleting it is harmless: the writer's rename finds the name gone, and
//!   its put writes a new file instead.
//!
//! A delete here does not wait: a read that opened the file before it was
//! pooled could see a later object's bytes if it read on after the reuse.
//! The engine deletes only what no manifest has referenced for `gc_grace`
//! (minutes), and every object it reads names its slot and carries a CRC,
//! so such a read would fail its checks, never pass as other data.

use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use object_store::{PutPayload, PutResult, Result};
use parking_lot::Mutex;

use super::durable_fs::{
    already_exists, create_dirs_durably, generic, link_unnamed, local_etag, open_unnamed,
    rename_no_replace, sync_published, unnamed_unsupported, Hooks,
};
use super::sync_point::{SyncPoint, SyncWrite};

/// The pool's folder under the store's root (a name no object path uses
/// as its first part: object names never start with `#`).
pub const POOL_DIR: &str = "#recycled";
/// Most files kept for reuse.
pub const POOL_FILES_MAX: usize = 8192;
/// Most bytes the pooled files may hold together.
pub const POOL_BYTES_MAX: u64 = 64 << 20;
/// Larger files are deleted, not pooled.
pub const POOL_FILE_BYTES_MAX: u64 = 4 << 20;

/// The pool's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolLimits {
    pub files_max: usize,
    pub bytes_max: u64,
    /// Larger files are deleted, not pooled.
    pub file_bytes_max: u64,
    /// Most empty files a refill keeps ready (see [`Recycler::refill`]).
    pub spare_max: usize,
}

impl Default for PoolLimits {
    fn default() -> Self {
        PoolLimits {
            files_max: POOL_FILES_MAX,
            bytes_max: POOL_BYTES_MAX,
            file_bytes_max: POOL_FILE_BYTES_MAX,
            spare_max: SPARE_FILES_MAX,
        }
    }
}

/// Most empty files a refill keeps ready.
pub const SPARE_FILES_MAX: usize = 1024;
/// Empty files the first refill creates; each put that finds the pool
/// empty doubles it, up to [`PoolLimits::spare_max`].
const SPARE_FILES_FIRST: usize = 16;

/// Instances opened by this process (part of every pool name).
static INSTANCES: AtomicU64 = AtomicU64::new(0);

/// What every pool of this process did (for metrics).
static COUNTS: Counts = Counts {
    reused: AtomicU64::new(0),
    created: AtomicU64::new(0),
    pooled: AtomicU64::new(0),
    spares: AtomicU64::new(0),
    files: AtomicU64::new(0),
};

struct Counts {
    reused: AtomicU64,
    created: AtomicU64,
    pooled: AtomicU64,
    spares: AtomicU64,
    /// Files in every live pool now.
    files: AtomicU64,
}

/// What the local stores' pools of this process did so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolCounts {
    /// Local stores opened (none: the other counts mean nothing).
    pub stores: u64,
    /// Create-only puts that wrote into a pooled file.
    pub reused: u64,
    /// Create-only puts that found no pooled file and made a new one.
    pub created: u64,
    /// Deletes that moved the file into a pool.
    pub pooled: u64,
    /// Empty files refills made.
    pub spares: u64,
    /// Files in the pools now.
    pub files: u64,
}

/// Counts a create-only put that succeeded: through a pooled file
/// (`reused`) or a new one.
pub(super) fn count_created(reused: bool) {
    let counter = if reused {
        &COUNTS.reused
    } else {
        &COUNTS.created
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The counts of every local store's pool in this process.
pub fn pool_counts() -> PoolCounts {
    let load = |n: &AtomicU64| n.load(Ordering::Relaxed);
    PoolCounts {
        stores: load(&INSTANCES),
        reused: load(&COUNTS.reused),
        created: load(&COUNTS.created),
        pooled: load(&COUNTS.pooled),
        spares: load(&COUNTS.spares),
        files: load(&COUNTS.files),
    }
}

/// Files of deleted objects, kept for reuse by create-only puts.
#[derive(Debug)]
pub struct Recycler {
    dir: PathBuf,
    /// `<pid>-<instance>`: the prefix of this instance's pool names.
    owner: String,
    next_seq: AtomicU64,
    limits: PoolLimits,
    pool: Mutex<Pool>,
    /// Set when the file system refuses `RENAME_NOREPLACE`.
    disabled: AtomicBool,
    /// Files a refill brings the pool up to.
    spare_target: AtomicUsize,
    /// Set while a refill thread runs.
    refilling: AtomicBool,
}

#[derive(Debug, Default)]
struct Pool {
    files: Vec<Pooled>,
    /// Bytes of the pooled files plus those being moved in.
    bytes: u64,
    /// Files being moved in (counted against the bounds already).
    arriving: usize,
}

#[derive(Debug, Clone)]
struct Pooled {
    seq: u64,
    bytes: u64,
}

impl Pool {
    /// Adds a file (its bytes counted here unless already reserved by
    /// `arriving`, see [`Recycler::recycle`]).
    fn push(&mut self, pooled: Pooled) {
        self.files.push(pooled);
        COUNTS.files.fetch_add(1, Ordering::Relaxed);
    }

    fn pop(&mut self) -> Option<Pooled> {
        let pooled = self.files.pop()?;
        self.bytes -= pooled.bytes;
        COUNTS.files.fetch_sub(1, Ordering::Relaxed);
        Some(pooled)
    }
}

impl Drop for Recycler {
    fn drop(&mut self) {
        let left = self.pool.get_mut().files.len() as u64;
        COUNTS.files.fetch_sub(left, Ordering::Relaxed);
    }
}

/// What [`Recycler::reuse`] did.
pub enum Reused {
    /// The object was written from a pooled file (or the put failed).
    Done(Result<PutResult>),
    /// No pooled file could be used: write a new file.
    NotReused,
}

impl Recycler {
    /// Opens the pool under `root` with `limits`, deleting what other
    /// instances left.
    pub fn open_with(root: &FsPath, limits: PoolLimits) -> std::io::Result<Recycler> {
        let dir = root.join(POOL_DIR);
        std::fs::create_dir_all(&dir)?;
        let instance = INSTANCES.fetch_add(1, Ordering::Relaxed);
        let recycler = Recycler {
            dir,
            owner: format!("{}-{instance}", std::process::id()),
            next_seq: AtomicU64::new(0),
            limits,
            pool: Mutex::new(Pool::default()),
            disabled: AtomicBool::new(false),
            spare_target: AtomicUsize::new(SPARE_FILES_FIRST.min(limits.spare_max)),
            refilling: AtomicBool::new(false),
        };
        recycler.remove_leftovers()?;
        Ok(recycler)
    }

    /// Deletes every pooled file (none of them is this new instance's).
    fn remove_leftovers(&self) -> std::io::Result<()> {
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            match std::fs::remove_file(entry.path()) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }

    fn path_of(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("{}#{seq}", self.owner))
    }

    /// Files pooled now.
    pub fn pooled_files(&self) -> usize {
        self.pool.lock().files.len()
    }

    /// Whether a refill thread is creating files now.
    pub fn refilling(&self) -> bool {
        self.refilling.load(Ordering::Acquire)
    }

    /// Moves the file at `object_path` into the pool (blocking). `false`
    /// when it was not moved (pool full, file too large, missing, or the
    /// rename failed): delete it the ordinary way.
    pub fn recycle(&self, object_path: &FsPath) -> bool {
        if self.disabled.load(Ordering::Relaxed) {
            return false;
        }
        let bytes = match std::fs::symlink_metadata(object_path) {
            Ok(meta) if meta.is_file() && meta.len() <= self.limits.file_bytes_max => meta.len(),
            _ => return false,
        };
        {
            let mut pool = self.pool.lock();
            let full = pool.files.len() + pool.arriving >= self.limits.files_max
                || pool.bytes + bytes > self.limits.bytes_max;
            if full {
                return false;
            }
            pool.arriving += 1;
            pool.bytes += bytes;
        }
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let moved = std::fs::rename(object_path, self.path_of(seq)).is_ok();
        let mut pool = self.pool.lock();
        pool.arriving -= 1;
        if moved {
            pool.push(Pooled { seq, bytes });
            COUNTS.pooled.fetch_add(1, Ordering::Relaxed);
        } else {
            pool.bytes -= bytes;
        }
        moved
    }

    /// Takes a pooled file out of the pool, `None` when it is empty. A
    /// pool running low is refilled in the background; an empty one also
    /// makes the next refills larger.
    fn take(self: &Arc<Self>) -> Option<Pooled> {
        let (taken, left) = {
            let mut pool = self.pool.lock();
            let taken = pool.pop();
            (taken, pool.files.len())
        };
        let target = self.spare_target.load(Ordering::Relaxed);
        if taken.is_none() {
            let doubled = (target * 2).min(self.limits.spare_max);
            self.spare_target.store(doubled, Ordering::Relaxed);
        }
        if left < target / 2 {
            self.refill();
        }
        taken
    }

    /// Starts a thread that creates empty pool files until the pool holds
    /// `spare_target` (unless one runs already). Creating them costs the
    /// same inodes a put would have, but off the path of any put, on a core
    /// the request path may not be using.
    fn refill(self: &Arc<Self>) {
        if self.refilling.swap(true, Ordering::AcqRel) {
            return;
        }
        let recycler = self.clone();
        let started = std::thread::Builder::new()
            .name("strata-pool-refill".into())
            .spawn(move || {
                run_when_idle();
                recycler.create_spares();
                recycler.refilling.store(false, Ordering::Release);
            });
        if started.is_err() {
            self.refilling.store(false, Ordering::Release);
        }
    }

    /// Creates empty pool files up to `spare_target` and the pool's
    /// bounds; stops at the first error.
    fn create_spares(&self) {
        let target = self.spare_target.load(Ordering::Relaxed);
        for _ in 0..target {
            {
                let mut pool = self.pool.lock();
                if pool.files.len() + pool.arriving >= target.min(self.limits.files_max) {
                    return;
                }
                pool.arriving += 1;
            }
            let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
            let created = create_spare(&self.dir, &self.path_of(seq));
            let mut pool = self.pool.lock();
            pool.arriving -= 1;
            if created.is_err() {
                return;
            }
            pool.push(Pooled { seq, bytes: 0 });
            COUNTS.spares.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Puts a file taken out by [`Recycler::take`] back, unchanged but for
    /// bytes written over it that nothing will read.
    fn put_back(&self, pooled: Pooled) {
        let mut pool = self.pool.lock();
        pool.bytes += pooled.bytes;
        pool.push(pooled);
    }

    /// Create-only write of `payload` at `object_path` through a pooled
    /// file (blocking).
    pub(super) fn reuse(
        self: &Arc<Self>,
        object_path: &FsPath,
        payload: &PutPayload,
        location: &str,
        hooks: &Hooks,
    ) -> Reused {
        if self.disabled.load(Ordering::Relaxed) {
            return Reused::NotReused;
        }
        let Some(mut pooled) = self.take() else {
            return Reused::NotReused;
        };
        let from = self.path_of(pooled.seq);
        let file = match std::fs::OpenOptions::new().write(true).open(&from) {
            Ok(file) => file,
            // Removed by another instance opening the store: write anew.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Reused::NotReused,
            Err(e) => return Reused::Done(Err(generic(e))),
        };
        if let Err(e) = write_synced(&file, payload, hooks) {
            // Nothing was published; the file's bytes are unknown now.
            let _ = std::fs::remove_file(&from);
            return Reused::Done(Err(generic(e)));
        }
        pooled.bytes = payload.content_length() as u64;
        match rename_into_folder(&from, object_path) {
            Ok(()) => Reused::Done(published(&file, object_path, location, hooks)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                self.put_back(pooled);
                Reused::Done(Err(already_exists(location, e)))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // The pooled file is gone (another instance removed it).
                Reused::NotReused
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                // The file system cannot rename create-only: stop pooling.
                self.disabled.store(true, Ordering::Relaxed);
                let _ = std::fs::remove_file(&from);
                Reused::NotReused
            }
            Err(e) => {
                self.put_back(pooled);
                Reused::Done(Err(generic(e)))
            }
        }
    }
}

/// Renames `from` to `object_path` without replacing it, creating the
/// object's folder (durably) if that is what was missing.
fn rename_into_folder(from: &FsPath, object_path: &FsPath) -> std::io::Result<()> {
    let Err(e) = rename_no_replace(from, object_path) else {
        return Ok(());
    };
    let folder = object_path.parent().unwrap_or(FsPath::new("/"));
    if e.kind() != std::io::ErrorKind::NotFound || folder.exists() {
        return Err(e);
    }
    create_dirs_durably(folder)?;
    rename_no_replace(from, object_path)
}

/// Lowers the calling thread to `SCHED_IDLE`: it runs only on a core
/// nothing else wants, so a refill never delays the request path. (If no
/// core is ever idle, the pool runs dry and puts allocate their own files,
/// as they would without it.) Failure to lower it is harmless.
fn run_when_idle() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid `sched_param`; pid 0 names this thread.
    let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
}

/// Creates the empty file `path` in `dir`. The inode is allocated as an
/// unnamed `O_TMPFILE` file and then linked, because allocating it can take
/// ext4 most of a millisecond, and creating it by name would hold the
/// folder's lock all that time, against the renames that take files out.
fn create_spare(dir: &FsPath, path: &FsPath) -> std::io::Result<()> {
    let file = match open_unnamed(dir) {
        Ok(file) => file,
        Err(e) if unnamed_unsupported(&e) => {
            return std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map(drop);
        }
        Err(e) => return Err(e),
    };
    link_unnamed(&file, path)
}

/// Writes `payload` over the start of `file`, cuts it to the payload's
/// length and syncs the data (and the length).
fn write_synced(file: &std::fs::File, payload: &PutPayload, hooks: &Hooks) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut at = 0u64;
    for chunk in payload.iter() {
        file.write_all_at(chunk, at)?;
        at += chunk.len() as u64;
    }
    file.set_len(at)?;
    hooks.before_sync(SyncWrite::Create, SyncPoint::File)?;
    file.sync_data()
}

/// After the rename: sync the folder, answer the object's e-tag.
fn published(
    file: &std::fs::File,
    object_path: &FsPath,
    location: &str,
    hooks: &Hooks,
) -> Result<PutResult> {
    let folder = object_path.parent().unwrap_or(FsPath::new("/"));
    sync_published(hooks, SyncWrite::Create, file, folder, location)?;
    let metadata = file.metadata().map_err(generic)?;
    Ok(PutResult {
        e_tag: Some(local_etag(&metadata)),
        version: None,
        extensions: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{local_store, local_store_with};
    use object_store::path::Path;
    use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions};
    use std::os::unix::fs::MetadataExt;

    /// Pooling without refills, so that the pool holds exactly what was
    /// deleted.
    fn no_refills() -> PoolLimits {
        PoolLimits {
            spare_max: 0,
            ..PoolLimits::default()
        }
    }

    fn create_only() -> PutOptions {
        PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        }
    }

    fn inode(root: &FsPath, location: &str) -> u64 {
        std::fs::metadata(root.join(location)).unwrap().ino()
    }

    async fn listed(store: &dyn ObjectStore) -> Vec<String> {
        let all: Vec<_> = futures::StreamExt::collect::<Vec<_>>(store.list(None)).await;
        let mut names: Vec<String> = all
            .into_iter()
            .map(|m| m.unwrap().location.to_string())
            .collect();
        names.sort();
        names
    }

    async fn body(store: &dyn ObjectStore, location: &str) -> Vec<u8> {
        let got = store.get(&Path::from(location)).await.unwrap();
        got.bytes().await.unwrap().to_vec()
    }

    /// A deleted object's file becomes the next created object (same
    /// inode), holding exactly the new bytes; the pool is never listed and
    /// a create over an existing name still fails, leaving both as they were.
    #[tokio::test]
    async fn a_deleted_objects_file_is_reused_create_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = local_store_with(dir.path(), no_refills()).unwrap();
        let put = |name: &str, bytes: &'static [u8]| {
            let store = &store;
            let path = Path::from(name);
            async move {
                store
                    .put_opts(&path, PutPayload::from_static(bytes), create_only())
                    .await
            }
        };
        put("shards/a/wal/1", b"the first object, longer than the next")
            .await
            .unwrap();
        let first = inode(dir.path(), "shards/a/wal/1");
        store.delete(&Path::from("shards/a/wal/1")).await.unwrap();
        assert!(matches!(
            store.head(&Path::from("shards/a/wal/1")).await,
            Err(object_store::Error::NotFound { .. })
        ));
        assert_eq!(store.layer().recycler().pooled_files(), 1);
        assert!(listed(&store).await.is_empty(), "the pool is never listed");

        let created = put("shards/a/wal/2", b"second").await.unwrap();
        assert_eq!(inode(dir.path(), "shards/a/wal/2"), first, "reused");
        assert_eq!(body(&store, "shards/a/wal/2").await, b"second");
        let head = store.head(&Path::from("shards/a/wal/2")).await.unwrap();
        assert_eq!(head.size, 6);
        assert_eq!(created.e_tag, head.e_tag);
        assert_eq!(store.layer().recycler().pooled_files(), 0);

        put("shards/a/wal/3", b"third").await.unwrap();
        store.delete(&Path::from("shards/a/wal/3")).await.unwrap();
        let again = put("shards/a/wal/2", b"not this").await;
        assert!(
            matches!(again, Err(object_store::Error::AlreadyExists { .. })),
            "{again:?}"
        );
        assert_eq!(body(&store, "shards/a/wal/2").await, b"second");
        assert_eq!(store.layer().recycler().pooled_files(), 1, "put back");
        put("shards/b/new/folder/4", b"fourth").await.unwrap();
        assert_eq!(body(&store, "shards/b/new/folder/4").await, b"fourth");
        assert_eq!(store.layer().recycler().pooled_files(), 0);
        assert_eq!(
            listed(&store).await,
            ["shards/a/wal/2", "shards/b/new/folder/4"]
        );
    }

    /// Files larger than the per-file bound, or past the pool's bounds,
    /// are deleted.
    #[test]
    fn the_pool_is_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let limits = PoolLimits {
            files_max: 3,
            bytes_max: 100,
            file_bytes_max: 40,
            spare_max: 0,
        };
        let recycler = Recycler::open_with(dir.path(), limits).unwrap();
        let file = |name: &str, bytes: usize| {
            let path = dir.path().join(name);
            std::fs::write(&path, vec![7u8; bytes]).unwrap();
            path
        };
        assert!(!recycler.recycle(&file("big", 41)), "over the file bound");
        assert!(recycler.recycle(&file("a", 40)));
        assert!(recycler.recycle(&file("b", 40)));
        assert!(!recycler.recycle(&file("c", 40)), "over the byte bound");
        assert!(recycler.recycle(&file("d", 20)));
        assert!(!recycler.recycle(&file("e", 0)), "over the file count");
        assert_eq!(recycler.pooled_files(), 3);
        assert!(!recycler.recycle(&dir.path().join("missing")));
        let pooled = std::fs::read_dir(dir.path().join(POOL_DIR))
            .unwrap()
            .count();
        assert_eq!(pooled, 3);
    }

    /// A store opening removes what other instances pooled; an instance
    /// whose pooled file was removed writes a new file instead.
    #[tokio::test]
    async fn leftovers_are_removed_and_a_missing_pooled_file_is_harmless() {
        let dir = tempfile::tempdir().unwrap();
        let first = local_store_with(dir.path(), no_refills()).unwrap();
        let paths: Vec<Path> = (0..3)
            .map(|slot| Path::from(format!("shards/a/wal/{slot}")))
            .collect();
        for path in &paths {
            first
                .put_opts(path, PutPayload::from_static(b"x"), create_only())
                .await
                .unwrap();
        }
        for path in &paths {
            first.delete(path).await.unwrap();
        }
        let pool = dir.path().join(POOL_DIR);
        assert_eq!(std::fs::read_dir(&pool).unwrap().count(), 3);
        let second = local_store_with(dir.path(), no_refills()).unwrap();
        assert_eq!(std::fs::read_dir(&pool).unwrap().count(), 0);
        assert_eq!(first.layer().recycler().pooled_files(), 3);
        let path = Path::from("shards/a/wal/9");
        first
            .put_opts(&path, PutPayload::from_static(b"whole"), create_only())
            .await
            .unwrap();
        assert_eq!(body(&second, "shards/a/wal/9").await, b"whole");
        assert_eq!(listed(&second).await, ["shards/a/wal/9"]);
    }

    /// A failed fsync of a reused file publishes nothing, and the put can
    /// be tried again.
    #[tokio::test]
    async fn a_failed_sync_of_a_reused_file_publishes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = local_store_with(dir.path(), no_refills()).unwrap();
        let faults = store.layer().fsync_faults().clone();
        let old = Path::from("shards/a/wal/0");
        store
            .put_opts(&old, PutPayload::from_static(b"old bytes"), create_only())
            .await
            .unwrap();
        store.delete(&old).await.unwrap();
        let path = Path::from("shards/a/wal/1");
        faults.fail(SyncWrite::Create, SyncPoint::File, 1, 1);
        let failed = store
            .put_opts(&path, PutPayload::from_static(b"new"), create_only())
            .await;
        assert!(failed.is_err());
        assert!(matches!(
            store.head(&path).await,
            Err(object_store::Error::NotFound { .. })
        ));
        assert_eq!(
            std::fs::read_dir(dir.path().join(POOL_DIR))
                .unwrap()
                .count(),
            0,
            "the file of unknown bytes is dropped"
        );
        store
            .put_opts(&path, PutPayload::from_static(b"new"), create_only())
            .await
            .unwrap();
        assert_eq!(body(&store, "shards/a/wal/1").await, b"new");
        assert_eq!(faults.injected(), 1);
    }

    /// Many creates and deletes at once: every object reads back as
    /// written (no pooled file is written by two puts), and the pool's
    /// accounting matches the files on disk.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_creates_and_deletes_never_share_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(local_store(dir.path()).unwrap());
        let mut tasks = Vec::new();
        for writer in 0..16u32 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                for round in 0..24u32 {
                    let name = format!("shards/w{writer}/wal/{round}");
                    let path = Path::from(name.as_str());
                    let bytes = format!("{writer}:{round}:").repeat(1 + (round as usize % 5));
                    store
                        .put_opts(&path, PutPayload::from(bytes.clone()), create_only())
                        .await
                        .unwrap();
                    let got = store.get(&path).await.unwrap().bytes().await.unwrap();
                    assert_eq!(got, bytes.as_bytes(), "{name}");
                    if round % 3 != 2 {
                        store.delete(&path).await.unwrap();
                    }
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let recycler = store.layer().recycler().clone();
        until(|| !recycler.refilling()).await;
        let on_disk = std::fs::read_dir(dir.path().join(POOL_DIR))
            .unwrap()
            .count();
        assert_eq!(store.layer().recycler().pooled_files(), on_disk);
        assert_eq!(listed(store.as_ref()).await.len(), 16 * 8);
    }

    /// Waits (at most 10 s) until `done`.
    async fn until(done: impl Fn() -> bool) {
        for _ in 0..1000 {
            if done() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("condition not reached within 10 s");
    }

    /// A put that finds the pool empty starts a refill; later creates then
    /// use the refilled files (their inodes), not new ones.
    #[tokio::test]
    async fn an_empty_pool_is_refilled_and_creates_use_the_refill() {
        let dir = tempfile::tempdir().unwrap();
        let store = local_store(dir.path()).unwrap();
        let recycler = store.layer().recycler().clone();
        let put = |slot: u32| {
            let store = &store;
            let path = Path::from(format!("shards/a/wal/{slot}"));
            async move {
                store
                    .put_opts(&path, PutPayload::from_static(b"bytes"), create_only())
                    .await
                    .unwrap()
            }
        };
        put(0).await;
        until(|| !recycler.refilling() && recycler.pooled_files() > 0).await;
        let spares: std::collections::HashSet<u64> = std::fs::read_dir(dir.path().join(POOL_DIR))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().ino())
            .collect();
        assert_eq!(spares.len(), recycler.pooled_files());
        put(1).await;
        assert!(spares.contains(&inode(dir.path(), "shards/a/wal/1")));
        assert_eq!(body(&store, "shards/a/wal/1").await, b"bytes");
        assert_eq!(listed(&store).await, ["shards/a/wal/0", "shards/a/wal/1"]);
    }
}
