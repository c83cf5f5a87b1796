//! Tenancy: bearer tokens name projects.
//!
//! Every stream lives in one project, and names are unique only within it.
//! A request's project comes from its `Authorization: Bearer` token alone, so
//! a token of one project can neither see nor guess another project's
//! streams: the other project's names are simply not in its namespace (a
//! missing stream answers the same 404 whether or not the name exists
//! elsewhere).
//!
//! With no tokens configured (the embedded development default) every request
//! belongs to project [`DEFAULT_PROJECT`], with or without a token.
//!
//! Tokens come from `--auth-token T` (project `default`), `--project-token
//! PROJECT:TOKEN`, or a tokens file of `PROJECT TOKEN` lines (`#` comments).
//!
//! Lookup is one keyed digest and one hash-map probe, whatever the number of
//! tokens: the map is keyed by HMAC-SHA256 of the token under a key drawn
//! when the table is built and never shown, so which bucket a presented
//! token probes, and how long the probe takes, says nothing about the bytes
//! of any configured token.
//!
//! A table is built whole and swapped whole ([`TenancyCell`]): `SIGHUP`
//! re-reads the configuration, and a request's parse sees either the old
//! table or the new one, never a mix.

use std::collections::HashMap;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use parking_lot::RwLock;
use sha2::Sha256;

use super::limits::DEFAULT_PROJECT;

/// Longest project name.
pub const PROJECT_NAME_BYTES_MAX: usize = 64;
/// Shortest token accepted in configuration (see [`TokenRule`]).
pub const TOKEN_BYTES_MIN: usize = 16;
/// Most tokens one server holds.
pub const TOKENS_MAX: usize = 100_000;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TenancyError {
    #[error(
        "project name {0:?}: use 1 to 64 of a-z, 0-9, '-' and '_', starting with a letter or digit"
    )]
    ProjectName(String),
    #[error(
        "a token must be at least {TOKEN_BYTES_MIN} visible ASCII characters without spaces \
         (shorter ones are accepted only on a loopback listen address)"
    )]
    Token,
    #[error("token for project {0:?} is configured twice")]
    Duplicate(String),
    #[error("{what}: expected PROJECT:TOKEN")]
    Syntax { what: String },
    #[error("tokens file {path}: {reason}")]
    File { path: String, reason: String },
    #[error("more than {TOKENS_MAX} tokens")]
    TooMany,
}

/// A project name, validated to be path-safe in object names.
pub fn valid_project(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= PROJECT_NAME_BYTES_MAX
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-' || *b == b'_')
}

/// How short a configured token may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TokenRule {
    /// At least [`TOKEN_BYTES_MIN`] bytes: a server others can reach.
    #[default]
    Strict,
    /// Any non-empty token: the server listens on a loopback address only,
    /// where a development token like `devtoken` is reachable by this machine
    /// alone. Each short token is reported by [`Tenancy::short_tokens`].
    Loopback,
}

type TokenDigest = [u8; 32];

/// Who may call the API, and as which project.
pub struct Tenancy {
    rule: TokenRule,
    digest_key: [u8; 32],
    projects: HashMap<TokenDigest, Arc<str>>,
    short_tokens: usize,
}

impl std::fmt::Debug for Tenancy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenancy")
            .field("rule", &self.rule)
            .field("tokens", &self.projects.len())
            .finish_non_exhaustive()
    }
}

impl Default for Tenancy {
    fn default() -> Self {
        Tenancy::open()
    }
}

/// Why a request has no project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unauthorized;

impl Tenancy {
    /// No tokens: every request is project `default` (development). Its
    /// digest key is fixed, so tokens added to it are for tests: a server
    /// builds its table with [`Tenancy::new`] and a key from its entropy.
    pub fn open() -> Self {
        Tenancy::new(TokenRule::Strict, [0; 32])
    }

    /// An empty table whose tokens follow `rule`, digested under
    /// `digest_key` (random, and kept only in memory).
    pub fn new(rule: TokenRule, digest_key: [u8; 32]) -> Self {
        Tenancy {
            rule,
            digest_key,
            projects: HashMap::new(),
            short_tokens: 0,
        }
    }

