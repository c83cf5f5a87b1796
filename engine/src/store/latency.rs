//! A fixed per-call latency before PUTs and GETs (and, optionally, LIST, HEAD and
//! DELETE), for benchmarks and tests that emulate a remote object store.
//! Unlike `object_store::throttle::ThrottledStore` it wraps any store, including
//! the local one (whose GETs return files, which `ThrottledStore` cannot wrap).

use std::time::Duration;

use async_trait::async_trait;
use object_store::path::Path;
use object_store::Result;

use super::layer::{StoreLayer, StoreOp};

#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    pub put: Duration,
    pub get: Duration,
    /// LIST, HEAD, DELETE and COPY.
    pub other: Duration,
}

#[async_trait]
impl StoreLayer for Latency {
    async fn before(&self, op: StoreOp, _location: Option<&Path>) -> Result<()> {
        let wait = match op {
            StoreOp::Put => self.put,
            StoreOp::Get => self.get,
            StoreOp::Head | StoreOp::List | StoreOp::Delete | StoreOp::Copy => self.other,
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        Ok(())
    }
}
