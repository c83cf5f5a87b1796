//! Segment objects (format version 1): the sealed pages of many streams, byte
//! for byte as they sat in WAL objects, grouped into per-stream chunks.
//! `docs/FORMATS.md` ("Segment objects") is the prose twin of this module.
//!
//! ```text
//! segment  chunk 0 · chunk 1 · … · table · trailer
//! chunk    magic "SGCK" · version u16 · reserved u16
//!          stream id [16] · incarnation u64 · first offset u64 · record count u64
//!          page count u32 · reserved u32
//!          directory: page count × (first offset u64 · record count u32 · flags u8 ·
//!                     reserved [3] · byte position u32 · byte length u32 · routing-key hash u64)
//!          pages, back to back
//!          CRC-32C of every preceding byte of the chunk, u32
//! table    magic "SGTB" · version u16 · reserved u16 · chunk count u32
//!          chunk count × (stream id [16] · incarnation u64 · first offset u64 ·
//!                         end offset u64 · byte position u64 · byte length u64 ·
//!                         routing summary · anchor count u32 ·
//!                         anchors × (offset u64 · byte position u32 · reserved u32))
//!          CRC-32C of every preceding byte of the table, u32
//! trailer  table position u64 · table length u64 · magic "STRATASG" · version u16 ·
//!          reserved u16 · CRC-32C of the preceding 28 bytes, u32      (32 bytes)
//! summary  kind u8 (0: exact set, 1: bloom) · then
//!          exact: count u32 · count × hash u64 (sorted, distinct)
//!          bloom: bit count u32 (a multiple of 64) · bits / 8 bytes
//! ```
//!
//! A routing-key hash is the first 8 bytes (little-endian) of SHA-256 of the
//! routing key. A chunk with more than [`EXACT_KEYS_MAX`] distinct keys gets a
//! bloom filter (10 bits per key, 7 probes by double hashing), which never
//! excludes a key it holds. Anchors are page boundaries at least
//! [`ANCHOR_SPACING_BYTES`] apart: a reader may fetch a chunk from an anchor
//! instead of from its start. Every decoder checks magic, version, lengths and
//! CRC before it trusts a byte.

use std::sync::OnceLock;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use sha2::{Digest, Sha256};
use strata_codec::{ReadBytes, ReadError};

use crate::key_index::KeyIndex;
use crate::page::parse_header;

