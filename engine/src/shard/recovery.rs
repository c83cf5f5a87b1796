//! Opening a shard from the object store alone: claim, walk, fence.
//!
//! 1. **Claim**: bump the manifest's writer epoch by CAS (`If-Match`). A
//!    re-claim after our own write failure proceeds only from a manifest this
//!    owner wrote, so it fails if anyone else claimed meanwhile. With no
//!    manifest, the initial one is created only if the shard's folders hold
//!    nothing: a shard that lost its manifest but not its data is refused
//!    (`EngineError::ManifestMissing`), never started empty.
//! 2. **Walk**: list the WAL slots from the manifest's replay point, fetch the
//!    contiguous run that starts there (parallel GETs, applied in slot order)
//!    and apply every object the [`LogWalk`] admits. The first missing slot ends
//!    the log: nothing after a hole is ever served.
//!    If the walk admits an object of a newer epoch than ours, a newer owner
//!    claimed the shard after us: we are fenced and stop.
//! 3. **Fence**: write a fence object (create-only) at that first missing slot.
//!    If another object got there first it is read and walked like the others,
//!    and the fence moves one slot on. Once the fence is down, the previous
//!    owner's next WAL write meets an occupied slot and it learns it is fenced;
//!    anything it writes after the fence is from an older epoch and skipped.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use tokio::time::Instant;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;
use strata_manifest::{
    claim_shard, CasError, CasObject, ClaimError, Manifest, ManifestCodec, ReplayPoint, SlotRange,
    Versioned,
};
use strata_wal::{Admission, LogWalk, ObjectKind, WalObject, WriterId};

use super::config::ShardConfig;
use super::ctx::ShardCtx;
use super::io::{get_object, put_wal_object, with_retries, WalPutOutcome};
use super::sealed;
use super::state::{entry_stream, StreamTable};
use crate::env::{CrashPoint, EngineEnv};
use crate::error::EngineError;
use crate::ids::{InstanceId, ShardName};
use crate::layout::{ImmutableKind, ObjectId, ShardLayout};

/// Most slots the fence may move past objects that appeared after the listing.
const FENCE_PROBES_MAX: u64 = 4096;

/// What an open found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    pub epoch: u64,
    pub replay_from: u64,
    /// WAL objects replayed (data and fences)…
    pub wal_objects_applied: u64,
    /// …of which data objects (a shard sealed at shutdown replays none).
    pub data_objects_applied: u64,
    pub stale_objects_skipped: u64,
    pub fence_slot: u64,
    pub streams: usize,
    pub duration_ms: u64,
}

/// A freshly opened shard.
pub(crate) struct Opened {
    pub manifest: Versioned<Manifest>,
    pub table: StreamTable,
    pub epoch: u64,
    /// First slot after the fence.
    pub next_slot: u64,
    /// The fence's slot: the first data object continues the chain from it.
    pub chain_end: u64,
    /// Slots after the fence that already hold objects (of older owners).
    pub occupied: BTreeSet<u64>,
    /// Streams the replayed WAL objects changed: not in any index run yet.
    pub touched: HashSet<[u8; 16]>,
    /// Data objects replayed: the next seal covers them.
    pub data_objects: u64,
    /// The slots an older owner may still try to write: from the replay point
    /// we claimed from through our fence (see `Manifest::fence_windows`).
    pub fence_window: SlotRange,
    pub report: RecoveryReport,
}

struct Walker<'a> {
    ctx: &'a ShardCtx,
    /// Streams changed by the objects applied (they are unsealed).
    touched: HashSet<[u8; 16]>,
    /// Data objects applied (fences carry nothing to seal).
    data_objects: u64,
    /// The epoch of the owner walking (None: a read-only walk). An owner whose
    /// walk admits an object of a newer epoch has been superseded.
    owner_epoch: Option<u64>,
    walk: LogWalk,
    table: StreamTable,
    applied: u64,
    skipped: u64,
    /// Tombstones walked ([`LogWalk::is_tombstone`]): collected objects.
    tombstones: u64,
}

