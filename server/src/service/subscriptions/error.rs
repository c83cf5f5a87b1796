//! The errors of the subscription service.
//!
//! Owns [`SubError`] (what a subscription operation can refuse or fail with)
//! and [`OpenError`] (what stops the service from starting). The variants name
//! what went wrong; they carry no HTTP status: the mapping to statuses and
//! upper-case JSON error codes belongs to the HTTP layer
//! (`http/subscriptions.rs`), as docs/ARCHITECTURE.md asks of the service
//! layer ("the service layer knows no HTTP").

use thiserror::Error;

/// Why a subscription operation was refused or failed.
#[derive(Debug, Error)]
pub enum SubError {
    /// The subscription id is empty, too long or holds a `/`.
    #[error("subscription id: 1 to 256 characters, no '/'")]
    InvalidId,
    /// A claim of a subscription that is not pull-wake.
    #[error("only pull-wake subscriptions are claimed")]
    NotPullWake,
    /// An acknowledgement entry that names no stream.
    #[error("each ack names a stream")]
    AckWithoutStream,
    /// The webhook URL breaks the SSRF rules (the reason is fixed text).
    #[error("webhook URL rejected: {0}")]
    WebhookUrlRejected(&'static str),
    /// No subscription has this id.
    #[error("no such subscription")]
    NotFound,
    /// A PUT with another configuration than the existing subscription's.
    #[error("a subscription with another configuration has this id")]
    AlreadyExists,
    /// The wake, generation or token is not the current one.
    #[error("the wake is no longer current")]
    Fenced,
    /// Another worker holds the current wake.
    #[error("another worker holds the wake")]
    AlreadyClaimed { holder: String, generation: u64 },
    /// No linked stream has records past its acknowledged offset.
    #[error("nothing is pending")]
    NoPendingWork,
    /// An acknowledgement whose offset is missing or is not an offset.
    #[error("ack offset is not valid")]
    AckOffsetInvalid,
    /// An acknowledgement for a stream the subscription does not link.
    #[error("{stream} is not linked")]
    NotLinked { stream: String },
    /// An acknowledgement behind the acknowledged offset or past the tail.
    #[error("ack for {stream} must lie between its acknowledged offset and its tail")]
    AckOutOfRange { stream: String },
    /// The callback token is missing, malformed, forged or for another subscription.
    #[error("missing or invalid token")]
    TokenInvalid,
    /// The callback token's lifetime is over.
    #[error("the token has expired")]
    TokenExpired,
    /// Writing the subscription's record to the store failed.
    #[error("could not save the subscription; retry")]
    StoreFailed,
    /// The stream service could not answer (its message).
    #[error("{0}")]
    Unavailable(String),
    /// A value could not be encoded (not expected to happen).
    #[error("encoding failed: {0}")]
    Encoding(#[from] serde_json::Error),
}

/// Why the subscription service could not start.
#[derive(Debug, Error)]
pub enum OpenError {
    /// Reading or creating the webhook signing key failed.
    #[error("{0}")]
    SigningKey(String),
    /// Listing the stored subscriptions failed.
    #[error("listing subscriptions: {0}")]
    Listing(String),
    /// The webhook HTTP client could not be built.
    #[error("webhook client: {0}")]
    WebhookClient(String),
    /// The callback-token key was refused.
    #[error("token key: {0}")]
    TokenKey(String),
}
