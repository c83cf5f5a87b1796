//! The store's shard topology, `topology.json`: how many shards the streams
//! are spread over. A stream's shard is a function of its id and this count,
//! so the count is fixed when the store is first served and checked at every
//! start: a server started with another `--shards` would look for streams in
//! the wrong shards. (Splitting and merging shards is not supported yet.)

use std::sync::Arc;

use object_store::ObjectStore;
use serde::{Deserialize, Serialize};
use strata_manifest::{CasError, CasObject, JsonCodec, JsonLayout, JsonObject, RetryPolicy};

/// Format version of `topology.json`.
const TOPOLOGY_FORMAT: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    pub format: u32,
    pub shards: usize,
    /// Random per write (the CAS write token), hex.
    pub write_token: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    #[error("topology.json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("topology.json has format {0}; this server reads format {TOPOLOGY_FORMAT}")]
    Format(u32),
    #[error("topology.json: {0}")]
    Store(String),
    #[error(
        "this store was first served with --shards {stored}; start with --shards {stored} \
         (changing the shard count is not supported: streams would be looked up in the wrong shards)"
    )]
    Mismatch { stored: usize },
}

impl JsonObject for Topology {
    type Error = TopologyError;
    const LAYOUT: JsonLayout = JsonLayout::Pretty;

    fn write_token(&self) -> [u8; 16] {
        crate::service::write_token::write_token(&self.write_token)
    }

    fn check(&self) -> Result<(), TopologyError> {
        if self.format != TOPOLOGY_FORMAT {
            return Err(TopologyError::Format(self.format));
        }
        Ok(())
    }
}

/// The CAS codec of Topology objects (the generic JSON codec).
type TopologyCodec = JsonCodec<Topology>;

/// The store's topology, if it was ever served.
pub async fn load(store: &Arc<dyn ObjectStore>) -> Result<Option<Topology>, TopologyError> {
    let cas = CasObject::<TopologyCodec>::new(
        store.clone(),
        crate::service::names::topology(),
        RetryPolicy::default(),
    );
    Ok(cas
        .load()
        .await
        .map_err(store_error)?
        .map(|found| found.value))
}

/// Records `shards` on first use of the store; afterwards, checks it.
pub async fn settle(store: &Arc<dyn ObjectStore>, shards: usize) -> Result<(), TopologyError> {
    let cas = CasObject::<TopologyCodec>::new(
        store.clone(),
        crate::service::names::topology(),
        RetryPolicy::default(),
    );
    let stored = match cas.load().await.map_err(store_error)? {
        Some(found) => found.value,
        None => {
            let token = strata_engine::Entropy::bytes16(&strata_engine::OsEntropy);
            let fresh = Topology {
                format: TOPOLOGY_FORMAT,
                shards,
                write_token: token.iter().map(|b| format!("{b:02x}")).collect(),
            };
            match cas.create(fresh.clone()).await {
                Ok(_) => fresh,
                // Another server created it first: check against theirs.
                Err(CasError::Conflict { .. }) => {
                    cas.load()
                        .await
                        .map_err(store_error)?
                        .ok_or_else(|| TopologyError::Store("vanished after a create race".into()))?
                        .value
                }
                Err(e) => return Err(store_error(e)),
            }
        }
    };
    if stored.shards != shards {
        return Err(TopologyError::Mismatch {
            stored: stored.shards,
        });
    }
    Ok(())
}

fn store_error(e: CasError<TopologyError>) -> TopologyError {
    TopologyError::Store(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;

    #[tokio::test]
    async fn the_first_start_fixes_the_shard_count() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        settle(&store, 4).await.unwrap();
        settle(&store, 4).await.unwrap();
        assert!(matches!(
            settle(&store, 2).await,
            Err(TopologyError::Mismatch { stored: 4 })
        ));
    }
}