impl Walker<'_> {
    fn take(&mut self, slot: u64, bytes: &Bytes) -> Result<(), EngineError> {
        let path = self.ctx.layout.wal(slot);
        let object = strata_wal::decode(bytes).map_err(|e| EngineError::corrupt(&path, e))?;
        if object.header.slot != slot || object.header.shard != self.ctx.layout.shard().as_str() {
            return Err(EngineError::corrupt(
                &path,
                format!(
                    "object names shard {:?} slot {}",
                    object.header.shard, object.header.slot
                ),
            ));
        }
        if self.walk.is_tombstone(&object.header) {
            self.tombstones += 1;
        }
        match self.walk.admit(&object.header) {
            Admission::Apply
                if self
                    .owner_epoch
                    .is_some_and(|e| object.header.writer.epoch > e) =>
            {
                return Err(EngineError::Fenced);
            }
            Admission::Apply => {
                for entry in &object.entries {
                    self.table
                        .apply(entry)
                        .map_err(|e| EngineError::from_apply(&path, e))?;
                    self.touched.insert(entry_stream(entry).id);
                }
                self.applied += 1;
                if object.header.kind == ObjectKind::Data {
                    self.data_objects += 1;
                }
            }
            Admission::SkipStale | Admission::SkipUnchained => self.skipped += 1,
        }
        Ok(())
    }
}

/// The manifest a claim replaces.
pub(crate) enum ClaimFrom {
    /// Read it now.
    Fresh,
    /// The manifest (or its absence) as the caller read it before deciding
    /// to claim. A claim from a read another write replaced since fails as
    /// fenced. (Boxed: a manifest is large, and this is built once per open.)
    Read(Box<Option<Versioned<Manifest>>>),
}

/// Claims the shard and rebuilds its state.
pub(crate) async fn open_shard(ctx: &ShardCtx, from: ClaimFrom) -> Result<Opened, EngineError> {
    let current = match from {
        ClaimFrom::Read(current) => *current,
        ClaimFrom::Fresh => load_manifest(ctx).await?,
    };
    if current.is_none() {
        refuse_if_not_empty(ctx).await?;
    }
    let manifest = claim(ctx, current.as_ref()).await?;
    ctx.env
        .reach(CrashPoint::OpenAfterClaim, &ctx.instance)
        .await;
    let (_, opened) = futures::join!(
        super::history::record(ctx, &manifest),
        walk_and_fence(ctx, manifest.clone())
    );
    opened
}

/// Re-claims the shard after this owner's own failure at `epoch`: only if the
/// manifest in the store is still one this owner wrote (its last write may
/// have landed even if its answer was lost, so the manifest is read rather
/// than remembered). A manifest of ours at a later epoch is an earlier attempt
/// of this re-claim that landed, but whose durability may be unknown: it is
/// claimed again (one more epoch, a fresh durable write), never adopted as
/// read. Anyone else's manifest means fenced.
pub(crate) async fn reclaim(
    ctx: &ShardCtx,
    epoch: u64,
) -> Result<Versioned<Manifest>, EngineError> {
    let current = load_manifest(ctx)
        .await?
        .ok_or_else(|| EngineError::corrupt(ctx.manifest.path(), "the manifest vanished"))?;
    let writer = current.value.writer;
    if writer.instance != ctx.instance.0 || writer.epoch < epoch {
        return Err(EngineError::Fenced);
    }
    let claimed = claim(ctx, Some(&current)).await?;
    ctx.env
        .reach(CrashPoint::OpenAfterClaim, &ctx.instance)
        .await;
    super::history::record(ctx, &claimed).await;
    Ok(claimed)
}

/// The manifest in the store (`None`: there is none).
async fn load_manifest(ctx: &ShardCtx) -> Result<Option<Versioned<Manifest>>, EngineError> {
    load_manifest_from(&ctx.manifest).await
}

/// The manifest `cas` names (`None`: there is none).
pub(crate) async fn load_manifest_from(
    cas: &CasObject<ManifestCodec>,
) -> Result<Option<Versioned<Manifest>>, EngineError> {
    cas.load().await.map_err(|e| match e {
        CasError::Corrupt { path, source } => EngineError::corrupt(path, source),
        other => EngineError::Store {
            reason: other.to_string(),
        },
    })
}

