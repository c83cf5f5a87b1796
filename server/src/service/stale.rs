//! Answers a shard handle's state alone gives, that a handle fenced without
//! knowing it could give wrongly (`EngineError::may_be_stale`: it holds a
//! prefix of the log until it writes). In a fleet such an answer stands only
//! once the store still names this handle's claim (`Shard::confirm_claim`,
//! one manifest GET, on those error paths only); otherwise the handle stops
//! and the request gets a retryable answer. A single server is the only
//! owner of its shards and never asks.

use strata_engine::{EngineError, Shard};

use super::streams::Streams;

/// Longest wait for the confirmation of a read's answer (a write's waits
/// until its own deadline).
pub(super) const CONFIRM_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(2);

impl Streams {
    /// `answer` from `shard`, with a rejection that may be stale confirmed
    /// first (waiting at most until `until`).
    pub(super) async fn confirmed<T>(
        &self,
        shard: &Shard,
        answer: Result<T, EngineError>,
        until: tokio::time::Instant,
    ) -> Result<T, EngineError> {
        match answer {
            Err(e) => Err(self.confirmed_rejection(shard, e, until).await),
            ok => ok,
        }
    }

    /// `rejection` from `shard`, confirmed first if it may be stale.
    pub(super) async fn confirmed_rejection(
        &self,
        shard: &Shard,
        rejection: EngineError,
        until: tokio::time::Instant,
    ) -> EngineError {
        if rejection.may_be_stale() && self.shards.is_fleet() {
            confirm(shard, rejection, until).await
        } else {
            rejection
        }
    }
}

async fn confirm(
    shard: &Shard,
    rejection: EngineError,
    until: tokio::time::Instant,
) -> EngineError {
    match tokio::time::timeout_at(until, shard.confirm_claim()).await {
        Ok(Ok(())) => rejection,
        Ok(Err(EngineError::Fenced)) => EngineError::Fenced,
        Ok(Err(e)) => EngineError::Unavailable {
            reason: format!(
                "could not confirm this instance still owns the stream's shard ({e}); retry"
            ),
        },
        Err(_) => EngineError::Unavailable {
            reason: "could not confirm this instance still owns the stream's shard; retry".into(),
        },
    }
}