pub const CHUNK_MAGIC: [u8; 4] = *b"SGCK";
pub const TABLE_MAGIC: [u8; 4] = *b"SGTB";
pub const TRAILER_MAGIC: [u8; 8] = *b"STRATASG";
pub const SEGMENT_VERSION: u16 = 1;
pub const TRAILER_BYTES: usize = 32;
/// Chunks with at most this many distinct routing keys list them exactly.
pub const EXACT_KEYS_MAX: usize = 32;
pub const ANCHOR_SPACING_BYTES: usize = 256 << 10;
/// Largest segment the decoders accept (bounds every length they read).
pub const SEGMENT_BYTES_MAX: u64 = 4 << 30;
const CHUNK_HEADER_BYTES: usize = 4 + 2 + 2 + 16 + 8 + 8 + 8 + 4 + 4;
const DIRECTORY_ENTRY_BYTES: usize = 8 + 4 + 1 + 3 + 4 + 4 + 8;
const BLOOM_PROBES: u32 = 7;
const BLOOM_BITS_PER_KEY: usize = 10;
/// Most pages one chunk may list.
const CHUNK_PAGES_MAX: usize = 1 << 24;
/// Directory flag: the page starts an append request.
const FLAG_APPEND_START: u8 = 1;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    #[error("segment {what} too short: {len} bytes")]
    TooShort { what: &'static str, len: usize },
    #[error("bad {what} magic")]
    BadMagic { what: &'static str },
    #[error("unsupported segment {what} version {found}")]
    UnsupportedVersion { what: &'static str, found: u16 },
    #[error("segment {what} CRC mismatch")]
    CrcMismatch { what: &'static str },
    #[error("segment {what} truncated while reading {field}")]
    Truncated {
        what: &'static str,
        field: &'static str,
    },
    #[error("segment field {field} is invalid: {reason}")]
    Invalid {
        field: &'static str,
        reason: &'static str,
    },
}

impl SegmentError {
    /// Maps a failed field read inside `what` (a chunk, the table, a chunk
    /// reference) to this crate's error: `Truncated { what, field }`.
    fn within(what: &'static str) -> impl Fn(ReadError) -> SegmentError {
        move |e| match e {
            ReadError::Truncated { field } => SegmentError::Truncated { what, field },
            ReadError::NotUtf8 { field } => SegmentError::Invalid {
                field,
                reason: "not UTF-8",
            },
        }
    }
}

/// The 64-bit hash of a routing key used in directories and summaries.
pub fn routing_key_hash(routing_key: &[u8]) -> u64 {
    let digest = Sha256::digest(routing_key);
    u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
}

/// Which routing keys a chunk may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoutingSummary {
    /// Exactly these key hashes (sorted, distinct).
    Exact(Vec<u64>),
    /// A bloom filter over the key hashes.
    Bloom { bits: Vec<u64> },
}

impl RoutingSummary {
    pub fn from_hashes(mut hashes: Vec<u64>) -> Self {
        hashes.sort_unstable();
        hashes.dedup();
        if hashes.len() <= EXACT_KEYS_MAX {
            return RoutingSummary::Exact(hashes);
        }
        let bit_count = (hashes.len() * BLOOM_BITS_PER_KEY).next_multiple_of(64);
        let mut bits = vec![0u64; bit_count / 64];
        for h in &hashes {
            for probe in bloom_probes(*h, bit_count as u64) {
                bits[(probe / 64) as usize] |= 1 << (probe % 64);
            }
        }
        RoutingSummary::Bloom { bits }
    }

    /// False only when the chunk certainly holds no record of this key.
    pub fn may_contain(&self, hash: u64) -> bool {
        match self {
            RoutingSummary::Exact(hashes) => hashes.binary_search(&hash).is_ok(),
            RoutingSummary::Bloom { bits } => {
                let bit_count = bits.len() as u64 * 64;
                bit_count == 0
                    || bloom_probes(hash, bit_count)
                        .all(|p| bits[(p / 64) as usize] & (1 << (p % 64)) != 0)
            }
        }
    }

    fn encode(&self, b: &mut BytesMut) {
        match self {
            RoutingSummary::Exact(hashes) => {
                b.put_u8(0);
                b.put_u32_le(hashes.len() as u32);
                for h in hashes {
                    b.put_u64_le(*h);
                }
            }
            RoutingSummary::Bloom { bits } => {
                b.put_u8(1);
                b.put_u32_le((bits.len() * 64) as u32);
                for word in bits {
                    b.put_u64_le(*word);
                }
            }
        }
    }

    fn decode(b: &mut Bytes, what: &'static str) -> Result<Self, SegmentError> {
        let within = SegmentError::within(what);
        let kind = b.read_u8("summary kind").map_err(&within)?;
        // For an exact summary the count is of hashes (8 bytes each); for a
        // bloom filter it is of bits.
        let count = b.read_u32("summary count").map_err(&within)? as usize;
        match kind {
            0 => {
                b.ensure_items(count, 8, "summary").map_err(&within)?;
                let hashes: Vec<u64> = (0..count).map(|_| b.get_u64_le()).collect();
                if hashes.windows(2).any(|w| w[0] >= w[1]) {
                    return Err(SegmentError::Invalid {
                        field: "summary",
                        reason: "exact hashes must be sorted and distinct",
                    });
                }
                Ok(RoutingSummary::Exact(hashes))
            }
            1 => {
                if count == 0 || !count.is_multiple_of(64) {
                    return Err(SegmentError::Invalid {
                        field: "summary",
                        reason: "bloom bit count must be a positive multiple of 64",
                    });
                }
                b.ensure_remaining(count / 8, "summary").map_err(&within)?;
                let bits = (0..count / 64).map(|_| b.get_u64_le()).collect();
                Ok(RoutingSummary::Bloom { bits })
            }
            _ => Err(SegmentError::Invalid {
                field: "summary kind",
                reason: "not 0 (exact) or 1 (bloom)",
            }),
        }
    }
}

fn bloom_probes(hash: u64, bit_count: u64) -> impl Iterator<Item = u64> {
    let h1 = hash & 0xffff_ffff;
    let h2 = (hash >> 32) | 1;
    (0..BLOOM_PROBES as u64).map(move |i| h1.wrapping_add(i.wrapping_mul(h2)) % bit_count)
}

/// One page as a chunk's directory lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectoryEntry {
    pub first_offset: u64,
    pub record_count: u32,
    pub append_start: bool,
    /// Position of the page from the start of the chunk's pages area.
    pub position: u32,
    pub length: u32,
    pub routing_key_hash: u64,
}

/// A page boundary a reader may start from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Anchor {
    pub offset: u64,
    /// Position from the start of the chunk.
    pub position: u32,
}

