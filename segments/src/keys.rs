//! Stream keys and their derivations (docs/FORMATS.md §7):
//!
//! ```text
//! fingerprint = HKDF-SHA256(salt = epoch, ikm = stream key, info = "strata/key-fingerprint/v1")[..16]
//! subkey      = HKDF-SHA256(salt = epoch, ikm = stream key, info = routing key ‖ 0x00 ‖ LE32(key version))
//! page key    = HKDF-SHA256(salt = epoch, ikm = subkey,     info = "strata/page/v1")
//! ```
//!
//! The epoch is 16 random bytes minted per stream incarnation, so a key reused
//! across a delete and re-create derives different subkeys. Keys live in
//! [`zeroize::Zeroizing`] buffers and print as `<redacted>`.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use aes_gcm_siv::aead::KeyInit;
use aes_gcm_siv::Aes256GcmSiv;
use base64::Engine as _;
use hkdf::Hkdf;
use parking_lot::Mutex;
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

pub const STREAM_KEY_BYTES: usize = 32;
pub const STREAM_EPOCH_BYTES: usize = 16;
pub const KEY_FINGERPRINT_BYTES: usize = 16;

const FINGERPRINT_INFO: &[u8] = b"strata/key-fingerprint/v1";
const PAGE_KEY_INFO: &[u8] = b"strata/page/v1";
/// Most (routing key, key version) ciphers one stream keeps derived.
const CIPHER_CACHE_ENTRIES_MAX: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("stream key is not base64url or base64")]
    NotBase64,
    #[error("stream key must be 32 bytes, got {len}")]
    WrongLength { len: usize },
}

/// A 32-byte stream key. Never stored by the service, never logged.
#[derive(Clone)]
pub struct StreamKey(Zeroizing<[u8; STREAM_KEY_BYTES]>);

impl fmt::Debug for StreamKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StreamKey(<redacted>)")
    }
}

impl StreamKey {
    pub fn from_bytes(bytes: [u8; STREAM_KEY_BYTES]) -> Self {
        StreamKey(Zeroizing::new(bytes))
    }

    /// Parses base64url or standard base64, padded or not.
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        use base64::engine::general_purpose::{
            STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD,
        };
        let text = text.trim();
        let decoded = [URL_SAFE_NO_PAD, URL_SAFE, STANDARD_NO_PAD, STANDARD]
            .iter()
            .find_map(|engine| engine.decode(text).ok())
            .map(Zeroizing::new)
            .ok_or(KeyError::NotBase64)?;
        let bytes: [u8; STREAM_KEY_BYTES] = decoded
            .as_slice()
            .try_into()
            .map_err(|_| KeyError::WrongLength { len: decoded.len() })?;
        Ok(StreamKey::from_bytes(bytes))
    }

    /// Unpadded base64url, the form `strata keys generate` prints.
    pub fn to_base64url(&self) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.0.as_slice())
    }

    pub fn expose(&self) -> &[u8; STREAM_KEY_BYTES] {
        &self.0
    }
}

/// The random 16 bytes minted for one stream incarnation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamEpoch(pub [u8; STREAM_EPOCH_BYTES]);

fn hkdf_expand<const N: usize>(salt: &[u8], ikm: &[u8], info: &[&[u8]]) -> Zeroizing<[u8; N]> {
    let hk = Hkdf::<Sha256>::new(Some(salt), ikm);
    let mut out = Zeroizing::new([0u8; N]);
    hk.expand_multi_info(info, out.as_mut_slice())
        .expect("N is at most 255 * 32 bytes");
    out
}

/// The key fingerprint stored in a stream's descriptor.
pub fn fingerprint(epoch: &StreamEpoch, key: &StreamKey) -> [u8; KEY_FINGERPRINT_BYTES] {
    let full = hkdf_expand::<32>(&epoch.0, key.expose(), &[FINGERPRINT_INFO]);
    let mut out = [0u8; KEY_FINGERPRINT_BYTES];
    out.copy_from_slice(&full[..KEY_FINGERPRINT_BYTES]);
    out
}

/// Constant-time comparison of `key`'s fingerprint with a stored one.
pub fn fingerprint_matches(
    epoch: &StreamEpoch,
    key: &StreamKey,
    stored: &[u8; KEY_FINGERPRINT_BYTES],
) -> bool {
    fingerprint(epoch, key).ct_eq(stored).into()
}

/// The subkey of one routing key and key version.
pub fn derive_subkey(
    epoch: &StreamEpoch,
    key: &StreamKey,
    routing_key: &[u8],
    key_version: u32,
) -> Zeroizing<[u8; 32]> {
    hkdf_expand::<32>(
        &epoch.0,
        key.expose(),
        &[routing_key, &[0u8], &key_version.to_le_bytes()],
    )
}

/// The page key derived from a subkey.
pub fn derive_page_key(epoch: &StreamEpoch, subkey: &[u8; 32]) -> Zeroizing<[u8; 32]> {
    hkdf_expand::<32>(&epoch.0, subkey, &[PAGE_KEY_INFO])
}

/// The AEAD for the pages of one (stream incarnation, routing key, key version).
pub struct PageCipher {
    epoch: StreamEpoch,
    aead: Aes256GcmSiv,
}

impl fmt::Debug for PageCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PageCipher")
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl PageCipher {
    /// From a subkey (what a holder of only one routing key's subkey has).
    pub fn from_subkey(epoch: StreamEpoch, subkey: &[u8; 32]) -> Self {
        let page_key = derive_page_key(&epoch, subkey);
        PageCipher {
            epoch,
            aead: Aes256GcmSiv::new(page_key.as_slice().into()),
        }
    }

    pub fn new(epoch: StreamEpoch, key: &StreamKey, routing_key: &[u8], key_version: u32) -> Self {
        let subkey = derive_subkey(&epoch, key, routing_key, key_version);
        PageCipher::from_subkey(epoch, &subkey)
    }

    pub fn epoch(&self) -> &StreamEpoch {
        &self.epoch
    }

    pub(crate) fn aead(&self) -> &Aes256GcmSiv {
        &self.aead
    }
}

