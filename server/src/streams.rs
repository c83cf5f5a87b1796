//! The stream service: what both HTTP surfaces do to streams, without HTTP.
//!
//! It composes the registry (descriptors), the engine's shards (records), the
//! key check and cipher cache, forks (a fork reads its source chain up to its
//! base, then its own records; positions are shared with the source), sliding
//! TTL and absolute expiry (evaluated at request time to the millisecond), and
//! soft deletion while forks still read through a stream.
//!
//! Positions: a stream's records live at positions `base..tail`, where `base`
//! is 0 for a stream and the fork point for a fork; engine offsets of a stream
//! are positions minus its base.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use strata_engine::{
    AppendKind, AppendRequest, Clock, EngineError, Entropy, ProducerClaim, ProducerState,
    ReadLimits, Shard, StreamRef, WaitOutcome,
};
use strata_manifest::Versioned;
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

use crate::catalog::{Catalog, CatalogCursor, CatalogEntry, CatalogPage};
use crate::ds::json;
use crate::hex::encode as hex;
use crate::product::config::WatchDef;
use crate::reaper::Reaper;
use crate::registry::{Descriptor, Entry, ForkOrigin, Registry, StreamState, DESCRIPTOR_FORMAT};

/// The project of the raw (Durable Streams) surface.
pub const DEFAULT_PROJECT: &str = "default";
/// Most levels a fork chain may have.
const FORK_DEPTH_MAX: usize = 64;
/// Engine reads one service read makes at most (each moves past at most
/// about a page budget of other keys' records).
const READ_ROUNDS_MAX: usize = 64;
/// Longest a catalog listing waits for the start-up scan's repairs.
const STARTUP_SCAN_WAIT_MAX: Duration = Duration::from_secs(10);
/// Most stream ciphers kept derived.
const CIPHER_CACHE_MAX: usize = 100_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ServiceError {
    #[error("stream not found")]
    NotFound,
    #[error("stream was deleted and is kept only for its forks")]
    Gone,
    #[error("{0}")]
    Conflict(String),
    /// A create met a name still kept (deleted or expired) for its forks.
    #[error("the name's previous stream was deleted and is still read by forks")]
    RetainedForForks,
    #[error("content type does not match the stream's")]
    ContentTypeMismatch,
    #[error("stream is closed")]
    Closed { tail: u64 },
    #[error("Stream-Seq must increase")]
    SeqConflict,
    #[error("producer epoch is stale")]
    ProducerStale { current_epoch: u64 },
    #[error("producer sequence gap")]
    ProducerGap { expected: u64, received: u64 },
    #[error("a new producer epoch must start at sequence 0")]
    ProducerEpochSeq,
    #[error("the key does not match the stream's key")]
    WrongKey,
    #[error("{0}")]
    BadRequest(String),
    #[error("{what} exceeds the limit of {limit} bytes")]
    TooLarge { what: &'static str, limit: u64 },
    #[error("the shard is overloaded; retry shortly")]
    Overloaded,
    /// Not applied (or, for a read, not answered): the request may be sent
    /// again as it is.
    #[error("service unavailable: {0}")]
    Unavailable(String),
    /// A write that may or may not be durable: it may have reached the store
    /// (or may still reach it) without this server learning so.
    #[error("the outcome of the write is unknown: {0}")]
    OutcomeUnknown(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl From<EngineError> for ServiceError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::StreamNotFound | EngineError::StaleIncarnation => ServiceError::NotFound,
            EngineError::WrongKey => ServiceError::WrongKey,
            EngineError::StreamClosed { next_offset } => ServiceError::Closed { tail: next_offset },
            EngineError::ProducerStaleEpoch { current_epoch } => {
                ServiceError::ProducerStale { current_epoch }
            }
            EngineError::ProducerNewEpochNeedsSeqZero => ServiceError::ProducerEpochSeq,
            EngineError::ProducerSeqGap { expected, received } => {
                ServiceError::ProducerGap { expected, received }
            }
            EngineError::StreamSeqConflict => ServiceError::SeqConflict,
            EngineError::EmptyAppend => ServiceError::BadRequest("empty append".into()),
            EngineError::TooLarge { what, limit, .. } => ServiceError::TooLarge { what, limit },
            EngineError::Page(p) => ServiceError::BadRequest(p.to_string()),
            EngineError::Overloaded => ServiceError::Overloaded,
            EngineError::Unavailable { reason } => ServiceError::Unavailable(reason),
            EngineError::OutcomeUnknown => ServiceError::OutcomeUnknown(
                "a WAL write failed after it may have reached the store".into(),
            ),
            EngineError::Fenced => ServiceError::Unavailable(
                "this server no longer owns the stream's shard (fenced); the request was not applied"
                    .into(),
            ),
            EngineError::ShuttingDown => ServiceError::Unavailable("shutting down".into()),
            // An operator must act: the message says how (it names no customer data).
            e @ EngineError::ManifestMissing { .. } => ServiceError::Unavailable(e.to_string()),
            e @ (EngineError::PageAuthentication { .. }
            | EngineError::Corrupt { .. }
            | EngineError::Store { .. }) => ServiceError::Internal(e.to_string()),
        }
    }
}

impl From<crate::registry::RegistryError> for ServiceError {
    fn from(e: crate::registry::RegistryError) -> Self {
        match e {
            strata_manifest::CasError::Conflict { .. } => {
                ServiceError::Unavailable("the stream changed concurrently; retry".into())
            }
            other => ServiceError::Internal(other.to_string()),
        }
    }
}

/// The media type of a content type: parameters dropped, trimmed, lower case.
pub fn media_type(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

pub fn is_json(content_type: &str) -> bool {
    media_type(content_type) == "application/json"
}

/// When a request's work with the store must be answered, and the budget
/// it was given (`--append-timeout-ms`).
#[derive(Debug, Clone, Copy)]
pub struct StoreDeadline {
    pub at: tokio::time::Instant,
    pub budget: Duration,
}

impl StoreDeadline {
    pub fn after(budget: Duration) -> Self {
        StoreDeadline {
            at: tokio::time::Instant::now() + budget,
            budget,
        }
    }

    /// A write whose answer did not come in time (it may still complete).
    pub fn write_timed_out(&self) -> ServiceError {
        ServiceError::OutcomeUnknown(format!(
            "the store did not answer within {} ms; the write may still complete",
            self.budget.as_millis()
        ))
    }

    /// A lookup that did not come back in time (nothing was written).
    pub fn lookup_timed_out(&self) -> ServiceError {
        ServiceError::Unavailable(format!(
            "the store did not answer within {} ms",
            self.budget.as_millis()
        ))
    }
}

/// How a stream expires.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Expiry {
    pub ttl_seconds: Option<u64>,
    /// As given, and its instant.
    pub expires_at: Option<(String, u64)>,
}

