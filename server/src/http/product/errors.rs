//! The product API's error answers (docs/ARCHITECTURE.md, "The HTTP
//! layer"): `{"error":{"code","message","details"?,"retryable"}}` with
//! `Cache-Control: no-store`; a service error's code and details as the
//! product names them (the status comes from [`ApiError::from_service`], one
//! table for both surfaces), and the product name for a spent
//! live-connection budget.

use http::StatusCode;
use serde_json::json;

use super::super::common::error::limit_code;
use super::super::common::ApiError;
use crate::service::ServiceError;

/// The product's name for a spent live-connection budget.
pub const LIVE_CAPACITY_CODE: &str = "subscription_capacity";

pub fn error(status: StatusCode, code: &'static str, message: impl Into<String>) -> ApiError {
    ApiError::new(status, code, message).product()
}

pub fn bad(code: &'static str, message: impl Into<String>) -> ApiError {
    error(StatusCode::BAD_REQUEST, code, message)
}

pub fn unknown_route() -> ApiError {
    error(StatusCode::NOT_FOUND, "unknown_route", "no such route")
}

pub fn method_not_allowed(allow: &'static str) -> ApiError {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("use {allow}"),
    )
    .header("allow", allow)
}

/// A service error as the product answers it.
pub fn service_error(e: ServiceError) -> ApiError {
    let code = match &e {
        ServiceError::NotFound => "not_found",
        ServiceError::Gone | ServiceError::RetainedForForks => "gone",
        ServiceError::Conflict(_) => "config_mismatch",
        ServiceError::ContentTypeMismatch => "content_type_mismatch",
        ServiceError::Closed { .. } => "sealed",
        ServiceError::SeqConflict => "seq_conflict",
        ServiceError::ProducerStale { .. } => "stale_producer_epoch",
        ServiceError::ProducerGap { .. } => "producer_gap",
        ServiceError::ProducerEpochSeq => "producer_epoch_must_start_at_zero",
        ServiceError::WrongKey => "wrong_key",
        ServiceError::BadRequest(_) => "invalid_body",
        ServiceError::TooLarge { .. } => "body_too_large",
        ServiceError::Overloaded => "rate_limited",
        ServiceError::Limited(refusal) => limit_code(refusal.kind),
        ServiceError::Unavailable(_) => "unavailable",
        ServiceError::OutcomeUnknown(_) => "outcome_unknown",
        ServiceError::NotOwner { .. } => "not_stream_owner",
        ServiceError::Moving => "unavailable",
        ServiceError::Internal(_) => "internal",
    };
    let mut error = ApiError::from_service(&e, code);
    match e {
        ServiceError::Closed { .. } => error.message = "the collection is sealed".into(),
        ServiceError::ProducerStale { current_epoch } => {
            error = error.details(json!({ "currentEpoch": current_epoch }))
        }
        ServiceError::ProducerGap { expected, received } => {
            error = error.details(json!({ "expected": expected, "received": received }))
        }
        ServiceError::Limited(refusal) => {
            error = error.details(json!({
                "limit": refusal.kind.name(),
                "value": refusal.limit,
                "retryAfterMs": refusal.retry_after_ms,
            }))
        }
        _ => {}
    }
    error.product()
}

/// On writes a key mismatch is `stale_or_wrong_credentials` (a rotated key
/// looks the same as a wrong one).
pub fn write_error(e: ServiceError) -> ApiError {
    match e {
        ServiceError::WrongKey => error(
            StatusCode::FORBIDDEN,
            "stale_or_wrong_credentials",
            "the key does not match the collection's key",
        ),
        other => service_error(other),
    }
}
