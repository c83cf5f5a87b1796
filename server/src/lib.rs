//! The `strata` binary's library (docs/ARCHITECTURE.md, "The server"):
//!
//! * `service` — what the surfaces do to streams, without HTTP (webhook
//!   subscriptions included);
//! * `http` — the two HTTP surfaces; the only place that knows status codes;
//! * `ds` — the Durable Streams protocol's encodings (offsets, JSON bodies);
//! * `cli` — the command line (serve, operator commands, keys, benchmarks);
//! * `bench` — the benchmarks, compiled only with the `bench` feature.
//!
//! `main.rs` only calls `cli::main`; everything else lives here so fuzz
//! targets and tests can reach the parsers.

#[cfg(feature = "bench")]
pub mod bench;
pub mod cli;
pub mod ds;
pub mod http;
pub mod service;
