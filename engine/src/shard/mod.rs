//! # The shard engine
//!
//! A shard is a set of streams that share one WAL, one manifest and one owner.
//! [`Shard::open`] claims it (see [`recovery`]); then one actor task runs the
//! write path of docs/ARCHITECTURE.md ("Write path and durability"):
//!
//! ```text
//! append(): build page bodies (compress) in the caller's task
//!   → bounded ingest queue (full ⇒ EngineError::Overloaded)
//!   → committer: validate against the *staged* tails, assign contiguous offsets
//!     in queue order, seal pages (encrypt), stage WAL entries
//!   → flush pump: pack everything staged into one WAL object; up to
//!     `pipeline_depth` create-only PUTs in flight, at least `min_flush_gap` apart
//!   → acker: objects complete in any order; the durable watermark advances over
//!     the contiguous prefix; only then are entries applied to the *durable*
//!     state readers see, and requests answered
//! ```
//!
//! Invariants (tested by the model test and the deterministic simulation):
//!
//! * Readers and waiters see only state from acknowledged WAL objects.
//! * Every reply — success or error — is sent only after everything committed
//!   before it is durable, so an answer never rests on state that may vanish.
//! * A failed PUT fails its requests and every later one; the owner then
//!   re-opens the shard from the store (a re-claim that only succeeds if nobody
//!   else claimed meanwhile), so no staged state survives a failure.
//! * A fenced owner acknowledges nothing more.

mod actor;
mod chunk;
mod gc;
pub mod history;
pub(crate) mod io;
pub mod producer;
mod read;
pub mod recovery;
mod seal;
pub mod sealed;
pub mod state;
pub(crate) mod tiers;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::RwLock;
use std::collections::HashMap;
use strata_manifest::{CasObject, ManifestCodec, RetryPolicy};
use strata_segments::{
    plan_pages, prepare_body, sealed_page_len, PageCipher, PreparedBody, StreamCipher,
    MAX_ROUTING_KEY_BYTES,
};
use strata_wal::CreateEntry;
use tokio::sync::{mpsc, oneshot, watch};

use crate::env::EngineEnv;
use crate::error::EngineError;
use crate::ids::{InstanceId, ShardName, StreamRef};
use crate::layout::{ObjectId, ShardLayout};

pub use read::{ReadBatch, ReadLimits, WaitOutcome};
pub use recovery::{inspect_log, inspect_log_at, inspect_log_from, LogView, RecoveryReport};
pub use state::{
    ApplyError, DurableStream, ProducerClaim, ProducerState, StreamStatus, StreamTable, Tail,
};
pub use tiers::ChunkCache;

/// The largest append entry a WAL object can carry beside its header, the
/// request's producer, `Stream-Seq` and close entries, and a shard name of
/// the longest length.
const APPEND_ENTRY_BYTES_MAX: usize = strata_wal::MAX_OBJECT_BYTES - (64 << 10);

/// Checks the request against every WAL format limit that is not a page's
/// (those `prepare_body` checks), so nothing is refused first by the encoder
/// inside a PUT task, where it would fail the whole group commit.
fn check_wal_limits(request: &AppendRequest) -> Result<(), EngineError> {
    if let Some(claim) = &request.producer {
        if claim.id.len() > strata_wal::MAX_PRODUCER_ID_BYTES {
            return Err(EngineError::TooLarge {
                what: "producer id",
                size: claim.id.len() as u64,
                limit: strata_wal::MAX_PRODUCER_ID_BYTES as u64,
            });
        }
    }
    if let Some(seq) = &request.stream_seq {
        if seq.len() > strata_wal::MAX_STREAM_SEQ_BYTES {
            return Err(EngineError::TooLarge {
                what: "Stream-Seq",
                size: seq.len() as u64,
                limit: strata_wal::MAX_STREAM_SEQ_BYTES as u64,
            });
        }
    }
    Ok(())
}

