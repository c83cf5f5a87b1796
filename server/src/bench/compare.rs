//! `strata bench compare`: Strata against a SlateDB build of the same log
//! (`slatedb.rs`), in one process and one run, over the same in-process store
//! (`object_store`'s `InMemory` behind Strata's request-counting and latency
//! layers) with the same emulated latency. Every workload runs on both engines
//! in each round, and the rounds alternate which engine goes first; the report
//! gives each figure's median and spread (min–max) over the rounds.
//!
//! Peak RSS: a background thread samples `VmRSS` of `/proc/self/status` every
//! 5 ms during each run. Per run, the growth is the highest sample minus the
//! run's first sample; per engine, the report gives the highest growth and the
//! highest sample minus the process baseline (`VmRSS` before the first run).
//! The in-memory store's objects count, as they would not on a real store.
//! Memory an earlier run freed but the allocator kept can hide part of a later
//! run's growth (and inflate the figure over the baseline), which is one reason
//! the order alternates.

use clap::{Args, ValueEnum};

use super::BenchError;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    Strata,
    #[value(name = "slatedb")]
    #[serde(rename = "slatedb")]
    SlateDb,
}

#[derive(Args, Debug)]
#[cfg_attr(not(feature = "slatedb-baseline"), allow(dead_code))]
pub struct CompareBench {
    /// Measured seconds of each append run.
    #[arg(long, default_value_t = 4.0)]
    seconds: f64,
    /// Unmeasured warm-up before each append run, in seconds.
    #[arg(long, default_value_t = 1.0)]
    warmup_seconds: f64,
    /// Rounds: each runs every workload on both engines, alternating which goes first.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Emulated latency of every PUT, in milliseconds.
    #[arg(long, default_value_t = 25)]
    put_latency_ms: u64,
    /// Emulated latency of every GET, LIST and HEAD while reading back and
    /// re-opening, in milliseconds (the append runs delay PUTs only).
    #[arg(long, default_value_t = 25)]
    get_latency_ms: u64,
    /// Concurrent appenders of the append runs, comma separated (default
    /// 1,64,1024; with --sweep 1,4,16,64,256,1024).
    #[arg(long, value_delimiter = ',')]
    appenders: Vec<usize>,
    /// Payload bytes per record of the append and re-open runs.
    #[arg(long, default_value_t = 100)]
    record_bytes: usize,
    /// JSON records per append of the JSON batch run (0: no such run).
    #[arg(long, default_value_t = 100)]
    json_batch_records: usize,
    /// Appenders of the JSON batch run.
    #[arg(long, default_value_t = 64)]
    json_batch_appenders: usize,
    /// Streams written, then read back from a re-opened log (0: no catch-up run).
    #[arg(long, default_value_t = 8)]
    catchup_streams: usize,
    /// MiB of 1 KiB random records written to each catch-up stream.
    #[arg(long, default_value_t = 16)]
    catchup_mib_per_stream: usize,
    /// Appends (one record each, over 1,024 streams) before the re-open run
    /// (0: no re-open run).
    #[arg(long, default_value_t = 100_000)]
    reopen_appends: usize,
    /// Only the latency sweep: appends/s and p50/p99 ack latency at each
    /// appender count (for bench/plot_latency.py).
    #[arg(long)]
    sweep: bool,
    /// Run one engine only (for profiling).
    #[arg(long, value_enum)]
    only: Option<EngineKind>,
    /// Strata: WAL PUTs in flight at once (Strata's default).
    #[arg(long, default_value_t = strata_engine::ShardConfig::default().pipeline_depth)]
    strata_pipeline_depth: usize,
    /// SlateDB: WAL flush interval, in milliseconds (at most the PUT latency).
    #[arg(long, default_value_t = 1)]
    slatedb_flush_interval_ms: u64,
    /// SlateDB: memtable bytes at which it goes to an L0 SST (SlateDB's default).
    #[arg(long, default_value_t = 64 << 20)]
    slatedb_l0_sst_size_bytes: usize,
    /// SlateDB: manifest poll interval, in milliseconds.
    #[arg(long, default_value_t = 60_000)]
    slatedb_manifest_poll_interval_ms: u64,
    /// SlateDB: bytes each scan fetch reads ahead.
    #[arg(long, default_value_t = 4 << 20)]
    slatedb_scan_read_ahead_bytes: usize,
    /// SlateDB: block fetches a scan runs at once.
    #[arg(long, default_value_t = 8)]
    slatedb_scan_fetch_tasks: usize,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

#[cfg(not(feature = "slatedb-baseline"))]
pub fn compare(_args: &CompareBench) -> Result<(), BenchError> {
    Err(BenchError::BaselineNotBuilt)
}

#[cfg(feature = "slatedb-baseline")]
pub fn compare(args: &CompareBench) -> Result<(), BenchError> {
    baseline::compare(args)
}

#[cfg(feature = "slatedb-baseline")]
mod baseline {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use bytes::Bytes;
    use futures::StreamExt;
    use object_store::memory::InMemory;
    use object_store::ObjectStore;
    use strata_engine::shard::ChunkCache;
    use strata_engine::store::Latency;
    use strata_engine::{ReadLimits, ShardConfig, StreamRef};

