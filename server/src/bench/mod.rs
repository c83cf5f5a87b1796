//! `strata bench`: reproducible benchmarks that print throughput, latency
//! percentiles, object-store requests and peak memory.

// Benchmarks measure real time.
#![allow(clippy::disallowed_methods)]

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Args, Subcommand, ValueEnum};
use hdrhistogram::Histogram;
use object_store::ObjectStore;
use strata_engine::store::{
    open_store, with_latency, Latency, Layered, RequestCounts, RequestTotals, StoreOptions,
};
use strata_engine::{
    AppendAck, AppendRequest, EngineEnv, EngineError, Entropy, InstanceId, OsEntropy, Shard,
    ShardConfig, ShardName, StreamRef,
};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

mod compare;
#[cfg(feature = "slatedb-baseline")]
mod slatedb;
mod tiers;

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
    #[error("merging latency histograms: {0}")]
    HistogramMerge(#[from] hdrhistogram::AdditionError),
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
}

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Drive the shard engine in-process: each appender waits for its durable
    /// acknowledgement before the next append.
    Engine(EngineBench),
    /// Seal and open pages on one core: 64 KiB pages (compressible and not)
    /// and pages of one 256-byte record.
    Pages(PagesBench),
    /// Catch-up reads through the sealed tier: a cold pass from the store
    /// (with GET latency) and a warm pass from the chunk cache.
    Catchup(tiers::CatchupBench),
    /// Re-open a shard with many streams and WAL objects since its last seal.
    Reopen(tiers::ReopenBench),
    /// Strata against a SlateDB build of the same log, in one process over the
    /// same emulated store (needs `--features slatedb-baseline`).
    Compare(compare::CompareBench),
}

