//! The cipher cache: a stream incarnation's cipher is derived once from the
//! key a request sends and kept (at most `CIPHER_CACHE_MAX`, then the cache
//! starts over). A key is checked against the descriptor's fingerprint
//! (constant time) before any page is decrypted; a cached cipher serves only
//! requests that send the same key.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

use super::error::ServiceError;
use super::registry::Descriptor;
use super::routing::stream_ref;

/// Most stream ciphers kept derived.
const CIPHER_CACHE_MAX: usize = 100_000;

/// A stream incarnation: (stream id, incarnation).
type IncarnationKey = ([u8; 16], u64);

/// Derived ciphers by stream incarnation.
#[derive(Default)]
pub struct CipherCache {
    ciphers: Mutex<HashMap<IncarnationKey, Arc<StreamCipher>>>,
}

impl CipherCache {
    /// The cipher of a stream for `key`, refusing a wrong key (constant time)
    /// before anything is decrypted.
    pub fn cipher_for(
        &self,
        desc: &Descriptor,
        key: &StreamKey,
    ) -> Result<Arc<StreamCipher>, ServiceError> {
        let stream = stream_ref(desc)?;
        let cache_key = (stream.id, stream.incarnation);
        if let Some(found) = self.ciphers.lock().get(&cache_key) {
            if found.has_key(key) {
                return Ok(found.clone());
            }
        }
        let epoch = desc
            .epoch_bytes()
            .ok_or_else(|| ServiceError::Internal("descriptor epoch".into()))?;
        let fingerprint = desc
            .fingerprint_bytes()
            .ok_or_else(|| ServiceError::Internal("descriptor fingerprint".into()))?;
        let cipher = Arc::new(StreamCipher::new(StreamEpoch(epoch), key.clone()));
        if !cipher.matches_fingerprint(&fingerprint) {
            return Err(ServiceError::WrongKey);
        }
        let mut cache = self.ciphers.lock();
        if cache.len() >= CIPHER_CACHE_MAX {
            cache.clear();
        }
        cache.insert(cache_key, cipher.clone());
        Ok(cipher)
    }
}
