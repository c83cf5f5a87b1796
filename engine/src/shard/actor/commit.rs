//! The committer: validates each command against the *staged* tails,
//! assigns contiguous offsets in queue order, and stages WAL entries into
//! batches cut within the object's size and entry limits (a request's
//! entries are never split). Replies computed here wait for durability.

use std::sync::atomic::Ordering;

use strata_wal::{
    AppendEntry, CloseEntry, ConsumerEntry, CreateEntry, DeleteEntry, ProducerEntry,
    StreamSeqEntry, UsageEntry, WalEntry,
};
use tokio::sync::oneshot;

use super::batch::{Batch, QueuedReply, Reply, StagedEntry, UnsealedPage};
use super::Actor;
use crate::error::EngineError;
use crate::ids::StreamRef;
use crate::shard::api::{AppendAck, AppendKind, CreateAck};
use crate::shard::command::AppendJob;
use crate::shard::producer::AcceptedClaim;
use crate::shard::state::{
    apply_append_to_tail, apply_to_tail, create_verdict, entry_stream, judge_producer,
    CreateVerdict, ProducerVerdict, StreamStatus, Tail,
};

impl Actor {
    pub(super) fn commit_append(&mut self, job: AppendJob) {
        let config = &self.ctx.config;
        let page_bytes: usize = job.pages.iter().map(|p| p.body.content.len()).sum();
        let memory = self.shared.memory_page_bytes.load(Ordering::Relaxed);
        if memory + (self.staging.pending_bytes + page_bytes) as u64 > config.max_memory_page_bytes
        {
            let _ = job.reply.send(Err(EngineError::Overloaded));
            return;
        }
        let tail = match self.staging.staged.get(&job.stream.id) {
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

    pub(super) fn commit_create(
        &mut self,
        create: CreateEntry,
        reply: oneshot::Sender<Result<CreateAck, EngineError>>,
    ) {
        let stream = create.stream;
        match create_verdict(self.staging.staged.get(&stream.id), &stream) {
            CreateVerdict::New => {
                self.staging.staged.insert(stream.id, Tail::new(&create));
                let entry = StagedEntry::Ready(WalEntry::Create(create));
                self.push_staged(vec![entry], Reply::Create(reply, Ok(CreateAck::Created)));
            }
            CreateVerdict::Exists => {
                let same_key = self.staging.staged.get(&stream.id).is_some_and(|t| {
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

    pub(super) fn commit_delete(
        &mut self,
        stream: StreamRef,
        reply: oneshot::Sender<Result<(), EngineError>>,
    ) {
        let live = self
            .staging
            .staged
            .get(&stream.id)
            .is_some_and(|t| t.is_live(&stream));
        if !live {
            return self.reply_when_durable(Reply::Unit(reply, Err(EngineError::StreamNotFound)));
        }
        let entry = StagedEntry::Ready(WalEntry::Delete(DeleteEntry { stream }));
        self.stage(stream, vec![entry], Reply::Unit(reply, Ok(())));
    }

    pub(super) fn commit_consumer(
        &mut self,
        entry: ConsumerEntry,
        reply: oneshot::Sender<Result<(), EngineError>>,
    ) {
        let stream = entry.stream;
        let live = self
            .staging
            .staged
            .get(&stream.id)
            .is_some_and(|t| t.is_live(&stream));
        if !live {
            return self.reply_when_durable(Reply::Unit(reply, Err(EngineError::StreamNotFound)));
        }
        let entry = StagedEntry::Ready(WalEntry::Consumer(entry));
        self.stage(stream, vec![entry], Reply::Unit(reply, Ok(())));
        if let Some(batch) = self.staging.batches.back_mut() {
            batch.urgent = true;
        }
    }

    /// Stages the usage of every stream that is still live (the others are
    /// skipped: their usage ended with them), all in one batch; answers
    /// when they are durable. Not urgent: usage rides the next object.
    pub(super) fn commit_usage(
        &mut self,
        usage: Vec<UsageEntry>,
        reply: oneshot::Sender<Result<(), EngineError>>,
    ) {
        let mut entries = Vec::with_capacity(usage.len());
        for u in usage {
            let Some(tail) = self.staging.staged.get_mut(&u.stream.id) else {
                continue;
            };
            let entry = WalEntry::Usage(u);
            if tail.is_live(&entry_stream(&entry)) && apply_to_tail(tail, &entry).is_ok() {
                entries.push(StagedEntry::Ready(entry));
            }
        }
        if entries.is_empty() {
            return self.reply_when_durable(Reply::Unit(reply, Ok(())));
        }
        self.push_staged(entries, Reply::Unit(reply, Ok(())));
    }

    /// Applies entries to the staged tail of `stream`, then stages them.
    pub(super) fn stage(&mut self, stream: StreamRef, entries: Vec<StagedEntry>, reply: Reply) {
        let tail = self
            .staging
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
    pub(super) fn push_staged(&mut self, entries: Vec<StagedEntry>, reply: Reply) {
        let bytes: usize = entries.iter().map(StagedEntry::encoded_len).sum();
        let bytes_max = self.object_bytes_max();
        let entries_max = self
            .ctx
            .config
            .max_object_entries
            .clamp(1, strata_wal::ENTRIES_MAX);
        let start_new = match self.staging.batches.back() {
            None => true,
            Some(b) => {
                !b.entries.is_empty()
                    && (b.bytes + bytes > bytes_max
                        || b.entries.len() + entries.len() > entries_max)
            }
        };
        if start_new {
            self.staging.batches.push_back(Batch::default());
        }
        let batch = self.staging.batches.back_mut().expect("just ensured");
        batch.entries.extend(entries);
        batch.push_reply(reply);
        batch.bytes += bytes;
        self.staging.pending_bytes += bytes;
    }

    /// Entry bytes one WAL object carries at most: the configured cut, within
    /// what the format can hold beside the header.
    pub(super) fn object_bytes_max(&self) -> usize {
        let framing = strata_wal::header_encoded_len(self.ctx.layout.shard().as_str().len())
            + strata_wal::OBJECT_TRAILER_BYTES;
        self.ctx
            .config
            .max_object_bytes
            .min(strata_wal::OBJECT_BYTES_MAX - framing)
    }

    /// Sends `reply` once everything committed so far is durable.
    pub(super) fn reply_when_durable(&mut self, reply: Reply) {
        if let Some(batch) = self.staging.batches.back_mut() {
            batch.push_reply(reply);
        } else if let Some(last) = self.wal.inflight.back_mut() {
            last.replies.push(QueuedReply {
                after_entries: QueuedReply::AFTER_ALL,
                reply,
            });
        } else {
            reply.send();
        }
    }
}