/// A chunk as the segment's table (and index runs) describe it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkRef {
    pub stream_id: [u8; 16],
    pub incarnation: u64,
    pub first_offset: u64,
    pub end_offset: u64,
    /// Byte range of the whole chunk (header through CRC) in the segment.
    pub position: u64,
    pub length: u64,
    pub summary: RoutingSummary,
    pub anchors: Vec<Anchor>,
}

/// A decoded, validated chunk.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub stream_id: [u8; 16],
    pub incarnation: u64,
    pub first_offset: u64,
    pub record_count: u64,
    pub directory: Vec<DirectoryEntry>,
    /// The pages, in order (slices of the chunk's bytes).
    pub pages: Vec<Bytes>,
    /// The directory by routing-key hash, built on the first keyed lookup.
    key_index: OnceLock<KeyIndex>,
}

impl Chunk {
    pub fn new(
        stream_id: [u8; 16],
        incarnation: u64,
        first_offset: u64,
        record_count: u64,
        directory: Vec<DirectoryEntry>,
        pages: Vec<Bytes>,
    ) -> Self {
        Chunk {
            stream_id,
            incarnation,
            first_offset,
            record_count,
            directory,
            pages,
            key_index: OnceLock::new(),
        }
    }

    /// Heap bytes this decoded chunk holds at most beside the encoded bytes
    /// its pages slice: itself, its directory, its page handles and the key
    /// index a keyed read may build (counted up front, so a memory budget
    /// holds before and after).
    pub fn decoded_bytes_max(&self) -> u64 {
        let pages = self.directory.len().max(self.pages.len());
        let per_page = size_of::<DirectoryEntry>() + size_of::<Bytes>();
        (size_of::<Chunk>() + pages * per_page + KeyIndex::bytes_max(pages)) as u64
    }

    /// The directory indices of the pages whose routing-key hash is
    /// `key_hash`, in offset order. The first call indexes the directory
    /// (`key_index.rs`); later calls are two binary searches.
    pub fn pages_of_key(&self, key_hash: u64) -> &[u32] {
        self.key_index
            .get_or_init(|| KeyIndex::build(self.directory.iter().map(|e| e.routing_key_hash)))
            .pages_of(key_hash)
    }
}

/// The pages of one stream incarnation to seal.
pub struct ChunkInput {
    pub stream_id: [u8; 16],
    pub incarnation: u64,
    pub pages: Vec<Bytes>,
}

/// Builds a segment object from chunks. Pages are validated (clear header)
/// and must tile their offsets contiguously.
pub fn build_segment(inputs: &[ChunkInput]) -> Result<(Bytes, Vec<ChunkRef>), SegmentError> {
    let mut out = BytesMut::new();
    let mut refs = Vec::with_capacity(inputs.len());
    for input in inputs {
        let position = out.len() as u64;
        let encoded = encode_chunk(&mut out, input)?;
        refs.push(ChunkRef {
            stream_id: input.stream_id,
            incarnation: input.incarnation,
            first_offset: encoded.first_offset,
            end_offset: encoded.end_offset,
            position,
            length: out.len() as u64 - position,
            summary: encoded.summary,
            anchors: encoded.anchors,
        });
    }
    let table_position = out.len() as u64;
    encode_table(&mut out, &refs);
    let table_length = out.len() as u64 - table_position;
    let trailer_start = out.len();
    out.put_u64_le(table_position);
    out.put_u64_le(table_length);
    out.put_slice(&TRAILER_MAGIC);
    out.put_u16_le(SEGMENT_VERSION);
    out.put_u16_le(0);
    let crc = crc32c::crc32c(&out[trailer_start..]);
    out.put_u32_le(crc);
    if out.len() as u64 > SEGMENT_BYTES_MAX {
        return Err(SegmentError::Invalid {
            field: "segment",
            reason: "larger than the 4 GiB the decoders accept",
        });
    }
    Ok((out.freeze(), refs))
}