/// A fork request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkSpec {
    pub source: String,
    pub offset: Option<u64>,
    pub sub_offset: u64,
}

/// Which surface creates: an existing stream is compared by that surface's
/// configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    /// Protocol fields only (content type, expiry, closed, fork).
    Raw,
    /// The normalized product configuration (media type, expiry instant or
    /// idle seconds, open state, watches); the fork origin is not part of it.
    Product,
}

/// A create request.
#[derive(Debug, Clone)]
pub struct CreateSpec {
    pub mode: CreateMode,
    /// Watch definitions (product creates only; sorted by name).
    pub watches: Vec<WatchDef>,
    /// `None`: the default (or, for a fork, the source's).
    pub content_type: Option<String>,
    pub expiry: Expiry,
    pub closed: bool,
    pub body: Bytes,
    pub fork: Option<ForkSpec>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOutcome {
    pub created: bool,
    pub content_type: String,
    pub tail: u64,
    pub closed: bool,
}

/// An append request.
#[derive(Debug, Clone)]
pub struct AppendSpec {
    /// Records of this routing key (`""`: the default key, the raw view).
    pub routing_key: Bytes,
    pub content_type: Option<String>,
    pub body: Bytes,
    /// Records the caller built and checked itself (the product routes); the
    /// body is then not parsed.
    pub records: Option<Vec<Bytes>>,
    pub producer: Option<ProducerClaim>,
    pub stream_seq: Option<Bytes>,
    pub close: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendResult {
    Appended,
    Duplicate(ProducerState),
    AlreadyClosed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendOutcome {
    pub result: AppendResult,
    pub tail: u64,
    pub closed: bool,
}

/// A stream's metadata (HEAD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamMeta {
    pub name: String,
    pub content_type: String,
    pub created_ms: u64,
    /// Hex of the incarnation's stream epoch.
    pub epoch: String,
    pub watches: Vec<WatchDef>,
    pub tail: u64,
    pub closed: bool,
    pub ttl_seconds: Option<u64>,
    pub expires_at: Option<String>,
    pub incarnation: u64,
}

/// One record read back.
#[derive(Debug, Clone)]
pub struct ReadRecord {
    pub payload: Bytes,
}

#[derive(Debug, Clone)]
pub struct ReadOutcome {
    pub records: Vec<ReadRecord>,
    pub from: u64,
    pub next: u64,
    pub tail: u64,
    pub closed: bool,
    pub content_type: String,
    pub incarnation: u64,
}

impl ReadOutcome {
    pub fn up_to_date(&self) -> bool {
        self.next >= self.tail
    }

    /// Closed and read to the end: nothing more will ever come.
    pub fn at_end(&self) -> bool {
        self.closed && self.up_to_date()
    }
}

/// Which routing key a read views, and how much it returns.
#[derive(Debug, Clone, Copy)]
pub struct KeyView<'a> {
    pub routing_key: &'a [u8],
    pub max_bytes: usize,
    /// Records a read returns at most (at least 1).
    pub max_records: usize,
}

/// Where a read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    Start,
    Tail,
    Position(u64),
}

/// What the start-up pass over the registry did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StartupScan {
    /// Streams whose expiry was queued.
    pub expiring: usize,
    /// Catalog entries added (lost between a create's two writes).
    pub catalog_added: usize,
    /// Catalog entries removed (left by a retirement's two writes).
    pub catalog_removed: usize,
}

/// Told about changes, for subscriptions.
pub trait StreamObserver: Send + Sync {
    fn appended(&self, project: &str, name: &str);
    fn deleted(&self, project: &str, name: &str);
}

/// Tunables of the service.
#[derive(Debug, Clone)]
pub struct StreamsConfig {
    pub max_record_bytes: usize,
    /// Bytes of payload a catch-up read returns at most (one record may exceed it).
    pub read_chunk_bytes: usize,
    pub default_content_type: String,
}

impl Default for StreamsConfig {
    fn default() -> Self {
        StreamsConfig {
            max_record_bytes: 32 << 20,
            read_chunk_bytes: 4 << 20,
            default_content_type: "application/octet-stream".into(),
        }
    }
}

/// Derived ciphers by (stream id, incarnation).
type CipherCache = Mutex<HashMap<([u8; 16], u64), Arc<StreamCipher>>>;

/// A live stream resolved for one request.
struct Level {
    stream: StreamRef,
    shard: Shard,
    cipher: Arc<StreamCipher>,
    base: u64,
    /// Positions at or above this belong to the level above (the fork).
    cap: u64,
}

pub struct Streams {
    registry: Registry,
    catalog: Catalog,
    shards: Vec<Shard>,
    ciphers: CipherCache,
    clock: Arc<dyn Clock>,
    entropy: Arc<dyn Entropy>,
    config: StreamsConfig,
    observer: OnceLock<Arc<dyn StreamObserver>>,
    /// Deadlines of streams that expire (see `reaper`).
    reaper: Arc<Reaper>,
    /// False from [`Streams::begin_startup_scan`] until the scan ended:
    /// catalog listings wait for it (see [`Streams::startup_scanned`]).
    startup_scanned: tokio::sync::watch::Sender<bool>,
}

impl Streams {
    pub fn new(
        registry: Registry,
        shards: Vec<Shard>,
        clock: Arc<dyn Clock>,
        entropy: Arc<dyn Entropy>,
        config: StreamsConfig,
    ) -> Self {
        assert!(!shards.is_empty(), "at least one shard");
        let (store, retry) = registry.store();
        Streams {
            catalog: Catalog::new(store, retry, entropy.clone()),
            registry,
            shards,
            ciphers: Mutex::new(HashMap::new()),
            clock,
            entropy,
            config,
            observer: OnceLock::new(),
            reaper: Arc::new(Reaper::default()),
            startup_scanned: tokio::sync::watch::Sender::new(true),
        }
    }

    pub fn reaper(&self) -> Arc<Reaper> {
        self.reaper.clone()
    }

    /// Queues the expiry of a live descriptor that has one.
    fn schedule_expiry(&self, project: &str, desc: &Descriptor, last_access_ms: u64) {
        if let Some(due_ms) = desc.expiry_deadline_ms(last_access_ms) {
            self.reaper.schedule(due_ms, project, &desc.name);
        }
    }

