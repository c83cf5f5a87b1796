//! The page format (version 1): one append request's records of one routing key
//! and key version. `docs/FORMATS.md` ("Pages") is the prose twin of this module
//! and pins it with test vectors.
//!
//! ```text
//! clear header (bound as AAD, after the 16-byte stream epoch)
//!   magic "SP" · version u8 (1) · flags u8 (bit 0: body is zstd-compressed;
//!   bit 1: first page of an append request)
//!   first offset u64 · record count u32 · timestamp ms u64 · key version u32
//!   body length u32 (plaintext, before compression)
//!   routing key length u16 · routing key · nonce [12]
//! sealed body
//!   AES-256-GCM-SIV(page key, nonce, aad = epoch ‖ header, body or zstd(body)) ‖ tag [16]
//! body
//!   record count × varint payload length · record count × varint timestamp delta
//!   (ms after the header's timestamp) · payloads back to back
//! ```
//!
//! A page holds at most [`PAGE_RECORDS_MAX`] records and, when it holds more
//! than one, at most [`PAGE_BODY_TARGET_BYTES`] of body; a single record may be
//! larger (up to [`PAGE_BODY_BYTES_MAX`] of body). The body is compressed with
//! zstd level 1 only when it is at least 256 bytes and compression shrinks it.
//! Opening authenticates first, then decompresses into exactly the declared
//! body length (a bomb cannot allocate more), then parses with exact length
//! accounting.

use std::cell::RefCell;
use std::ops::Range;

use aes_gcm_siv::aead::AeadInPlace;
use aes_gcm_siv::{Nonce, Tag};
use bytes::{BufMut, Bytes};

use crate::keys::{PageCipher, STREAM_EPOCH_BYTES};
use crate::varint;

pub const PAGE_MAGIC: [u8; 2] = *b"SP";
pub const PAGE_VERSION: u8 = 1;
pub const PAGE_RECORDS_MAX: usize = 4096;
/// Body bytes at which a page of several records is cut.
pub const PAGE_BODY_TARGET_BYTES: usize = 64 << 10;
pub const ROUTING_KEY_BYTES_MAX: usize = 1024;
/// Hard ceiling on a page's declared body (bounds decompression).
pub const PAGE_BODY_BYTES_MAX: usize = 64 << 20;
pub const NONCE_BYTES: usize = 12;
pub const TAG_BYTES: usize = 16;
const COMPRESS_MIN_BODY_BYTES: usize = 256;
const ZSTD_LEVEL: i32 = 1;
const FLAG_COMPRESSED: u8 = 1;
/// The page holds the first records of an append request (request boundaries
/// survive in the pages: a fork sub-offset slices "the first append after").
const FLAG_APPEND_START: u8 = 2;
/// Header bytes before the routing key.
const HEADER_FIXED_BYTES: usize = 2 + 1 + 1 + 8 + 4 + 8 + 4 + 4 + 2;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    #[error("page too short: {len} bytes")]
    TooShort { len: usize },
    #[error("bad page magic")]
    BadMagic,
    #[error("unsupported page version {found}")]
    UnsupportedVersion { found: u8 },
    #[error("page field {field} is invalid: {reason}")]
    Invalid {
        field: &'static str,
        reason: &'static str,
    },
    #[error("page failed authentication (wrong key, or the page was altered)")]
    Authentication,
    #[error("page body does not decompress to its declared length")]
    Decompress,
    #[error("page body is malformed: {reason}")]
    Body { reason: &'static str },
}

/// The clear header of a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageHeader {
    pub first_offset: u64,
    pub record_count: u32,
    pub timestamp_ms: u64,
    pub key_version: u32,
    pub body_len: u32,
    pub compressed: bool,
    /// This page starts an append request.
    pub append_start: bool,
    pub routing_key: Bytes,
    pub nonce: [u8; NONCE_BYTES],
    /// Length of the clear header in bytes (where the sealed body starts).
    pub header_len: usize,
}

