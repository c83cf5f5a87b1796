//! HMAC callback tokens.
//!
//! Owns [`TokenKey`] (mints and checks the bearer tokens `callback`, `ack` and
//! `release` carry) and [`VerifiedToken`] (what a checked token proves).
//!
//! A token is `base64url(claims) "." base64url(HMAC-SHA256(key, base64url(claims)))`
//! with claims `{"sub":"subscription:<id>","prj":"<project>","generation":…,"exp":…,"jti":…}`:
//! the token names its project, so a callback needs no other credential.
//! Invariants (docs/ARCHITECTURE.md, "Subscriptions"):
//! * the key is derived from the store's server seed, so every server of a
//!   store (every fleet member, and the same server after a restart) mints
//!   and checks alike: a holder's token survives a restart or a move of the
//!   subscriptions to another member;
//! * a token is scoped to one project, one subscription and one generation;
//!   expiry is checked against the caller's (injected) clock, in Unix seconds;
//! * a [`VerifiedToken`] can only be made here, by checking a token.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde::Deserialize;
use sha2::Sha256;

use super::error::{OpenError, SubError};
use super::signing::B64URL;
use hex::encode as hex;

/// How long a minted token stays valid.
pub const TOKEN_LIFETIME_S: u64 = 3_600;

#[derive(Deserialize)]
struct TokenClaims {
    sub: String,
    prj: String,
    generation: u64,
    exp: u64,
    jti: String,
}

impl TokenClaims {
    /// The claims' compact JSON, in the order they are written (an infallible
    /// construction: the strings are escaped as JSON strings).
    fn to_json(&self) -> String {
        format!(
            r#"{{"sub":{},"prj":{},"generation":{},"exp":{},"jti":{}}}"#,
            serde_json::Value::String(self.sub.clone()),
            serde_json::Value::String(self.prj.clone()),
            self.generation,
            self.exp,
            serde_json::Value::String(self.jti.clone()),
        )
    }
}

/// A token that checked out: for this subscription, at this generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedToken {
    project: String,
    subscription: String,
    generation: u64,
}

impl VerifiedToken {
    /// The project the token is for.
    pub fn project(&self) -> &str {
        &self.project
    }

    /// The subscription the token is for.
    pub fn subscription(&self) -> &str {
        &self.subscription
    }

    /// The generation the token was minted at.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

/// The HMAC key tokens are minted and checked with.
pub struct TokenKey {
    mac: Hmac<Sha256>,
}

impl TokenKey {
    pub fn new(key: &[u8; 32]) -> Result<TokenKey, OpenError> {
        let mac =
            Hmac::<Sha256>::new_from_slice(key).map_err(|e| OpenError::TokenKey(e.to_string()))?;
        Ok(TokenKey { mac })
    }

    /// A token for subscription `id` at `generation`, valid for
    /// [`TOKEN_LIFETIME_S`] from `now_ms`; `jti` makes it unique.
    pub fn mint(
        &self,
        project: &str,
        id: &str,
        generation: u64,
        now_ms: u64,
        jti: [u8; 16],
    ) -> String {
        let claims = TokenClaims {
            sub: format!("subscription:{id}"),
            prj: project.to_string(),
            generation,
            exp: now_ms / 1000 + TOKEN_LIFETIME_S,
            jti: hex(jti),
        };
        let payload = B64URL.encode(claims.to_json());
        let mut mac = self.mac.clone();
        mac.update(payload.as_bytes());
        format!("{payload}.{}", B64URL.encode(mac.finalize().into_bytes()))
    }

    /// Checks `token` for subscription `id` at `now_ms`.
    pub fn check(
        &self,
        id: &str,
        token: Option<&str>,
        now_ms: u64,
    ) -> Result<VerifiedToken, SubError> {
        let invalid = || SubError::TokenInvalid;
        let token = token.ok_or_else(invalid)?;
        let (payload, signature) = token.split_once('.').ok_or_else(invalid)?;
        let signature = B64URL.decode(signature).map_err(|_| invalid())?;
        let mut mac = self.mac.clone();
        mac.update(payload.as_bytes());
        mac.verify_slice(&signature).map_err(|_| invalid())?;
        let claims: TokenClaims = B64URL
            .decode(payload)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(invalid)?;
        if claims.sub != format!("subscription:{id}") {
            return Err(invalid());
        }
        if claims.exp < now_ms / 1000 {
            return Err(SubError::TokenExpired);
        }
        Ok(VerifiedToken {
            project: claims.prj,
            subscription: id.to_string(),
            generation: claims.generation,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_MS: u64 = 1_700_000_000_123;

    fn key() -> TokenKey {
        TokenKey::new(&[42; 32]).unwrap()
    }

    #[test]
    fn claims_are_written_as_serde_would() {
        #[derive(serde::Serialize)]
        struct Claims<'a> {
            sub: &'a str,
            prj: &'a str,
            generation: u64,
            exp: u64,
            jti: &'a str,
        }
        let claims = TokenClaims {
            sub: "subscription:a\"b\\c\u{1}é".into(),
            prj: "p\"q".into(),
            generation: 7,
            exp: 99,
            jti: "00ff".into(),
        };
        let serde = serde_json::to_string(&Claims {
            sub: &claims.sub,
            prj: &claims.prj,
            generation: 7,
            exp: 99,
            jti: "00ff",
        })
        .unwrap();
        assert_eq!(claims.to_json(), serde);
    }

    #[test]
    fn a_minted_token_checks_out_until_it_expires() {
        let key = key();
        let token = key.mint("p", "s1", 3, NOW_MS, [1; 16]);
        let verified = key.check("s1", Some(&token), NOW_MS).unwrap();
        assert_eq!(verified.subscription(), "s1");
        assert_eq!(verified.project(), "p");
        assert_eq!(verified.generation(), 3);
        let last_ms = (NOW_MS / 1000 + TOKEN_LIFETIME_S) * 1000 + 999;
        assert!(key.check("s1", Some(&token), last_ms).is_ok());
        assert!(matches!(
            key.check("s1", Some(&token), last_ms + 1),
            Err(SubError::TokenExpired)
        ));
    }

    #[test]
    fn wrong_tokens_are_invalid() {
        let key = key();
        let token = key.mint("p", "s1", 3, NOW_MS, [1; 16]);
        let other_key = TokenKey::new(&[43; 32]).unwrap();
        for (id, token) in [
            ("s2", Some(token.clone())),
            ("s1", None),
            ("s1", Some("no-dot".to_string())),
            ("s1", Some(format!("{token}x"))),
            ("s1", Some(other_key.mint("p", "s1", 3, NOW_MS, [1; 16]))),
        ] {
            assert!(
                matches!(
                    key.check(id, token.as_deref(), NOW_MS),
                    Err(SubError::TokenInvalid)
                ),
                "{id} {token:?}"
            );
        }
    }
}
