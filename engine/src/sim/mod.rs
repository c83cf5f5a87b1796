//! Deterministic simulation: a fault-injecting store layer ([`Faults`]), a
//! deleting-and-overwriting audit ([`DeleteAudit`]), crashes aimed at the
//! engine's crash points ([`CrashPlan`]), and a seeded driver ([`run_seed`])
//! whose workload covers appends, producers, `Stream-Seq`, closes, deletes
//! and re-creations, consumer groups (leases, settles, dead letters), seals, shutdowns, crashes, takeovers, power losses and
//! the operator's repairs, with the invariants checked after every step
//! (`check`). `engine/tests/sim.rs` runs many seeds; a failure prints the
//! one line that replays it. docs/TESTING.md lists what it covers.

mod audit;
mod check;
mod crash;
mod faults;
mod model;
mod queue;
mod queue_model;
mod workload;
mod world;

pub use audit::DeleteAudit;
pub use crash::{CrashPlan, PointCount};
pub use faults::{FaultConfig, FaultStats, Faults};
pub use model::WorkloadStats;
pub use world::{run_seed, SimConfig, SimFailure, SimReport};
