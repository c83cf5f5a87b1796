//! `strata fleet status`: the fleet as the store shows it now — every
//! heartbeat (live or not, by the lease), each shard's computed owner, and
//! the owner its manifest names (the epoch of the last claim). Read-only: one
//! listing, one GET per heartbeat, one GET per shard manifest.

use std::collections::HashMap;
use std::sync::Arc;

use object_store::ObjectStore;
use serde::Serialize;

use super::heartbeat::{Load, MemberState};
use super::io::{list_heartbeats, read_heartbeat};
use super::placement::{owner_of, Candidate};
use crate::service::routing::ShardIndex;

/// One heartbeat as status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct MemberStatus {
    pub instance: String,
    pub url: Option<String>,
    pub state: Option<MemberState>,
    pub weight: Option<u32>,
    /// Now (this process's clock) minus the object's modification time (the
    /// store's): clock skew between them shows here.
    pub heartbeat_age_ms: u64,
    pub live: bool,
    pub started_ms: Option<u64>,
    pub load: Option<Load>,
    /// Why the heartbeat could not be used, if it could not.
    pub error: Option<String>,
}

/// One shard as status shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ShardStatusRow {
    pub shard: String,
    /// The member placement gives it, by the live set above.
    pub computed_owner: Option<String>,
    pub computed_owner_url: Option<String>,
    /// What the shard's manifest says: the epoch and instance of its last
    /// claim (`None`: never opened).
    pub manifest_epoch: Option<u64>,
    pub manifest_instance: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FleetStatus {
    pub lease_ms: u64,
    pub members: Vec<MemberStatus>,
    pub shards: Vec<ShardStatusRow>,
}

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("listing fleet/: {0}")]
    List(object_store::Error),
    #[error("{0}")]
    Topology(#[from] crate::service::topology::TopologyError),
    #[error("reading shard manifests: {0}")]
    Shards(strata_engine::EngineError),
}

/// Reads the fleet's status from `store` at `now_ms`.
pub async fn read(
    store: &Arc<dyn ObjectStore>,
    lease_ms: u64,
    now_ms: u64,
) -> Result<FleetStatus, StatusError> {
    let listing = list_heartbeats(store).await.map_err(StatusError::List)?;
    let mut members = Vec::new();
    let mut candidates = Vec::new();
    let mut urls = HashMap::new();
    for sighting in &listing {
        let age_ms = now_ms.saturating_sub(sighting.modified_ms);
        let live = age_ms < lease_ms;
        let (heartbeat, error) = match read_heartbeat(store, &sighting.instance).await {
            Ok(Some(hb)) => (Some(hb), None),
            Ok(None) => (None, Some("gone or invalid".to_string())),
            Err(e) => (None, Some(e.to_string())),
        };
        if let (true, Some(hb)) = (live, &heartbeat) {
            candidates.push(Candidate {
                instance: sighting.instance,
                weight: hb.weight,
                state: hb.state,
            });
            urls.insert(sighting.instance, hb.url.clone());
        }
        members.push(MemberStatus {
            instance: sighting.instance.to_string(),
            url: heartbeat.as_ref().map(|h| h.url.clone()),
            state: heartbeat.as_ref().map(|h| h.state),
            weight: heartbeat.as_ref().map(|h| h.weight),
            heartbeat_age_ms: age_ms,
            live,
            started_ms: heartbeat.as_ref().map(|h| h.started_ms),
            load: heartbeat.as_ref().map(|h| h.load.clone()),
            error,
        });
    }
    members.sort_by(|a, b| a.instance.cmp(&b.instance));
    let count = crate::service::topology::load(store)
        .await?
        .map_or(0, |t| t.shards);
    let manifests: HashMap<String, (u64, String)> = strata_engine::admin::list_shards(store)
        .await
        .map_err(StatusError::Shards)?
        .into_iter()
        .filter_map(|s| {
            s.manifest
                .map(|m| (s.shard, (m.writer_epoch, m.writer_instance)))
        })
        .collect();
    let shards = (0..count as u32)
        .filter_map(|shard| {
            let name = ShardIndex(shard).shard_name().ok()?.as_str().to_string();
            let owner = owner_of(shard, &candidates);
            let manifest = manifests.get(&name);
            Some(ShardStatusRow {
                computed_owner: owner.map(|o| o.to_string()),
                computed_owner_url: owner.and_then(|o| urls.get(&o).cloned()),
                manifest_epoch: manifest.map(|m| m.0),
                manifest_instance: manifest.map(|m| m.1.clone()),
                shard: name,
            })
        })
        .collect();
    Ok(FleetStatus {
        lease_ms,
        members,
        shards,
    })
}
