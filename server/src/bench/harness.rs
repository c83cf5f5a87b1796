//! What the benchmarks share (docs/ARCHITECTURE.md): request
//! counting behind an emulated store latency, the benchmark streams and their
//! key, one benchmark shard, and the closed-loop append driver with its
//! latency histograms. Peak memory is read from `/proc/self/status`.
//!
//! Invariants: a closed-loop run measures only appends *sent* inside its
//! window (warm-up appends are driven but not counted), and store requests are
//! counted over the same window.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hdrhistogram::Histogram;
use object_store::ObjectStore;
use strata_engine::store::{with_latency, Latency, Layered, RequestCounts, RequestTotals};
use strata_engine::{
    AppendAck, AppendRequest, EngineEnv, EngineError, Entropy, InstanceId, OsEntropy, Shard,
    ShardConfig, ShardName, StreamRef,
};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

use super::error::BenchError;

/// Peak resident set size of this process (VmHWM), in bytes.
pub fn peak_rss_bytes() -> u64 {
    proc_status_bytes("VmHWM:")
}

/// A `kB` field of `/proc/self/status` (`VmRSS:`, `VmHWM:`), in bytes (0 if absent).
pub(crate) fn proc_status_bytes(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// A store that counts the requests reaching it, behind an emulated latency
/// (counted requests are the ones the engine made, whatever their wait).
pub(crate) struct CountedStore {
    pub store: Arc<dyn ObjectStore>,
    pub counts: Arc<RequestCounts>,
}

impl CountedStore {
    pub fn new(base: Arc<dyn ObjectStore>, latency: Latency) -> Self {
        let counting = Arc::new(Layered::new(base, RequestCounts::default()));
        let counts = counting.layer().clone();
        CountedStore {
            store: with_latency(counting, latency),
            counts,
        }
    }
}

/// The key every benchmark stream is encrypted under.
pub(crate) fn bench_cipher() -> Arc<StreamCipher> {
    Arc::new(StreamCipher::new(
        StreamEpoch([1; 16]),
        StreamKey::from_bytes([2; 32]),
    ))
}

/// `count` stream references whose ids end in `salt`.
pub(crate) fn bench_streams(count: usize, salt: [u8; 8]) -> Vec<StreamRef> {
    (0..count)
        .map(|i| {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&(i as u64).to_le_bytes());
            id[8..].copy_from_slice(&salt);
            StreamRef { id, incarnation: 1 }
        })
        .collect()
}

/// One shard with benchmark streams on it.
pub(crate) struct BenchShard {
    pub shard: Shard,
    pub streams: Vec<StreamRef>,
    pub cipher: Arc<StreamCipher>,
}

impl BenchShard {
    /// Opens (or re-opens, as a new owner) the shard `name` over `store`,
    /// creating the streams when `create` is set.
    pub async fn open(
        store: Arc<dyn ObjectStore>,
        config: ShardConfig,
        streams: Vec<StreamRef>,
        create: bool,
    ) -> Result<Self, BenchError> {
        let mut instance = [0u8; 16];
        OsEntropy.fill(&mut instance);
        let name = ShardName::new("bench").map_err(|e| BenchError::Usage(e.to_string()))?;
        let shard = Shard::open(
            EngineEnv::production(store),
            name,
            InstanceId(instance),
            config,
        )
        .await?;
        let cipher = bench_cipher();
        if create {
            let creates = streams.iter().map(|s| shard.create_stream(*s, &cipher));
            for created in futures::future::join_all(creates).await {
                created?;
            }
        }
        Ok(BenchShard {
            shard,
            streams,
            cipher,
        })
    }

    /// Appends `records` to stream number `stream` (modulo the stream count).
    pub async fn append(
        &self,
        stream: usize,
        records: Vec<Bytes>,
    ) -> Result<AppendAck, EngineError> {
        let stream = self.streams[stream % self.streams.len()];
        let request = AppendRequest::new(stream, self.cipher.clone(), records);
        self.shard.append(request).await
    }
}

/// What one append of a closed-loop appender came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AppendOutcome {
    Acked,
    /// Refused for back-pressure; the appender yields and tries again.
    Overloaded,
    Failed,
}

