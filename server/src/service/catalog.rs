//! The catalog: each project's live stream names, kept compact so that
//! listing never reads one descriptor per stream.
//!
//! A project's catalog is [`BUCKETS`] CAS objects
//! (`registry/<project>/catalog/<bucket:02>.json`); a name lives in the bucket
//! its hash picks, and each bucket holds its entries sorted by name. Creating
//! a stream adds its entry after the descriptor is written, retiring it
//! (delete, expiry) removes it after the descriptor's tombstone; an idempotent
//! create re-adds it, which repairs an entry lost to a crash between the two
//! writes. A page reads buckets in order from the cursor's position, one GET
//! per bucket, so listing a whole project costs at most [`BUCKETS`] GETs per
//! page and never more than one per bucket.
//!
//! This process writes each bucket with one writer at a time, and changes
//! that queue while a write is in flight go out together in the next one
//! (group commit: one read-modify-write per batch, not per change). A writer
//! remembers the version it last read or wrote, so a write is one PUT; every
//! write is still a CAS, and a conflict (another process wrote) reads the
//! bucket again and retries. A change that the remembered version shows as
//! already made is checked against a fresh read before it is skipped (another
//! process, such as another fleet member, may have undone it), so no change
//! is ever skipped on the word of a cached version.

use std::collections::HashMap;
use std::sync::Arc;

use crate::service::names;
use base64::Engine as _;
use object_store::ObjectStore;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use strata_manifest::{
    CasError, CasObject, JsonCodec, JsonLayout, JsonObject, RetryPolicy, Versioned,
};

/// Buckets per project (part of the format: changing it moves names).
pub const BUCKETS: u16 = 16;
/// Format version of bucket objects.
pub const CATALOG_FORMAT: u32 = 1;
/// Longest page.
pub const PAGE_LIMIT_MAX: usize = 1000;
pub const PAGE_LIMIT_DEFAULT: usize = 100;
/// CAS conflicts tolerated in one change before giving up.
const CONFLICT_RETRIES_MAX: usize = 16;

/// One stream in the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CatalogEntry {
    pub name: String,
    pub content_type: String,
    pub created_ms: u64,
    pub incarnation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    pub format: u32,
    /// Sorted by name, names unique.
    pub entries: Vec<CatalogEntry>,
    pub write_token: String,
}

#[derive(Debug, thiserror::Error)]
pub enum BucketError {
    #[error("catalog bucket JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("unsupported catalog bucket format {0}")]
    Format(u32),
    #[error("catalog bucket entries are not sorted and unique")]
    Order,
}

impl JsonObject for Bucket {
    type Error = BucketError;
    const LAYOUT: JsonLayout = JsonLayout::Compact;

    fn write_token(&self) -> [u8; 16] {
        crate::service::write_token::write_token(&self.write_token)
    }

    fn check(&self) -> Result<(), BucketError> {
        if self.format != CATALOG_FORMAT {
            return Err(BucketError::Format(self.format));
        }
        if self.entries.windows(2).any(|w| w[0].name >= w[1].name) {
            return Err(BucketError::Order);
        }
        Ok(())
    }
}

/// The CAS codec of Bucket objects (the generic JSON codec).
pub type BucketCodec = JsonCodec<Bucket>;

pub type CatalogError = CasError<BucketError>;

/// Where a page starts: a bucket, and the last name already listed in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogCursor {
    pub bucket: u16,
    pub after: String,
}

impl CatalogCursor {
    /// `base64url(bucket u16 LE ‖ name)`: it names only what the project's own
    /// token may list anyway.
    pub fn encode(&self) -> String {
        let mut bytes = self.bucket.to_le_bytes().to_vec();
        bytes.extend_from_slice(self.after.as_bytes());
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    }

