//! What callers ask of the subscription service, already parsed.
//!
//! Owns the typed requests the HTTP layer builds from request bodies (the
//! JSON parsing and its validation messages live in `http/subscriptions.rs`)
//! and the bounds a configuration must keep. A PUT's request is the
//! [`SubConfig`](super::store::SubConfig) itself.
//!
//! Fields that the service must check against its state (a stale generation,
//! an ack without a stream) are kept as they came, so the service answers them
//! in the same order as it always has (docs/ARCHITECTURE.md, "Subscriptions":
//! a fenced wake is reported before a malformed ack).

use super::error::SubError;

/// Lease of a wake when the creator names none.
pub const LEASE_MS_DEFAULT: u64 = 30_000;
/// Shortest lease a creator may ask for.
pub const LEASE_MS_MIN: u64 = 1_000;
/// Longest lease a creator may ask for.
pub const LEASE_MS_MAX: u64 = 600_000;
/// Most streams one subscription may name explicitly.
pub const EXPLICIT_STREAMS_MAX: usize = 10_000;
/// Longest subscription id.
pub const ID_BYTES_MAX: usize = 256;

/// Which wake an acknowledgement or release answers (as the body named it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WakeRef {
    pub generation: Option<u64>,
    pub wake_id: Option<String>,
}

/// One entry of an acknowledgement's `acks`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckEntry {
    /// The stream (normalised) and the offset acknowledged on it.
    Ack { stream: String, offset: u64 },
    /// An entry that names no stream.
    NoStream,
    /// An entry whose offset is missing or is not an offset.
    BadOffset { stream: String },
}

/// `POST …/callback` or `POST …/ack`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AckRequest {
    pub wake: WakeRef,
    pub acks: Vec<AckEntry>,
    /// The consumer is done with the wake.
    pub done: bool,
}

/// `POST …/claim`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRequest {
    /// The claiming worker (non-empty).
    pub worker: String,
}

/// `POST …/streams`: explicit streams to link (normalised, non-empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddStreamsRequest {
    pub streams: Vec<String>,
}

/// Checks a subscription id: 1 to [`ID_BYTES_MAX`] bytes, no `/`.
pub fn check_id(id: &str) -> Result<(), SubError> {
    if id.is_empty() || id.len() > ID_BYTES_MAX || id.contains('/') {
        return Err(SubError::InvalidId);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked() {
        assert!(check_id("a").is_ok());
        assert!(check_id(&"x".repeat(ID_BYTES_MAX)).is_ok());
        for bad in [String::new(), "a/b".into(), "x".repeat(ID_BYTES_MAX + 1)] {
            assert!(matches!(check_id(&bad), Err(SubError::InvalidId)), "{bad}");
        }
    }
}
