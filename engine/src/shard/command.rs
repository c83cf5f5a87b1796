//! The actor's mailbox: the commands `Shard` queues for the actor task, and
//! an append as it is queued (pages built in the caller's task, not yet
//! given offsets). Every command carries the channel its answer goes back on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use strata_segments::{PageCipher, PreparedBody, StreamCipher};
use strata_wal::{ConsumerEntry, CreateEntry, UsageEntry};
use tokio::sync::oneshot;

use super::api::{AppendAck, CreateAck};
use super::state::ProducerClaim;
use crate::error::EngineError;
use crate::ids::StreamRef;

pub(crate) struct PreparedPage {
    pub(super) body: PreparedBody,
    pub(super) cipher: Arc<PageCipher>,
}

/// An append's page bytes while it waits in the actor's queue: counted in
/// the shard's queued bytes from the moment it is queued until the job is
/// dropped (staged, rejected or failed), so that the queue is bounded in
/// bytes as well as in commands.
pub(crate) struct QueuedBytes {
    counter: Arc<AtomicU64>,
    bytes: u64,
}

impl QueuedBytes {
    /// Takes `bytes` of `counter`'s room under `limit`, or refuses. One
    /// append larger than the limit still goes when nothing else is queued.
    pub(crate) fn take(counter: &Arc<AtomicU64>, bytes: u64, limit: u64) -> Option<QueuedBytes> {
        let before = counter.fetch_add(bytes, Ordering::Relaxed);
        if before > 0 && before + bytes > limit {
            counter.fetch_sub(bytes, Ordering::Relaxed);
            return None;
        }
        Some(QueuedBytes {
            counter: counter.clone(),
            bytes,
        })
    }
}

impl Drop for QueuedBytes {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

pub(crate) struct AppendJob {
    pub(super) stream: StreamRef,
    /// `None` only for a close without records (`close_stream_without_key`).
    pub(super) cipher: Option<Arc<StreamCipher>>,
    pub(super) routing_key: Bytes,
    pub(super) key_version: u32,
    pub(super) pages: Vec<PreparedPage>,
    pub(super) record_count: u64,
    pub(super) payload_bytes: u64,
    pub(super) timestamp_ms: u64,
    pub(super) producer: Option<ProducerClaim>,
    pub(super) stream_seq: Option<Bytes>,
    pub(super) close: bool,
    pub(super) reply: oneshot::Sender<Result<AppendAck, EngineError>>,
    /// This job's share of the queue's bytes (given back when it drops).
    pub(super) _queued: QueuedBytes,
}

impl AppendJob {
    /// Whether the request's key is the stream's (constant-time comparison).
    pub(super) fn cipher_matches(&self, epoch: &[u8; 16], fingerprint: &[u8; 16]) -> bool {
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
    /// A change to one consumer group (already checked to decode).
    Consumer {
        entry: ConsumerEntry,
        reply: oneshot::Sender<Result<(), EngineError>>,
    },
    /// Reads of live streams to log (streams gone since are skipped).
    Usage {
        usage: Vec<UsageEntry>,
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
