//! What every run of `strata bench compare` shares: its arguments, SlateDB's
//! tuning, the load window, the emulated latencies and a fresh in-memory store
//! per run (docs/BENCHMARKS.md).

use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use object_store::ObjectStore;
use strata_engine::store::Latency;

use super::args::CompareBench;
use crate::bench::harness::LoadWindow;
use crate::bench::slatedb::SlateTuning;

/// Stream ids of every run end in this.
pub(super) const STREAM_SALT: [u8; 8] = *b"compare!";
/// The shard (SlateDB: database) every run uses.
pub(super) const SHARD: &str = "bench";

/// What every run of one comparison shares.
pub(super) struct Context<'a> {
    pub(super) args: &'a CompareBench,
    pub(super) tuning: SlateTuning,
    pub(super) window: LoadWindow,
}

pub(super) fn put_latency(context: &Context<'_>) -> Latency {
    Latency {
        put: Duration::from_millis(context.args.put_latency_ms),
        ..Latency::default()
    }
}

pub(super) fn all_latency(context: &Context<'_>) -> Latency {
    Latency {
        put: Duration::from_millis(context.args.put_latency_ms),
        get: Duration::from_millis(context.args.get_latency_ms),
        other: Duration::from_millis(context.args.get_latency_ms),
    }
}

pub(super) fn fresh_store() -> Arc<dyn ObjectStore> {
    Arc::new(InMemory::new())
}