    /// Whether any token is configured.
    pub fn is_open(&self) -> bool {
        self.projects.is_empty()
    }

    /// How many tokens are configured.
    pub fn len(&self) -> usize {
        self.projects.len()
    }

    /// Whether no token is configured (the same as [`Tenancy::is_open`]).
    pub fn is_empty(&self) -> bool {
        self.projects.is_empty()
    }

    /// How many configured tokens are shorter than [`TOKEN_BYTES_MIN`]
    /// (only a [`TokenRule::Loopback`] table holds any).
    pub fn short_tokens(&self) -> usize {
        self.short_tokens
    }

    fn digest(&self, token: &str) -> TokenDigest {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.digest_key)
            .expect("HMAC takes a key of any length");
        mac.update(token.as_bytes());
        mac.finalize().into_bytes().into()
    }

    fn valid_token(&self, token: &str) -> bool {
        let bytes_min = match self.rule {
            TokenRule::Strict => TOKEN_BYTES_MIN,
            TokenRule::Loopback => 1,
        };
        token.len() >= bytes_min && token.bytes().all(|b| b.is_ascii_graphic())
    }

    /// Adds `token` for `project`.
    pub fn add(&mut self, project: &str, token: &str) -> Result<(), TenancyError> {
        if !valid_project(project) {
            return Err(TenancyError::ProjectName(project.to_string()));
        }
        if !self.valid_token(token) {
            return Err(TenancyError::Token);
        }
        if self.projects.len() >= TOKENS_MAX {
            return Err(TenancyError::TooMany);
        }
        let digest = self.digest(token);
        if self.projects.contains_key(&digest) {
            return Err(TenancyError::Duplicate(project.to_string()));
        }
        self.projects.insert(digest, Arc::from(project));
        self.short_tokens += usize::from(token.len() < TOKEN_BYTES_MIN);
        Ok(())
    }

    /// Adds a `PROJECT:TOKEN` pair.
    pub fn add_pair(&mut self, pair: &str) -> Result<(), TenancyError> {
        let (project, token) = pair.split_once(':').ok_or_else(|| TenancyError::Syntax {
            what: "--project-token".into(),
        })?;
        self.add(project, token)
    }

    /// Adds the `PROJECT TOKEN` lines of a tokens file's text.
    pub fn add_file_text(&mut self, path: &str, text: &str) -> Result<(), TenancyError> {
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(project), Some(token), None) = (words.next(), words.next(), words.next())
            else {
                return Err(TenancyError::File {
                    path: path.to_string(),
                    reason: format!("line {}: expected `PROJECT TOKEN`", n + 1),
                });
            };
            self.add(project, token).map_err(|e| TenancyError::File {
                path: path.to_string(),
                reason: format!("line {}: {e}", n + 1),
            })?;
        }
        Ok(())
    }

    /// The project of a request, from its `Authorization` value (the HTTP
    /// layer passes the header's text, if any): a `Bearer` token.
    pub fn project_of(&self, authorization: Option<&str>) -> Result<&str, Unauthorized> {
        if self.projects.is_empty() {
            return Ok(DEFAULT_PROJECT);
        }
        let token = authorization
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or(Unauthorized)?;
        self.projects
            .get(&self.digest(token))
            .map(|project| &**project)
            .ok_or(Unauthorized)
    }
}

/// The table requests read, replaced whole by a reload.
#[derive(Debug, Default)]
pub struct TenancyCell {
    current: RwLock<Tenancy>,
}

impl TenancyCell {
    pub fn new(tenancy: Tenancy) -> Self {
        TenancyCell {
            current: RwLock::new(tenancy),
        }
    }

    /// Runs `f` on the table as it is now, under the read lock (held only
    /// for `f`: a request parses its headers in it, without awaiting).
    pub fn with_current<R>(&self, f: impl FnOnce(&Tenancy) -> R) -> R {
        f(&self.current.read())
    }

