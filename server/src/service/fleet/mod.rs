//! The fleet: many stateless servers on one bucket (docs/ARCHITECTURE.md,
//! "The fleet"). Members announce themselves by heartbeat objects
//! (`heartbeat`), each judges liveness by its own clock (`membership`), every
//! shard's owner is derived from the live set (`placement`), and one task per
//! member claims and releases shards to match (`controller`). The object
//! store is the only coordination substrate; fencing stays the only arbiter
//! of ownership. This module speaks no HTTP: forwarding and hints are the
//! HTTP layer's (`http::forward`).

mod claim;
pub mod controller;
pub mod heartbeat;
mod io;
pub mod membership;
pub mod placement;
pub mod status;
mod store_clock;

pub use controller::{Fleet, FleetConfig, Peers, ShardOpener, ShardOwner};
pub use heartbeat::{Heartbeat, MemberState};
pub use membership::Member;

use strata_engine::{ClaimRead, EngineEnv, EngineError, InstanceId, Shard, ShardConfig};

use crate::service::routing::ShardIndex;

/// Opens shards with the engine, as this server is configured.
pub struct EngineOpener {
    pub env: EngineEnv,
    pub instance: InstanceId,
    pub config: ShardConfig,
}

impl ShardOpener for EngineOpener {
    fn read(&self, index: ShardIndex) -> controller::BoxFuture<Result<ClaimRead, EngineError>> {
        let (store, retry) = (self.env.store.clone(), self.config.store_retry);
        Box::pin(async move { ClaimRead::load(&store, &shard_name(index)?, retry).await })
    }

    fn open(
        &self,
        index: ShardIndex,
        read: ClaimRead,
    ) -> controller::BoxFuture<Result<Shard, EngineError>> {
        let (env, instance, config) = (self.env.clone(), self.instance, self.config.clone());
        Box::pin(
            async move { Shard::open_from(env, shard_name(index)?, instance, config, read).await },
        )
    }
}

fn shard_name(index: ShardIndex) -> Result<strata_engine::ShardName, EngineError> {
    index.shard_name().map_err(|e| EngineError::Unavailable {
        reason: e.to_string(),
    })
}
