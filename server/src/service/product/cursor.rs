//! Key cursors: opaque, integrity-checked positions in one routing key's view
//! of one collection incarnation.
//!
//! ```text
//! token   = base64url-nopad(payload ‖ mac16)
//! payload = kind 0x11 ‖ stream epoch 16 ‖ routing-key hash 16 ‖ lineage u32 LE ‖ position u64 LE
//! mac16   = HMAC-SHA256(subkey, payload ‖ project)[..16]
//! subkey  = derive_subkey(epoch, stream key, "\0product-cursor\0", 0)
//! ```
//!
//! The kind byte keeps token classes apart (raw offsets are text, scan
//! cursors are 0x21, [`super::scan_cursor`]); the epoch ties a cursor to one incarnation, the key
//! hash (`SHA-256(routing key)[..16]`) to one routing key, and the MAC — keyed
//! by the stream key and bound to the project — makes a cursor unforgeable
//! without the key. The lineage field is always 0: a collection is one
//! engine stream (no splits), so the position alone locates a read.
//!
//! Every failure is the same `invalid_cursor`: decoding never says which check
//! failed.

use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use strata_segments::{derive_subkey, StreamEpoch, StreamKey};
use subtle::ConstantTimeEq;

pub const KIND_KEY_CURSOR: u8 = 0x11;
const PAYLOAD_BYTES: usize = 1 + 16 + 16 + 4 + 8;
const MAC_BYTES: usize = 16;
pub const CURSOR_BYTES: usize = PAYLOAD_BYTES + MAC_BYTES;
const CURSOR_SUBKEY_LABEL: &[u8] = b"\0product-cursor\0";

/// `SHA-256(routing key)[..16]`.
pub fn routing_key_hash(routing_key: &[u8]) -> [u8; 16] {
    let digest = Sha256::digest(routing_key);
    digest[..16].try_into().expect("16 bytes")
}

/// What a key cursor is bound to.
pub struct CursorScope<'a> {
    pub project: &'a str,
    pub epoch: [u8; 16],
    pub key: &'a StreamKey,
    pub routing_key: &'a [u8],
}

/// The MAC of a product token's `payload` (any kind: the kind byte leads
/// the payload), keyed by the stream key's cursor subkey for `epoch` and
/// bound to `project`.
pub(super) fn token_mac(
    project: &str,
    epoch: [u8; 16],
    key: &StreamKey,
    payload: &[u8],
) -> [u8; MAC_BYTES] {
    let subkey = derive_subkey(&StreamEpoch(epoch), key, CURSOR_SUBKEY_LABEL, 0);
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(subkey.as_slice())
        .expect("HMAC takes any key length");
    mac.update(payload);
    mac.update(project.as_bytes());
    let full = mac.finalize().into_bytes();
    full[..MAC_BYTES].try_into().expect("16 bytes")
}

/// The text of a token: `base64url-nopad(payload ‖ mac)`.
pub(super) fn token_text(payload: &[u8], mac: &[u8; MAC_BYTES]) -> String {
    let mut token = Vec::with_capacity(payload.len() + MAC_BYTES);
    token.extend_from_slice(payload);
    token.extend_from_slice(mac);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token)
}

/// A token's payload if `text` is `payload_bytes` of payload and a MAC that
/// `mac` confirms (compared in constant time).
pub(super) fn token_payload(
    text: &str,
    payload_bytes: usize,
    mac: impl FnOnce(&[u8]) -> [u8; MAC_BYTES],
) -> Option<Vec<u8>> {
    let token_bytes = payload_bytes + MAC_BYTES;
    if text.len() > 2 * token_bytes {
        return None;
    }
    let mut bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .ok()?;
    if bytes.len() != token_bytes {
        return None;
    }
    let expected = mac(&bytes[..payload_bytes]);
    let mac_ok: bool = expected.ct_eq(&bytes[payload_bytes..]).into();
    if !mac_ok {
        return None;
    }
    bytes.truncate(payload_bytes);
    Some(bytes)
}

impl CursorScope<'_> {
    fn mac(&self, payload: &[u8]) -> [u8; MAC_BYTES] {
        token_mac(self.project, self.epoch, self.key, payload)
    }

    fn payload(&self, position: u64) -> [u8; PAYLOAD_BYTES] {
        let mut p = [0u8; PAYLOAD_BYTES];
        p[0] = KIND_KEY_CURSOR;
        p[1..17].copy_from_slice(&self.epoch);
        p[17..33].copy_from_slice(&routing_key_hash(self.routing_key));
        p[33..37].copy_from_slice(&0u32.to_le_bytes());
        p[37..45].copy_from_slice(&position.to_le_bytes());
        p
    }

    /// The cursor of `position`.
    pub fn encode(&self, position: u64) -> String {
        let payload = self.payload(position);
        token_text(&payload, &self.mac(&payload))
    }

    /// The position of a cursor, if it is one of this scope's.
    pub fn decode(&self, text: &str) -> Option<u64> {
        let payload = token_payload(text, PAYLOAD_BYTES, |p| self.mac(p))?;
        let expected = self.payload(0);
        // Everything but the position must be this scope's.
        if payload[..37] != expected[..37] {
            return None;
        }
        Some(u64::from_le_bytes(payload[37..45].try_into().ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> StreamKey {
        StreamKey::from_bytes([b; 32])
    }

    #[test]
    fn round_trip_and_scope() {
        let k = key(1);
        let scope = CursorScope {
            project: "p",
            epoch: [9; 16],
            key: &k,
            routing_key: b"user-1",
        };
        for position in [0, 1, 77, u64::MAX] {
            assert_eq!(scope.decode(&scope.encode(position)), Some(position));
        }
        let token = scope.encode(5);
        let other_key = key(2);
        let others = [
            CursorScope {
                project: "q",
                ..CursorScope {
                    ..scope_clone(&scope)
                }
            },
            CursorScope {
                epoch: [8; 16],
                ..scope_clone(&scope)
            },
            CursorScope {
                routing_key: b"user-2",
                ..scope_clone(&scope)
            },
            CursorScope {
                key: &other_key,
                ..scope_clone(&scope)
            },
        ];
        for other in &others {
            assert_eq!(other.decode(&token), None);
        }
        // Tampering, truncation, padding and garbage.
        let mut bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&token)
            .unwrap();
        bytes[40] ^= 1;
        let tampered = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&bytes);
        for bad in [
            tampered.as_str(),
            &token[..token.len() - 1],
            &format!("{token}="),
            "",
            "beginning",
            "0000000000000000_0000000000000005",
        ] {
            assert_eq!(scope.decode(bad), None, "{bad}");
        }
    }

    fn scope_clone<'a>(s: &CursorScope<'a>) -> CursorScope<'a> {
        CursorScope {
            project: s.project,
            epoch: s.epoch,
            key: s.key,
            routing_key: s.routing_key,
        }
    }
}
