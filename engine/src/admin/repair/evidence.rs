//! What the store holds now, read once per repair ([`Evidence`]): the
//! manifest object as it is (decodable or not), what an opener recovers from
//! it, the end offset of every stream incarnation's data physically present,
//! the WAL listed, and the retained manifest versions. Read-only.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use strata_manifest::{Manifest, SlotRange};

use crate::admin::objects::{segment_table, SegmentTable};
use crate::env::EngineEnv;
use crate::error::EngineError;
use crate::layout::{ImmutableKind, ObjectId, ShardLayout};
use crate::shard::{history, inspect_log_at, LogView, ShardConfig};

/// The manifest object as it is in the store, decodable or not.
pub(super) struct CurrentManifest {
    /// `None` when the object does not decode.
    pub(super) value: Option<Manifest>,
    /// The e-tag of `bytes`: the repair replaces exactly this object.
    pub(super) e_tag: Option<String>,
    /// The bytes read (kept under `quarantine/` when they do not decode).
    pub(super) bytes: Bytes,
}

async fn load_current(
    store: &Arc<dyn ObjectStore>,
    layout: &ShardLayout,
) -> Result<Option<CurrentManifest>, EngineError> {
    let path = layout.manifest();
    let got = match store.get(&path).await {
        Ok(r) => r,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(EngineError::store(&e)),
    };
    let e_tag = got.meta.e_tag.clone();
    let bytes = got.bytes().await.map_err(|e| EngineError::store(&e))?;
    Ok(Some(CurrentManifest {
        value: strata_manifest::format::decode(&bytes).ok(),
        e_tag,
        bytes,
    }))
}

/// What the store holds now, read once per repair: the manifest object, what
/// an opener recovers from it (`None` when it does not decode), and the end
/// offset of every stream incarnation's data that is physically present
/// (every segment's table, and the current state).
pub(super) struct Evidence {
    pub(super) current: Option<CurrentManifest>,
    pub(super) current_view: Option<Result<LogView, EngineError>>,
    pub(super) physical: BTreeMap<Incarnation, u64>,
    /// Every WAL slot that holds an object (`None`: no WAL object).
    pub(super) wal: Option<SlotRange>,
    /// The replay slot of the current manifest (or, when it does not decode,
    /// of the newest retained version that does): WAL objects below it may
    /// have been collected, so a candidate must walk at least to it.
    pub(super) replay_floor: Option<u64>,
}

pub(super) async fn gather(env: &EngineEnv, layout: &ShardLayout) -> Result<Evidence, EngineError> {
    let store = &env.store;
    let current = load_current(store, layout).await?;
    let current_view = match current.as_ref().and_then(|c| c.value.clone()) {
        Some(m) => Some(
            inspect_log_at(
                env.clone(),
                layout.shard().clone(),
                ShardConfig::default(),
                Some(m),
            )
            .await,
        ),
        None => None,
    };
    let mut physical = physical_offsets(store, layout).await?;
    if let Some(Ok(view)) = &current_view {
        for s in view.streams.streams.values() {
            let key = (s.tail.stream.id, s.tail.stream.incarnation);
            let end = physical.entry(key).or_insert(0);
            *end = (*end).max(s.tail.next_offset);
        }
    }
    let wal = listed_wal_range(store, layout).await?;
    let replay_floor = match current.as_ref().and_then(|c| c.value.as_ref()) {
        Some(m) => Some(m.replay.slot),
        None => newest_retained_replay(store, layout).await?,
    };
    Ok(Evidence {
        current,
        current_view,
        physical,
        wal,
        replay_floor,
    })
}

pub(super) type Incarnation = ([u8; 16], u64);

/// The end offset of every stream incarnation's data in the segments in the
/// store (listed or not), from their tables.
async fn physical_offsets(
    store: &Arc<dyn ObjectStore>,
    layout: &ShardLayout,
) -> Result<BTreeMap<Incarnation, u64>, EngineError> {
    let metas: Vec<_> = store
        .list(Some(&layout.immutable_prefix(ImmutableKind::Segment)))
        .try_collect()
        .await
        .map_err(|e| EngineError::store(&e))?;
    let mut out = BTreeMap::new();
    for meta in metas {
        if layout
            .parse_object_id(&meta.location, ImmutableKind::Segment)
            .is_none()
        {
            continue;
        }
        // A damaged segment's records are not counted: nothing can recover them.
        let SegmentTable::Table(refs) =
            segment_table(store, &meta.location, Some(meta.size)).await?
        else {
            continue;
        };
        for chunk in refs {
            let e = out.entry((chunk.stream_id, chunk.incarnation)).or_insert(0);
            *e = (*e).max(chunk.end_offset);
        }
    }
    Ok(out)
}

/// Why `manifest`'s segments cannot all be used, if they cannot.
pub(super) async fn missing_segments(
    store: &Arc<dyn ObjectStore>,
    layout: &ShardLayout,
    manifest: &Manifest,
) -> Result<Option<String>, EngineError> {
    for s in &manifest.segments {
        let path = layout.segment(ObjectId(s.id));
        match store.head(&path).await {
            Ok(_) => {}
            Err(object_store::Error::NotFound { .. }) => {
                return Ok(Some(format!("{path} is missing")));
            }
            Err(e) => return Err(EngineError::store(&e)),
        }
    }
    Ok(None)
}

