//! Watch capabilities and watch cursors (docs/FORMATS.md, "Watch
//! capabilities").
//!
//! A capability lets its bearer observe one watch key of one collection for
//! a few minutes, and nothing else: no reads, no writes, no management. The
//! client that holds the stream key signs it offline:
//!
//! ```text
//! touch token  = HKDF-SHA256(salt = epoch, ikm = stream key,   info = "touch-capability-v1")
//! wait sig key = HKDF-SHA256(salt = epoch, ikm = touch token,  info = "wait-sig-v1")
//! capability   = <project>.<expiry, unix seconds>.<hex of mac16>
//! mac16        = HMAC-SHA256(wait sig key, "strata/watch-capability/v1" ‖ 0x00 ‖
//!                  for each of (project, collection, epoch 16, watch, watch key hex, "GET", expiry decimal):
//!                  LE32(length) ‖ bytes)[..16]
//! ```
//!
//! The server keeps only the wait signature key (in the descriptor, written
//! at create), so it can check capabilities but never derive the stream key.
//! A capability is valid until its expiry plus [`SKEW_S`], and only if that
//! expiry is at most [`LIFETIME_S_MAX`] (+ skew) ahead. Every failure is the
//! same answer (403 `watch_unauthorized`), whatever failed.
//!
//! A watch cursor (`cursor` in an observation's answer) is
//! `base64url-nopad(kind 0x51 ‖ generation 16 ‖ sequence LE64 ‖ mac16)`, the MAC
//! under the wait signature key over the payload, the watch name and the
//! watch key: it names a point in one journal generation
//! (`service::watches`).

use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

use super::cursor::{token_payload, token_text};
use super::watch_keys::WatchKey;

/// Longest a capability may be valid for, from now.
pub const LIFETIME_S_MAX: u64 = 300;
/// Clock difference tolerated between the signer and the server.
pub const SKEW_S: u64 = 30;
pub const KIND_WATCH_CURSOR: u8 = 0x51;
const CAPABILITY_LABEL: &[u8] = b"strata/watch-capability/v1\0";
const CURSOR_PAYLOAD_BYTES: usize = 1 + 16 + 8;
/// Longest capability text accepted (a project name is at most 128 bytes).
const CAPABILITY_BYTES_MAX: usize = 256;

/// The key that signs a collection incarnation's capabilities.
#[derive(Clone, PartialEq, Eq)]
pub struct WaitSigKey(pub [u8; 32]);

impl std::fmt::Debug for WaitSigKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WaitSigKey(…)")
    }
}

impl WaitSigKey {
    /// The chain from the stream key (client side, and at create).
    pub fn derive(epoch: &[u8; 16], stream_key: &[u8; 32]) -> WaitSigKey {
        let mut touch = [0u8; 32];
        Hkdf::<Sha256>::new(Some(epoch), stream_key)
            .expand(b"touch-capability-v1", &mut touch)
            .expect("32 bytes is a valid HKDF length");
        let mut sig = [0u8; 32];
        Hkdf::<Sha256>::new(Some(epoch), &touch)
            .expand(b"wait-sig-v1", &mut sig)
            .expect("32 bytes is a valid HKDF length");
        WaitSigKey(sig)
    }

    pub fn from_hex(text: &str) -> Option<WaitSigKey> {
        let bytes = hex::decode(text).ok()?;
        Some(WaitSigKey(bytes.try_into().ok()?))
    }

    pub fn hex(&self) -> String {
        hex::encode(self.0)
    }

    fn mac(&self) -> Hmac<Sha256> {
        <Hmac<Sha256> as Mac>::new_from_slice(&self.0).expect("HMAC takes any key length")
    }
}

/// What a capability names.
#[derive(Debug, Clone, Copy)]
pub struct CapabilityScope<'a> {
    pub project: &'a str,
    pub collection: &'a str,
    pub epoch: &'a [u8; 16],
    pub watch: &'a str,
    pub key: WatchKey,
}

