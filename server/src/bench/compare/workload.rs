//! The workloads both engines run, and one run of each: closed-loop appends
//! (plain records or JSON batches), a catch-up read through a re-opened log,
//! and a re-open after many appends. Every run checks what it read back.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use object_store::ObjectStore;
use strata_engine::shard::ChunkCache;

use super::args::{CompareBench, EngineKind};
use super::context::{all_latency, fresh_store, put_latency, Context, SHARD, STREAM_SALT};
use super::log::{Log, Start};
use super::report::Metric;
use crate::bench::error::BenchError;
use crate::bench::harness::{
    bench_streams, closed_loop, totals_between, AppendOutcome, CountedStore,
};
use crate::bench::slatedb::ReadTotals;

/// Streams at most in an append run (one per appender up to this).
const STREAMS_MAX: usize = 1024;
const CATCHUP_RECORD_BYTES: usize = 1024;
const CATCHUP_RECORDS_PER_APPEND: usize = 64;
const SWEEP_APPENDERS: [usize; 6] = [1, 4, 16, 64, 256, 1024];
const DEFAULT_APPENDERS: [usize; 3] = [1, 64, 1024];

/// A workload both engines run.
#[derive(Debug, Clone)]
pub(super) enum Workload {
    /// Closed-loop appends of `records` per append, one stream per appender.
    Appends {
        appenders: usize,
        records: Vec<Bytes>,
        json: bool,
    },
    /// Write streams, re-open the log, read every stream back.
    CatchUp,
    /// Write many appends, drop the owner, time a new owner's open.
    Reopen,
}

impl Workload {
    pub(super) fn label(&self) -> String {
        match self {
            Workload::Appends {
                appenders,
                records,
                json: false,
            } => format!(
                "appends, {appenders} appenders, {} B records",
                bytes_of(records)
            ),
            Workload::Appends {
                appenders,
                records,
                json: true,
            } => format!("JSON batches of {}, {appenders} appenders", records.len()),
            Workload::CatchUp => "catch-up read".into(),
            Workload::Reopen => "re-open".into(),
        }
    }

    pub(super) fn appenders(&self) -> Option<usize> {
        match self {
            Workload::Appends { appenders, .. } => Some(*appenders),
            Workload::CatchUp | Workload::Reopen => None,
        }
    }
}

fn bytes_of(records: &[Bytes]) -> usize {
    records.iter().map(Bytes::len).sum()
}

pub(super) fn workloads(args: &CompareBench) -> Vec<Workload> {
    let appenders = match (args.appenders.is_empty(), args.sweep) {
        (false, _) => args.appenders.clone(),
        (true, true) => SWEEP_APPENDERS.to_vec(),
        (true, false) => DEFAULT_APPENDERS.to_vec(),
    };
    let record = Bytes::from(vec![b'x'; args.record_bytes]);
    let mut workloads: Vec<Workload> = appenders
        .into_iter()
        .map(|appenders| Workload::Appends {
            appenders,
            records: vec![record.clone()],
            json: false,
        })
        .collect();
    if args.sweep {
        return workloads;
    }
    if args.json_batch_records > 0 {
        workloads.push(Workload::Appends {
            appenders: args.json_batch_appenders.max(1),
            records: json_records(args.json_batch_records),
            json: true,
        });
    }
    if args.catchup_streams > 0 && args.catchup_mib_per_stream > 0 {
        workloads.push(Workload::CatchUp);
    }
    if args.reopen_appends > 0 {
        workloads.push(Workload::Reopen);
    }
    workloads
}

/// Small distinct JSON documents, as a JSON-array append carries them.
fn json_records(count: usize) -> Vec<Bytes> {
    (0..count)
        .map(|i| {
            Bytes::from(format!(
                r#"{{"user":"u{:05}","event":"click","page":"/items/{}","seq":{i}}}"#,
                i * 7919 % 100_000,
                i % 37
            ))
        })
        .collect()
}

