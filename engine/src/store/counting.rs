//! Counts the requests that reach a store, by kind (benchmarks report PUTs per
//! acknowledged append; tests assert how many GETs a read issued).

use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use object_store::path::Path;
use object_store::Result;

use super::layer::{StoreLayer, StoreOp};

#[derive(Debug, Default)]
pub struct RequestCounts {
    pub puts: AtomicU64,
    pub gets: AtomicU64,
    pub heads: AtomicU64,
    pub lists: AtomicU64,
    pub deletes: AtomicU64,
    pub copies: AtomicU64,
}

/// A point-in-time copy of [`RequestCounts`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestTotals {
    pub puts: u64,
    pub gets: u64,
    pub heads: u64,
    pub lists: u64,
    pub deletes: u64,
    pub copies: u64,
}

impl RequestTotals {
    pub fn total(&self) -> u64 {
        self.puts + self.gets + self.heads + self.lists + self.deletes + self.copies
    }
}

impl RequestCounts {
    pub fn snapshot(&self) -> RequestTotals {
        RequestTotals {
            puts: self.puts.load(Ordering::Relaxed),
            gets: self.gets.load(Ordering::Relaxed),
            heads: self.heads.load(Ordering::Relaxed),
            lists: self.lists.load(Ordering::Relaxed),
            deletes: self.deletes.load(Ordering::Relaxed),
            copies: self.copies.load(Ordering::Relaxed),
        }
    }
}

#[async_trait]
impl StoreLayer for RequestCounts {
    async fn before(&self, op: StoreOp, _location: Option<&Path>) -> Result<()> {
        let counter = match op {
            StoreOp::Put => &self.puts,
            StoreOp::Get => &self.gets,
            StoreOp::Head => &self.heads,
            StoreOp::List => &self.lists,
            StoreOp::Delete => &self.deletes,
            StoreOp::Copy => &self.copies,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