    /// The start-up pass over the registry (a background task, once): queues
    /// the expiry of every stream that has one (streams created before this
    /// process), and reconciles each project's catalog with its descriptors.
    pub async fn startup_scan(&self) -> Result<StartupScan, ServiceError> {
        let result = self.scan_registry().await;
        self.startup_scanned.send_replace(true);
        result
    }

    /// Marks the start-up scan as pending (before the server accepts
    /// requests), so that no listing answers from a catalog it may repair.
    pub fn begin_startup_scan(&self) {
        self.startup_scanned.send_replace(false);
    }

    async fn scan_registry(&self) -> Result<StartupScan, ServiceError> {
        let scan = self.registry.scan().await?;
        let started_ms = self.registry.started_ms();
        let mut report = StartupScan::default();
        for desc in &scan.live {
            if desc.expiry_deadline_ms(0).is_some() {
                self.schedule_expiry(&desc.project, desc, started_ms);
                report.expiring += 1;
            }
        }
        let mut projects = scan.catalog_projects.clone();
        projects.extend(scan.live.iter().map(|d| d.project.clone()));
        for project in &projects {
            let live: Vec<&Descriptor> =
                scan.live.iter().filter(|d| &d.project == project).collect();
            let (added, removed) = self.reconcile_catalog(project, &live).await?;
            report.catalog_added += added;
            report.catalog_removed += removed;
        }
        Ok(report)
    }

    /// Makes `project`'s catalog list exactly its live streams: entries lost
    /// between a descriptor write and its catalog write are added, entries of
    /// retired streams removed. Each fix re-reads the name's descriptor under
    /// its lock, so a create or delete running meanwhile is never undone.
    async fn reconcile_catalog(
        &self,
        project: &str,
        live: &[&Descriptor],
    ) -> Result<(usize, usize), ServiceError> {
        let listed = self
            .catalog
            .all(project)
            .await
            .map_err(|e| ServiceError::Unavailable(format!("reading the catalog: {e}")))?;
        let live_by_name: HashMap<&str, u64> = live
            .iter()
            .map(|d| (d.name.as_str(), d.incarnation))
            .collect();
        let listed_by_name: HashMap<&str, u64> = listed
            .iter()
            .map(|e| (e.name.as_str(), e.incarnation))
            .collect();
        let mut suspects: Vec<&str> = live_by_name
            .iter()
            .filter(|(name, inc)| listed_by_name.get(*name) != Some(*inc))
            .map(|(name, _)| *name)
            .collect();
        suspects.extend(
            listed_by_name
                .keys()
                .filter(|name| !live_by_name.contains_key(*name)),
        );
        let (mut added, mut removed) = (0, 0);
        for name in suspects {
            let entry = self.registry.entry(project, name);
            let _guard = entry.changes.lock().await;
            match entry.load().await? {
                Some(current) if current.value.is_live() => {
                    self.list_in_catalog(&current.value).await?;
                    added += 1;
                }
                _ => {
                    if let Some(incarnation) = listed_by_name.get(name) {
                        self.catalog
                            .remove(project, name, *incarnation)
                            .await
                            .map_err(|e| {
                                ServiceError::Unavailable(format!("updating the catalog: {e}"))
                            })?;
                        removed += 1;
                    }
                }
            }
        }
        Ok((added, removed))
    }

    /// Retires `project/name` if its expiry has passed. Otherwise answers its
    /// current deadline, if it still has one (`None`: gone, or no expiry).
    pub async fn expire_if_due(
        &self,
        project: &str,
        name: &str,
    ) -> Result<Option<u64>, ServiceError> {
        let entry = self.registry.entry(project, name);
        let Some(desc) = entry.load().await? else {
            return Ok(None);
        };
        if !desc.value.is_live() {
            return Ok(None);
        }
        if !desc.value.expired_at(self.now_ms(), entry.last_access_ms()) {
            return Ok(desc.value.expiry_deadline_ms(entry.last_access_ms()));
        }
        let _guard = entry.changes.lock().await;
        if let Some(current) = entry.load().await? {
            if current.value.is_live()
                && current
                    .value
                    .expired_at(self.now_ms(), entry.last_access_ms())
            {
                self.retire(project, &entry, &current).await?;
                tracing::info!(project, name, "stream expired");
            }
        }
        Ok(None)
    }

    pub fn set_observer(&self, observer: Arc<dyn StreamObserver>) {
        let _ = self.observer.set(observer);
    }

    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    pub fn random_bytes16(&self) -> [u8; 16] {
        self.entropy.bytes16()
    }

    fn shard_for(&self, id: &[u8; 16]) -> &Shard {
        let n = u64::from_le_bytes(id[..8].try_into().expect("8 bytes"));
        &self.shards[(n % self.shards.len() as u64) as usize]
    }

    fn stream_ref(desc: &Descriptor) -> Result<StreamRef, ServiceError> {
        let id = desc
            .stream_id_bytes()
            .ok_or_else(|| ServiceError::Internal("descriptor stream id".into()))?;
        Ok(StreamRef {
            id,
            incarnation: desc.incarnation,
        })
    }

    /// The cipher of a stream for `key`, refusing a wrong key (constant time)
    /// before anything is decrypted.
    fn cipher(
        &self,
        desc: &Descriptor,
        key: &StreamKey,
    ) -> Result<Arc<StreamCipher>, ServiceError> {
        let stream = Self::stream_ref(desc)?;
        let cache_key = (stream.id, stream.incarnation);
        if let Some(found) = self.ciphers.lock().get(&cache_key) {
            if found.has_key(key) {
                return Ok(found.clone());
            }
        }
        let epoch = desc
            .epoch_bytes()
            .ok_or_else(|| ServiceError::Internal("descriptor epoch".into()))?;
        let fingerprint = desc
            .fingerprint_bytes()
            .ok_or_else(|| ServiceError::Internal("descriptor fingerprint".into()))?;
        let cipher = Arc::new(StreamCipher::new(StreamEpoch(epoch), key.clone()));
        if !cipher.matches_fingerprint(&fingerprint) {
            return Err(ServiceError::WrongKey);
        }
        let mut cache = self.ciphers.lock();
        if cache.len() >= CIPHER_CACHE_MAX {
            cache.clear();
        }
        cache.insert(cache_key, cipher.clone());
        Ok(cipher)
    }