/// Tunables of one shard.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// Commands the ingest queue holds before `append` answers `Overloaded`.
    pub ingest_queue_capacity: usize,
    /// WAL PUTs in flight at once.
    pub pipeline_depth: usize,
    /// While a WAL PUT is in flight, another starts only once this many page
    /// bytes are staged (or a second object's worth is waiting): small batches
    /// wait for the PUT ahead, so each object carries more appends, and large
    /// ones are not held back.
    pub pipeline_min_bytes: usize,
    /// Minimum time between the starts of two WAL PUTs.
    pub min_flush_gap: Duration,
    /// A WAL object is cut at this many encoded bytes (one request is never
    /// split; held within the format's `MAX_OBJECT_BYTES`).
    pub max_object_bytes: usize,
    /// …or at this many entries (held within the format's `MAX_ENTRIES`):
    /// creates, closes and producer records count though they carry no pages.
    pub max_object_entries: usize,
    /// Page bytes staged or in flight before the committer stops taking commands.
    pub max_pending_bytes: usize,
    /// Durable page bytes held in memory before the committer stops taking
    /// commands (until sealing frees them).
    pub max_memory_page_bytes: u64,
    /// Records in one append request.
    pub max_records_per_append: usize,
    /// Payload bytes in one append request.
    pub max_append_bytes: usize,
    /// Parallel GETs while replaying the WAL.
    pub replay_parallelism: usize,
    /// Retries of store calls before a write counts as failed.
    pub store_retry: RetryPolicy,
    /// Back-off ceiling while re-opening after a store failure.
    pub reopen_backoff_max: Duration,
    /// Seal when the unsealed pages in memory reach this many bytes…
    pub seal_bytes: u64,
    /// …or this many WAL objects were acknowledged since the last seal…
    pub seal_objects: u64,
    /// …or the oldest unsealed change is this old.
    pub seal_age: Duration,
    /// Merge index runs when the manifest lists more than this many.
    pub max_index_runs: usize,
    /// How long garbage (old WAL objects, merged runs, dead segments) waits
    /// before it is deleted: readers that started before still find it.
    pub gc_grace: Duration,
    /// Local disk cache of sealed chunks (shared by the shards of a process).
    pub chunk_cache: Option<Arc<tiers::ChunkCache>>,
}

impl Default for ShardConfig {
    fn default() -> Self {
        ShardConfig {
            ingest_queue_capacity: 16_384,
            pipeline_depth: 4,
            pipeline_min_bytes: 16 << 10,
            min_flush_gap: Duration::ZERO,
            max_object_bytes: 16 << 20,
            max_object_entries: strata_wal::MAX_ENTRIES,
            max_pending_bytes: 128 << 20,
            max_memory_page_bytes: 2 << 30,
            max_records_per_append: 1 << 20,
            max_append_bytes: 64 << 20,
            replay_parallelism: 16,
            store_retry: RetryPolicy::default(),
            reopen_backoff_max: Duration::from_secs(5),
            seal_bytes: 24 << 20,
            seal_objects: 48,
            seal_age: Duration::from_secs(45),
            max_index_runs: 8,
            gc_grace: Duration::from_secs(600),
            chunk_cache: None,
        }
    }
}

/// An append: records of one routing key, optionally with producer and
/// `Stream-Seq` checks, optionally closing the stream.
#[derive(Clone)]
pub struct AppendRequest {
    pub stream: StreamRef,
    pub cipher: Arc<StreamCipher>,
    pub routing_key: Bytes,
    pub key_version: u32,
    pub records: Vec<Bytes>,
    /// Defaults to the engine clock.
    pub timestamp_ms: Option<u64>,
    pub producer: Option<ProducerClaim>,
    pub stream_seq: Option<Bytes>,
    /// Close the stream after these records (atomically).
    pub close: bool,
}

impl AppendRequest {
    /// A plain append of `records` on the default routing key.
    pub fn new(stream: StreamRef, cipher: Arc<StreamCipher>, records: Vec<Bytes>) -> Self {
        AppendRequest {
            stream,
            cipher,
            routing_key: Bytes::new(),
            key_version: 0,
            records,
            timestamp_ms: None,
            producer: None,
            stream_seq: None,
            close: false,
        }
    }
}

/// How an append was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendKind {
    /// New records (or a close) were made durable.
    Appended,
    /// A producer retry of an already durable append; nothing was written.
    Duplicate(ProducerState),
    /// A close-only request on a stream that was already closed.
    AlreadyClosed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendAck {
    pub kind: AppendKind,
    /// First offset of this request's records (equal to `next_offset` when none).
    pub first_offset: u64,
    /// The stream's tail after this request.
    pub next_offset: u64,
    pub closed: bool,
}

/// How a create was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateAck {
    Created,
    AlreadyExists,
}

