//! The heartbeat objects' I/O: listing `fleet/` and reading one heartbeat
//! (bounded: at most [`MEMBERS_MAX`] listed, [`HEARTBEAT_BYTES_MAX`] read).

use std::sync::Arc;

use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use strata_engine::InstanceId;

use super::heartbeat::{Heartbeat, HEARTBEAT_BYTES_MAX};
use super::membership::{Sighting, MEMBERS_MAX};
use crate::service::names;

/// The heartbeat objects under `fleet/` (at most [`MEMBERS_MAX`]).
pub async fn list_heartbeats(
    store: &Arc<dyn ObjectStore>,
) -> Result<Vec<Sighting>, object_store::Error> {
    let prefix = names::fleet_prefix();
    let mut listing = store.list(Some(&prefix));
    let mut out = Vec::new();
    while let Some(meta) = listing.next().await {
        let meta = meta?;
        if let Some(instance) = names::fleet_instance_of(&meta.location) {
            out.push(Sighting {
                instance,
                modified_ms: meta.last_modified.timestamp_millis().max(0) as u64,
                e_tag: meta.e_tag,
                size: meta.size,
            });
        }
        if out.len() >= MEMBERS_MAX {
            break;
        }
    }
    Ok(out)
}

/// Reads and checks `instance`'s heartbeat (`None`: gone or invalid).
pub async fn read_heartbeat(
    store: &Arc<dyn ObjectStore>,
    instance: &InstanceId,
) -> Result<Option<Heartbeat>, object_store::Error> {
    let path: Path = names::fleet_heartbeat(instance);
    let got = match store.get(&path).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    if got.meta.size > HEARTBEAT_BYTES_MAX {
        tracing::warn!(%instance, bytes = got.meta.size, "fleet: heartbeat too large; ignored");
        return Ok(None);
    }
    let bytes = got.bytes().await?;
    match Heartbeat::decode(instance, &bytes) {
        Ok(hb) => Ok(Some(hb)),
        Err(e) => {
            tracing::warn!(%instance, error = %e, "fleet: heartbeat invalid; ignored");
            Ok(None)
        }
    }
}