    /// The live descriptor of a name, expiring it first if its time is up.
    async fn live(
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
        if desc.value.expired_at(self.now_ms(), entry.last_access_ms()) {
            let _guard = entry.changes.lock().await;
            if let Some(current) = entry.load().await? {
                if current.value.is_live() {
                    self.retire(project, &entry, &current).await?;
                }
            }
            return Err(ServiceError::NotFound);
        }
        self.schedule_expiry(project, &desc.value, entry.last_access_ms());
        Ok((entry, desc))
    }

    /// The levels a read of `desc` walks: the stream, then its fork sources.
    async fn chain(
        &self,
        project: &str,
        desc: Arc<Versioned<Descriptor>>,
        key: &StreamKey,
    ) -> Result<Vec<Level>, ServiceError> {
        let mut levels: Vec<Level> = Vec::new();
        let mut current = desc;
        let mut cap = u64::MAX;
        for _ in 0..FORK_DEPTH_MAX {
            let stream = Self::stream_ref(&current.value)?;
            let shard = self.shard_for(&stream.id).clone();
            let cipher = self.cipher(&current.value, key)?;
            let base = current.value.fork.as_ref().map_or(0, |f| f.base);
            let origin = current.value.fork.clone();
            levels.push(Level {
                stream,
                shard,
                cipher,
                base,
                cap,
            });
            let Some(origin) = origin else {
                return Ok(levels);
            };
            cap = base;
            let source = self
                .registry
                .entry(project, &origin.source)
                .load()
                .await?
                .filter(|s| {
                    s.value.incarnation == origin.source_incarnation
                        && s.value.state != StreamState::Deleted
                })
                .ok_or_else(|| ServiceError::Internal("a fork's source is gone".into()))?;
            current = source;
        }
        Err(ServiceError::Internal("fork chain too deep".into()))
    }

    /// The durable tail position and closed flag of a chain's top level.
    fn tail_of(level: &Level) -> Result<(u64, bool), ServiceError> {
        let info = level
            .shard
            .stream_info(&level.stream)
            .ok_or(ServiceError::NotFound)?;
        Ok((
            level.base + info.tail.next_offset,
            info.tail.status == strata_engine::shard::StreamStatus::Closed,
        ))
    }

    /// Reads records of `routing_key` from `from` across the chain (deepest
    /// source first). A fork inherits only its source's default key, so the
    /// source levels are read for `""` alone. The returned position moves past
    /// every record the read passed over, matching or not.
    async fn read_chain(
        levels: &[Level],
        from: u64,
        tail: u64,
        view: KeyView<'_>,
    ) -> Result<(Vec<ReadRecord>, Vec<bool>, u64), ServiceError> {
        let KeyView {
            routing_key,
            max_bytes,
            max_records,
        } = view;
        let max_records = max_records.max(1);
        let mut out = Vec::new();
        let mut starts = Vec::new();
        let mut position = from;
        let mut bytes = 0usize;
        let mut rounds = 0usize;
        for (depth, level) in levels.iter().enumerate().rev() {
            let end = if depth == 0 { tail } else { level.cap };
            if position >= end {
                continue;
            }
            if depth > 0 && !routing_key.is_empty() {
                // Sources contribute only their default key.
                position = end;
                continue;
            }
            if position < level.base {
                return Err(ServiceError::Internal(format!(
                    "position {position} lies below fork base {} with nothing to read it from",
                    level.base
                )));
            }
            // Each round either returns records or moves `position` forward;
            // a read that finds none of its key's records in READ_ROUNDS_MAX
            // rounds answers an empty page whose position has moved on.
            while position < end
                && (out.is_empty() || (bytes < max_bytes && out.len() < max_records))
            {
                if rounds >= READ_ROUNDS_MAX {
                    break;
                }
                rounds += 1;
                let limits = ReadLimits {
                    max_records: ((end - position).min(10_000) as usize)
                        .min(max_records - out.len()),
                    max_bytes: max_bytes.saturating_sub(bytes).max(1),
                };
                let batch = level
                    .shard
                    .read(
                        &level.stream,
                        position - level.base,
                        limits,
                        &level.cipher,
                        Some(routing_key),
                    )
                    .await?;
                let before = position;
                let mut capped = false;
                for record in batch.records {
                    let at = level.base + record.offset;
                    if at >= end || out.len() >= max_records {
                        capped = true;
                        break;
                    }
                    bytes += record.payload.len();
                    starts.push(record.append_start);
                    out.push(ReadRecord {
                        payload: record.payload,
                    });
                    position = at + 1;
                }
                if !capped {
                    position = position.max((level.base + batch.next_offset).min(end));
                }
                if position == before {
                    break;
                }
            }
            // Stopped early (page full, rounds spent): the rest waits.
            if position < end {
                break;
            }
        }
        Ok((out, starts, position))
    }

    // ------------------------------------------------------------------ create

