//! How subscriptions hear about appends and shard moves.
//!
//! Owns [`SubscriptionObserver`], the stream service's observer: every
//! append goes to [`Subscriptions::appended`] (served here, or relayed to
//! the coordinator); claiming shard 0 makes this server serve the
//! subscriptions ([`Subscriptions::resume`], retried while shard 0 stays
//! here), releasing it stops that; claiming any other shard asks the
//! coordinator for a sweep (appends to it may have gone untold). It holds
//! the service weakly: the stream service outlives nothing through it
//! (docs/ARCHITECTURE.md, "Subscriptions").

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::coordinator::COORDINATOR_SHARD;
use super::service::Subscriptions;
use crate::service::routing::ShardIndex;
use crate::service::{ShardMove, StreamObserver};

/// Most attempts at loading the subscriptions after claiming shard 0.
const RESUME_ATTEMPTS_MAX: u32 = 8;
/// The back-off between them (doubling from the first).
const RESUME_BACKOFF_FIRST: Duration = Duration::from_millis(100);

/// Subscriptions watch the stream service.
pub struct SubscriptionObserver(pub Weak<Subscriptions>);

impl StreamObserver for SubscriptionObserver {
    fn appended(&self, project: &str, name: &str) {
        if let Some(subs) = self.0.upgrade() {
            subs.appended(project, name);
        }
    }

    fn deleted(&self, _project: &str, _name: &str) {}

    fn shard_moved(&self, index: ShardIndex, moved: ShardMove) {
        let Some(subs) = self.0.upgrade() else {
            return;
        };
        match (index == COORDINATOR_SHARD, moved) {
            (true, ShardMove::Claimed) => {
                tokio::spawn(resume(subs));
            }
            (true, ShardMove::Released) => {
                tokio::spawn(async move { subs.suspend().await });
            }
            (false, ShardMove::Claimed) => subs.ask_sweep(),
            (false, ShardMove::Released) => {}
        }
    }
}

/// Loads the subscriptions here, retrying a failed load while shard 0 is
/// still this server's.
async fn resume(subs: Arc<Subscriptions>) {
    let mut backoff = RESUME_BACKOFF_FIRST;
    for attempt in 1..=RESUME_ATTEMPTS_MAX {
        if !subs.coordination.holds_coordinator_shard() {
            return;
        }
        match subs.resume().await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(attempt, error = %e, "subscriptions: loading them failed; trying again");
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
        }
    }
    tracing::error!(
        "subscriptions: could not load them; they stay unavailable until shard 0 moves"
    );
}
