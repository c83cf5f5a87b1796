//! Benchmarks of the sealed tier: catch-up reads (cold from the store, warm
//! from the chunk cache) and re-opening a shard.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use strata_engine::consumer::durable::{ConsumerChange, ConsumerSetup};
use strata_engine::consumer::{ConsumerConfig, ConsumerEvent, RecordRef};
use strata_engine::shard::ChunkCache;
use strata_engine::store::{Latency, Layered, RequestCounts, RequestTotals};
use strata_engine::{
    AppendRequest, EngineEnv, Entropy, InstanceId, OsEntropy, ReadLimits, Shard, ShardConfig,
    ShardName, StreamRef,
};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

use super::error::BenchError;
use super::harness::peak_rss_bytes;

#[derive(Args, Debug)]
pub struct CatchupBench {
    /// Streams, each read start to end by its own reader.
    #[arg(long, default_value_t = 8)]
    streams: usize,
    /// Payload written to (and read back from) each stream, in MiB.
    #[arg(long, default_value_t = 64)]
    mib_per_stream: usize,
    /// Bytes per record (random, so pages do not compress).
    #[arg(long, default_value_t = 1024)]
    record_bytes: usize,
    /// Emulated latency of every GET during the cold pass, in milliseconds.
    #[arg(long, default_value_t = 25)]
    get_latency_ms: u64,
    /// Bytes one read returns at most (the HTTP layer reads 4 MiB chunks).
    #[arg(long, default_value_t = 4 << 20)]
    read_bytes: usize,
    /// Directory of the chunk cache (default: a fresh temporary directory).
    #[arg(long)]
    cache_dir: Option<std::path::PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, serde::Serialize)]
struct ReadPass {
    seconds: f64,
    payload_bytes: u64,
    mb_per_sec: f64,
    gets: u64,
}

#[derive(Debug, serde::Serialize)]
struct CatchupReport {
    streams: usize,
    record_bytes: usize,
    payload_bytes_per_stream: u64,
    segments: u64,
    chunks_per_stream: usize,
    get_latency_ms: u64,
    cold: ReadPass,
    warm: ReadPass,
    peak_rss_bytes: u64,
}

fn cipher() -> Arc<StreamCipher> {
    Arc::new(StreamCipher::new(
        StreamEpoch([1; 16]),
        StreamKey::from_bytes([2; 32]),
    ))
}

fn stream(i: usize) -> StreamRef {
    let mut id = [0xbe; 16];
    id[..8].copy_from_slice(&(i as u64).to_le_bytes());
    StreamRef { id, incarnation: 1 }
}

fn random_bytes(len: usize) -> Bytes {
    let mut out = vec![0u8; len];
    for chunk in out.chunks_mut(16) {
        let r = OsEntropy.bytes16();
        chunk.copy_from_slice(&r[..chunk.len()]);
    }
    Bytes::from(out)
}

/// Size of the random pool records are cut from.
const RANDOM_POOL_BYTES: usize = 32 << 20;

