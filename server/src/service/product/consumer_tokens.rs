//! Message ids and lease tokens of consumer groups: opaque, authenticated,
//! and sealed, so no internal position leaves the server readable
//! (docs/FORMATS.md §9.4).
//!
//! ```text
//! token   = base64url-nopad(kind ‖ AES-256-GCM-SIV(k, nonce = 0¹², body, aad = kind ‖ LE32(len(project)) ‖ project ‖ LE32(len(consumer)) ‖ consumer))
//! k       = derive_subkey(epoch, stream key, "\0consumer-token\0", 0)
//! message = kind 0x31, body = generation LE64 ‖ SHA-256(routing key)[..16] ‖ position LE64
//! lease   = kind 0x41, body = generation LE64 ‖ lease LE64 ‖ deadline_ms LE64 ‖ position LE64 ‖ routing key
//! ```
//!
//! The nonce is fixed on purpose. GCM-SIV with a fixed nonce is a
//! deterministic authenticated cipher: the same message always has the same
//! id, which the dead-letter step's idempotency (`dlq:{consumer}:{id}`)
//! relies on. It reveals only whether two tokens are equal. The tag binds a
//! token to its project, consumer, incarnation (the epoch is in `k`) and
//! stream key. The consumer generation in the body tells a recreated
//! consumer's tokens from its predecessor's. Every failure is the same
//! `None`.

use aes_gcm_siv::aead::{Aead, KeyInit, Payload};
use aes_gcm_siv::{Aes256GcmSiv, Nonce};
use base64::Engine as _;
use bytes::Bytes;
use strata_segments::{derive_subkey, StreamEpoch, StreamKey};

use super::cursor::routing_key_hash;
use super::ROUTING_KEY_BYTES_MAX;

pub const KIND_MESSAGE_ID: u8 = 0x31;
pub const KIND_LEASE_TOKEN: u8 = 0x41;
const SUBKEY_LABEL: &[u8] = b"\0consumer-token\0";
const TAG_BYTES: usize = 16;
const MESSAGE_BODY_BYTES: usize = 8 + 16 + 8;
const LEASE_FIXED_BYTES: usize = 8 * 4;
/// Longest token text accepted.
const TOKEN_TEXT_MAX: usize = 2 * (1 + LEASE_FIXED_BYTES + ROUTING_KEY_BYTES_MAX + TAG_BYTES);

/// Which message a message id names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageId {
    pub generation: u64,
    pub key_hash: [u8; 16],
    pub position: u64,
}

/// Which delivery a lease token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseToken {
    pub generation: u64,
    pub lease: u64,
    pub deadline_ms: u64,
    pub position: u64,
    pub routing_key: Bytes,
}

/// What every token of one consumer is bound to.
pub struct TokenScope<'a> {
    pub project: &'a str,
    pub consumer: &'a str,
    pub epoch: [u8; 16],
    pub key: &'a StreamKey,
}

