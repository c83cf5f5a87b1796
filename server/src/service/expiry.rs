//! Expiry: a stream whose TTL or `Expires-At` passed is retired, on access
//! (see `streams.rs`) or when the reaper's deadline for it comes.

use std::sync::Weak;
use std::time::Duration;

use super::error::ServiceError;
use super::streams::Streams;

impl Streams {
    /// Retires `project/name` if its expiry has passed. Otherwise answers its
    /// current deadline, if it still has one (`None`: gone, or no expiry).
    pub async fn expire_if_due(
        &self,
        project: &str,
        name: &str,
    ) -> Result<Option<u64>, ServiceError> {
        let entry = self.registry.entry(project, name);
        let Some(desc) = entry.load().await? else {
            return Ok(None);
        };
        if !desc.value.is_live() {
            return Ok(None);
        }
        let idle_since_ms = self.idle_since_ms(&entry, &desc.value);
        if !desc.value.expired_at(self.now_ms(), idle_since_ms) {
            return Ok(desc.value.expiry_deadline_ms(idle_since_ms));
        }
        let _guard = entry.changes.lock().await;
        if let Some(current) = entry.load().await? {
            if current.value.is_live()
                && current
                    .value
                    .expired_at(self.now_ms(), self.idle_since_ms(&entry, &current.value))
            {
                self.retire(project, &entry, &current).await?;
                tracing::info!(project, name, "stream expired");
            }
        }
        Ok(None)
    }
}

/// Wait before a name whose expiry check failed (store trouble) is retried.
const RETRY_AFTER_MS: u64 = 30_000;

/// Runs the reaper of `streams` until they are dropped.
pub async fn run(streams: Weak<Streams>) {
    loop {
        let Some(strong) = streams.upgrade() else {
            return;
        };
        let reaper = strong.reaper();
        let now_ms = strong.now_ms();
        for (project, name) in reaper.take_due(now_ms) {
            match strong.expire_if_due(&project, &name).await {
                Ok(Some(next_ms)) => reaper.schedule(next_ms, &project, &name),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(%project, %name, error = %e, "expiry check failed; retrying later");
                    reaper.schedule(now_ms + RETRY_AFTER_MS, &project, &name);
                }
            }
        }
        let wait = reaper
            .earliest_ms()
            .map(|due| Duration::from_millis(due.saturating_sub(strong.now_ms())));
        // Not held while waiting: the reaper must not keep the service alive.
        drop(strong);
        // A `schedule` between the look at the queue and this wait leaves a
        // permit in `wake`, so it is never missed.
        match wait {
            Some(Duration::ZERO) => tokio::task::yield_now().await,
            Some(wait) => {
                tokio::select! {
                    _ = tokio::time::sleep(wait) => {}
                    _ = reaper.wake.notified() => {}
                }
            }
            None => reaper.wake.notified().await,
        }
    }
}
