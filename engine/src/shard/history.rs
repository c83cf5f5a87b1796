//! Retained manifest versions, for operators: every manifest this engine
//! writes (claims and seals) is also copied, create-only, to
//! `shards/<shard>/manifest-history/<version:020>`, and the copy
//! [`HISTORY_VERSIONS_KEPT`] versions older is deleted. `strata shard
//! rollback` and `recover` choose among these copies.
//!
//! The copy is best effort and never part of a write's outcome: a failed copy
//! is logged, and the manifest itself stays the only authority. A copy can
//! name objects garbage collection has since removed, so tools verify a copy
//! before they use it.

use object_store::ObjectStoreExt;
use strata_manifest::{Manifest, Versioned};

use super::ctx::ShardCtx;
use super::io::{delete_object, put_immutable};

/// Manifest versions kept in the history (older copies are deleted).
pub const HISTORY_VERSIONS_KEPT: u64 = 256;

/// Copies `manifest` into the history and drops the copy that falls out.
pub(crate) async fn record(ctx: &ShardCtx, manifest: &Versioned<Manifest>) {
    let retry = &ctx.config.store_retry;
    let version = manifest.value.version;
    let bytes = match strata_manifest::format::encode(&manifest.value) {
        Ok(bytes) => bytes,
        Err(e) => {
            tracing::warn!(shard = %ctx.layout.shard(), version, error = %e, "manifest history: encoding failed");
            return;
        }
    };
    let path = ctx.layout.manifest_history(version);
    if let Err(e) = put_immutable(&ctx.env.store, &path, bytes, retry).await {
        tracing::warn!(%path, error = %e, "manifest history: copy failed");
        return;
    }
    if let Some(old) = version.checked_sub(HISTORY_VERSIONS_KEPT) {
        let old = ctx.layout.manifest_history(old);
        if let Err(e) = delete_object(&ctx.env.store, &old, retry).await {
            tracing::warn!(path = %old, error = %e, "manifest history: dropping an old copy failed");
        }
    }
}

/// Reads one retained version (`None`: not retained).
pub async fn load(
    store: &std::sync::Arc<dyn object_store::ObjectStore>,
    layout: &crate::layout::ShardLayout,
    version: u64,
) -> Result<Option<Manifest>, crate::EngineError> {
    let path = layout.manifest_history(version);
    match store.get(&path).await {
        Ok(r) => {
            let bytes = r.bytes().await.map_err(|e| crate::EngineError::store(&e))?;
            strata_manifest::format::decode(&bytes)
                .map(Some)
                .map_err(|e| crate::EngineError::corrupt(&path, e))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(crate::EngineError::store(&e)),
    }
}