impl TokenScope<'_> {
    fn cipher(&self) -> Aes256GcmSiv {
        let subkey = derive_subkey(&StreamEpoch(self.epoch), self.key, SUBKEY_LABEL, 0);
        Aes256GcmSiv::new_from_slice(subkey.as_slice()).expect("a 32-byte key")
    }

    fn aad(&self, kind: u8) -> Vec<u8> {
        let mut aad = vec![kind];
        for part in [self.project.as_bytes(), self.consumer.as_bytes()] {
            aad.extend_from_slice(&(part.len() as u32).to_le_bytes());
            aad.extend_from_slice(part);
        }
        aad
    }

    fn seal(&self, kind: u8, body: &[u8]) -> String {
        let aad = self.aad(kind);
        let sealed = self
            .cipher()
            .encrypt(
                Nonce::from_slice(&[0u8; 12]),
                Payload {
                    msg: body,
                    aad: &aad,
                },
            )
            .expect("GCM-SIV encrypts any short body");
        let mut token = Vec::with_capacity(1 + sealed.len());
        token.push(kind);
        token.extend_from_slice(&sealed);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token)
    }

    fn open(&self, kind: u8, text: &str) -> Option<Vec<u8>> {
        if text.len() > TOKEN_TEXT_MAX {
            return None;
        }
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(text)
            .ok()?;
        let (&found, sealed) = bytes.split_first()?;
        if found != kind || sealed.len() < TAG_BYTES {
            return None;
        }
        let aad = self.aad(kind);
        self.cipher()
            .decrypt(
                Nonce::from_slice(&[0u8; 12]),
                Payload {
                    msg: sealed,
                    aad: &aad,
                },
            )
            .ok()
    }

    /// The id of the record at `position` of `routing_key`.
    pub fn message_id(&self, generation: u64, routing_key: &[u8], position: u64) -> String {
        let mut body = Vec::with_capacity(MESSAGE_BODY_BYTES);
        body.extend_from_slice(&generation.to_le_bytes());
        body.extend_from_slice(&routing_key_hash(routing_key));
        body.extend_from_slice(&position.to_le_bytes());
        self.seal(KIND_MESSAGE_ID, &body)
    }

    pub fn open_message_id(&self, text: &str) -> Option<MessageId> {
        let body = self.open(KIND_MESSAGE_ID, text)?;
        if body.len() != MESSAGE_BODY_BYTES {
            return None;
        }
        Some(MessageId {
            generation: u64::from_le_bytes(body[0..8].try_into().ok()?),
            key_hash: body[8..24].try_into().ok()?,
            position: u64::from_le_bytes(body[24..32].try_into().ok()?),
        })
    }

    pub fn lease_token(&self, token: &LeaseToken) -> String {
        let mut body = Vec::with_capacity(LEASE_FIXED_BYTES + token.routing_key.len());
        for word in [
            token.generation,
            token.lease,
            token.deadline_ms,
            token.position,
        ] {
            body.extend_from_slice(&word.to_le_bytes());
        }
        body.extend_from_slice(&token.routing_key);
        self.seal(KIND_LEASE_TOKEN, &body)
    }

    pub fn open_lease_token(&self, text: &str) -> Option<LeaseToken> {
        let body = self.open(KIND_LEASE_TOKEN, text)?;
        if body.len() < LEASE_FIXED_BYTES || body.len() > LEASE_FIXED_BYTES + ROUTING_KEY_BYTES_MAX
        {
            return None;
        }
        let word = |i: usize| -> Option<u64> {
            Some(u64::from_le_bytes(body[8 * i..8 * i + 8].try_into().ok()?))
        };
        Some(LeaseToken {
            generation: word(0)?,
            lease: word(1)?,
            deadline_ms: word(2)?,
            position: word(3)?,
            routing_key: Bytes::copy_from_slice(&body[LEASE_FIXED_BYTES..]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(key: &StreamKey) -> TokenScope<'_> {
        TokenScope {
            project: "p",
            consumer: "workers",
            epoch: [7; 16],
            key,
        }
    }

    #[test]
    fn tokens_round_trip_and_hide_their_positions() {
        let key = StreamKey::from_bytes([1; 32]);
        let s = scope(&key);
        let id = s.message_id(3, b"user-1", 0x0102_0304_0506_0708);
        assert_eq!(
            s.open_message_id(&id),
            Some(MessageId {
                generation: 3,
                key_hash: routing_key_hash(b"user-1"),
                position: 0x0102_0304_0506_0708,
            })
        );
        assert_eq!(
            id,
            s.message_id(3, b"user-1", 0x0102_0304_0506_0708),
            "deterministic"
        );
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&id)
            .unwrap();
        let position = 0x0102_0304_0506_0708u64.to_le_bytes();
        assert!(
            !raw.windows(8).any(|w| w == position),
            "the position is not readable"
        );
        let lease = LeaseToken {
            generation: 3,
            lease: 99,
            deadline_ms: 1_700_000_000_000,
            position: 42,
            routing_key: Bytes::from_static(b"user-1"),
        };
        let text = s.lease_token(&lease);
        assert_eq!(s.open_lease_token(&text), Some(lease));
    }

    #[test]
    fn tokens_are_bound_to_their_kind_scope_and_bytes() {
        let key = StreamKey::from_bytes([1; 32]);
        let other_key = StreamKey::from_bytes([2; 32]);
        let s = scope(&key);
        let id = s.message_id(1, b"k", 5);
        let lease = s.lease_token(&LeaseToken {
            generation: 1,
            lease: 1,
            deadline_ms: 1,
            position: 5,
            routing_key: Bytes::from_static(b"k"),
        });
        assert_eq!(
            s.open_lease_token(&id),
            None,
            "a message id is no lease token"
        );
        assert_eq!(s.open_message_id(&lease), None, "nor the other way");
        let others = [
            TokenScope {
                project: "q",
                ..scope(&key)
            },
            TokenScope {
                consumer: "other",
                ..scope(&key)
            },
            TokenScope {
                epoch: [8; 16],
                ..scope(&key)
            },
            TokenScope {
                key: &other_key,
                ..scope(&key)
            },
        ];
        for other in &others {
            assert_eq!(other.open_message_id(&id), None);
            assert_eq!(other.open_lease_token(&lease), None);
        }
        let mut bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&lease)
            .unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let tampered = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&bytes);
        for bad in [
            tampered.as_str(),
            &lease[..lease.len() - 2],
            "",
            "QQ",
            "not base64!",
        ] {
            assert_eq!(s.open_lease_token(bad), None, "{bad}");
        }
    }
}
