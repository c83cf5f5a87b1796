//! The server's webhook signing key and its JWKS document.
//!
//! Owns [`Signer`]: the Ed25519 key webhook deliveries are signed with, its
//! RFC 7638 key id, the `webhook-signature` header, and the JWKS document
//! (`__ds/jwks.json`) receivers verify it with.
//!
//! Invariants (docs/ARCHITECTURE.md, "Subscriptions"):
//! * one key per store, at `names::webhook_signing_key()`, created with a
//!   create-only PUT: when two servers start at once the loser reads and uses
//!   the winner's key, so every server of a store signs alike;
//! * the signed message is `"{t}.{body}"` with `t` the signing time in Unix
//!   seconds, taken from the caller's (injected) clock;
//! * the key's seed is the store's one server secret: the other keys every
//!   server of a store must share (subscription tokens, the fleet's peer
//!   key) are derived from it by [`Signer::derive`], HMAC-SHA256 of the seed
//!   over a label, and never stored.

use std::sync::Arc;

use crate::service::names;
use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use strata_manifest::store::{create_only, CreateOnly, RetryPolicy};

use super::error::OpenError;
use hex::encode as hex;

pub(crate) const B64URL: base64::engine::GeneralPurpose =
    base64::engine::general_purpose::URL_SAFE_NO_PAD;

/// The server's webhook signing key.
pub struct Signer {
    key: SigningKey,
    kid: String,
    x: String,
}

#[derive(Serialize, Deserialize)]
struct StoredSigningKey {
    seed: String,
}

/// The JWKS document (`GET __ds/jwks.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Jwks {
    pub keys: Vec<Jwk>,
}

/// One public key of the JWKS document (fields in the order they are written).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Jwk {
    pub alg: &'static str,
    pub crv: &'static str,
    pub kid: String,
    pub kty: &'static str,
    #[serde(rename = "use")]
    pub key_use: &'static str,
    pub x: String,
}

impl Signer {
    /// Loads the store's signing key, creating it (create-only) on first
    /// start; `random` supplies the seed's bytes.
    pub async fn load(
        store: &Arc<dyn ObjectStore>,
        random: impl Fn() -> [u8; 16],
    ) -> Result<Signer, OpenError> {
        let path = names::webhook_signing_key();
        let failed = |e: &dyn std::fmt::Display| OpenError::SigningKey(format!("{path}: {e}"));
        let decode = |bytes: &[u8]| -> Result<Signer, OpenError> {
            let stored: StoredSigningKey = serde_json::from_slice(bytes).map_err(|e| failed(&e))?;
            let seed = decode_seed(&stored.seed).ok_or_else(|| failed(&"bad seed"))?;
            Ok(Signer::from_seed(&seed))
        };
        match store.get(&path).await {
            Ok(found) => {
                let bytes = found.bytes().await.map_err(|e| failed(&e))?;
                return decode(&bytes);
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(failed(&e)),
        }
        let mut seed = [0u8; 32];
        seed[..16].copy_from_slice(&random());
        seed[16..].copy_from_slice(&random());
        let stored =
            serde_json::to_vec(&StoredSigningKey { seed: hex(seed) }).map_err(|e| failed(&e))?;
        // Create-only with read-back: another server may have created it first
        // (or an earlier attempt of ours landed); then the stored key is used.
        let created = create_only(
            store,
            &path,
            PutPayload::from(stored),
            &RetryPolicy::default(),
            "webhook signing key",
        )
        .await
        .map_err(|e| failed(&e))?;
        match created {
            CreateOnly::Created => Ok(Signer::from_seed(&seed)),
            CreateOnly::Taken(taken) => {
                let bytes = taken
                    .found
                    .ok_or_else(|| failed(&"created by another server, then gone"))?;
                decode(&bytes)
            }
        }
    }

    fn from_seed(seed: &[u8; 32]) -> Signer {
        let key = SigningKey::from_bytes(seed);
        let x = B64URL.encode(key.verifying_key().to_bytes());
        // RFC 7638 thumbprint: the required members, lexicographic order.
        let thumbprint = Sha256::digest(format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#));
        Signer {
            key,
            kid: format!("ds_{}", B64URL.encode(thumbprint)),
            x,
        }
    }

    /// A 32-byte key for `label`, derived from the seed (HMAC-SHA256 over
    /// the label): the same on every server of the store.
    pub fn derive(&self, label: &str) -> [u8; 32] {
        use hmac::{Hmac, Mac};
        let mut out = [0u8; 32];
        // HMAC takes a key of any length: this cannot fail.
        if let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(&self.key.to_bytes()) {
            mac.update(label.as_bytes());
            out.copy_from_slice(&mac.finalize().into_bytes());
        }
        out
    }

    /// The key id (`ds_` and the key's RFC 7638 thumbprint).
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The JWKS document publishing the public key.
    pub fn jwks(&self) -> Jwks {
        Jwks {
            keys: vec![Jwk {
                alg: "EdDSA",
                crv: "Ed25519",
                kid: self.kid.clone(),
                kty: "OKP",
                key_use: "sig",
                x: self.x.clone(),
            }],
        }
    }

    /// The `webhook-signature` header of `body` signed at `t` (Unix seconds).
    pub fn signature_header(&self, t: u64, body: &str) -> String {
        let signature = self.key.sign(format!("{t}.{body}").as_bytes());
        format!(
            "t={t},kid={},ed25519={}",
            self.kid,
            B64URL.encode(signature.to_bytes())
        )
    }
}

fn decode_seed(text: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signature, Verifier, VerifyingKey};
    use serde_json::json;

    #[tokio::test]
    async fn the_key_is_created_once_and_reused() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let first = Signer::load(&store, || [7; 16]).await.unwrap();
        let again = Signer::load(&store, || [9; 16]).await.unwrap();
        assert_eq!(first.kid(), again.kid());
        assert_eq!(first.jwks(), again.jwks());
        assert!(first.kid().starts_with("ds_"));
    }

