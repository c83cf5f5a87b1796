//! The `strata` binary's library: the HTTP surfaces, the server, operator
//! tools and benchmarks. `main.rs` only parses the command line; everything
//! else lives here so fuzz targets and tests can reach the parsers. The
//! benchmarks ([`bench`]) are compiled only with the `bench` feature.

#[cfg(feature = "bench")]
pub mod bench;
pub mod catalog;
pub mod ds;
pub mod hex;
pub mod http;
pub mod keys;
pub mod ops;
pub mod product;
pub mod reaper;
pub mod registry;
pub mod serve;
pub mod streams;
pub mod subscriptions;
pub mod tenancy;
pub mod topology;