/// The index runs `manifest` lists that are missing or do not decode.
pub(super) async fn damaged_runs(
    store: &Arc<dyn ObjectStore>,
    layout: &ShardLayout,
    manifest: &Manifest,
) -> Result<Vec<Path>, EngineError> {
    let mut out = Vec::new();
    for r in &manifest.index_runs {
        let path = layout.index_run(ObjectId(r.id));
        match store.get(&path).await {
            Ok(got) => {
                let bytes = got.bytes().await.map_err(|e| EngineError::store(&e))?;
                if strata_manifest::index_run::decode(&bytes).is_err() {
                    out.push(path);
                }
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(EngineError::store(&e)),
        }
    }
    Ok(out)
}

/// The whole of an object.
pub(super) async fn read_object(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
) -> Result<Bytes, EngineError> {
    store
        .get(path)
        .await
        .map_err(|e| EngineError::store(&e))?
        .bytes()
        .await
        .map_err(|e| EngineError::store(&e))
}

/// How long ago the shard's manifest or newest WAL object was written.
pub(super) async fn last_write_age(
    env: &EngineEnv,
    layout: &ShardLayout,
) -> Result<Option<Duration>, EngineError> {
    let store = &env.store;
    let mut newest = None;
    match store.head(&layout.manifest()).await {
        Ok(meta) => newest = Some(meta.last_modified),
        Err(object_store::Error::NotFound { .. }) => {}
        Err(e) => return Err(EngineError::store(&e)),
    }
    let wal: Vec<_> = store
        .list(Some(&layout.wal_prefix()))
        .try_collect()
        .await
        .map_err(|e| EngineError::store(&e))?;
    for meta in wal {
        newest = newest.max(Some(meta.last_modified));
    }
    let now_ms = env.clock.now_ms();
    Ok(newest.map(|at| {
        let at_ms = u64::try_from(at.timestamp_millis()).unwrap_or(0);
        Duration::from_millis(now_ms.saturating_sub(at_ms))
    }))
}

/// Every listed WAL slot, as one range (`None`: no WAL object).
pub(super) async fn listed_wal_range(
    store: &Arc<dyn ObjectStore>,
    layout: &ShardLayout,
) -> Result<Option<SlotRange>, EngineError> {
    let metas: Vec<_> = store
        .list(Some(&layout.wal_prefix()))
        .try_collect()
        .await
        .map_err(|e| EngineError::store(&e))?;
    let slots: BTreeSet<u64> = metas
        .iter()
        .filter_map(|m| layout.parse_wal_slot(&m.location))
        .collect();
    Ok(match (slots.first(), slots.last()) {
        (Some(first), Some(last)) => Some(SlotRange {
            start: *first,
            end: last + 1,
        }),
        _ => None,
    })
}

/// The highest owner epoch anything in the shard names: the manifest, the
/// retained versions, object ids, and the newest WAL object.
pub(super) async fn max_epoch_seen(
    store: &Arc<dyn ObjectStore>,
    layout: &ShardLayout,
    current: Option<&CurrentManifest>,
) -> Result<u64, EngineError> {
    let mut epoch = current
        .and_then(|c| c.value.as_ref())
        .map_or(0, |m| m.writer.epoch);
    if let Some(newest) = retained_versions(store, layout).await?.first() {
        if let Ok(Some(m)) = history::load(store, layout, *newest).await {
            epoch = epoch.max(m.writer.epoch);
        }
    }
    for kind in [ImmutableKind::Segment, ImmutableKind::IndexRun] {
        let metas: Vec<_> = store
            .list(Some(&layout.immutable_prefix(kind)))
            .try_collect()
            .await
            .map_err(|e| EngineError::store(&e))?;
        for m in metas {
            if let Some(id) = layout.parse_object_id(&m.location, kind) {
                epoch = epoch.max(id.epoch());
            }
        }
    }
    if let Some(range) = listed_wal_range(store, layout).await? {
        let path = layout.wal(range.end - 1);
        if let Ok(got) = store.get(&path).await {
            if let Ok(bytes) = got.bytes().await {
                if let Ok(header) = strata_wal::decode_header(&bytes) {
                    epoch = epoch.max(header.writer.epoch);
                }
            }
        }
    }
    Ok(epoch)
}

/// The replay slot of the newest retained version that decodes.
async fn newest_retained_replay(
    store: &Arc<dyn ObjectStore>,
    layout: &ShardLayout,
) -> Result<Option<u64>, EngineError> {
    for version in retained_versions(store, layout).await? {
        if let Ok(Some(m)) = history::load(store, layout, version).await {
            return Ok(Some(m.replay.slot));
        }
    }
    Ok(None)
}

/// Retained versions, newest first.
pub(super) async fn retained_versions(
    store: &Arc<dyn ObjectStore>,
    layout: &ShardLayout,
) -> Result<Vec<u64>, EngineError> {
    let metas: Vec<_> = store
        .list(Some(&layout.manifest_history_prefix()))
        .try_collect()
        .await
        .map_err(|e| EngineError::store(&e))?;
    let mut versions: Vec<u64> = metas
        .iter()
        .filter_map(|m| layout.parse_manifest_history(&m.location))
        .collect();
    versions.sort_unstable_by(|a, b| b.cmp(a));
    Ok(versions)
}
