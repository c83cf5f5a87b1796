//! Operator views of shards, read-only: list the shards of a store
//! ([`list_shards`]), inspect one ([`inspect`]): its manifest, the objects it
//! lists, the WAL and every stream's state as an opener would recover them.
//! Nothing here claims, fences or writes.

use std::sync::Arc;

use futures::TryStreamExt;
use object_store::ObjectStore;
use serde::Serialize;
use strata_manifest::Manifest;

use crate::admin::objects::{list_wal_slots, load_manifest};
use crate::env::EngineEnv;
use crate::error::EngineError;
use crate::ids::ShardName;
use crate::layout::{parse_shard_folder, shards_root, ImmutableKind, ObjectId, ShardLayout};
use crate::shard::{inspect_log, DurableStream, ShardConfig, StreamStatus};
use hex::encode as hex;

/// One shard as `list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ShardSummary {
    pub shard: String,
    /// `None` when the shard has no manifest (or it does not decode).
    pub manifest: Option<ManifestSummary>,
    /// Why the manifest could not be read, if it could not.
    pub manifest_error: Option<String>,
}

/// The headline fields of a manifest.
#[derive(Debug, Clone, Serialize)]
pub struct ManifestSummary {
    pub version: u64,
    pub writer_epoch: u64,
    pub writer_instance: String,
    pub replay_slot: u64,
    pub index_runs: usize,
    pub segments: usize,
    /// Bytes of the runs and segments the manifest lists, as recorded there.
    pub sealed_bytes: u64,
    pub fence_windows: usize,
    pub next_object_id: u64,
}

impl ManifestSummary {
    pub fn of(m: &Manifest) -> Self {
        ManifestSummary {
            version: m.version,
            writer_epoch: m.writer.epoch,
            writer_instance: hex(m.writer.instance),
            replay_slot: m.replay.slot,
            index_runs: m.index_runs.len(),
            segments: m.segments.len(),
            sealed_bytes: m.index_runs.iter().map(|r| r.bytes).sum::<u64>()
                + m.segments.iter().map(|s| s.bytes).sum::<u64>(),
            fence_windows: m.fence_windows.len(),
            next_object_id: m.next_object_id,
        }
    }
}

/// Who last claimed a shard: its manifest's writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardHolder {
    pub instance: crate::ids::InstanceId,
    pub epoch: u64,
}

impl ShardHolder {
    /// The holder a manifest names: its writer.
    pub fn of(manifest: &Manifest) -> ShardHolder {
        ShardHolder {
            instance: crate::ids::InstanceId(manifest.writer.instance),
            epoch: manifest.writer.epoch,
        }
    }
}

/// The instance (and epoch) that last claimed `shard`, or `None` when the
/// shard has no manifest yet. One GET.
pub async fn shard_holder(
    store: &Arc<dyn ObjectStore>,
    shard: &ShardName,
) -> Result<Option<ShardHolder>, EngineError> {
    let layout = ShardLayout::new(shard.clone());
    Ok(load_manifest(store, &layout)
        .await?
        .map(|m| ShardHolder::of(&m)))
}

/// Every shard under `shards/`, with its manifest's headline.
pub async fn list_shards(store: &Arc<dyn ObjectStore>) -> Result<Vec<ShardSummary>, EngineError> {
    let listing = store
        .list_with_delimiter(Some(&shards_root()))
        .await
        .map_err(|e| EngineError::store(&e))?;
    let mut names: Vec<ShardName> = listing
        .common_prefixes
        .iter()
        .filter_map(parse_shard_folder)
        .collect();
    names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let layout = ShardLayout::new(name.clone());
        let (manifest, manifest_error) = match load_manifest(store, &layout).await {
            Ok(Some(m)) => (Some(ManifestSummary::of(&m)), None),
            Ok(None) => (None, Some("no manifest".to_string())),
            Err(e) => (None, Some(e.to_string())),
        };
        out.push(ShardSummary {
            shard: name.as_str().to_string(),
            manifest,
            manifest_error,
        });
    }
    Ok(out)
}

/// An object a manifest lists.
#[derive(Debug, Clone, Serialize)]
pub struct ListedObject {
    pub id: u64,
    /// The epoch of the owner that wrote it (the id's high half).
    pub epoch: u64,
    pub bytes: u64,
    pub path: String,
}

/// The WAL as a listing and a walk see it.
#[derive(Debug, Clone, Serialize)]
pub struct WalSummary {
    /// Objects listed, all slots.
    pub objects: usize,
    pub first_slot: Option<u64>,
    pub last_slot: Option<u64>,
    /// The first slot after the replay point that holds no object: where the
    /// next owner's fence goes.
    pub end_slot: u64,
    /// Objects the walk applied, and objects of superseded owners it skipped.
    pub applied: u64,
    pub skipped: u64,
}