    pub fn decode(text: &str) -> Option<Self> {
        if text.len() > 4096 {
            return None;
        }
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()?;
        let (head, name) = (bytes.get(..2)?, bytes.get(2..)?);
        let bucket = u16::from_le_bytes([head[0], head[1]]);
        if bucket >= BUCKETS {
            return None;
        }
        Some(CatalogCursor {
            bucket,
            after: String::from_utf8(name.to_vec()).ok()?,
        })
    }
}

/// One page of the catalog.
#[derive(Debug, Clone)]
pub struct CatalogPage {
    pub entries: Vec<CatalogEntry>,
    pub next: Option<CatalogCursor>,
}

/// One change to a bucket.
#[derive(Debug, Clone)]
enum Change {
    /// List an entry (replacing an older incarnation's entry of its name).
    Add(CatalogEntry),
    /// Forget `name` if the listed incarnation is at most `incarnation`.
    Remove { name: String, incarnation: u64 },
}

impl Change {
    fn name(&self) -> &str {
        match self {
            Change::Add(e) => &e.name,
            Change::Remove { name, .. } => name,
        }
    }

    /// Applies the change to sorted `entries`; whether they changed.
    fn apply(&self, entries: &mut Vec<CatalogEntry>) -> bool {
        let at = entries.binary_search_by(|e| e.name.as_str().cmp(self.name()));
        match (self, at) {
            (Change::Add(entry), Ok(i)) if entries[i] == *entry => false,
            (Change::Add(entry), Ok(i)) => {
                entries[i] = entry.clone();
                true
            }
            (Change::Add(entry), Err(i)) => {
                entries.insert(i, entry.clone());
                true
            }
            (Change::Remove { incarnation, .. }, Ok(i))
                if entries[i].incarnation <= *incarnation =>
            {
                entries.remove(i);
                true
            }
            (Change::Remove { .. }, _) => false,
        }
    }
}

/// Why a catalog change failed (shared by every change of its batch).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct CatalogWriteError(String);

type Waiter = tokio::sync::oneshot::Sender<Result<(), CatalogWriteError>>;

/// One bucket's writer: changes queue in `pending`; whoever holds `write`
/// applies everything queued in one CAS (group commit), so concurrent creates
/// in a bucket cost one read-modify-write between them, not one each.
#[derive(Default)]
struct BucketWriter {
    write: tokio::sync::Mutex<()>,
    pending: Mutex<Vec<(Change, Waiter)>>,
    /// The bucket as this process last read or wrote it (changed only under
    /// `write`): a write starts from it instead of a GET, and a batch that
    /// changes nothing costs no request. A stale version (another process
    /// wrote) makes the CAS fail, and the bucket is read again.
    known: Mutex<KnownBucket>,
}

/// What a writer knows of its bucket object.
#[derive(Default, Clone)]
enum KnownBucket {
    #[default]
    Unknown,
    Absent,
    Present(Arc<Versioned<Bucket>>),
}

/// Changes one CAS of a bucket applies at most (the rest wait for the next).
const CHANGES_PER_WRITE_MAX: usize = 4096;

pub struct Catalog {
    store: Arc<dyn ObjectStore>,
    retry: RetryPolicy,
    writers: Mutex<HashMap<(String, u16), Arc<BucketWriter>>>,
    entropy: Arc<dyn strata_engine::Entropy>,
}

impl Catalog {
    pub fn new(
        store: Arc<dyn ObjectStore>,
        retry: RetryPolicy,
        entropy: Arc<dyn strata_engine::Entropy>,
    ) -> Self {
        Catalog {
            store,
            retry,
            writers: Mutex::new(HashMap::new()),
            entropy,
        }
    }

    fn object(&self, project: &str, bucket: u16) -> CasObject<BucketCodec> {
        CasObject::new(
            self.store.clone(),
            names::catalog_bucket(project, bucket),
            self.retry,
        )
    }

    fn writer(&self, project: &str, bucket: u16) -> Arc<BucketWriter> {
        self.writers
            .lock()
            .entry((project.to_string(), bucket))
            .or_default()
            .clone()
    }

