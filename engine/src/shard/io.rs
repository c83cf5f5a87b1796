//! The shard's object I/O: reads, create-only WAL writes judged by the WAL
//! header found at the slot, create-only immutable objects, overwrites and
//! deletes, all with bounded retries. The generic plumbing (retry rules,
//! create-only writes read back on `AlreadyExists`) lives in
//! `strata_manifest::store` (docs/ARCHITECTURE.md); this
//! module owns only what a WAL slot's contents mean to its writer.
//!
//! Invariant: an ambiguous answer is settled by reading the object back,
//! never by writing again over it; a write of unknown durability is never
//! counted as written.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use strata_manifest::store::{create_immutable, create_only, CreateError, CreateOnly};
pub(crate) use strata_manifest::store::{get_object, with_retries};
use strata_manifest::RetryPolicy;
use strata_wal::WriterId;

/// How a create-only WAL write ended.
#[derive(Debug)]
pub(crate) enum WalPutOutcome {
    /// The object is ours (written now, or by an earlier attempt).
    Written,
    /// The slot holds an object of a newer owner (its epoch), or an object
    /// that was there vanished (`None`: only a newer owner's garbage
    /// collection deletes a WAL object at a slot we write): we are fenced.
    /// `after_unknown`: an earlier attempt of this PUT may have landed (its
    /// answer was an error), so the newer owner may have taken our object
    /// into its log before collecting it (a tombstone now holds the slot):
    /// this object's fate, and that of every object issued with it, is
    /// unknown rather than "not written".
    Fenced {
        epoch: Option<u64>,
        after_unknown: bool,
    },
    /// The slot holds another object of our epoch or an older one.
    Collision { epoch: u64 },
    /// The store kept failing; the object may or may not exist.
    Failed(object_store::Error),
}

/// Writes a WAL object create-only. An existing object at the slot is read
/// back: our write id means an earlier attempt landed. A write the store
/// reports as of unknown durability fails at once.
pub(crate) async fn put_wal_object(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    payload: PutPayload,
    mine: &WriterId,
    retry: &RetryPolicy,
) -> WalPutOutcome {
    let taken = match create_only(store, path, payload, retry, "WAL").await {
        Ok(CreateOnly::Created) => return WalPutOutcome::Written,
        Ok(CreateOnly::Taken(taken)) => taken,
        // Published but maybe not durable (never retried, never read back as
        // written: the owner fails the batch as outcome-unknown), a definite
        // error, the last transient one, or the read-back's.
        Err(e) => return WalPutOutcome::Failed(e),
    };
    let after_unknown = taken.after_unknown;
    match taken.found {
        Some(bytes) => match strata_wal::decode_header(&bytes) {
            Ok(h) if h.writer.write_id == mine.write_id && h.writer.epoch == mine.epoch => {
                WalPutOutcome::Written
            }
            Ok(h) if h.writer.epoch > mine.epoch => WalPutOutcome::Fenced {
                epoch: Some(h.writer.epoch),
                after_unknown,
            },
            Ok(h) => WalPutOutcome::Collision {
                epoch: h.writer.epoch,
            },
            // Unreadable bytes at our slot: someone else's damaged write.
            Err(_) => WalPutOutcome::Collision { epoch: 0 },
        },
        // Vanished after AlreadyExists: only a newer owner's garbage
        // collection deletes a WAL object at a slot we write (below its
        // replay point). Writing again would put an object where no walk
        // reads it.
        None => WalPutOutcome::Fenced {
            epoch: None,
            after_unknown,
        },
    }
}

/// Writes an immutable object (segment, index run) create-only. An existing
/// object is read back: the same bytes mean an earlier attempt of ours landed;
/// anything else is an error (names are unique per writer epoch, so that is
/// damage or a bug, never a race).
pub(crate) async fn put_immutable(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    bytes: Bytes,
    retry: &RetryPolicy,
) -> Result<(), object_store::Error> {
    create_immutable(store, path, bytes, retry)
        .await
        .map_err(CreateError::into_store_error)
}

/// Replaces an object unconditionally (the name stays occupied throughout).
pub(crate) async fn overwrite_object(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    bytes: Bytes,
    retry: &RetryPolicy,
) -> Result<(), object_store::Error> {
    with_retries(retry, || async {
        let options = PutOptions {
            mode: PutMode::Overwrite,
            ..Default::default()
        };
        store
            .put_opts(path, PutPayload::from(bytes.clone()), options)
            .await
            .map(|_| ())
    })
    .await
}

/// Deletes an object; one that is already gone counts as deleted.
pub(crate) async fn delete_object(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    retry: &RetryPolicy,
) -> Result<(), object_store::Error> {
    with_retries(retry, || async {
        match store.delete(path).await {
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            other => other,
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Layered, StoreLayer};
    use async_trait::async_trait;
    use object_store::memory::InMemory;
    use object_store::PutResult;
    use std::time::Duration;

    /// Answers every PUT `AlreadyExists` without storing anything: the slot
    /// was taken, and what took it is gone by the time it is read back.
    #[derive(Debug)]
    struct TakenThenGone;

    #[async_trait]
    impl StoreLayer for TakenThenGone {
        async fn put_opts(
            &self,
            _inner: &Arc<dyn ObjectStore>,
            location: &Path,
            _payload: PutPayload,
            _opts: PutOptions,
        ) -> object_store::Result<PutResult> {
            Err(object_store::Error::AlreadyExists {
                path: location.to_string(),
                source: "taken".into(),
            })
        }
    }

    #[tokio::test]
    async fn a_wal_object_gone_after_already_exists_means_fenced() {
        let store: Arc<dyn ObjectStore> =
            Arc::new(Layered::new(Arc::new(InMemory::new()), TakenThenGone));
        let mine = WriterId {
            instance: [1; 16],
            epoch: 3,
            write_id: [2; 16],
        };
        let retry = RetryPolicy {
            attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(1),
        };
        let outcome = put_wal_object(
            &store,
            &Path::from("shards/s0/wal/00000000000000000005"),
            PutPayload::from_static(b"object"),
            &mine,
            &retry,
        )
        .await;
        // Only a newer owner's garbage collection deletes a WAL object at a
        // slot an owner is writing: the writer is fenced (not retrying).
        assert!(
            matches!(outcome, WalPutOutcome::Fenced { epoch: None, .. }),
            "{outcome:?}"
        );
    }
}
