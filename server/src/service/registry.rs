//! The stream registry: one descriptor per stream name, a JSON object in the
//! store (`registry/<project>/streams/<name-hash>.json`), created and changed
//! only by compare-and-swap. A descriptor names the current incarnation and its
//! configuration (content type, expiry, fork lineage, key fingerprint and stream
//! epoch — never the key); a deleted stream leaves a tombstone so that the next
//! incarnation gets a higher number.
//!
//! This process caches descriptors and serialises the changes to one name with
//! a per-name lock; every change is still a CAS, so a second process writing
//! the same registry can only make our write fail, never be overwritten.
//! Sliding-TTL access times are kept in memory; after a restart a stream's
//! last access counts as no earlier than the start (streams never expire early
//! because of a restart).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::write_token::decode as unhex;
use crate::service::names;
use object_store::ObjectStore;
use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use strata_manifest::{
    CasError, CasObject, JsonCodec, JsonLayout, JsonObject, RetryPolicy, Versioned,
};

/// Format version of descriptor objects.
pub const DESCRIPTOR_FORMAT: u32 = 1;
/// Most descriptors kept in the cache before it is cleared.
const CACHE_ENTRIES_MAX: usize = 1 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamState {
    Live,
    /// Deleted while forks still read through it: 410 to clients.
    SoftDeleted,
    /// A tombstone; the name is free.
    Deleted,
}

/// Where a fork's data comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOrigin {
    /// The source stream's name.
    pub source: String,
    pub source_incarnation: u64,
    /// The position where the fork's own records start; positions below it
    /// are read from the source.
    pub base: u64,
    /// `Stream-Fork-Offset` as requested (absent: the source's tail then).
    pub requested_offset: Option<u64>,
    /// `Stream-Fork-Sub-Offset` (0 when absent).
    pub sub_offset: u64,
}

/// A stream descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Descriptor {
    pub format: u32,
    pub project: String,
    pub name: String,
    /// Hex of the engine's 16-byte stream id.
    pub stream_id: String,
    pub incarnation: u64,
    /// Hex of the incarnation's random 16-byte stream epoch.
    pub epoch: String,
    /// Hex of the key fingerprint.
    pub key_fingerprint: String,
    pub content_type: String,
    pub created_ms: u64,
    pub ttl_seconds: Option<u64>,
    /// `Stream-Expires-At` exactly as given, and its instant.
    pub expires_at: Option<String>,
    pub expires_at_ms: Option<u64>,
    pub created_closed: bool,
    pub fork: Option<ForkOrigin>,
    /// Forks that read through this stream.
    pub fork_refs: u64,
    /// Watch definitions of a product collection (sorted by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub watches: Vec<crate::service::product::config::WatchDef>,
    /// Hex of the key that checks watch capabilities (derived one way from
    /// the stream key at create; `product::watch_cap`), on collections with
    /// watches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch_sig_key: Option<String>,
    pub state: StreamState,
    /// Random per write (the CAS write token).
    pub write_token: String,
}

impl Descriptor {
    pub fn is_live(&self) -> bool {
        self.state == StreamState::Live
    }

    /// When the stream expires if nobody touches it after `last_access_ms`
    /// (`None`: it never expires).
    pub fn expiry_deadline_ms(&self, last_access_ms: u64) -> Option<u64> {
        let ttl = self
            .ttl_seconds
            .map(|ttl| last_access_ms.saturating_add(ttl.saturating_mul(1000)));
        match (self.expires_at_ms, ttl) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the stream expires at all (a TTL or an `Expires-At`).
    pub fn expires(&self) -> bool {
        self.ttl_seconds.is_some() || self.expires_at_ms.is_some()
    }

    /// Whether the stream is past its expiry at `now_ms`, given its last access.
    pub fn expired_at(&self, now_ms: u64, last_access_ms: u64) -> bool {
        if self.expires_at_ms.is_some_and(|at| now_ms >= at) {
            return true;
        }
        self.ttl_seconds
            .is_some_and(|ttl| now_ms >= last_access_ms.saturating_add(ttl.saturating_mul(1000)))
    }
}

impl Descriptor {
    pub fn stream_id_bytes(&self) -> Option<[u8; 16]> {
        unhex(&self.stream_id)
    }

    pub fn epoch_bytes(&self) -> Option<[u8; 16]> {
        unhex(&self.epoch)
    }