/// A stream's durable tail, as readers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    pub tail: Tail,
    pub page_bytes: u64,
}

/// Lifecycle of an open shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardStatus {
    Active,
    /// Re-opening after a store failure; appends are refused meanwhile.
    Recovering,
    /// A newer owner holds the shard.
    Fenced,
    Stopped,
}

pub(crate) struct PreparedPage {
    body: PreparedBody,
    cipher: Arc<PageCipher>,
}

pub(crate) struct AppendJob {
    stream: StreamRef,
    /// `None` only for a close without records (`close_stream_without_key`).
    cipher: Option<Arc<StreamCipher>>,
    routing_key: Bytes,
    key_version: u32,
    pages: Vec<PreparedPage>,
    record_count: u64,
    payload_bytes: u64,
    timestamp_ms: u64,
    producer: Option<ProducerClaim>,
    stream_seq: Option<Bytes>,
    close: bool,
    reply: oneshot::Sender<Result<AppendAck, EngineError>>,
}

impl AppendJob {
    /// Whether the request's key is the stream's (constant-time comparison).
    fn cipher_matches(&self, epoch: &[u8; 16], fingerprint: &[u8; 16]) -> bool {
        match &self.cipher {
            Some(cipher) => cipher.epoch().0 == *epoch && cipher.matches_fingerprint(fingerprint),
            // A keyless job writes no page: it is a bare close.
            None => self.pages.is_empty() && self.close && self.producer.is_none(),
        }
    }
}

pub(crate) enum Command {
    Append(Box<AppendJob>),
    Create {
        create: CreateEntry,
        reply: oneshot::Sender<Result<CreateAck, EngineError>>,
    },
    Delete {
        stream: StreamRef,
        reply: oneshot::Sender<Result<(), EngineError>>,
    },
    /// Answers once everything committed before it is durable.
    Barrier {
        reply: oneshot::Sender<Result<(), EngineError>>,
    },
    /// Seals now; answers when a seal that started after it landed.
    Seal {
        reply: oneshot::Sender<Result<(), EngineError>>,
    },
    Shutdown {
        reply: oneshot::Sender<()>,
    },
}

/// Everything about a shard that does not change while it is open.
pub(crate) struct ShardCtx {
    pub env: EngineEnv,
    pub layout: ShardLayout,
    pub instance: InstanceId,
    pub config: ShardConfig,
    pub manifest: CasObject<ManifestCodec>,
}

/// A stream's durable state, shared between the acker (writer) and readers.
pub(crate) struct StreamCell {
    pub state: RwLock<DurableStream>,
    /// Bumped after every durable change; waiters watch it.
    pub changed: watch::Sender<u64>,
}

impl StreamCell {
    fn new(state: DurableStream) -> Self {
        StreamCell {
            state: RwLock::new(state),
            changed: watch::channel(0).0,
        }
    }

    fn bump(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }
}

/// State readers share with the actor.
pub(crate) struct ShardShared {
    pub streams: RwLock<HashMap<[u8; 16], Arc<StreamCell>>>,
    pub status: watch::Sender<ShardStatus>,
    pub memory_page_bytes: std::sync::atomic::AtomicU64,
    pub last_recovery: parking_lot::Mutex<RecoveryReport>,
    /// Segments reads in progress hold: garbage collection waits for them.
    pub pins: parking_lot::Mutex<HashMap<ObjectId, u32>>,
    pub gc_deleted_objects: std::sync::atomic::AtomicU64,
}

impl ShardShared {
    fn cell(&self, id: &[u8; 16]) -> Option<Arc<StreamCell>> {
        self.streams.read().get(id).cloned()
    }

    /// Pins segments until the guard drops. Readers pin while they still hold
    /// the stream's read lock, so a segment the collector finds unpinned is
    /// one no read can reach any more.
    pub fn pin_segments(
        self: &Arc<Self>,
        segments: impl IntoIterator<Item = ObjectId>,
    ) -> SegmentPins {
        let mut ids: Vec<ObjectId> = segments.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut pins = self.pins.lock();
        for id in &ids {
            *pins.entry(*id).or_default() += 1;
        }
        SegmentPins {
            shared: self.clone(),
            ids,
        }
    }

    pub fn is_pinned(&self, id: ObjectId) -> bool {
        self.pins.lock().contains_key(&id)
    }
}

