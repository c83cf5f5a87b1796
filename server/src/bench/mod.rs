//! `strata bench`: reproducible benchmarks that print throughput, latency
//! percentiles, object-store requests and peak memory (docs/BENCHMARKS.md).
//! Compiled only with the server's `bench` feature (`slatedb-baseline` adds
//! the SlateDB baseline of `strata bench compare`): a production `strata`
//! carries none of it (docs/ARCHITECTURE.md).
//!
//! This file only parses the subcommand and dispatches. The files it names
//! never import it: shared pieces live in [`harness`] and [`error`], so the
//! module's imports form no circle.
//!
//! * [`engine`], [`pages`], [`tiers`] (catch-up reads, re-open), [`compare`],
//!   [`consumers`] (consumer groups over HTTP against a spawned server):
//!   one benchmark (family) each;
//! * [`harness`]: what they share (counted stores, benchmark streams and shard,
//!   the closed-loop driver); [`error`]: [`BenchError`].

// Benchmarks measure real time.
#![allow(clippy::disallowed_methods)]

use clap::Subcommand;

mod compare;
mod consumers;
mod engine;
mod error;
mod harness;
mod pages;
#[cfg(feature = "slatedb-baseline")]
mod slatedb;
mod tiers;

pub use engine::{EngineBench, EngineReport, RuntimeKind};
pub use error::BenchError;
pub use harness::peak_rss_bytes;
pub use pages::{PagesBench, PagesReport, PagesRow};

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
    /// Consumer groups end to end over HTTP: appends, long-polling pulls and
    /// acknowledgements against a `strata serve` this command starts.
    Consumers(consumers::ConsumersBench),
    /// Strata against a SlateDB build of the same log, in one process over the
    /// same emulated store (needs `--features slatedb-baseline`).
    Compare(compare::CompareBench),
}

pub fn run(command: BenchCommand) -> Result<(), BenchError> {
    match command {
        BenchCommand::Catchup(args) => tiers::catchup(&args),
        BenchCommand::Reopen(args) => tiers::reopen(&args),
        BenchCommand::Compare(args) => compare::compare(&args),
        BenchCommand::Consumers(args) => consumers::consumers(&args),
        BenchCommand::Pages(args) => pages::pages(&args),
        BenchCommand::Engine(args) => engine::engine(&args),
    }
}