impl AppendOutcome {
    pub fn of_engine<T>(result: &Result<T, EngineError>) -> Self {
        match result {
            Ok(_) => AppendOutcome::Acked,
            Err(EngineError::Overloaded) => AppendOutcome::Overloaded,
            Err(_) => AppendOutcome::Failed,
        }
    }
}

/// The timing of a closed-loop run: an unmeasured warm-up, then the window.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoadWindow {
    pub warmup: Duration,
    pub measured: Duration,
}

/// What a closed-loop run measured.
pub(crate) struct LoadResult {
    /// Acknowledgement latency, in microseconds, of the appends sent in the window.
    pub latency_us: Histogram<u64>,
    pub errors: u64,
    pub measured_s: f64,
    /// Store requests made during the window.
    pub requests: RequestTotals,
}

impl LoadResult {
    pub fn appends(&self) -> u64 {
        self.latency_us.len()
    }

    pub fn appends_per_sec(&self) -> f64 {
        self.appends() as f64 / self.measured_s
    }

    pub fn latency_ms_at(&self, quantile: f64) -> f64 {
        self.latency_us.value_at_quantile(quantile) as f64 / 1000.0
    }

    pub fn latency_ms_max(&self) -> f64 {
        self.latency_us.max() as f64 / 1000.0
    }
}

/// Ack latencies in microseconds, up to a minute.
const LATENCY_US_MAX: u64 = 60_000_000;

fn latency_histogram() -> Result<Histogram<u64>, BenchError> {
    Ok(Histogram::new_with_bounds(1, LATENCY_US_MAX, 3)?)
}

/// Closed-loop load: `appenders` tasks, each awaiting `append(appender)`
/// before it sends the next one. Appends sent during the warm-up are not
/// measured; store requests are counted over the measured window.
///
/// Every appender records into one shared histogram. A histogram per appender
/// (17,408 counters, 136 KiB, at three significant digits up to a minute)
/// cost 1,024 appenders 139 MB of page faults and cache misses on the very
/// cores the engine under test runs on, and inflated the peak memory reported.
pub(crate) async fn closed_loop<F, Fut>(
    appenders: usize,
    window: LoadWindow,
    counts: &RequestCounts,
    append: F,
) -> Result<LoadResult, BenchError>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = AppendOutcome> + Send + 'static,
{
    let start = Instant::now();
    let measure_from = start + window.warmup;
    let stop_at = measure_from + window.measured;
    let latency_us = Arc::new(Mutex::new(latency_histogram()?));
    let errors = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::with_capacity(appenders);
    for appender in 0..appenders {
        let append = append.clone();
        let latency_us = latency_us.clone();
        let errors = errors.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let sent = Instant::now();
                if sent >= stop_at {
                    break;
                }
                let outcome = append(appender).await;
                if outcome == AppendOutcome::Overloaded {
                    tokio::task::yield_now().await;
                }
                if sent < measure_from {
                    continue;
                }
                match outcome {
                    AppendOutcome::Acked => {
                        let micros = (sent.elapsed().as_micros() as u64).clamp(1, LATENCY_US_MAX);
                        let mut histogram =
                            latency_us.lock().unwrap_or_else(PoisonError::into_inner);
                        let _ = histogram.record(micros);
                    }
                    AppendOutcome::Overloaded | AppendOutcome::Failed => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let before = counts.snapshot();
    for task in tasks {
        task.await?;
    }
    let after = counts.snapshot();
    let latency_us = latency_us
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    Ok(LoadResult {
        latency_us,
        errors: errors.load(Ordering::Relaxed),
        measured_s: window.measured.as_secs_f64(),
        requests: totals_between(before, after),
    })
}

/// Requests made between two snapshots.
pub(crate) fn totals_between(before: RequestTotals, after: RequestTotals) -> RequestTotals {
    RequestTotals {
        puts: after.puts - before.puts,
        gets: after.gets - before.gets,
        heads: after.heads - before.heads,
        lists: after.lists - before.lists,
        deletes: after.deletes - before.deletes,
        copies: after.copies - before.copies,
    }
}