/// Segments pinned by one read.
pub(crate) struct SegmentPins {
    shared: Arc<ShardShared>,
    ids: Vec<ObjectId>,
}

impl Drop for SegmentPins {
    fn drop(&mut self) {
        let mut pins = self.shared.pins.lock();
        for id in &self.ids {
            if let Some(count) = pins.get_mut(id) {
                *count -= 1;
                if *count == 0 {
                    pins.remove(id);
                }
            }
        }
    }
}

/// The answer of a queued append ([`Shard::start_append`]): a future that
/// resolves once the append is durable (or refused). A dropped answer (the
/// shard stopped) is `OutcomeUnknown`.
pub struct AppendTicket {
    rx: oneshot::Receiver<Result<AppendAck, EngineError>>,
}

impl std::future::Future for AppendTicket {
    type Output = Result<AppendAck, EngineError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.rx)
            .poll(cx)
            .map(|answer| answer.unwrap_or(Err(EngineError::OutcomeUnknown)))
    }
}

/// A handle to an open shard. Cheap to clone.
#[derive(Clone)]
pub struct Shard {
    inner: Arc<ShardHandle>,
}

struct ShardHandle {
    ctx: Arc<ShardCtx>,
    shared: Arc<ShardShared>,
    tx: mpsc::Sender<Command>,
    task: parking_lot::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for ShardHandle {
    fn drop(&mut self) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
    }
}

impl Shard {
    /// Claims `shard` in the store for `instance`, replays its WAL, fences the
    /// previous owner, and starts the write path.
    pub async fn open(
        env: EngineEnv,
        shard: ShardName,
        instance: InstanceId,
        config: ShardConfig,
    ) -> Result<Shard, EngineError> {
        let layout = ShardLayout::new(shard);
        let manifest = CasObject::new(env.store.clone(), layout.manifest(), config.store_retry);
        let ctx = Arc::new(ShardCtx {
            env,
            layout,
            instance,
            config,
            manifest,
        });
        let opened = recovery::open_shard(&ctx).await?;
        let shared = Arc::new(ShardShared {
            streams: RwLock::new(HashMap::new()),
            status: watch::channel(ShardStatus::Active).0,
            memory_page_bytes: Default::default(),
            last_recovery: parking_lot::Mutex::new(opened.report.clone()),
            pins: Default::default(),
            gc_deleted_objects: Default::default(),
        });
        let (tx, rx) = mpsc::channel(ctx.config.ingest_queue_capacity.max(1));
        let actor = actor::Actor::new(ctx.clone(), shared.clone(), rx, opened);
        let task = tokio::spawn(actor.run());
        Ok(Shard {
            inner: Arc::new(ShardHandle {
                ctx,
                shared,
                tx,
                task: parking_lot::Mutex::new(Some(task)),
            }),
        })
    }

    pub fn name(&self) -> &ShardName {
        self.inner.ctx.layout.shard()
    }

    pub fn status(&self) -> ShardStatus {
        *self.inner.shared.status.borrow()
    }

    /// What the last (re)open found.
    pub fn last_recovery(&self) -> RecoveryReport {
        self.inner.shared.last_recovery.lock().clone()
    }

