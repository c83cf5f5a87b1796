//! # The shard engine
//!
//! A shard is a set of streams that share one WAL, one manifest and one owner.
//! [`Shard::open`] claims it (see [`recovery`]); then one actor task runs the
//! write path of docs/ARCHITECTURE.md ("Write path and durability"):
//!
//! ```text
//! append(): build page bodies (compress) in the caller's task
//!   → bounded ingest queue (full ⇒ EngineError::Overloaded)
//!   → committer: validate against the *staged* tails, assign contiguous offsets
//!     in queue order, seal pages (encrypt), stage WAL entries
//!   → flush pump: pack everything staged into one WAL object; up to
//!     `pipeline_depth` create-only PUTs in flight, at least `min_flush_gap` apart
//!   → acker: objects complete in any order; the durable watermark advances over
//!     the contiguous prefix; only then are entries applied to the *durable*
//!     state readers see, and requests answered
//! ```
//!
//! Invariants (tested by the model test and the deterministic simulation):
//!
//! * Readers and waiters see only state from acknowledged WAL objects.
//! * Every reply — success or error — is sent only after everything committed
//!   before it is durable, so an answer never rests on state that may vanish.
//! * A failed PUT fails its requests and every later one; the owner then
//!   re-opens the shard from the store (a re-claim that only succeeds if nobody
//!   else claimed meanwhile), so no staged state survives a failure.
//! * A fenced owner acknowledges nothing more.
//!
//! This file only declares the shard's files and re-exports its public API;
//! no file of the shard imports from it. `handle.rs`: the [`Shard`] handle
//! (open, the checks an append passes before it is queued, snapshots).
//! `api.rs`: requests and answers. `config.rs`, `ctx.rs`, `shared.rs`: what
//! the parts of an open shard share. `command.rs`: the actor's mailbox.
//! `actor/`: the write path. `limits.rs`: the WAL limits an append is
//! checked against. `state.rs`, `producer.rs`, `chunk.rs`, `sealed.rs`:
//! stream state, producer conversions between layers, chunk references,
//! index runs. `recovery.rs`, `seal.rs`, `gc.rs`, `history.rs`: opening,
//! sealing, garbage collection, manifest history. `read.rs`, `tiers.rs`,
//! `cache.rs`: reads, sealed-chunk fetches, the chunk cache. `io.rs`: store
//! calls with retries.

mod actor;
mod api;
mod cache;
mod chunk;
mod command;
mod config;
mod ctx;
mod gc;
mod handle;
pub mod history;
pub(crate) mod io;
mod limits;
pub mod metrics;
pub mod producer;
mod read;
pub mod recovery;
mod seal;
pub mod sealed;
mod shared;
pub mod state;
pub(crate) mod tiers;

pub use api::{
    AccountUsage, AppendAck, AppendKind, AppendRequest, CreateAck, ShardStatus, StreamInfo,
};
pub use cache::{CacheCounts, ChunkCache};
pub use config::ShardConfig;
pub use handle::{AppendTicket, ChangeTicket, ClaimRead, Shard};
pub use read::{KeySpan, ReadBatch, ReadLimits, WaitOutcome};
pub use recovery::{inspect_log, inspect_log_at, inspect_log_from, LogView, RecoveryReport};
pub use state::{
    ApplyError, DurableStream, ProducerClaim, ProducerState, StreamStatus, StreamTable, Tail,
};
