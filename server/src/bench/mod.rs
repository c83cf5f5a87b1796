//! `strata bench`: reproducible benchmarks that print throughput, latency
//! percentiles, object-store requests and peak memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Args, Subcommand, ValueEnum};
use hdrhistogram::Histogram;
use strata_engine::store::{open_store, Latency, Layered, RequestCounts, StoreOptions};
use strata_engine::{
    AppendRequest, EngineEnv, EngineError, Entropy, InstanceId, OsEntropy, Shard, ShardConfig,
    ShardName, StreamRef,
};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

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
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

struct AppenderResult {
    histogram: Histogram<u64>,
    errors: u64,
}

async fn engine_bench(args: &EngineBench) -> Result<EngineReport, BenchError> {
    if args.appenders == 0 || args.duration_s == 0 {
        return Err(BenchError::Usage(
            "appenders and duration must be positive".into(),
        ));
    }
    let base = open_store(&args.store, &StoreOptions::default())?;
    let counting = Arc::new(Layered::new(base, RequestCounts::default()));
    let counts = counting.layer().clone();
    let store = strata_engine::store::with_latency(
        counting,
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
    let mut instance = [0u8; 16];
    OsEntropy.fill(&mut instance);
    let shard = Shard::open(
        EngineEnv::production(store),
        ShardName::new("bench").expect("valid"),
        InstanceId(instance),
        config,
    )
    .await?;
    let stream_count = args.streams.unwrap_or(args.appenders.min(1024)).max(1);
    let streams: Vec<StreamRef> = (0..stream_count)
        .map(|i| {
            let mut id = [0u8; 16];
            id[..8].copy_from_slice(&(i as u64).to_le_bytes());
            id[8..].copy_from_slice(&instance[..8]);
            StreamRef { id, incarnation: 1 }
        })
        .collect();
    let cipher = Arc::new(StreamCipher::new(
        StreamEpoch([1; 16]),
        StreamKey::from_bytes([2; 32]),
    ));
    let creates = streams.iter().map(|s| shard.create_stream(*s, &cipher));
    for created in futures::future::join_all(creates).await {
        created?;
    }
    let cipher = Arc::new(StreamCipher::new(
        StreamEpoch([1; 16]),
        StreamKey::from_bytes([2; 32]),
    ));
    let payload = Bytes::from(vec![b'x'; args.record_bytes]);

    let start = Instant::now();
    let measure_from = start + Duration::from_secs(args.warmup_s);
    let stop_at = measure_from + Duration::from_secs(args.duration_s);
    let mut tasks = Vec::with_capacity(args.appenders);
    for i in 0..args.appenders {
        let shard = shard.clone();
        let stream = streams[i % streams.len()];
        let cipher = cipher.clone();
        let payload = payload.clone();
        tasks.push(tokio::spawn(async move {
            let mut result = AppenderResult {
                histogram: Histogram::new_with_bounds(1, 60_000_000, 3).expect("bounds"),
                errors: 0,
            };
            loop {
                let sent = Instant::now();
                if sent >= stop_at {
                    break;
                }
                let request = AppendRequest::new(stream, cipher.clone(), vec![payload.clone()]);
                let outcome = shard.append(request).await;
                if sent < measure_from {
                    continue;
                }
                match outcome {
                    Ok(_) => {
                        let micros = sent.elapsed().as_micros() as u64;
                        let _ = result.histogram.record(micros.max(1));
                    }
                    Err(EngineError::Overloaded) => {
                        result.errors += 1;
                        tokio::task::yield_now().await;
                    }
                    Err(_) => result.errors += 1,
                }
            }
            result
        }));
    }
    // Count store requests over the measured window only.
    tokio::time::sleep_until(measure_from.into()).await;
    let before = counts.snapshot();
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("bounds");
    let mut errors = 0;
    for task in tasks {
        let result = task.await.map_err(|e| BenchError::Usage(e.to_string()))?;
        histogram.add(&result.histogram).expect("same bounds");
        errors += result.errors;
    }
    let after = counts.snapshot();
    shard.shutdown().await;
    let elapsed = stop_at
        .saturating_duration_since(measure_from)
        .as_secs_f64();
    let appends = histogram.len();
    let puts = after.puts - before.puts;
    Ok(EngineReport {
        appenders: args.appenders,
        streams: stream_count,
        record_bytes: args.record_bytes,
        put_latency_ms: args.put_latency_ms,
        pipeline_depth: args.pipeline_depth,
        duration_s: elapsed,
        appends,
        errors,
        appends_per_sec: appends as f64 / elapsed,
        p50_ms: histogram.value_at_quantile(0.50) as f64 / 1000.0,
        p99_ms: histogram.value_at_quantile(0.99) as f64 / 1000.0,
        max_ms: histogram.max() as f64 / 1000.0,
        puts,
        gets: after.gets - before.gets,
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