impl CapabilityScope<'_> {
    fn mac16(&self, sig: &WaitSigKey, expiry_s: u64) -> [u8; 16] {
        let mut mac = sig.mac();
        mac.update(CAPABILITY_LABEL);
        let key_hex = self.key.hex();
        let expiry = expiry_s.to_string();
        let fields: [&[u8]; 7] = [
            self.project.as_bytes(),
            self.collection.as_bytes(),
            self.epoch,
            self.watch.as_bytes(),
            key_hex.as_bytes(),
            b"GET",
            expiry.as_bytes(),
        ];
        for field in fields {
            mac.update(&(field.len() as u32).to_le_bytes());
            mac.update(field);
        }
        mac.finalize().into_bytes()[..16]
            .try_into()
            .expect("16 bytes")
    }

    /// The capability text (what a client holding the key builds).
    pub fn sign(&self, sig: &WaitSigKey, expiry_s: u64) -> String {
        format!(
            "{}.{expiry_s}.{}",
            self.project,
            hex::encode(self.mac16(sig, expiry_s))
        )
    }

    /// Whether `capability` grants this scope at `now_s`.
    pub fn admits(&self, sig: &WaitSigKey, capability: &str, now_s: u64) -> bool {
        let Some(parsed) = parse_capability(capability) else {
            return false;
        };
        let in_time = now_s <= parsed.expiry_s.saturating_add(SKEW_S)
            && parsed.expiry_s <= now_s.saturating_add(LIFETIME_S_MAX + SKEW_S);
        let expected = self.mac16(sig, parsed.expiry_s);
        let mac_ok: bool = expected.ct_eq(&parsed.mac).into();
        let project_ok = parsed.project == self.project;
        in_time && mac_ok && project_ok
    }
}

/// A capability's parts.
pub struct ParsedCapability<'a> {
    pub project: &'a str,
    pub expiry_s: u64,
    pub mac: [u8; 16],
}

/// Splits `<project>.<expiry>.<hex32>` (the project may hold dots).
pub fn parse_capability(text: &str) -> Option<ParsedCapability<'_>> {
    if text.len() > CAPABILITY_BYTES_MAX {
        return None;
    }
    let mut parts = text.rsplitn(3, '.');
    let mac_hex = parts.next()?;
    let expiry = parts.next()?;
    let project = parts.next()?;
    if mac_hex.len() != 32 || expiry.is_empty() || !expiry.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mac: [u8; 16] = hex::decode(mac_hex).ok()?.try_into().ok()?;
    Some(ParsedCapability {
        project,
        expiry_s: expiry.parse().ok()?,
        mac,
    })
}

/// A point in one journal generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchCursor {
    pub generation: [u8; 16],
    pub sequence: u64,
}

/// What a watch cursor is bound to.
pub struct CursorBinding<'a> {
    pub sig: &'a WaitSigKey,
    pub watch: &'a str,
    pub key: WatchKey,
}

