//! Ending streams: delete and expiry retire a live stream under its entry's
//! lock: soft-deleted while forks read it, otherwise tombstoned, its engine
//! stream dropped and its source released.

use std::sync::Arc;

use strata_engine::EngineError;
use strata_manifest::Versioned;

use super::error::ServiceError;
use super::registry::{Descriptor, Entry, StreamState};
use super::routing::stream_ref;
use super::streams::Streams;
use hex::encode as hex;

impl Streams {
    pub(super) async fn drop_engine_stream(&self, desc: &Descriptor) {
        if let Ok(stream) = stream_ref(desc) {
            let shard = match self.shards.shard_for(&stream.id) {
                Ok(shard) => shard,
                Err(e) => {
                    tracing::warn!(name = %desc.name, error = %e, "the stream's records stay until its shard's owner deletes them");
                    return;
                }
            };
            if let Err(e) = shard.delete_stream(stream).await {
                if e != EngineError::StreamNotFound {
                    tracing::warn!(name = %desc.name, error = %e, "deleting the stream's records failed; its data stays until reclaimed");
                }
            }
        }
    }

    /// Ends a live stream (delete, or expiry) with the entry's lock held: a
    /// soft delete while forks read it, otherwise a tombstone.
    pub(super) async fn retire(
        &self,
        project: &str,
        entry: &Entry,
        current: &Arc<Versioned<Descriptor>>,
    ) -> Result<(), ServiceError> {
        let mut next = current.value.clone();
        next.write_token = hex(self.entropy.bytes16());
        if next.fork_refs > 0 {
            next.state = StreamState::SoftDeleted;
            entry.store(Some(current), next.clone()).await?;
            self.unlist_from_catalog(&next).await;
            return Ok(());
        }
        next.state = StreamState::Deleted;
        entry.store(Some(current), next.clone()).await?;
        self.unlist_from_catalog(&next).await;
        self.drop_engine_stream(&next).await;
        self.notify_deleted(project, &next.name);
        if let Some(origin) = &next.fork {
            self.release_source(project, &origin.source, origin.source_incarnation)
                .await?;
        }
        Ok(())
    }

    pub async fn delete(&self, project: &str, name: &str) -> Result<(), ServiceError> {
        let (entry, _) = self.live(project, name).await?;
        let _guard = entry.changes.lock().await;
        let current = entry.load().await?.ok_or(ServiceError::NotFound)?;
        match current.value.state {
            StreamState::Live => self.retire(project, &entry, &current).await,
            StreamState::SoftDeleted => Err(ServiceError::Gone),
            StreamState::Deleted => Err(ServiceError::NotFound),
        }
    }
}