    pub async fn create(
        &self,
        project: &str,
        name: &str,
        spec: CreateSpec,
        key: &StreamKey,
    ) -> Result<CreateOutcome, ServiceError> {
        let entry = self.registry.entry(project, name);
        let _guard = entry.changes.lock().await;
        let mut current = entry.load().await?;
        let now = self.now_ms();
        if let Some(existing) = current.clone() {
            match existing.value.state {
                StreamState::SoftDeleted => return Err(ServiceError::RetainedForForks),
                StreamState::Live if existing.value.expired_at(now, entry.last_access_ms()) => {
                    self.retire(project, &entry, &existing).await?;
                    current = entry.load().await?;
                }
                StreamState::Live => return self.confirm(project, &existing, &spec, key).await,
                StreamState::Deleted => {}
            }
        }
        if current
            .as_ref()
            .is_some_and(|c| c.value.state != StreamState::Deleted)
        {
            // Retired into a soft-deleted stream (forks still read it).
            return Err(ServiceError::RetainedForForks);
        }
        let incarnation = current.as_ref().map_or(1, |c| c.value.incarnation + 1);

        // Resolve a fork before anything is written.
        let fork = match &spec.fork {
            Some(fork) => Some(self.resolve_fork(project, fork, &spec, key).await?),
            None => None,
        };
        let content_type = match (&spec.content_type, &fork) {
            (Some(ct), _) => ct.clone(),
            (None, Some(f)) => f.source.value.content_type.clone(),
            (None, None) => self.config.default_content_type.clone(),
        };
        let records = self.records_of(&content_type, &spec.body, true)?;
        let expiry = match (&fork, spec.expiry.ttl_seconds, &spec.expiry.expires_at) {
            (Some(f), None, None) => Expiry {
                ttl_seconds: f.source.value.ttl_seconds,
                expires_at: f
                    .source
                    .value
                    .expires_at
                    .clone()
                    .zip(f.source.value.expires_at_ms),
            },
            _ => spec.expiry.clone(),
        };
        let id = strata_engine::stream_id(project, name);
        let epoch = StreamEpoch(self.entropy.bytes16());
        let cipher = Arc::new(StreamCipher::new(epoch, key.clone()));
        let desc = Descriptor {
            format: DESCRIPTOR_FORMAT,
            project: project.to_string(),
            name: name.to_string(),
            stream_id: hex(&id),
            incarnation,
            epoch: hex(&epoch.0),
            key_fingerprint: hex(&cipher.fingerprint()),
            content_type: content_type.clone(),
            created_ms: now,
            ttl_seconds: expiry.ttl_seconds,
            expires_at: expiry.expires_at.as_ref().map(|(text, _)| text.clone()),
            expires_at_ms: expiry.expires_at.as_ref().map(|(_, ms)| *ms),
            created_closed: spec.closed,
            fork: fork.as_ref().map(|f| f.origin.clone()),
            fork_refs: 0,
            watches: spec.watches.clone(),
            state: StreamState::Live,
            write_token: hex(&self.entropy.bytes16()),
        };
        if let Some(f) = &fork {
            self.adjust_fork_refs(project, &f.origin.source, f.origin.source_incarnation, 1)
                .await?;
        }
        let written = match entry.store(current.as_deref(), desc).await {
            Ok(w) => w,
            Err(e) => {
                if let Some(f) = &fork {
                    let _ = self
                        .release_source(project, &f.origin.source, f.origin.source_incarnation)
                        .await;
                }
                return Err(e.into());
            }
        };
        let stream = StreamRef { id, incarnation };
        let shard = self.shard_for(&id).clone();
        shard.create_stream(stream, &cipher).await?;
        let mut own = Vec::new();
        if let Some(prefix) = fork.as_ref().and_then(|f| f.prefix.clone()) {
            own.push(prefix);
        }
        own.extend(records);
        if !own.is_empty() || spec.closed {
            let mut request = AppendRequest::new(stream, cipher, own);
            request.close = spec.closed;
            shard.append(request).await?;
        }
        entry.touch(now);
        self.schedule_expiry(project, &written.value, now);
        self.list_in_catalog(&written.value).await?;
        let base = written.value.fork.as_ref().map_or(0, |f| f.base);
        let info = shard.stream_info(&stream).ok_or(ServiceError::NotFound)?;
        if info.tail.next_offset > 0 {
            self.notify_appended(project, name);
        }
        Ok(CreateOutcome {
            created: true,
            content_type,
            tail: base + info.tail.next_offset,
            closed: spec.closed,
        })
    }

    /// An existing live stream met by a create: the same configuration is
    /// confirmed (200), another one conflicts (409).
    async fn confirm(
        &self,
        project: &str,
        existing: &Arc<Versioned<Descriptor>>,
        spec: &CreateSpec,
        key: &StreamKey,
    ) -> Result<CreateOutcome, ServiceError> {
        let d = &existing.value;
        let same = match spec.mode {
            CreateMode::Raw => Self::same_protocol_config(d, spec, &self.config),
            CreateMode::Product => Self::same_product_config(d, spec),
        };
        if !same {
            return Err(ServiceError::Conflict(
                "a stream with another configuration exists at this name".into(),
            ));
        }
        // A retry also repairs a catalog entry lost between the two writes.
        self.list_in_catalog(d).await?;
        let levels = self.chain(project, existing.clone(), key).await?;
        let (tail, closed) = Self::tail_of(&levels[0])?;
        Ok(CreateOutcome {
            created: false,
            content_type: d.content_type.clone(),
            tail,
            closed,
        })
    }

    /// A raw create against an existing stream compares only protocol fields.
    fn same_protocol_config(d: &Descriptor, spec: &CreateSpec, config: &StreamsConfig) -> bool {
        let content_type_same = match &spec.content_type {
            Some(ct) => media_type(ct) == media_type(&d.content_type),
            None => {
                spec.fork.is_some()
                    || media_type(&d.content_type) == media_type(&config.default_content_type)
            }
        };
        let fork_same = match (&spec.fork, &d.fork) {
            (None, None) => true,
            (Some(want), Some(have)) => {
                want.source == have.source
                    && want.sub_offset == have.sub_offset
                    && (want.offset.is_none() || want.offset == have.requested_offset)
            }
            _ => false,
        };
        let expiry_same = if spec.fork.is_some()
            && spec.expiry.ttl_seconds.is_none()
            && spec.expiry.expires_at.is_none()
        {
            true
        } else {
            spec.expiry.ttl_seconds == d.ttl_seconds
                && spec.expiry.expires_at.as_ref().map(|(t, _)| t) == d.expires_at.as_ref()
        };
        content_type_same && fork_same && expiry_same && spec.closed == d.created_closed
    }

    /// A product create compares the normalized configuration: media type,
    /// idle seconds or expiry instant, open state, and watches.
    fn same_product_config(d: &Descriptor, spec: &CreateSpec) -> bool {
        let media_same = spec
            .content_type
            .as_deref()
            .is_some_and(|ct| media_type(ct) == media_type(&d.content_type));
        media_same
            && spec.expiry.ttl_seconds == d.ttl_seconds
            && spec.expiry.expires_at.as_ref().map(|(_, ms)| *ms) == d.expires_at_ms
            && spec.closed == d.created_closed
            && spec.watches == d.watches
    }

    fn records_of(
        &self,
        content_type: &str,
        body: &Bytes,
        allow_empty_array: bool,
    ) -> Result<Vec<Bytes>, ServiceError> {
        let records = if body.is_empty() {
            Vec::new()
        } else if is_json(content_type) {
            let records = json::records_from_body(body)
                .map_err(|e| ServiceError::BadRequest(e.to_string()))?;
            if records.is_empty() && !allow_empty_array {
                return Err(ServiceError::BadRequest(
                    "an empty JSON array appends nothing".into(),
                ));
            }
            records
        } else {
            vec![body.clone()]
        };
        self.check_record_sizes(&records)?;
        Ok(records)
    }