/// What encoding a chunk yields for its table entry.
struct EncodedChunk {
    anchors: Vec<Anchor>,
    summary: RoutingSummary,
    first_offset: u64,
    end_offset: u64,
}

fn encode_chunk(out: &mut BytesMut, input: &ChunkInput) -> Result<EncodedChunk, SegmentError> {
    if input.pages.is_empty() || input.pages.len() > CHUNK_PAGES_MAX {
        return Err(SegmentError::Invalid {
            field: "pages",
            reason: "a chunk holds 1 to 2^24 pages",
        });
    }
    let start = out.len();
    // Header and directory come before the pages; the whole chunk must stay
    // addressable by the u32 positions of its anchors.
    let pages_start = (CHUNK_HEADER_BYTES + DIRECTORY_ENTRY_BYTES * input.pages.len()) as u64;
    let mut directory = Vec::with_capacity(input.pages.len());
    let mut position = 0u64;
    let mut next_offset = None;
    for page in &input.pages {
        let header = parse_header(page).map_err(|_| SegmentError::Invalid {
            field: "page",
            reason: "a page to seal has an invalid header",
        })?;
        if next_offset.is_some_and(|n| n != header.first_offset) {
            return Err(SegmentError::Invalid {
                field: "page",
                reason: "pages of a chunk must tile their offsets",
            });
        }
        next_offset = Some(header.end_offset());
        if pages_start + position + page.len() as u64 + 4 > u32::MAX as u64 {
            return Err(SegmentError::Invalid {
                field: "chunk",
                reason: "a chunk exceeds 4 GiB",
            });
        }
        directory.push(DirectoryEntry {
            first_offset: header.first_offset,
            record_count: header.record_count,
            append_start: header.append_start,
            position: position as u32,
            length: page.len() as u32,
            routing_key_hash: routing_key_hash(&header.routing_key),
        });
        position += page.len() as u64;
    }
    let first = directory[0].first_offset;
    let end = next_offset.expect("non-empty");
    out.put_slice(&CHUNK_MAGIC);
    out.put_u16_le(SEGMENT_VERSION);
    out.put_u16_le(0);
    out.put_slice(&input.stream_id);
    out.put_u64_le(input.incarnation);
    out.put_u64_le(first);
    out.put_u64_le(end - first);
    out.put_u32_le(directory.len() as u32);
    out.put_u32_le(0);
    for e in &directory {
        out.put_u64_le(e.first_offset);
        out.put_u32_le(e.record_count);
        out.put_u8(if e.append_start { FLAG_APPEND_START } else { 0 });
        out.put_slice(&[0; 3]);
        out.put_u32_le(e.position);
        out.put_u32_le(e.length);
        out.put_u64_le(e.routing_key_hash);
    }
    debug_assert_eq!((out.len() - start) as u64, pages_start);
    let pages_start = pages_start as u32;
    let mut anchors = Vec::new();
    let mut last_anchor = 0usize;
    for (page, e) in input.pages.iter().zip(&directory) {
        let at = e.position as usize;
        if at >= last_anchor + ANCHOR_SPACING_BYTES {
            anchors.push(Anchor {
                offset: e.first_offset,
                position: pages_start + e.position,
            });
            last_anchor = at;
        }
        out.put_slice(page);
    }
    let crc = crc32c::crc32c(&out[start..]);
    out.put_u32_le(crc);
    let summary =
        RoutingSummary::from_hashes(directory.iter().map(|e| e.routing_key_hash).collect());
    Ok(EncodedChunk {
        anchors,
        summary,
        first_offset: first,
        end_offset: end,
    })
}

fn encode_table(out: &mut BytesMut, refs: &[ChunkRef]) {
    let start = out.len();
    out.put_slice(&TABLE_MAGIC);
    out.put_u16_le(SEGMENT_VERSION);
    out.put_u16_le(0);
    out.put_u32_le(refs.len() as u32);
    for r in refs {
        encode_chunk_ref(out, r);
    }
    let crc = crc32c::crc32c(&out[start..]);
    out.put_u32_le(crc);
}

