//! Object reads and create-only WAL writes with bounded retries, resolving
//! ambiguous answers by reading the object back.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use strata_manifest::cas::is_transient;
use strata_manifest::RetryPolicy;
use strata_wal::WriterId;

/// How a create-only WAL write ended.
#[derive(Debug)]
pub(crate) enum WalPutOutcome {
    /// The object is ours (written now, or by an earlier attempt).
    Written,
    /// The slot holds an object of a newer owner: we are fenced.
    Fenced { epoch: u64 },
    /// The slot holds another object of our epoch or an older one.
    Collision { epoch: u64 },
    /// The store kept failing; the object may or may not exist.
    Failed(object_store::Error),
}

/// Reads a whole object; `None` if it does not exist. Transient errors are
/// retried.
pub(crate) async fn get_object(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    retry: &RetryPolicy,
) -> Result<Option<Bytes>, object_store::Error> {
    let mut attempt = 0;
    loop {
        let result = match store.get(path).await {
            Ok(r) => r.bytes().await,
            Err(e) => Err(e),
        };
        match result {
            Ok(bytes) => return Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) if is_transient(&e) && attempt + 1 < retry.attempts => {
                tokio::time::sleep(retry.backoff(attempt)).await;
                attempt += 1;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Writes a WAL object create-only. An existing object at the slot is read
/// back: our write id means an earlier attempt landed.
pub(crate) async fn put_wal_object(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    payload: PutPayload,
    mine: &WriterId,
    retry: &RetryPolicy,
) -> WalPutOutcome {
    let mut attempt = 0;
    loop {
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let error = match store.put_opts(path, payload.clone(), options).await {
            Ok(_) => return WalPutOutcome::Written,
            Err(e) => e,
        };
        if matches!(error, object_store::Error::AlreadyExists { .. }) {
            match get_object(store, path, retry).await {
                Ok(Some(bytes)) => match strata_wal::decode_header(&bytes) {
                    Ok(h) if h.writer.write_id == mine.write_id && h.writer.epoch == mine.epoch => {
                        return WalPutOutcome::Written
                    }
                    Ok(h) if h.writer.epoch > mine.epoch => {
                        return WalPutOutcome::Fenced {
                            epoch: h.writer.epoch,
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
                // Vanished after AlreadyExists: only a deletion could do that; retry.
                Ok(None) => {}
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
