//! The service's errors: what went wrong, in the service's terms; the HTTP
//! layer alone turns them into status codes and JSON error codes.

use strata_engine::EngineError;

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
    /// The stream's shard is served by another fleet member (at `owner`);
    /// nothing was applied here.
    #[error("the stream's shard is served by another instance ({owner})")]
    NotOwner { owner: String },
    /// The stream's shard is being claimed, handed off or re-opened; nothing
    /// was applied.
    #[error("the stream's shard is moving between instances; retry shortly")]
    Moving,
    /// A project limit refused the request; nothing was applied.
    #[error("the project's {} limit ({}) is reached; retry in {} ms", .0.kind.name(), .0.limit, .0.retry_after_ms)]
    Limited(super::admission::Refusal),
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

impl From<crate::service::registry::RegistryError> for ServiceError {
    fn from(e: crate::service::registry::RegistryError) -> Self {
        match e {
            strata_manifest::CasError::Conflict { .. } => {
                ServiceError::Unavailable("the stream changed concurrently; retry".into())
            }
            other => ServiceError::Internal(other.to_string()),
        }
    }
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
