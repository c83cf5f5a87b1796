//! Scan cursors: opaque, integrity-checked positions in one snapshot scan of
//! one collection incarnation.
//!
//! ```text
//! token   = base64url-nopad(payload ‖ mac16)
//! payload = kind 0x21 ‖ stream epoch 16 ‖ end u64 LE ‖ position u64 LE ‖ expires_ms u64 LE
//! mac16   = HMAC-SHA256(subkey, payload ‖ project)[..16]   (the key cursor's subkey)
//! ```
//!
//! The snapshot is `[0, end)` of the collection's positions: `end` is the
//! durable tail when the scan's first page was read, so records appended
//! later are never part of it. A collection is one engine stream whose
//! positions stay readable for its whole life (sealing and GC move records
//! between objects, never drop one), so the two numbers are the whole
//! snapshot: no object ids are captured and nothing has to be retained for a
//! scan beyond the collection itself. `expires_ms` (epoch milliseconds) is
//! the first page's time plus [`SCAN_TTL_MS`]; a later page refuses the
//! cursor once it passed (410 `scan_expired`): a scan never restarts
//! silently.
//!
//! Every other failure is the same `invalid_cursor`: decoding never says
//! which check failed, and the kind byte keeps key cursors out.

use strata_segments::StreamKey;

use super::cursor::{token_mac, token_payload, token_text};

pub const KIND_SCAN_CURSOR: u8 = 0x21;
const PAYLOAD_BYTES: usize = 1 + 16 + 8 + 8 + 8;
/// How long a scan's cursors stay valid after its first page.
pub const SCAN_TTL_MS: u64 = 6 * 3600 * 1000;
/// Scan page bounds (`maxBytes` is clamped into them) and the default.
pub const SCAN_BYTES_MIN: usize = 4 << 10;
pub const SCAN_BYTES_MAX: usize = 8 << 20;
pub const SCAN_BYTES_DEFAULT: usize = 4 << 20;

/// Where a scan stands: the next position to read in the snapshot `[0, end)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanCursor {
    pub end: u64,
    pub position: u64,
    pub expires_ms: u64,
}

impl ScanCursor {
    /// Whether the scan has returned every record of its snapshot.
    pub fn complete(&self) -> bool {
        self.position >= self.end
    }

    pub fn expired(&self, now_ms: u64) -> bool {
        now_ms >= self.expires_ms
    }
}

/// What a scan cursor is bound to.
pub struct ScanScope<'a> {
    pub project: &'a str,
    pub epoch: [u8; 16],
    pub key: &'a StreamKey,
}

impl ScanScope<'_> {
    fn payload(&self, cursor: &ScanCursor) -> [u8; PAYLOAD_BYTES] {
        let mut p = [0u8; PAYLOAD_BYTES];
        p[0] = KIND_SCAN_CURSOR;
        p[1..17].copy_from_slice(&self.epoch);
        p[17..25].copy_from_slice(&cursor.end.to_le_bytes());
        p[25..33].copy_from_slice(&cursor.position.to_le_bytes());
        p[33..41].copy_from_slice(&cursor.expires_ms.to_le_bytes());
        p
    }

    fn mac(&self, payload: &[u8]) -> [u8; 16] {
        token_mac(self.project, self.epoch, self.key, payload)
    }

    pub fn encode(&self, cursor: &ScanCursor) -> String {
        let payload = self.payload(cursor);
        token_text(&payload, &self.mac(&payload))
    }

    /// The cursor a token holds, if it is one of this scope's (expired or
    /// not: the caller judges expiry, which has its own answer).
    pub fn decode(&self, text: &str) -> Option<ScanCursor> {
        let payload = token_payload(text, PAYLOAD_BYTES, |p| self.mac(p))?;
        if payload[0] != KIND_SCAN_CURSOR || payload[1..17] != self.epoch {
            return None;
        }
        let word = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(payload[at..at + 8].try_into().ok()?))
        };
        let cursor = ScanCursor {
            end: word(17)?,
            position: word(25)?,
            expires_ms: word(33)?,
        };
        // Only the server writes cursors, and never one past its end.
        (cursor.position <= cursor.end).then_some(cursor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::product::cursor::CursorScope;

    fn key(b: u8) -> StreamKey {
        StreamKey::from_bytes([b; 32])
    }

    const CURSOR: ScanCursor = ScanCursor {
        end: 1_000,
        position: 17,
        expires_ms: 99,
    };

    #[test]
    fn round_trip_and_scope() {
        let k = key(1);
        let scope = ScanScope {
            project: "p",
            epoch: [9; 16],
            key: &k,
        };
        for cursor in [
            CURSOR,
            ScanCursor {
                end: u64::MAX,
                position: u64::MAX,
                expires_ms: u64::MAX,
            },
        ] {
            assert_eq!(scope.decode(&scope.encode(&cursor)), Some(cursor));
        }
        let token = scope.encode(&CURSOR);
        let other_key = key(2);
        let others = [
            ScanScope {
                project: "q",
                epoch: [9; 16],
                key: &k,
            },
            ScanScope {
                project: "p",
                epoch: [8; 16],
                key: &k,
            },
            ScanScope {
                project: "p",
                epoch: [9; 16],
                key: &other_key,
            },
        ];
        for other in &others {
            assert_eq!(other.decode(&token), None);
        }
        let mut bytes =
            base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &token)
                .unwrap();
        bytes[30] ^= 1;
        let tampered =
            base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &bytes);
        for bad in [
            tampered.as_str(),
            &token[..token.len() - 1],
            &format!("{token}A"),
            "",
            "beginning",
        ] {
            assert_eq!(scope.decode(bad), None, "{bad}");
        }
    }

    /// Token classes never cross: a key cursor is not a scan cursor, and a
    /// scan cursor is not a key cursor, under the same key and epoch.
    #[test]
    fn key_cursors_and_scan_cursors_do_not_cross() {
        let k = key(1);
        let scan = ScanScope {
            project: "p",
            epoch: [9; 16],
            key: &k,
        };
        let keyed = CursorScope {
            project: "p",
            epoch: [9; 16],
            key: &k,
            routing_key: b"",
        };
        assert_eq!(scan.decode(&keyed.encode(5)), None);
        assert_eq!(keyed.decode(&scan.encode(&CURSOR)), None);
    }

    #[test]
    fn expiry_and_completion() {
        assert!(!CURSOR.expired(98));
        assert!(CURSOR.expired(99));
        assert!(!CURSOR.complete());
        assert!(ScanCursor {
            position: 1_000,
            ..CURSOR
        }
        .complete());
    }
}