/// A shard without a manifest may start empty only if nothing of it is left:
/// one listing per folder, stopping at the first object.
async fn refuse_if_not_empty(ctx: &ShardCtx) -> Result<(), EngineError> {
    let layout = &ctx.layout;
    let folders = [
        layout.wal_prefix(),
        layout.immutable_prefix(ImmutableKind::IndexRun),
        layout.immutable_prefix(ImmutableKind::Segment),
        layout.manifest_history_prefix(),
    ];
    for folder in folders {
        let first = with_retries(&ctx.config.store_retry, || async {
            ctx.env.store.list(Some(&folder)).next().await.transpose()
        })
        .await
        .map_err(|e| EngineError::store(&e))?;
        if let Some(meta) = first {
            return Err(EngineError::ManifestMissing {
                shard: layout.shard().to_string(),
                found: meta.location.to_string(),
            });
        }
    }
    Ok(())
}

/// Bumps the writer epoch of `current`, the manifest just read (then any
/// other write since wins and we are fenced), or creates the initial
/// manifest when `current` is `None` (then any manifest that appeared
/// meanwhile wins).
pub(crate) async fn claim(
    ctx: &ShardCtx,
    current: Option<&Versioned<Manifest>>,
) -> Result<Versioned<Manifest>, EngineError> {
    let claim_write_id = ctx.env.entropy.bytes16();
    claim_shard(
        &ctx.manifest,
        ctx.layout.shard().as_str(),
        ctx.instance.0,
        claim_write_id,
        current,
    )
    .await
    .map_err(|e| match e {
        ClaimError::Contended { .. } => EngineError::Fenced,
        other => EngineError::Store {
            reason: other.to_string(),
        },
    })
}

/// Replays the WAL from the claimed manifest's replay point and fences it.
pub(crate) async fn walk_and_fence(
    ctx: &ShardCtx,
    manifest: Versioned<Manifest>,
) -> Result<Opened, EngineError> {
    let started = Instant::now();
    let store = &ctx.env.store;
    let epoch = manifest.value.writer.epoch;
    let replay = manifest.value.replay;
    let (mut walker, end, listed) = match walk(ctx, Some(&manifest.value), Some(epoch)).await {
        Ok(walked) => walked,
        Err(error) => return Err(superseded_or(ctx, epoch, error).await),
    };
    let retry = ctx.config.store_retry;

    ctx.env
        .reach(CrashPoint::OpenBeforeFence, &ctx.instance)
        .await;
    // Fence at the first free slot, walking whatever got there first.
    let fence_writer = WriterId {
        instance: ctx.instance.0,
        epoch,
        write_id: ctx.env.entropy.bytes16(),
    };
    let mut slot = end;
    loop {
        if slot - end >= FENCE_PROBES_MAX {
            return Err(EngineError::Unavailable {
                reason: "could not place a fence: WAL slots keep filling".into(),
            });
        }
        let fence = WalObject::fence(
            slot,
            walker.walk.chain_end(),
            fence_writer,
            ctx.layout.shard().to_string(),
        );
        let encoded = strata_wal::encode(&fence).map_err(|e| EngineError::corrupt("fence", e))?;
        let path = ctx.layout.wal(slot);
        match put_wal_object(
            store,
            &path,
            encoded.to_bytes().into(),
            &fence_writer,
            &retry,
        )
        .await
        {
            WalPutOutcome::Written => break,
            WalPutOutcome::Fenced { .. } => return Err(EngineError::Fenced),
            WalPutOutcome::Collision { .. } => {
                let bytes = get_object(store, &path, &retry)
                    .await
                    .map_err(|e| EngineError::store(&e))?
                    .ok_or_else(|| EngineError::Unavailable {
                        reason: format!("{path} vanished during fencing"),
                    })?;
                walker.take(slot, &bytes)?;
                slot += 1;
            }
            WalPutOutcome::Failed(e) => return Err(EngineError::store(&e)),
        }
    }
    let occupied = listed.range(slot + 1..).copied().collect();
    let report = RecoveryReport {
        epoch,
        replay_from: replay.slot,
        wal_objects_applied: walker.applied,
        data_objects_applied: walker.data_objects,
        stale_objects_skipped: walker.skipped,
        fence_slot: slot,
        streams: walker.table.streams.len(),
        duration_ms: started.elapsed().as_millis() as u64,
    };
    tracing::info!(shard = %ctx.layout.shard(), ?report, "shard opened");
    Ok(Opened {
        manifest,
        table: walker.table,
        epoch,
        next_slot: slot + 1,
        chain_end: slot,
        occupied,
        touched: walker.touched,
        data_objects: walker.data_objects,
        fence_window: SlotRange {
            start: replay.slot,
            end: slot + 1,
        },
        report,
    })
}