#[derive(Args, Debug)]
pub struct PagesBench {
    /// Seconds spent on each measurement.
    #[arg(long, default_value_t = 2.0)]
    seconds_each: f64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum RuntimeKind {
    /// tokio multi-thread runtime with one worker per core.
    Multi,
    /// tokio current-thread runtime.
    Current,
}

#[derive(Args, Debug)]
pub struct EngineBench {
    /// Concurrent appenders.
    #[arg(long, default_value_t = 64)]
    appenders: usize,
    /// Payload bytes per record.
    #[arg(long, default_value_t = 100)]
    record_bytes: usize,
    /// Emulated latency of every PUT, in milliseconds.
    #[arg(long, default_value_t = 25)]
    put_latency_ms: u64,
    /// Emulated latency of every GET, LIST and HEAD, in milliseconds.
    #[arg(long, default_value_t = 0)]
    get_latency_ms: u64,
    /// Measured duration, in seconds.
    #[arg(long, default_value_t = 10)]
    duration_s: u64,
    /// Unmeasured warm-up before the measured window, in seconds.
    #[arg(long, default_value_t = 1)]
    warmup_s: u64,
    /// Streams the appenders spread over (default: one per appender, at most 1024).
    #[arg(long)]
    streams: Option<usize>,
    /// WAL PUTs in flight at once.
    #[arg(long, default_value_t = ShardConfig::default().pipeline_depth)]
    pipeline_depth: usize,
    /// Minimum gap between WAL flushes, in milliseconds.
    #[arg(long, default_value_t = 0)]
    min_flush_gap_ms: u64,
    /// Store URL (memory://, a directory, s3://…).
    #[arg(long, default_value = "memory://")]
    store: String,
    #[arg(long, value_enum, default_value_t = RuntimeKind::Multi)]
    runtime: RuntimeKind,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(command: BenchCommand) -> Result<(), BenchError> {
    match command {
        BenchCommand::Catchup(args) => tiers::catchup(&args),
        BenchCommand::Reopen(args) => tiers::reopen(&args),
        BenchCommand::Compare(args) => compare::compare(&args),
        BenchCommand::Pages(args) => {
            let report = pages_bench(&args)?;
            if args.json {
                println!("{}", serde_json::to_string(&report).expect("serialisable"));
            } else {
                println!("page bench (one core, {} s per row):", args.seconds_each);
                for row in &report.rows {
                    println!(
                        "  {:<34} {:>10.0} pages/s {:>9.1} MB/s of payload",
                        row.name, row.pages_per_sec, row.payload_mb_per_sec
                    );
                }
            }
            Ok(())
        }
        BenchCommand::Engine(args) => {
            let runtime = match args.runtime {
                RuntimeKind::Multi => tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()?,
                RuntimeKind::Current => tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?,
            };
            let report = runtime.block_on(engine_bench(&args))?;
            report.print(args.json);
            Ok(())
        }
    }
}

/// What one engine benchmark run measured.
#[derive(Debug, serde::Serialize)]
pub struct EngineReport {
    appenders: usize,
    streams: usize,
    record_bytes: usize,
    put_latency_ms: u64,
    pipeline_depth: usize,
    duration_s: f64,
    appends: u64,
    errors: u64,
    appends_per_sec: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    puts: u64,
    gets: u64,
    records_per_put: f64,
    peak_rss_bytes: u64,
}

impl EngineReport {
    fn print(&self, json: bool) {
        if json {
            println!("{}", serde_json::to_string(self).expect("serialisable"));
            return;
        }
        println!(
            "engine bench: {} appenders over {} streams, {} B records, PUT latency {} ms, pipeline depth {}",
            self.appenders, self.streams, self.record_bytes, self.put_latency_ms, self.pipeline_depth
        );
        println!(
            "  {:.0} appends/s ({} appends, {} errors in {:.1} s)",
            self.appends_per_sec, self.appends, self.errors, self.duration_s
        );
        println!(
            "  ack latency p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            self.p50_ms, self.p99_ms, self.max_ms
        );
        println!(
            "  {} PUTs, {} GETs, {:.1} records per PUT",
            self.puts, self.gets, self.records_per_put
        );
        println!(
            "  peak RSS {:.1} MiB",
            self.peak_rss_bytes as f64 / (1 << 20) as f64
        );
    }
}

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

struct AppenderResult {
    latency_us: Histogram<u64>,
    errors: u64,
}

/// Closed-loop load: `appenders` tasks, each awaiting `append(appender)`
/// before it sends the next one. Appends sent during the warm-up are not
/// measured; store requests are counted over the measured window.
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
    let mut tasks = Vec::with_capacity(appenders);
    for appender in 0..appenders {
        let append = append.clone();
        let mut result = AppenderResult {
            latency_us: latency_histogram()?,
            errors: 0,
        };
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
                        let micros = sent.elapsed().as_micros() as u64;
                        let _ = result.latency_us.record(micros.clamp(1, LATENCY_US_MAX));
                    }
                    AppendOutcome::Overloaded | AppendOutcome::Failed => result.errors += 1,
                }
            }
            result
        }));
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let before = counts.snapshot();
    let mut latency_us = latency_histogram()?;
    let mut errors = 0;
    for task in tasks {
        let result = task.await?;
        latency_us.add(&result.latency_us)?;
        errors += result.errors;
    }
    let after = counts.snapshot();
    Ok(LoadResult {
        latency_us,
        errors,
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

async fn engine_bench(args: &EngineBench) -> Result<EngineReport, BenchError> {
    if args.appenders == 0 || args.duration_s == 0 {
        return Err(BenchError::Usage(
            "appenders and duration must be positive".into(),
        ));
    }
    let counted = CountedStore::new(
        open_store(&args.store, &StoreOptions::default())?,
        Latency {
            put: Duration::from_millis(args.put_latency_ms),
            get: Duration::from_millis(args.get_latency_ms),
            other: Duration::from_millis(args.get_latency_ms),
        },
    );
    let config = ShardConfig {
        pipeline_depth: args.pipeline_depth,
        min_flush_gap: Duration::from_millis(args.min_flush_gap_ms),
        ..ShardConfig::default()
    };
    let mut salt = [0u8; 8];
    OsEntropy.fill(&mut salt);
    let stream_count = args.streams.unwrap_or(args.appenders.min(1024)).max(1);
    let bench = Arc::new(
        BenchShard::open(
            counted.store.clone(),
            config,
            bench_streams(stream_count, salt),
            true,
        )
        .await?,
    );
    let payload = Bytes::from(vec![b'x'; args.record_bytes]);
    let window = LoadWindow {
        warmup: Duration::from_secs(args.warmup_s),
        measured: Duration::from_secs(args.duration_s),
    };
    let driver = bench.clone();
    let load = closed_loop(args.appenders, window, &counted.counts, move |appender| {
        let bench = driver.clone();
        let records = vec![payload.clone()];
        async move { AppendOutcome::of_engine(&bench.append(appender, records).await) }
    })
    .await?;
    bench.shard.shutdown().await;
    let appends = load.appends();
    let puts = load.requests.puts;
    Ok(EngineReport {
        appenders: args.appenders,
        streams: stream_count,
        record_bytes: args.record_bytes,
        put_latency_ms: args.put_latency_ms,
        pipeline_depth: args.pipeline_depth,
        duration_s: load.measured_s,
        appends,
        errors: load.errors,
        appends_per_sec: load.appends_per_sec(),
        p50_ms: load.latency_ms_at(0.50),
        p99_ms: load.latency_ms_at(0.99),
        max_ms: load.latency_ms_max(),
        puts,
        gets: load.requests.gets,
        records_per_put: if puts == 0 {
            0.0
        } else {
            appends as f64 / puts as f64
        },
        peak_rss_bytes: peak_rss_bytes(),
    })
}

#[derive(Debug, serde::Serialize)]
pub struct PagesRow {
    name: &'static str,
    pages_per_sec: f64,
    payload_mb_per_sec: f64,
}

#[derive(Debug, serde::Serialize)]
pub struct PagesReport {
    rows: Vec<PagesRow>,
}

/// Runs `op` repeatedly for about `seconds`; returns operations per second.
fn rate(seconds: f64, mut op: impl FnMut()) -> f64 {
    let deadline = Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut count = 0u64;
    while start.elapsed() < deadline {
        for _ in 0..64 {
            op();
        }
        count += 64;
    }
    count as f64 / start.elapsed().as_secs_f64()
}

fn pages_bench(args: &PagesBench) -> Result<PagesReport, BenchError> {
    use strata_segments::{open_page, plan_pages, prepare_body, seal_page, PageCipher};
    let cipher = PageCipher::new(
        StreamEpoch([1; 16]),
        &StreamKey::from_bytes([2; 32]),
        b"",
        0,
    );
    let entropy = OsEntropy;
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let noise: Vec<u8> = (0..64 * 1024)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let text: Vec<u8> =
        b"{\"user\":\"alice\",\"event\":\"click\",\"page\":\"/home\",\"ts\":1700000000}\n"
            .iter()
            .copied()
            .cycle()
            .take(64 * 1024)
            .collect();
    // 64 KiB of body: records of 1 KiB (the page planner's cut keeps them in one page).
    let records_of =
        |data: &[u8]| -> Vec<Bytes> { data.chunks(1000).map(Bytes::copy_from_slice).collect() };
    let mut rows = Vec::new();
    for (name_seal, name_open, data) in [
        (
            "seal 64 KiB page, incompressible",
            "open 64 KiB page, incompressible",
            &noise,
        ),
        (
            "seal 64 KiB page, compressible",
            "open 64 KiB page, compressible",
            &text,
        ),
    ] {
        let all = records_of(data);
        let first = plan_pages(all.iter().map(Bytes::len))[0].clone();
        let records = &all[first];
        let payload: usize = records.iter().map(Bytes::len).sum();
        let seal = || {
            let body = prepare_body(records, 0).expect("page body");
            seal_page(&cipher, &body, 0, 0, b"", entropy.bytes12()).expect("seal")
        };
        let per_sec = rate(args.seconds_each, || {
            std::hint::black_box(seal());
        });
        rows.push(PagesRow {
            name: name_seal,
            pages_per_sec: per_sec,
            payload_mb_per_sec: per_sec * payload as f64 / 1e6,
        });
        let page = seal();
        let per_sec = rate(args.seconds_each, || {
            std::hint::black_box(open_page(&cipher, &page).expect("open"));
        });
        rows.push(PagesRow {
            name: name_open,
            pages_per_sec: per_sec,
            payload_mb_per_sec: per_sec * payload as f64 / 1e6,
        });
    }
    let small = [Bytes::from(noise[..256].to_vec())];
    let seal_small = || {
        let body = prepare_body(&small, 0).expect("page body");
        seal_page(&cipher, &body, 0, 0, b"", entropy.bytes12()).expect("seal")
    };
    let per_sec = rate(args.seconds_each, || {
        std::hint::black_box(seal_small());
    });
    rows.push(PagesRow {
        name: "seal one 256 B record",
        pages_per_sec: per_sec,
        payload_mb_per_sec: per_sec * 256.0 / 1e6,
    });
    let page = seal_small();
    let per_sec = rate(args.seconds_each, || {
        std::hint::black_box(open_page(&cipher, &page).expect("open"));
    });
    rows.push(PagesRow {
        name: "open one 256 B record",
        pages_per_sec: per_sec,
        payload_mb_per_sec: per_sec * 256.0 / 1e6,
    });
    Ok(PagesReport { rows })
}