    /// Queues `change` on its bucket and returns once a CAS that includes it
    /// landed (or failed).
    async fn submit(&self, project: &str, change: Change) -> Result<(), CatalogWriteError> {
        let bucket = names::catalog_bucket_of(change.name(), BUCKETS);
        let writer = self.writer(project, bucket);
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        writer.pending.lock().push((change, tx));
        // Each turn of the lock writes one batch; ours is in the first batch
        // written after it was queued.
        loop {
            let _turn = writer.write.lock().await;
            if let Ok(answer) = rx.try_recv() {
                return answer;
            }
            let batch: Vec<(Change, Waiter)> = {
                let mut pending = writer.pending.lock();
                let take = pending.len().min(CHANGES_PER_WRITE_MAX);
                pending.drain(..take).collect()
            };
            let changes: Vec<Change> = batch.iter().map(|(c, _)| c.clone()).collect();
            let result = self
                .write_batch(project, bucket, &writer, &changes)
                .await
                .map_err(|e| CatalogWriteError(e.to_string()));
            for (_, waiter) in batch {
                let _ = waiter.send(result.clone());
            }
            if let Ok(answer) = rx.try_recv() {
                return answer;
            }
        }
    }

    /// Applies `changes` to `bucket` in one CAS, starting from the version
    /// `writer` knows (read again on a conflict, and retried).
    async fn write_batch(
        &self,
        project: &str,
        bucket: u16,
        writer: &BucketWriter,
        changes: &[Change],
    ) -> Result<(), CatalogError> {
        let object = self.object(project, bucket);
        let mut attempt = 0;
        loop {
            let known = writer.known.lock().clone();
            let from_memory = !matches!(known, KnownBucket::Unknown);
            let current = match known {
                KnownBucket::Present(c) => Some(c),
                KnownBucket::Absent => None,
                KnownBucket::Unknown => object.load().await?.map(Arc::new),
            };
            let mut entries = current
                .as_ref()
                .map(|c| c.value.entries.clone())
                .unwrap_or_default();
            let changed = changes
                .iter()
                .fold(false, |changed, c| c.apply(&mut entries) | changed);
            if !changed && from_memory {
                // Already made by the version we remember; another process
                // (a fleet member) may have undone it since: read the bucket
                // before believing it.
                *writer.known.lock() = KnownBucket::Unknown;
                continue;
            }
            if !changed {
                *writer.known.lock() = match current {
                    Some(c) => KnownBucket::Present(c),
                    None => KnownBucket::Absent,
                };
                return Ok(());
            }
            let next = Bucket {
                format: CATALOG_FORMAT,
                entries,
                write_token: hex::encode(self.entropy.bytes16()),
            };
            let written = match &current {
                Some(c) => object.replace(c, next).await,
                None => object.create(next).await,
            };
            match written {
                Ok(w) => {
                    *writer.known.lock() = KnownBucket::Present(Arc::new(w));
                    return Ok(());
                }
                Err(CasError::Conflict { .. }) if attempt < CONFLICT_RETRIES_MAX => {
                    *writer.known.lock() = KnownBucket::Unknown;
                    attempt += 1;
                }
                Err(e) => {
                    *writer.known.lock() = KnownBucket::Unknown;
                    return Err(e);
                }
            }
        }
    }

    /// Lists `entry` (replacing an older incarnation's entry of its name).
    pub async fn add(&self, project: &str, entry: CatalogEntry) -> Result<(), CatalogWriteError> {
        self.submit(project, Change::Add(entry)).await
    }

    /// Removes incarnation `incarnation` of `name` (a newer one stays).
    pub async fn remove(
        &self,
        project: &str,
        name: &str,
        incarnation: u64,
    ) -> Result<(), CatalogWriteError> {
        let change = Change::Remove {
            name: name.to_string(),
            incarnation,
        };
        self.submit(project, change).await
    }