/// An object the claimed manifest needs went missing, or a listed one vanished:
/// real damage only if the manifest is still ours. A newer owner's garbage
/// collection removes what it no longer needs, so a slow opener that has been
/// superseded meets exactly this; it is fenced, not looking at damage.
async fn superseded_or(ctx: &ShardCtx, epoch: u64, error: EngineError) -> EngineError {
    if !matches!(
        error,
        EngineError::Corrupt { .. } | EngineError::Unavailable { .. }
    ) {
        return error;
    }
    match ctx.manifest.load().await {
        Ok(Some(current)) if current.value.writer.epoch > epoch => EngineError::Fenced,
        _ => error,
    }
}

/// Lists the WAL from `replay` and applies the contiguous run of objects that
/// starts there. Returns the walk, the first missing slot, and every listed slot.
/// The manifest's index runs are read while the WAL is listed (neither
/// depends on the other: runs are immutable, the listing starts at the
/// manifest's replay point).
async fn walk<'a>(
    ctx: &'a ShardCtx,
    manifest: Option<&Manifest>,
    owner_epoch: Option<u64>,
) -> Result<(Walker<'a>, u64, BTreeSet<u64>), EngineError> {
    let from = replay_point(manifest).slot;
    let (table, listed) = match manifest {
        Some(m) => futures::try_join!(load_runs(ctx, m), list_slots(ctx, from))?,
        None => (StreamTable::default(), list_slots(ctx, from).await?),
    };
    walk_listed(ctx, manifest, table, listed, owner_epoch).await
}

/// `walk`, on top of a sealed state already loaded.
async fn walk_from<'a>(
    ctx: &'a ShardCtx,
    manifest: Option<&Manifest>,
    table: StreamTable,
    owner_epoch: Option<u64>,
) -> Result<(Walker<'a>, u64, BTreeSet<u64>), EngineError> {
    let listed = list_slots(ctx, replay_point(manifest).slot).await?;
    walk_listed(ctx, manifest, table, listed, owner_epoch).await
}

/// Where a walk of `manifest` starts (the beginning of the log without one).
fn replay_point(manifest: Option<&Manifest>) -> ReplayPoint {
    manifest.map(|m| m.replay).unwrap_or(ReplayPoint {
        slot: 0,
        epoch_floor: 0,
        chain_end: strata_manifest::NO_SLOT,
    })
}

/// `walk` over the slots `listed` from the replay point on.
async fn walk_listed<'a>(
    ctx: &'a ShardCtx,
    manifest: Option<&Manifest>,
    table: StreamTable,
    listed: ListedSlots,
    owner_epoch: Option<u64>,
) -> Result<(Walker<'a>, u64, BTreeSet<u64>), EngineError> {
    let store = &ctx.env.store;
    let replay = replay_point(manifest);
    let mut end = replay.slot;
    while listed.contains(end) {
        end += 1;
    }
    let window = listed.window(
        replay.slot..end,
        ctx.config.replay_parallelism,
        ctx.config.replay_bytes_in_flight_max,
    );
    let mut walker = Walker {
        ctx,
        touched: HashSet::new(),
        data_objects: 0,
        owner_epoch,
        walk: LogWalk::new(replay.epoch_floor, replay.chain_end),
        table,
        applied: 0,
        skipped: 0,
        tombstones: 0,
    };
    let retry = ctx.config.store_retry;
    let mut fetches = futures::stream::iter(replay.slot..end)
        .map(|slot| async move {
            let path = ctx.layout.wal(slot);
            match get_object(store, &path, &retry).await {
                Ok(Some(bytes)) => Ok((slot, bytes)),
                Ok(None) => Err(EngineError::Unavailable {
                    reason: format!("{path} was listed but is gone"),
                }),
                Err(e) => Err(EngineError::store(&e)),
            }
        })
        .buffered(window);
    let halfway = replay.slot + (end - replay.slot) / 2;
    while let Some((slot, bytes)) = fetches.try_next().await? {
        if slot == halfway && owner_epoch.is_some() {
            ctx.env.reach(CrashPoint::OpenMidWalk, &ctx.instance).await;
        }
        walker.take(slot, &bytes)?;
    }
    drop(fetches);
    Ok((walker, end, listed.from(replay.slot)))
}

