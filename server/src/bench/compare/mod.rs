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
//!
//! Files: [`args`] (the command line) in every `bench` build; with
//! `slatedb-baseline`, `run` (rounds and rows) over `workload` (each
//! workload's run), `log` (both engines behind one interface), `context`,
//! `report` and `rss`. None of them imports this file.

mod args;
#[cfg(feature = "slatedb-baseline")]
mod context;
#[cfg(feature = "slatedb-baseline")]
mod log;
#[cfg(feature = "slatedb-baseline")]
mod report;
#[cfg(feature = "slatedb-baseline")]
mod rss;
#[cfg(feature = "slatedb-baseline")]
mod run;
#[cfg(feature = "slatedb-baseline")]
mod workload;

pub use args::CompareBench;

use super::error::BenchError;

#[cfg(not(feature = "slatedb-baseline"))]
pub fn compare(_args: &CompareBench) -> Result<(), BenchError> {
    Err(BenchError::BaselineNotBuilt)
}

#[cfg(feature = "slatedb-baseline")]
pub fn compare(args: &CompareBench) -> Result<(), BenchError> {
    run::compare(args)
}
