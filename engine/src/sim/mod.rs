//! Deterministic simulation: a fault-injecting store layer ([`Faults`]) and a
//! seeded driver ([`run_seed`]) that checks the engine's invariants after every
//! step. `engine/tests/sim.rs` runs many seeds; a failure prints the one line
//! that replays it.

mod audit;
mod faults;
mod world;

pub use audit::DeleteAudit;
pub use faults::{FaultConfig, FaultStats, Faults};
pub use world::{run_seed, SimConfig, SimFailure, SimReport};
