//! The handle to an open shard ([`Shard`]): opening (claim, replay, fence,
//! then the actor task), the checks an append passes in the caller's task
//! before it is queued (limits, page building), queueing commands, and the
//! snapshot views of durable state. Reads and waits are `read.rs`'s. Every
//! answer rests on durable state only (docs/ARCHITECTURE.md, "Write path
//! and durability").

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use object_store::ObjectStore;
use parking_lot::RwLock;
use strata_manifest::{CasObject, Manifest, ManifestCodec, RetryPolicy, Versioned};
use strata_segments::{
    plan_pages, prepare_body, sealed_page_len, StreamCipher, ROUTING_KEY_BYTES_MAX,
};
use strata_wal::{ConsumerEntry, CreateEntry, UsageEntry};

use crate::consumer::durable::{ConsumerChange, ConsumerSetup, DurableConsumer};
use tokio::sync::{mpsc, oneshot, watch};

use super::actor;
use super::api::{AccountUsage, AppendAck, AppendRequest, CreateAck, ShardStatus, StreamInfo};
use super::command::{AppendJob, Command, PreparedPage, QueuedBytes};
use super::config::ShardConfig;
use super::ctx::ShardCtx;
use super::limits;
use super::recovery::{self, RecoveryReport};
use super::shared::ShardShared;
use super::state::Tail;
use crate::admin::ShardHolder;
use crate::env::EngineEnv;
use crate::error::EngineError;
use crate::ids::{InstanceId, ShardName, StreamRef};
use crate::layout::{ObjectId, ShardLayout};

/// A queued consumer change's answer ([`Shard::start_change_consumer`]).
pub struct ChangeTicket {
    rx: oneshot::Receiver<Result<(), EngineError>>,
}

impl ChangeTicket {
    /// Waits until the change is durable (or failed).
    pub async fn wait(self) -> Result<(), EngineError> {
        self.rx.await.unwrap_or(Err(EngineError::OutcomeUnknown))
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
    pub(super) inner: Arc<ShardHandle>,
}

pub(super) struct ShardHandle {
    pub(super) ctx: Arc<ShardCtx>,
    pub(super) shared: Arc<ShardShared>,
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

/// A shard's manifest as read before a claim: who holds the shard, and the
/// version a claim made from this read replaces (`If-Match` on its e-tag, or
/// `If-None-Match` when there was none). A claim from a read that another
/// write has replaced since fails as fenced, so a caller that read the
/// manifest to decide whether to claim can claim from that read without
/// reading it again.
#[derive(Debug, Clone)]
pub struct ClaimRead {
    current: Option<Versioned<Manifest>>,
}

impl ClaimRead {
    /// Reads `shard`'s manifest (one GET, retried by `retry`).
    pub async fn load(
        store: &Arc<dyn ObjectStore>,
        shard: &ShardName,
        retry: RetryPolicy,
    ) -> Result<ClaimRead, EngineError> {
        let layout = ShardLayout::new(shard.clone());
        let cas = CasObject::<ManifestCodec>::new(store.clone(), layout.manifest(), retry);
        let current = recovery::load_manifest_from(&cas).await?;
        Ok(ClaimRead { current })
    }

    /// The instance and epoch of the last claim (`None`: no manifest yet).
    pub fn holder(&self) -> Option<ShardHolder> {
        self.current.as_ref().map(|m| ShardHolder::of(&m.value))
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
        Self::open_with(env, shard, instance, config, None).await
    }

    /// [`Shard::open`], claiming from the manifest `read` saw instead of
    /// reading it again.
    pub async fn open_from(
        env: EngineEnv,
        shard: ShardName,
        instance: InstanceId,
        config: ShardConfig,
        read: ClaimRead,
    ) -> Result<Shard, EngineError> {
        Self::open_with(env, shard, instance, config, Some(read)).await
    }