    /// Refuses a record over `max_record_bytes`.
    fn check_record_sizes(&self, records: &[Bytes]) -> Result<(), ServiceError> {
        if records
            .iter()
            .any(|r| r.len() > self.config.max_record_bytes)
        {
            return Err(ServiceError::TooLarge {
                what: "a record",
                limit: self.config.max_record_bytes as u64,
            });
        }
        Ok(())
    }

    async fn resolve_fork(
        &self,
        project: &str,
        fork: &ForkSpec,
        spec: &CreateSpec,
        key: &StreamKey,
    ) -> Result<ResolvedFork, ServiceError> {
        let source = match self.live(project, &fork.source).await {
            Ok((_, desc)) => desc,
            Err(ServiceError::Gone) => {
                return Err(ServiceError::Conflict(
                    "the fork source was deleted and is kept only for its forks".into(),
                ))
            }
            Err(e) => return Err(e),
        };
        if let Some(ct) = &spec.content_type {
            if media_type(ct) != media_type(&source.value.content_type) {
                return Err(ServiceError::Conflict(
                    "a fork's content type must be its source's".into(),
                ));
            }
        }
        let levels = self.chain(project, source.clone(), key).await?;
        let (tail, _) = Self::tail_of(&levels[0])?;
        let offset = fork.offset.unwrap_or(tail);
        if offset > tail {
            return Err(ServiceError::BadRequest(
                "Stream-Fork-Offset is beyond the source's tail".into(),
            ));
        }
        let mut base = offset;
        let mut prefix = None;
        if fork.sub_offset > 0 {
            let n = fork.sub_offset;
            let everything = KeyView {
                routing_key: b"",
                max_bytes: usize::MAX,
                max_records: usize::MAX,
            };
            let (records, starts, _) = Self::read_chain(&levels, offset, tail, everything).await?;
            let first_batch = records
                .iter()
                .zip(&starts)
                .enumerate()
                .take_while(|(i, (_, start))| *i == 0 || !**start)
                .count() as u64;
            if first_batch == 0 {
                return Err(ServiceError::BadRequest(
                    "Stream-Fork-Sub-Offset needs a record after the fork offset".into(),
                ));
            }
            if is_json(&source.value.content_type) {
                if n > first_batch {
                    return Err(ServiceError::BadRequest(
                        "Stream-Fork-Sub-Offset is past the end of the append".into(),
                    ));
                }
                base = offset + n;
            } else {
                let record = &records[0].payload;
                if n > record.len() as u64 {
                    return Err(ServiceError::BadRequest(
                        "Stream-Fork-Sub-Offset is past the end of the record".into(),
                    ));
                }
                prefix = Some(record.slice(..n as usize));
            }
        }
        Ok(ResolvedFork {
            origin: ForkOrigin {
                source: fork.source.clone(),
                source_incarnation: source.value.incarnation,
                base,
                requested_offset: fork.offset,
                sub_offset: fork.sub_offset,
            },
            source,
            prefix,
        })
    }

    /// Adds `delta` to a source's fork count.
    async fn adjust_fork_refs(
        &self,
        project: &str,
        source: &str,
        incarnation: u64,
        delta: i64,
    ) -> Result<Option<Arc<Versioned<Descriptor>>>, ServiceError> {
        let entry = self.registry.entry(project, source);
        let _guard = entry.changes.lock().await;
        let Some(current) = entry.load().await? else {
            return Ok(None);
        };
        if current.value.incarnation != incarnation || current.value.state == StreamState::Deleted {
            return Ok(None);
        }
        let mut next = current.value.clone();
        next.fork_refs = next.fork_refs.saturating_add_signed(delta);
        next.write_token = hex(&self.entropy.bytes16());
        Ok(Some(entry.store(Some(&current), next).await?))
    }

    /// A fork went away: the source loses a reference, and if it was soft
    /// deleted and that was the last one, it is deleted too (and so on up).
    async fn release_source(
        &self,
        project: &str,
        source: &str,
        incarnation: u64,
    ) -> Result<(), ServiceError> {
        let mut next = Some((source.to_string(), incarnation));
        for _ in 0..FORK_DEPTH_MAX {
            let Some((name, incarnation)) = next.take() else {
                return Ok(());
            };
            let entry = self.registry.entry(project, &name);
            let _guard = entry.changes.lock().await;
            let Some(current) = entry.load().await? else {
                return Ok(());
            };
            if current.value.incarnation != incarnation
                || current.value.state == StreamState::Deleted
            {
                return Ok(());
            }
            let mut updated = current.value.clone();
            updated.fork_refs = updated.fork_refs.saturating_sub(1);
            updated.write_token = hex(&self.entropy.bytes16());
            if updated.fork_refs == 0 && updated.state == StreamState::SoftDeleted {
                updated.state = StreamState::Deleted;
                entry.store(Some(&current), updated.clone()).await?;
                self.drop_engine_stream(&updated).await;
                self.notify_deleted(project, &name);
                next = updated
                    .fork
                    .as_ref()
                    .map(|f| (f.source.clone(), f.source_incarnation));
            } else {
                entry.store(Some(&current), updated).await?;
            }
        }
        Ok(())
    }

    async fn drop_engine_stream(&self, desc: &Descriptor) {
        if let Ok(stream) = Self::stream_ref(desc) {
            if let Err(e) = self.shard_for(&stream.id).delete_stream(stream).await {
                if e != EngineError::StreamNotFound {
                    tracing::warn!(name = %desc.name, error = %e, "deleting the stream's records failed; its data stays until reclaimed");
                }
            }
        }
    }

    /// Ends a live stream (delete, or expiry) with the entry's lock held: a
    /// soft delete while forks read it, otherwise a tombstone.
    async fn retire(
        &self,
        project: &str,
        entry: &Entry,
        current: &Arc<Versioned<Descriptor>>,
    ) -> Result<(), ServiceError> {
        let mut next = current.value.clone();
        next.write_token = hex(&self.entropy.bytes16());
        if next.fork_refs > 0 {
            next.state = StreamState::SoftDeleted;
            entry.store(Some(current), next.clone()).await?;
            self.unlist_from_catalog(&next).await;
            return Ok(());
        }
        next.state = StreamState::Deleted;
        entry.store(Some(current), next.clone()).await?;
        self.unlist_from_catalog(&next).await;
        self.drop_engine_stream(&next).await;
        self.notify_deleted(project, &next.name);
        if let Some(origin) = &next.fork {
            self.release_source(project, &origin.source, origin.source_incarnation)
                .await?;
        }
        Ok(())
    }

