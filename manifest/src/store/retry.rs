//! The retry rules every conditional or create-only write and every read of
//! the object store follows (docs/ARCHITECTURE.md).
//!
//! Owns: [`RetryPolicy`] (bounded attempts, exponential backoff), the
//! classification of store errors ([`is_transient`], [`is_durability_unknown`]
//! and the [`DurabilityUnknown`] error a store reports for a write it cannot
//! vouch for), and the retried primitives built on them ([`with_retries`],
//! [`get_object`]).
//!
//! Invariants:
//!
//! * only a transient error is retried, and at most `attempts` calls are made;
//! * a definite answer about the object (not found, already exists,
//!   precondition failed, …) is never transient;
//! * a write of unknown durability is never transient: it is neither retried
//!   nor settled by reading back.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

/// Bounded retries with exponential backoff for transient store failures.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    pub attempts: u32,
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(2),
        }
    }
}

impl RetryPolicy {
    pub fn backoff(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX);
        self.initial_backoff
            .saturating_mul(factor)
            .min(self.max_backoff)
    }
}

/// Runs `call` until it succeeds, fails with an error that is not transient,
/// or has used `retry.attempts` attempts, sleeping the policy's backoff
/// between attempts.
pub async fn with_retries<T, F, Fut>(
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
pub async fn get_object(
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

/// A write that reached the store but whose durability the store could not
/// confirm (the local store's `fsync` failed after the object was published).
/// The object may be readable now and gone after a power loss, so reading it
/// back proves nothing: a writer must neither retry it nor count it as
/// written, but treat its outcome as unknown and start again from the store.
/// Stores report it as `object_store::Error::Generic` with this as source.
#[derive(Debug, thiserror::Error)]
#[error("{path}: the write reached the store but its durability is unknown: {reason}")]
pub struct DurabilityUnknown {
    pub path: String,
    pub reason: String,
}

impl DurabilityUnknown {
    /// The store error that carries it.
    pub fn into_store_error(self, store: &'static str) -> object_store::Error {
        object_store::Error::Generic {
            store,
            source: Box::new(self),
        }
    }
}

/// Whether `error` says a write's durability is unknown ([`DurabilityUnknown`]).
pub fn is_durability_unknown(error: &object_store::Error) -> bool {
    match error {
        object_store::Error::Generic { source, .. } => source.is::<DurabilityUnknown>(),
        _ => false,
    }
}

/// Errors worth retrying: anything but a definite answer about the object
/// (and never a write whose durability is unknown: see [`DurabilityUnknown`]).
pub fn is_transient(error: &object_store::Error) -> bool {
    if is_durability_unknown(error) {
        return false;
    }
    !matches!(
        error,
        object_store::Error::NotFound { .. }
            | object_store::Error::AlreadyExists { .. }
            | object_store::Error::Precondition { .. }
            | object_store::Error::NotModified { .. }
            | object_store::Error::NotImplemented { .. }
            | object_store::Error::InvalidPath { .. }
            | object_store::Error::PermissionDenied { .. }
            | object_store::Error::Unauthenticated { .. }
    )
}
