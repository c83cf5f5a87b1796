//! The shard's single actor task: committer, flush pump and acker.
//!
//! One task owns every mutable part of the write path, so offsets are assigned
//! in queue order without locks and a seed replays a simulation exactly. The
//! only state it shares is the durable [`StreamCell`]s, written here after an
//! object is acknowledged and read by readers.
//!
//! Objects are numbered by *issue* (the order the pump sent them); WAL *slots*
//! are their names. The acker acknowledges the contiguous prefix of issued
//! objects whose PUTs succeeded. A failed object stops the pump; once every
//! earlier object has been acknowledged, the failed one and everything after it
//! are answered `OutcomeUnknown` and the shard re-opens itself from the store.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::PutPayload;
use strata_manifest::{Manifest, ReplayPoint, Versioned};
use strata_segments::{seal_page, sealed_page_len, PageCipher, PageError, PreparedBody};
use strata_wal::{
    AppendEntry, CloseEntry, CreateEntry, DeleteEntry, ObjectKind, ProducerEntry, StreamSeqEntry,
    WalEntry, WalHeader, WalObject, WriterId,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{Id as TaskId, JoinSet};
use tokio::time::Instant;

use super::api::{AppendAck, AppendKind, CreateAck, ShardStatus};
use super::command::{AppendJob, Command};
use super::ctx::ShardCtx;
use super::gc::{self, GcOutcome, GcQueue};
use super::io::{put_wal_object, WalPutOutcome};
use super::producer::AcceptedClaim;
use super::recovery::{self, Opened};
use super::seal::{self, SealFailure, SealPlan, SealResult, SealState, SealStream};
use super::shared::{ShardShared, StreamCell};
use super::state::{
    apply_append_to_tail, apply_entry, apply_to_tail, create_verdict, judge_producer,
    CreateVerdict, ProducerVerdict, StreamStatus, Tail,
};
use crate::error::EngineError;
use crate::ids::StreamRef;
use crate::layout::ObjectId;

/// Commands taken from the queue per wake-up before completions are looked at.
const DRAIN_COMMANDS_MAX: usize = 1024;
/// Most scheduler yields spent gathering a burst of requests before a flush.
const SETTLE_ROUNDS_MAX: usize = 8;
/// A pinned segment's deletion is looked at again after this long.
const PINNED_RECHECK: Duration = Duration::from_secs(1);
/// A failed deletion is tried again after this long.
const GC_RETRY: Duration = Duration::from_secs(30);

/// An answer computed when a command was committed, sent once it is durable.
enum Reply {
    Append(
        oneshot::Sender<Result<AppendAck, EngineError>>,
        Result<AppendAck, EngineError>,
    ),
    Create(
        oneshot::Sender<Result<CreateAck, EngineError>>,
        Result<CreateAck, EngineError>,
    ),
    Unit(
        oneshot::Sender<Result<(), EngineError>>,
        Result<(), EngineError>,
    ),
}

impl Reply {
    fn send(self) {
        // A caller that went away no longer needs the answer.
        let _ = match self {
            Reply::Append(tx, r) => tx.send(r).map_err(drop),
            Reply::Create(tx, r) => tx.send(r).map_err(drop),
            Reply::Unit(tx, r) => tx.send(r).map_err(drop),
        };
    }

    fn fail(self, error: EngineError) {
        let _ = match self {
            Reply::Append(tx, _) => tx.send(Err(error)).map_err(drop),
            Reply::Create(tx, _) => tx.send(Err(error)).map_err(drop),
            Reply::Unit(tx, _) => tx.send(Err(error)).map_err(drop),
        };
    }
}

/// A page whose offset and nonce are assigned, sealed by the PUT task that
/// writes it (encryption stays off the actor).
struct UnsealedPage {
    body: PreparedBody,
    cipher: Arc<PageCipher>,
    first_offset: u64,
    nonce: [u8; 12],
}

/// An entry as the committer stages it: appends carry unsealed pages.
enum StagedEntry {
    Ready(WalEntry),
    Append {
        /// The entry with its `pages` still empty.
        entry: AppendEntry,
        key_version: u32,
        routing_key: Bytes,
        pages: Vec<UnsealedPage>,
    },
}

impl StagedEntry {
    /// Bytes the entry takes in its WAL object once sealed and encoded.
    fn encoded_len(&self) -> usize {
        match self {
            StagedEntry::Ready(entry) => strata_wal::entry_encoded_len(entry),
            StagedEntry::Append {
                routing_key, pages, ..
            } => strata_wal::append_entry_encoded_len(
                pages
                    .iter()
                    .map(|p| sealed_page_len(&p.body, routing_key.len())),
            ),
        }
    }

    /// Seals an append's pages; any other entry is ready as it is.
    fn seal(self) -> Result<WalEntry, PageError> {
        match self {
            StagedEntry::Ready(entry) => Ok(entry),
            StagedEntry::Append {
                mut entry,
                key_version,
                routing_key,
                pages,
            } => {
                entry.pages = pages
                    .into_iter()
                    .map(|p| {
                        seal_page(
                            &p.cipher,
                            &p.body,
                            p.first_offset,
                            key_version,
                            &routing_key,
                            p.nonce,
                        )
                    })
                    .collect::<Result<_, _>>()?;
                Ok(WalEntry::Append(entry))
            }
        }
    }
}

/// Entries staged for the next WAL object, and the replies riding on it.
#[derive(Default)]
struct Batch {
    entries: Vec<StagedEntry>,
    replies: Vec<Reply>,
    /// Encoded size of `entries` (pages as sealed, every entry's framing).
    bytes: usize,
}

/// After a PUT's acknowledgements go out, the appenders they woke usually
/// append again at once: a small batch waits (at most `HERD_WAIT`) for as many
/// replies as that PUT acknowledged, so they share one object instead of
/// splitting over several.
#[derive(Debug, Clone, Copy)]
struct Herd {
    replies: usize,
    until: Instant,
}

/// Longest a small batch waits for the appenders a PUT just acknowledged.
const HERD_WAIT: Duration = Duration::from_millis(1);

struct InFlight {
    issue: u64,
    slot: u64,
    /// The sealed object, once its PUT task has built it.
    object: Option<Arc<WalObject>>,
    replies: Vec<Reply>,
    bytes: usize,
    outcome: Option<WalPutOutcome>,
}

struct PutDone {
    issue: u64,
    object: Option<Arc<WalObject>>,
    outcome: WalPutOutcome,
}

pub(crate) struct Actor {
    ctx: Arc<ShardCtx>,
    shared: Arc<ShardShared>,
    rx: mpsc::Receiver<Command>,
    receiving: bool,
    manifest: Versioned<Manifest>,
    epoch: u64,
    /// Tails as the committer sees them: durable plus everything staged.
    staged: HashMap<[u8; 16], Tail>,
    batches: VecDeque<Batch>,
    inflight: VecDeque<InFlight>,
    next_issue: u64,
    puts: JoinSet<PutDone>,
    put_tasks: HashMap<TaskId, u64>,
    next_slot: u64,
    /// Slot of the last object issued in this owner's chain (the fence at first).
    chain_end: u64,
    occupied: BTreeSet<u64>,
    last_flush_start: Option<Instant>,
    /// The appenders a PUT just acknowledged, expected back soon.
    herd: Option<Herd>,
    pending_bytes: usize,
    failed_issue: Option<u64>,
    fenced: bool,
    shutdown_reply: Option<oneshot::Sender<()>>,
    seal: SealState,
    /// At most one seal runs at a time.
    seal_tasks: JoinSet<SealResult>,
    gc: GcQueue,
    /// The open's sweep and at most one collection.
    gc_tasks: JoinSet<GcOutcome>,
    collecting: bool,
    /// The store's state is unknown to this owner (a seal's manifest write):
    /// re-open from it.
    reopen_needed: bool,
}

impl Actor {
    pub(crate) fn new(
        ctx: Arc<ShardCtx>,
        shared: Arc<ShardShared>,
        rx: mpsc::Receiver<Command>,
        opened: Opened,
    ) -> Self {
        let mut actor = Actor {
            manifest: opened.manifest.clone(),
            ctx,
            shared,
            rx,
            receiving: true,
            epoch: 0,
            staged: HashMap::new(),
            batches: VecDeque::new(),
            inflight: VecDeque::new(),
            next_issue: 0,
            puts: JoinSet::new(),
            put_tasks: HashMap::new(),
            next_slot: 0,
            chain_end: strata_wal::NO_SLOT,
            occupied: BTreeSet::new(),
            last_flush_start: None,
            herd: None,
            pending_bytes: 0,
            failed_issue: None,
            fenced: false,
            shutdown_reply: None,
            seal: SealState::default(),
            seal_tasks: JoinSet::new(),
            gc: GcQueue::default(),
            gc_tasks: JoinSet::new(),
            collecting: false,
            reopen_needed: false,
        };
        actor.install(opened);
        actor
    }

    pub(crate) async fn run(mut self) {
        loop {
            let drained = !self.receiving && self.batches.is_empty() && self.inflight.is_empty();
            if drained && self.seal_tasks.is_empty() {
                if !self.wants_final_seal() {
                    break;
                }
                self.seal.final_started = true;
                self.start_seal();
            }
            let accept = self.receiving && self.can_accept();
            let gap_deadline = self.gap_deadline();
            let seal_deadline = self.seal_deadline();
            let gc_deadline = self.gc_deadline();
            let far = Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                biased;
                Some(joined) = self.puts.join_next_with_id(), if !self.puts.is_empty() => {
                    self.on_put_joined(joined);
                }
                Some(joined) = self.seal_tasks.join_next(), if !self.seal_tasks.is_empty() => {
                    self.on_seal_joined(joined);
                }
                Some(joined) = self.gc_tasks.join_next(), if !self.gc_tasks.is_empty() => {
                    self.on_gc_joined(joined);
                }
                command = self.rx.recv(), if accept => match command {
                    Some(command) => {
                        self.on_command(command);
                        self.drain_commands();
                    }
                    None => self.stop_receiving(),
                },
                _ = tokio::time::sleep_until(gap_deadline.unwrap_or(far)), if gap_deadline.is_some() => {}
                _ = tokio::time::sleep_until(seal_deadline.unwrap_or(far)), if seal_deadline.is_some() => {}
                _ = tokio::time::sleep_until(gc_deadline.unwrap_or(far)), if gc_deadline.is_some() => {}
                else => {
                    // Nothing can make progress: only possible once fenced or stopped.
                    if self.receiving && !self.fenced {
                        tracing::error!(shard = %self.ctx.layout.shard(), "shard actor has nothing to wait on");
                    }
                    break;
                }
            }
            self.settle_failure().await;
            if self.flush_is_ready() {
                self.settle_herd().await;
            }
            self.flush_ready();
            self.maybe_seal();
            self.maybe_collect();
        }
        if !self.fenced {
            self.shared.status.send_replace(ShardStatus::Stopped);
        }
        if let Some(reply) = self.shutdown_reply.take() {
            let _ = reply.send(());
        }
    }

    fn can_accept(&self) -> bool {
        self.failed_issue.is_none() && self.pending_bytes < self.ctx.config.max_pending_bytes
    }

    /// Takes what is queued, up to [`DRAIN_COMMANDS_MAX`]; returns how many.
    fn drain_commands(&mut self) -> usize {
        for taken in 0..DRAIN_COMMANDS_MAX {
            if !(self.receiving && self.can_accept()) {
                return taken;
            }
            match self.rx.try_recv() {
                Ok(command) => self.on_command(command),
                Err(_) => return taken,
            }
        }
        DRAIN_COMMANDS_MAX
    }

    /// Herd settle before a flush: requests answered by the last
    /// acknowledgement are re-submitted by tasks that are runnable right now.
    /// Yield to them while each round still brings new requests, so they share
    /// this PUT instead of each taking a pipeline slot of its own. Costs
    /// microseconds, never a timer.
    async fn settle_herd(&mut self) {
        for _ in 0..SETTLE_ROUNDS_MAX {
            tokio::task::yield_now().await;
            if self.drain_commands() == 0 {
                return;
            }
        }
    }

    fn stop_receiving(&mut self) {
        self.receiving = false;
        self.rx.close();
        while let Ok(command) = self.rx.try_recv() {
            reject(command, EngineError::ShuttingDown);
        }
    }

    fn on_command(&mut self, command: Command) {
        if self.fenced {
            // A fenced owner still stops when asked (it has nothing to flush).
            if let Command::Shutdown { reply } = command {
                self.shutdown_reply = Some(reply);
                return self.stop_receiving();
            }
            return reject(command, EngineError::Fenced);
        }
        match command {
            Command::Append(job) => self.commit_append(*job),
            Command::Create { create, reply } => self.commit_create(create, reply),
            Command::Delete { stream, reply } => self.commit_delete(stream, reply),
            Command::Barrier { reply } => self.reply_when_durable(Reply::Unit(reply, Ok(()))),
            Command::Seal { reply } => {
                if self.seal.dirty.is_empty() && self.seal.objects_unsealed == 0 {
                    let _ = reply.send(Ok(()));
                } else {
                    self.seal.waiting.push(reply);
                }
            }
            Command::Shutdown { reply } => {
                self.shutdown_reply = Some(reply);
                self.stop_receiving();
            }
        }
    }

    // ---------------------------------------------------------------- committer

    fn commit_append(&mut self, job: AppendJob) {
        let config = &self.ctx.config;
        let page_bytes: usize = job.pages.iter().map(|p| p.body.content.len()).sum();
        let memory = self.shared.memory_page_bytes.load(Ordering::Relaxed);
        if memory + (self.pending_bytes + page_bytes) as u64 > config.max_memory_page_bytes {
            let _ = job.reply.send(Err(EngineError::Overloaded));
            return;
        }
        let tail = match self.staged.get(&job.stream.id) {
            Some(t) if t.is_live(&job.stream) => t,
            _ => {
                return self
                    .reply_when_durable(Reply::Append(job.reply, Err(EngineError::StreamNotFound)))
            }
        };
        if !job.cipher_matches(&tail.epoch, &tail.key_fingerprint) {
            return self.reply_when_durable(Reply::Append(job.reply, Err(EngineError::WrongKey)));
        }
        let closed = tail.status == StreamStatus::Closed;
        let verdict = job
            .producer
            .as_ref()
            .map(|claim| judge_producer(tail.producers.get(&claim.id), claim));
        let refusal = match verdict {
            Some(ProducerVerdict::Duplicate(state)) => Some(Ok(AppendAck {
                first_offset: state.first_offset,
                next_offset: tail.next_offset,
                closed,
                kind: AppendKind::Duplicate(state),
            })),
            // A plain close of a closed stream is idempotent; a producer's close
            // that is not its own duplicate meets a closed stream.
            _ if closed && job.record_count == 0 && job.producer.is_none() => Some(Ok(AppendAck {
                kind: AppendKind::AlreadyClosed,
                first_offset: tail.next_offset,
                next_offset: tail.next_offset,
                closed: true,
            })),
            _ if closed => Some(Err(EngineError::StreamClosed {
                next_offset: tail.next_offset,
            })),
            Some(ProducerVerdict::StaleEpoch { current_epoch }) => {
                Some(Err(EngineError::ProducerStaleEpoch { current_epoch }))
            }
            Some(ProducerVerdict::NewEpochNeedsSeqZero) => {
                Some(Err(EngineError::ProducerNewEpochNeedsSeqZero))
            }
            Some(ProducerVerdict::Gap { expected, received }) => {
                Some(Err(EngineError::ProducerSeqGap { expected, received }))
            }
            Some(ProducerVerdict::Accept) | None => None,
        };
        if let Some(answer) = refusal {
            return self.reply_when_durable(Reply::Append(job.reply, answer));
        }
        if let Some(seq) = &job.stream_seq {
            if tail.stream_seq.as_ref().is_some_and(|last| last >= seq) {
                return self.reply_when_durable(Reply::Append(
                    job.reply,
                    Err(EngineError::StreamSeqConflict),
                ));
            }
        }

        let first_offset = tail.next_offset;
        let next_offset = first_offset + job.record_count;
        let mut entries = Vec::with_capacity(4);
        if job.record_count > 0 {
            let mut offset = first_offset;
            let mut pages = Vec::with_capacity(job.pages.len());
            for page in job.pages {
                let record_count = page.body.record_count as u64;
                pages.push(UnsealedPage {
                    body: page.body,
                    cipher: page.cipher,
                    first_offset: offset,
                    nonce: self.ctx.env.entropy.bytes12(),
                });
                offset += record_count;
            }
            entries.push(StagedEntry::Append {
                entry: AppendEntry {
                    stream: job.stream,
                    first_offset,
                    record_count: job.record_count,
                    payload_bytes: job.payload_bytes,
                    timestamp_ms: job.timestamp_ms,
                    pages: Vec::new(),
                },
                key_version: job.key_version,
                routing_key: job.routing_key,
                pages,
            });
        }
        if let Some(claim) = &job.producer {
            entries.push(StagedEntry::Ready(WalEntry::Producer(ProducerEntry::from(
                AcceptedClaim {
                    stream: job.stream,
                    claim,
                    first_offset,
                    next_offset,
                },
            ))));
        }
        if let Some(seq) = job.stream_seq {
            entries.push(StagedEntry::Ready(WalEntry::StreamSeq(StreamSeqEntry {
                stream: job.stream,
                seq,
            })));
        }
        if job.close {
            entries.push(StagedEntry::Ready(WalEntry::Close(CloseEntry {
                stream: job.stream,
                closed_ms: job.timestamp_ms,
            })));
        }
        let ack = AppendAck {
            kind: AppendKind::Appended,
            first_offset,
            next_offset,
            closed: job.close,
        };
        self.stage(job.stream, entries, Reply::Append(job.reply, Ok(ack)));
    }

    fn commit_create(
        &mut self,
        create: CreateEntry,
        reply: oneshot::Sender<Result<CreateAck, EngineError>>,
    ) {
        let stream = create.stream;
        match create_verdict(self.staged.get(&stream.id), &stream) {
            CreateVerdict::New => {
                self.staged.insert(stream.id, Tail::new(&create));
                let entry = StagedEntry::Ready(WalEntry::Create(create));
                self.push_staged(vec![entry], Reply::Create(reply, Ok(CreateAck::Created)));
            }
            CreateVerdict::Exists => {
                let same_key = self.staged.get(&stream.id).is_some_and(|t| {
                    t.epoch == create.epoch && t.key_fingerprint == create.key_fingerprint
                });
                let answer = if same_key {
                    Ok(CreateAck::AlreadyExists)
                } else {
                    Err(EngineError::WrongKey)
                };
                self.reply_when_durable(Reply::Create(reply, answer))
            }
            CreateVerdict::Stale => {
                self.reply_when_durable(Reply::Create(reply, Err(EngineError::StaleIncarnation)))
            }
        }
    }

    fn commit_delete(
        &mut self,
        stream: StreamRef,
        reply: oneshot::Sender<Result<(), EngineError>>,
    ) {
        let live = self
            .staged
            .get(&stream.id)
            .is_some_and(|t| t.is_live(&stream));
        if !live {
            return self.reply_when_durable(Reply::Unit(reply, Err(EngineError::StreamNotFound)));
        }
        let entry = StagedEntry::Ready(WalEntry::Delete(DeleteEntry { stream }));
        self.stage(stream, vec![entry], Reply::Unit(reply, Ok(())));
    }

    /// Applies entries to the staged tail of `stream`, then stages them.
    fn stage(&mut self, stream: StreamRef, entries: Vec<StagedEntry>, reply: Reply) {
        let tail = self
            .staged
            .get_mut(&stream.id)
            .expect("validated against this tail");
        for entry in &entries {
            let applied = match entry {
                StagedEntry::Ready(entry) => apply_to_tail(tail, entry),
                StagedEntry::Append { entry, .. } => apply_append_to_tail(tail, entry),
            };
            if let Err(e) = applied {
                // The committer validated this entry against the same tail: a bug.
                tracing::error!(error = %e, "staged entry does not apply to its own tail");
                reply.fail(EngineError::corrupt("staged tail", e));
                return;
            }
        }
        self.push_staged(entries, reply);
    }

    /// Adds a request's entries to the newest batch, or starts a new one when
    /// they would take it past the object's size or entry limit (a request's
    /// entries are never split). Every entry counts, with or without pages.
    fn push_staged(&mut self, entries: Vec<StagedEntry>, reply: Reply) {
        let bytes: usize = entries.iter().map(StagedEntry::encoded_len).sum();
        let bytes_max = self.object_bytes_max();
        let entries_max = self
            .ctx
            .config
            .max_object_entries
            .clamp(1, strata_wal::MAX_ENTRIES);
        let start_new = match self.batches.back() {
            None => true,
            Some(b) => {
                !b.entries.is_empty()
                    && (b.bytes + bytes > bytes_max
                        || b.entries.len() + entries.len() > entries_max)
            }
        };
        if start_new {
            self.batches.push_back(Batch::default());
        }
        let batch = self.batches.back_mut().expect("just ensured");
        batch.entries.extend(entries);
        batch.replies.push(reply);
        batch.bytes += bytes;
        self.pending_bytes += bytes;
    }

    /// Entry bytes one WAL object carries at most: the configured cut, within
    /// what the format can hold beside the header.
    fn object_bytes_max(&self) -> usize {
        let framing = strata_wal::header_encoded_len(self.ctx.layout.shard().as_str().len())
            + strata_wal::OBJECT_TRAILER_BYTES;
        self.ctx
            .config
            .max_object_bytes
            .min(strata_wal::MAX_OBJECT_BYTES - framing)
    }

    /// Sends `reply` once everything committed so far is durable.
    fn reply_when_durable(&mut self, reply: Reply) {
        if let Some(batch) = self.batches.back_mut() {
            batch.replies.push(reply);
        } else if let Some(last) = self.inflight.back_mut() {
            last.replies.push(reply);
        } else {
            reply.send();
        }
    }

    // --------------------------------------------------------------- flush pump

    /// When a small batch stops waiting for the herd (`None`: not waiting).
    fn herd_deadline(&self) -> Option<Instant> {
        let herd = self.herd?;
        let batch = self.batches.front()?;
        let gathered = self.batches.len() > 1
            || batch.replies.len() >= herd.replies
            || batch.bytes >= self.ctx.config.pipeline_min_bytes;
        (!gathered && herd.until > Instant::now()).then_some(herd.until)
    }

    fn gap_deadline(&self) -> Option<Instant> {
        if let Some(herd) = self.herd_deadline() {
            return Some(herd);
        }
        let gap = self.ctx.config.min_flush_gap;
        if gap.is_zero()
            || self.failed_issue.is_some()
            || self.batches.is_empty()
            || self.inflight.len() >= self.ctx.config.pipeline_depth.max(1)
        {
            return None;
        }
        let due = self.last_flush_start? + gap;
        (due > Instant::now()).then_some(due)
    }

    fn flush_is_ready(&self) -> bool {
        self.failed_issue.is_none()
            && !self.fenced
            && !self.batches.is_empty()
            && self.inflight.len() < self.ctx.config.pipeline_depth.max(1)
            && self.worth_pipelining()
            && self.gap_deadline().is_none()
    }

    /// With nothing in flight, any staged batch goes; behind a PUT in
    /// flight, only a full one or a large one (see `pipeline_min_bytes`).
    fn worth_pipelining(&self) -> bool {
        self.inflight.is_empty()
            || self.batches.len() > 1
            || self
                .batches
                .front()
                .is_some_and(|b| b.bytes >= self.ctx.config.pipeline_min_bytes)
    }

    fn flush_ready(&mut self) {
        while self.flush_is_ready() {
            let batch = self.batches.pop_front().expect("non-empty");
            self.issue(batch);
        }
    }

    fn allocate_slot(&mut self) -> u64 {
        while self.occupied.remove(&self.next_slot) {
            self.next_slot += 1;
        }
        let slot = self.next_slot;
        self.next_slot += 1;
        slot
    }

    fn issue(&mut self, batch: Batch) {
        let slot = self.allocate_slot();
        let writer = WriterId {
            instance: self.ctx.instance.0,
            epoch: self.epoch,
            write_id: self.ctx.env.entropy.bytes16(),
        };
        let header = WalHeader {
            kind: ObjectKind::Data,
            slot,
            prev_slot: self.chain_end,
            writer,
            shard: self.ctx.layout.shard().to_string(),
        };
        self.chain_end = slot;
        let issue = self.next_issue;
        self.next_issue += 1;
        let ctx = self.ctx.clone();
        let staged = batch.entries;
        let handle = self.puts.spawn(async move {
            let sealed: Result<Vec<WalEntry>, PageError> =
                staged.into_iter().map(StagedEntry::seal).collect();
            let object = sealed.map(|entries| Arc::new(WalObject { header, entries }));
            let encoded = object
                .as_ref()
                .map_err(|e| e.to_string())
                .and_then(|object| strata_wal::encode(object).map_err(|e| e.to_string()));
            let outcome = match encoded {
                Ok(encoded) => {
                    let payload: PutPayload = encoded.chunks.into_iter().collect();
                    put_wal_object(
                        &ctx.env.store,
                        &ctx.layout.wal(slot),
                        payload,
                        &writer,
                        &ctx.config.store_retry,
                    )
                    .await
                }
                Err(reason) => WalPutOutcome::Failed(object_store::Error::Generic {
                    store: "wal-build",
                    source: reason.into(),
                }),
            };
            PutDone {
                issue,
                object: object.ok(),
                outcome,
            }
        });
        self.put_tasks.insert(handle.id(), issue);
        self.inflight.push_back(InFlight {
            issue,
            slot,
            object: None,
            replies: batch.replies,
            bytes: batch.bytes,
            outcome: None,
        });
        self.last_flush_start = Some(Instant::now());
    }

    // -------------------------------------------------------------------- acker

    fn on_put_joined(&mut self, joined: Result<(TaskId, PutDone), tokio::task::JoinError>) {
        let done = match joined {
            Ok((id, done)) => {
                self.put_tasks.remove(&id);
                done
            }
            Err(e) => {
                // A task of objects already failed and forgotten: nothing to do.
                let Some(issue) = self.put_tasks.remove(&e.id()) else {
                    return;
                };
                PutDone {
                    issue,
                    object: None,
                    outcome: WalPutOutcome::Failed(object_store::Error::Generic {
                        store: "wal-put-task",
                        source: Box::new(e),
                    }),
                }
            }
        };
        let Some(front) = self.inflight.front() else {
            return;
        };
        let Some(index) = done.issue.checked_sub(front.issue) else {
            return;
        };
        let Some(entry) = self.inflight.get_mut(index as usize) else {
            return;
        };
        match &done.outcome {
            WalPutOutcome::Written => {}
            WalPutOutcome::Fenced {
                epoch,
                after_unknown,
            } => {
                tracing::warn!(shard = %self.ctx.layout.shard(), newer_epoch = epoch, after_unknown, "fenced by a newer owner");
                // After an attempt that may have landed, the newer owner may
                // hold this object (and the ones issued with it) in its log.
                let at = (!after_unknown).then_some(done.issue);
                self.become_fenced(at);
                return;
            }
            WalPutOutcome::Collision { epoch } => {
                tracing::warn!(shard = %self.ctx.layout.shard(), other_epoch = epoch, "WAL slot taken by an older writer's object");
                self.failed_issue =
                    Some(self.failed_issue.map_or(done.issue, |f| f.min(done.issue)));
            }
            WalPutOutcome::Failed(error) => {
                tracing::warn!(shard = %self.ctx.layout.shard(), %error, "WAL put failed");
                self.failed_issue =
                    Some(self.failed_issue.map_or(done.issue, |f| f.min(done.issue)));
            }
        }
        entry.outcome = Some(done.outcome);
        entry.object = done.object;
        self.acknowledge_prefix();
    }

    fn acknowledge_prefix(&mut self) {
        while matches!(
            self.inflight.front().and_then(|f| f.outcome.as_ref()),
            Some(WalPutOutcome::Written)
        ) {
            let done = self.inflight.pop_front().expect("front exists");
            self.pending_bytes -= done.bytes;
            self.seal.durable_chain_end = done.slot;
            self.seal.objects_unsealed += 1;
            if let Some(object) = &done.object {
                self.publish(object);
            }
            let replies = done.replies.len();
            for reply in done.replies {
                reply.send();
            }
            self.herd = Some(Herd {
                replies,
                until: Instant::now() + HERD_WAIT,
            });
        }
    }

    /// Makes an acknowledged object's entries visible to readers.
    fn publish(&mut self, object: &WalObject) {
        let mut touched: Vec<Arc<StreamCell>> = Vec::new();
        let now = Instant::now();
        for entry in &object.entries {
            let id = super::state::entry_stream(entry).id;
            self.seal.mark_dirty(id, now);
            let existing = self.shared.cell(&id);
            let result = match &existing {
                Some(cell) => {
                    let mut state = cell.state.write();
                    let before = state.page_bytes;
                    // A delete or a new incarnation drops the sealed chunks.
                    let sealed_before = matches!(entry, WalEntry::Delete(_) | WalEntry::Create(_))
                        .then(|| state.sealed.clone());
                    let result = apply_entry(Some(&mut state), entry).map(|fresh| {
                        if let Some(fresh) = fresh {
                            *state = fresh;
                        }
                    });
                    if let Some(old) = sealed_before {
                        if state.sealed.is_empty() {
                            self.seal.release(&old);
                        }
                    }
                    self.account_memory(before, state.page_bytes);
                    result
                }
                None => match apply_entry(None, entry) {
                    Ok(Some(fresh)) => {
                        let cell = Arc::new(StreamCell::new(fresh));
                        self.shared.streams.write().insert(id, cell.clone());
                        touched.push(cell);
                        Ok(())
                    }
                    Ok(None) => Ok(()),
                    Err(e) => Err(e),
                },
            };
            if let Err(e) = result {
                tracing::error!(error = %e, "acknowledged entry does not apply to durable state");
            }
            if let Some(cell) = existing {
                if !touched.iter().any(|c| Arc::ptr_eq(c, &cell)) {
                    touched.push(cell);
                }
            }
        }
        for cell in touched {
            cell.bump();
        }
    }

    fn account_memory(&self, before: u64, after: u64) {
        if after >= before {
            self.shared
                .memory_page_bytes
                .fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.shared
                .memory_page_bytes
                .fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    // ------------------------------------------------------- failure and fencing

    /// Once every object before the failed one is acknowledged: fail the rest
    /// and re-open the shard from the store.
    async fn settle_failure(&mut self) {
        if self.fenced {
            return;
        }
        let wal_failed = self
            .failed_issue
            .is_some_and(|failed| self.inflight.front().is_none_or(|f| f.issue >= failed));
        if !wal_failed && !self.reopen_needed {
            return;
        }
        self.reopen_needed = false;
        self.fail_pending(EngineError::OutcomeUnknown);
        self.failed_issue = None;
        // A seal in flight lands or fails before the re-claim, so the manifest
        // we re-claim from is the one we last wrote.
        while let Some(joined) = self.seal_tasks.join_next().await {
            self.on_seal_joined(joined);
        }
        if self.fenced {
            return;
        }
        self.reopen().await;
    }

    fn fail_pending(&mut self, error: EngineError) {
        // Dropping the set aborts the PUTs still running.
        self.puts = JoinSet::new();
        self.put_tasks.clear();
        for object in self.inflight.drain(..) {
            for reply in object.replies {
                reply.fail(error.clone());
            }
        }
        for batch in self.batches.drain(..) {
            for reply in batch.replies {
                reply.fail(error.clone());
            }
        }
        self.pending_bytes = 0;
    }

    /// A newer owner holds the shard. `fenced_at` is the issue of the object
    /// whose slot a newer owner's object took, if one did: that object and
    /// every later one cannot be in the newer owner's log (they lie at or
    /// after its fence), so their requests are answered `Fenced` (not
    /// written; retry elsewhere as is). Objects issued before it may have
    /// landed before the fence and be part of the newer owner's log: their
    /// requests are answered `OutcomeUnknown`, as is everything in flight
    /// when no slot says where the fence lies (a seal or a garbage check
    /// found the newer owner).
    fn become_fenced(&mut self, fenced_at: Option<u64>) {
        self.fenced = true;
        for waiter in self.seal.waiting.drain(..) {
            let _ = waiter.send(Err(EngineError::Fenced));
        }
        self.failed_issue = None;
        // Dropping the set aborts the PUTs still running.
        self.puts = JoinSet::new();
        self.put_tasks.clear();
        for object in self.inflight.drain(..) {
            let error = match fenced_at {
                Some(at) if object.issue >= at => EngineError::Fenced,
                _ => EngineError::OutcomeUnknown,
            };
            for reply in object.replies {
                reply.fail(error.clone());
            }
        }
        for batch in self.batches.drain(..) {
            for reply in batch.replies {
                reply.fail(EngineError::Fenced);
            }
        }
        self.pending_bytes = 0;
        self.shared.status.send_replace(ShardStatus::Fenced);
    }

    /// Re-claims the shard (only if nobody else claimed it since our own claim)
    /// and rebuilds its state from the store, retrying store failures.
    async fn reopen(&mut self) {
        self.shared.status.send_replace(ShardStatus::Recovering);
        let mut attempt = 0u32;
        let claimed = loop {
            match recovery::reclaim(&self.ctx, self.epoch).await {
                Ok(claimed) => break claimed,
                Err(EngineError::Fenced) => return self.become_fenced(None),
                Err(error) => {
                    if !self.back_off(&mut attempt, &error).await {
                        return self.stop_reopening();
                    }
                }
            }
        };
        self.manifest = claimed.clone();
        loop {
            match recovery::walk_and_fence(&self.ctx, claimed.clone()).await {
                Ok(opened) => {
                    self.install(opened);
                    self.shared.status.send_replace(ShardStatus::Active);
                    return;
                }
                Err(EngineError::Fenced) => return self.become_fenced(None),
                Err(error) => {
                    if !self.back_off(&mut attempt, &error).await {
                        return self.stop_reopening();
                    }
                }
            }
        }
    }

    /// A shutdown asked while re-opening: the shard stops without the store
    /// (nothing is staged; the next owner recovers from the store alone).
    fn stop_reopening(&mut self) {
        tracing::warn!(shard = %self.ctx.layout.shard(), "shutdown while re-opening: stopping without the store");
        self.shared.status.send_replace(ShardStatus::Stopped);
    }

    /// Waits before the next re-open attempt; false once a shutdown was
    /// asked meanwhile (commands that reached the queue before the shard
    /// started re-opening are refused: it is not taking any).
    async fn back_off(&mut self, attempt: &mut u32, error: &EngineError) -> bool {
        let wait = self
            .ctx
            .config
            .store_retry
            .backoff(*attempt)
            .min(self.ctx.config.reopen_backoff_max);
        tracing::warn!(shard = %self.ctx.layout.shard(), %error, ?wait, "re-open failed; retrying");
        tokio::time::sleep(wait).await;
        *attempt = attempt.saturating_add(1);
        while self.receiving {
            match self.rx.try_recv() {
                Ok(Command::Shutdown { reply }) => {
                    self.shutdown_reply = Some(reply);
                    self.stop_receiving();
                }
                Ok(other) => reject(
                    other,
                    EngineError::Unavailable {
                        reason: "shard is re-opening after a store failure".into(),
                    },
                ),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => self.stop_receiving(),
            }
        }
        self.receiving
    }

    /// Adopts a freshly opened shard: its manifest, epoch, slots and state.
    fn install(&mut self, opened: Opened) {
        let now = Instant::now();
        let mut seal = SealState {
            dirty_since: (!opened.touched.is_empty()).then_some(now),
            dirty: opened.touched,
            objects_unsealed: opened.data_objects,
            durable_chain_end: opened.chain_end,
            fence_window: opened.fence_window,
            next_object_id: opened.manifest.value.next_object_id,
            final_started: self.seal.final_started,
            waiting: std::mem::take(&mut self.seal.waiting),
            ..SealState::default()
        };
        for durable in opened.table.streams.values() {
            if durable.tail.status != StreamStatus::Deleted {
                durable.sealed.iter().for_each(|c| seal.adopt(c));
            }
        }
        seal.dead = opened
            .manifest
            .value
            .segments
            .iter()
            .map(|s| ObjectId(s.id))
            .filter(|id| !seal.live_chunks.contains_key(id))
            .collect();
        self.seal = seal;
        // The sweep finds again whatever was queued, with a fresh grace period.
        self.gc = GcQueue::default();
        self.gc_tasks.spawn(gc::sweep(
            self.ctx.clone(),
            opened.manifest.value.clone(),
            opened.epoch,
        ));
        self.manifest = opened.manifest;
        self.epoch = opened.epoch;
        self.next_slot = opened.next_slot;
        self.chain_end = opened.chain_end;
        self.occupied = opened.occupied;
        self.staged = opened
            .table
            .streams
            .iter()
            .map(|(id, d)| (*id, d.tail.clone()))
            .collect();
        let mut memory = 0;
        {
            let mut cells = self.shared.streams.write();
            for (id, durable) in opened.table.streams {
                memory += durable.page_bytes;
                match cells.get(&id) {
                    Some(cell) => {
                        *cell.state.write() = durable;
                        cell.bump();
                    }
                    None => {
                        cells.insert(id, Arc::new(StreamCell::new(durable)));
                    }
                }
            }
        }
        self.shared
            .memory_page_bytes
            .store(memory, Ordering::Relaxed);
        *self.shared.last_recovery.lock() = opened.report;
    }
}

impl Actor {
    // ------------------------------------------------------------------ sealer

    fn may_seal(&self) -> bool {
        !self.fenced
            && !self.reopen_needed
            && self.failed_issue.is_none()
            && self.seal_tasks.is_empty()
            && *self.shared.status.borrow() == ShardStatus::Active
    }

    fn wants_final_seal(&self) -> bool {
        self.may_seal() && !self.seal.final_started && !self.seal.dirty.is_empty()
    }

    /// When the age trigger (or the back-off after a failure) falls due.
    fn seal_deadline(&self) -> Option<Instant> {
        if !self.may_seal() {
            return None;
        }
        let due = self.seal.dirty_since? + self.ctx.config.seal_age;
        Some(self.seal.retry_at.map_or(due, |r| r.max(due)))
    }

    fn maybe_seal(&mut self) {
        if !self.may_seal() {
            return;
        }
        if self.seal.dirty.is_empty() {
            // `seal_now` callers that asked while a seal covering everything
            // was running: answered now, or sealed for the acknowledged
            // objects that changed no stream (the replay point still moves).
            if !self.seal.waiting.is_empty() {
                if self.seal.objects_unsealed == 0 {
                    for waiter in self.seal.waiting.drain(..) {
                        let _ = waiter.send(Ok(()));
                    }
                } else {
                    self.start_seal();
                }
            }
            return;
        }
        let now = Instant::now();
        if self.seal.retry_at.is_some_and(|r| r > now) && self.seal.waiting.is_empty() {
            return;
        }
        let config = &self.ctx.config;
        let memory = self.shared.memory_page_bytes.load(Ordering::Relaxed);
        let due = !self.seal.waiting.is_empty()
            || memory >= config.seal_bytes
            || self.seal.objects_unsealed >= config.seal_objects
            || self
                .seal
                .dirty_since
                .is_some_and(|since| since + config.seal_age <= now);
        if due {
            self.start_seal();
        }
    }

    /// Snapshots the durable state of the dirty streams (every stream, when
    /// the run count calls for a full run) and starts the seal task.
    fn start_seal(&mut self) {
        let full = self.manifest.value.index_runs.len() + 1 > self.ctx.config.max_index_runs.max(1);
        let dirty = self.seal.begin();
        self.seal.sealing_waiters = std::mem::take(&mut self.seal.waiting);
        let ids: Vec<[u8; 16]> = if full {
            self.shared.streams.read().keys().copied().collect()
        } else {
            dirty.into_iter().collect()
        };
        let mut streams = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(cell) = self.shared.cell(&id) else {
                continue;
            };
            let state = cell.state.read();
            streams.push(SealStream {
                tail: state.tail.clone(),
                pages: state.pages.iter().map(|p| p.bytes.clone()).collect(),
                prior: if full {
                    state.sealed.clone()
                } else {
                    Vec::new()
                },
            });
        }
        streams.sort_by_key(|s| s.tail.stream.id);
        let base_id = self
            .seal
            .next_object_id
            .max(self.manifest.value.next_object_id);
        self.seal.next_object_id = base_id + 2;
        let chain_end = self.seal.durable_chain_end;
        let plan = SealPlan {
            base: self.manifest.clone(),
            write_id: self.ctx.env.entropy.bytes16(),
            replay: ReplayPoint {
                slot: chain_end + 1,
                epoch_floor: self.epoch,
                chain_end,
            },
            segment_id: ObjectId::new(self.epoch, base_id),
            run_id: ObjectId::new(self.epoch, base_id + 1),
            next_object_id: base_id + 2,
            full,
            streams,
            dead_segments: self.seal.dead.iter().copied().collect(),
            fence_window: self.seal.fence_window,
        };
        tracing::debug!(
            shard = %self.ctx.layout.shard(),
            full,
            streams = plan.streams.len(),
            replay_slot = plan.replay.slot,
            "seal started"
        );
        self.seal_tasks.spawn(seal::run(self.ctx.clone(), plan));
    }

    fn on_seal_joined(&mut self, joined: Result<SealResult, tokio::task::JoinError>) {
        let now = Instant::now();
        let done = match joined {
            Ok(Ok(done)) => done,
            Ok(Err(SealFailure::Fenced)) => {
                tracing::warn!(shard = %self.ctx.layout.shard(), "seal refused: fenced by a newer owner");
                self.seal.failed(now, EngineError::Fenced);
                return self.become_fenced(None);
            }
            Ok(Err(SealFailure::Failed(error))) => {
                tracing::warn!(shard = %self.ctx.layout.shard(), %error, "seal failed; backing off");
                return self.seal.failed(now, error);
            }
            Ok(Err(SealFailure::Unknown(error))) => {
                tracing::warn!(shard = %self.ctx.layout.shard(), %error, "seal outcome unknown; re-opening from the store");
                self.seal.failed(now, error);
                self.reopen_needed = true;
                return;
            }
            Err(error) => {
                tracing::error!(shard = %self.ctx.layout.shard(), %error, "seal task ended abnormally");
                return self.seal.failed(
                    now,
                    EngineError::Unavailable {
                        reason: "the seal task ended abnormally".into(),
                    },
                );
            }
        };
        self.seal.succeeded();
        tracing::debug!(
            shard = %self.ctx.layout.shard(),
            version = done.manifest.value.version,
            replay_slot = done.manifest.value.replay.slot,
            chunks = done.chunks.len(),
            "seal landed"
        );
        self.manifest = done.manifest;
        for dead in &done.dead_segments {
            self.seal.dead.remove(dead);
            self.seal.live_chunks.remove(dead);
        }
        // The sealed pages leave memory; their chunk joins the sealed tier.
        let mut freed = 0u64;
        for new in done.chunks {
            let Some(cell) = self.shared.cell(&new.stream.id) else {
                continue;
            };
            let mut state = cell.state.write();
            if !state.tail.is_live(&new.stream) {
                continue;
            }
            let count = state
                .pages
                .partition_point(|p| p.end_offset() <= new.chunk.end_offset());
            let tiles = state.pages.first().map(|p| p.first_offset)
                == Some(new.chunk.first_offset())
                && state.pages[..count].last().map(|p| p.end_offset())
                    == Some(new.chunk.end_offset());
            if !tiles {
                tracing::error!(shard = %self.ctx.layout.shard(), "sealed chunk does not match the stream's unsealed pages; keeping them in memory");
                continue;
            }
            let bytes: u64 = state.pages[..count]
                .iter()
                .map(|p| p.bytes.len() as u64)
                .sum();
            state.pages.drain(..count);
            state.page_bytes -= bytes;
            freed += bytes;
            self.seal.adopt(&new.chunk);
            state.sealed.push(new.chunk);
        }
        self.shared
            .memory_page_bytes
            .fetch_sub(freed, Ordering::Relaxed);
        if let Some(segment) = done.segment {
            if !self.seal.live_chunks.contains_key(&segment) {
                self.seal.dead.insert(segment);
            }
        }
        let due = now + self.ctx.config.gc_grace;
        for garbage in done.garbage {
            self.gc.push(due, garbage);
        }
    }

    // ---------------------------------------------------------- garbage collector

    fn gc_deadline(&self) -> Option<Instant> {
        if self.fenced || self.collecting {
            return None;
        }
        self.gc.next_due()
    }

    fn maybe_collect(&mut self) {
        if self.fenced || self.collecting {
            return;
        }
        let now = Instant::now();
        if self.gc.next_due().is_none_or(|due| due > now) {
            return;
        }
        let mut batch = Vec::new();
        for garbage in self.gc.take_due(now) {
            match garbage {
                gc::Garbage::Segment(id) if self.shared.is_pinned(id) => {
                    self.gc.push(now + PINNED_RECHECK, garbage);
                }
                other => batch.push(other),
            }
        }
        if batch.is_empty() {
            return;
        }
        self.collecting = true;
        self.gc_tasks
            .spawn(gc::collect(self.ctx.clone(), batch, self.epoch));
    }

    fn on_gc_joined(&mut self, joined: Result<GcOutcome, tokio::task::JoinError>) {
        let now = Instant::now();
        match joined {
            Ok(GcOutcome::Swept(Ok(found))) => {
                let due = now + self.ctx.config.gc_grace;
                for garbage in found {
                    self.gc.push(due, garbage);
                }
            }
            Ok(GcOutcome::Swept(Err(error))) => {
                tracing::warn!(shard = %self.ctx.layout.shard(), %error, "garbage sweep failed; the next open sweeps again");
            }
            Ok(GcOutcome::Collected { failed, deleted }) => {
                self.collecting = false;
                self.shared
                    .gc_deleted_objects
                    .fetch_add(deleted, Ordering::Relaxed);
                for garbage in failed {
                    self.gc.push(now + GC_RETRY, garbage);
                }
            }
            Ok(GcOutcome::NotOwner { epoch }) => {
                self.collecting = false;
                // A check from before this owner's own re-claim says nothing now.
                if epoch == self.epoch && !self.fenced {
                    tracing::warn!(shard = %self.ctx.layout.shard(), epoch, "the manifest names another writer: garbage collection stops and the shard is fenced");
                    self.become_fenced(None);
                }
            }
            Err(error) => {
                // A collection task that died leaves its garbage to the next sweep.
                self.collecting = false;
                tracing::error!(shard = %self.ctx.layout.shard(), %error, "garbage task ended abnormally");
            }
        }
    }
}

fn reject(command: Command, error: EngineError) {
    match command {
        Command::Append(job) => {
            let _ = job.reply.send(Err(error));
        }
        Command::Create { reply, .. } => {
            let _ = reply.send(Err(error));
        }
        Command::Delete { reply, .. } | Command::Barrier { reply } | Command::Seal { reply } => {
            let _ = reply.send(Err(error));
        }
        Command::Shutdown { reply } => {
            let _ = reply.send(());
        }
    }
}