impl CursorBinding<'_> {
    fn mac16(&self, payload: &[u8]) -> [u8; 16] {
        let mut mac = self.sig.mac();
        mac.update(payload);
        mac.update(&(self.watch.len() as u32).to_le_bytes());
        mac.update(self.watch.as_bytes());
        mac.update(&self.key.0.to_le_bytes());
        mac.finalize().into_bytes()[..16]
            .try_into()
            .expect("16 bytes")
    }

    pub fn encode(&self, cursor: &WatchCursor) -> String {
        let mut payload = [0u8; CURSOR_PAYLOAD_BYTES];
        payload[0] = KIND_WATCH_CURSOR;
        payload[1..17].copy_from_slice(&cursor.generation);
        payload[17..25].copy_from_slice(&cursor.sequence.to_le_bytes());
        token_text(&payload, &self.mac16(&payload))
    }

    pub fn decode(&self, text: &str) -> Option<WatchCursor> {
        let payload = token_payload(text, CURSOR_PAYLOAD_BYTES, |p| self.mac16(p))?;
        if payload[0] != KIND_WATCH_CURSOR {
            return None;
        }
        Some(WatchCursor {
            generation: payload[1..17].try_into().ok()?,
            sequence: u64::from_le_bytes(payload[17..25].try_into().ok()?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: [u8; 16] = [0x11; 16];
    const STREAM_KEY: [u8; 32] = [0x22; 32];

    fn scope() -> CapabilityScope<'static> {
        CapabilityScope {
            project: "alpha",
            collection: "orders",
            epoch: &EPOCH,
            watch: "by-customer",
            key: WatchKey(0xe50c5bb85a187117),
        }
    }

    /// Fixed vectors: the SDK's tests carry the same ones.
    #[test]
    fn the_key_chain_and_signature_match_the_shared_vectors() {
        let sig = WaitSigKey::derive(&EPOCH, &STREAM_KEY);
        assert_eq!(sig.hex(), VECTOR_WAIT_SIG_KEY);
        assert_eq!(scope().sign(&sig, 1_900_000_000), VECTOR_CAPABILITY);
    }

    const VECTOR_WAIT_SIG_KEY: &str =
        "c5ddb2150b6b6ef946d10ae7711f99daa0418845f0ea34fe3b3218b0463d3f04";
    const VECTOR_CAPABILITY: &str = "alpha.1900000000.a682088f50c1895a681470a146004d60";

    #[test]
    fn a_capability_admits_its_own_scope_in_its_time_only() {
        let sig = WaitSigKey::derive(&EPOCH, &STREAM_KEY);
        let now = 1_000_000;
        let cap = scope().sign(&sig, now + 60);
        assert!(scope().admits(&sig, &cap, now));
        assert!(scope().admits(&sig, &cap, now + 60 + SKEW_S), "skew");
        assert!(!scope().admits(&sig, &cap, now + 61 + SKEW_S), "expired");
        let too_long = scope().sign(&sig, now + LIFETIME_S_MAX + SKEW_S + 1);
        assert!(!scope().admits(&sig, &too_long, now), "beyond the lifetime");
        let other_key = WaitSigKey::derive(&EPOCH, &[0x23; 32]);
        assert!(!scope().admits(&other_key, &cap, now), "another stream key");
        let others = [
            CapabilityScope {
                project: "beta",
                ..scope()
            },
            CapabilityScope {
                collection: "orders2",
                ..scope()
            },
            CapabilityScope {
                epoch: &[0x12; 16],
                ..scope()
            },
            CapabilityScope {
                watch: "by-total",
                ..scope()
            },
            CapabilityScope {
                key: WatchKey(1),
                ..scope()
            },
        ];
        for other in others {
            assert!(!other.admits(&sig, &cap, now), "{other:?}");
        }
        let forged = format!("alpha.{}.{}", now + 60, "0".repeat(32));
        let relabeled = cap.replacen("alpha", "beta", 1);
        for bad in [
            forged.as_str(),
            &relabeled,
            "",
            "alpha",
            "alpha.1.xyz",
            &cap[1..],
        ] {
            assert!(!scope().admits(&sig, bad, now), "{bad}");
        }
    }

    #[test]
    fn watch_cursors_round_trip_and_are_bound_to_their_watch_key() {
        let sig = WaitSigKey::derive(&EPOCH, &STREAM_KEY);
        let binding = CursorBinding {
            sig: &sig,
            watch: "w",
            key: WatchKey(7),
        };
        let cursor = WatchCursor {
            generation: [3; 16],
            sequence: 42,
        };
        let text = binding.encode(&cursor);
        assert_eq!(binding.decode(&text), Some(cursor));
        let other = CursorBinding {
            key: WatchKey(8),
            ..binding
        };
        assert_eq!(other.decode(&text), None);
        assert_eq!(binding.decode("now"), None);
    }
}
