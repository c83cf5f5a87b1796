//! `strata`: the Strata server, operator tools and benchmarks (the command
//! line lives in `strata_server::cli`).

/// The allocator (configured at start by `strata_server::cli`; see its
/// `allocator` module).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    strata_server::cli::main()
}
