//! Operator repairs: roll a shard back to a retained manifest version, or
//! recover a shard whose manifest or index runs are damaged, from the
//! retained versions (`shard::history`).
//!
//! A repair is a change of owner like any other: it writes the chosen
//! manifest as a new version (with a higher epoch, by compare-and-swap on
//! the object in the store, or create-only when there is none), then opens
//! the shard normally, which claims it again, walks the WAL, places a fence
//! at the first free slot, and seals on shutdown. A previous owner still
//! running is therefore fenced: its next manifest write fails the
//! compare-and-swap and its next WAL write meets the fence.
//!
//! Before writing anything, a repair compares, stream by stream, what the
//! chosen version recovers with what is physically present (the current
//! manifest's state when it is readable, and the offsets every segment's
//! table holds): records that would become unreachable are reported, and
//! the repair refuses unless the operator accepts the loss. Objects that
//! fail validation are copied under `quarantine/` before anything is
//! written; damaged index runs are removed from their place once the new
//! manifest is in, and a damaged manifest is replaced in place (by
//! compare-and-swap on the e-tag of the bytes kept), never deleted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::Serialize;
use strata_manifest::index_run::IndexRun;
use strata_manifest::{
    add_window, CasError, CasObject, IndexRunRef, Manifest, ManifestCodec, ReplayPoint, SegmentRef,
    SlotRange, WriterIdentity,
};

use crate::env::EngineEnv;
use crate::error::EngineError;
use crate::ids::{hex, InstanceId, ShardName};
use crate::layout::{ImmutableKind, ObjectId, ShardLayout};
use crate::ops::{segment_table, FindingKind, RecordRange, SegmentTable};
use crate::shard::io::put_immutable;
use crate::shard::sealed::{apply_run, run_entry};
use crate::shard::{
    history, inspect_log_at, inspect_log_from, LogView, Shard, ShardConfig, StreamStatus,
    StreamTable,
};

/// How a repair may proceed.
#[derive(Debug, Clone, Copy, Default)]
pub struct RepairOptions {
    /// Proceed even if the shard was written recently (a live owner may hold
    /// it; it is fenced).
    pub force: bool,
    /// Proceed even if records would become unreachable.
    pub accept_loss: bool,
    /// Only report what would be done.
    pub dry_run: bool,
    /// A shard written within this long is presumed to have a live owner.
    pub live_window: Duration,
    /// With `force` (and not `dry_run`), how long to wait after fencing a
    /// live owner before reading the store: a garbage collection batch that
    /// confirmed its ownership just before the fence finishes meanwhile, so
    /// the evidence the repair decides on no longer changes under it.
    pub quiesce: Duration,
}

/// One stream's next offset after the repair.
#[derive(Debug, Clone, Serialize)]
pub struct StreamAfter {
    pub stream_id: String,
    pub incarnation: u64,
    pub status: String,
    pub next_offset: u64,
}

/// What a repair did (or, dry or refused, would do).
#[derive(Debug, Clone, Serialize)]
pub struct RepairReport {
    pub shard: String,
    /// Where the restored manifest came from.
    pub restored_from: RestoreSource,
    /// The version written (`None` when nothing was written).
    pub written_version: Option<u64>,
    /// The epoch of the owner that reopened the shard after the repair.
    pub reopened_epoch: Option<u64>,
    pub quarantined: Vec<String>,
    /// Records present in the store that this repair would leave unreachable.
    pub lost: Vec<RecordRange>,
    /// Acknowledged changes without records (closes, deletes, creations,
    /// producer and `Stream-Seq` state) the current manifest's log holds and
    /// this repair would undo.
    pub lost_changes: Vec<LostChange>,
    /// Records already lost to damage no repair can undo (corrupt or missing
    /// chunks, WAL objects stranded after a missing one), whatever is done.
    pub unrecoverable: Vec<RecordRange>,
    pub streams: Vec<StreamAfter>,
    pub outcome: RepairOutcome,
}

/// An acknowledged change a repair would undo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LostChange {
    /// `None`: a change to any stream.
    pub stream_id: Option<String>,
    pub incarnation: u64,
    pub change: String,
}

