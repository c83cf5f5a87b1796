//! Shard routing: which of the process's shards holds a stream. A stream's
//! shard is a pure function of its id (the id's first 8 bytes, little endian,
//! modulo the shard count fixed by the store's topology), so every server
//! that opened the same topology routes a stream to the same shard.

use strata_engine::{Shard, StreamRef};

use super::error::ServiceError;
use super::registry::Descriptor;

/// The shards of this process, in topology order.
pub struct ShardRouter {
    shards: Vec<Shard>,
}

impl ShardRouter {
    /// Refuses an empty shard list: every stream must have a shard.
    pub fn new(shards: Vec<Shard>) -> Result<Self, ServiceError> {
        if shards.is_empty() {
            return Err(ServiceError::Internal("no shards to route to".into()));
        }
        Ok(ShardRouter { shards })
    }

    /// The shard of stream `id`.
    pub fn shard_for(&self, id: &[u8; 16]) -> &Shard {
        let mut low = [0u8; 8];
        low.copy_from_slice(&id[..8]);
        let n = u64::from_le_bytes(low);
        &self.shards[(n % self.shards.len() as u64) as usize]
    }
}

/// The engine's name of a descriptor's stream incarnation.
pub fn stream_ref(desc: &Descriptor) -> Result<StreamRef, ServiceError> {
    let id = desc
        .stream_id_bytes()
        .ok_or_else(|| ServiceError::Internal("descriptor stream id".into()))?;
    Ok(StreamRef {
        id,
        incarnation: desc.incarnation,
    })
}
