//! `strata`: the Strata server, operator tools and benchmarks (the command
//! line lives in `strata_server::cli`).

fn main() -> std::process::ExitCode {
    strata_server::cli::main()
}
