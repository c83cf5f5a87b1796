//! The product's opaque tokens from untrusted text: key cursors
//! (`CursorScope::decode`) and catalog cursors (`CatalogCursor::decode`).
//!
//! Properties: no panic; a key cursor is accepted only in the scope that
//! wrote it (a fixed stream key, epoch, project and routing key here, so an
//! accepted input must be the exact encoding of its position: tokens are
//! canonical and unforgeable without the key); every position round-trips;
//! a scope that differs in any part refuses the token; an accepted catalog
//! cursor names a bucket below 16 and re-encodes to an equal cursor.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_segments::StreamKey;
use strata_server::service::catalog::{CatalogCursor, BUCKETS};
use strata_server::service::product::cursor::CursorScope;

fuzz_target!(|data: &[u8]| {
    let key = StreamKey::from_bytes([3; 32]);
    let scope = CursorScope {
        project: "p",
        epoch: [5; 16],
        key: &key,
        routing_key: b"rk",
    };
    let text = String::from_utf8_lossy(data);
    if let Some(position) = scope.decode(&text) {
        assert_eq!(
            scope.encode(position),
            text,
            "accepted tokens are canonical"
        );
    }
    // Positions from the input round-trip, and only in their own scope.
    if data.len() >= 8 {
        let position = u64::from_le_bytes(data[..8].try_into().unwrap());
        let token = scope.encode(position);
        assert_eq!(scope.decode(&token), Some(position));
        let other_key = StreamKey::from_bytes([4; 32]);
        let others = [
            CursorScope {
                project: "q",
                epoch: [5; 16],
                key: &key,
                routing_key: b"rk",
            },
            CursorScope {
                project: "p",
                epoch: [6; 16],
                key: &key,
                routing_key: b"rk",
            },
            CursorScope {
                project: "p",
                epoch: [5; 16],
                key: &other_key,
                routing_key: b"rk",
            },
            CursorScope {
                project: "p",
                epoch: [5; 16],
                key: &key,
                routing_key: b"rl",
            },
        ];
        for other in &others {
            assert_eq!(other.decode(&token), None);
        }
    }
    if let Some(cursor) = CatalogCursor::decode(&text) {
        assert!(cursor.bucket < BUCKETS);
        assert_eq!(CatalogCursor::decode(&cursor.encode()), Some(cursor));
    }
});
