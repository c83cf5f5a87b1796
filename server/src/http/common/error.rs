//! The error answer of both surfaces and the one table from service errors
//! to status codes (docs/ARCHITECTURE.md, "The HTTP layer": status codes are
//! decided only under `server/src/http`).
//!
//! Every error is `{"error":{"code","message"}}` (the product adds
//! `retryable` and sometimes `details`) with a fitting status; bad input
//! never panics and never answers 500. Each surface names its own codes
//! (`raw::errors`, `product::errors`); the status is the same for both.

use http::header::{HeaderName, HeaderValue};
use http::{Response, StatusCode};

use super::response::{full, Body};

/// The header that names the instance serving a stream (a client may send
/// its next requests there).
pub const REPLAY_TO: &str = "streams-replay-to";
use crate::service::admission::LimitKind;
use crate::service::ServiceError;

/// An error answer: status, stable code, message, and extra headers.
#[derive(Debug, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// Product answers carry `retryable` (always) and `details` (sometimes).
    pub retryable: Option<bool>,
    pub details: Option<serde_json::Value>,
}

pub type ApiResult = Result<Response<Body>, ApiError>;

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            headers: Vec::new(),
            retryable: None,
            details: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn header(mut self, name: &'static str, value: impl AsRef<str>) -> Self {
        if let Ok(v) = HeaderValue::from_str(value.as_ref()) {
            self.headers.push((HeaderName::from_static(name), v));
        }
        self
    }

    /// The product form: `retryable` set (429 and 503 are), `no-store`.
    pub fn product(mut self) -> Self {
        if self.retryable.is_none() {
            self.retryable = Some(matches!(
                self.status,
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
            ));
        }
        self.header("cache-control", "no-store")
    }

    pub fn details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn into_response(self) -> Response<Body> {
        let mut error = serde_json::json!({"code": self.code, "message": self.message});
        if let Some(details) = self.details {
            error["details"] = details;
        }
        if let Some(retryable) = self.retryable {
            error["retryable"] = serde_json::Value::Bool(retryable);
        }
        let body = serde_json::json!({ "error": error });
        let mut response = Response::new(full(body.to_string()));
        *response.status_mut() = self.status;
        response
            .headers_mut()
            .insert("content-type", HeaderValue::from_static("application/json"));
        for (name, value) in self.headers {
            response.headers_mut().insert(name, value);
        }
        response
    }

    /// A service error as either surface answers it: the status is the
    /// service's (one table for both surfaces), the code is the surface's.
    /// 429 and 503 carry `Retry-After`; an internal error is logged and its
    /// details are not sent.
    pub fn from_service(e: &ServiceError, code: &'static str) -> ApiError {
        let status = match e {
            ServiceError::NotFound => StatusCode::NOT_FOUND,
            ServiceError::Gone => StatusCode::GONE,
            ServiceError::Conflict(_)
            | ServiceError::RetainedForForks
            | ServiceError::ContentTypeMismatch
            | ServiceError::Closed { .. }
            | ServiceError::SeqConflict
            | ServiceError::ProducerGap { .. } => StatusCode::CONFLICT,
            ServiceError::ProducerStale { .. } | ServiceError::WrongKey => StatusCode::FORBIDDEN,
            ServiceError::ProducerEpochSeq | ServiceError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ServiceError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ServiceError::Overloaded | ServiceError::Limited(_) => StatusCode::TOO_MANY_REQUESTS,
            ServiceError::Unavailable(_)
            | ServiceError::OutcomeUnknown(_)
            | ServiceError::NotOwner { .. }
            | ServiceError::Moving => StatusCode::SERVICE_UNAVAILABLE,
            ServiceError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = match e {
            ServiceError::Internal(_) => {
                tracing::error!(error = %e, "internal error");
                "internal error".to_string()
            }
            other => other.to_string(),
        };
        let mut error = ApiError::new(status, code, message);
        if let ServiceError::NotOwner { owner } = e {
            error = error.header(REPLAY_TO, owner);
        }
        match (status, e) {
            (_, ServiceError::Limited(refusal)) => error.header(
                "retry-after",
                retry_after_s(refusal.retry_after_ms).to_string(),
            ),
            (StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE, _) => {
                error.header("retry-after", "1")
            }
            _ => error,
        }
    }
}

/// `Retry-After` (whole seconds, at least 1) for a wait of `ms`.
pub fn retry_after_s(ms: u64) -> u64 {
    ms.div_ceil(1000).max(1)
}

/// The code of a project-limit refusal, the same on both surfaces.
pub fn limit_code(kind: LimitKind) -> &'static str {
    match kind {
        LimitKind::AppendRequests | LimitKind::AppendBytes => "rate_limited",
        LimitKind::LiveReaders => "project_concurrency_limit",
        LimitKind::Collections => "stream_limit",
        LimitKind::StoredBytes => "stored_bytes_limit",
    }
}
