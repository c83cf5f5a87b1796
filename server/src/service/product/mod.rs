//! The product model: collections, routing keys, key cursors and producer
//! scopes, without HTTP (the routes are `http::product`).
//!
//! A collection is one stream of the stream service: the raw Durable Streams
//! route is its default routing key's (`""`) view, so both surfaces share one
//! descriptor, one engine stream, one offset space and one seal/close state.
//! Records of every key share the stream's positions; a key's view is the
//! subsequence of its records, so a key cursor is simply a position plus the
//! scope it belongs to (see [`cursor`]).
//!
//! Producer state lives in the engine per stream and producer id. The product
//! scope is (incarnation, routing key, producer id): on the default key it is
//! the raw route's producer id itself (one scope, whichever surface writes);
//! on any other key the engine id is [`scoped_producer_id`], a fixed-size hash
//! that no wire id can equal (it starts with a byte headers cannot carry).

pub mod config;
pub mod consumer_config;
pub mod consumer_tokens;
pub mod cursor;
pub mod scan_cursor;
pub mod watch_cap;
pub mod watch_keys;

use sha2::{Digest, Sha256};

/// Longest routing key, in bytes.
pub const ROUTING_KEY_BYTES_MAX: usize = strata_segments::ROUTING_KEY_BYTES_MAX;
/// Most records in one `records:batch`.
pub const BATCH_RECORDS_MAX: usize = 10_000;
/// Read page bounds (`maxBytes` is clamped into them).
pub const READ_BYTES_MIN: usize = 4 << 10;
pub const READ_BYTES_MAX: usize = 8 << 20;
pub const READ_BYTES_DEFAULT: usize = 1 << 20;
/// Longest live wait (`waitMs`).
pub const WAIT_MS_MAX: u64 = 25_000;
/// Producer ids beginning with this are reserved for the server.
pub const RESERVED_PRODUCER_PREFIX: &str = "__";

/// The engine's producer id for a product producer on `routing_key`.
pub fn scoped_producer_id(routing_key: &[u8], producer_id: &str) -> String {
    if routing_key.is_empty() {
        return producer_id.to_string();
    }
    let mut h = Sha256::new();
    h.update((routing_key.len() as u32).to_le_bytes());
    h.update(routing_key);
    h.update(producer_id.as_bytes());
    let digest = h.finalize();
    let mut out = String::with_capacity(33);
    out.push('\u{1}');
    for b in &digest[..16] {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// What a product request does, for its idempotence hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Append = 1,
    AppendBatch = 2,
    SealFinal = 3,
}

/// The hash a producer retry must repeat: operation, routing key, media type,
/// body bytes and the seal flag.
pub fn request_hash(
    operation: Operation,
    routing_key: &[u8],
    media_type: &str,
    body: &[u8],
    seal: bool,
) -> [u8; 16] {
    let mut h = Sha256::new();
    h.update(b"strata-product-request-v1");
    h.update([operation as u8, u8::from(seal)]);
    for part in [routing_key, media_type.as_bytes(), body] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    h.finalize()[..16].try_into().expect("16 bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn producer_scopes() {
        assert_eq!(scoped_producer_id(b"", "p"), "p");
        let a = scoped_producer_id(b"k", "p");
        assert_eq!(a.len(), 33);
        assert!(a.starts_with('\u{1}'));
        assert_ne!(a, scoped_producer_id(b"k2", "p"));
        assert_ne!(a, scoped_producer_id(b"k", "p2"));
        // Length-prefixed: ("ab","c") and ("a","bc") differ.
        assert_ne!(
            scoped_producer_id(b"ab", "c"),
            scoped_producer_id(b"a", "bc")
        );
    }

    #[test]
    fn request_hashes_cover_every_part() {
        let base = request_hash(Operation::Append, b"k", "application/json", b"1", false);
        assert_ne!(
            base,
            request_hash(
                Operation::AppendBatch,
                b"k",
                "application/json",
                b"1",
                false
            )
        );
        assert_ne!(
            base,
            request_hash(Operation::Append, b"j", "application/json", b"1", false)
        );
        assert_ne!(
            base,
            request_hash(Operation::Append, b"k", "text/plain", b"1", false)
        );
        assert_ne!(
            base,
            request_hash(Operation::Append, b"k", "application/json", b"2", false)
        );
        assert_ne!(
            base,
            request_hash(Operation::Append, b"k", "application/json", b"1", true)
        );
    }
}
