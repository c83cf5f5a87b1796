//! `rollback`: restores a shard to a retained manifest version chosen by the
//! operator.

use super::candidate::Candidate;
use super::evidence::{gather, missing_segments};
use super::fence::fence_live_owner;
use super::loss::whole;
use super::report::{RepairError, RepairOptions, RepairReport, RestoreSource};
use super::restore::restore;
use crate::env::EngineEnv;
use crate::ids::{InstanceId, ShardName};
use crate::layout::ShardLayout;
use crate::shard::{history, inspect_log_at, ShardConfig};

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
