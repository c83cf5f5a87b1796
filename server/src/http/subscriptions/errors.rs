//! How the `__ds` API answers refusals: statuses and upper-case JSON codes.
//!
//! Owns [`BadRequest`] (a request body the API refuses), [`Refusal`] (any
//! reason a request is refused) and the mapping of the service's
//! [`SubError`] to a status and an error code (docs/ARCHITECTURE.md, §6:
//! "status codes are decided in one place", `server/src/http/*/errors.rs`).
//! Bodies are `{"error":{"code","message",…}}`; `ALREADY_CLAIMED` adds
//! `current_holder` and `generation`. The mapping is exhaustive: a new
//! service error cannot go unanswered.

use http::StatusCode;
use serde_json::{json, Value};

use crate::service::subscriptions::SubError;

/// A request body the API refuses (`400 INVALID_REQUEST`, with the message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadRequest(pub String);

impl BadRequest {
    pub fn new(message: impl Into<String>) -> Self {
        BadRequest(message.into())
    }
}

/// Why a `__ds` request is refused.
#[derive(Debug)]
pub enum Refusal {
    Body(BadRequest),
    Service(SubError),
    /// No such route.
    NoRoute,
}

impl From<BadRequest> for Refusal {
    fn from(e: BadRequest) -> Self {
        Refusal::Body(e)
    }
}

impl From<SubError> for Refusal {
    fn from(e: SubError) -> Self {
        Refusal::Service(e)
    }
}