pub(super) async fn run_workload(
    context: &Context<'_>,
    kind: EngineKind,
    workload: &Workload,
) -> Result<Vec<Metric>, BenchError> {
    match workload {
        Workload::Appends {
            appenders,
            records,
            json,
        } => run_appends(context, kind, *appenders, records, *json).await,
        Workload::CatchUp => run_catchup(context, kind).await,
        Workload::Reopen => run_reopen(context, kind).await,
    }
}

async fn run_appends(
    context: &Context<'_>,
    kind: EngineKind,
    appenders: usize,
    records: &[Bytes],
    json: bool,
) -> Result<Vec<Metric>, BenchError> {
    let memory = fresh_store();
    let counted = CountedStore::new(memory.clone(), put_latency(context));
    let streams = bench_streams(appenders.min(STREAMS_MAX), STREAM_SALT);
    let log = Arc::new(
        Log::open(
            kind,
            context,
            counted.store.clone(),
            &streams,
            Start::Create,
        )
        .await?,
    );
    let driver = log.clone();
    let records = records.to_vec();
    let per_append = records.len() as f64;
    // WAL objects the store holds that were PUT from the window's start on
    // (an object's time is when its PUT ended, one PUT latency after it began).
    let wal_from = chrono::Utc::now()
        + context.window.warmup
        + Duration::from_millis(context.args.put_latency_ms);
    let load = closed_loop(
        appenders,
        context.window,
        &counted.counts,
        move |appender| {
            let log = driver.clone();
            let records = records.clone();
            async move { log.append(appender, records).await }
        },
    )
    .await?;
    let wal_puts = wal_objects_since(&memory, wal_from).await?;
    log.close().await?;
    let per_1000 = |requests: u64| match load.appends() {
        0 => 0.0,
        appends => requests as f64 * 1000.0 / appends as f64,
    };
    let mut metrics = vec![Metric::up("appends/s", load.appends_per_sec())];
    if json {
        metrics.push(Metric::up("entries/s", load.appends_per_sec() * per_append));
    }
    metrics.extend([
        Metric::down("ack latency p50, ms", load.latency_ms_at(0.50)),
        Metric::down("ack latency p99, ms", load.latency_ms_at(0.99)),
        Metric::down("ack latency max, ms", load.latency_ms_max()),
        Metric::down("PUTs per 1,000 appends", per_1000(load.requests.puts)),
        Metric::down("  of which WAL objects", per_1000(wal_puts)),
        Metric::down("GETs per 1,000 appends", per_1000(load.requests.gets)),
        Metric::down("failed appends", load.errors as f64),
    ]);
    Ok(metrics)
}

/// WAL objects of the shard (both engines keep them under
/// `shards/<shard>/wal/`) written at or after `since`.
async fn wal_objects_since(
    memory: &Arc<dyn ObjectStore>,
    since: chrono::DateTime<chrono::Utc>,
) -> Result<u64, BenchError> {
    let prefix = object_store::path::Path::from(format!("shards/{SHARD}/wal"));
    let mut listing = memory.list(Some(&prefix));
    let mut count = 0;
    while let Some(meta) = listing.next().await {
        let meta = meta.map_err(|e| BenchError::Verify(format!("listing WAL objects: {e}")))?;
        if meta.last_modified >= since {
            count += 1;
        }
    }
    Ok(count)
}

/// Waits for every task; the first failure wins.
async fn join_all(
    mut tasks: tokio::task::JoinSet<Result<(), BenchError>>,
) -> Result<(), BenchError> {
    while let Some(joined) = tasks.join_next().await {
        joined??;
    }
    Ok(())
}

/// Incompressible records: consecutive slices of a xorshift stream.
fn noise(len: usize, seed: u64) -> Bytes {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(&state.to_le_bytes());
    }
    out.truncate(len);
    Bytes::from(out)
}