impl PageHeader {
    /// One past the page's last offset.
    pub fn end_offset(&self) -> u64 {
        self.first_offset + self.record_count as u64
    }
}

/// A record read back from a page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub offset: u64,
    pub timestamp_ms: u64,
    pub payload: Bytes,
    /// The first record of an append request.
    pub append_start: bool,
}

/// A page's body built before offsets are known: serialised and, when that
/// pays, compressed. Sealing it needs only the offset, the key and a nonce.
#[derive(Debug, Clone)]
pub struct PreparedBody {
    /// The bytes to encrypt (compressed or not).
    pub content: Bytes,
    pub body_len: u32,
    pub compressed: bool,
    pub record_count: u32,
    pub payload_bytes: u64,
    pub timestamp_ms: u64,
    /// Set on the first page of an append request (flag bit 1).
    pub append_start: bool,
}

/// Splits records (given by payload length) into page ranges: at most
/// [`PAGE_RECORDS_MAX`] records, and a new page when adding a record would
/// take a non-empty page's body past [`PAGE_BODY_TARGET_BYTES`].
pub fn plan_pages(payload_lens: impl IntoIterator<Item = usize>) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let mut start = 0;
    let mut body = 0usize;
    let mut index = 0;
    for len in payload_lens {
        let cost = len + varint::len(len as u64) + 1;
        let count = index - start;
        if count > 0 && (count == PAGE_RECORDS_MAX || body + cost > PAGE_BODY_TARGET_BYTES) {
            ranges.push(start..index);
            start = index;
            body = 0;
        }
        body += cost;
        index += 1;
    }
    if index > start {
        ranges.push(start..index);
    }
    ranges
}

thread_local! {
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> = const { RefCell::new(None) };
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

fn compress(body: &[u8]) -> Option<Vec<u8>> {
    COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = zstd::bulk::Compressor::new(ZSTD_LEVEL).ok();
        }
        slot.as_mut()?.compress(body).ok()
    })
}

fn decompress(content: &[u8], body_len: usize) -> Result<Vec<u8>, PageError> {
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = zstd::bulk::Decompressor::new().ok();
        }
        let d = slot.as_mut().ok_or(PageError::Decompress)?;
        let out = d
            .decompress(content, body_len)
            .map_err(|_| PageError::Decompress)?;
        if out.len() != body_len {
            return Err(PageError::Decompress);
        }
        Ok(out)
    })
}

/// Serialises (and maybe compresses) one page's records, all stamped
/// `timestamp_ms`.
pub fn prepare_body(records: &[Bytes], timestamp_ms: u64) -> Result<PreparedBody, PageError> {
    prepare_body_with_timestamps(records, &vec![timestamp_ms; records.len()])
}

/// Serialises (and maybe compresses) one page's records with their own
/// timestamps; the page's timestamp is the earliest. (Writers stamp a request's
/// records alike; [`plan_pages`] budgets one byte per timestamp delta, so this
/// general form stays private to the crate and its tests.)
pub(crate) fn prepare_body_with_timestamps(
    records: &[Bytes],
    timestamps_ms: &[u64],
) -> Result<PreparedBody, PageError> {
    if records.is_empty() || records.len() != timestamps_ms.len() {
        return Err(PageError::Invalid {
            field: "records",
            reason: "a page holds at least one record, each with a timestamp",
        });
    }
    if records.len() > PAGE_RECORDS_MAX {
        return Err(PageError::Invalid {
            field: "record count",
            reason: "more than 4096 records",
        });
    }
    let base = *timestamps_ms.iter().min().expect("non-empty");
    let payload_bytes: usize = records.iter().map(Bytes::len).sum();
    let meta: usize = records
        .iter()
        .zip(timestamps_ms)
        .map(|(r, t)| varint::len(r.len() as u64) + varint::len(t - base))
        .sum();
    let body_len = payload_bytes + meta;
    if body_len > PAGE_BODY_BYTES_MAX {
        return Err(PageError::Invalid {
            field: "body length",
            reason: "over the page body ceiling",
        });
    }
    if records.len() > 1 && body_len > PAGE_BODY_TARGET_BYTES {
        return Err(PageError::Invalid {
            field: "body length",
            reason: "a page of several records holds at most 64 KiB of body",
        });
    }
    let mut body = Vec::with_capacity(body_len);
    for r in records {
        varint::put(&mut body, r.len() as u64);
    }
    for t in timestamps_ms {
        varint::put(&mut body, t - base);
    }
    for r in records {
        body.extend_from_slice(r);
    }
    debug_assert_eq!(body.len(), body_len);
    let compressed = if body_len >= COMPRESS_MIN_BODY_BYTES {
        compress(&body).filter(|c| c.len() < body_len)
    } else {
        None
    };
    let is_compressed = compressed.is_some();
    Ok(PreparedBody {
        content: Bytes::from(compressed.unwrap_or(body)),
        body_len: body_len as u32,
        compressed: is_compressed,
        record_count: records.len() as u32,
        payload_bytes: payload_bytes as u64,
        timestamp_ms: base,
        append_start: false,
    })
}

