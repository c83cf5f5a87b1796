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
//! This process serialises changes to a bucket with a lock; every change is
//! still a CAS, re-read and retried on conflict, so several processes may
//! share a registry.

use std::collections::HashMap;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use object_store::ObjectStore;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use strata_engine::layout;
use strata_manifest::{CasCodec, CasError, CasObject, RetryPolicy};

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

pub struct BucketCodec;

impl CasCodec for BucketCodec {
    type Value = Bucket;
    type Error = BucketError;

    fn encode(value: &Bucket) -> Result<Bytes, BucketError> {
        Ok(Bytes::from(serde_json::to_vec(value)?))
    }

    fn decode(bytes: &Bytes) -> Result<Bucket, BucketError> {
        let bucket: Bucket = serde_json::from_slice(bytes)?;
        if bucket.format != CATALOG_FORMAT {
            return Err(BucketError::Format(bucket.format));
        }
        if bucket.entries.windows(2).any(|w| w[0].name >= w[1].name) {
            return Err(BucketError::Order);
        }
        Ok(bucket)
    }

    fn write_token(value: &Bucket) -> [u8; 16] {
        crate::hex::write_token(&value.write_token)
    }
}

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

/// Held while this process changes one bucket.
type BucketLock = Arc<tokio::sync::Mutex<()>>;

pub struct Catalog {
    store: Arc<dyn ObjectStore>,
    retry: RetryPolicy,
    /// Serialises this process's changes per (project, bucket).
    locks: Mutex<HashMap<(String, u16), BucketLock>>,
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
            locks: Mutex::new(HashMap::new()),
            entropy,
        }
    }

    fn object(&self, project: &str, bucket: u16) -> CasObject<BucketCodec> {
        CasObject::new(
            self.store.clone(),
            layout::catalog_bucket(project, bucket),
            self.retry,
        )
    }

    fn lock(&self, project: &str, bucket: u16) -> BucketLock {
        self.locks
            .lock()
            .entry((project.to_string(), bucket))
            .or_default()
            .clone()
    }

    /// Applies `change` to the bucket of `name` (CAS, retried on conflict).
    async fn change(
        &self,
        project: &str,
        name: &str,
        change: impl Fn(&mut Vec<CatalogEntry>) -> bool,
    ) -> Result<(), CatalogError> {
        let bucket = layout::catalog_bucket_of(name, BUCKETS);
        let lock = self.lock(project, bucket);
        let _guard = lock.lock().await;
        let object = self.object(project, bucket);
        let mut attempt = 0;
        loop {
            let current = object.load().await?;
            let mut entries = current
                .as_ref()
                .map(|c| c.value.entries.clone())
                .unwrap_or_default();
            if !change(&mut entries) {
                return Ok(());
            }
            let next = Bucket {
                format: CATALOG_FORMAT,
                entries,
                write_token: crate::hex::encode(&self.entropy.bytes16()),
            };
            let written = match &current {
                Some(c) => object.replace(c, next).await,
                None => object.create(next).await,
            };
            match written {
                Ok(_) => return Ok(()),
                Err(CasError::Conflict { .. }) if attempt < CONFLICT_RETRIES_MAX => attempt += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Lists `entry` (replacing an older incarnation's entry of its name).
    pub async fn add(&self, project: &str, entry: CatalogEntry) -> Result<(), CatalogError> {
        let name = entry.name.clone();
        self.change(project, &name, move |entries| {
            match entries.binary_search_by(|e| e.name.as_str().cmp(&entry.name)) {
                Ok(i) if entries[i] == entry => false,
                Ok(i) => {
                    entries[i] = entry.clone();
                    true
                }
                Err(i) => {
                    entries.insert(i, entry.clone());
                    true
                }
            }
        })
        .await
    }

    /// Removes incarnation `incarnation` of `name` (a newer one stays).
    pub async fn remove(
        &self,
        project: &str,
        name: &str,
        incarnation: u64,
    ) -> Result<(), CatalogError> {
        self.change(project, name, |entries| {
            match entries.binary_search_by(|e| e.name.as_str().cmp(name)) {
                Ok(i) if entries[i].incarnation <= incarnation => {
                    entries.remove(i);
                    true
                }
                _ => false,
            }
        })
        .await
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
