//! Taking ownership of a shard: the epoch bump half of fencing.
//!
//! A new owner reads the manifest and replaces it, `If-Match` on the e-tag it
//! read, with a successor whose writer epoch is one higher and whose writer
//! identity is its own. Of several owners racing, exactly one CAS wins; the
//! others get [`ClaimError::Contended`] and must not retry blindly (retrying
//! would fence the winner in turn). The engine then writes the fence object at
//! the first free WAL slot, which stops the previous owner's WAL writes.

use crate::format::{Manifest, ManifestCodec, ManifestError, WriterIdentity};
use crate::store::{CasError, CasObject, Versioned};

#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// Another owner changed the manifest between our read and our write.
    #[error("shard {shard}: another owner claimed it concurrently")]
    Contended { shard: String },
    /// The manifest names a different shard than the one being opened.
    #[error("manifest at {path} belongs to shard {found:?}, not {expected:?}")]
    WrongShard {
        path: String,
        found: String,
        expected: String,
    },
    #[error(transparent)]
    Cas(#[from] CasError<ManifestError>),
}

/// Claims `shard` for `instance` from `current`, the manifest the caller
/// read (`None`: there is none, and the initial manifest, epoch 1, is
/// created). A successor of `current` with the epoch bumped is written
/// `If-Match` on its e-tag, so the claim fails (`Contended`) if anyone wrote
/// the manifest since it was read, and a create fails the same way if a
/// manifest appeared meanwhile. Deciding that a missing manifest may be
/// created (the shard holds nothing else) is the caller's business: a shard
/// that lost its manifest but not its data must not restart empty.
pub async fn claim_shard(
    cas: &CasObject<ManifestCodec>,
    shard: &str,
    instance: [u8; 16],
    write_id: [u8; 16],
    current: Option<&Versioned<Manifest>>,
) -> Result<Versioned<Manifest>, ClaimError> {
    let result = match current {
        None => {
            cas.create(Manifest::initial(shard.to_string(), instance, write_id))
                .await
        }
        Some(current) => {
            if current.value.shard != shard {
                return Err(ClaimError::WrongShard {
                    path: cas.path().to_string(),
                    found: current.value.shard.clone(),
                    expected: shard.to_string(),
                });
            }
            let writer = WriterIdentity {
                instance,
                epoch: current.value.writer.epoch + 1,
                write_id,
            };
            cas.replace(current, current.value.successor(writer)).await
        }
    };
    match result {
        Ok(v) => Ok(v),
        Err(CasError::Conflict { .. }) => Err(ClaimError::Contended {
            shard: shard.to_string(),
        }),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::RetryPolicy;
    use object_store::memory::InMemory;
    use object_store::path::Path;
    use std::sync::Arc;

    #[tokio::test]
    async fn claims_bump_the_epoch_and_stale_reclaims_fail() {
        let cas = CasObject::<ManifestCodec>::new(
            Arc::new(InMemory::new()),
            Path::from("shards/a/manifest"),
            RetryPolicy::default(),
        );
        let first = claim_shard(&cas, "a", [1; 16], [1; 16], None)
            .await
            .unwrap();
        assert_eq!(first.value.writer.epoch, 1);
        let loaded = cas.load().await.unwrap();
        let second = claim_shard(&cas, "a", [2; 16], [2; 16], loaded.as_ref())
            .await
            .unwrap();
        assert_eq!(second.value.writer.epoch, 2);
        assert_eq!(second.value.version, 2);
        // The first owner tries to re-claim from what it last wrote: refused.
        let stale = claim_shard(&cas, "a", [1; 16], [3; 16], Some(&first)).await;
        assert!(matches!(stale, Err(ClaimError::Contended { .. })));
        // A create that meets a manifest (it appeared after the caller found
        // none) is contended too.
        let late = claim_shard(&cas, "a", [4; 16], [4; 16], None).await;
        assert!(matches!(late, Err(ClaimError::Contended { .. })));
        let wrong = claim_shard(&cas, "b", [1; 16], [4; 16], Some(&second)).await;
        assert!(matches!(wrong, Err(ClaimError::WrongShard { .. })));
    }
}