fn put_header(
    out: &mut Vec<u8>,
    body: &PreparedBody,
    first_offset: u64,
    key_version: u32,
    routing_key: &[u8],
    nonce: &[u8; NONCE_BYTES],
) {
    out.put_slice(&PAGE_MAGIC);
    out.put_u8(PAGE_VERSION);
    let mut flags = 0;
    if body.compressed {
        flags |= FLAG_COMPRESSED;
    }
    if body.append_start {
        flags |= FLAG_APPEND_START;
    }
    out.put_u8(flags);
    out.put_u64_le(first_offset);
    out.put_u32_le(body.record_count);
    out.put_u64_le(body.timestamp_ms);
    out.put_u32_le(key_version);
    out.put_u32_le(body.body_len);
    out.put_u16_le(routing_key.len() as u16);
    out.put_slice(routing_key);
    out.put_slice(nonce);
}

fn aad(epoch: &[u8; STREAM_EPOCH_BYTES], header: &[u8]) -> Vec<u8> {
    let mut aad = Vec::with_capacity(STREAM_EPOCH_BYTES + header.len());
    aad.extend_from_slice(epoch);
    aad.extend_from_slice(header);
    aad
}

/// Seals a prepared body into a page at `first_offset`. The cipher must be the
/// one of (`routing_key`, `key_version`) for the stream.
/// The length of the page [`seal_page`] makes of `body` under a routing key
/// of `routing_key_len` bytes (header, sealed body, tag).
pub fn sealed_page_len(body: &PreparedBody, routing_key_len: usize) -> usize {
    HEADER_FIXED_BYTES + routing_key_len + NONCE_BYTES + body.content.len() + TAG_BYTES
}

pub fn seal_page(
    cipher: &PageCipher,
    body: &PreparedBody,
    first_offset: u64,
    key_version: u32,
    routing_key: &[u8],
    nonce: [u8; NONCE_BYTES],
) -> Result<Bytes, PageError> {
    if routing_key.len() > ROUTING_KEY_BYTES_MAX {
        return Err(PageError::Invalid {
            field: "routing key",
            reason: "longer than 1024 bytes",
        });
    }
    if first_offset.checked_add(body.record_count as u64).is_none() {
        return Err(PageError::Invalid {
            field: "first offset",
            reason: "offset range overflows u64",
        });
    }
    let header_len = HEADER_FIXED_BYTES + routing_key.len() + NONCE_BYTES;
    let mut out = Vec::with_capacity(header_len + body.content.len() + TAG_BYTES);
    put_header(
        &mut out,
        body,
        first_offset,
        key_version,
        routing_key,
        &nonce,
    );
    debug_assert_eq!(out.len(), header_len);
    let aad = aad(&cipher.epoch().0, &out);
    out.extend_from_slice(&body.content);
    let tag = cipher
        .aead()
        .encrypt_in_place_detached(Nonce::from_slice(&nonce), &aad, &mut out[header_len..])
        .map_err(|_| PageError::Invalid {
            field: "body",
            reason: "too large to encrypt",
        })?;
    out.extend_from_slice(&tag);
    Ok(Bytes::from(out))
}

