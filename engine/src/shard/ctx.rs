//! What every part of an open shard reads and nothing changes: the engine
//! environment, the shard's layout, its owner's instance id, its tunables
//! and its manifest object ([`ShardCtx`]).

use strata_manifest::{CasObject, ManifestCodec};

use super::config::ShardConfig;
use crate::env::EngineEnv;
use crate::ids::InstanceId;
use crate::layout::ShardLayout;

/// Everything about a shard that does not change while it is open.
pub(crate) struct ShardCtx {
    pub env: EngineEnv,
    pub layout: ShardLayout,
    pub instance: InstanceId,
    pub config: ShardConfig,
    pub manifest: CasObject<ManifestCodec>,
}
