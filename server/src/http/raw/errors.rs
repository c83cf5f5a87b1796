//! The raw route's error answers (docs/ARCHITECTURE.md, "The HTTP layer"):
//! a service error's code and headers as the Durable Streams protocol names
//! them (the status comes from [`ApiError::from_service`], one table for both
//! surfaces), and the raw name for a spent live-connection budget.

use super::super::common::error::limit_code;
use super::super::common::ApiError;
use crate::service::ServiceError;

/// The raw route's name for a spent live-connection budget.
pub const LIVE_CAPACITY_CODE: &str = "live_capacity";

/// The raw (Durable Streams) surface's answer to a service error.
impl From<ServiceError> for ApiError {
    fn from(e: ServiceError) -> Self {
        let code = match &e {
            ServiceError::NotFound => "not_found",
            ServiceError::Gone => "gone",
            ServiceError::Conflict(_) | ServiceError::RetainedForForks => "conflict",
            ServiceError::ContentTypeMismatch => "content_type_mismatch",
            ServiceError::Closed { .. } => "stream_closed",
            ServiceError::SeqConflict => "seq_conflict",
            ServiceError::ProducerStale { .. } => "producer_stale_epoch",
            ServiceError::ProducerGap { .. } => "producer_seq_gap",
            ServiceError::ProducerEpochSeq => "producer_epoch_seq",
            ServiceError::WrongKey => "wrong_key",
            ServiceError::BadRequest(_) => "bad_request",
            ServiceError::TooLarge { .. } => "record_too_large",
            ServiceError::Overloaded => "overloaded",
            ServiceError::Limited(refusal) => limit_code(refusal.kind),
            ServiceError::Unavailable(_) => "unavailable",
            ServiceError::OutcomeUnknown(_) => "outcome_unknown",
            ServiceError::NotOwner { .. } => "not_stream_owner",
            ServiceError::Moving => "unavailable",
            ServiceError::Internal(_) => "internal",
        };
        let error = ApiError::from_service(&e, code);
        match e {
            ServiceError::Closed { tail } => error.header("stream-closed", "true").header(
                "stream-next-offset",
                crate::ds::offsets::Offset(tail).to_string(),
            ),
            ServiceError::ProducerStale { current_epoch } => {
                error.header("producer-epoch", current_epoch.to_string())
            }
            ServiceError::ProducerGap { expected, received } => error
                .header("producer-expected-seq", expected.to_string())
                .header("producer-received-seq", received.to_string()),
            _ => error,
        }
    }
}