/// Parses and validates a page's clear header (no key needed).
pub fn parse_header(page: &Bytes) -> Result<PageHeader, PageError> {
    let len = page.len();
    if len < HEADER_FIXED_BYTES + NONCE_BYTES + TAG_BYTES {
        return Err(PageError::TooShort { len });
    }
    if page[..2] != PAGE_MAGIC {
        return Err(PageError::BadMagic);
    }
    if page[2] != PAGE_VERSION {
        return Err(PageError::UnsupportedVersion { found: page[2] });
    }
    let flags = page[3];
    if flags & !(FLAG_COMPRESSED | FLAG_APPEND_START) != 0 {
        return Err(PageError::Invalid {
            field: "flags",
            reason: "unknown flag bits",
        });
    }
    let u64_at = |at: usize| u64::from_le_bytes(page[at..at + 8].try_into().expect("8 bytes"));
    let u32_at = |at: usize| u32::from_le_bytes(page[at..at + 4].try_into().expect("4 bytes"));
    let first_offset = u64_at(4);
    let record_count = u32_at(12);
    let timestamp_ms = u64_at(16);
    let key_version = u32_at(24);
    let body_len = u32_at(28);
    let rk_len = u16::from_le_bytes([page[32], page[33]]) as usize;
    if rk_len > ROUTING_KEY_BYTES_MAX {
        return Err(PageError::Invalid {
            field: "routing key",
            reason: "longer than 1024 bytes",
        });
    }
    let header_len = HEADER_FIXED_BYTES + rk_len + NONCE_BYTES;
    if len < header_len + TAG_BYTES {
        return Err(PageError::TooShort { len });
    }
    if record_count == 0 || record_count as usize > PAGE_RECORDS_MAX {
        return Err(PageError::Invalid {
            field: "record count",
            reason: "must be 1..=4096",
        });
    }
    if first_offset.checked_add(record_count as u64).is_none() {
        return Err(PageError::Invalid {
            field: "first offset",
            reason: "offset range overflows u64",
        });
    }
    let body_len_usize = body_len as usize;
    if body_len_usize > PAGE_BODY_BYTES_MAX {
        return Err(PageError::Invalid {
            field: "body length",
            reason: "over the page body ceiling",
        });
    }
    if record_count > 1 && body_len_usize > PAGE_BODY_TARGET_BYTES {
        return Err(PageError::Invalid {
            field: "body length",
            reason: "a page of several records holds at most 64 KiB of body",
        });
    }
    // Every record costs at least two varint bytes of body.
    if body_len_usize < 2 * record_count as usize {
        return Err(PageError::Invalid {
            field: "body length",
            reason: "too small for the record count",
        });
    }
    let content_len = len - header_len - TAG_BYTES;
    let compressed = flags & FLAG_COMPRESSED != 0;
    if compressed {
        if content_len == 0 || content_len >= body_len_usize {
            return Err(PageError::Invalid {
                field: "body length",
                reason: "a compressed body must be non-empty and smaller than the body",
            });
        }
    } else if content_len != body_len_usize {
        return Err(PageError::Invalid {
            field: "body length",
            reason: "sealed length differs from the declared body length",
        });
    }
    let mut nonce = [0u8; NONCE_BYTES];
    nonce.copy_from_slice(&page[header_len - NONCE_BYTES..header_len]);
    Ok(PageHeader {
        first_offset,
        record_count,
        timestamp_ms,
        key_version,
        body_len,
        compressed,
        append_start: flags & FLAG_APPEND_START != 0,
        routing_key: page.slice(HEADER_FIXED_BYTES..HEADER_FIXED_BYTES + rk_len),
        nonce,
        header_len,
    })
}