    use super::super::slatedb::{ReadTotals, SlateLog, SlateTuning};
    use super::super::{
        bench_cipher, bench_streams, closed_loop, proc_status_bytes, totals_between, AppendOutcome,
        BenchError, BenchShard, CountedStore, LoadWindow,
    };
    use super::{CompareBench, EngineKind};

    /// Stream ids of every run end in this.
    const STREAM_SALT: [u8; 8] = *b"compare!";
    /// The shard (SlateDB: database) every run uses.
    const SHARD: &str = "bench";
    /// Streams at most in an append run (one per appender up to this).
    const STREAMS_MAX: usize = 1024;
    const CATCHUP_RECORD_BYTES: usize = 1024;
    const CATCHUP_RECORDS_PER_APPEND: usize = 64;
    /// Bytes one Strata catch-up read returns at most (as the HTTP layer reads).
    const READ_BYTES: usize = 4 << 20;
    const SWEEP_APPENDERS: [usize; 6] = [1, 4, 16, 64, 256, 1024];
    const DEFAULT_APPENDERS: [usize; 3] = [1, 64, 1024];
    const RSS_SAMPLE_EVERY: Duration = Duration::from_millis(5);

    /// Either engine, behind one interface.
    enum Log {
        Strata(BenchShard),
        SlateDb(SlateLog),
    }

    /// Whether a log is new or taken over.
    enum Start {
        /// A new log: Strata creates its streams (SlateDB streams exist once
        /// written).
        Create,
        /// A new owner of the log in the store, with Strata's on-disk chunk
        /// cache if given (the server's default has one).
        Reopen(Option<Arc<ChunkCache>>),
    }

    impl Log {
        async fn open(
            kind: EngineKind,
            context: &Context<'_>,
            store: Arc<dyn ObjectStore>,
            streams: &[StreamRef],
            start: Start,
        ) -> Result<Log, BenchError> {
            Ok(match kind {
                EngineKind::Strata => {
                    let (create, chunk_cache) = match start {
                        Start::Create => (true, None),
                        Start::Reopen(cache) => (false, cache),
                    };
                    let config = ShardConfig {
                        chunk_cache,
                        pipeline_depth: context.args.strata_pipeline_depth,
                        ..ShardConfig::default()
                    };
                    Log::Strata(BenchShard::open(store, config, streams.to_vec(), create).await?)
                }
                EngineKind::SlateDb => Log::SlateDb(
                    SlateLog::open(store, SHARD, streams, bench_cipher(), &context.tuning).await?,
                ),
            })
        }

        async fn append(&self, stream: usize, records: Vec<Bytes>) -> AppendOutcome {
            match self {
                Log::Strata(bench) => {
                    AppendOutcome::of_engine(&bench.append(stream, records).await)
                }
                Log::SlateDb(log) => match log.append(stream, &records).await {
                    Ok(_) => AppendOutcome::Acked,
                    Err(_) => AppendOutcome::Failed,
                },
            }
        }

        /// Reads stream number `stream` start to end.
        async fn read_all(&self, stream: usize) -> Result<ReadTotals, BenchError> {
            match self {
                Log::SlateDb(log) => log.read_all(stream, |_| {}).await,
                Log::Strata(bench) => {
                    let stream = bench.streams[stream % bench.streams.len()];
                    let limits = ReadLimits {
                        max_records: usize::MAX,
                        max_bytes: READ_BYTES,
                    };
                    let mut totals = ReadTotals::default();
                    let mut from = 0;
                    loop {
                        let batch = bench
                            .shard
                            .read(&stream, from, limits, &bench.cipher, None)
                            .await?;
                        batch.records.iter().for_each(|record| totals.add(record));
                        from = batch.next_offset;
                        if batch.up_to_date() {
                            return Ok(totals);
                        }
                    }
                }
            }
        }