/// A catch-up stream's appends: `CATCHUP_RECORDS_PER_APPEND` records each.
fn catchup_appends(context: &Context<'_>) -> usize {
    (context.args.catchup_mib_per_stream << 20)
        .div_ceil(CATCHUP_RECORD_BYTES * CATCHUP_RECORDS_PER_APPEND)
}

fn chunk_cache_dir() -> PathBuf {
    std::env::temp_dir().join(format!("strata-compare-cache-{}", std::process::id()))
}

async fn run_catchup(context: &Context<'_>, kind: EngineKind) -> Result<Vec<Metric>, BenchError> {
    let memory = fresh_store();
    let streams = bench_streams(context.args.catchup_streams, STREAM_SALT);
    let appends = catchup_appends(context);
    // Write without latency (only the read is measured), then close cleanly.
    let writer = Arc::new(Log::open(kind, context, memory.clone(), &streams, Start::Create).await?);
    let pool = noise(32 << 20, 0x9e37_79b9_7f4a_7c15);
    let mut tasks = tokio::task::JoinSet::new();
    for stream in 0..streams.len() {
        let writer = writer.clone();
        let pool = pool.clone();
        tasks.spawn(async move {
            let slots = pool.len() / CATCHUP_RECORD_BYTES;
            for append in 0..appends {
                let records: Vec<Bytes> = (0..CATCHUP_RECORDS_PER_APPEND)
                    .map(|r| {
                        let slot = (stream * 7 + append * CATCHUP_RECORDS_PER_APPEND + r) % slots;
                        pool.slice(slot * CATCHUP_RECORD_BYTES..(slot + 1) * CATCHUP_RECORD_BYTES)
                    })
                    .collect();
                if writer.append(stream, records).await != AppendOutcome::Acked {
                    return Err(BenchError::Verify(format!(
                        "catch-up write to stream {stream} failed"
                    )));
                }
            }
            Ok(())
        });
    }
    join_all(tasks).await?;
    writer.close().await?;
    drop(writer);

    let counted = CountedStore::new(memory, all_latency(context));
    let cache_dir = chunk_cache_dir();
    let chunk_cache = match kind {
        EngineKind::Strata => Some(Arc::new(ChunkCache::new(cache_dir.clone(), 8 << 30)?)),
        EngineKind::SlateDb => None,
    };
    let reader = Arc::new(
        Log::open(
            kind,
            context,
            counted.store.clone(),
            &streams,
            Start::Reopen(chunk_cache),
        )
        .await?,
    );
    let before = counted.counts.snapshot();
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for stream in 0..streams.len() {
        let reader = reader.clone();
        tasks.spawn(async move { reader.read_all(stream).await });
    }
    let mut totals = ReadTotals::default();
    while let Some(joined) = tasks.join_next().await {
        let read = joined??;
        totals.records += read.records;
        totals.payload_bytes += read.payload_bytes;
    }
    let seconds = started.elapsed().as_secs_f64();
    let requests = totals_between(before, counted.counts.snapshot());
    reader.close().await?;
    let _ = std::fs::remove_dir_all(&cache_dir);
    let expected = (streams.len() * appends * CATCHUP_RECORDS_PER_APPEND) as u64;
    if totals.records != expected {
        return Err(BenchError::Verify(format!(
            "{kind:?} read back {} of {expected} records",
            totals.records
        )));
    }
    Ok(vec![
        Metric::up(
            "read MB/s (decrypted payload)",
            totals.payload_bytes as f64 / 1e6 / seconds,
        ),
        Metric::down("read GETs", requests.gets as f64),
        Metric::down(
            "data read, MiB",
            totals.payload_bytes as f64 / (1 << 20) as f64,
        ),
    ])
}

