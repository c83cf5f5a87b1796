//! Object reads and create-only WAL writes with bounded retries, resolving
//! ambiguous answers by reading the object back.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use strata_manifest::cas::{is_durability_unknown, is_transient};
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

/// Runs `call` until it succeeds, fails with an error that is not transient,
/// or has used `retry.attempts` attempts, sleeping the policy's backoff
/// between attempts.
pub(crate) async fn with_retries<T, F, Fut>(
    retry: &RetryPolicy,
    mut call: F,
) -> Result<T, object_store::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, object_store::Error>>,
{
    let mut attempt = 0;
    loop {
        match call().await {
            Err(e) if is_transient(&e) && attempt + 1 < retry.attempts => {
                tokio::time::sleep(retry.backoff(attempt)).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Reads a whole object; `None` if it does not exist. Transient errors are
/// retried.
pub(crate) async fn get_object(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    retry: &RetryPolicy,
) -> Result<Option<Bytes>, object_store::Error> {
    let result = with_retries(retry, || async {
        match store.get(path).await {
            Ok(r) => r.bytes().await,
            Err(e) => Err(e),
        }
    })
    .await;
    match result {
        Ok(bytes) => Ok(Some(bytes)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
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
    let mut attempt = 0;
    // Whether an earlier attempt failed in a way that may have stored it.
    let mut maybe_landed = false;
    loop {
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let error = match store.put_opts(path, payload.clone(), options).await {
            Ok(_) => return WalPutOutcome::Written,
            Err(e) => e,
        };
        let after_unknown = maybe_landed;
        maybe_landed |= is_transient(&error);
        // Published, but maybe not durable: never retried, never read back
        // as written (the owner fails the batch as outcome-unknown).
        if is_durability_unknown(&error) {
            return WalPutOutcome::Failed(error);
        }
        if matches!(error, object_store::Error::AlreadyExists { .. }) {
            match get_object(store, path, retry).await {
                Ok(Some(bytes)) => match strata_wal::decode_header(&bytes) {
                    Ok(h) if h.writer.write_id == mine.write_id && h.writer.epoch == mine.epoch => {
                        return WalPutOutcome::Written
                    }
                    Ok(h) if h.writer.epoch > mine.epoch => {
                        return WalPutOutcome::Fenced {
                            epoch: Some(h.writer.epoch),
                            after_unknown,
                        }
                    }
                    Ok(h) => {
                        return WalPutOutcome::Collision {
                            epoch: h.writer.epoch,
                        }
                    }
                    // Unreadable bytes at our slot: someone else's damaged write.
                    Err(_) => return WalPutOutcome::Collision { epoch: 0 },
                },
                // Vanished after AlreadyExists: only a newer owner's garbage
                // collection deletes a WAL object at a slot we write (below its
                // replay point). Writing again would put an object where no
                // walk reads it.
                Ok(None) => {
                    return WalPutOutcome::Fenced {
                        epoch: None,
                        after_unknown,
                    }
                }
                Err(e) => return WalPutOutcome::Failed(e),
            }
        }
        let definite =
            !is_transient(&error) && !matches!(error, object_store::Error::AlreadyExists { .. });
        if definite || attempt + 1 >= retry.attempts {
            return WalPutOutcome::Failed(error);
        }
        tracing::debug!(%path, attempt, %error, "WAL put failed; retrying");
        tokio::time::sleep(retry.backoff(attempt)).await;
        attempt += 1;
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
    let mut attempt = 0;
    loop {
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let error = match store
            .put_opts(path, PutPayload::from(bytes.clone()), options)
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        if matches!(error, object_store::Error::AlreadyExists { .. }) {
            return match get_object(store, path, retry).await? {
                Some(found) if found == bytes => Ok(()),
                _ => Err(error),
            };
        }
        if !is_transient(&error) || attempt + 1 >= retry.attempts {
            return Err(error);
        }
        tracing::debug!(%path, attempt, %error, "immutable put failed; retrying");
        tokio::time::sleep(retry.backoff(attempt)).await;
        attempt += 1;
    }
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