        /// Records in all streams, by their tails.
        async fn records_total(&self) -> u64 {
            match self {
                Log::Strata(bench) => bench
                    .streams
                    .iter()
                    .filter_map(|s| bench.shard.stream_info(s))
                    .map(|info| info.tail.next_offset)
                    .sum(),
                Log::SlateDb(log) => log.records_total().await,
            }
        }

        async fn close(&self) -> Result<(), BenchError> {
            match self {
                Log::Strata(bench) => {
                    bench.shard.shutdown().await;
                    Ok(())
                }
                Log::SlateDb(log) => log.close().await,
            }
        }

        async fn crash(&self) -> Result<(), BenchError> {
            match self {
                Log::Strata(bench) => {
                    bench.shard.crash();
                    Ok(())
                }
                Log::SlateDb(log) => log.crash().await,
            }
        }
    }

    /// Samples this process's RSS in the background until stopped.
    struct RssSampler {
        start_bytes: u64,
        peak_bytes: Arc<AtomicU64>,
        stop: Arc<AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl RssSampler {
        fn start() -> RssSampler {
            let start_bytes = proc_status_bytes("VmRSS:");
            let peak_bytes = Arc::new(AtomicU64::new(start_bytes));
            let stop = Arc::new(AtomicBool::new(false));
            let thread = {
                let peak_bytes = peak_bytes.clone();
                let stop = stop.clone();
                std::thread::Builder::new()
                    .name("rss-sampler".into())
                    .spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            peak_bytes.fetch_max(proc_status_bytes("VmRSS:"), Ordering::Relaxed);
                            std::thread::sleep(RSS_SAMPLE_EVERY);
                        }
                    })
                    .ok()
            };
            RssSampler {
                start_bytes,
                peak_bytes,
                stop,
                thread,
            }
        }