/// Derived page ciphers by key version, then routing key (looked up by
/// `&[u8]`, without allocating).
type CipherCache = HashMap<u32, HashMap<Box<[u8]>, Arc<PageCipher>>>;

/// A stream key bound to one incarnation, with its derived page ciphers cached
/// so that a small append does not pay HKDF.
pub struct StreamCipher {
    epoch: StreamEpoch,
    key: StreamKey,
    /// The key's fingerprint, derived once.
    fingerprint: [u8; KEY_FINGERPRINT_BYTES],
    /// The default routing key's cipher at key version 0 (most appends).
    default_cipher: std::sync::OnceLock<Arc<PageCipher>>,
    ciphers: Mutex<CipherCache>,
    /// Entries in `ciphers`.
    cached: std::sync::atomic::AtomicUsize,
}

impl fmt::Debug for StreamCipher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamCipher")
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl StreamCipher {
    pub fn new(epoch: StreamEpoch, key: StreamKey) -> Self {
        StreamCipher {
            fingerprint: fingerprint(&epoch, &key),
            default_cipher: std::sync::OnceLock::new(),
            epoch,
            key,
            ciphers: Mutex::new(HashMap::new()),
            cached: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    pub fn epoch(&self) -> &StreamEpoch {
        &self.epoch
    }

    pub fn fingerprint(&self) -> [u8; KEY_FINGERPRINT_BYTES] {
        self.fingerprint
    }

    /// Constant-time comparison of this key's fingerprint with a stored one.
    pub fn matches_fingerprint(&self, stored: &[u8; KEY_FINGERPRINT_BYTES]) -> bool {
        self.fingerprint.ct_eq(stored).into()
    }

    /// Constant-time comparison of the key bytes (for caches of ciphers).
    pub fn has_key(&self, key: &StreamKey) -> bool {
        self.key.expose().ct_eq(key.expose()).into()
    }

    /// The page cipher of a routing key and key version (derived once).
    pub fn page_cipher(&self, routing_key: &[u8], key_version: u32) -> Arc<PageCipher> {
        if routing_key.is_empty() && key_version == 0 {
            return self
                .default_cipher
                .get_or_init(|| Arc::new(PageCipher::new(self.epoch, &self.key, b"", 0)))
                .clone();
        }
        if let Some(found) = self
            .ciphers
            .lock()
            .get(&key_version)
            .and_then(|by_key| by_key.get(routing_key))
        {
            return found.clone();
        }
        let derived = Arc::new(PageCipher::new(
            self.epoch,
            &self.key,
            routing_key,
            key_version,
        ));
        use std::sync::atomic::Ordering;
        let mut cache = self.ciphers.lock();
        if self.cached.load(Ordering::Relaxed) >= CIPHER_CACHE_ENTRIES_MAX {
            cache.clear();
            self.cached.store(0, Ordering::Relaxed);
        }
        let by_key = cache.entry(key_version).or_default();
        if let Some(raced) = by_key.get(routing_key) {
            return raced.clone();
        }
        by_key.insert(routing_key.into(), derived.clone());
        self.cached.fetch_add(1, Ordering::Relaxed);
        derived
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_both_alphabets_and_rejects_wrong_lengths() {
        let key = StreamKey::from_bytes([0xfb; 32]);
        let url = key.to_base64url();
        assert!(url.contains('_') || url.contains('-'));
        assert_eq!(StreamKey::parse(&url).unwrap().expose(), key.expose());
        let std = base64::engine::general_purpose::STANDARD.encode([0xfb; 32]);
        assert_eq!(StreamKey::parse(&std).unwrap().expose(), key.expose());
        assert_eq!(
            StreamKey::parse("AAAA").unwrap_err(),
            KeyError::WrongLength { len: 3 }
        );
        assert_eq!(StreamKey::parse("*not*").unwrap_err(), KeyError::NotBase64);
        assert_eq!(format!("{key:?}"), "StreamKey(<redacted>)");
    }

    #[test]
    fn fingerprints_depend_on_key_and_epoch() {
        let k1 = StreamKey::from_bytes([1; 32]);
        let k2 = StreamKey::from_bytes([2; 32]);
        let e1 = StreamEpoch([1; 16]);
        let e2 = StreamEpoch([2; 16]);
        let f = fingerprint(&e1, &k1);
        assert!(fingerprint_matches(&e1, &k1, &f));
        assert!(!fingerprint_matches(&e1, &k2, &f));
        assert!(!fingerprint_matches(&e2, &k1, &f));
    }

    #[test]
    fn subkeys_separate_routing_keys_and_versions() {
        let k = StreamKey::from_bytes([1; 32]);
        let e = StreamEpoch([1; 16]);
        let a = derive_subkey(&e, &k, b"a", 0);
        assert_ne!(*a, *derive_subkey(&e, &k, b"b", 0));
        assert_ne!(*a, *derive_subkey(&e, &k, b"a", 1));
        assert_ne!(*a, *derive_subkey(&e, &k, b"a\0", 0));
    }

    #[test]
    fn cipher_cache_returns_the_same_cipher() {
        let c = StreamCipher::new(StreamEpoch([3; 16]), StreamKey::from_bytes([4; 32]));
        let a = c.page_cipher(b"rk", 0);
        let b = c.page_cipher(b"rk", 0);
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c.page_cipher(b"rk", 1)));
    }
}