/// A well-mixed position for record `r` of append `a` (splitmix64).
fn scatter(a: u64, r: u64) -> u64 {
    let mut z = a.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ r.wrapping_add(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A store that counts requests, with emulated latency on top.
fn counted_store(
    inner: Arc<dyn ObjectStore>,
    latency: Latency,
) -> (Arc<dyn ObjectStore>, Arc<RequestCounts>) {
    let counted = Layered::new(inner, RequestCounts::default());
    let counts = counted.layer().clone();
    (
        strata_engine::store::with_latency(Arc::new(counted), latency),
        counts,
    )
}

pub fn catchup(args: &CatchupBench) -> Result<(), BenchError> {
    if args.streams == 0 || args.mib_per_stream == 0 || args.record_bytes == 0 {
        return Err(BenchError::Usage("sizes must be positive".into()));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(catchup_bench(args))?;
    if args.json {
        println!("{}", serde_json::to_string(&report).expect("serialisable"));
        return Ok(());
    }
    println!(
        "catch-up bench: {} streams × {} MiB of {} B random records, {} segments, {} chunks per stream",
        report.streams,
        report.payload_bytes_per_stream >> 20,
        report.record_bytes,
        report.segments,
        report.chunks_per_stream
    );
    for (name, pass) in [
        (
            format!("cold (GET latency {} ms)", report.get_latency_ms),
            &report.cold,
        ),
        ("warm (chunk cache hot)".to_string(), &report.warm),
    ] {
        println!(
            "  {name:<28} {:>8.1} MB/s of decrypted payload ({} MiB in {:.2} s, {} GETs)",
            pass.mb_per_sec,
            pass.payload_bytes >> 20,
            pass.seconds,
            pass.gets
        );
    }
    println!(
        "  peak RSS {:.1} MiB",
        report.peak_rss_bytes as f64 / (1 << 20) as f64
    );
    Ok(())
}

async fn catchup_bench(args: &CatchupBench) -> Result<CatchupReport, BenchError> {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard_name = ShardName::new("catchup").expect("valid");
    // Write with the default sealing thresholds (24 MiB seals), no latency.
    let writer = Shard::open(
        EngineEnv::production(memory.clone()),
        shard_name.clone(),
        InstanceId([1; 16]),
        ShardConfig::default(),
    )
    .await?;
    let records_per_append = (64 << 10) / args.record_bytes.max(1);
    let appends_per_stream =
        (args.mib_per_stream << 20).div_ceil(args.record_bytes * records_per_append.max(1));
    // Records are slices of a random pool at scattered positions, so no two
    // records of one page share bytes and pages do not compress.
    let pool = random_bytes(RANDOM_POOL_BYTES.max(args.record_bytes * 2));
    for s in 0..args.streams {
        writer.create_stream(stream(s), &cipher()).await?;
    }
    let mut tasks = tokio::task::JoinSet::new();
    for s in 0..args.streams {
        let writer = writer.clone();
        let pool = pool.clone();
        let record_bytes = args.record_bytes;
        tasks.spawn(async move {
            let positions = pool.len() - record_bytes;
            for a in 0..appends_per_stream {
                let records: Vec<Bytes> = (0..records_per_append.max(1))
                    .map(|r| {
                        let at = scatter((s * appends_per_stream + a) as u64, r as u64)
                            % positions as u64;
                        pool.slice(at as usize..at as usize + record_bytes)
                    })
                    .collect();
                writer
                    .append(AppendRequest::new(stream(s), cipher(), records))
                    .await?;
            }
            Ok::<_, strata_engine::EngineError>(())
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.map_err(|e| BenchError::Usage(e.to_string()))??;
    }
    writer.shutdown().await;
    let payload_per_stream = writer
        .stream_info(&stream(0))
        .map_or(0, |i| i.tail.payload_bytes);

    let cache_dir = match &args.cache_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("strata-bench-cache-{}", std::process::id())),
    };
    let cache = Arc::new(ChunkCache::new(cache_dir.clone(), 8 << 30)?);
    let (store, counts) = counted_store(
        memory.clone(),
        Latency {
            put: Duration::ZERO,
            get: Duration::from_millis(args.get_latency_ms),
            other: Duration::from_millis(args.get_latency_ms),
        },
    );
    let reader = Shard::open(
        EngineEnv::production(store),
        shard_name,
        InstanceId([2; 16]),
        ShardConfig {
            chunk_cache: Some(cache),
            ..ShardConfig::default()
        },
    )
    .await?;
    let manifest_segments = memory
        .list(Some(&object_store::path::Path::from("shards/catchup/seg")))
        .collect::<Vec<_>>()
        .await
        .len() as u64;
    let cold = read_pass(&reader, args, &counts).await?;
    let warm = read_pass(&reader, args, &counts).await?;
    let _ = std::fs::remove_dir_all(&cache_dir);
    Ok(CatchupReport {
        streams: args.streams,
        record_bytes: args.record_bytes,
        payload_bytes_per_stream: payload_per_stream,
        segments: manifest_segments,
        chunks_per_stream: reader.sealed_chunks(&stream(0)),
        get_latency_ms: args.get_latency_ms,
        cold,
        warm,
        peak_rss_bytes: peak_rss_bytes(),
    })
}

use futures::StreamExt;

/// Every stream read start to end, all streams at once.
async fn read_pass(
    shard: &Shard,
    args: &CatchupBench,
    counts: &RequestCounts,
) -> Result<ReadPass, BenchError> {
    let before: RequestTotals = counts.snapshot();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for s in 0..args.streams {
        let shard = shard.clone();
        let limits = ReadLimits {
            max_records: usize::MAX,
            max_bytes: args.read_bytes,
        };
        tasks.spawn(async move {
            let cipher = cipher();
            let mut from = 0;
            let mut bytes = 0u64;
            loop {
                let batch = shard.read(&stream(s), from, limits, &cipher, None).await?;
                bytes += batch
                    .records
                    .iter()
                    .map(|r| r.payload.len() as u64)
                    .sum::<u64>();
                from = batch.next_offset;
                if batch.up_to_date() {
                    return Ok::<_, strata_engine::EngineError>(bytes);
                }
            }
        });
    }
    let mut payload_bytes = 0;
    while let Some(joined) = tasks.join_next().await {
        payload_bytes += joined.map_err(|e| BenchError::Usage(e.to_string()))??;
    }
    let seconds = started.elapsed().as_secs_f64();
    Ok(ReadPass {
        seconds,
        payload_bytes,
        mb_per_sec: payload_bytes as f64 / 1e6 / seconds,
        gets: counts.snapshot().gets - before.gets,
    })
}

#[derive(Args, Debug)]
pub struct ReopenBench {
    /// Streams in the shard (all in its index runs).
    #[arg(long, default_value_t = 10_000)]
    streams: usize,
    /// WAL objects written after the last seal (replayed by the open).
    #[arg(long, default_value_t = 48)]
    wal_objects: usize,
    /// Consumer groups, spread over the streams, each with a lease out and
    /// a record done, sealed into the index runs (the WAL objects after the
    /// seal then carry a consumer change each, too).
    #[arg(long, default_value_t = 0)]
    consumers: usize,
    /// Emulated latency of every store call during the open, in milliseconds.
    #[arg(long, default_value_t = 25)]
    latency_ms: u64,
    /// Opens measured (the median is reported).
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, serde::Serialize)]
struct ReopenReport {
    streams: usize,
    consumers: usize,
    wal_objects_replayed: u64,
    latency_ms: u64,
    open_ms_median: f64,
    open_ms_max: f64,
    requests_per_open: u64,
}

pub fn reopen(args: &ReopenBench) -> Result<(), BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(reopen_bench(args))?;
    if args.json {
        println!("{}", serde_json::to_string(&report).expect("serialisable"));
    } else {
        println!(
            "reopen bench: {} streams, {} consumers, {} WAL objects replayed, {} ms per store call",
            report.streams, report.consumers, report.wal_objects_replayed, report.latency_ms
        );
        println!(
            "  open {:.0} ms median, {:.0} ms max; {} store requests per open",
            report.open_ms_median, report.open_ms_max, report.requests_per_open
        );
    }
    Ok(())
}

/// The stream consumer `c` is on.
fn s_of(c: usize, streams: usize) -> StreamRef {
    stream(c % streams.max(1))
}

/// Consumer `c`'s name and a records change of it: a delivery of the
/// stream's record at `position` (and the one before done).
fn consumer_change(c: usize, position: u64) -> (String, ConsumerChange) {
    let record = |p: u64| RecordRef {
        routing_key: Bytes::from(format!("key-{c}")),
        position: p,
    };
    let change = ConsumerChange::Records {
        generation: 1,
        floor: 0,
        events: vec![
            ConsumerEvent::Delivered {
                record: record(position),
                lease: position + 1,
                deadline_ms: 1_000_000,
            },
            ConsumerEvent::Finished {
                record: record(position.saturating_sub(1)),
            },
        ],
    };
    (format!("consumer-{c}"), change)
}

/// Creates `consumers` consumer groups over the streams, each with state.
async fn configure_consumers(
    writer: &Shard,
    consumers: usize,
    streams: usize,
) -> Result<(), BenchError> {
    let setup = ConsumerSetup {
        config: ConsumerConfig {
            visibility_ms: 30_000,
            max_attempts: 5,
            max_batch: 10,
        },
        settings: Bytes::from_static(
            br#"{"visibilityTimeoutMs":30000,"maxAttempts":5,"maxBatchRecords":10}"#,
        ),
    };
    let changes = (0..consumers).map(|c| {
        let writer = writer.clone();
        let setup = setup.clone();
        async move {
            let s = s_of(c, streams);
            let name = format!("consumer-{c}");
            let configure = ConsumerChange::Configure {
                generation: 1,
                setup,
            };
            writer.change_consumer(s, &name, &configure).await?;
            let (_, change) = consumer_change(c, 1);
            writer.change_consumer(s, &name, &change).await
        }
    });
    for result in futures::stream::iter(changes)
        .buffer_unordered(256)
        .collect::<Vec<_>>()
        .await
    {
        result?;
    }
    Ok(())
}

async fn reopen_bench(args: &ReopenBench) -> Result<ReopenReport, BenchError> {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard_name = ShardName::new("reopen").expect("valid");
    let manual = ShardConfig {
        seal_bytes: u64::MAX,
        seal_objects: u64::MAX,
        seal_age: Duration::from_secs(24 * 3600),
        ..ShardConfig::default()
    };
    let writer = Shard::open(
        EngineEnv::production(memory.clone()),
        shard_name.clone(),
        InstanceId([1; 16]),
        manual.clone(),
    )
    .await?;
    let record = Bytes::from_static(&[b'r'; 100]);
    let creates = (0..args.streams).map(|s| {
        let writer = writer.clone();
        let record = record.clone();
        async move {
            writer.create_stream(stream(s), &cipher()).await?;
            writer
                .append(AppendRequest::new(stream(s), cipher(), vec![record]))
                .await
        }
    });
    for result in futures::stream::iter(creates)
        .buffer_unordered(256)
        .collect::<Vec<_>>()
        .await
    {
        result?;
    }
    configure_consumers(&writer, args.consumers, args.streams).await?;
    writer.seal_now().await?;
    // Exactly `wal_objects` objects after the seal: one awaited append each
    // (with a consumer change when there are consumers).
    for i in 0..args.wal_objects {
        let s = stream(i % args.streams.max(1));
        if args.consumers > 0 {
            let (name, change) = consumer_change(i % args.consumers, 2);
            let _ = writer.start_change_consumer(
                s_of(i % args.consumers, args.streams),
                &name,
                &change,
            )?;
        }
        writer
            .append(AppendRequest::new(s, cipher(), vec![record.clone()]))
            .await?;
    }
    writer.crash();

    let mut times = Vec::new();
    let mut replayed = 0;
    let mut requests = 0;
    for round in 0..args.rounds.max(1) {
        let (store, counts) = counted_store(
            memory.clone(),
            Latency {
                put: Duration::from_millis(args.latency_ms),
                get: Duration::from_millis(args.latency_ms),
                other: Duration::from_millis(args.latency_ms),
            },
        );
        let started = Instant::now();
        let shard = Shard::open(
            EngineEnv::production(store),
            shard_name.clone(),
            InstanceId([10 + round as u8; 16]),
            manual.clone(),
        )
        .await?;
        times.push(started.elapsed().as_secs_f64() * 1000.0);
        let report = shard.last_recovery();
        replayed = report.data_objects_applied;
        requests = counts.snapshot().total();
        shard.crash();
    }
    times.sort_by(f64::total_cmp);
    Ok(ReopenReport {
        streams: args.streams,
        consumers: args.consumers,
        wal_objects_replayed: replayed,
        latency_ms: args.latency_ms,
        open_ms_median: times[times.len() / 2],
        open_ms_max: times[times.len() - 1],
        requests_per_open: requests,
    })
}