/// Where a repair's manifest came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "version")]
pub enum RestoreSource {
    /// A retained manifest version.
    History(u64),
    /// Rebuilt from every index run, segment and WAL object in the store.
    Rebuilt,
    /// Nothing was restored: the current manifest stands.
    Current,
}

/// Whether a repair was carried out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "reason")]
pub enum RepairOutcome {
    Done,
    DryRun,
    /// Nothing was written, for this reason.
    Refused(String),
}

#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    #[error("{0}")]
    Engine(#[from] EngineError),
    #[error("manifest version {version} is not retained in the history")]
    VersionNotRetained { version: u64 },
    #[error("no retained manifest version can restore the shard: {reason}")]
    NoUsableVersion { reason: String },
    #[error("the shard is healthy; nothing to recover")]
    Healthy,
    /// The manifest changed (or appeared, or vanished) between the repair's
    /// read and its write: the repair wrote no manifest.
    #[error(
        "the shard's manifest changed while the repair ran (is a server still running?); \
         no manifest was written: stop every server and run the repair again"
    )]
    ManifestChanged,
}

/// The manifest object as it is in the store, decodable or not.
struct CurrentManifest {
    /// `None` when the object does not decode.
    value: Option<Manifest>,
    /// The e-tag of `bytes`: the repair replaces exactly this object.
    e_tag: Option<String>,
    /// The bytes read (kept under `quarantine/` when they do not decode).
    bytes: Bytes,
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
struct Evidence {
    current: Option<CurrentManifest>,
    current_view: Option<Result<LogView, EngineError>>,
    physical: BTreeMap<Incarnation, u64>,
    /// Every WAL slot that holds an object (`None`: no WAL object).
    wal: Option<SlotRange>,
    /// The replay slot of the current manifest (or, when it does not decode,
    /// of the newest retained version that does): WAL objects below it may
    /// have been collected, so a candidate must walk at least to it.
    replay_floor: Option<u64>,
}

async fn gather(env: &EngineEnv, layout: &ShardLayout) -> Result<Evidence, EngineError> {
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

/// With `force`, fences a live owner before the repair reads anything: the
/// manifest is claimed as it stands (its content unchanged, the writer this
/// repair at the next epoch), so the owner's next manifest write fails and
/// its garbage collection, which confirms ownership before every batch,
/// deletes nothing more once a batch in flight has finished (`quiesce`).
/// Without it, a live owner could collect WAL objects between the repair's
/// reading of the store and its writing of a manifest that needs them. An
/// undecodable or missing manifest needs no claim: no owner can confirm
/// ownership against it.
async fn fence_live_owner(
    env: &EngineEnv,
    layout: &ShardLayout,
    instance: InstanceId,
    options: RepairOptions,
) -> Result<(), RepairError> {
    if !options.force || options.dry_run {
        return Ok(());
    }
    let cas = CasObject::<ManifestCodec>::new(
        env.store.clone(),
        layout.manifest(),
        ShardConfig::default().store_retry,
    );
    let current = match cas.load().await {
        Ok(Some(current)) => current,
        Ok(None) | Err(CasError::Corrupt { .. }) => return Ok(()),
        Err(e) => {
            return Err(RepairError::Engine(EngineError::Store {
                reason: e.to_string(),
            }))
        }
    };
    let writer = WriterIdentity {
        instance: instance.0,
        epoch: current.value.writer.epoch + 1,
        write_id: env.entropy.bytes16(),
    };
    match cas.replace(&current, current.value.successor(writer)).await {
        Ok(_) => {}
        Err(CasError::Conflict { .. }) => return Err(RepairError::ManifestChanged),
        Err(e) => {
            return Err(RepairError::Engine(EngineError::Store {
                reason: e.to_string(),
            }))
        }
    }
    tracing::info!(shard = %layout.shard(), epoch = writer.epoch, "repair fenced the shard's owner");
    tokio::time::sleep(options.quiesce).await;
    Ok(())
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
async fn retained_versions(
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

/// Restores the shard to retained manifest version `version`.
pub async fn rollback(
    env: &EngineEnv,
    shard: &ShardName,
    version: u64,
    instance: InstanceId,
    options: RepairOptions,
) -> Result<RepairReport, RepairError> {
    let layout = ShardLayout::new(shard.clone());
    fence_live_owner(env, &layout, instance, options).await?;
    let target = history::load(&env.store, &layout, version)
        .await?
        .ok_or(RepairError::VersionNotRetained { version })?;
    let view = inspect_log_at(
        env.clone(),
        shard.clone(),
        ShardConfig::default(),
        Some(target.clone()),
    )
    .await
    .map_err(|e| RepairError::NoUsableVersion {
        reason: format!("version {version} cannot be opened: {e}"),
    })?;
    whole(&view).map_err(|why| RepairError::NoUsableVersion {
        reason: format!("version {version}: {why}"),
    })?;
    missing_segments(&env.store, &layout, &target)
        .await?
        .map_or(Ok(()), |reason| {
            Err(RepairError::NoUsableVersion {
                reason: format!("version {version}: {reason}"),
            })
        })?;
    let candidate = Candidate {
        source: RestoreSource::History(version),
        manifest: target,
        view,
        lost_records: 0,
        new_run: None,
        unverified: Vec::new(),
    };
    let evidence = gather(env, &layout).await?;
    restore(
        env,
        &layout,
        candidate,
        Vec::new(),
        evidence,
        instance,
        options,
    )
    .await
}

/// Recovers a shard whose manifest is missing or damaged, or whose manifest
/// lists damaged or missing index runs or segments: the newest retained
/// version that opens and loses nothing is restored (with `accept_loss`, the
/// newest that opens at all); damaged objects are quarantined.
pub async fn recover(
    env: &EngineEnv,
    shard: &ShardName,
    instance: InstanceId,
    options: RepairOptions,
) -> Result<RepairReport, RepairError> {
    let store = &env.store;
    let layout = ShardLayout::new(shard.clone());
    fence_live_owner(env, &layout, instance, options).await?;
    let unrecoverable = unrecoverable_records(env, shard).await?;
    let evidence = gather(env, &layout).await?;
    let mut damaged: Vec<Path> = Vec::new();
    match evidence.current.as_ref().and_then(|c| c.value.as_ref()) {
        Some(m) => {
            let segments = missing_segments(store, &layout, m).await?;
            if let (Some(Ok(view)), None) = (&evidence.current_view, &segments) {
                if unrecoverable.is_empty() {
                    return Err(RepairError::Healthy);
                }
                // Nothing to restore, but damage to report.
                return Ok(RepairReport {
                    shard: shard.as_str().to_string(),
                    restored_from: RestoreSource::Current,
                    written_version: None,
                    reopened_epoch: None,
                    quarantined: Vec::new(),
                    lost: Vec::new(),
                    lost_changes: Vec::new(),
                    unrecoverable: from_recovered(unrecoverable, &view.streams),
                    streams: streams_after(&view.streams),
                    outcome: RepairOutcome::Refused(
                        "the manifest and index runs are sound; the damage found cannot be undone by a repair".into(),
                    ),
                });
            }
            damaged.extend(damaged_runs(store, &layout, m).await?);
        }
        None => {
            if evidence.current.is_some() {
                damaged.push(layout.manifest());
            }
        }
    }
    let mut best: Option<Candidate> = None;
    let mut reasons = Vec::new();
    for version in retained_versions(store, &layout).await? {
        let Some(target) = history::load(store, &layout, version).await.ok().flatten() else {
            reasons.push(format!("version {version} does not decode"));
            continue;
        };
        if target
            .index_runs
            .iter()
            .any(|r| damaged.contains(&layout.index_run(ObjectId(r.id))))
        {
            reasons.push(format!("version {version} lists a damaged index run"));
            continue;
        }
        if let Some(reason) = missing_segments(store, &layout, &target).await? {
            reasons.push(format!("version {version}: {reason}"));
            continue;
        }
        let view = match inspect_log_at(
            env.clone(),
            shard.clone(),
            ShardConfig::default(),
            Some(target.clone()),
        )
        .await
        {
            Ok(view) => view,
            Err(e) => {
                reasons.push(format!("version {version} cannot be opened: {e}"));
                continue;
            }
        };
        if let Err(why) = whole(&view) {
            reasons.push(format!("version {version}: {why}"));
            continue;
        }
        let lost = loss_count(&view, &evidence);
        let candidate = Candidate {
            source: RestoreSource::History(version),
            manifest: target,
            view,
            lost_records: lost,
            new_run: None,
            unverified: Vec::new(),
        };
        if lost == 0 {
            best = Some(candidate);
            break;
        }
        if best.as_ref().is_none_or(|b| lost < b.lost_records) {
            best = Some(candidate);
        }
    }
    // No retained version restores everything: rebuild from the objects.
    if best.as_ref().is_none_or(|b| b.lost_records > 0) {
        match rebuilt_candidate(env, &layout, &mut damaged).await? {
            Ok(mut rebuilt) => {
                rebuilt.lost_records =
                    loss_count(&rebuilt.view, &evidence) + rebuilt.unverified.len() as u64;
                if best
                    .as_ref()
                    .is_none_or(|b| rebuilt.lost_records < b.lost_records)
                {
                    best = Some(rebuilt);
                }
            }
            Err(reason) => reasons.push(format!("rebuilding from the objects: {reason}")),
        }
    }
    let Some(best) = best else {
        return Err(RepairError::NoUsableVersion {
            reason: reasons.join("; "),
        });
    };
    let mut report = restore(env, &layout, best, damaged, evidence, instance, options).await?;
    report.unrecoverable = unrecoverable;
    Ok(report)
}

/// Records a deep verification finds lost to damage a repair cannot undo.
async fn unrecoverable_records(
    env: &EngineEnv,
    shard: &ShardName,
) -> Result<Vec<RecordRange>, EngineError> {
    let verification = crate::ops::verify(env, shard, true, &|_| {}).await?;
    Ok(verification
        .findings
        .into_iter()
        .filter(|f| {
            matches!(
                f.kind,
                FindingKind::ChunkCorrupt | FindingKind::SegmentMissing | FindingKind::WalGap
            )
        })
        .flat_map(|f| f.records)
        .collect())
}

/// Stranded WAL records start, for a reader, where the recovered stream ends:
/// the missing object's records are lost too.
fn from_recovered(ranges: Vec<RecordRange>, table: &StreamTable) -> Vec<RecordRange> {
    ranges
        .into_iter()
        .map(|mut r| {
            if let Some(s) = table.streams.values().find(|s| {
                hex(&s.tail.stream.id) == r.stream_id && s.tail.stream.incarnation == r.incarnation
            }) {
                r.from = r.from.min(s.tail.next_offset);
            }
            r
        })
        .collect()
}

/// A manifest a repair may restore, what it recovers, and the index run it
/// needs written first (a rebuilt one).
struct Candidate {
    source: RestoreSource,
    manifest: Manifest,
    view: LogView,
    lost_records: u64,
    new_run: Option<NewRun>,
    /// What the candidate cannot vouch for (a rebuild that skipped runs
    /// that do not decode: the state only they held is gone).
    unverified: Vec<LostChange>,
}

struct NewRun {
    path: Path,
    bytes: Bytes,
}

/// Rebuilds the sealed state from every index run in the store (listed or
/// not), newest last, and the replay point from the newest: a manifest that
/// lists one new full run of that state. `Err` says why it cannot be used.
async fn rebuilt_candidate(
    env: &EngineEnv,
    layout: &ShardLayout,
    damaged: &mut Vec<Path>,
) -> Result<Result<Candidate, String>, EngineError> {
    let store = &env.store;
    let metas: Vec<_> = store
        .list(Some(&layout.immutable_prefix(ImmutableKind::IndexRun)))
        .try_collect()
        .await
        .map_err(|e| EngineError::store(&e))?;
    let mut runs: Vec<(ObjectId, Path)> = metas
        .into_iter()
        .filter_map(|m| {
            layout
                .parse_object_id(&m.location, ImmutableKind::IndexRun)
                .map(|id| (id, m.location))
        })
        .collect();
    runs.sort_by_key(|(id, _)| *id);
    let mut table = StreamTable::default();
    let mut newest: Option<(ObjectId, u64)> = None;
    let mut undecodable: Vec<Path> = Vec::new();
    for (id, path) in runs {
        let bytes = store
            .get(&path)
            .await
            .map_err(|e| EngineError::store(&e))?
            .bytes()
            .await
            .map_err(|e| EngineError::store(&e))?;
        let run = match strata_manifest::index_run::decode(&bytes) {
            Ok(run) => run,
            Err(_) => {
                undecodable.push(path.clone());
                if !damaged.contains(&path) {
                    damaged.push(path);
                }
                continue;
            }
        };
        if apply_run(&mut table, &run).is_ok() {
            newest = Some((id, run.chain_end));
        }
    }
    let Some((newest_id, chain_end)) = newest else {
        return Ok(Err("no index run in the store decodes".into()));
    };
    // The segments the state refers to, with their sizes.
    let seg_metas: Vec<_> = store
        .list(Some(&layout.immutable_prefix(ImmutableKind::Segment)))
        .try_collect()
        .await
        .map_err(|e| EngineError::store(&e))?;
    let sizes: BTreeMap<ObjectId, u64> = seg_metas
        .iter()
        .filter_map(|m| {
            layout
                .parse_object_id(&m.location, ImmutableKind::Segment)
                .map(|id| (id, m.size))
        })
        .collect();
    let referenced: BTreeSet<ObjectId> = table
        .streams
        .values()
        .flat_map(|s| s.sealed.iter().map(|c| c.segment))
        .collect();
    let mut segments = Vec::new();
    for id in referenced {
        match sizes.get(&id) {
            Some(bytes) => segments.push(SegmentRef {
                id: id.0,
                bytes: *bytes,
            }),
            None => return Ok(Err(format!("{} is missing", layout.segment(id)))),
        }
    }
    let epoch = max_epoch_seen(store, layout, None).await? + 1;
    let run_id = ObjectId::new(epoch, 1);
    let mut ids: Vec<&[u8; 16]> = table.streams.keys().collect();
    ids.sort();
    let run = IndexRun {
        id: run_id.0,
        chain_end,
        entries: ids
            .into_iter()
            .map(|id| {
                let s = &table.streams[id];
                run_entry(&s.tail, &s.sealed)
            })
            .collect(),
    };
    let bytes = strata_manifest::index_run::encode(&run)
        .map_err(|e| EngineError::corrupt("rebuilt index run", e))?;
    let manifest = Manifest {
        version: 1,
        writer: WriterIdentity {
            instance: [0; 16],
            epoch,
            write_id: [0; 16],
        },
        shard: layout.shard().as_str().to_string(),
        replay: ReplayPoint {
            slot: chain_end.checked_add(1).unwrap_or(0),
            epoch_floor: newest_id.epoch(),
            chain_end,
        },
        next_object_id: 2,
        index_runs: vec![IndexRunRef {
            id: run_id.0,
            bytes: bytes.len() as u64,
        }],
        segments,
        fence_windows: Vec::new(),
    };
    let view = match inspect_log_from(
        env.clone(),
        layout.shard().clone(),
        ShardConfig::default(),
        manifest.clone(),
        table,
    )
    .await
    {
        Ok(view) => view,
        Err(e) => return Ok(Err(format!("the rebuilt state does not open: {e}"))),
    };
    if let Err(why) = whole(&view) {
        return Ok(Err(why));
    }
    let unverified = undecodable
        .iter()
        .map(|path| LostChange {
            stream_id: None,
            incarnation: 0,
            change: format!(
                "{path} does not decode: the rebuilt state lacks what only it held (streams, closes, deletes, producer states)"
            ),
        })
        .collect();
    Ok(Ok(Candidate {
        source: RestoreSource::Rebuilt,
        manifest,
        view,
        unverified,
        lost_records: 0,
        new_run: Some(NewRun {
            path: layout.index_run(run_id),
            bytes,
        }),
    }))
}

/// Writes `target` as the shard's next manifest (after the checks and the
/// quarantine), then opens and closes the shard as a new owner.
async fn restore(
    env: &EngineEnv,
    layout: &ShardLayout,
    candidate: Candidate,
    damaged: Vec<Path>,
    evidence: Evidence,
    instance: InstanceId,
    options: RepairOptions,
) -> Result<RepairReport, RepairError> {
    tracing::debug!(
        shard = %layout.shard(),
        source = ?candidate.source,
        replay = ?candidate.manifest.replay,
        end_slot = candidate.view.end_slot,
        tombstones = candidate.view.tombstones_walked,
        streams = candidate.view.streams.streams.len(),
        replay_floor = ?evidence.replay_floor,
        wal = ?evidence.wal,
        "restoring"
    );
    let mut lost_changes = changes_lost(&candidate.view, &evidence);
    lost_changes.extend(candidate.unverified.iter().cloned());
    let Evidence {
        current, physical, ..
    } = evidence;
    let Candidate {
        source,
        manifest: target,
        view,
        new_run,
        ..
    } = candidate;
    let store = &env.store;
    let lost = lost_ranges(&view.streams, &physical);
    let mut report = RepairReport {
        shard: layout.shard().as_str().to_string(),
        restored_from: source,
        written_version: None,
        reopened_epoch: None,
        quarantined: Vec::new(),
        lost: lost.clone(),
        lost_changes: lost_changes.clone(),
        unrecoverable: Vec::new(),
        streams: streams_after(&view.streams),
        outcome: RepairOutcome::Done,
    };
    if !lost.is_empty() && !options.accept_loss {
        report.outcome = RepairOutcome::Refused(
            "records would become unreachable (pass --accept-loss to proceed)".into(),
        );
        return Ok(report);
    }
    if !lost_changes.is_empty() && !options.accept_loss {
        report.outcome = RepairOutcome::Refused(
            "acknowledged closes, deletes or producer states would be undone (pass --accept-loss to proceed)".into(),
        );
        return Ok(report);
    }
    if !options.force {
        if let Some(age) = last_write_age(env, layout).await? {
            if age < options.live_window {
                report.outcome = RepairOutcome::Refused(format!(
                    "the shard was written {} s ago: a live owner may hold it (stop it, or pass --force to fence it)",
                    age.as_secs()
                ));
                return Ok(report);
            }
        }
    }
    if options.dry_run {
        report.outcome = RepairOutcome::DryRun;
        return Ok(report);
    }
    // Damaged objects are copied under quarantine/ first, and removed only
    // once the new manifest is in place: a repair that stops half-way leaves
    // the shard as it found it. The manifest is never removed: its
    // replacement is written on the e-tag of the exact bytes kept.
    let now_ms = env.clock.now_ms();
    let manifest_path = layout.manifest();
    for path in &damaged {
        let bytes = match current.as_ref() {
            Some(c) if *path == manifest_path => c.bytes.clone(),
            _ => read_object(store, path).await?,
        };
        keep_in_quarantine(store, path, bytes, now_ms).await?;
        report.quarantined.push(path.to_string());
    }
    if let Some(run) = new_run {
        put_immutable(
            store,
            &run.path,
            run.bytes,
            &ShardConfig::default().store_retry,
        )
        .await
        .map_err(|e| EngineError::store(&e))?;
    }
    // The new version: the target's content under a new owner epoch, above
    // every epoch and version the shard has seen, keeping every fence window.
    let seen_epoch = max_epoch_seen(store, layout, current.as_ref()).await?;
    let seen_version = retained_versions(store, layout)
        .await?
        .first()
        .copied()
        .unwrap_or(0)
        .max(
            current
                .as_ref()
                .and_then(|c| c.value.as_ref())
                .map_or(0, |m| m.version),
        );
    let mut next = target.clone();
    next.version = seen_version + 1;
    next.writer = WriterIdentity {
        instance: instance.0,
        epoch: seen_epoch.max(target.writer.epoch) + 1,
        write_id: env.entropy.bytes16(),
    };
    let mut windows = target.fence_windows.clone();
    match current.as_ref().and_then(|c| c.value.as_ref()) {
        Some(m) => {
            for w in &m.fence_windows {
                windows = add_window(&windows, *w);
            }
        }
        // The windows are lost with the manifest: keep every slot that holds
        // an object occupied.
        None => {
            if let Some(all) = listed_wal_range(store, layout).await? {
                windows = add_window(&windows, all);
            }
        }
    }
    next.fence_windows = windows;
    let bytes =
        strata_manifest::format::encode(&next).map_err(|e| EngineError::corrupt("manifest", e))?;
    let mode = match &current {
        Some(c) => PutMode::Update(UpdateVersion {
            e_tag: c.e_tag.clone(),
            version: None,
        }),
        None => PutMode::Create,
    };
    match store
        .put_opts(
            &manifest_path,
            PutPayload::from(bytes),
            PutOptions {
                mode,
                ..Default::default()
            },
        )
        .await
    {
        Ok(_) => {}
        Err(
            object_store::Error::Precondition { .. }
            | object_store::Error::AlreadyExists { .. }
            | object_store::Error::NotFound { .. },
        ) => return Err(RepairError::ManifestChanged),
        Err(e) => return Err(EngineError::store(&e).into()),
    }
    report.written_version = Some(next.version);
    for path in damaged.iter().filter(|p| **p != manifest_path) {
        match store.delete(path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(EngineError::store(&e).into()),
        }
    }
    // Open as a new owner (claim, walk, fence), then close (final seal).
    let shard = Shard::open(
        env.clone(),
        layout.shard().clone(),
        instance,
        ShardConfig::default(),
    )
    .await?;
    report.reopened_epoch = Some(shard.last_recovery().epoch);
    shard.shutdown().await;
    Ok(report)
}

/// Whether every live stream of `view` holds each of its records exactly
/// once, from offset 0 to its tail (sealed chunks, then unsealed pages).
fn whole(view: &LogView) -> Result<(), String> {
    for s in view.streams.streams.values() {
        crate::ops::check_stream_offsets(s)
            .map_err(|why| format!("stream {}: {why}", hex(&s.tail.stream.id)))?;
    }
    Ok(())
}

/// Streams' next offsets as a view recovers them, sorted by stream id.
fn streams_after(table: &StreamTable) -> Vec<StreamAfter> {
    let mut out: Vec<StreamAfter> = table
        .streams
        .values()
        .map(|s| {
            let summary = crate::ops::StreamSummary::of(s);
            StreamAfter {
                stream_id: summary.stream_id,
                incarnation: summary.incarnation,
                status: summary.status,
                next_offset: summary.next_offset,
            }
        })
        .collect();
    out.sort_by(|a, b| a.stream_id.cmp(&b.stream_id));
    out
}

type Incarnation = ([u8; 16], u64);

/// What choosing a candidate that recovers `table` loses: records, plus one
/// per undone change (when the current manifest's log can be read).
fn loss_count(view: &LogView, evidence: &Evidence) -> u64 {
    let records: u64 = lost_ranges(&view.streams, &evidence.physical)
        .iter()
        .map(|l| l.to - l.from)
        .sum();
    records + changes_lost(view, evidence).len() as u64
}

/// The changes a candidate recovering `view` would undo: compared with
/// the current manifest's log when it can be read; and, whatever else is
/// known, the WAL objects the candidate's walk cannot reach (a gap before
/// them: what they held, garbage collected or damaged, is beyond its reach).
fn changes_lost(view: &LogView, evidence: &Evidence) -> Vec<LostChange> {
    let mut out = match &evidence.current_view {
        Some(Ok(current)) => lost_changes(&view.streams, &current.streams),
        _ => Vec::new(),
    };
    if view.tombstones_walked > 0 {
        out.push(LostChange {
            stream_id: None,
            incarnation: 0,
            change: format!(
                "the restored log passes {} WAL objects garbage collection replaced with tombstones: the closes, deletes and producer states they held cannot be verified",
                view.tombstones_walked
            ),
        });
    }
    if let Some(floor) = evidence.replay_floor.filter(|f| view.end_slot < *f) {
        out.push(LostChange {
            stream_id: None,
            incarnation: 0,
            change: format!(
                "the restored log ends at WAL slot {} below the replay point {floor} the shard had reached: the WAL objects in between were collected, and the closes, deletes and producer states sealed from them cannot be verified",
                view.end_slot
            ),
        });
    } else if let Some(wal) = evidence.wal {
        if wal.end > view.end_slot {
            out.push(LostChange {
                stream_id: None,
                incarnation: 0,
                change: format!(
                    "the restored log ends at WAL slot {} but the store holds WAL objects up to slot {}: the closes, deletes and producer states sealed from the objects in between cannot be verified",
                    view.end_slot,
                    wal.end - 1
                ),
            });
        }
    }
    out
}

/// The acknowledged changes `current` (what the current manifest and its log
/// recover) holds that `candidate` does not: a newer incarnation's creation,
/// a delete, a close, a producer's progress, a `Stream-Seq`. Records are
/// compared separately ([`lost_ranges`]).
fn lost_changes(candidate: &StreamTable, current: &StreamTable) -> Vec<LostChange> {
    let mut out = Vec::new();
    let mut ids: Vec<&[u8; 16]> = current.streams.keys().collect();
    ids.sort();
    for id in ids {
        let now = &current.streams[id].tail;
        let change = |what: String| LostChange {
            stream_id: Some(hex(id)),
            incarnation: now.stream.incarnation,
            change: what,
        };
        let Some(then) = candidate.streams.get(id).map(|s| &s.tail) else {
            out.push(change("its creation would be undone".into()));
            continue;
        };
        if then.stream.incarnation < now.stream.incarnation {
            out.push(change(format!(
                "incarnation {} would replace it",
                then.stream.incarnation
            )));
            continue;
        }
        if then.stream.incarnation > now.stream.incarnation {
            continue;
        }
        match (now.status, then.status) {
            (StreamStatus::Deleted, StreamStatus::Deleted) => continue,
            (StreamStatus::Deleted, _) => {
                out.push(change("its delete would be undone".into()));
                continue;
            }
            (StreamStatus::Closed, StreamStatus::Open) => {
                out.push(change("its close would be undone".into()))
            }
            _ => {}
        }
        for (producer, state) in &now.producers {
            let behind = then
                .producers
                .get(producer)
                .is_none_or(|t| (t.epoch, t.seq) < (state.epoch, state.seq));
            if behind {
                out.push(change(format!(
                    "producer {producer:?} would go back from epoch {} sequence {}",
                    state.epoch, state.seq
                )));
            }
        }
        if now.stream_seq.is_some() && then.stream_seq < now.stream_seq {
            out.push(change("its last Stream-Seq would be undone".into()));
        }
    }
    out
}

/// Records physically present beyond what `table` recovers.
fn lost_ranges(table: &StreamTable, physical: &BTreeMap<Incarnation, u64>) -> Vec<RecordRange> {
    let mut out = Vec::new();
    for ((id, incarnation), end) in physical {
        let recovered = table
            .streams
            .get(id)
            .filter(|s| s.tail.stream.incarnation == *incarnation)
            .map_or(0, |s| s.tail.next_offset);
        // A newer incarnation recovered means this one was replaced.
        let replaced = table
            .streams
            .get(id)
            .is_some_and(|s| s.tail.stream.incarnation > *incarnation);
        if recovered < *end && !replaced {
            out.push(RecordRange {
                stream_id: hex(id),
                incarnation: *incarnation,
                from: recovered,
                to: *end,
            });
        }
    }
    out
}

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
async fn missing_segments(
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
async fn damaged_runs(
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
async fn read_object(store: &Arc<dyn ObjectStore>, path: &Path) -> Result<Bytes, EngineError> {
    store
        .get(path)
        .await
        .map_err(|e| EngineError::store(&e))?
        .bytes()
        .await
        .map_err(|e| EngineError::store(&e))
}

/// Keeps a copy of a damaged object's `bytes` under `quarantine/`.
async fn keep_in_quarantine(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    bytes: Bytes,
    now_ms: u64,
) -> Result<(), EngineError> {
    let target = crate::layout::quarantine(path, now_ms);
    store
        .put(&target, PutPayload::from(bytes))
        .await
        .map(|_| ())
        .map_err(|e| EngineError::store(&e))
}

/// How long ago the shard's manifest or newest WAL object was written.
async fn last_write_age(
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
async fn listed_wal_range(
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
async fn max_epoch_seen(
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
