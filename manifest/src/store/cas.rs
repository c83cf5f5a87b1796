//! A generic object changed only by conditional PUTs.
//!
//! [`CasObject::create`] writes with `If-None-Match: *` (`PutMode::Create`),
//! [`CasObject::replace`] with `If-Match: <etag>` (`PutMode::Update`). Every value
//! carries a random *write token* (see [`CasCodec::write_token`]); when the store
//! answers `AlreadyExists` / `Precondition`, or fails in a way that leaves the
//! outcome unknown, the object is read back: if it holds our token the write
//! happened (an earlier attempt of ours landed), otherwise another writer won.
//! Retries always resend the same bytes, so a late "ghost" of an earlier attempt
//! can only ever make the object equal to what we meant to write.
//!
//! The one answer never settled by reading back is [`DurabilityUnknown`]: the
//! bytes reached the store but may not survive a power loss, so the write
//! fails at once with that store error (no read-back, no retry). Transient
//! failures are retried under a [`RetryPolicy`] (the rules are in
//! [`super::retry`]).

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};

use super::retry::{is_durability_unknown, is_transient, RetryPolicy};

/// How a value is stored in a [`CasObject`].
pub trait CasCodec: Send + Sync + 'static {
    type Value: Clone + Send + Sync;
    type Error: std::error::Error + Send + Sync + 'static;
    fn encode(value: &Self::Value) -> Result<Bytes, Self::Error>;
    fn decode(bytes: &Bytes) -> Result<Self::Value, Self::Error>;
    /// A random token unique to the write that produced this value.
    fn write_token(value: &Self::Value) -> [u8; 16];
}

/// A value together with the store version (e-tag) it was read or written at.
#[derive(Debug, Clone)]
pub struct Versioned<T> {
    pub value: T,
    pub version: UpdateVersion,
}

#[derive(Debug, thiserror::Error)]
pub enum CasError<E: std::error::Error + 'static> {
    /// Another writer changed (or created, or removed) the object first.
    #[error("{path}: another writer changed the object first")]
    Conflict { path: Path },
    /// The stored bytes do not decode.
    #[error("{path}: stored object is invalid: {source}")]
    Corrupt {
        path: Path,
        #[source]
        source: E,
    },
    /// The value could not be encoded.
    #[error("{path}: value cannot be encoded: {source}")]
    Encode {
        path: Path,
        #[source]
        source: E,
    },
    /// The store kept failing after every retry.
    #[error("{path}: object store failed: {source}")]
    Store {
        path: Path,
        #[source]
        source: object_store::Error,
    },
}

/// One object at one path, changed only by compare-and-swap.
pub struct CasObject<C: CasCodec> {
    store: Arc<dyn ObjectStore>,
    path: Path,
    retry: RetryPolicy,
    codec: PhantomData<C>,
}

impl<C: CasCodec> Clone for CasObject<C> {
    fn clone(&self) -> Self {
        CasObject {
            store: self.store.clone(),
            path: self.path.clone(),
            retry: self.retry,
            codec: PhantomData,
        }
    }
}

enum WriteMode {
    Create,
    Replace(UpdateVersion),
}