    async fn open_with(
        env: EngineEnv,
        shard: ShardName,
        instance: InstanceId,
        config: ShardConfig,
        read: Option<ClaimRead>,
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
        let from = read.map_or(recovery::ClaimFrom::Fresh, |r| {
            recovery::ClaimFrom::Read(Box::new(r.current))
        });
        let opened = recovery::open_shard(&ctx, from).await?;
        let shared = Arc::new(ShardShared {
            streams: RwLock::new(HashMap::new()),
            status: watch::channel(ShardStatus::Active).0,
            memory_page_bytes: Default::default(),
            queued_bytes: Default::default(),
            last_recovery: parking_lot::Mutex::new(opened.report.clone()),
            pins: Default::default(),
            gc_deleted_objects: Default::default(),
            metrics: Default::default(),
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

    /// The shard's counts and gauges now (see `shard::metrics`).
    pub fn metrics(&self) -> super::metrics::ShardMetricsSnapshot {
        super::metrics::ShardMetricsSnapshot {
            queue_depth: self.queued() as u64,
            unsealed_bytes: self.unsealed_bytes(),
            gc_deleted_objects: self.gc_deleted_objects(),
            ..self.inner.shared.metrics.snapshot()
        }
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
        self.create_stream_for(stream, cipher, Bytes::new()).await
    }

    /// [`Shard::create_stream`], counted for `account` (the server's
    /// project, at most [`strata_wal::ACCOUNT_BYTES_MAX`] bytes): its usage
    /// is reported under that name ([`Shard::usage_by_account`]).
    pub async fn create_stream_for(
        &self,
        stream: StreamRef,
        cipher: &StreamCipher,
        account: Bytes,
    ) -> Result<CreateAck, EngineError> {
        if account.len() > strata_wal::ACCOUNT_BYTES_MAX {
            return Err(EngineError::TooLarge {
                what: "account",
                size: account.len() as u64,
                limit: strata_wal::ACCOUNT_BYTES_MAX as u64,
            });
        }
        let (reply, rx) = oneshot::channel();
        let create = CreateEntry {
            stream,
            created_ms: self.inner.ctx.env.clock.now_ms(),
            epoch: cipher.epoch().0,
            key_fingerprint: cipher.fingerprint(),
            account,
        };
        self.submit(Command::Create { create, reply })?;
        Self::answer(rx).await
    }

    /// Logs reads of streams (their counts and the time of the last), for
    /// usage and the idle clock; answers once durable. Streams deleted since
    /// are skipped.
    pub async fn record_usage(&self, usage: Vec<UsageEntry>) -> Result<(), EngineError> {
        if usage.is_empty() {
            return Ok(());
        }
        let (reply, rx) = oneshot::channel();
        self.submit(Command::Usage { usage, reply })?;
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
            _queued: self.queue_room(0)?,
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
        limits::check_wal_limits(&request)?;
        if request.routing_key.len() > ROUTING_KEY_BYTES_MAX {
            return Err(EngineError::TooLarge {
                what: "routing key",
                size: request.routing_key.len() as u64,
                limit: ROUTING_KEY_BYTES_MAX as u64,
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
        if entry_bytes > limits::APPEND_ENTRY_BYTES_MAX {
            return Err(EngineError::TooLarge {
                what: "append (as encoded in the WAL)",
                size: entry_bytes as u64,
                limit: limits::APPEND_ENTRY_BYTES_MAX as u64,
            });
        }
        let page_bytes: usize = pages.iter().map(|p| p.body.content.len()).sum();
        let queued = self.queue_room(page_bytes as u64)?;
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
            _queued: queued,
        })))?;
        Ok(AppendTicket { rx })
    }

    /// Room for `bytes` of pages in the actor's queue (at most
    /// `max_pending_bytes` queued), or `Overloaded`.
    fn queue_room(&self, bytes: u64) -> Result<QueuedBytes, EngineError> {
        let limit = self.inner.ctx.config.max_pending_bytes as u64;
        QueuedBytes::take(&self.inner.shared.queued_bytes, bytes, limit)
            .ok_or(EngineError::Overloaded)
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

    /// Logs a change to consumer group `name` of `stream`; answers once it
    /// is durable (and folded into the stream's consumer table).
    pub async fn change_consumer(
        &self,
        stream: StreamRef,
        name: &str,
        change: &ConsumerChange,
    ) -> Result<(), EngineError> {
        self.start_change_consumer(stream, name, change)?
            .wait()
            .await
    }

    /// Queues a consumer change and returns the ticket its answer arrives
    /// on. Changes queued one after another are logged in that order.
    pub fn start_change_consumer(
        &self,
        stream: StreamRef,
        name: &str,
        change: &ConsumerChange,
    ) -> Result<ChangeTicket, EngineError> {
        if name.is_empty() || name.len() > strata_wal::CONSUMER_NAME_BYTES_MAX {
            return Err(EngineError::TooLarge {
                what: "consumer name",
                size: name.len() as u64,
                limit: strata_wal::CONSUMER_NAME_BYTES_MAX as u64,
            });
        }
        let change = change.encode();
        if change.len() > strata_wal::CONSUMER_CHANGE_BYTES_MAX {
            return Err(EngineError::TooLarge {
                what: "consumer change",
                size: change.len() as u64,
                limit: strata_wal::CONSUMER_CHANGE_BYTES_MAX as u64,
            });
        }
        let entry = ConsumerEntry {
            stream,
            name: name.to_string(),
            change,
        };
        let (reply, rx) = oneshot::channel();
        self.submit(Command::Consumer { entry, reply })?;
        Ok(ChangeTicket { rx })
    }

    /// The generation of consumer group `name` of a live stream, if any.
    pub fn consumer_generation(&self, stream: &StreamRef, name: &str) -> Option<u64> {
        let cell = self.inner.shared.cell(&stream.id)?;
        let state = cell.state.read();
        if !state.tail.is_live(stream) {
            return None;
        }
        state.consumers.consumers.get(name).map(|c| c.generation)
    }

    /// The durable state of consumer group `name` of a live stream.
    pub fn consumer(&self, stream: &StreamRef, name: &str) -> Option<DurableConsumer> {
        let cell = self.inner.shared.cell(&stream.id)?;
        let state = cell.state.read();
        if !state.tail.is_live(stream) {
            return None;
        }
        state.consumers.consumers.get(name).cloned()
    }

    /// The generation and configuration of consumer group `name` of a live
    /// stream (without copying its record state).
    pub fn consumer_setup(&self, stream: &StreamRef, name: &str) -> Option<(u64, ConsumerSetup)> {
        let cell = self.inner.shared.cell(&stream.id)?;
        let state = cell.state.read();
        if !state.tail.is_live(stream) {
            return None;
        }
        state
            .consumers
            .consumers
            .get(name)
            .map(|c| (c.generation, c.setup.clone()))
    }

    /// The highest consumer generation a live stream ever gave (0: none).
    pub fn consumer_generation_max(&self, stream: &StreamRef) -> u64 {
        self.inner.shared.cell(&stream.id).map_or(0, |cell| {
            let state = cell.state.read();
            if state.tail.is_live(stream) {
                state.consumers.generation_max
            } else {
                0
            }
        })
    }

    /// `read` of the durable tail of a live stream incarnation, under the
    /// stream's read lock and without copying it: for request paths that
    /// need a field or two (`read` must be short and must not block).
    pub fn with_tail<R>(&self, stream: &StreamRef, read: impl FnOnce(&Tail) -> R) -> Option<R> {
        let cell = self.inner.shared.cell(&stream.id)?;
        let state = cell.state.read();
        state.tail.is_live(stream).then(|| read(&state.tail))
    }

    /// Durable tail of a live stream incarnation (a copy, with its stored
    /// bytes summed over its sealed chunks: see [`Shard::with_tail`] for a
    /// field or two).
    pub fn stream_info(&self, stream: &StreamRef) -> Option<StreamInfo> {
        let cell = self.inner.shared.cell(&stream.id)?;
        let state = cell.state.read();
        state.tail.is_live(stream).then(|| StreamInfo {
            tail: state.tail.clone(),
            page_bytes: state.page_bytes,
            stored_bytes: state.stored_bytes(),
        })
    }

    /// The usage of the live streams of `account` (one pass over the
    /// shard's streams).
    pub fn usage_of(&self, account: &[u8]) -> AccountUsage {
        let mut total = AccountUsage::default();
        self.each_live_usage(|of, usage| {
            if of == account {
                total.add(&usage);
            }
        });
        total
    }

    /// The usage of the live streams, summed by account (one pass).
    pub fn usage_by_account(&self) -> HashMap<Bytes, AccountUsage> {
        let mut totals: HashMap<Bytes, AccountUsage> = HashMap::new();
        self.each_live_usage(|account, usage| {
            if let Some(total) = totals.get_mut(account) {
                total.add(&usage);
            } else {
                totals.insert(Bytes::copy_from_slice(account), usage);
            }
        });
        totals
    }

    /// Calls `f` with each live stream's account and usage.
    fn each_live_usage(&self, mut f: impl FnMut(&[u8], AccountUsage)) {
        let cells: Vec<_> = self.inner.shared.streams.read().values().cloned().collect();
        for cell in cells {
            let state = cell.state.read();
            if state.tail.status == super::state::StreamStatus::Deleted {
                continue;
            }
            let usage = AccountUsage {
                streams: 1,
                records: state.tail.next_offset,
                appended_bytes: state.tail.payload_bytes,
                stored_bytes: state.stored_bytes(),
                reads: state.tail.usage.reads,
                read_bytes: state.tail.usage.read_bytes,
            };
            f(&state.tail.usage.account, usage);
        }
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

    /// Commands waiting in the shard's queue now.
    pub fn queued(&self) -> usize {
        self.inner.tx.max_capacity() - self.inner.tx.capacity()
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

    /// Confirms that the store still names this handle's claim as the
    /// shard's holder (one GET of the manifest). A handle learns that a newer
    /// owner fenced it only when it writes; an answer that rests on its state
    /// alone and that a state behind the store's could get wrong
    /// ([`EngineError::may_be_stale`]) is confirmed with this first wherever
    /// another owner may exist. Another holder: the handle stops (like a
    /// crash: everything it acknowledged is durable) and this answers
    /// `Fenced`.
    pub async fn confirm_claim(&self) -> Result<(), EngineError> {
        let holder = crate::admin::shard_holder(&self.inner.ctx.env.store, self.name()).await?;
        let epoch = self.last_recovery().epoch;
        let ours =
            holder.is_some_and(|h| h.instance == self.inner.ctx.instance && h.epoch == epoch);
        if ours {
            return Ok(());
        }
        tracing::warn!(shard = %self.name(), epoch, ?holder, "shard: another owner holds it; stopping this handle");
        self.crash();
        self.inner.shared.status.send_replace(ShardStatus::Fenced);
        Err(EngineError::Fenced)
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
