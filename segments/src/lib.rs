//! # strata-segments: pages, page cryptography, and segment objects
//!
//! * [`keys`]: stream keys, the per-incarnation stream epoch, the HKDF-SHA256
//!   derivations (key fingerprint, per-routing-key subkey, page key) and the
//!   per-stream cache of derived page ciphers. Key bytes are zeroized on drop
//!   and have no `Debug` output.
//! * [`page`]: the page format — one append request's records of one routing key
//!   and key version behind a clear header bound as AAD, body compressed with
//!   zstd-1 when that pays, sealed with AES-256-GCM-SIV under a fresh random
//!   nonce. Pages are opened whole: authenticate first, then decompress into a
//!   size the header declares and the limits bound.
//!
//! * [`segment`]: segment objects — the sealed pages of many streams, grouped
//!   into per-stream chunks (page directory, anchors, CRC), a table of chunks
//!   with routing-key summaries, and a trailer. Written whole, create-only.
//! * [`key_index`]: an in-memory index of a decoded chunk's pages by
//!   routing-key hash (derived, never stored), so a keyed read visits only its
//!   key's pages.
//!
//! Page bytes are stored identically in WAL objects and segment objects; this
//! crate is the only place that knows what is inside them.

pub mod key_index;
pub mod keys;
pub mod page;
pub mod segment;
mod varint;

pub use keys::{
    derive_subkey, KeyError, PageCipher, StreamCipher, StreamEpoch, StreamKey,
    KEY_FINGERPRINT_BYTES, STREAM_EPOCH_BYTES, STREAM_KEY_BYTES,
};
pub use page::{
    open_page, parse_header, plan_pages, prepare_body, seal_page, sealed_page_len, OpenedPage,
    PageError, PageHeader, PreparedBody, Record, PAGE_BODY_BYTES_MAX, PAGE_BODY_TARGET_BYTES,
    PAGE_RECORDS_MAX, ROUTING_KEY_BYTES_MAX,
};
