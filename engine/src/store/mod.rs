//! Object stores from a URL, and the decorators every part of Strata composes
//! around them.
//!
//! | URL | store |
//! |---|---|
//! | a bare path, or `file:///dir` | local directory ([`local_store`]): create-only and `If-Match` CAS across processes, fsync before ack |
//! | `memory://` | in-process memory (tests, benchmarks) |
//! | `s3://bucket/prefix` | S3 or an S3-compatible server; conditional puts by e-tag |
//!
//! S3 settings come from [`S3Options`] (flags) first, then the standard `AWS_*`
//! environment variables. [`StoreOptions::latency`] wraps the result in a fixed
//! per-call [`Latency`]. [`Stall`] freezes a store on demand (tests).

mod counting;
mod durable_fs;
#[cfg(feature = "fault-hooks")]
mod fsync_faults;
mod latency;
mod layer;
mod local;
mod recycle;
mod stall;
mod sync_point;

use std::path::PathBuf;
use std::sync::Arc;

use object_store::aws::AmazonS3Builder;
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;
use object_store::{ClientOptions, ObjectStore};

pub use counting::{RequestCounts, RequestTotals};
#[cfg(feature = "fault-hooks")]
pub use fsync_faults::FsyncFaults;
pub use latency::Latency;
pub use layer::{inner_listing, Layered, StoreLayer, StoreOp};
pub use local::{local_store, local_store_with, LocalCas};
pub use recycle::{pool_counts, PoolCounts, PoolLimits, Recycler, POOL_DIR};
pub use stall::Stall;
pub use sync_point::{SyncPoint, SyncWrite};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store URL {url:?} is not a path, file://, memory:// or s3:// URL")]
    UnsupportedUrl { url: String },
    #[error("store URL {url:?}: {reason}")]
    InvalidUrl { url: String, reason: String },
    #[error("local store at {path}: {source}")]
    Local {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("S3 store: {source}")]
    S3 {
        #[source]
        source: object_store::Error,
    },
}

/// Where objects live, parsed from a store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    Local(PathBuf),
    Memory,
    S3 { bucket: String, prefix: String },
}

impl StoreUrl {
    pub fn parse(text: &str) -> Result<StoreUrl, StoreError> {
        let invalid = |reason: &str| StoreError::InvalidUrl {
            url: text.to_string(),
            reason: reason.to_string(),
        };
        if text.is_empty() {
            return Err(invalid("empty"));
        }
        if !text.contains("://") {
            return Ok(StoreUrl::Local(PathBuf::from(text)));
        }
        let url = url::Url::parse(text).map_err(|e| invalid(&e.to_string()))?;
        match url.scheme() {
            "file" => {
                let path = url
                    .to_file_path()
                    .map_err(|_| invalid("not an absolute local path"))?;
                Ok(StoreUrl::Local(path))
            }
            "memory" => Ok(StoreUrl::Memory),
            "s3" => {
                let bucket = url
                    .host_str()
                    .filter(|b| !b.is_empty())
                    .ok_or_else(|| invalid("missing bucket"))?
                    .to_string();
                let prefix = url.path().trim_matches('/').to_string();
                Ok(StoreUrl::S3 { bucket, prefix })
            }
            _ => Err(StoreError::UnsupportedUrl {
                url: text.to_string(),
            }),
        }
    }
}

/// S3 settings given on the command line (each falls back to `AWS_*`).
#[derive(Debug, Clone, Default)]
pub struct S3Options {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// Allow plain HTTP (loopback test servers).
    pub allow_http: bool,
}

#[derive(Debug, Clone, Default)]
pub struct StoreOptions {
    pub s3: S3Options,
    /// Emulated latency added to each call (zero: none).
    pub latency: Latency,
}

/// Opens the store a URL names, with the options' decorators.
pub fn open_store(url: &str, options: &StoreOptions) -> Result<Arc<dyn ObjectStore>, StoreError> {
    let base: Arc<dyn ObjectStore> = match StoreUrl::parse(url)? {
        StoreUrl::Local(path) => {
            Arc::new(local_store(&path).map_err(|source| StoreError::Local {
                path: path.display().to_string(),
                source,
            })?)
        }
        StoreUrl::Memory => Arc::new(InMemory::new()),
        StoreUrl::S3 { bucket, prefix } => {
            let s3 = open_s3(&bucket, &options.s3)?;
            if prefix.is_empty() {
                s3
            } else {
                Arc::new(PrefixStore::new(s3, prefix.as_str()))
            }
        }
    };
    Ok(with_latency(base, options.latency))
}

/// Wraps `store` in a [`Latency`] layer unless every latency is zero.
pub fn with_latency(store: Arc<dyn ObjectStore>, latency: Latency) -> Arc<dyn ObjectStore> {
    if latency.put.is_zero() && latency.get.is_zero() && latency.other.is_zero() {
        store
    } else {
        Arc::new(Layered::new(store, latency))
    }
}

fn open_s3(bucket: &str, options: &S3Options) -> Result<Arc<dyn ObjectStore>, StoreError> {
    // TLS for reqwest uses rustls with the ring provider; installing it twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(bucket);
    if let Some(endpoint) = &options.endpoint {
        builder = builder.with_endpoint(endpoint);
    }
    if let Some(region) = &options.region {
        builder = builder.with_region(region);
    }
    if let Some(key) = &options.access_key_id {
        builder = builder.with_access_key_id(key);
    }
    if let Some(secret) = &options.secret_access_key {
        builder = builder.with_secret_access_key(secret);
    }
    // Client options replace each other wholesale: allow_http must live inside them.
    let allow_http = options.allow_http
        || std::env::var("AWS_ALLOW_HTTP").is_ok_and(|v| v.eq_ignore_ascii_case("true"));
    builder = builder.with_client_options(ClientOptions::new().with_allow_http(allow_http));
    let s3 = builder
        .build()
        .map_err(|source| StoreError::S3 { source })?;
    Ok(Arc::new(s3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_supported_form() {
        assert_eq!(
            StoreUrl::parse("./data").unwrap(),
            StoreUrl::Local(PathBuf::from("./data"))
        );
        assert_eq!(
            StoreUrl::parse("file:///tmp/x").unwrap(),
            StoreUrl::Local(PathBuf::from("/tmp/x"))
        );
        assert_eq!(StoreUrl::parse("memory://").unwrap(), StoreUrl::Memory);
        assert_eq!(
            StoreUrl::parse("s3://bucket/a/b/").unwrap(),
            StoreUrl::S3 {
                bucket: "bucket".into(),
                prefix: "a/b".into()
            }
        );
        assert!(StoreUrl::parse("gs://x").is_err());
        assert!(StoreUrl::parse("s3:///nobucket").is_err());
        assert!(StoreUrl::parse("").is_err());
    }
}
