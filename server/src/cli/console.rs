//! What the process writes to stderr: the log subscriber (`--log-format`),
//! the lines for the person at the console, and the reason a command failed.
//! In the JSON format stderr carries log objects alone.

use std::io::IsTerminal;
use std::sync::OnceLock;

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

static LOG_FORMAT: OnceLock<LogFormat> = OnceLock::new();

/// A line for the person at the console (`strata: …` on stderr), written in
/// the text log format only: in the JSON format stderr carries log objects
/// alone, so whatever such a line says is also logged as an event.
pub(crate) fn console(line: impl std::fmt::Display) {
    if LOG_FORMAT.get().copied().unwrap_or_default() == LogFormat::Text {
        eprintln!("strata: {line}");
    }
}

/// Why the command failed, as its last line on stderr (a log object in the
/// JSON format).
pub(super) fn report_failure(error: &dyn std::fmt::Display) {
    match LOG_FORMAT.get().copied().unwrap_or_default() {
        LogFormat::Text => eprintln!("error: {error}"),
        LogFormat::Json => tracing::error!(error = %error, "command failed"),
    }
}

/// Installs the log subscriber: `RUST_LOG` filters (default `warn,strata=info`).
pub(super) fn init_logging(format: LogFormat) {
    let _ = LOG_FORMAT.set(format);
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,strata=info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
}
