//! Helpers shared by the page and segment fuzz targets and by the seed
//! generator (`examples/seeds.rs`).

use std::sync::OnceLock;

use aes_gcm_siv::aead::{AeadInPlace, KeyInit};
use aes_gcm_siv::{Aes256GcmSiv, Nonce};
use bytes::{Bytes, BytesMut};
use strata_segments::keys::derive_page_key;
use strata_segments::page::Record;
use strata_segments::segment::{
    encode_chunk_ref, Chunk, ChunkRef, CHUNK_MAGIC, SEGMENT_VERSION, TABLE_MAGIC,
};
use strata_segments::{parse_header, prepare_body, seal_page, PageCipher, StreamEpoch};

/// The stream epoch and routing-key subkey every fuzzed page is sealed under.
pub const EPOCH: [u8; 16] = [0x5E; 16];
pub const SUBKEY: [u8; 32] = [0x7A; 32];
/// Chunk header and directory entry sizes (docs/FORMATS.md §11.1, §11.2).
pub const CHUNK_HEADER_BYTES: usize = 56;
pub const DIRECTORY_ENTRY_BYTES: usize = 32;
pub const TAG_BYTES: usize = 16;

/// The page cipher of [`EPOCH`] and [`SUBKEY`]. Pages of every routing key and
/// key version are sealed with it here (the page format does not bind the
/// cipher to the routing key; the engine's key derivation does).
pub fn cipher() -> &'static PageCipher {
    static CIPHER: OnceLock<PageCipher> = OnceLock::new();
    CIPHER.get_or_init(|| PageCipher::from_subkey(StreamEpoch(EPOCH), &SUBKEY))
}

/// The same AEAD as [`cipher`], built here from the page key, to seal clear
/// pages whose header the page API would not produce.
fn aead() -> &'static Aes256GcmSiv {
    static AEAD: OnceLock<Aes256GcmSiv> = OnceLock::new();
    AEAD.get_or_init(|| {
        let key = derive_page_key(&StreamEpoch(EPOCH), &SUBKEY);
        Aes256GcmSiv::new_from_slice(key.as_slice()).expect("32-byte key")
    })
}

/// `data` with its last four bytes replaced by the CRC-32C of the others.
pub fn with_valid_crc(data: &[u8]) -> Option<Vec<u8>> {
    let n = data.len().checked_sub(4)?;
    let mut v = data.to_vec();
    let crc = crc32c::crc32c(&v[..n]);
    v[n..].copy_from_slice(&crc.to_le_bytes());
    Some(v)
}

/// Seals a *clear page*: a valid clear header, then the plaintext content (the
/// body, or its zstd compression), then 16 bytes in place of the tag. The
/// content is encrypted under [`cipher`] with the header as AAD and the tag
/// written, so any header `parse_header` accepts, with any content, becomes a
/// page that authenticates. `None` when the header does not parse.
pub fn seal_clear_page(clear: &[u8]) -> Option<Bytes> {
    let bytes = Bytes::copy_from_slice(clear);
    let header = parse_header(&bytes).ok()?;
    let mut page = clear.to_vec();
    let tag_at = page.len() - TAG_BYTES;
    let mut aad = EPOCH.to_vec();
    aad.extend_from_slice(&page[..header.header_len]);
    let tag = aead()
        .encrypt_in_place_detached(
            Nonce::from_slice(&header.nonce),
            &aad,
            &mut page[header.header_len..tag_at],
        )
        .expect("encrypts");
    page[tag_at..].copy_from_slice(&tag);
    Some(Bytes::from(page))
}

/// A real page of `records` (all stamped `timestamp_ms`), sealed under [`cipher`].
pub fn page(
    records: &[&[u8]],
    first_offset: u64,
    timestamp_ms: u64,
    routing_key: &[u8],
    append_start: bool,
) -> Bytes {
    let records: Vec<Bytes> = records.iter().map(|r| Bytes::copy_from_slice(r)).collect();
    let mut body = prepare_body(&records, timestamp_ms).expect("records fit a page");
    body.append_start = append_start;
    let nonce = [first_offset as u8 ^ 0x3C; 12];
    seal_page(cipher(), &body, first_offset, 0, routing_key, nonce).expect("seals")
}

/// The clear form of the page [`page`] builds (see [`seal_clear_page`]).
pub fn clear_page(
    records: &[&[u8]],
    first_offset: u64,
    timestamp_ms: u64,
    routing_key: &[u8],
    append_start: bool,
) -> Vec<u8> {
    let sealed = page(
        records,
        first_offset,
        timestamp_ms,
        routing_key,
        append_start,
    );
    let header = parse_header(&sealed).expect("a sealed page parses");
    let owned: Vec<Bytes> = records.iter().map(|r| Bytes::copy_from_slice(r)).collect();
    let body = prepare_body(&owned, timestamp_ms).expect("records fit a page");
    let mut clear = sealed[..header.header_len].to_vec();
    clear.extend_from_slice(&body.content);
    clear.extend_from_slice(&[0; TAG_BYTES]);
    assert_eq!(seal_clear_page(&clear).as_ref(), Some(&sealed));
    clear
}

pub fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A page body as docs/FORMATS.md §6.2 lays it out.
pub fn serialize_body<'a>(
    records: impl IntoIterator<Item = (&'a [u8], u64)> + Clone,
    base_timestamp_ms: u64,
) -> Vec<u8> {
    let mut out = Vec::new();
    for (payload, _) in records.clone() {
        put_varint(&mut out, payload.len() as u64);
    }
    for (_, timestamp) in records.clone() {
        put_varint(&mut out, timestamp - base_timestamp_ms);
    }
    for (payload, _) in records {
        out.extend_from_slice(payload);
    }
    out
}