    /// Every entry of `project` (one GET per bucket).
    pub async fn all(&self, project: &str) -> Result<Vec<CatalogEntry>, CatalogError> {
        let mut out = Vec::new();
        for bucket in 0..BUCKETS {
            if let Some(loaded) = self.object(project, bucket).load().await? {
                out.extend(loaded.value.entries);
            }
        }
        Ok(out)
    }

    /// Up to `limit` entries from `from` on, in (bucket, name) order.
    pub async fn page(
        &self,
        project: &str,
        from: Option<&CatalogCursor>,
        limit: usize,
    ) -> Result<CatalogPage, CatalogError> {
        let limit = limit.clamp(1, PAGE_LIMIT_MAX);
        let mut entries: Vec<CatalogEntry> = Vec::new();
        let start = from.map_or(0, |c| c.bucket);
        for bucket in start..BUCKETS {
            let Some(loaded) = self.object(project, bucket).load().await? else {
                continue;
            };
            let skip = match from {
                Some(c) if c.bucket == bucket => loaded
                    .value
                    .entries
                    .partition_point(|e| e.name.as_str() <= c.after.as_str()),
                _ => 0,
            };
            let available = &loaded.value.entries[skip..];
            let room = limit - entries.len();
            if available.len() > room {
                entries.extend_from_slice(&available[..room]);
                let after = entries.last().map(|e| e.name.clone()).unwrap_or_default();
                return Ok(CatalogPage {
                    entries,
                    next: Some(CatalogCursor { bucket, after }),
                });
            }
            entries.extend_from_slice(available);
            if entries.len() == limit && bucket + 1 < BUCKETS {
                let after = entries.last().map(|e| e.name.clone()).unwrap_or_default();
                return Ok(CatalogPage {
                    entries,
                    next: Some(CatalogCursor { bucket, after }),
                });
            }
        }
        Ok(CatalogPage {
            entries,
            next: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn entry(name: &str, incarnation: u64) -> CatalogEntry {
        CatalogEntry {
            name: name.into(),
            content_type: "application/json".into(),
            created_ms: incarnation,
            incarnation,
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_changes_share_bucket_writes() {
        use strata_engine::store::{Latency, Layered, RequestCounts};
        let slow: Arc<dyn ObjectStore> = Arc::new(Layered::new(
            Arc::new(InMemory::new()),
            Latency {
                put: std::time::Duration::from_millis(5),
                ..Latency::default()
            },
        ));
        let counted = Arc::new(Layered::new(slow, RequestCounts::default()));
        let entropy = Arc::new(strata_engine::SeededEntropy::new(2));
        let catalog = Arc::new(Catalog::new(
            counted.clone(),
            RetryPolicy::default(),
            entropy,
        ));
        let changes = 320;
        let tasks: Vec<_> = (0..changes)
            .map(|i| {
                let catalog = catalog.clone();
                tokio::spawn(async move { catalog.add("p", entry(&format!("n{i}"), 1)).await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        let totals = counted.layer().snapshot();
        assert!(
            totals.puts < changes / 3,
            "{} bucket writes for {changes} changes",
            totals.puts
        );
        assert!(
            totals.gets <= u64::from(BUCKETS),
            "{} GETs: a bucket is read once, then written from what was written",
            totals.gets
        );
        // A change that changes nothing costs one GET (the remembered
        // version is checked) and no PUT.
        let before = counted.layer().snapshot();
        catalog.add("p", entry("n7", 1)).await.unwrap();
        let after = counted.layer().snapshot();
        assert_eq!((after.gets - before.gets, after.puts - before.puts), (1, 0));
        assert_eq!(catalog.all("p").await.unwrap().len(), changes as usize);
        // Removals batch the same way, and every change is applied once.
        let tasks: Vec<_> = (0..changes)
            .filter(|i| i % 2 == 0)
            .map(|i| {
                let catalog = catalog.clone();
                tokio::spawn(async move { catalog.remove("p", &format!("n{i}"), 1).await })
            })
            .collect();
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        assert_eq!(catalog.all("p").await.unwrap().len(), changes as usize / 2);
    }

    /// Two fleet members: theirs removes a name ours listed; ours adds it
    /// again. Its remembered version still lists the name, but the change is
    /// not skipped on that word: the name is listed again.
    #[tokio::test]
    async fn a_change_another_process_undid_is_made_again() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let ours = Catalog::new(
            store.clone(),
            RetryPolicy::default(),
            Arc::new(strata_engine::SeededEntropy::new(5)),
        );
        let theirs = Catalog::new(
            store,
            RetryPolicy::default(),
            Arc::new(strata_engine::SeededEntropy::new(6)),
        );
        ours.add("p", entry("n", 1)).await.unwrap();
        theirs.remove("p", "n", 1).await.unwrap();
        assert!(ours.all("p").await.unwrap().is_empty());
        ours.add("p", entry("n", 1)).await.unwrap();
        let listed: Vec<String> = ours
            .all("p")
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(listed, vec!["n".to_string()]);
    }

    #[tokio::test]
    async fn a_bucket_another_process_changed_is_read_again() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let ours = Catalog::new(
            store.clone(),
            RetryPolicy::default(),
            Arc::new(strata_engine::SeededEntropy::new(3)),
        );
        let theirs = Catalog::new(
            store,
            RetryPolicy::default(),
            Arc::new(strata_engine::SeededEntropy::new(4)),
        );
        // Three names of one bucket.
        let bucket = names::catalog_bucket_of("x0", BUCKETS);
        let same: Vec<String> = (0..1000)
            .map(|i| format!("x{i}"))
            .filter(|n| names::catalog_bucket_of(n, BUCKETS) == bucket)
            .take(3)
            .collect();
        assert_eq!(same.len(), 3);
        ours.add("p", entry(&same[0], 1)).await.unwrap();
        theirs.add("p", entry(&same[1], 1)).await.unwrap();
        // Ours knows a stale version: its CAS fails, it reads again, retries.
        ours.add("p", entry(&same[2], 1)).await.unwrap();
        let mut names: Vec<String> = ours
            .all("p")
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        names.sort();
        let mut expected = same.clone();
        expected.sort();
        assert_eq!(names, expected);
    }

    #[tokio::test]
    async fn pages_list_every_name_once() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let entropy = Arc::new(strata_engine::SeededEntropy::new(1));
        let catalog = Catalog::new(store, RetryPolicy::default(), entropy);
        let names: Vec<String> = (0..250).map(|i| format!("s/{i}")).collect();
        for name in &names {
            catalog.add("p", entry(name, 1)).await.unwrap();
        }
        catalog.add("q", entry("other", 1)).await.unwrap();
        catalog.remove("p", "s/7", 1).await.unwrap();
        // An older incarnation's removal leaves a newer entry.
        catalog.add("p", entry("s/8", 2)).await.unwrap();
        catalog.remove("p", "s/8", 1).await.unwrap();
        let mut seen = Vec::new();
        let mut cursor: Option<CatalogCursor> = None;
        for _ in 0..100 {
            let page = catalog.page("p", cursor.as_ref(), 7).await.unwrap();
            assert!(page.entries.len() <= 7);
            seen.extend(page.entries.into_iter().map(|e| e.name));
            match page.next {
                Some(next) => {
                    // Cursors survive their text form.
                    cursor = Some(CatalogCursor::decode(&next.encode()).unwrap());
                }
                None => break,
            }
        }
        let mut expected: Vec<String> = names.into_iter().filter(|n| n != "s/7").collect();
        expected.sort();
        seen.sort();
        assert_eq!(seen, expected);
        let far_bucket = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([99u8, 0]);
        for bad in ["", "!", "A", far_bucket.as_str()] {
            assert_eq!(CatalogCursor::decode(bad), None, "{bad}");
        }
    }
}