    /// Puts `tenancy` in place for every later request.
    pub fn replace(&self, tenancy: Tenancy) {
        *self.current.write() = tenancy;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(token: &str) -> String {
        format!("Bearer {token}")
    }

    #[test]
    fn tokens_name_projects() {
        let mut t = Tenancy::open();
        assert_eq!(t.project_of(None), Ok(DEFAULT_PROJECT));
        t.add_pair("alpha:aaaaaaaaaaaaaaaa1").unwrap();
        t.add_file_text("f", "# comment\n\nbeta bbbbbbbbbbbbbbbb2\n")
            .unwrap();
        assert_eq!(
            t.project_of(Some(&bearer("aaaaaaaaaaaaaaaa1"))),
            Ok("alpha")
        );
        assert_eq!(t.project_of(Some(&bearer("bbbbbbbbbbbbbbbb2"))), Ok("beta"));
        assert_eq!(
            t.project_of(Some(&bearer("aaaaaaaaaaaaaaaa"))),
            Err(Unauthorized)
        );
        assert_eq!(t.project_of(None), Err(Unauthorized));
    }

    #[test]
    fn bad_configuration_is_refused() {
        let mut t = Tenancy::open();
        assert!(t.add("Alpha", "aaaaaaaaaaaaaaaa1").is_err());
        assert!(t.add("a/b", "aaaaaaaaaaaaaaaa1").is_err());
        assert!(t.add("alpha", "short").is_err());
        assert!(t.add("alpha", "has a space in it!").is_err());
        assert!(t.add_pair("no-colon").is_err());
        t.add("alpha", "aaaaaaaaaaaaaaaa1").unwrap();
        assert!(t.add("beta", "aaaaaaaaaaaaaaaa1").is_err());
        assert!(t.add_file_text("f", "alpha\n").is_err());
    }

    #[test]
    fn short_tokens_only_under_the_loopback_rule() {
        let mut strict = Tenancy::new(TokenRule::Strict, [1; 32]);
        assert_eq!(strict.add("default", "devtoken"), Err(TenancyError::Token));
        let mut local = Tenancy::new(TokenRule::Loopback, [2; 32]);
        local.add("default", "devtoken").unwrap();
        local.add("alpha", "aaaaaaaaaaaaaaaa1").unwrap();
        assert_eq!(local.short_tokens(), 1);
        assert_eq!(local.project_of(Some(&bearer("devtoken"))), Ok("default"));
        assert_eq!(
            local.project_of(Some(&bearer("devtoke"))),
            Err(Unauthorized)
        );
        assert_eq!(local.add("default", ""), Err(TenancyError::Token));
        assert_eq!(local.add("default", "dev token"), Err(TenancyError::Token));
    }

    #[test]
    fn many_tokens_each_find_their_project_and_the_limit_holds() {
        let mut t = Tenancy::open();
        for i in 0..TOKENS_MAX {
            t.add(&format!("p{}", i % 97), &format!("token-{i:016}"))
                .unwrap();
        }
        assert_eq!(t.len(), TOKENS_MAX);
        for i in [0, 1, 4_242, TOKENS_MAX - 1] {
            let want = format!("p{}", i % 97);
            assert_eq!(
                t.project_of(Some(&bearer(&format!("token-{i:016}")))),
                Ok(want.as_str())
            );
        }
        assert_eq!(
            t.add("p0", "one-token-too-many"),
            Err(TenancyError::TooMany)
        );
        assert_eq!(
            t.project_of(Some(&bearer("token-0000000000100000"))),
            Err(Unauthorized)
        );
    }

    #[test]
    fn a_replaced_table_serves_every_later_lookup() {
        let mut first = Tenancy::open();
        first.add("alpha", "aaaaaaaaaaaaaaaa1").unwrap();
        let cell = TenancyCell::new(first);
        let project = |token: &str| {
            cell.with_current(|t| t.project_of(Some(&bearer(token))).map(str::to_string))
        };
        assert_eq!(project("aaaaaaaaaaaaaaaa1").as_deref(), Ok("alpha"));
        let mut second = Tenancy::open();
        second.add("beta", "bbbbbbbbbbbbbbbb2").unwrap();
        cell.replace(second);
        assert_eq!(project("aaaaaaaaaaaaaaaa1"), Err(Unauthorized));
        assert_eq!(project("bbbbbbbbbbbbbbbb2").as_deref(), Ok("beta"));
    }
}
