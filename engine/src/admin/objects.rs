//! Reading a shard's objects for the operator tools, without claiming or
//! writing anything: the manifest (as it decodes), the WAL slots listed, a
//! segment's trailer and table, whole objects. A missing object is an
//! answer (`None`, `SegmentTable::Missing`), not an error.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use strata_manifest::{CasObject, Manifest, ManifestCodec, RetryPolicy};
use strata_segments::segment::{decode_table, decode_trailer, ChunkRef, TRAILER_BYTES};

use crate::error::EngineError;
use crate::layout::ShardLayout;

pub(super) async fn load_manifest(
    store: &Arc<dyn ObjectStore>,
    layout: &ShardLayout,
) -> Result<Option<Manifest>, EngineError> {
    CasObject::<ManifestCodec>::new(store.clone(), layout.manifest(), RetryPolicy::default())
        .load()
        .await
        .map(|v| v.map(|v| v.value))
        .map_err(|e| EngineError::corrupt(layout.manifest(), e))
}

pub(super) async fn list_wal_slots(
    store: &Arc<dyn ObjectStore>,
    layout: &ShardLayout,
) -> Result<BTreeSet<u64>, EngineError> {
    let metas: Vec<_> = store
        .list(Some(&layout.wal_prefix()))
        .try_collect()
        .await
        .map_err(|e| EngineError::store(&e))?;
    Ok(metas
        .iter()
        .filter_map(|m| layout.parse_wal_slot(&m.location))
        .collect())
}

/// What a segment's trailer and table say.
pub(super) enum SegmentTable {
    Missing,
    Corrupt(String),
    Table(Vec<ChunkRef>),
}

/// Reads a segment's trailer and table (two ranged GETs, after a HEAD unless
/// the caller knows the object's size from a listing).
pub(super) async fn segment_table(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    known_size: Option<u64>,
) -> Result<SegmentTable, EngineError> {
    let size = match known_size {
        Some(size) => size,
        None => match store.head(path).await {
            Ok(m) => m.size,
            Err(object_store::Error::NotFound { .. }) => return Ok(SegmentTable::Missing),
            Err(e) => return Err(EngineError::store(&e)),
        },
    };
    if size < TRAILER_BYTES as u64 {
        return Ok(SegmentTable::Corrupt(format!(
            "{} bytes: shorter than a trailer",
            size
        )));
    }
    let trailer_bytes = store
        .get_range(path, size - TRAILER_BYTES as u64..size)
        .await
        .map_err(|e| EngineError::store(&e))?;
    let trailer = match decode_trailer(&trailer_bytes) {
        Ok(t) => t,
        Err(e) => return Ok(SegmentTable::Corrupt(e.to_string())),
    };
    let table_end = trailer.table_position.saturating_add(trailer.table_length);
    if table_end > size - TRAILER_BYTES as u64 {
        return Ok(SegmentTable::Corrupt(format!(
            "the trailer places the table at {}..{table_end}, past the object's {} bytes",
            trailer.table_position, size
        )));
    }
    let table_bytes = store
        .get_range(path, trailer.table_position..table_end)
        .await
        .map_err(|e| EngineError::store(&e))?;
    Ok(match decode_table(&table_bytes) {
        Ok(refs) => SegmentTable::Table(refs),
        Err(e) => SegmentTable::Corrupt(e.to_string()),
    })
}

pub(super) async fn get_whole(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
) -> Result<Option<Bytes>, EngineError> {
    match store.get(path).await {
        Ok(r) => r
            .bytes()
            .await
            .map(Some)
            .map_err(|e| EngineError::store(&e)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(EngineError::store(&e)),
    }
}
