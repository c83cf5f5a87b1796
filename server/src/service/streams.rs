//! The stream service: what both HTTP surfaces do to streams, without HTTP.
//!
//! `Streams` composes the registry (descriptors), the engine's shards
//! (records, via `routing`), the key check and cipher cache (`cipher`), forks
//! (`fork`, `chain`: a fork reads its source chain up to its base, then its
//! own records; positions are shared with the source), sliding TTL and
//! absolute expiry (evaluated at request time to the millisecond; `expiry`,
//! `retire`), and soft deletion while forks still read through a stream. Its
//! operations live one concern per file beside this one (create, append,
//! read, listing, startup); this file holds the type, its construction and
//! the lookup every operation starts with ([`Streams::live`]).
//!
//! Positions: a stream's records live at positions `base..tail`, where `base`
//! is 0 for a stream and the fork point for a fork; engine offsets of a stream
//! are positions minus its base.

use object_store::ObjectStore;
use std::sync::Arc;

use strata_engine::Shard;
use strata_manifest::Versioned;

use super::catalog::Catalog;
use super::cipher::CipherCache;
use super::error::ServiceError;
use super::model::{StreamObserver, StreamsConfig};
use super::reaper::Reaper;
use super::registry::Registry;
use super::registry::{Descriptor, Entry, StreamState};
use super::routing::{ShardIndex, ShardRouter};
use std::sync::OnceLock;
use strata_engine::{Clock, Entropy};

/// The stream service; see the module header.
pub struct Streams {
    pub(super) registry: Registry,
    pub(super) catalog: Catalog,
    pub(super) shards: Arc<ShardRouter>,
    pub(super) ciphers: CipherCache,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) entropy: Arc<dyn Entropy>,
    pub(super) config: StreamsConfig,
    pub(super) observer: OnceLock<Arc<dyn StreamObserver>>,
    /// Reads fork sources other fleet members serve (fleet members only).
    pub(super) source_reads: OnceLock<Arc<dyn super::sources::SourceReads>>,
    /// Appends dead letters to streams other fleet members serve.
    pub(super) dead_letter_peers: OnceLock<Arc<dyn super::sources::DeadLetterPeers>>,
    /// Deadlines of streams that expire (see `reaper`).
    pub(super) reaper: Arc<Reaper>,
    /// False from [`Streams::begin_startup_scan`] until the scan ended:
    /// catalog listings wait for it (see [`Streams::startup_scanned`]).
    pub(super) startup_scanned: tokio::sync::watch::Sender<bool>,
    /// Appends acknowledged since start (the fleet's load vector).
    pub(super) appends_acknowledged: std::sync::atomic::AtomicU64,
    /// Watch journals of the collections served here (see `watches`).
    pub(super) watch_journals: Arc<super::watches::WatchJournals>,
    /// Consumer groups of the streams served here (see `consumers`).
    pub(super) live_consumers: super::consumer_live::LiveConsumers,
    /// Per-project limits and their state (see `admission`).
    pub(super) admission: Arc<super::admission::Admission>,
    /// Reads not yet written to their shards (see `usage`).
    pub(super) read_tally: Arc<super::read_tally::ReadTally>,
}

impl Streams {
    pub fn new(
        registry: Registry,
        shards: Vec<Shard>,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
        config: StreamsConfig,
    ) -> Result<Self, ServiceError> {
        let router = Arc::new(ShardRouter::new(shards)?);
        Ok(Self::with_router(registry, router, clock, entropy, config))
    }

    /// A stream service over a router built by the caller (a fleet member's,
    /// whose slots its controller fills).
    pub fn with_router(
        registry: Registry,
        shards: Arc<ShardRouter>,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
        config: StreamsConfig,
    ) -> Self {
        let (store, retry) = registry.store();
        Streams {
            catalog: Catalog::new(store, retry, entropy.clone()),
            registry,
            shards,
            ciphers: CipherCache::default(),
            clock,
            entropy,
            config,
            observer: OnceLock::new(),
            source_reads: OnceLock::new(),
            dead_letter_peers: OnceLock::new(),
            reaper: Arc::new(Reaper::default()),
            startup_scanned: tokio::sync::watch::Sender::new(true),
            appends_acknowledged: Default::default(),
            watch_journals: Default::default(),
            live_consumers: Default::default(),
            admission: Arc::new(super::admission::Admission::new(
                super::admission::LimitsTable::unlimited(),
            )),
            read_tally: Default::default(),
        }
    }