        fn stop(mut self) -> RssPeak {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
            let last = proc_status_bytes("VmRSS:");
            RssPeak {
                start_bytes: self.start_bytes,
                peak_bytes: self.peak_bytes.load(Ordering::Relaxed).max(last),
            }
        }
    }

    /// What an [`RssSampler`] saw.
    #[derive(Debug, Clone, Copy)]
    struct RssPeak {
        start_bytes: u64,
        peak_bytes: u64,
    }

    impl RssPeak {
        fn growth_bytes(&self) -> u64 {
            self.peak_bytes.saturating_sub(self.start_bytes)
        }
    }

    /// A workload both engines run.
    #[derive(Debug, Clone)]
    enum Workload {
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
        fn label(&self) -> String {
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

        fn appenders(&self) -> Option<usize> {
            match self {
                Workload::Appends { appenders, .. } => Some(*appenders),
                Workload::CatchUp | Workload::Reopen => None,
            }
        }
    }

    fn bytes_of(records: &[Bytes]) -> usize {
        records.iter().map(Bytes::len).sum()
    }

    /// One figure a run produced.
    #[derive(Debug, Clone, Copy)]
    struct Metric {
        name: &'static str,
        higher_is_better: bool,
        value: f64,
    }

    impl Metric {
        fn up(name: &'static str, value: f64) -> Metric {
            Metric {
                name,
                higher_is_better: true,
                value,
            }
        }

        fn down(name: &'static str, value: f64) -> Metric {
            Metric {
                name,
                higher_is_better: false,
                value,
            }
        }
    }

    const RSS_METRIC: &str = "peak RSS above the run's start, MiB";

    /// Median and range of one figure over the rounds.
    #[derive(Debug, Clone, Copy, serde::Serialize)]
    struct Spread {
        median: f64,
        min: f64,
        max: f64,
        runs: usize,
    }

    impl Spread {
        fn of(values: &[f64]) -> Option<Spread> {
            let mut sorted = values.to_vec();
            sorted.sort_by(f64::total_cmp);
            let n = sorted.len();
            let median = match n {
                0 => return None,
                _ if n % 2 == 1 => sorted[n / 2],
                _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
            };
            Some(Spread {
                median,
                min: sorted[0],
                max: sorted[n - 1],
                runs: n,
            })
        }
    }

    /// One line of the comparison.
    #[derive(Debug, serde::Serialize)]
    struct Row {
        workload: String,
        appenders: Option<usize>,
        metric: &'static str,
        higher_is_better: bool,
        strata: Option<Spread>,
        slatedb: Option<Spread>,
        /// Strata's median over SlateDB's.
        strata_over_slatedb: Option<f64>,
    }

    #[derive(Debug, serde::Serialize)]
    struct EnginePeak {
        engine: EngineKind,
        /// Highest RSS sample during the engine's runs minus the RSS before
        /// the first run of the process.
        rss_peak_above_process_baseline_bytes: u64,
        /// Highest growth within one run (peak minus the run's first sample).
        rss_peak_above_run_start_bytes: u64,
    }

    #[derive(Debug, serde::Serialize)]
    struct CompareReport {
        mode: &'static str,
        rounds: usize,
        measured_s: f64,
        warmup_s: f64,
        put_latency_ms: u64,
        get_latency_ms: u64,
        store: &'static str,
        slatedb_version: &'static str,
        slatedb: SlateTuning,
        strata_pipeline_depth: usize,
        rows: Vec<Row>,
        rss_process_baseline_bytes: u64,
        peak_rss: Vec<EnginePeak>,
        wall_s: f64,
    }

    /// The runs of one workload, per engine.
    #[derive(Default)]
    struct Samples {
        strata: Vec<Vec<Metric>>,
        slatedb: Vec<Vec<Metric>>,
    }

    impl Samples {
        fn of(&mut self, kind: EngineKind) -> &mut Vec<Vec<Metric>> {
            match kind {
                EngineKind::Strata => &mut self.strata,
                EngineKind::SlateDb => &mut self.slatedb,
            }
        }
    }

    /// Highest RSS figures of one engine over its runs.
    #[derive(Debug, Default, Clone, Copy)]
    struct PeakTracker {
        above_baseline_bytes: u64,
        growth_bytes: u64,
    }

    struct Context<'a> {
        args: &'a CompareBench,
        tuning: SlateTuning,
        window: LoadWindow,
    }

    pub fn compare(args: &CompareBench) -> Result<(), BenchError> {
        if args.rounds == 0 || args.seconds <= 0.0 || args.warmup_seconds < 0.0 {
            return Err(BenchError::Usage(
                "rounds and seconds must be positive".into(),
            ));
        }
        if args.appenders.contains(&0) || args.record_bytes == 0 {
            return Err(BenchError::Usage(
                "appenders and record bytes must be positive".into(),
            ));
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        let report = runtime.block_on(run(args))?;
        if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            print_report(&report);
        }
        Ok(())
    }

    fn workloads(args: &CompareBench) -> Vec<Workload> {
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

    async fn run(args: &CompareBench) -> Result<CompareReport, BenchError> {
        let started = Instant::now();
        let context = Context {
            args,
            tuning: SlateTuning {
                flush_interval_ms: args.slatedb_flush_interval_ms,
                l0_sst_size_bytes: args.slatedb_l0_sst_size_bytes,
                manifest_poll_interval_ms: args.slatedb_manifest_poll_interval_ms,
                scan_read_ahead_bytes: args.slatedb_scan_read_ahead_bytes,
                scan_fetch_tasks: args.slatedb_scan_fetch_tasks,
            },
            window: LoadWindow {
                warmup: Duration::from_secs_f64(args.warmup_seconds),
                measured: Duration::from_secs_f64(args.seconds),
            },
        };
        let workloads = workloads(args);
        let mut samples: Vec<Samples> = workloads.iter().map(|_| Samples::default()).collect();
        let baseline_bytes = proc_status_bytes("VmRSS:");
        let mut peaks = [PeakTracker::default(); 2];
        for round in 0..args.rounds {
            let order = if round % 2 == 0 {
                [EngineKind::Strata, EngineKind::SlateDb]
            } else {
                [EngineKind::SlateDb, EngineKind::Strata]
            };
            for (workload, samples) in workloads.iter().zip(samples.iter_mut()) {
                for kind in order {
                    if args.only.is_some_and(|only| only != kind) {
                        continue;
                    }
                    eprintln!(
                        "[compare] round {}/{}: {:?}, {}",
                        round + 1,
                        args.rounds,
                        kind,
                        workload.label()
                    );
                    let rss = RssSampler::start();
                    let mut metrics = run_workload(&context, kind, workload).await?;
                    let peak = rss.stop();
                    let tracker = &mut peaks[kind as usize];
                    tracker.growth_bytes = tracker.growth_bytes.max(peak.growth_bytes());
                    tracker.above_baseline_bytes = tracker
                        .above_baseline_bytes
                        .max(peak.peak_bytes.saturating_sub(baseline_bytes));
                    metrics.push(Metric::down(
                        RSS_METRIC,
                        peak.growth_bytes() as f64 / (1 << 20) as f64,
                    ));
                    for metric in &metrics {
                        eprintln!("[compare]   {:<36} {:>12.2}", metric.name, metric.value);
                    }
                    samples.of(kind).push(metrics);
                }
            }
        }
        let mut rows = Vec::new();
        for (workload, samples) in workloads.iter().zip(&samples) {
            let names: Vec<Metric> = samples
                .strata
                .first()
                .or(samples.slatedb.first())
                .cloned()
                .unwrap_or_default();
            for (index, metric) in names.iter().enumerate() {
                let values = |runs: &Vec<Vec<Metric>>| -> Vec<f64> {
                    runs.iter()
                        .filter_map(|m| m.get(index))
                        .map(|m| m.value)
                        .collect()
                };
                let strata = Spread::of(&values(&samples.strata));
                let slatedb = Spread::of(&values(&samples.slatedb));
                let ratio = match (strata, slatedb) {
                    (Some(a), Some(b)) if b.median != 0.0 => Some(a.median / b.median),
                    _ => None,
                };
                rows.push(Row {
                    workload: workload.label(),
                    appenders: workload.appenders(),
                    metric: metric.name,
                    higher_is_better: metric.higher_is_better,
                    strata,
                    slatedb,
                    strata_over_slatedb: ratio,
                });
            }
        }
        Ok(CompareReport {
            mode: if args.sweep { "sweep" } else { "compare" },
            rounds: args.rounds,
            measured_s: args.seconds,
            warmup_s: args.warmup_seconds,
            put_latency_ms: args.put_latency_ms,
            get_latency_ms: args.get_latency_ms,
            store: "object_store InMemory behind request counting and an emulated latency",
            slatedb_version: "0.18",
            slatedb: context.tuning,
            strata_pipeline_depth: args.strata_pipeline_depth,
            rows,
            rss_process_baseline_bytes: baseline_bytes,
            peak_rss: [EngineKind::Strata, EngineKind::SlateDb]
                .into_iter()
                .map(|engine| EnginePeak {
                    engine,
                    rss_peak_above_process_baseline_bytes: peaks[engine as usize]
                        .above_baseline_bytes,
                    rss_peak_above_run_start_bytes: peaks[engine as usize].growth_bytes,
                })
                .collect(),
            wall_s: started.elapsed().as_secs_f64(),
        })
    }

    async fn run_workload(
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

    fn put_latency(context: &Context<'_>) -> Latency {
        Latency {
            put: Duration::from_millis(context.args.put_latency_ms),
            ..Latency::default()
        }
    }

    fn all_latency(context: &Context<'_>) -> Latency {
        Latency {
            put: Duration::from_millis(context.args.put_latency_ms),
            get: Duration::from_millis(context.args.get_latency_ms),
            other: Duration::from_millis(context.args.get_latency_ms),
        }
    }

    fn fresh_store() -> Arc<dyn ObjectStore> {
        Arc::new(InMemory::new())
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

    async fn run_catchup(
        context: &Context<'_>,
        kind: EngineKind,
    ) -> Result<Vec<Metric>, BenchError> {
        let memory = fresh_store();
        let streams = bench_streams(context.args.catchup_streams, STREAM_SALT);
        let appends = catchup_appends(context);
        // Write without latency (only the read is measured), then close cleanly.
        let writer =
            Arc::new(Log::open(kind, context, memory.clone(), &streams, Start::Create).await?);
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
                            let slot =
                                (stream * 7 + append * CATCHUP_RECORDS_PER_APPEND + r) % slots;
                            pool.slice(
                                slot * CATCHUP_RECORD_BYTES..(slot + 1) * CATCHUP_RECORD_BYTES,
                            )
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

    async fn run_reopen(
        context: &Context<'_>,
        kind: EngineKind,
    ) -> Result<Vec<Metric>, BenchError> {
        let memory = fresh_store();
        let total = context.args.reopen_appends;
        let streams = bench_streams(total.min(STREAMS_MAX), STREAM_SALT);
        let writer =
            Arc::new(Log::open(kind, context, memory.clone(), &streams, Start::Create).await?);
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

    fn format_spread(spread: Option<Spread>) -> String {
        match spread {
            None => "-".into(),
            Some(s) if s.runs == 1 => format_value(s.median),
            Some(s) => format!(
                "{} ({}–{})",
                format_value(s.median),
                format_value(s.min),
                format_value(s.max)
            ),
        }
    }

    fn format_value(value: f64) -> String {
        let magnitude = value.abs();
        if magnitude >= 1000.0 {
            let whole = value.round() as i64;
            let digits = whole.unsigned_abs().to_string();
            let mut grouped = String::new();
            for (i, c) in digits.chars().enumerate() {
                if i > 0 && (digits.len() - i).is_multiple_of(3) {
                    grouped.push(',');
                }
                grouped.push(c);
            }
            if whole < 0 {
                format!("-{grouped}")
            } else {
                grouped
            }
        } else if magnitude >= 100.0 {
            format!("{value:.0}")
        } else if magnitude >= 10.0 {
            format!("{value:.1}")
        } else {
            format!("{value:.2}")
        }
    }

    fn print_report(report: &CompareReport) {
        println!(
            "strata bench compare ({}): {} round(s), {} s measured after {} s warm-up per append run, \
             PUT latency {} ms, GET latency {} ms on reads and re-opens; {}",
            report.mode,
            report.rounds,
            report.measured_s,
            report.warmup_s,
            report.put_latency_ms,
            report.get_latency_ms,
            report.store
        );
        println!(
            "SlateDB {}: flush_interval {} ms, l0_sst_size_bytes {}, manifest_poll_interval {} ms, \
             scans: read-ahead {} B, {} fetch tasks, DurabilityLevel::Remote; Strata: ShardConfig defaults, pipeline depth {}",
            report.slatedb_version,
            report.slatedb.flush_interval_ms,
            report.slatedb.l0_sst_size_bytes,
            report.slatedb.manifest_poll_interval_ms,
            report.slatedb.scan_read_ahead_bytes,
            report.slatedb.scan_fetch_tasks,
            report.strata_pipeline_depth
        );
        println!();
        println!("| workload | metric | Strata, median (min–max) | SlateDB, median (min–max) | Strata ÷ SlateDB |");
        println!("| --- | --- | ---: | ---: | ---: |");
        for row in &report.rows {
            let arrow = if row.higher_is_better { "↑" } else { "↓" };
            println!(
                "| {} | {} {arrow} | {} | {} | {} |",
                row.workload,
                row.metric,
                format_spread(row.strata),
                format_spread(row.slatedb),
                row.strata_over_slatedb
                    .map_or("-".into(), |r| format!("{r:.2}×"))
            );
        }
        println!();
        let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
        for peak in &report.peak_rss {
            println!(
                "peak RSS, {:?}: {:.0} MiB above the process baseline ({:.0} MiB before the first run), \
                 {:.0} MiB above the start of one run (highest over its runs)",
                peak.engine,
                mib(peak.rss_peak_above_process_baseline_bytes),
                mib(report.rss_process_baseline_bytes),
                mib(peak.rss_peak_above_run_start_bytes)
            );
        }
        println!("wall time {:.0} s", report.wall_s);
    }

    #[cfg(test)]
    mod tests {
        use super::*;

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

        #[test]
        fn spreads_and_formats() {
            let spread = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
            assert_eq!((spread.median, spread.min, spread.max), (2.0, 1.0, 3.0));
            assert_eq!(Spread::of(&[1.0, 2.0]).unwrap().median, 1.5);
            assert!(Spread::of(&[]).is_none());
            assert_eq!(format_value(36_469.4), "36,469");
            assert_eq!(format_value(25.654), "25.7");
            assert_eq!(format_value(1.234), "1.23");
        }
    }
}
