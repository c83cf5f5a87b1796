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
//! Lookups compare every configured token in constant time.

use subtle::ConstantTimeEq;

use super::limits::DEFAULT_PROJECT;

/// Longest project name.
pub const PROJECT_NAME_BYTES_MAX: usize = 64;
/// Shortest token accepted in configuration.
pub const TOKEN_BYTES_MIN: usize = 16;
/// Most tokens one server holds.
pub const TOKENS_MAX: usize = 100_000;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TenancyError {
    #[error(
        "project name {0:?}: use 1 to 64 of a-z, 0-9, '-' and '_', starting with a letter or digit"
    )]
    ProjectName(String),
    #[error("a token must be at least {TOKEN_BYTES_MIN} visible ASCII characters without spaces")]
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

fn valid_token(token: &str) -> bool {
    token.len() >= TOKEN_BYTES_MIN && token.bytes().all(|b| b.is_ascii_graphic())
}

/// Who may call the API, and as which project.
#[derive(Debug, Clone, Default)]
pub struct Tenancy {
    tokens: Vec<(String, String)>,
}

/// Why a request has no project.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unauthorized;

impl Tenancy {
    /// No tokens: every request is project `default` (development).
    pub fn open() -> Self {
        Tenancy::default()
    }

    /// Whether any token is configured.
    pub fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Adds `token` for `project`.
    pub fn add(&mut self, project: &str, token: &str) -> Result<(), TenancyError> {
        if !valid_project(project) {
            return Err(TenancyError::ProjectName(project.to_string()));
        }
        if !valid_token(token) {
            return Err(TenancyError::Token);
        }
        if self.tokens.iter().any(|(t, _)| t == token) {
            return Err(TenancyError::Duplicate(project.to_string()));
        }
        if self.tokens.len() >= TOKENS_MAX {
            return Err(TenancyError::TooMany);
        }
        self.tokens.push((token.to_string(), project.to_string()));
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
        if self.tokens.is_empty() {
            return Ok(DEFAULT_PROJECT);
        }
        let token = authorization
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or(Unauthorized)?;
        // Every configured token is compared, in constant time each.
        let mut found: Option<&str> = None;
        for (t, project) in &self.tokens {
            if bool::from(t.as_bytes().ct_eq(token.as_bytes())) {
                found = Some(project);
            }
        }
        found.ok_or(Unauthorized)
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
}
