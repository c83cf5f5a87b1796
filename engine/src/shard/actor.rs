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
use strata_manifest::{Manifest, Versioned};
use strata_segments::{seal_page, PageCipher, PageError, PreparedBody};
use strata_wal::{
    AppendEntry, CloseEntry, CreateEntry, DeleteEntry, ObjectKind, ProducerEntry, StreamSeqEntry,
    WalEntry, WalHeader, WalObject, WriterId,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::{Id as TaskId, JoinSet};
use tokio::time::Instant;

use super::io::{put_wal_object, WalPutOutcome};
use super::recovery::{self, Opened};
use super::state::{
    apply_append_to_tail, apply_entry, apply_to_tail, create_verdict, judge_producer,
    CreateVerdict, ProducerVerdict, StreamStatus, Tail,
};
use super::{
    AppendAck, AppendJob, AppendKind, Command, CreateAck, ShardCtx, ShardShared, ShardStatus,
    StreamCell,
};
use crate::error::EngineError;
use crate::ids::StreamRef;

/// Commands taken from the queue per wake-up before completions are looked at.
const DRAIN_COMMANDS_MAX: usize = 1024;
/// Most scheduler yields spent gathering a burst of requests before a flush.
const SETTLE_ROUNDS_MAX: usize = 8;

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
    bytes: usize,
}

struct InFlight {
    issue: u64,
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
    pending_bytes: usize,
    failed_issue: Option<u64>,
    fenced: bool,
    shutdown_reply: Option<oneshot::Sender<()>>,
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
            pending_bytes: 0,
            failed_issue: None,
            fenced: false,
            shutdown_reply: None,
        };
        actor.install(opened);
        actor
    }

    pub(crate) async fn run(mut self) {
        loop {
            if !self.receiving && self.batches.is_empty() && self.inflight.is_empty() {
                break;
            }
            let accept = self.receiving && self.can_accept();
            let gap_deadline = self.gap_deadline();
            let far = Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                biased;
                Some(joined) = self.puts.join_next_with_id(), if !self.puts.is_empty() => {
                    self.on_put_joined(joined);
                }
                command = self.rx.recv(), if accept => match command {
                    Some(command) => {
                        self.on_command(command);
                        self.drain_commands();
                    }
                    None => self.stop_receiving(),
                },
                _ = tokio::time::sleep_until(gap_deadline.unwrap_or(far)), if gap_deadline.is_some() => {}
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
            return reject(command, EngineError::Fenced);
        }
        match command {
            Command::Append(job) => self.commit_append(*job),
            Command::Create { create, reply } => self.commit_create(create, reply),
            Command::Delete { stream, reply } => self.commit_delete(stream, reply),
            Command::Barrier { reply } => self.reply_when_durable(Reply::Unit(reply, Ok(()))),
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
            entries.push(StagedEntry::Ready(WalEntry::Producer(ProducerEntry {
                stream: job.stream,
                producer_id: claim.id.clone(),
                epoch: claim.epoch,
                seq: claim.seq,
                first_offset,
                next_offset,
                digest: claim.digest,
            })));
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
        self.stage(
            job.stream,
            entries,
            page_bytes,
            Reply::Append(job.reply, Ok(ack)),
        );
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
                self.push_staged(vec![entry], 0, Reply::Create(reply, Ok(CreateAck::Created)));
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
        self.stage(stream, vec![entry], 0, Reply::Unit(reply, Ok(())));
    }

    /// Applies entries to the staged tail of `stream`, then stages them.
    fn stage(&mut self, stream: StreamRef, entries: Vec<StagedEntry>, bytes: usize, reply: Reply) {
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
        self.push_staged(entries, bytes, reply);
    }

    fn push_staged(&mut self, entries: Vec<StagedEntry>, bytes: usize, reply: Reply) {
        let max = self.ctx.config.max_object_bytes;
        let start_new = match self.batches.back() {
            None => true,
            Some(b) => b.bytes > 0 && b.bytes + bytes > max,
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

    fn gap_deadline(&self) -> Option<Instant> {
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
            && self.gap_deadline().is_none()
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
            WalPutOutcome::Fenced { epoch } => {
                tracing::warn!(shard = %self.ctx.layout.shard(), newer_epoch = epoch, "fenced by a newer owner");
                self.become_fenced();
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
            if let Some(object) = &done.object {
                self.publish(object);
            }
            for reply in done.replies {
                reply.send();
            }
        }
    }

    /// Makes an acknowledged object's entries visible to readers.
    fn publish(&mut self, object: &WalObject) {
        let mut touched: Vec<Arc<StreamCell>> = Vec::new();
        for entry in &object.entries {
            let id = super::state::entry_stream(entry).id;
            let existing = self.shared.cell(&id);
            let result = match &existing {
                Some(cell) => {
                    let mut state = cell.state.write();
                    let before = state.page_bytes;
                    let result = apply_entry(Some(&mut state), entry).map(|fresh| {
                        if let Some(fresh) = fresh {
                            *state = fresh;
                        }
                    });
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
        let Some(failed) = self.failed_issue else {
            return;
        };
        if self.fenced {
            return;
        }
        if self.inflight.front().is_some_and(|f| f.issue < failed) {
            return;
        }
        self.fail_pending(EngineError::OutcomeUnknown);
        self.failed_issue = None;
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

    fn become_fenced(&mut self) {
        self.fenced = true;
        self.failed_issue = None;
        self.fail_pending(EngineError::Fenced);
        self.shared.status.send_replace(ShardStatus::Fenced);
    }

    /// Re-claims the shard (only if nobody else claimed it since our own claim)
    /// and rebuilds its state from the store, retrying store failures.
    async fn reopen(&mut self) {
        self.shared.status.send_replace(ShardStatus::Recovering);
        let mut attempt = 0u32;
        let claimed = loop {
            match recovery::claim(&self.ctx, Some(&self.manifest)).await {
                Ok(claimed) => break claimed,
                Err(EngineError::Fenced) => return self.become_fenced(),
                Err(error) => self.back_off(&mut attempt, &error).await,
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
                Err(EngineError::Fenced) => return self.become_fenced(),
                Err(error) => self.back_off(&mut attempt, &error).await,
            }
        }
    }

    async fn back_off(&self, attempt: &mut u32, error: &EngineError) {
        let wait = self
            .ctx
            .config
            .store_retry
            .backoff(*attempt)
            .min(self.ctx.config.reopen_backoff_max);
        tracing::warn!(shard = %self.ctx.layout.shard(), %error, ?wait, "re-open failed; retrying");
        tokio::time::sleep(wait).await;
        *attempt = attempt.saturating_add(1);
    }

    /// Adopts a freshly opened shard: its manifest, epoch, slots and state.
    fn install(&mut self, opened: Opened) {
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

fn reject(command: Command, error: EngineError) {
    match command {
        Command::Append(job) => {
            let _ = job.reply.send(Err(error));
        }
        Command::Create { reply, .. } => {
            let _ = reply.send(Err(error));
        }
        Command::Delete { reply, .. } | Command::Barrier { reply } => {
            let _ = reply.send(Err(error));
        }
        Command::Shutdown { reply } => {
            let _ = reply.send(());
        }
    }
}