/// One stream incarnation as the shard holds it.
#[derive(Debug, Clone, Serialize)]
pub struct StreamSummary {
    pub stream_id: String,
    pub incarnation: u64,
    pub status: String,
    pub next_offset: u64,
    pub payload_bytes: u64,
    pub sealed_chunks: usize,
    pub sealed_bytes: u64,
    /// First offset held in unsealed pages (equal to `next_offset` when none).
    pub unsealed_from: u64,
    pub unsealed_pages: usize,
    pub unsealed_bytes: u64,
    pub producers: usize,
    /// Whom its usage is counted for (the server's project; lossy UTF-8).
    pub account: String,
    pub reads: u64,
    pub read_bytes: u64,
    pub last_read_ms: Option<u64>,
}

impl StreamSummary {
    pub fn of(s: &DurableStream) -> Self {
        StreamSummary {
            stream_id: hex(s.tail.stream.id),
            incarnation: s.tail.stream.incarnation,
            status: match s.tail.status {
                StreamStatus::Open => "open",
                StreamStatus::Closed => "closed",
                StreamStatus::Deleted => "deleted",
            }
            .to_string(),
            next_offset: s.tail.next_offset,
            payload_bytes: s.tail.payload_bytes,
            sealed_chunks: s.sealed.len(),
            sealed_bytes: s.sealed.iter().map(|c| c.chunk.length).sum(),
            unsealed_from: s.unsealed_from(),
            unsealed_pages: s.pages.len(),
            unsealed_bytes: s.page_bytes,
            producers: s.tail.producers.len(),
            account: String::from_utf8_lossy(&s.tail.usage.account).into_owned(),
            reads: s.tail.usage.reads,
            read_bytes: s.tail.usage.read_bytes,
            last_read_ms: s.tail.usage.last_read_ms,
        }
    }
}

/// What `inspect` shows of a shard.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    pub shard: String,
    pub manifest: ManifestSummary,
    pub index_runs: Vec<ListedObject>,
    pub segments: Vec<ListedObject>,
    pub fence_windows: Vec<(u64, u64)>,
    pub wal: WalSummary,
    /// Manifest versions retained for `rollback`, oldest first.
    pub retained_versions: Vec<u64>,
    /// Sorted by stream id.
    pub streams: Vec<StreamSummary>,
}

/// The manifest, its objects, the WAL and every stream's state, as an owner
/// opening the shard now would recover them (without claiming anything).
pub async fn inspect(env: &EngineEnv, shard: &ShardName) -> Result<Inspection, EngineError> {
    let layout = ShardLayout::new(shard.clone());
    let manifest = load_manifest(&env.store, &layout)
        .await?
        .ok_or_else(|| EngineError::corrupt(layout.manifest(), "the shard has no manifest"))?;
    let view = inspect_log(env.clone(), shard.clone(), ShardConfig::default()).await?;
    let slots = list_wal_slots(&env.store, &layout).await?;
    let history: Vec<_> = env
        .store
        .list(Some(&layout.manifest_history_prefix()))
        .try_collect()
        .await
        .map_err(|e| EngineError::store(&e))?;
    let mut retained_versions: Vec<u64> = history
        .iter()
        .filter_map(|m| layout.parse_manifest_history(&m.location))
        .collect();
    retained_versions.sort_unstable();
    let mut streams: Vec<StreamSummary> = view
        .streams
        .streams
        .values()
        .map(StreamSummary::of)
        .collect();
    streams.sort_by(|a, b| a.stream_id.cmp(&b.stream_id));
    let listed = |kind: ImmutableKind, id: u64, bytes: u64| ListedObject {
        id,
        epoch: ObjectId(id).epoch(),
        bytes,
        path: layout.immutable(kind, ObjectId(id)).to_string(),
    };
    Ok(Inspection {
        shard: shard.as_str().to_string(),
        manifest: ManifestSummary::of(&manifest),
        index_runs: manifest
            .index_runs
            .iter()
            .map(|r| listed(ImmutableKind::IndexRun, r.id, r.bytes))
            .collect(),
        segments: manifest
            .segments
            .iter()
            .map(|s| listed(ImmutableKind::Segment, s.id, s.bytes))
            .collect(),
        fence_windows: manifest
            .fence_windows
            .iter()
            .map(|w| (w.start, w.end))
            .collect(),
        wal: WalSummary {
            objects: slots.len(),
            first_slot: slots.first().copied(),
            last_slot: slots.last().copied(),
            end_slot: view.end_slot,
            applied: view.objects_applied,
            skipped: view.stale_objects_skipped,
        },
        retained_versions,
        streams,
    })
}
