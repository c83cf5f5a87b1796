//! What a `strata bench` run can fail with (docs/ARCHITECTURE.md).
//!
//! Owns [`BenchError`], the one error type of every benchmark in this module;
//! it wraps the engine's, the store's and the runtime's errors with what was
//! being done.

use strata_engine::EngineError;

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("store: {0}")]
    Store(#[from] strata_engine::store::StoreError),
    #[error("engine: {0}")]
    Engine(#[from] EngineError),
    #[error("runtime: {0}")]
    Runtime(#[from] std::io::Error),
    #[error("invalid arguments: {0}")]
    Usage(String),
    #[error("latency histogram: {0}")]
    Histogram(#[from] hdrhistogram::CreationError),
    #[error("a benchmark task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("page: {0}")]
    Page(#[from] strata_segments::PageError),
    #[error("JSON output: {0}")]
    Json(#[from] serde_json::Error),
    #[error(
        "this strata binary has no SlateDB baseline; build it with \
         `cargo build --release -p strata-server --features slatedb-baseline`"
    )]
    BaselineNotBuilt,
    #[cfg(feature = "slatedb-baseline")]
    #[error("slatedb: {0}")]
    SlateDb(#[from] ::slatedb::Error),
    #[error("read-back check failed: {0}")]
    Verify(String),
    #[error("HTTP benchmark: {0}")]
    Http(String),
}
