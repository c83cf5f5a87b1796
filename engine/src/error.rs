//! Errors the engine answers with. Client-caused conditions (not found,
//! closed, producer rules) are distinct variants so the HTTP layer can map each
//! to its status; store and ownership conditions say whether the outcome of a
//! write is known.

use strata_segments::PageError;

use crate::shard::ApplyError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    #[error("stream not found")]
    StreamNotFound,
    #[error("the key does not match the stream's key")]
    WrongKey,
    #[error("stream is closed at offset {next_offset}")]
    StreamClosed { next_offset: u64 },
    #[error("a newer incarnation of the stream exists")]
    StaleIncarnation,
    #[error("producer epoch is stale; current epoch is {current_epoch}")]
    ProducerStaleEpoch { current_epoch: u64 },
    #[error("a new producer epoch must start at sequence 0")]
    ProducerNewEpochNeedsSeqZero,
    #[error("producer sequence gap: expected {expected}, received {received}")]
    ProducerSeqGap { expected: u64, received: u64 },
    #[error("Stream-Seq must increase; the last accepted value is not lower than this one")]
    StreamSeqConflict,
    #[error("an append needs at least one record, or a close")]
    EmptyAppend,
    #[error("{what} is too large: {size} > {limit}")]
    TooLarge {
        what: &'static str,
        size: u64,
        limit: u64,
    },
    #[error("page error: {0}")]
    Page(#[from] PageError),
    #[error("page at offset {offset} failed authentication")]
    PageAuthentication { offset: u64 },
    #[error("shard ingest queue is full")]
    Overloaded,
    #[error("shard unavailable: {reason}")]
    Unavailable { reason: String },
    #[error("the write failed after it may have reached the store; its outcome is unknown")]
    OutcomeUnknown,
    #[error("shard ownership was taken by a newer owner (fenced)")]
    Fenced,
    #[error("shard is shutting down")]
    ShuttingDown,
    #[error("shard data is damaged at {object}: {reason}")]
    Corrupt { object: String, reason: String },
    /// The shard has no manifest, but objects of it remain (`found` names
    /// one): starting it empty would hide its data and run below the epoch
    /// of an owner that may still be running. An operator repair restores it.
    #[error(
        "shard {shard} has no manifest, but its objects remain ({found}): it is not started          empty; restore its manifest with `strata shard recover {shard}` (docs/RUNBOOK.md §5)"
    )]
    ManifestMissing { shard: String, found: String },
    #[error("object store: {reason}")]
    Store { reason: String },
}

impl EngineError {
    /// A rejection that a shard state *behind* the store's (a prefix of the
    /// log: a handle fenced without knowing it) could give wrongly: a
    /// producer sequence gap (the missing sequence may be durable), a new
    /// producer epoch's first sequence (the epoch may have begun), a stream
    /// not found (it may have been created since). The others are facts a
    /// longer log keeps (a stale epoch stays stale, a used `Stream-Seq` stays
    /// used, a close stays closed).
    pub fn may_be_stale(&self) -> bool {
        matches!(
            self,
            EngineError::ProducerSeqGap { .. }
                | EngineError::ProducerNewEpochNeedsSeqZero
                | EngineError::StreamNotFound
        )
    }

    pub(crate) fn corrupt(object: impl ToString, reason: impl ToString) -> Self {
        EngineError::Corrupt {
            object: object.to_string(),
            reason: reason.to_string(),
        }
    }

    pub(crate) fn store(error: &object_store::Error) -> Self {
        EngineError::Store {
            reason: error.to_string(),
        }
    }

    pub(crate) fn from_apply(object: impl ToString, error: ApplyError) -> Self {
        EngineError::corrupt(object, error)
    }
}
