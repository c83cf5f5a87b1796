//! A project's usage summed over a fleet, and the stored-bytes admission
//! that needs it (both surfaces' appends).
//!
//! A project's figures are the sum of each member's share (the shards it
//! serves; `POST /v1/fleet/usage` between members). A member that does not
//! answer in time is left out and the sum says so (`complete` false); a
//! shard moving between members at that moment may be counted by neither
//! or, briefly, by both.

use super::super::peers::HttpSubscriptionPeers;
use super::AppState;
use crate::service::usage::{UsageQuestion, UsageShare};
use crate::service::ServiceError;

/// How old a project's stored bytes may be when an append is judged
/// against its limit.
const STORED_FRESH_MS: u64 = 5_000;

/// `project`'s usage over every member (this one's shards, then each
/// other live member's, asked at once), and whether every member answered.
pub async fn project_share(state: &AppState, project: &str) -> (UsageShare, bool) {
    let mut total = state.streams.local_project_usage(project);
    let Some(fleet) = state.fleet.get() else {
        return (total, true);
    };
    let me = fleet.fleet.instance();
    let peers = HttpSubscriptionPeers {
        client: fleet.client.clone(),
        key: fleet.peer_key.clone(),
    };
    let question = UsageQuestion {
        project: project.to_string(),
    };
    let asked: Vec<_> = fleet
        .fleet
        .members()
        .into_iter()
        .filter(|m| m.instance != me)
        .map(|m| peers.usage(&m.url, &question))
        .collect();
    let mut complete = true;
    for answer in futures::future::join_all(asked).await {
        match answer {
            Ok(share) => total.add(&share),
            Err(e) => {
                tracing::debug!(error = %e, "usage: a member did not answer");
                complete = false;
            }
        }
    }
    (total, complete)
}

/// Refuses an append when `project` has a stored-bytes limit and stores
/// that much already (its sum at most [`STORED_FRESH_MS`] old).
pub async fn admit_stored(state: &AppState, project: &str) -> Result<(), ServiceError> {
    let admission = state.streams.admission();
    if admission.limits_of(project).stored_bytes.is_none() {
        return Ok(());
    }
    let now_ms = state.streams.now_ms();
    let stored = match admission.stored_bytes_cached(project, now_ms, STORED_FRESH_MS) {
        Some(stored) => stored,
        None => {
            let (share, _) = project_share(state, project).await;
            admission.cache_stored_bytes(project, share.stored_bytes, now_ms);
            share.stored_bytes
        }
    };
    admission
        .admit_stored(project, stored)
        .map_err(ServiceError::Limited)
}