/// A read-only view of a shard's log: what an owner opening it now would
/// recover, without claiming or fencing anything.
#[derive(Debug, Clone)]
pub struct LogView {
    pub manifest: Option<Manifest>,
    pub streams: StreamTable,
    /// The first missing WAL slot (where the next owner's fence would go).
    pub end_slot: u64,
    pub objects_applied: u64,
    pub stale_objects_skipped: u64,
    /// Tombstones the walk passed: WAL objects garbage collection replaced
    /// (a walk from an older replay point than the collector's meets them;
    /// what they held is not in the view).
    pub tombstones_walked: u64,
}

/// Reads a shard's manifest and walks its WAL without changing anything.
pub async fn inspect_log(
    env: EngineEnv,
    shard: ShardName,
    config: ShardConfig,
) -> Result<LogView, EngineError> {
    let layout = ShardLayout::new(shard.clone());
    let manifest_cas =
        CasObject::<ManifestCodec>::new(env.store.clone(), layout.manifest(), config.store_retry);
    let manifest = manifest_cas
        .load()
        .await
        .map_err(|e| EngineError::Store {
            reason: e.to_string(),
        })?
        .map(|v| v.value);
    inspect_log_at(env, shard, config, manifest).await
}

/// What an owner would recover starting from `sealed` (instead of the runs
/// `manifest` lists) and walking the WAL from `manifest`'s replay point.
pub async fn inspect_log_from(
    env: EngineEnv,
    shard: ShardName,
    config: ShardConfig,
    manifest: Manifest,
    sealed: StreamTable,
) -> Result<LogView, EngineError> {
    inspect_read_only(env, shard, config, Some(manifest), Some(sealed)).await
}

/// What an owner opening the shard from `manifest` (instead of the one in
/// the store) would recover, without changing anything.
pub async fn inspect_log_at(
    env: EngineEnv,
    shard: ShardName,
    config: ShardConfig,
    manifest: Option<Manifest>,
) -> Result<LogView, EngineError> {
    inspect_read_only(env, shard, config, manifest, None).await
}

/// A walk by no owner: loads `manifest`'s runs unless `sealed` is given.
async fn inspect_read_only(
    env: EngineEnv,
    shard: ShardName,
    config: ShardConfig,
    manifest: Option<Manifest>,
    sealed: Option<StreamTable>,
) -> Result<LogView, EngineError> {
    let layout = ShardLayout::new(shard);
    let manifest_cas =
        CasObject::<ManifestCodec>::new(env.store.clone(), layout.manifest(), config.store_retry);
    let ctx = ShardCtx {
        env,
        layout,
        instance: InstanceId([0; 16]),
        config,
        manifest: manifest_cas,
    };
    let (walker, end, _) = match sealed {
        Some(table) => walk_from(&ctx, manifest.as_ref(), table, None).await?,
        None => walk(&ctx, manifest.as_ref(), None).await?,
    };
    Ok(LogView {
        manifest,
        streams: walker.table,
        end_slot: end,
        objects_applied: walker.applied,
        stale_objects_skipped: walker.skipped,
        tombstones_walked: walker.tombstones,
    })
}