/// The table's encoding of one chunk reference (also used by index runs).
pub fn encode_chunk_ref(out: &mut BytesMut, r: &ChunkRef) {
    out.put_slice(&r.stream_id);
    out.put_u64_le(r.incarnation);
    out.put_u64_le(r.first_offset);
    out.put_u64_le(r.end_offset);
    out.put_u64_le(r.position);
    out.put_u64_le(r.length);
    r.summary.encode(out);
    out.put_u32_le(r.anchors.len() as u32);
    for a in &r.anchors {
        out.put_u64_le(a.offset);
        out.put_u32_le(a.position);
        out.put_u32_le(0);
    }
}

/// Decodes one chunk reference (the inverse of [`encode_chunk_ref`]).
pub fn decode_chunk_ref(b: &mut Bytes, what: &'static str) -> Result<ChunkRef, SegmentError> {
    let within = SegmentError::within(what);
    let stream_id = b.read_array("stream id").map_err(&within)?;
    let incarnation = b.read_u64("incarnation").map_err(&within)?;
    let first_offset = b.read_u64("first offset").map_err(&within)?;
    let end_offset = b.read_u64("end offset").map_err(&within)?;
    let position = b.read_u64("position").map_err(&within)?;
    let length = b.read_u64("length").map_err(&within)?;
    if end_offset <= first_offset {
        return Err(SegmentError::Invalid {
            field: "chunk offsets",
            reason: "a chunk holds at least one record",
        });
    }
    if position
        .checked_add(length)
        .is_none_or(|e| e > SEGMENT_BYTES_MAX)
    {
        return Err(SegmentError::Invalid {
            field: "chunk range",
            reason: "outside any segment",
        });
    }
    let summary = RoutingSummary::decode(b, what)?;
    let count = b.read_u32("anchor count").map_err(&within)? as usize;
    b.ensure_items(count, 16, "anchors").map_err(&within)?;
    let anchors = (0..count)
        .map(|_| {
            let offset = b.get_u64_le();
            let position = b.get_u32_le();
            b.advance(4);
            Anchor { offset, position }
        })
        .collect();
    Ok(ChunkRef {
        stream_id,
        incarnation,
        first_offset,
        end_offset,
        position,
        length,
        summary,
        anchors,
    })
}

/// Where the table is: decoded from a segment's last [`TRAILER_BYTES`] bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    pub table_position: u64,
    pub table_length: u64,
}

pub fn decode_trailer(bytes: &[u8]) -> Result<Trailer, SegmentError> {
    if bytes.len() != TRAILER_BYTES {
        return Err(SegmentError::TooShort {
            what: "trailer",
            len: bytes.len(),
        });
    }
    let stored = u32::from_le_bytes(bytes[28..32].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[..28]) != stored {
        return Err(SegmentError::CrcMismatch { what: "trailer" });
    }
    if bytes[16..24] != TRAILER_MAGIC {
        return Err(SegmentError::BadMagic { what: "trailer" });
    }
    let version = u16::from_le_bytes([bytes[24], bytes[25]]);
    if version != SEGMENT_VERSION {
        return Err(SegmentError::UnsupportedVersion {
            what: "trailer",
            found: version,
        });
    }
    let table_position = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    let table_length = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    if table_position
        .checked_add(table_length)
        .is_none_or(|e| e > SEGMENT_BYTES_MAX)
    {
        return Err(SegmentError::Invalid {
            field: "table range",
            reason: "outside any segment",
        });
    }
    Ok(Trailer {
        table_position,
        table_length,
    })
}

fn check_frame(
    bytes: &Bytes,
    magic: &[u8; 4],
    what: &'static str,
    min: usize,
) -> Result<Bytes, SegmentError> {
    if bytes.len() < min {
        return Err(SegmentError::TooShort {
            what,
            len: bytes.len(),
        });
    }
    let crc_at = bytes.len() - 4;
    let stored = u32::from_le_bytes(bytes[crc_at..].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[..crc_at]) != stored {
        return Err(SegmentError::CrcMismatch { what });
    }
    if bytes[..4] != magic[..] {
        return Err(SegmentError::BadMagic { what });
    }
    let version = u16::from_le_bytes([bytes[4], bytes[5]]);
    if version != SEGMENT_VERSION {
        return Err(SegmentError::UnsupportedVersion {
            what,
            found: version,
        });
    }
    if bytes[6..8] != [0, 0] {
        return Err(SegmentError::Invalid {
            field: "reserved",
            reason: "must be zero",
        });
    }
    Ok(bytes.slice(8..crc_at))
}