/// A page opened with its key.
#[derive(Debug, Clone)]
pub struct OpenedPage {
    pub header: PageHeader,
    pub records: Vec<Record>,
}

/// Authenticates, decrypts, decompresses and parses a page.
pub fn open_page(cipher: &PageCipher, page: &Bytes) -> Result<OpenedPage, PageError> {
    let header = parse_header(page)?;
    let header_len = header.header_len;
    let tag_at = page.len() - TAG_BYTES;
    let aad = aad(&cipher.epoch().0, &page[..header_len]);
    let mut content = page[header_len..tag_at].to_vec();
    cipher
        .aead()
        .decrypt_in_place_detached(
            Nonce::from_slice(&header.nonce),
            &aad,
            &mut content,
            Tag::from_slice(&page[tag_at..]),
        )
        .map_err(|_| PageError::Authentication)?;
    let body = if header.compressed {
        decompress(&content, header.body_len as usize)?
    } else {
        content
    };
    let records = parse_body(&header, Bytes::from(body))?;
    Ok(OpenedPage { header, records })
}

fn parse_body(header: &PageHeader, body: Bytes) -> Result<Vec<Record>, PageError> {
    let count = header.record_count as usize;
    let mut cursor: &[u8] = &body;
    let mut lens = Vec::with_capacity(count);
    let mut total: usize = 0;
    for _ in 0..count {
        let len = varint::get(&mut cursor).ok_or(PageError::Body {
            reason: "record length varint",
        })?;
        let len = usize::try_from(len).map_err(|_| PageError::Body {
            reason: "record length too large",
        })?;
        total = total.checked_add(len).ok_or(PageError::Body {
            reason: "record lengths overflow",
        })?;
        lens.push(len);
    }
    let mut deltas = Vec::with_capacity(count);
    for _ in 0..count {
        deltas.push(varint::get(&mut cursor).ok_or(PageError::Body {
            reason: "timestamp delta varint",
        })?);
    }
    if total != cursor.len() {
        return Err(PageError::Body {
            reason: "record lengths do not add up to the payload bytes",
        });
    }
    let mut at = body.len() - cursor.len();
    let mut records = Vec::with_capacity(count);
    for (i, (len, delta)) in lens.into_iter().zip(deltas).enumerate() {
        let timestamp_ms = header
            .timestamp_ms
            .checked_add(delta)
            .ok_or(PageError::Body {
                reason: "timestamp overflows",
            })?;
        records.push(Record {
            offset: header.first_offset + i as u64,
            timestamp_ms,
            payload: body.slice(at..at + len),
            append_start: header.append_start && i == 0,
        });
        at += len;
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{StreamEpoch, StreamKey};
    use proptest::prelude::*;

    fn cipher(key: u8) -> PageCipher {
        PageCipher::new(
            StreamEpoch([9; 16]),
            &StreamKey::from_bytes([key; 32]),
            b"rk",
            0,
        )
    }

    fn seal(records: &[Bytes]) -> Bytes {
        let body = prepare_body(records, 1_000).unwrap();
        seal_page(&cipher(1), &body, 40, 0, b"rk", [5; 12]).unwrap()
    }

    #[test]
    fn round_trip_small_and_compressible() {
        for records in [
            vec![Bytes::from_static(b"hello")],
            vec![
                Bytes::from(vec![b'a'; 5000]),
                Bytes::from_static(b""),
                Bytes::from_static(b"x"),
            ],
        ] {
            let page = seal(&records);
            let opened = open_page(&cipher(1), &page).unwrap();
            let payloads: Vec<_> = opened.records.iter().map(|r| r.payload.clone()).collect();
            assert_eq!(payloads, records);
            assert_eq!(opened.records[0].offset, 40);
            assert_eq!(opened.records[0].timestamp_ms, 1_000);
        }
        let big = seal(&[Bytes::from(vec![b'a'; 5000])]);
        assert!(parse_header(&big).unwrap().compressed);
        assert!(big.len() < 1000);
    }

    #[test]
    fn incompressible_and_small_bodies_are_stored_plain() {
        let small = seal(&[Bytes::from(vec![b'a'; 100])]);
        assert!(!parse_header(&small).unwrap().compressed);
        let mut x = 0x1234_5678u32;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        let random = seal(&[Bytes::from(noise)]);
        assert!(!parse_header(&random).unwrap().compressed);
    }

    #[test]
    fn wrong_key_and_any_altered_byte_fail_authentication_or_validation() {
        let page = seal(&[
            Bytes::from_static(b"secret payload"),
            Bytes::from_static(b"two"),
        ]);
        assert_eq!(
            open_page(&cipher(2), &page).unwrap_err(),
            PageError::Authentication
        );
        for i in 0..page.len() {
            let mut v = page.to_vec();
            v[i] ^= 0x40;
            assert!(open_page(&cipher(1), &Bytes::from(v)).is_err(), "byte {i}");
        }
    }

    #[test]
    fn truncations_are_errors() {
        let page = seal(&[Bytes::from(vec![b'z'; 3000])]);
        for len in 0..page.len() {
            assert!(open_page(&cipher(1), &page.slice(..len)).is_err());
        }
    }

    #[test]
    fn decompression_bomb_is_bounded_by_declared_length() {
        // A compressed body declaring a smaller length than it inflates to.
        let records = [Bytes::from(vec![0u8; 60_000])];
        let mut body = prepare_body(&records, 0).unwrap();
        assert!(body.compressed);
        body.body_len = 1_000;
        let page = seal_page(&cipher(1), &body, 0, 0, b"rk", [1; 12]).unwrap();
        assert_eq!(
            open_page(&cipher(1), &page).unwrap_err(),
            PageError::Decompress
        );
    }

    #[test]
    fn per_record_timestamps_round_trip() {
        let records = [Bytes::from_static(b"a"), Bytes::from_static(b"b")];
        let body = prepare_body_with_timestamps(&records, &[1_000, 1_250]).unwrap();
        let page = seal_page(&cipher(1), &body, 7, 0, b"rk", [2; 12]).unwrap();
        let opened = open_page(&cipher(1), &page).unwrap();
        let stamps: Vec<u64> = opened.records.iter().map(|r| r.timestamp_ms).collect();
        assert_eq!(stamps, [1_000, 1_250]);
    }

    #[test]
    fn plan_cuts_by_count_and_body() {
        assert_eq!(plan_pages([10; 5000]), vec![0..4096, 4096..5000]);
        let ranges = plan_pages([30_000, 30_000, 30_000, 200_000, 1]);
        assert_eq!(ranges, vec![0..2, 2..3, 3..4, 4..5]);
        assert!(plan_pages(Vec::<usize>::new()).is_empty());
    }

    proptest! {
        #[test]
        fn any_records_round_trip(
            records in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 1..40),
            compressible in any::<bool>(),
            key in any::<[u8; 32]>(),
            offset in 0u64..1 << 50,
        ) {
            let records: Vec<Bytes> = records
                .into_iter()
                .map(|r| if compressible { Bytes::from(vec![r.len() as u8; r.len()]) } else { Bytes::from(r) })
                .collect();
            let c = PageCipher::new(StreamEpoch([1; 16]), &StreamKey::from_bytes(key), b"", 3);
            for range in plan_pages(records.iter().map(Bytes::len)) {
                let body = prepare_body(&records[range.clone()], 5).unwrap();
                let page = seal_page(&c, &body, offset, 3, b"", [7; 12]).unwrap();
                let opened = open_page(&c, &page).unwrap();
                let got: Vec<Bytes> = opened.records.into_iter().map(|r| r.payload).collect();
                prop_assert_eq!(&got[..], &records[range]);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..200)) {
            let bytes = Bytes::from(data);
            let _ = parse_header(&bytes);
            let _ = open_page(&cipher(1), &bytes);
        }
    }
}
