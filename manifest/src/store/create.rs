//! Create-only writes (`PutMode::Create`, `If-None-Match: *`) whose ambiguous
//! answers are settled by reading the object back (docs/ARCHITECTURE.md).
//!
//! Owns [`create_only`], the retry loop every create-only write of raw bytes
//! shares (WAL objects, segments, index runs), and [`create_immutable`], its
//! use for objects whose whole content is fixed by their name: the same bytes
//! found at the name mean an earlier attempt of ours landed.
//!
//! Invariants:
//!
//! * every attempt sends the same bytes, so a late "ghost" of an earlier
//!   attempt can only ever store what this write meant to store;
//! * an `AlreadyExists` answer is never retried: the object is read back once
//!   (with the read's own retries) and the caller judges what it found;
//! * a write of unknown durability ([`super::retry::DurabilityUnknown`]) fails
//!   at once: it is neither retried nor read back;
//! * only transient errors are retried, at most `retry.attempts` PUTs in all.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};

use super::retry::{get_object, is_durability_unknown, is_transient, RetryPolicy};

/// How a [`create_only`] write ended when the store answered.
#[derive(Debug)]
pub enum CreateOnly {
    /// A PUT of this call created the object.
    Created,
    /// The name was taken: the store answered `AlreadyExists`.
    Taken(Taken),
}

/// What a create-only write found at a name that was taken.
#[derive(Debug)]
pub struct Taken {
    /// The object read back; `None` when it vanished between the store's answer
    /// and the read.
    pub found: Option<Bytes>,
    /// Whether an earlier attempt of this write failed with a transient error
    /// (so it may have landed, and `found` may be it or its successor's).
    pub after_unknown: bool,
    /// The store's `AlreadyExists` answer.
    pub error: object_store::Error,
}

/// Why [`create_immutable`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// The name holds other bytes (or held some that vanished): never a race
    /// for an immutable object, whose name is unique to its content.
    #[error("{path}: holds another object than the one being created: {source}")]
    Conflict {
        path: Path,
        /// The store's `AlreadyExists` answer.
        #[source]
        source: object_store::Error,
    },
    /// The store failed (after every retry), or answered a definite error.
    #[error("{path}: object store failed: {source}")]
    Store {
        path: Path,
        #[source]
        source: object_store::Error,
    },
}

impl CreateError {
    /// The store error behind the failure (for a conflict, the `AlreadyExists`
    /// answer).
    pub fn into_store_error(self) -> object_store::Error {
        match self {
            CreateError::Conflict { source, .. } | CreateError::Store { source, .. } => source,
        }
    }
}

/// Writes `payload` at `path` create-only, retrying transient failures. On
/// `AlreadyExists` the object is read back and returned for the caller to
/// judge. `label` names the write in logs ("WAL", "immutable").
///
/// Errors: a definite store error, a write of unknown durability, the last
/// transient error once the attempts are spent, or the read-back's error.
pub async fn create_only(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    payload: PutPayload,
    retry: &RetryPolicy,
    label: &'static str,
) -> Result<CreateOnly, object_store::Error> {
    let mut attempt = 0;
    // Whether an earlier attempt failed in a way that may have stored it.
    let mut maybe_landed = false;
    loop {
        let options = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        let error = match store.put_opts(path, payload.clone(), options).await {
            Ok(_) => return Ok(CreateOnly::Created),
            Err(e) => e,
        };
        let after_unknown = maybe_landed;
        maybe_landed |= is_transient(&error);
        // Published, but maybe not durable: never retried, never read back
        // as written.
        if is_durability_unknown(&error) {
            return Err(error);
        }
        if matches!(error, object_store::Error::AlreadyExists { .. }) {
            let found = get_object(store, path, retry).await?;
            return Ok(CreateOnly::Taken(Taken {
                found,
                after_unknown,
                error,
            }));
        }
        if !is_transient(&error) || attempt + 1 >= retry.attempts {
            return Err(error);
        }
        tracing::debug!(%path, attempt, %error, "{label} put failed; retrying");
        tokio::time::sleep(retry.backoff(attempt)).await;
        attempt += 1;
    }
}

/// Writes an immutable object create-only. An existing object is read back:
/// the same bytes mean an earlier attempt of ours landed (`Ok`); anything else
/// is a [`CreateError::Conflict`].
pub async fn create_immutable(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    bytes: Bytes,
    retry: &RetryPolicy,
) -> Result<(), CreateError> {
    let payload = PutPayload::from(bytes.clone());
    match create_only(store, path, payload, retry, "immutable").await {
        Ok(CreateOnly::Created) => Ok(()),
        Ok(CreateOnly::Taken(taken)) if taken.found.as_ref() == Some(&bytes) => Ok(()),
        Ok(CreateOnly::Taken(taken)) => Err(CreateError::Conflict {
            path: path.clone(),
            source: taken.error,
        }),
        Err(source) => Err(CreateError::Store {
            path: path.clone(),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::ObjectStoreExt;
    use std::time::Duration;

    fn quick() -> RetryPolicy {
        RetryPolicy {
            attempts: 3,
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(1),
        }
    }

    fn memory() -> Arc<dyn ObjectStore> {
        Arc::new(InMemory::new())
    }

    #[tokio::test]
    async fn an_immutable_object_is_created_once() {
        let store = memory();
        let path = Path::from("shards/s0/segments/1");
        let bytes = Bytes::from_static(b"segment");
        create_immutable(&store, &path, bytes.clone(), &quick())
            .await
            .unwrap();
        let stored = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(stored, bytes);
    }

    #[tokio::test]
    async fn the_same_bytes_found_at_the_name_are_ours() {
        let store = memory();
        let path = Path::from("shards/s0/segments/1");
        let bytes = Bytes::from_static(b"segment");
        // An earlier attempt landed but its answer was lost.
        store
            .put(&path, PutPayload::from(bytes.clone()))
            .await
            .unwrap();
        create_immutable(&store, &path, bytes, &quick())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn other_bytes_found_at_the_name_are_a_conflict() {
        let store = memory();
        let path = Path::from("shards/s0/segments/1");
        store
            .put(&path, PutPayload::from_static(b"another"))
            .await
            .unwrap();
        let err = create_immutable(&store, &path, Bytes::from_static(b"segment"), &quick())
            .await
            .unwrap_err();
        assert!(matches!(err, CreateError::Conflict { .. }), "{err:?}");
        assert!(matches!(
            err.into_store_error(),
            object_store::Error::AlreadyExists { .. }
        ));
        let stored = store.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(stored, Bytes::from_static(b"another"), "never overwritten");
    }

    #[tokio::test]
    async fn a_taken_name_is_read_back_for_the_caller() {
        let store = memory();
        let path = Path::from("shards/s0/wal/00000000000000000001");
        let first = create_only(
            &store,
            &path,
            PutPayload::from_static(b"one"),
            &quick(),
            "WAL",
        )
        .await
        .unwrap();
        assert!(matches!(first, CreateOnly::Created));
        let second = create_only(
            &store,
            &path,
            PutPayload::from_static(b"two"),
            &quick(),
            "WAL",
        )
        .await
        .unwrap();
        match second {
            CreateOnly::Taken(taken) => {
                assert_eq!(taken.found, Some(Bytes::from_static(b"one")));
                assert!(!taken.after_unknown);
                assert!(matches!(
                    taken.error,
                    object_store::Error::AlreadyExists { .. }
                ));
            }
            CreateOnly::Created => panic!("created twice"),
        }
    }
}