/// Rebuilds the sealed state from the index runs a manifest lists (parallel
/// GETs, applied oldest first).
pub(crate) async fn load_runs(
    ctx: &ShardCtx,
    manifest: &Manifest,
) -> Result<StreamTable, EngineError> {
    let store = &ctx.env.store;
    let retry = ctx.config.store_retry;
    let paths: Vec<_> = manifest
        .index_runs
        .iter()
        .map(|run| ctx.layout.index_run(ObjectId(run.id)))
        .collect();
    let mut loads = futures::stream::iter(paths)
        .map(|path| async move {
            let bytes = get_object(store, &path, &retry)
                .await
                .map_err(|e| EngineError::store(&e))?
                .ok_or_else(|| {
                    EngineError::corrupt(
                        &path,
                        "the manifest lists this index run but it is missing",
                    )
                })?;
            let run = strata_manifest::index_run::decode(&bytes)
                .map_err(|e| EngineError::corrupt(&path, e))?;
            Ok::<_, EngineError>((path, run))
        })
        .buffered(ctx.config.replay_parallelism.max(1));
    let mut table = StreamTable::default();
    while let Some((path, run)) = loads.try_next().await? {
        sealed::apply_run(&mut table, &run).map_err(|e| EngineError::corrupt(&path, e))?;
    }
    Ok(table)
}

/// WAL slots at or after `from` that exist, from one listing, with their
/// sizes (they bound the bytes a walk fetches at once).
#[derive(Debug, Default)]
struct ListedSlots {
    sizes: BTreeMap<u64, u64>,
}

impl ListedSlots {
    fn contains(&self, slot: u64) -> bool {
        self.sizes.contains_key(&slot)
    }

    /// The listed slots at or after `from`.
    fn from(&self, from: u64) -> BTreeSet<u64> {
        self.sizes.range(from..).map(|(slot, _)| *slot).collect()
    }

    /// How many GETs of `slots` a walk keeps in flight: at most
    /// `count_max`, and few enough that as many of the largest object
    /// among them stay within `bytes_max` (one at least). Objects are
    /// applied in slot order, so a window of `n` may hold `n` whole objects.
    fn window(&self, slots: std::ops::Range<u64>, count_max: usize, bytes_max: u64) -> usize {
        let largest = self
            .sizes
            .range(slots)
            .map(|(_, size)| *size)
            .max()
            .unwrap_or(0)
            .max(1);
        let by_bytes = usize::try_from(bytes_max / largest).unwrap_or(usize::MAX);
        by_bytes.min(count_max).max(1)
    }
}

async fn list_slots(ctx: &ShardCtx, from: u64) -> Result<ListedSlots, EngineError> {
    let prefix = ctx.layout.wal_prefix();
    let store: &dyn ObjectStore = ctx.env.store.as_ref();
    let listing = if from == 0 {
        store.list(Some(&prefix))
    } else {
        store.list_with_offset(Some(&prefix), &ctx.layout.wal(from - 1))
    };
    let metas: Vec<_> = listing
        .try_collect()
        .await
        .map_err(|e| EngineError::store(&e))?;
    let sizes = metas
        .iter()
        .filter_map(|m| Some((ctx.layout.parse_wal_slot(&m.location)?, m.size)))
        .filter(|&(slot, _)| slot >= from)
        .collect();
    Ok(ListedSlots { sizes })
}

#[cfg(test)]
mod tests {
    use super::ListedSlots;

    fn listed(sizes: &[(u64, u64)]) -> ListedSlots {
        ListedSlots {
            sizes: sizes.iter().copied().collect(),
        }
    }

    #[test]
    fn a_walk_window_holds_as_many_of_its_largest_object_as_the_byte_bound_allows() {
        let small = listed(&[(10, 100), (11, 200), (12, 150)]);
        assert_eq!(
            small.window(10..13, 64, 64 << 20),
            64,
            "tiny objects: the count bounds"
        );
        let large = listed(&[(10, 100), (11, 16 << 20), (12, 100)]);
        assert_eq!(
            large.window(10..13, 64, 64 << 20),
            4,
            "one 16 MiB object: four at once"
        );
        assert_eq!(
            large.window(12..13, 64, 64 << 20),
            64,
            "only the walked range counts"
        );
        let huge = listed(&[(10, 128 << 20)]);
        assert_eq!(huge.window(10..11, 64, 64 << 20), 1, "one GET at least");
        assert_eq!(listed(&[]).window(0..0, 64, 64 << 20), 64);
        assert_eq!(small.window(10..13, 0, 64 << 20), 1);
        assert_eq!(small.from(11).into_iter().collect::<Vec<_>>(), vec![11, 12]);
    }
}