    #[test]
    fn the_jwks_document_keeps_its_shape() {
        let signer = Signer::from_seed(&[3; 32]);
        let typed = serde_json::to_string(&signer.jwks()).unwrap();
        let before = json!({"keys": [{
            "kty": "OKP",
            "crv": "Ed25519",
            "x": signer.x,
            "kid": signer.kid,
            "use": "sig",
            "alg": "EdDSA",
        }]})
        .to_string();
        assert_eq!(typed, before);
    }

    #[test]
    fn signatures_verify_with_the_published_key() {
        let signer = Signer::from_seed(&[5; 32]);
        let header = signer.signature_header(1_700_000_000, "{}");
        let (head, sig) = header.split_once(",ed25519=").unwrap();
        assert_eq!(head, format!("t=1700000000,kid={}", signer.kid()));
        let x: [u8; 32] = B64URL.decode(&signer.jwks().keys[0].x).unwrap()[..]
            .try_into()
            .unwrap();
        let sig: [u8; 64] = B64URL.decode(sig).unwrap()[..].try_into().unwrap();
        VerifyingKey::from_bytes(&x)
            .unwrap()
            .verify(b"1700000000.{}", &Signature::from_bytes(&sig))
            .unwrap();
    }

    #[tokio::test]
    async fn derived_keys_are_shared_by_the_store_and_differ_by_label() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let first = Signer::load(&store, || [7; 16]).await.unwrap();
        let again = Signer::load(&store, || [9; 16]).await.unwrap();
        assert_eq!(first.derive("a"), again.derive("a"));
        assert_ne!(first.derive("a"), first.derive("b"));
        assert_ne!(first.derive("a"), Signer::from_seed(&[1; 32]).derive("a"));
    }

    #[test]
    fn seeds_are_64_hex_digits() {
        assert_eq!(decode_seed(&"ab".repeat(32)), Some([0xab; 32]));
        assert_eq!(decode_seed("ab"), None);
        assert_eq!(decode_seed(&"zz".repeat(32)), None);
    }
}
