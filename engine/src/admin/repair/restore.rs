//! Carrying a repair out: refuse what would lose data unless accepted (and
//! a shard written recently unless forced), quarantine damaged objects, write
//! the chosen manifest as the next version at a higher epoch, then open and
//! close the shard as a new owner (which fences any previous one).

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use strata_manifest::{add_window, WriterIdentity};

use super::candidate::Candidate;
use super::evidence::{
    last_write_age, listed_wal_range, max_epoch_seen, read_object, retained_versions, Evidence,
};
use super::loss::{changes_lost, lost_ranges, streams_after};
use super::report::{RepairError, RepairOptions, RepairOutcome, RepairReport};
use crate::env::EngineEnv;
use crate::error::EngineError;
use crate::ids::InstanceId;
use crate::layout::ShardLayout;
use crate::shard::io::put_immutable;
use crate::shard::{Shard, ShardConfig};

/// Writes `target` as the shard's next manifest (after the checks and the
/// quarantine), then opens and closes the shard as a new owner.
pub(super) async fn restore(
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
