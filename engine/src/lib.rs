//! # strata-engine: the shard engine and everything it stands on
//!
//! * [`store`]: object stores from URLs (local directory with CAS, memory, S3)
//!   and composable decorators (latency, request counting).
//! * [`layout`]: the one module that names objects.
//! * [`env`]: clock, randomness and store as inputs, for deterministic tests.
//! * [`shard`]: the write path (committer, flush pump, acker), recovery from the
//!   store alone, fencing, reads and waits.
//! * [`admin`]: the operator tools: read-only inspection and verification of
//!   shards, and the repairs (rollback, recover).
//! * [`consumer`]: the consumer-group state machine (leases, per-key FIFO,
//!   attempts, dead letters), pure and deterministic; not yet carried by the
//!   WAL or served.
//! * `sim` (feature `sim`, which only the engine's own tests enable): the
//!   deterministic simulation's fault-injecting store and driver.
//!
//! Lower crates (`strata-wal`, `strata-manifest`, `strata-segments`) own the
//! byte formats; this crate composes them and never speaks HTTP.

pub mod admin;
pub mod consumer;
pub mod env;
pub mod error;
pub mod ids;
pub mod layout;
pub mod shard;
#[cfg(feature = "sim")]
pub mod sim;
pub mod store;

pub use env::{
    Clock, CrashPoint, CrashPoints, EngineEnv, Entropy, OsEntropy, SeededEntropy, SystemClock,
    TokioClock,
};
pub use error::EngineError;
pub use ids::{stream_id, InstanceId, InvalidShardName, ShardName, StreamRef};
pub use shard::{
    AccountUsage, AppendAck, AppendKind, AppendRequest, AppendTicket, ChangeTicket, ClaimRead,
    CreateAck, KeySpan, ProducerClaim, ProducerState, ReadBatch, ReadLimits, Shard, ShardConfig,
    ShardStatus, StreamInfo, StreamStatus, WaitOutcome,
};
