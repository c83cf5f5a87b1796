//! With `force`, a repair fences a live owner before it reads anything, so
//! the evidence it decides on no longer changes under it.

use strata_manifest::{CasError, CasObject, ManifestCodec, WriterIdentity};

use super::report::{RepairError, RepairOptions};
use crate::env::EngineEnv;
use crate::error::EngineError;
use crate::ids::InstanceId;
use crate::layout::ShardLayout;
use crate::shard::ShardConfig;

/// With `force`, fences a live owner before the repair reads anything: the
/// manifest is claimed as it stands (its content unchanged, the writer this
/// repair at the next epoch), so the owner's next manifest write fails and
/// its garbage collection, which confirms ownership before every batch,
/// deletes nothing more once a batch in flight has finished (`quiesce`).
/// Without it, a live owner could collect WAL objects between the repair's
/// reading of the store and its writing of a manifest that needs them. An
/// undecodable or missing manifest needs no claim: no owner can confirm
/// ownership against it.
pub(super) async fn fence_live_owner(
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
