//! The command line: `strata serve`, the operator commands for shards and
//! streams (`ops`), the fleet's status (`fleet`), stream keys (`keys`) and the benchmarks. Each command
//! parses its arguments here and runs its room's code; `main.rs` only calls
//! [`main`].

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use self::console::{init_logging, report_failure, LogFormat};

#[cfg(feature = "bench")]
use crate::bench;

mod allocator;
pub mod console;
pub mod effective;
pub mod fleet;
pub mod keys;
pub mod ops;
pub mod reload;
pub mod serve;

#[derive(Parser)]
#[command(name = "strata", version, about = "Durable streams on object storage")]
struct Cli {
    /// How log lines are written to stderr: `text` (colours only when stderr
    /// is a terminal) or `json` (one JSON object per line, and nothing else
    /// on stderr).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value_t,
        env = "STRATA_LOG_FORMAT"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand)]
enum Commands {
    /// Run the HTTP server.
    Serve(Box<serve::ServeArgs>),
    /// Benchmarks that print throughput, latency, store requests and memory
    /// (only in builds with `--features bench`).
    #[cfg(feature = "bench")]
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Stream keys: generate, fingerprint, derive subkeys, open stored pages.
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Operator tools for shards: list, inspect, verify (exit code 3: damage).
    #[command(subcommand)]
    Shard(ops::ShardCommand),
    /// Operator tools for streams.
    #[command(subcommand)]
    Stream(ops::StreamCommand),
    /// A fleet on one store: members and shard owners.
    #[command(subcommand)]
    Fleet(fleet::FleetCommand),
}

/// Runs the command of the process's arguments.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    allocator::configure();
    // TLS (S3, webhooks) uses rustls with the ring provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let result = match cli.command {
        Commands::Shard(command) => return exit(ops::run_shard(command)),
        Commands::Stream(command) => return exit(ops::run_stream(command)),
        Commands::Fleet(command) => return exit(fleet::run(command)),
        Commands::Serve(args) => serve::run(*args).map_err(|e| e.to_string()),
        #[cfg(feature = "bench")]
        Commands::Bench(command) => bench::run(command).map_err(|e| e.to_string()),
        Commands::Keys(command) => keys::run(command).map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report_failure(&e);
            ExitCode::FAILURE
        }
    }
}

/// The exit code of an operator command: its own on success, 2 on a usage
/// error (as clap's), 1 on any other error.
fn exit(result: Result<ExitCode, ops::OpsError>) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) => {
            report_failure(&e);
            match e {
                ops::OpsError::Usage(_) => ExitCode::from(2),
                _ => ExitCode::FAILURE,
            }
        }
    }
}
