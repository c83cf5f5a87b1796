//! A shard's tunables ([`ShardConfig`]) and their defaults. The object cuts
//! it configures are held within the WAL format's limits where they are used
//! (docs/ARCHITECTURE.md, "Write path and durability").

use std::sync::Arc;
use std::time::Duration;

use strata_manifest::RetryPolicy;

use super::cache::ChunkCache;

/// Tunables of one shard.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// Commands the ingest queue holds before `append` answers `Overloaded`.
    pub ingest_queue_capacity: usize,
    /// WAL PUTs in flight at once. Deeper pipelines add objects only when
    /// the ones in flight are full and more is waiting: at 1,024 HTTP
    /// connections over a 25 ms store, 6 gave 7–9% more appends per second
    /// than 4 and a lower p99; a light load (fan-in, c=64 on a local disk) is
    /// unchanged (docs/BENCHMARKS.md, issue 19).
    pub pipeline_depth: usize,
    /// While a WAL PUT is in flight, another starts only once this many page
    /// bytes are staged (or a second object's worth is waiting): small batches
    /// wait for the PUT ahead, so each object carries more appends, and large
    /// ones are not held back.
    pub pipeline_min_bytes: usize,
    /// Minimum time between the starts of two WAL PUTs.
    pub min_flush_gap: Duration,
    /// A WAL object is cut at this many encoded bytes (one request is never
    /// split; held within the format's `OBJECT_BYTES_MAX`).
    pub max_object_bytes: usize,
    /// …or at this many entries (held within the format's `ENTRIES_MAX`):
    /// creates, closes and producer records count though they carry no pages.
    pub max_object_entries: usize,
    /// Page bytes staged or in flight before the committer stops taking commands.
    pub max_pending_bytes: usize,
    /// Durable page bytes held in memory before the committer stops taking
    /// commands (until sealing frees them).
    pub max_memory_page_bytes: u64,
    /// Records in one append request.
    pub max_records_per_append: usize,
    /// Payload bytes in one append request.
    pub max_append_bytes: usize,
    /// Parallel GETs while replaying the WAL (and loading index runs)…
    pub replay_parallelism: usize,
    /// …and WAL bytes a replay fetches at once: the GETs in flight are
    /// fewer when the largest object of the walk times their count would
    /// exceed it.
    pub replay_bytes_in_flight_max: u64,
    /// Retries of store calls before a write counts as failed.
    pub store_retry: RetryPolicy,
    /// Back-off ceiling while re-opening after a store failure.
    pub reopen_backoff_max: Duration,
    /// Seal when the unsealed pages in memory reach this many bytes…
    pub seal_bytes: u64,
    /// …or this many WAL objects were acknowledged since the last seal…
    pub seal_objects: u64,
    /// …or the oldest unsealed change is this old.
    pub seal_age: Duration,
    /// Merge index runs when the manifest lists more than this many.
    pub max_index_runs: usize,
    /// How long garbage (old WAL objects, merged runs, dead segments) waits
    /// before it is deleted: readers that started before still find it.
    pub gc_grace: Duration,
    /// How long after an open its sweep (listing every folder of the shard
    /// for what older owners left) waits: the garbage it finds waits
    /// `gc_grace` anyway, and right after a claim the store is needed for
    /// the shard's first appends, and a failover's other claims.
    pub sweep_delay: Duration,
    /// Local disk cache of sealed chunks (shared by the shards of a process).
    pub chunk_cache: Option<Arc<ChunkCache>>,
}

impl Default for ShardConfig {
    fn default() -> Self {
        ShardConfig {
            ingest_queue_capacity: 16_384,
            pipeline_depth: 6,
            pipeline_min_bytes: 16 << 10,
            min_flush_gap: Duration::ZERO,
            max_object_bytes: 16 << 20,
            max_object_entries: strata_wal::ENTRIES_MAX,
            max_pending_bytes: 128 << 20,
            max_memory_page_bytes: 2 << 30,
            max_records_per_append: 1 << 20,
            max_append_bytes: 64 << 20,
            replay_parallelism: 64,
            replay_bytes_in_flight_max: 64 << 20,
            store_retry: RetryPolicy::default(),
            reopen_backoff_max: Duration::from_secs(5),
            seal_bytes: 24 << 20,
            seal_objects: 48,
            seal_age: Duration::from_secs(45),
            max_index_runs: 8,
            gc_grace: Duration::from_secs(600),
            sweep_delay: Duration::from_secs(10),
            chunk_cache: None,
        }
    }
}
