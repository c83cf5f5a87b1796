//! `recover`: restores a shard whose manifest is missing or damaged, or whose
//! manifest lists damaged or missing index runs or segments, from the newest
//! retained version that loses nothing (or a rebuild from the objects).

use object_store::path::Path;

use super::candidate::{rebuilt_candidate, Candidate};
use super::evidence::{damaged_runs, gather, missing_segments, retained_versions};
use super::fence::fence_live_owner;
use super::loss::{from_recovered, loss_count, streams_after, whole};
use super::report::{RepairError, RepairOptions, RepairOutcome, RepairReport, RestoreSource};
use super::restore::restore;
use crate::admin::verify::{verify, FindingKind, RecordRange};
use crate::env::EngineEnv;
use crate::error::EngineError;
use crate::ids::{InstanceId, ShardName};
use crate::layout::{ObjectId, ShardLayout};
use crate::shard::{history, inspect_log_at, ShardConfig};

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
    let verification = verify(env, shard, true, &|_| {}).await?;
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