    pub fn fingerprint_bytes(&self) -> Option<[u8; 16]> {
        unhex(&self.key_fingerprint)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum DescriptorError {
    #[error("descriptor JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("unsupported descriptor format {0}")]
    Format(u32),
    #[error("descriptor field {0} is not valid hex")]
    Hex(&'static str),
}

/// Descriptors are JSON objects; the write token is a random hex field.
impl JsonObject for Descriptor {
    type Error = DescriptorError;
    const LAYOUT: JsonLayout = JsonLayout::Pretty;

    fn write_token(&self) -> [u8; 16] {
        crate::service::write_token::write_token(&self.write_token)
    }

    fn check(&self) -> Result<(), DescriptorError> {
        if self.format != DESCRIPTOR_FORMAT {
            return Err(DescriptorError::Format(self.format));
        }
        // Paired with the writer: validate what later code will trust.
        self.stream_id_bytes()
            .ok_or(DescriptorError::Hex("stream_id"))?;
        self.epoch_bytes().ok_or(DescriptorError::Hex("epoch"))?;
        self.fingerprint_bytes()
            .ok_or(DescriptorError::Hex("key_fingerprint"))?;
        Ok(())
    }
}

/// The CAS codec of Descriptor objects (the generic JSON codec).
pub type DescriptorCodec = JsonCodec<Descriptor>;

pub type RegistryError = CasError<DescriptorError>;

/// What the cache knows about one name.
enum Known {
    Unloaded,
    Absent,
    Present(Arc<Versioned<Descriptor>>),
}

/// One stream name: its cached descriptor, the lock that serialises changes to
/// it, and its last access time (for the sliding TTL).
pub struct Entry {
    cas: CasObject<DescriptorCodec>,
    known: RwLock<Known>,
    /// Held across a read-check-write sequence on this name.
    pub changes: tokio::sync::Mutex<()>,
    last_access_ms: AtomicU64,
}

impl Entry {
    /// The current descriptor (from the cache, or the store once).
    pub async fn load(&self) -> Result<Option<Arc<Versioned<Descriptor>>>, RegistryError> {
        match &*self.known.read() {
            Known::Present(d) => return Ok(Some(d.clone())),
            Known::Absent => return Ok(None),
            Known::Unloaded => {}
        }
        let loaded = self.cas.load().await?.map(Arc::new);
        let mut known = self.known.write();
        if matches!(*known, Known::Unloaded) {
            *known = match &loaded {
                Some(d) => Known::Present(d.clone()),
                None => Known::Absent,
            };
        }
        Ok(match &*known {
            Known::Present(d) => Some(d.clone()),
            _ => None,
        })
    }

    /// Writes `next` over `current` (or creates it) by CAS and caches it.
    pub async fn store(
        &self,
        current: Option<&Versioned<Descriptor>>,
        next: Descriptor,
    ) -> Result<Arc<Versioned<Descriptor>>, RegistryError> {
        let result = match current {
            Some(current) => self.cas.replace(current, next).await,
            None => self.cas.create(next).await,
        };
        match result {
            Ok(written) => {
                let written = Arc::new(written);
                *self.known.write() = Known::Present(written.clone());
                Ok(written)
            }
            Err(e) => {
                // Someone else changed it: forget what we knew.
                *self.known.write() = Known::Unloaded;
                Err(e)
            }
        }
    }

    /// Forgets the cached descriptor: the next load reads the store (another
    /// server may have changed it while it owned the name's shard).
    pub fn forget(&self) {
        *self.known.write() = Known::Unloaded;
    }

    pub fn touch(&self, now_ms: u64) {
        self.last_access_ms.fetch_max(now_ms, Ordering::Relaxed);
    }

    pub fn last_access_ms(&self) -> u64 {
        self.last_access_ms.load(Ordering::Relaxed)
    }
}

/// The registry as [`Registry::scan`] found it.
pub struct RegistryScan {
    pub live: Vec<Descriptor>,
    pub catalog_projects: std::collections::BTreeSet<String>,
}

/// Descriptors of one store, cached.
pub struct Registry {
    store: Arc<dyn ObjectStore>,
    retry: RetryPolicy,
    /// project → name → entry (looked up by `&str`, no allocation).
    entries: Mutex<HashMap<String, HashMap<String, Arc<Entry>>>>,
    started_ms: u64,
}

impl Registry {
    pub fn new(store: Arc<dyn ObjectStore>, retry: RetryPolicy, started_ms: u64) -> Self {
        Registry {
            store,
            retry,
            entries: Mutex::new(HashMap::new()),
            started_ms,
        }
    }

    /// Names of every stream with a descriptor in `project` (a listing plus one
    /// read per descriptor; for rare operations such as subscription creation).
    pub async fn names(&self, project: &str) -> Result<Vec<String>, RegistryError> {
        let prefix = object_store::path::Path::from(format!("registry/{project}/streams"));
        let mut names: Vec<String> = self
            .scan_under(prefix)
            .await?
            .live
            .into_iter()
            .map(|d| d.name)
            .collect();
        names.sort();
        Ok(names)
    }

    /// What the registry holds, from one listing of `registry/` plus one read
    /// per stream descriptor (used once at start): every live descriptor, and
    /// every project that has catalog buckets.
    pub async fn scan(&self) -> Result<RegistryScan, RegistryError> {
        self.scan_under(object_store::path::Path::from("registry"))
            .await
    }

    /// [`Registry::scan`] of the objects under `prefix` only.
    async fn scan_under(
        &self,
        prefix: object_store::path::Path,
    ) -> Result<RegistryScan, RegistryError> {
        use futures::{StreamExt, TryStreamExt};
        let metas: Vec<_> =
            self.store
                .list(Some(&prefix))
                .try_collect()
                .await
                .map_err(|source| strata_manifest::CasError::Store {
                    path: prefix.clone(),
                    source,
                })?;
        let mut catalog_projects = std::collections::BTreeSet::new();
        let mut descriptors = Vec::new();
        for meta in metas {
            let parts: Vec<String> = meta
                .location
                .parts()
                .map(|p| p.as_ref().to_string())
                .collect();
            if parts.len() != 4 || parts[0] != "registry" {
                continue;
            }
            match parts[2].as_str() {
                "streams" => descriptors.push(meta.location),
                "catalog" => {
                    catalog_projects.insert(parts[1].clone());
                }
                _ => {}
            }
        }
        let loads = descriptors.into_iter().map(|location| {
            let cas = CasObject::<DescriptorCodec>::new(self.store.clone(), location, self.retry);
            async move { cas.load().await }
        });
        let found: Vec<_> = futures::stream::iter(loads)
            .buffer_unordered(16)
            .collect()
            .await;
        let mut live = Vec::new();
        for loaded in found {
            if let Some(d) = loaded? {
                if d.value.is_live() {
                    live.push(d.value);
                }
            }
        }
        Ok(RegistryScan {
            live,
            catalog_projects,
        })
    }

    /// The store and retry policy the registry writes with.
    pub fn store(&self) -> (Arc<dyn ObjectStore>, RetryPolicy) {
        (self.store.clone(), self.retry)
    }

    /// When this process started (the earliest last access it assumes).
    pub fn started_ms(&self) -> u64 {
        self.started_ms
    }

    /// Forgets the cached descriptor of every name `which` selects.
    pub fn forget_where(&self, which: impl Fn(&str, &str) -> bool) {
        let entries = self.entries.lock();
        for (project, names) in entries.iter() {
            for (name, entry) in names {
                if which(project, name) {
                    entry.forget();
                }
            }
        }
    }

    /// The entry of `name` in `project` (created in the cache on first use).
    pub fn entry(&self, project: &str, name: &str) -> Arc<Entry> {
        let mut projects = self.entries.lock();
        if let Some(entry) = projects.get(project).and_then(|p| p.get(name)) {
            return entry.clone();
        }
        let entries = projects.entry(project.to_string()).or_default();
        if entries.len() >= CACHE_ENTRIES_MAX {
            entries.retain(|_, e| Arc::strong_count(e) > 1);
        }
        let entry = Arc::new(Entry {
            cas: CasObject::new(
                self.store.clone(),
                names::stream_descriptor(project, name),
                self.retry,
            ),
            known: RwLock::new(Known::Unloaded),
            changes: tokio::sync::Mutex::new(()),
            // Accessed in this process: not yet (the shard knows earlier
            // accesses; see `Streams::idle_since_ms`).
            last_access_ms: AtomicU64::new(0),
        });
        entries.insert(name.to_string(), entry.clone());
        entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    fn descriptor(incarnation: u64) -> Descriptor {
        Descriptor {
            format: DESCRIPTOR_FORMAT,
            project: "default".into(),
            name: "a/b".into(),
            stream_id: "00".repeat(16),
            incarnation,
            epoch: "11".repeat(16),
            key_fingerprint: "22".repeat(16),
            content_type: "text/plain".into(),
            created_ms: 5,
            ttl_seconds: Some(10),
            expires_at: None,
            expires_at_ms: None,
            created_closed: false,
            fork: None,
            fork_refs: 0,
            watches: Vec::new(),
            watch_sig_key: None,
            state: StreamState::Live,
            write_token: format!("{incarnation:032x}"),
        }
    }

    #[tokio::test]
    async fn create_replace_and_cache() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let registry = Registry::new(store.clone(), RetryPolicy::default(), 0);
        let entry = registry.entry("default", "a/b");
        assert!(entry.load().await.unwrap().is_none());
        let first = entry.store(None, descriptor(1)).await.unwrap();
        let second = entry.store(Some(&first), descriptor(2)).await.unwrap();
        assert_eq!(entry.load().await.unwrap().unwrap().value.incarnation, 2);
        // A stale write fails and the cache forgets.
        assert!(entry.store(Some(&first), descriptor(3)).await.is_err());
        let fresh = Registry::new(store, RetryPolicy::default(), 0);
        assert_eq!(
            fresh
                .entry("default", "a/b")
                .load()
                .await
                .unwrap()
                .unwrap()
                .value,
            second.value
        );
    }

    #[test]
    fn expiry_is_exact_to_the_millisecond() {
        let d = descriptor(1);
        assert!(!d.expired_at(10_999, 1_000));
        assert!(d.expired_at(11_000, 1_000));
        let mut at = descriptor(1);
        at.ttl_seconds = None;
        at.expires_at_ms = Some(500);
        assert!(!at.expired_at(499, 0));
        assert!(at.expired_at(500, 0));
    }
}
