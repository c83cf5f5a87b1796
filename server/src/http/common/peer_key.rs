//! The key fleet members prove themselves to each other with.
//!
//! Owns [`PeerKey`]: every member derives the same key from the store's
//! server seed (so it proves a caller can read the bucket); it travels in
//! [`PEER_KEY_HEADER`], is compared in constant time, and is never stored.

use http::HeaderMap;
use subtle::ConstantTimeEq;

/// The header that carries the peer key (hex).
pub const PEER_KEY_HEADER: &str = "strata-fleet-key";
/// The label the peer key is derived under from the server seed.
pub const PEER_KEY_LABEL: &str = "strata fleet peers v1";

/// The key fleet members prove themselves to each other with.
#[derive(Clone)]
pub struct PeerKey(String);

impl PeerKey {
    pub fn new(key: &[u8; 32]) -> PeerKey {
        PeerKey(hex::encode(key))
    }

    /// Whether `headers` carry this key.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        headers
            .get(PEER_KEY_HEADER)
            .is_some_and(|v| bool::from(v.as_bytes().ct_eq(self.0.as_bytes())))
    }

    pub fn header_value(&self) -> &str {
        &self.0
    }
}
