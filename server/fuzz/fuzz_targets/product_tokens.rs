//! The product's opaque tokens from untrusted text: key cursors
//! (`CursorScope::decode`), catalog cursors (`CatalogCursor::decode`), scan
//! cursors, watch capabilities and cursors, and consumer message ids and
//! lease tokens.
//!
//! Properties: no panic; a key cursor is accepted only in the scope that
//! wrote it (a fixed stream key, epoch, project and routing key here, so an
//! accepted input must be the exact encoding of its position: tokens are
//! canonical and unforgeable without the key); every position round-trips;
//! a scope that differs in any part refuses the token; an accepted catalog
//! cursor names a bucket below 16 and re-encodes to an equal cursor; every
//! other accepted token re-encodes to the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_segments::StreamKey;
use strata_server::service::catalog::{CatalogCursor, BUCKETS};
use strata_server::service::product::consumer_tokens::TokenScope;
use strata_server::service::product::cursor::CursorScope;
use strata_server::service::product::scan_cursor::ScanScope;
use strata_server::service::product::watch_cap::{
    parse_capability, CapabilityScope, CursorBinding, WaitSigKey,
};
use strata_server::service::product::watch_keys::WatchKey;

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
    let scan = ScanScope {
        project: "p",
        epoch: [5; 16],
        key: &key,
    };
    if let Some(cursor) = scan.decode(&text) {
        assert!(cursor.position <= cursor.end);
        assert_eq!(
            scan.encode(&cursor),
            text,
            "accepted scan cursors are canonical"
        );
    }
    let sig = WaitSigKey::derive(&[5; 16], &[3; 32]);
    let binding = CursorBinding {
        sig: &sig,
        watch: "w",
        key: WatchKey(9),
    };
    if let Some(cursor) = binding.decode(&text) {
        assert_eq!(
            binding.encode(&cursor),
            text,
            "accepted watch cursors are canonical"
        );
    }
    let _ = parse_capability(&text);
    let capability = CapabilityScope {
        project: "p",
        collection: "c",
        epoch: &[5; 16],
        watch: "w",
        key: WatchKey(9),
    };
    let _ = capability.admits(&sig, &text, 1_000_000);
    let tokens = TokenScope {
        project: "p",
        consumer: "c",
        epoch: [5; 16],
        key: &key,
    };
    if let Some(lease) = tokens.open_lease_token(&text) {
        assert_eq!(
            tokens.lease_token(&lease),
            text,
            "accepted lease tokens are canonical"
        );
    }
    let _ = tokens.open_message_id(&text);
});