impl<C: CasCodec> CasObject<C> {
    pub fn new(store: Arc<dyn ObjectStore>, path: Path, retry: RetryPolicy) -> Self {
        CasObject {
            store,
            path,
            retry,
            codec: PhantomData,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the current value; `None` when the object does not exist.
    pub async fn load(&self) -> Result<Option<Versioned<C::Value>>, CasError<C::Error>> {
        let mut attempt = 0;
        loop {
            match self.load_once().await {
                Err(CasError::Store { source, .. })
                    if attempt + 1 < self.retry.attempts && is_transient(&source) =>
                {
                    tokio::time::sleep(self.retry.backoff(attempt)).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn load_once(&self) -> Result<Option<Versioned<C::Value>>, CasError<C::Error>> {
        let result = match self.store.get(&self.path).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(source) => return Err(self.store_error(source)),
        };
        let version = UpdateVersion {
            e_tag: result.meta.e_tag.clone(),
            version: result.meta.version.clone(),
        };
        let bytes = result
            .bytes()
            .await
            .map_err(|source| self.store_error(source))?;
        let value = C::decode(&bytes).map_err(|source| CasError::Corrupt {
            path: self.path.clone(),
            source,
        })?;
        Ok(Some(Versioned { value, version }))
    }

    /// Creates the object; fails with `Conflict` if it already exists with a
    /// value that is not ours.
    pub async fn create(&self, value: C::Value) -> Result<Versioned<C::Value>, CasError<C::Error>> {
        self.write(value, WriteMode::Create).await
    }

    /// Replaces `current` with `value`; fails with `Conflict` if the object
    /// changed since `current` was read or written.
    pub async fn replace(
        &self,
        current: &Versioned<C::Value>,
        value: C::Value,
    ) -> Result<Versioned<C::Value>, CasError<C::Error>> {
        self.write(value, WriteMode::Replace(current.version.clone()))
            .await
    }

    async fn write(
        &self,
        value: C::Value,
        mode: WriteMode,
    ) -> Result<Versioned<C::Value>, CasError<C::Error>> {
        let bytes = C::encode(&value).map_err(|source| CasError::Encode {
            path: self.path.clone(),
            source,
        })?;
        let token = C::write_token(&value);
        let mut attempt = 0;
        loop {
            let put_mode = match &mode {
                WriteMode::Create => PutMode::Create,
                WriteMode::Replace(v) => PutMode::Update(v.clone()),
            };
            let options = PutOptions {
                mode: put_mode,
                ..Default::default()
            };
            let outcome = self
                .store
                .put_opts(&self.path, PutPayload::from(bytes.clone()), options)
                .await;
            let failure = match outcome {
                Ok(result) => {
                    return Ok(Versioned {
                        value,
                        version: UpdateVersion {
                            e_tag: result.e_tag,
                            version: result.version,
                        },
                    })
                }
                Err(e) => e,
            };
            // The bytes may be readable now and gone after a power loss:
            // finding our token proves nothing, and neither would a retry.
            if is_durability_unknown(&failure) {
                tracing::warn!(path = %self.path, error = %failure, "conditional put of unknown durability");
                return Err(self.store_error(failure));
            }
            let lost_race = matches!(
                failure,
                object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. }
            );
            // Whatever the answer, the object itself says whether our bytes landed.
            match self.load().await {
                Ok(Some(current)) if C::write_token(&current.value) == token => return Ok(current),
                Ok(_) if lost_race => {
                    tracing::debug!(path = %self.path, error = %failure, "conditional put lost to another writer");
                    return Err(CasError::Conflict {
                        path: self.path.clone(),
                    });
                }
                Err(CasError::Corrupt { source, .. }) if lost_race => {
                    return Err(CasError::Corrupt {
                        path: self.path.clone(),
                        source,
                    })
                }
                _ => {}
            }
            if attempt + 1 >= self.retry.attempts {
                return Err(self.store_error(failure));
            }
            tracing::debug!(path = %self.path, attempt, error = %failure, "conditional put failed; retrying");
            tokio::time::sleep(self.retry.backoff(attempt)).await;
            attempt += 1;
        }
    }

    fn store_error(&self, source: object_store::Error) -> CasError<C::Error> {
        CasError::Store {
            path: self.path.clone(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{Manifest, ManifestCodec};
    use crate::store::retry::DurabilityUnknown;
    use object_store::memory::InMemory;

    fn cas(store: Arc<dyn ObjectStore>) -> CasObject<ManifestCodec> {
        CasObject::new(
            store,
            Path::from("shards/s0/manifest"),
            RetryPolicy::default(),
        )
    }

    fn manifest(write_id: u8) -> Manifest {
        Manifest::initial("s0".into(), [1; 16], [write_id; 16])
    }

    #[tokio::test]
    async fn create_then_replace_then_stale_replace_conflicts() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let obj = cas(store);
        assert!(obj.load().await.unwrap().is_none());
        let v1 = obj.create(manifest(1)).await.unwrap();
        let v2 = obj
            .replace(&v1, v1.value.successor(v1.value.writer))
            .await
            .unwrap();
        assert_eq!(v2.value.version, 2);
        let stale = obj.replace(&v1, manifest(3)).await;
        assert!(matches!(stale, Err(CasError::Conflict { .. })));
        let again = obj.create(manifest(4)).await;
        assert!(matches!(again, Err(CasError::Conflict { .. })));
        assert_eq!(obj.load().await.unwrap().unwrap().value, v2.value);
    }

    #[tokio::test]
    async fn ambiguous_create_is_resolved_as_ours() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let obj = cas(store.clone());
        // A first attempt landed but its answer was lost: the retry meets it.
        store
            .put(
                obj.path(),
                PutPayload::from(ManifestCodec::encode(&manifest(7)).unwrap()),
            )
            .await
            .unwrap();
        let v = obj.create(manifest(7)).await.unwrap();
        assert_eq!(v.value.writer.write_id, [7; 16]);
    }

    /// Stores every PUT, then answers that its durability is unknown (as the
    /// local store does when an fsync after publishing failed twice).
    #[derive(Debug)]
    struct StoredButNotDurable {
        inner: Arc<InMemory>,
        puts: std::sync::atomic::AtomicU64,
    }

    impl std::fmt::Display for StoredButNotDurable {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "StoredButNotDurable")
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for StoredButNotDurable {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            opts: PutOptions,
        ) -> object_store::Result<object_store::PutResult> {
            self.puts.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.inner.put_opts(location, payload, opts).await?;
            Err(DurabilityUnknown {
                path: location.to_string(),
                reason: "fsync failed".into(),
            }
            .into_store_error("test"))
        }

        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: object_store::PutMultipartOptions,
        ) -> object_store::Result<Box<dyn object_store::MultipartUpload>> {
            self.inner.put_multipart_opts(location, opts).await
        }

        async fn get_opts(
            &self,
            location: &Path,
            options: object_store::GetOptions,
        ) -> object_store::Result<object_store::GetResult> {
            self.inner.get_opts(location, options).await
        }

        fn delete_stream(
            &self,
            locations: futures::stream::BoxStream<'static, object_store::Result<Path>>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<Path>> {
            self.inner.delete_stream(locations)
        }

        fn list(
            &self,
            prefix: Option<&Path>,
        ) -> futures::stream::BoxStream<'static, object_store::Result<object_store::ObjectMeta>>
        {
            self.inner.list(prefix)
        }

        async fn list_with_delimiter(
            &self,
            prefix: Option<&Path>,
        ) -> object_store::Result<object_store::ListResult> {
            self.inner.list_with_delimiter(prefix).await
        }

        async fn copy_opts(
            &self,
            from: &Path,
            to: &Path,
            options: object_store::CopyOptions,
        ) -> object_store::Result<()> {
            self.inner.copy_opts(from, to, options).await
        }
    }

    /// A write whose durability is unknown is never reported written, even
    /// though reading it back would find our token: it is not retried either.
    #[tokio::test]
    async fn a_write_of_unknown_durability_is_an_error_not_a_read_back() {
        let memory = Arc::new(InMemory::new());
        let plain = cas(memory.clone());
        let v1 = plain.create(manifest(1)).await.unwrap();
        let store = Arc::new(StoredButNotDurable {
            inner: memory,
            puts: Default::default(),
        });
        let failing = cas(store.clone());
        let next = v1.value.successor(v1.value.writer);
        match failing.replace(&v1, next.clone()).await {
            Err(CasError::Store { source, .. }) => assert!(is_durability_unknown(&source)),
            other => panic!("expected a store error of unknown durability, got {other:?}"),
        }
        assert_eq!(store.puts.load(std::sync::atomic::Ordering::SeqCst), 1);
        // The bytes did reach the store: only a read-back would have said Ok.
        assert_eq!(plain.load().await.unwrap().unwrap().value, next);
        let fresh = cas(Arc::new(StoredButNotDurable {
            inner: Arc::new(InMemory::new()),
            puts: Default::default(),
        }));
        assert!(matches!(
            fresh.create(manifest(2)).await,
            Err(CasError::Store { .. })
        ));
    }

    #[tokio::test]
    async fn concurrent_replacers_have_exactly_one_winner() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let obj = cas(store);
        let mut current = obj.create(manifest(0)).await.unwrap();
        for round in 0..20u8 {
            let attempts = (0..8u8).map(|w| {
                let obj = obj.clone();
                let current = current.clone();
                async move {
                    let mut next = current.value.successor(current.value.writer);
                    next.writer.write_id = [round.wrapping_mul(8).wrapping_add(w + 1); 16];
                    obj.replace(&current, next).await
                }
            });
            let results = futures::future::join_all(attempts).await;
            let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
            assert_eq!(winners.len(), 1, "round {round}");
            current = winners[0].clone();
        }
        assert_eq!(obj.load().await.unwrap().unwrap().value.version, 21);
    }
}