    /// The per-project limits in force (`--limits-file`; `SIGHUP` replaces
    /// them through [`super::admission::Admission::replace`]).
    pub fn admission(&self) -> &Arc<super::admission::Admission> {
        &self.admission
    }

    /// Admits a client's append of `body_bytes` against its project's rate
    /// limits, before anything is parsed or queued. The server's own appends
    /// (dead letters, subscription wakes) are not charged.
    pub fn admit_append(&self, project: &str, body_bytes: usize) -> Result<(), ServiceError> {
        self.admission
            .admit_append(project, body_bytes as u64, self.now_ms())
            .map_err(ServiceError::Limited)
    }

    /// A live reader's place in its project's budget (held until dropped).
    pub fn admit_live_reader(
        &self,
        project: &str,
    ) -> Result<super::admission::ReaderPermit, ServiceError> {
        self.admission
            .live_reader(project)
            .map_err(ServiceError::Limited)
    }

    /// Where each shard is served.
    pub fn router(&self) -> &ShardRouter {
        &self.shards
    }

    pub fn clock(&self) -> Arc<dyn Clock> {
        self.clock.clone()
    }

    pub fn appends_acknowledged(&self) -> u64 {
        self.appends_acknowledged
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Forgets the cached descriptors of the streams of shard `index`: called
    /// when this server claims it, since another server may have changed
    /// them while it owned the shard.
    pub fn forget_shard(&self, index: ShardIndex) {
        let router = &self.shards;
        self.registry.forget_where(|project, name| {
            router.index_of(&strata_engine::stream_id(project, name)) == index
        });
    }

    pub fn reaper(&self) -> Arc<Reaper> {
        self.reaper.clone()
    }

    /// Queues the expiry of a live descriptor that has one.
    pub(super) fn schedule_expiry(&self, project: &str, desc: &Descriptor, last_access_ms: u64) {
        if let Some(due_ms) = desc.expiry_deadline_ms(last_access_ms) {
            self.reaper.schedule(due_ms, project, &desc.name);
        }
    }

    /// How fork sources other fleet members serve are read.
    pub fn set_dead_letter_peers(&self, peers: Arc<dyn super::sources::DeadLetterPeers>) {
        let _ = self.dead_letter_peers.set(peers);
    }

    pub fn set_source_reads(&self, reads: Arc<dyn super::sources::SourceReads>) {
        let _ = self.source_reads.set(reads);
    }

    pub fn set_observer(&self, observer: Arc<dyn StreamObserver>) {
        let _ = self.observer.set(observer);
    }

    /// Tells the observer that this server claimed or released shard `index`.
    pub fn shard_moved(&self, index: ShardIndex, moved: super::model::ShardMove) {
        if let Some(observer) = self.observer.get() {
            observer.shard_moved(index, moved);
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// The object store the service keeps its records in.
    pub fn store(&self) -> Arc<dyn ObjectStore> {
        self.registry.store().0
    }

    pub fn random_bytes16(&self) -> [u8; 16] {
        self.entropy.bytes16()
    }

    /// The live descriptor of a name, expiring it first if its time is up.
    pub(super) async fn live(
        &self,
        project: &str,
        name: &str,
    ) -> Result<(Arc<Entry>, Arc<Versioned<Descriptor>>), ServiceError> {
        let entry = self.registry.entry(project, name);
        let desc = entry.load().await?.ok_or(ServiceError::NotFound)?;
        match desc.value.state {
            StreamState::Deleted => return Err(ServiceError::NotFound),
            StreamState::SoftDeleted => return Err(ServiceError::Gone),
            StreamState::Live => {}
        }
        if !desc.value.expires() {
            return Ok((entry, desc));
        }
        let idle_since_ms = self.idle_since_ms(&entry, &desc.value);
        if desc.value.expired_at(self.now_ms(), idle_since_ms) {
            let _guard = entry.changes.lock().await;
            if let Some(current) = entry.load().await? {
                if current.value.is_live() {
                    self.retire(project, &entry, &current).await?;
                }
            }
            return Err(ServiceError::NotFound);
        }
        self.schedule_expiry(project, &desc.value, idle_since_ms);
        Ok((entry, desc))
    }

    pub(super) fn notify_appended(&self, project: &str, name: &str) {
        self.appends_acknowledged
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(observer) = self.observer.get() {
            observer.appended(project, name);
        }
    }

    pub(super) fn notify_deleted(&self, project: &str, name: &str) {
        if let Some(observer) = self.observer.get() {
            observer.deleted(project, name);
        }
    }
}
