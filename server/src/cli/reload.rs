//! The files a server reads at start and again on `SIGHUP`: the bearer
//! tokens (`--auth-token`, `--project-token`, `--tokens-file`) and the
//! per-project limits (`--limits-file`). A reload builds each table whole
//! and puts it in place only if it builds: a broken file leaves the one in
//! force (and the log says why).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use strata_engine::OsEntropy;

use crate::http::AppState;
use crate::service::admission::LimitsTable;
use crate::service::tenancy::{Tenancy, TokenRule};

/// The flags that name what a reload reads again.
#[derive(Debug, Clone)]
pub struct ConfigFiles {
    /// `--listen` (short tokens only on a loopback address).
    pub listen: SocketAddr,
    pub auth_tokens: Vec<String>,
    pub project_tokens: Vec<String>,
    pub tokens_file: Option<PathBuf>,
    pub limits_file: Option<PathBuf>,
}

/// Why a table was not built (a usage error at start, a log line on reload).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(String);

/// The tokens of `--auth-token`, `--project-token` and `--tokens-file`.
/// Tokens shorter than 16 characters are accepted only when the server
/// listens on a loopback address (with a warning).
pub fn tenancy(args: &ConfigFiles) -> Result<Tenancy, ConfigError> {
    let rule = if args.listen.ip().is_loopback() {
        TokenRule::Loopback
    } else {
        TokenRule::Strict
    };
    let mut digest_key = [0; 32];
    digest_key[..16].copy_from_slice(&strata_engine::Entropy::bytes16(&OsEntropy));
    digest_key[16..].copy_from_slice(&strata_engine::Entropy::bytes16(&OsEntropy));
    let mut tenancy = Tenancy::new(rule, digest_key);
    let usage = |e: crate::service::tenancy::TenancyError| ConfigError(e.to_string());
    for token in &args.auth_tokens {
        tenancy
            .add(crate::service::DEFAULT_PROJECT, token)
            .map_err(usage)?;
    }
    for pair in &args.project_tokens {
        tenancy.add_pair(pair).map_err(usage)?;
    }
    if let Some(path) = &args.tokens_file {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ConfigError(format!("--tokens-file {}: {e}", path.display())))?;
        tenancy
            .add_file_text(&path.display().to_string(), &text)
            .map_err(usage)?;
    }
    if tenancy.short_tokens() > 0 {
        tracing::warn!(
            short_tokens = tenancy.short_tokens(),
            listen = %args.listen,
            "tokens shorter than 16 characters are accepted because the server listens on a loopback address only; they would be refused on any other"
        );
    }
    Ok(tenancy)
}

/// The limits of `--limits-file` (none without it: no project limit).
pub fn limits(args: &ConfigFiles) -> Result<LimitsTable, ConfigError> {
    let Some(path) = &args.limits_file else {
        return Ok(LimitsTable::unlimited());
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError(format!("--limits-file {}: {e}", path.display())))?;
    LimitsTable::parse(&path.display().to_string(), &text).map_err(|e| ConfigError(e.to_string()))
}

/// On `SIGHUP`, builds the token table and the limits again from the same
/// flags and files as they are now, and puts each in place that builds.
#[cfg(unix)]
pub fn spawn_reload(args: ConfigFiles, state: Arc<AppState>) -> Result<(), ConfigError> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup())
        .map_err(|e| ConfigError(format!("cannot watch for SIGHUP: {e}")))?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match tenancy(&args) {
                Ok(table) => {
                    let tokens = table.len();
                    state.config.tenancy.replace(table);
                    tracing::info!(tokens, "SIGHUP: tokens reloaded");
                }
                Err(e) => {
                    tracing::error!(error = %e, "SIGHUP: tokens not reloaded; the previous ones stay in force")
                }
            }
            match limits(&args) {
                Ok(table) => {
                    let projects = table.projects();
                    state.streams.admission().replace(table);
                    tracing::info!(projects, "SIGHUP: limits reloaded");
                }
                Err(e) => {
                    tracing::error!(error = %e, "SIGHUP: limits not reloaded; the previous ones stay in force")
                }
            }
        }
    });
    Ok(())
}
