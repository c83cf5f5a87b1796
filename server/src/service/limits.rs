//! The service's bounds that more than one of its operations observe.

use std::time::Duration;

/// The project of the raw (Durable Streams) surface.
pub const DEFAULT_PROJECT: &str = "default";
/// Most levels a fork chain may have.
pub const FORK_DEPTH_MAX: usize = 64;
/// Engine reads one service read makes at most (a keyed engine read looks
/// through at most 64 MiB or 1,024 chunks of other keys' data before it
/// answers; `strata_engine`'s `read.rs`).
pub const READ_ROUNDS_MAX: usize = 64;
/// Payload bytes a raw-route read returns at most (one record may exceed
/// it): the read chunk of the Durable Streams surface.
pub const RAW_READ_BYTES: usize = 4 << 20;
/// How often tallied reads are written to their shards, by default
/// (`--usage-flush-ms`; see `usage`).
pub const USAGE_FLUSH_INTERVAL_DEFAULT: Duration = Duration::from_secs(60);
/// Longest a catalog listing waits for the start-up scan's repairs.
pub const STARTUP_SCAN_WAIT_MAX: Duration = Duration::from_secs(10);
