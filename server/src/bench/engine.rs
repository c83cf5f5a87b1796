//! `strata bench engine`: drives the shard engine in-process, each appender
//! waiting for its durable acknowledgement before the next append
//! (docs/BENCHMARKS.md; docs/ARCHITECTURE.md).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, ValueEnum};
use strata_engine::store::{open_store, Latency, StoreOptions};
use strata_engine::{Entropy, OsEntropy, ShardConfig};

use super::error::BenchError;
use super::harness::{
    bench_streams, closed_loop, peak_rss_bytes, AppendOutcome, BenchShard, CountedStore, LoadWindow,
};

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

/// `strata bench engine`: runs the benchmark on the runtime asked for and
/// prints its report.
pub fn engine(args: &EngineBench) -> Result<(), BenchError> {
    let runtime = match args.runtime {
        RuntimeKind::Multi => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?,
        RuntimeKind::Current => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?,
    };
    let report = runtime.block_on(engine_bench(args))?;
    report.print(args.json);
    Ok(())
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