/// The status and code a service error is answered with.
pub fn status_of(e: &SubError) -> (StatusCode, &'static str) {
    match e {
        SubError::InvalidId | SubError::NotPullWake | SubError::AckWithoutStream => {
            (StatusCode::BAD_REQUEST, "INVALID_REQUEST")
        }
        SubError::WebhookUrlRejected(_) => (StatusCode::BAD_REQUEST, "WEBHOOK_URL_REJECTED"),
        SubError::NotFound => (StatusCode::NOT_FOUND, "SUBSCRIPTION_NOT_FOUND"),
        SubError::AlreadyExists => (StatusCode::CONFLICT, "SUBSCRIPTION_ALREADY_EXISTS"),
        SubError::Fenced => (StatusCode::CONFLICT, "FENCED"),
        SubError::AlreadyClaimed { .. } => (StatusCode::CONFLICT, "ALREADY_CLAIMED"),
        SubError::NoPendingWork => (StatusCode::CONFLICT, "NO_PENDING_WORK"),
        SubError::AckOffsetInvalid
        | SubError::NotLinked { .. }
        | SubError::AckOutOfRange { .. } => (StatusCode::CONFLICT, "INVALID_OFFSET"),
        SubError::TokenInvalid => (StatusCode::UNAUTHORIZED, "TOKEN_INVALID"),
        SubError::TokenExpired => (StatusCode::UNAUTHORIZED, "TOKEN_EXPIRED"),
        SubError::StoreFailed | SubError::Unavailable(_) => {
            (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE")
        }
        SubError::Encoding(_) => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
    }
}

/// The status and `{"error":{…}}` body a refusal is answered with.
pub fn error_answer(refusal: Refusal) -> (StatusCode, Value) {
    let (status, error) = match refusal {
        Refusal::Body(e) => (
            StatusCode::BAD_REQUEST,
            json!({"code": "INVALID_REQUEST", "message": e.0}),
        ),
        Refusal::NoRoute => (
            StatusCode::NOT_FOUND,
            json!({"code": "NOT_FOUND", "message": "no such route"}),
        ),
        Refusal::Service(e) => {
            let (status, code) = status_of(&e);
            let mut error = json!({"code": code, "message": e.to_string()});
            if let SubError::AlreadyClaimed { holder, generation } = &e {
                error["current_holder"] = json!(holder);
                error["generation"] = json!(generation);
            }
            (status, error)
        }
    };
    (status, json!({ "error": error }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(refusal: Refusal) -> (u16, String) {
        let (status, body) = error_answer(refusal);
        (status.as_u16(), body.to_string())
    }

    /// Every service error is answered with the status, code and message it
    /// had when the service built its own HTTP errors.
    #[test]
    fn service_errors_keep_their_statuses_and_bodies() {
        let cases: Vec<(SubError, u16, &str)> = vec![
            (
                SubError::InvalidId,
                400,
                r#"{"error":{"code":"INVALID_REQUEST","message":"subscription id: 1 to 256 characters, no '/'"}}"#,
            ),
            (
                SubError::NotPullWake,
                400,
                r#"{"error":{"code":"INVALID_REQUEST","message":"only pull-wake subscriptions are claimed"}}"#,
            ),
            (
                SubError::AckWithoutStream,
                400,
                r#"{"error":{"code":"INVALID_REQUEST","message":"each ack names a stream"}}"#,
            ),
            (
                SubError::WebhookUrlRejected("private address"),
                400,
                r#"{"error":{"code":"WEBHOOK_URL_REJECTED","message":"webhook URL rejected: private address"}}"#,
            ),
            (
                SubError::NotFound,
                404,
                r#"{"error":{"code":"SUBSCRIPTION_NOT_FOUND","message":"no such subscription"}}"#,
            ),
            (
                SubError::AlreadyExists,
                409,
                r#"{"error":{"code":"SUBSCRIPTION_ALREADY_EXISTS","message":"a subscription with another configuration has this id"}}"#,
            ),
            (
                SubError::Fenced,
                409,
                r#"{"error":{"code":"FENCED","message":"the wake is no longer current"}}"#,
            ),
            (
                SubError::AlreadyClaimed {
                    holder: "w1".into(),
                    generation: 3,
                },
                409,
                r#"{"error":{"code":"ALREADY_CLAIMED","current_holder":"w1","generation":3,"message":"another worker holds the wake"}}"#,
            ),
            (
                SubError::NoPendingWork,
                409,
                r#"{"error":{"code":"NO_PENDING_WORK","message":"nothing is pending"}}"#,
            ),
            (
                SubError::AckOffsetInvalid,
                409,
                r#"{"error":{"code":"INVALID_OFFSET","message":"ack offset is not valid"}}"#,
            ),
            (
                SubError::NotLinked {
                    stream: "a/b".into(),
                },
                409,
                r#"{"error":{"code":"INVALID_OFFSET","message":"a/b is not linked"}}"#,
            ),
            (
                SubError::AckOutOfRange { stream: "a".into() },
                409,
                r#"{"error":{"code":"INVALID_OFFSET","message":"ack for a must lie between its acknowledged offset and its tail"}}"#,
            ),
            (
                SubError::TokenInvalid,
                401,
                r#"{"error":{"code":"TOKEN_INVALID","message":"missing or invalid token"}}"#,
            ),
            (
                SubError::TokenExpired,
                401,
                r#"{"error":{"code":"TOKEN_EXPIRED","message":"the token has expired"}}"#,
            ),
            (
                SubError::StoreFailed,
                503,
                r#"{"error":{"code":"UNAVAILABLE","message":"could not save the subscription; retry"}}"#,
            ),
            (
                SubError::Unavailable("store down".into()),
                503,
                r#"{"error":{"code":"UNAVAILABLE","message":"store down"}}"#,
            ),
        ];
        for (error, status, body) in cases {
            assert_eq!(answer(Refusal::Service(error)), (status, body.to_string()));
        }
        assert_eq!(
            answer(Refusal::NoRoute),
            (
                404,
                r#"{"error":{"code":"NOT_FOUND","message":"no such route"}}"#.to_string()
            )
        );
        assert_eq!(
            answer(Refusal::Body(BadRequest::new("give a pattern or streams"))),
            (
                400,
                r#"{"error":{"code":"INVALID_REQUEST","message":"give a pattern or streams"}}"#
                    .to_string()
            )
        );
    }
}