    // ----------------------------------------------------------------- catalog

    async fn list_in_catalog(&self, desc: &Descriptor) -> Result<(), ServiceError> {
        let entry = CatalogEntry {
            name: desc.name.clone(),
            content_type: desc.content_type.clone(),
            created_ms: desc.created_ms,
            incarnation: desc.incarnation,
        };
        self.catalog
            .add(&desc.project, entry)
            .await
            .map_err(|e| ServiceError::Unavailable(format!("updating the catalog: {e}")))
    }

    /// Best effort: a failure leaves an entry that the name's next create
    /// replaces (the stream itself is already retired).
    async fn unlist_from_catalog(&self, desc: &Descriptor) {
        if let Err(e) = self
            .catalog
            .remove(&desc.project, &desc.name, desc.incarnation)
            .await
        {
            tracing::warn!(name = %desc.name, error = %e, "removing a catalog entry failed");
        }
    }

    /// Waits until the start-up scan ended, at most `STARTUP_SCAN_WAIT_MAX`:
    /// a listing waits for it, so that a restarted server does not list what
    /// the scan is about to repair. After a start, the catalog is trusted
    /// once the scan repaired it; a scan slower than this bound is answered
    /// from the catalog as it is.
    pub async fn startup_scanned(&self) {
        let mut scanned = self.startup_scanned.subscribe();
        let _ = tokio::time::timeout(STARTUP_SCAN_WAIT_MAX, scanned.wait_for(|done| *done)).await;
    }

    /// A page of the project's live streams (bucket GETs, never one
    /// descriptor per stream). Listings wait for [`Streams::startup_scanned`]
    /// first.
    pub async fn catalog_page(
        &self,
        project: &str,
        from: Option<&CatalogCursor>,
        limit: usize,
    ) -> Result<CatalogPage, ServiceError> {
        self.catalog
            .page(project, from, limit)
            .await
            .map_err(|e| ServiceError::Unavailable(format!("reading the catalog: {e}")))
    }

    // ------------------------------------------------------------------ delete

    pub async fn delete(&self, project: &str, name: &str) -> Result<(), ServiceError> {
        let (entry, _) = self.live(project, name).await?;
        let _guard = entry.changes.lock().await;
        let current = entry.load().await?.ok_or(ServiceError::NotFound)?;
        match current.value.state {
            StreamState::Live => self.retire(project, &entry, &current).await,
            StreamState::SoftDeleted => Err(ServiceError::Gone),
            StreamState::Deleted => Err(ServiceError::NotFound),
        }
    }

    // ------------------------------------------------------------------ append

    /// Appends, waiting at most until `deadline`: then the answer is
    /// `OutcomeUnknown` while the append goes on (queued in the engine; its
    /// acknowledgement is still followed by the access time and the
    /// observers' notice, in a task of its own). Only the descriptor lookup
    /// and the engine's answer can wait for the store; neither registers a
    /// timer when it is ready at once.
    pub async fn append(
        &self,
        project: &str,
        name: &str,
        spec: AppendSpec,
        key: &StreamKey,
        deadline: StoreDeadline,
    ) -> Result<AppendOutcome, ServiceError> {
        let (entry, desc) =
            match tokio::time::timeout_at(deadline.at, self.live(project, name)).await {
                Ok(found) => found?,
                Err(_) => return Err(deadline.lookup_timed_out()),
            };
        let cipher = self.cipher(&desc.value, key)?;
        let stream = Self::stream_ref(&desc.value)?;
        let shard = self.shard_for(&stream.id);
        let base = desc.value.fork.as_ref().map_or(0, |f| f.base);
        let records = if let Some(records) = spec.records {
            self.check_record_sizes(&records)?;
            records
        } else if spec.body.is_empty() {
            Vec::new()
        } else {
            let matches = spec
                .content_type
                .as_deref()
                .is_some_and(|ct| media_type(ct) == media_type(&desc.value.content_type));
            if !matches {
                // A closed stream answers as closed first.
                if let Some(info) = shard.stream_info(&stream) {
                    if info.tail.status == strata_engine::shard::StreamStatus::Closed {
                        return Err(ServiceError::Closed {
                            tail: base + info.tail.next_offset,
                        });
                    }
                }
                return Err(ServiceError::ContentTypeMismatch);
            }
            self.records_of(&desc.value.content_type, &spec.body, false)?
        };
        let appended_records = !records.is_empty();
        let mut request = AppendRequest::new(stream, cipher, records);
        request.routing_key = spec.routing_key;
        request.producer = spec.producer;
        request.stream_seq = spec.stream_seq;
        request.close = spec.close;
        let mut ticket = shard.start_append(request)?;
        let answer = match tokio::time::timeout_at(deadline.at, &mut ticket).await {
            Ok(answer) => answer,
            Err(_) => {
                self.finish_detached(ticket, entry, project, name, appended_records);
                return Err(deadline.write_timed_out());
            }
        };
        let ack = answer.map_err(|e| match e {
            EngineError::StreamClosed { next_offset } => ServiceError::Closed {
                tail: base + next_offset,
            },
            other => other.into(),
        })?;
        entry.touch(self.now_ms());
        if appended_records && ack.kind == AppendKind::Appended {
            self.notify_appended(project, name);
        }
        let result = match ack.kind {
            AppendKind::Appended => AppendResult::Appended,
            AppendKind::Duplicate(mut state) => {
                // Positions, like every offset this service answers.
                state.first_offset += base;
                state.next_offset += base;
                AppendResult::Duplicate(state)
            }
            AppendKind::AlreadyClosed => AppendResult::AlreadyClosed,
        };
        Ok(AppendOutcome {
            result,
            tail: base + ack.next_offset,
            closed: ack.closed,
        })
    }

    /// Seals (closes) a stream without its key: idempotent, durable and
    /// monotonic; the raw view shows it as `Stream-Closed`.
    pub async fn seal(&self, project: &str, name: &str) -> Result<AppendOutcome, ServiceError> {
        let (entry, desc) = self.live(project, name).await?;
        let stream = Self::stream_ref(&desc.value)?;
        let base = desc.value.fork.as_ref().map_or(0, |f| f.base);
        let ack = self
            .shard_for(&stream.id)
            .close_stream_without_key(stream)
            .await?;
        entry.touch(self.now_ms());
        Ok(AppendOutcome {
            result: match ack.kind {
                AppendKind::AlreadyClosed => AppendResult::AlreadyClosed,
                _ => AppendResult::Appended,
            },
            tail: base + ack.next_offset,
            closed: ack.closed,
        })
    }