    /// Page bytes held in memory (durable, not yet sealed).
    pub fn unsealed_bytes(&self) -> u64 {
        self.inner
            .shared
            .memory_page_bytes
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a read in progress holds segment `id` (garbage collection
    /// must not delete it meanwhile).
    pub fn pins_segment(&self, id: ObjectId) -> bool {
        self.inner.shared.is_pinned(id)
    }

    /// Objects garbage collection has deleted since the shard was opened.
    pub fn gc_deleted_objects(&self) -> u64 {
        self.inner
            .shared
            .gc_deleted_objects
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn submit(&self, command: Command) -> Result<(), EngineError> {
        match self.status() {
            ShardStatus::Active => {}
            ShardStatus::Recovering => {
                return Err(EngineError::Unavailable {
                    reason: "shard is re-opening after a store failure".into(),
                })
            }
            ShardStatus::Fenced => return Err(EngineError::Fenced),
            ShardStatus::Stopped => return Err(EngineError::ShuttingDown),
        }
        self.inner.tx.try_send(command).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => EngineError::Overloaded,
            mpsc::error::TrySendError::Closed(_) => EngineError::ShuttingDown,
        })
    }

    /// A command the actor took and dropped unanswered (it stopped, or the
    /// process is going down) may have been written: its outcome is unknown.
    async fn answer<T>(rx: oneshot::Receiver<Result<T, EngineError>>) -> Result<T, EngineError> {
        rx.await.unwrap_or(Err(EngineError::OutcomeUnknown))
    }

    /// Creates a stream incarnation keyed by `cipher` (its epoch and key
    /// fingerprint are recorded; the key is not). Idempotent for the same
    /// incarnation and key; another key answers `WrongKey`.
    pub async fn create_stream(
        &self,
        stream: StreamRef,
        cipher: &StreamCipher,
    ) -> Result<CreateAck, EngineError> {
        let (reply, rx) = oneshot::channel();
        let create = CreateEntry {
            stream,
            created_ms: self.inner.ctx.env.clock.now_ms(),
            epoch: cipher.epoch().0,
            key_fingerprint: cipher.fingerprint(),
        };
        self.submit(Command::Create { create, reply })?;
        Self::answer(rx).await
    }

    /// Deletes a stream incarnation; its data becomes unreadable at once.
    pub async fn delete_stream(&self, stream: StreamRef) -> Result<(), EngineError> {
        let (reply, rx) = oneshot::channel();
        self.submit(Command::Delete { stream, reply })?;
        Self::answer(rx).await
    }

    /// Closes a stream (idempotent).
    pub async fn close_stream(
        &self,
        stream: StreamRef,
        cipher: Arc<StreamCipher>,
    ) -> Result<AppendAck, EngineError> {
        let mut request = AppendRequest::new(stream, cipher, Vec::new());
        request.close = true;
        self.append(request).await
    }

    /// Closes a stream without its key (idempotent): a close writes no page,
    /// so nothing needs the key; operators and the product seal use it.
    pub async fn close_stream_without_key(
        &self,
        stream: StreamRef,
    ) -> Result<AppendAck, EngineError> {
        let (reply, rx) = oneshot::channel();
        self.submit(Command::Append(Box::new(AppendJob {
            stream,
            cipher: None,
            routing_key: Bytes::new(),
            key_version: 0,
            pages: Vec::new(),
            record_count: 0,
            payload_bytes: 0,
            timestamp_ms: self.inner.ctx.env.clock.now_ms(),
            producer: None,
            stream_seq: None,
            close: true,
            reply,
        })))?;
        Self::answer(rx).await
    }

    /// Appends records; answers once they are durable in the store.
    pub async fn append(&self, request: AppendRequest) -> Result<AppendAck, EngineError> {
        self.start_append(request)?.await
    }

    /// Checks and queues an append (its pages are built here, in the
    /// caller's task) and returns the ticket its answer arrives on. Dropping
    /// the ticket does not withdraw the append: a caller that stops waiting
    /// at a deadline may hand the ticket to another task to learn the
    /// outcome.
    pub fn start_append(&self, request: AppendRequest) -> Result<AppendTicket, EngineError> {
        let config = &self.inner.ctx.config;
        let record_count = request.records.len();
        if record_count == 0 && !request.close {
            return Err(EngineError::EmptyAppend);
        }
        if record_count > config.max_records_per_append {
            return Err(EngineError::TooLarge {
                what: "record count",
                size: record_count as u64,
                limit: config.max_records_per_append as u64,
            });
        }
        let payload_bytes: usize = request.records.iter().map(Bytes::len).sum();
        if payload_bytes > config.max_append_bytes {
            return Err(EngineError::TooLarge {
                what: "append",
                size: payload_bytes as u64,
                limit: config.max_append_bytes as u64,
            });
        }
        check_wal_limits(&request)?;
        if request.routing_key.len() > MAX_ROUTING_KEY_BYTES {
            return Err(EngineError::TooLarge {
                what: "routing key",
                size: request.routing_key.len() as u64,
                limit: MAX_ROUTING_KEY_BYTES as u64,
            });
        }
        let timestamp_ms = request
            .timestamp_ms
            .unwrap_or_else(|| self.inner.ctx.env.clock.now_ms());
        let mut pages = Vec::new();
        if record_count > 0 {
            let cipher = request
                .cipher
                .page_cipher(&request.routing_key, request.key_version);
            for (i, range) in plan_pages(request.records.iter().map(Bytes::len))
                .into_iter()
                .enumerate()
            {
                let mut body = prepare_body(&request.records[range], timestamp_ms)?;
                body.append_start = i == 0;
                pages.push(PreparedPage {
                    body,
                    cipher: cipher.clone(),
                });
            }
        }
        let entry_bytes = strata_wal::append_entry_encoded_len(
            pages
                .iter()
                .map(|p| sealed_page_len(&p.body, request.routing_key.len())),
        );
        if entry_bytes > APPEND_ENTRY_BYTES_MAX {
            return Err(EngineError::TooLarge {
                what: "append (as encoded in the WAL)",
                size: entry_bytes as u64,
                limit: APPEND_ENTRY_BYTES_MAX as u64,
            });
        }
        let (reply, rx) = oneshot::channel();
        self.submit(Command::Append(Box::new(AppendJob {
            stream: request.stream,
            cipher: Some(request.cipher),
            routing_key: request.routing_key,
            key_version: request.key_version,
            pages,
            record_count: record_count as u64,
            payload_bytes: payload_bytes as u64,
            timestamp_ms,
            producer: request.producer,
            stream_seq: request.stream_seq,
            close: request.close,
            reply,
        })))?;
        Ok(AppendTicket { rx })
    }

    /// Answers once everything submitted before it is durable.
    pub async fn barrier(&self) -> Result<(), EngineError> {
        let (reply, rx) = oneshot::channel();
        self.submit(Command::Barrier { reply })?;
        Self::answer(rx).await
    }

    /// Seals everything durable now (whatever the thresholds say) and answers
    /// once the seal landed: then a re-open replays no WAL object written
    /// before this call.
    pub async fn seal_now(&self) -> Result<(), EngineError> {
        self.barrier().await?;
        let (reply, rx) = oneshot::channel();
        self.submit(Command::Seal { reply })?;
        Self::answer(rx).await
    }

    /// Durable tail of a live stream incarnation.
    pub fn stream_info(&self, stream: &StreamRef) -> Option<StreamInfo> {
        let cell = self.inner.shared.cell(&stream.id)?;
        let state = cell.state.read();
        state.tail.is_live(stream).then(|| StreamInfo {
            tail: state.tail.clone(),
            page_bytes: state.page_bytes,
        })
    }

    /// Sealed chunks a live stream has.
    pub fn sealed_chunks(&self, stream: &StreamRef) -> usize {
        self.inner
            .shared
            .cell(&stream.id)
            .map_or(0, |cell| cell.state.read().sealed.len())
    }

    /// A one-line picture of a stream's tiers (for failure reports).
    pub fn describe_stream(&self, stream: &StreamRef) -> String {
        let Some(cell) = self.inner.shared.cell(&stream.id) else {
            return "no such stream".into();
        };
        let state = cell.state.read();
        let sealed: Vec<String> = state
            .sealed
            .iter()
            .map(|c| format!("{}..{}@{:x}", c.first_offset(), c.end_offset(), c.segment.0))
            .collect();
        let pages: Vec<String> = state
            .pages
            .iter()
            .map(|p| format!("{}..{}", p.first_offset, p.end_offset()))
            .collect();
        format!(
            "tail {} {:?}; sealed [{}]; pages [{}]",
            state.tail.next_offset,
            state.tail.status,
            sealed.join(" "),
            pages.join(" ")
        )
    }

    /// Every durable stream tail (live, closed or deleted) of the shard.
    pub fn tails(&self) -> Vec<Tail> {
        let streams = self.inner.shared.streams.read();
        let mut tails: Vec<Tail> = streams
            .values()
            .map(|c| c.state.read().tail.clone())
            .collect();
        tails.sort_by_key(|t| t.stream.id);
        tails
    }

    /// Stops taking commands, flushes what is staged, and stops the actor.
    pub async fn shutdown(&self) {
        let (reply, rx) = oneshot::channel();
        if self
            .inner
            .tx
            .send(Command::Shutdown { reply })
            .await
            .is_ok()
        {
            let _ = rx.await;
        }
        let task = self.inner.task.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    /// Simulates a process crash: stops every task of this shard at once,
    /// including WAL writes in flight. Nothing is flushed or answered.
    pub fn crash(&self) {
        if let Some(task) = self.inner.task.lock().take() {
            task.abort();
        }
        self.inner.shared.status.send_replace(ShardStatus::Stopped);
    }
}