async fn run_reopen(context: &Context<'_>, kind: EngineKind) -> Result<Vec<Metric>, BenchError> {
    let memory = fresh_store();
    let total = context.args.reopen_appends;
    let streams = bench_streams(total.min(STREAMS_MAX), STREAM_SALT);
    let writer = Arc::new(Log::open(kind, context, memory.clone(), &streams, Start::Create).await?);
    let record = Bytes::from(vec![b'r'; context.args.record_bytes]);
    let writers = streams.len();
    let mut tasks = tokio::task::JoinSet::new();
    for first in 0..writers {
        let writer = writer.clone();
        let record = record.clone();
        tasks.spawn(async move {
            for append in (first..total).step_by(writers) {
                if writer.append(append, vec![record.clone()]).await != AppendOutcome::Acked {
                    return Err(BenchError::Verify(format!("re-open write {append} failed")));
                }
            }
            Ok(())
        });
    }
    join_all(tasks).await?;
    writer.crash().await?;
    drop(writer);

    let counted = CountedStore::new(memory, all_latency(context));
    let started = Instant::now();
    let reader = Log::open(
        kind,
        context,
        counted.store.clone(),
        &streams,
        Start::Reopen(None),
    )
    .await?;
    let open_ms = started.elapsed().as_secs_f64() * 1000.0;
    let requests = counted.counts.snapshot().total();
    let recovered = reader.records_total().await;
    reader.crash().await?;
    if recovered != total as u64 {
        return Err(BenchError::Verify(format!(
            "{kind:?} re-opened with {recovered} of {total} records"
        )));
    }
    Ok(vec![
        Metric::down("open, ms", open_ms),
        Metric::down("store requests during the open", requests as f64),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::harness::bench_cipher;
    use crate::bench::slatedb::{SlateLog, SlateTuning};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slatedb_baseline_appends_and_reads_back() {
        let memory = fresh_store();
        let streams = bench_streams(3, STREAM_SALT);
        let tuning = SlateTuning {
            flush_interval_ms: 1,
            l0_sst_size_bytes: 64 << 10,
            manifest_poll_interval_ms: 60_000,
            scan_read_ahead_bytes: 1 << 20,
            scan_fetch_tasks: 2,
        };
        let log = SlateLog::open(memory.clone(), SHARD, &streams, bench_cipher(), &tuning)
            .await
            .unwrap();
        let mut expected: Vec<Vec<Bytes>> = vec![Vec::new(); streams.len()];
        for append in 0..30usize {
            let stream = append % streams.len();
            let records: Vec<Bytes> = (0..=append % 4)
                .map(|r| Bytes::from(format!("stream {stream} append {append} record {r}")))
                .collect();
            let range = log.append(stream, &records).await.unwrap();
            assert_eq!(range.first, expected[stream].len() as u64);
            assert_eq!(range.next - range.first, records.len() as u64);
            expected[stream].extend(records);
        }
        // A big append spans several pages, each under its own key.
        let big: Vec<Bytes> = (0..200).map(|i| noise(1000, i + 1)).collect();
        log.append(0, &big).await.unwrap();
        expected[0].extend(big);
        log.crash().await.unwrap();

        // A new owner replays the WAL, loads the tails and reads everything back.
        let log = SlateLog::open(memory, SHARD, &streams, bench_cipher(), &tuning)
            .await
            .unwrap();
        assert_eq!(
            log.records_total().await,
            expected.iter().map(|r| r.len() as u64).sum::<u64>()
        );
        for (stream, want) in expected.iter().enumerate() {
            let mut got = Vec::new();
            let totals = log
                .read_all(stream, |record| got.push(record))
                .await
                .unwrap();
            assert_eq!(totals.records, want.len() as u64);
            let offsets: Vec<u64> = got.iter().map(|r| r.offset).collect();
            assert_eq!(offsets, (0..want.len() as u64).collect::<Vec<_>>());
            let payloads: Vec<Bytes> = got.into_iter().map(|r| r.payload).collect();
            assert_eq!(&payloads, want);
        }
        let total = log.records_total().await;
        let next = log
            .append(2, &[Bytes::from_static(b"after reopen")])
            .await
            .unwrap();
        assert_eq!(next.first, expected[2].len() as u64);
        assert_eq!(log.records_total().await, total + 1);
        log.close().await.unwrap();
    }
}
