//! The command line of `strata bench compare` (its flags are its
//! documentation: `strata bench compare --help`).

use clap::{Args, ValueEnum};

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
    pub(super) seconds: f64,
    /// Unmeasured warm-up before each append run, in seconds.
    #[arg(long, default_value_t = 1.0)]
    pub(super) warmup_seconds: f64,
    /// Rounds: each runs every workload on both engines, alternating which goes first.
    #[arg(long, default_value_t = 3)]
    pub(super) rounds: usize,
    /// Emulated latency of every PUT, in milliseconds.
    #[arg(long, default_value_t = 25)]
    pub(super) put_latency_ms: u64,
    /// Emulated latency of every GET, LIST and HEAD while reading back and
    /// re-opening, in milliseconds (the append runs delay PUTs only).
    #[arg(long, default_value_t = 25)]
    pub(super) get_latency_ms: u64,
    /// Concurrent appenders of the append runs, comma separated (default
    /// 1,64,1024; with --sweep 1,4,16,64,256,1024).
    #[arg(long, value_delimiter = ',')]
    pub(super) appenders: Vec<usize>,
    /// Payload bytes per record of the append and re-open runs.
    #[arg(long, default_value_t = 100)]
    pub(super) record_bytes: usize,
    /// JSON records per append of the JSON batch run (0: no such run).
    #[arg(long, default_value_t = 100)]
    pub(super) json_batch_records: usize,
    /// Appenders of the JSON batch run.
    #[arg(long, default_value_t = 64)]
    pub(super) json_batch_appenders: usize,
    /// Streams written, then read back from a re-opened log (0: no catch-up run).
    #[arg(long, default_value_t = 8)]
    pub(super) catchup_streams: usize,
    /// MiB of 1 KiB random records written to each catch-up stream.
    #[arg(long, default_value_t = 16)]
    pub(super) catchup_mib_per_stream: usize,
    /// Appends (one record each, over 1,024 streams) before the re-open run
    /// (0: no re-open run).
    #[arg(long, default_value_t = 100_000)]
    pub(super) reopen_appends: usize,
    /// Only the latency sweep: appends/s and p50/p99 ack latency at each
    /// appender count (for bench/plot_latency.py).
    #[arg(long)]
    pub(super) sweep: bool,
    /// Run one engine only (for profiling).
    #[arg(long, value_enum)]
    pub(super) only: Option<EngineKind>,
    /// Strata: WAL PUTs in flight at once (Strata's default).
    #[arg(long, default_value_t = strata_engine::ShardConfig::default().pipeline_depth)]
    pub(super) strata_pipeline_depth: usize,
    /// SlateDB: WAL flush interval, in milliseconds (at most the PUT latency).
    #[arg(long, default_value_t = 1)]
    pub(super) slatedb_flush_interval_ms: u64,
    /// SlateDB: memtable bytes at which it goes to an L0 SST (SlateDB's default).
    #[arg(long, default_value_t = 64 << 20)]
    pub(super) slatedb_l0_sst_size_bytes: usize,
    /// SlateDB: manifest poll interval, in milliseconds.
    #[arg(long, default_value_t = 60_000)]
    pub(super) slatedb_manifest_poll_interval_ms: u64,
    /// SlateDB: bytes each scan fetch reads ahead.
    #[arg(long, default_value_t = 4 << 20)]
    pub(super) slatedb_scan_read_ahead_bytes: usize,
    /// SlateDB: block fetches a scan runs at once.
    #[arg(long, default_value_t = 8)]
    pub(super) slatedb_scan_fetch_tasks: usize,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub(super) json: bool,
}