/// The body of opened records, serialized again.
pub fn serialize_records(records: &[Record], base_timestamp_ms: u64) -> Vec<u8> {
    serialize_body(
        records.iter().map(|r| (r.payload.as_ref(), r.timestamp_ms)),
        base_timestamp_ms,
    )
}

/// A decoded chunk encoded again, with every unchecked field (the header's
/// reserved word, directory flag bits other than bit 0, directory reserved
/// bytes) zero.
pub fn encode_chunk(chunk: &Chunk) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&CHUNK_MAGIC);
    out.extend_from_slice(&SEGMENT_VERSION.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&chunk.stream_id);
    out.extend_from_slice(&chunk.incarnation.to_le_bytes());
    out.extend_from_slice(&chunk.first_offset.to_le_bytes());
    out.extend_from_slice(&chunk.record_count.to_le_bytes());
    out.extend_from_slice(&(chunk.directory.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    for e in &chunk.directory {
        out.extend_from_slice(&e.first_offset.to_le_bytes());
        out.extend_from_slice(&e.record_count.to_le_bytes());
        out.push(e.append_start as u8);
        out.extend_from_slice(&[0; 3]);
        out.extend_from_slice(&e.position.to_le_bytes());
        out.extend_from_slice(&e.length.to_le_bytes());
        out.extend_from_slice(&e.routing_key_hash.to_le_bytes());
    }
    for page in &chunk.pages {
        out.extend_from_slice(page);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// Chunk bytes that decoded, with the unchecked fields cleared as
/// [`encode_chunk`] writes them and the CRC recomputed.
pub fn canonical_chunk(bytes: &[u8]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    v[52..56].fill(0);
    let pages = u32::from_le_bytes(v[48..52].try_into().unwrap()) as usize;
    for i in 0..pages {
        let at = CHUNK_HEADER_BYTES + DIRECTORY_ENTRY_BYTES * i;
        v[at + 12] &= 1;
        v[at + 13..at + 16].fill(0);
    }
    with_valid_crc(&v).unwrap()
}

/// A table encoded from its chunk references, and where the anchors' reserved
/// words (written as 0, not checked) lie in it.
pub fn encode_table(refs: &[ChunkRef]) -> (Vec<u8>, Vec<usize>) {
    let mut out = Vec::new();
    let mut reserved = Vec::new();
    out.extend_from_slice(&TABLE_MAGIC);
    out.extend_from_slice(&SEGMENT_VERSION.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&(refs.len() as u32).to_le_bytes());
    for r in refs {
        let (bytes, anchors) = encode_ref(r);
        reserved.extend(anchors.into_iter().map(|at| out.len() + at));
        out.extend_from_slice(&bytes);
    }
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    (out, reserved)
}

/// One chunk reference, and where its anchors' reserved words lie in it.
pub fn encode_ref(r: &ChunkRef) -> (Vec<u8>, Vec<usize>) {
    let mut b = BytesMut::new();
    encode_chunk_ref(&mut b, r);
    let n = r.anchors.len();
    let reserved = (0..n).map(|i| b.len() - 16 * (n - i) + 12).collect();
    (b.to_vec(), reserved)
}

/// `bytes` with the 4-byte words at `positions` zeroed.
pub fn zero_words(bytes: &[u8], positions: &[usize]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    for &at in positions {
        v[at..at + 4].fill(0);
    }
    v
}

/// Deterministic bytes that zstd cannot shrink.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// One varint read the way docs/FORMATS.md §6.2 defines it, written apart from
/// the crate's reader: at most 10 bytes, the value must fit in a u64, and the
/// encoding must be the shortest one (re-encoding gives the same bytes).
fn reference_varint(input: &mut &[u8]) -> Option<u64> {
    let end = input.iter().position(|b| b & 0x80 == 0)?;
    if end >= 10 {
        return None;
    }
    let (raw, rest) = input.split_at(end + 1);
    let value = raw
        .iter()
        .rev()
        .fold(0u128, |acc, b| (acc << 7) | u128::from(b & 0x7f));
    let value = u64::try_from(value).ok()?;
    let mut canonical = Vec::new();
    put_varint(&mut canonical, value);
    if canonical != raw {
        return None;
    }
    *input = rest;
    Some(value)
}

/// A page body parsed the way docs/FORMATS.md §6.2 defines it: `count`
/// lengths, `count` timestamp deltas, then exactly the payloads. Returns
/// (timestamp, payload) per record, or `None` when the body is malformed.
pub fn reference_parse_body(
    body: &[u8],
    count: usize,
    timestamp_ms: u64,
) -> Option<Vec<(u64, Vec<u8>)>> {
    let mut input = body;
    let mut lens = Vec::new();
    for _ in 0..count {
        lens.push(reference_varint(&mut input)?);
    }
    let mut stamps = Vec::new();
    for _ in 0..count {
        stamps.push(timestamp_ms.checked_add(reference_varint(&mut input)?));
    }
    if lens.iter().map(|&l| u128::from(l)).sum::<u128>() != input.len() as u128 {
        return None;
    }
    let mut records = Vec::new();
    for (len, stamp) in lens.into_iter().zip(stamps) {
        let (payload, rest) = input.split_at(len as usize);
        records.push((stamp?, payload.to_vec()));
        input = rest;
    }
    Some(records)
}

/// Checks the records of an opened page against its header.
pub fn check_records(records: &[Record], header: &strata_segments::PageHeader) {
    assert_eq!(records.len(), header.record_count as usize);
    for (i, r) in records.iter().enumerate() {
        assert_eq!(r.offset, header.first_offset + i as u64);
        assert!(r.timestamp_ms >= header.timestamp_ms);
        assert_eq!(r.append_start, header.append_start && i == 0);
    }
}