    // -------------------------------------------------------------------- read

    pub async fn head(&self, project: &str, name: &str) -> Result<StreamMeta, ServiceError> {
        let (_, desc) = self.live(project, name).await?;
        self.meta_of(&desc.value)
    }

    /// A live stream's metadata and epoch, after checking `key` against it
    /// (one lookup: exists, then the key): what a product write or read
    /// needs before it starts, and what its cursors are bound to.
    pub async fn keyed_meta(
        &self,
        project: &str,
        name: &str,
        key: &StreamKey,
    ) -> Result<(StreamMeta, [u8; 16]), ServiceError> {
        let (_, desc) = self.live(project, name).await?;
        self.cipher(&desc.value, key)?;
        let epoch = desc
            .value
            .epoch_bytes()
            .ok_or_else(|| ServiceError::Internal("descriptor epoch".into()))?;
        Ok((self.meta_of(&desc.value)?, epoch))
    }

    fn meta_of(&self, desc: &Descriptor) -> Result<StreamMeta, ServiceError> {
        let stream = Self::stream_ref(desc)?;
        let info = self
            .shard_for(&stream.id)
            .stream_info(&stream)
            .ok_or(ServiceError::NotFound)?;
        let base = desc.fork.as_ref().map_or(0, |f| f.base);
        Ok(StreamMeta {
            name: desc.name.clone(),
            content_type: desc.content_type.clone(),
            created_ms: desc.created_ms,
            epoch: desc.epoch.clone(),
            watches: desc.watches.clone(),
            tail: base + info.tail.next_offset,
            closed: info.tail.status == strata_engine::shard::StreamStatus::Closed,
            ttl_seconds: desc.ttl_seconds,
            expires_at: desc.expires_at.clone(),
            incarnation: desc.incarnation,
        })
    }

    /// Reads the default routing key from a position (renews the sliding TTL
    /// of this stream only): the raw route's view.
    pub async fn read(
        &self,
        project: &str,
        name: &str,
        from: ReadFrom,
        key: &StreamKey,
    ) -> Result<ReadOutcome, ServiceError> {
        let view = KeyView {
            routing_key: b"",
            max_bytes: self.config.read_chunk_bytes,
            max_records: usize::MAX,
        };
        self.read_key(project, name, from, key, view).await
    }

    /// Reads one routing key's records from a position, up to about
    /// `view.max_bytes` of payload (at least one record when there is one).
    pub async fn read_key(
        &self,
        project: &str,
        name: &str,
        from: ReadFrom,
        key: &StreamKey,
        view: KeyView<'_>,
    ) -> Result<ReadOutcome, ServiceError> {
        let (entry, desc) = self.live(project, name).await?;
        let levels = self.chain(project, desc.clone(), key).await?;
        let (tail, closed) = Self::tail_of(&levels[0])?;
        let from = match from {
            ReadFrom::Start => 0,
            ReadFrom::Tail => tail,
            ReadFrom::Position(p) if p > tail => {
                return Err(ServiceError::BadRequest(
                    "offset is beyond the stream's tail".into(),
                ))
            }
            ReadFrom::Position(p) => p,
        };
        let (records, _, next) = Self::read_chain(&levels, from, tail, view).await?;
        entry.touch(self.now_ms());
        Ok(ReadOutcome {
            records,
            from,
            next: next.max(from),
            tail,
            closed,
            content_type: desc.value.content_type.clone(),
            incarnation: desc.value.incarnation,
        })
    }

    /// Waits until the stream has records at or past `position`, is closed, or
    /// `timeout` passes. Only the stream's own appends wake it (never its
    /// source's).
    pub async fn wait(
        &self,
        project: &str,
        name: &str,
        position: u64,
        timeout: Duration,
    ) -> Result<WaitOutcome, ServiceError> {
        let (entry, desc) = self.live(project, name).await?;
        let stream = Self::stream_ref(&desc.value)?;
        let base = desc.value.fork.as_ref().map_or(0, |f| f.base);
        let shard = self.shard_for(&stream.id);
        let own = position.saturating_sub(base);
        let outcome = shard.wait_for(&stream, own, timeout).await?;
        entry.touch(self.now_ms());
        Ok(match outcome {
            WaitOutcome::Ready { tail, closed } => WaitOutcome::Ready {
                tail: base + tail,
                closed,
            },
            WaitOutcome::TimedOut { tail } => WaitOutcome::TimedOut { tail: base + tail },
        })
    }

    /// Names of the live streams of a project.
    pub async fn live_names(&self, project: &str) -> Result<Vec<String>, ServiceError> {
        Ok(self.registry.names(project).await?)
    }

    /// The rest of an append whose request stopped waiting at its deadline:
    /// once the engine answers, what an acknowledgement is followed by.
    fn finish_detached(
        &self,
        ticket: strata_engine::AppendTicket,
        entry: Arc<Entry>,
        project: &str,
        name: &str,
        appended_records: bool,
    ) {
        let clock = self.clock.clone();
        let observer = self.observer.get().cloned();
        let (project, name) = (project.to_string(), name.to_string());
        tokio::spawn(async move {
            if let Ok(ack) = ticket.await {
                entry.touch(clock.now_ms());
                if appended_records && ack.kind == AppendKind::Appended {
                    if let Some(observer) = observer {
                        observer.appended(&project, &name);
                    }
                }
            }
        });
    }

    fn notify_appended(&self, project: &str, name: &str) {
        if let Some(observer) = self.observer.get() {
            observer.appended(project, name);
        }
    }

    fn notify_deleted(&self, project: &str, name: &str) {
        if let Some(observer) = self.observer.get() {
            observer.deleted(project, name);
        }
    }
}

struct ResolvedFork {
    origin: ForkOrigin,
    source: Arc<Versioned<Descriptor>>,
    /// A binary sub-offset's slice, the fork's first own record.
    prefix: Option<Bytes>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A shard refused for its missing manifest answers 503 with the
    /// engine's message, which names the repair (not a hidden internal error).
    #[test]
    fn a_missing_manifest_is_shown_with_its_repair() {
        let error = ServiceError::from(EngineError::ManifestMissing {
            shard: "s0".into(),
            found: "shards/s0/wal/00000000000000000007".into(),
        });
        match &error {
            ServiceError::Unavailable(message) => {
                assert!(message.contains("strata shard recover s0"), "{message}")
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
}
