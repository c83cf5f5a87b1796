//! The log under test, behind one interface for both engines: Strata's shard
//! or the SlateDB baseline, opened new or taken over by a new owner, appended
//! to, read back, closed or crashed.

use std::sync::Arc;

use bytes::Bytes;
use object_store::ObjectStore;
use strata_engine::shard::ChunkCache;
use strata_engine::{ReadLimits, ShardConfig, StreamRef};

use super::args::EngineKind;
use super::context::{Context, SHARD};
use crate::bench::error::BenchError;
use crate::bench::harness::{bench_cipher, AppendOutcome, BenchShard};
use crate::bench::slatedb::{ReadTotals, SlateLog};

/// Bytes one Strata catch-up read returns at most (as the HTTP layer reads).
const READ_BYTES: usize = 4 << 20;

/// Either engine, behind one interface.
pub(super) enum Log {
    Strata(BenchShard),
    SlateDb(SlateLog),
}

/// Whether a log is new or taken over.
pub(super) enum Start {
    /// A new log: Strata creates its streams (SlateDB streams exist once
    /// written).
    Create,
    /// A new owner of the log in the store, with Strata's on-disk chunk
    /// cache if given (the server's default has one).
    Reopen(Option<Arc<ChunkCache>>),
}

impl Log {
    pub(super) async fn open(
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

    pub(super) async fn append(&self, stream: usize, records: Vec<Bytes>) -> AppendOutcome {
        match self {
            Log::Strata(bench) => AppendOutcome::of_engine(&bench.append(stream, records).await),
            Log::SlateDb(log) => match log.append(stream, &records).await {
                Ok(_) => AppendOutcome::Acked,
                Err(_) => AppendOutcome::Failed,
            },
        }
    }

    /// Reads stream number `stream` start to end.
    pub(super) async fn read_all(&self, stream: usize) -> Result<ReadTotals, BenchError> {
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
    pub(super) async fn records_total(&self) -> u64 {
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

    pub(super) async fn close(&self) -> Result<(), BenchError> {
        match self {
            Log::Strata(bench) => {
                bench.shard.shutdown().await;
                Ok(())
            }
            Log::SlateDb(log) => log.close().await,
        }
    }

    pub(super) async fn crash(&self) -> Result<(), BenchError> {
        match self {
            Log::Strata(bench) => {
                bench.shard.crash();
                Ok(())
            }
            Log::SlateDb(log) => log.crash().await,
        }
    }
}