/// Decodes and validates a segment's table.
pub fn decode_table(bytes: &Bytes) -> Result<Vec<ChunkRef>, SegmentError> {
    let mut b = check_frame(bytes, &TABLE_MAGIC, "table", 16)?;
    let within = SegmentError::within("table");
    let count = b.read_u32("chunk count").map_err(&within)? as usize;
    let mut refs = Vec::with_capacity(count.min(b.len() / 64));
    for _ in 0..count {
        refs.push(decode_chunk_ref(&mut b, "table")?);
    }
    if !b.is_empty() {
        return Err(SegmentError::Invalid {
            field: "table",
            reason: "trailing bytes after the last chunk",
        });
    }
    Ok(refs)
}

/// Decodes and validates one chunk (its bytes exactly, header through CRC).
pub fn decode_chunk(bytes: &Bytes) -> Result<Chunk, SegmentError> {
    let mut b = check_frame(bytes, &CHUNK_MAGIC, "chunk", CHUNK_HEADER_BYTES + 4)?;
    let within = SegmentError::within("chunk");
    let stream_id = b.read_array("stream id").map_err(&within)?;
    let incarnation = b.read_u64("incarnation").map_err(&within)?;
    let first_offset = b.read_u64("first offset").map_err(&within)?;
    let record_count = b.read_u64("record count").map_err(&within)?;
    let page_count = b.read_u32("page count").map_err(&within)? as usize;
    let _reserved = b.read_u32("reserved").map_err(&within)?;
    if page_count == 0 || page_count.saturating_mul(DIRECTORY_ENTRY_BYTES) > b.len() {
        return Err(SegmentError::Invalid {
            field: "page count",
            reason: "zero, or more pages than the chunk can hold",
        });
    }
    let mut directory = Vec::with_capacity(page_count);
    for _ in 0..page_count {
        let first = b.get_u64_le();
        let count = b.get_u32_le();
        let flags = b.get_u8();
        b.advance(3);
        let position = b.get_u32_le();
        let length = b.get_u32_le();
        let hash = b.get_u64_le();
        directory.push(DirectoryEntry {
            first_offset: first,
            record_count: count,
            append_start: flags & FLAG_APPEND_START != 0,
            position,
            length,
            routing_key_hash: hash,
        });
    }
    // The directory must tile the offsets and the pages area exactly.
    let mut expected_offset = first_offset;
    let mut expected_position = 0u64;
    for e in &directory {
        if e.first_offset != expected_offset
            || e.position as u64 != expected_position
            || e.record_count == 0
        {
            return Err(SegmentError::Invalid {
                field: "directory",
                reason: "pages must tile the chunk's offsets and bytes",
            });
        }
        expected_offset =
            e.first_offset
                .checked_add(e.record_count as u64)
                .ok_or(SegmentError::Invalid {
                    field: "directory",
                    reason: "offsets past 2^64",
                })?;
        expected_position += e.length as u64;
    }
    if first_offset.checked_add(record_count) != Some(expected_offset)
        || expected_position != b.len() as u64
    {
        return Err(SegmentError::Invalid {
            field: "directory",
            reason: "directory and pages disagree with the chunk header",
        });
    }
    let pages = directory
        .iter()
        .map(|e| b.slice(e.position as usize..(e.position + e.length) as usize))
        .collect();
    Ok(Chunk::new(
        stream_id,
        incarnation,
        first_offset,
        record_count,
        directory,
        pages,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::{PageCipher, StreamEpoch, StreamKey};
    use crate::page::{open_page, prepare_body, seal_page};
    use proptest::prelude::*;

    fn page(first: u64, records: &[&[u8]], routing_key: &[u8]) -> Bytes {
        let cipher = PageCipher::new(
            StreamEpoch([1; 16]),
            &StreamKey::from_bytes([2; 32]),
            routing_key,
            0,
        );
        let records: Vec<Bytes> = records.iter().map(|r| Bytes::copy_from_slice(r)).collect();
        let mut body = prepare_body(&records, 5).unwrap();
        body.append_start = first.is_multiple_of(2);
        seal_page(&cipher, &body, first, 0, routing_key, [3; 12]).unwrap()
    }

    fn sample() -> (Bytes, Vec<ChunkRef>, Vec<ChunkInput>) {
        let inputs = vec![
            ChunkInput {
                stream_id: [1; 16],
                incarnation: 4,
                pages: vec![page(10, &[b"a", b"b"], b"k1"), page(12, &[b"c"], b"k2")],
            },
            ChunkInput {
                stream_id: [2; 16],
                incarnation: 1,
                pages: vec![page(0, &[&[7u8; 300_000]], b"")],
            },
        ];
        let (bytes, refs) = build_segment(&inputs).unwrap();
        (bytes, refs, inputs)
    }

    #[test]
    fn build_and_read_back_through_trailer_table_and_chunks() {
        let (bytes, refs, inputs) = sample();
        let trailer = decode_trailer(&bytes[bytes.len() - TRAILER_BYTES..]).unwrap();
        let table_bytes = bytes.slice(
            trailer.table_position as usize
                ..(trailer.table_position + trailer.table_length) as usize,
        );
        assert_eq!(decode_table(&table_bytes).unwrap(), refs);
        for (r, input) in refs.iter().zip(&inputs) {
            let chunk =
                decode_chunk(&bytes.slice(r.position as usize..(r.position + r.length) as usize))
                    .unwrap();
            assert_eq!(chunk.pages, input.pages);
            assert_eq!(chunk.stream_id, input.stream_id);
            assert_eq!(r.first_offset, chunk.first_offset);
            assert_eq!(r.end_offset, chunk.first_offset + chunk.record_count);
        }
        assert_eq!(refs[0].first_offset, 10);
        assert_eq!(refs[0].end_offset, 13);
        assert!(refs[0].summary.may_contain(routing_key_hash(b"k1")));
        assert!(refs[0].summary.may_contain(routing_key_hash(b"k2")));
        assert!(!refs[0].summary.may_contain(routing_key_hash(b"k3")));
        // Pages survive byte for byte and still open.
        let cipher = PageCipher::new(
            StreamEpoch([1; 16]),
            &StreamKey::from_bytes([2; 32]),
            b"k1",
            0,
        );
        let chunk = decode_chunk(
            &bytes.slice(refs[0].position as usize..(refs[0].position + refs[0].length) as usize),
        )
        .unwrap();
        assert_eq!(
            open_page(&cipher, &chunk.pages[0]).unwrap().records.len(),
            2
        );
        assert!(chunk.directory[0].append_start);
    }

    #[test]
    fn anchors_mark_large_chunks() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise: Vec<u8> = (0..100_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let pages: Vec<Bytes> = (0..10).map(|i| page(i, &[&noise], b"")).collect();
        let (_, refs) = build_segment(&[ChunkInput {
            stream_id: [3; 16],
            incarnation: 1,
            pages,
        }])
        .unwrap();
        let anchors = &refs[0].anchors;
        assert!(anchors.len() >= 3, "{anchors:?}");
        assert!(anchors
            .windows(2)
            .all(|w| w[1].position as usize >= w[0].position as usize + ANCHOR_SPACING_BYTES));
    }

    #[test]
    fn every_single_bit_flip_and_truncation_is_an_error() {
        let inputs = vec![ChunkInput {
            stream_id: [1; 16],
            incarnation: 4,
            pages: vec![page(0, &[b"x"], b"k")],
        }];
        let (bytes, refs) = build_segment(&inputs).unwrap();
        let chunk =
            bytes.slice(refs[0].position as usize..(refs[0].position + refs[0].length) as usize);
        for i in 0..chunk.len() {
            let mut v = chunk.to_vec();
            v[i] ^= 0x10;
            assert!(decode_chunk(&Bytes::from(v)).is_err(), "chunk byte {i}");
        }
        for len in 0..chunk.len() {
            assert!(decode_chunk(&chunk.slice(..len)).is_err());
        }
        let trailer = &bytes[bytes.len() - TRAILER_BYTES..];
        for i in 0..trailer.len() {
            let mut v = trailer.to_vec();
            v[i] ^= 1;
            assert!(decode_trailer(&v).is_err(), "trailer byte {i}");
        }
        let t = decode_trailer(trailer).unwrap();
        let table =
            bytes.slice(t.table_position as usize..(t.table_position + t.table_length) as usize);
        for i in 0..table.len() {
            let mut v = table.to_vec();
            v[i] ^= 4;
            assert!(decode_table(&Bytes::from(v)).is_err(), "table byte {i}");
        }
    }

    #[test]
    fn offsets_past_u64_max_are_an_error_even_with_a_good_crc() {
        let (bytes, refs) = build_segment(&[ChunkInput {
            stream_id: [1; 16],
            incarnation: 4,
            pages: vec![page(0, &[b"x", b"y"], b"k")],
        }])
        .unwrap();
        let r = &refs[0];
        let mut v = bytes[r.position as usize..(r.position + r.length) as usize].to_vec();
        // The header's first offset (at 32) and the page's (at 60).
        let near_max = (u64::MAX - 1).to_le_bytes();
        v[32..40].copy_from_slice(&near_max);
        v[60..68].copy_from_slice(&near_max);
        let body = v.len() - 4;
        let crc = crc32c::crc32c(&v[..body]);
        v[body..].copy_from_slice(&crc.to_le_bytes());
        assert!(matches!(
            decode_chunk(&Bytes::from(v)),
            Err(SegmentError::Invalid { .. })
        ));
    }

    #[test]
    fn non_contiguous_pages_are_refused() {
        let bad = ChunkInput {
            stream_id: [1; 16],
            incarnation: 1,
            pages: vec![page(0, &[b"a"], b""), page(5, &[b"b"], b"")],
        };
        assert!(build_segment(&[bad]).is_err());
    }

    #[test]
    fn blooms_never_exclude_their_keys() {
        let keys: Vec<u64> = (0..500u32)
            .map(|i| routing_key_hash(format!("key-{i}").as_bytes()))
            .collect();
        let summary = RoutingSummary::from_hashes(keys.clone());
        assert!(matches!(summary, RoutingSummary::Bloom { .. }));
        assert!(keys.iter().all(|k| summary.may_contain(*k)));
        let misses = (0..10_000u32)
            .filter(|i| summary.may_contain(routing_key_hash(format!("other-{i}").as_bytes())))
            .count();
        assert!(
            misses < 300,
            "false positive rate too high: {misses} / 10000"
        );
    }

    proptest! {
        /// A chunk reference decodes from exactly its own bytes, whatever
        /// its summary (exact or bloom) and anchors.
        #[test]
        fn chunk_refs_round_trip_from_their_own_bytes(
            hashes in proptest::collection::vec(any::<u64>(), 0..200),
            anchors in proptest::collection::vec((any::<u64>(), any::<u32>()), 0..5),
            first in 0u64..1 << 40,
            records in 1u64..1 << 20,
        ) {
            let r = ChunkRef {
                stream_id: [9; 16],
                incarnation: 3,
                first_offset: first,
                end_offset: first + records,
                position: 48,
                length: 1000,
                summary: RoutingSummary::from_hashes(hashes.clone()),
                anchors: anchors
                    .into_iter()
                    .map(|(offset, position)| Anchor { offset, position })
                    .collect(),
            };
            let mut out = BytesMut::new();
            encode_chunk_ref(&mut out, &r);
            let mut bytes = out.freeze();
            let decoded = decode_chunk_ref(&mut bytes, "chunk reference").unwrap();
            prop_assert!(bytes.is_empty());
            prop_assert!(hashes.iter().all(|h| decoded.summary.may_contain(*h)));
            prop_assert_eq!(decoded, r);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..400)) {
            let bytes = Bytes::from(data);
            let _ = decode_chunk(&bytes);
            let _ = decode_table(&bytes);
            if bytes.len() >= TRAILER_BYTES {
                let _ = decode_trailer(&bytes[bytes.len() - TRAILER_BYTES..]);
            }
        }
    }
}
