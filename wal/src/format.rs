//! Byte layout of one WAL object (format version 1). `docs/FORMATS.md` is the
//! prose twin of this module; keep them in step.
//!
//! All integers are little-endian. Layout:
//!
//! ```text
//! header   magic "STRATAWL" · version u16 · kind u8 · reserved u8 (0)
//!          slot u64 · previous slot u64 (u64::MAX: none) · writer epoch u64
//!          writer instance [16] · write id [16]
//!          shard name (u16 length, 1..=64 bytes UTF-8) · entry count u32
//! entries  entry count × (tag u8 · body length u32 · body)
//! trailer  CRC-32C (Castagnoli) of every preceding byte, u32
//! ```
//!
//! The decoder checks, in order: total length bounds, magic, version, CRC, then
//! the header and every entry with exact length accounting. Page bytes inside
//! append entries are returned as zero-copy slices of the input.

use bytes::{BufMut, Bytes, BytesMut};
use strata_codec::{ReadBytes, ReadError};

pub use crate::entry::{
    AppendEntry, CloseEntry, ConsumerEntry, CreateEntry, DeleteEntry, ProducerEntry, StreamRef,
    StreamSeqEntry, UsageEntry, WalEntry,
};

/// First eight bytes of every WAL object.
pub const MAGIC: [u8; 8] = *b"STRATAWL";
/// The only format version this build reads and writes.
pub const FORMAT_VERSION: u16 = 1;
/// Largest WAL object the decoder accepts (and the encoder produces).
pub const OBJECT_BYTES_MAX: usize = 256 << 20;
/// Longest shard name.
pub const SHARD_NAME_BYTES_MAX: usize = 64;
/// Longest producer id.
pub const PRODUCER_ID_BYTES_MAX: usize = 256;
/// Longest `Stream-Seq` value.
pub const STREAM_SEQ_BYTES_MAX: usize = 256;
/// Most entries in one object.
pub const ENTRIES_MAX: usize = 1 << 20;
/// Longest account name of a Create entry.
pub const ACCOUNT_BYTES_MAX: usize = 64;

const TRAILER_BYTES: usize = 4;
/// Fixed part of the header, before the shard name.
const HEADER_FIXED_BYTES: usize = 8 + 2 + 1 + 1 + 8 + 8 + 8 + 16 + 16;
/// `prev_slot` of an object with no predecessor.
pub const NO_SLOT: u64 = u64::MAX;
/// Pages at least this large are handed to the store as their own payload chunk
/// instead of being copied into the object buffer.
const PAGE_CHUNK_MIN_BYTES: usize = 16 << 10;

const TAG_CREATE: u8 = 1;
const TAG_APPEND: u8 = 2;
const TAG_PRODUCER: u8 = 3;
const TAG_STREAM_SEQ: u8 = 4;
const TAG_CLOSE: u8 = 5;
const TAG_DELETE: u8 = 6;
const TAG_CONSUMER: u8 = 7;
const TAG_USAGE: u8 = 8;
/// Longest consumer name.
pub const CONSUMER_NAME_BYTES_MAX: usize = 128;
/// Largest consumer change body (its format is the engine's).
pub const CONSUMER_CHANGE_BYTES_MAX: usize = 4 << 20;

/// Why a byte string is not a valid WAL object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WalError {
    #[error("WAL object too short: {len} bytes")]
    TooShort { len: usize },
    #[error("WAL object too large: {len} bytes (limit {OBJECT_BYTES_MAX})")]
    TooLarge { len: usize },
    #[error("bad WAL magic")]
    BadMagic,
    #[error("unsupported WAL format version {found} (this build reads {FORMAT_VERSION})")]
    UnsupportedVersion { found: u16 },
    #[error("WAL CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("WAL object truncated while reading {field}")]
    Truncated { field: &'static str },
    #[error("WAL field {field} is invalid: {reason}")]
    Invalid {
        field: &'static str,
        reason: &'static str,
    },
    #[error("unknown WAL entry tag {tag}")]
    UnknownTag { tag: u8 },
    #[error("WAL entry {index} declares {declared} bytes but its fields use {used}")]
    EntryLength {
        index: usize,
        declared: usize,
        used: usize,
    },
}

impl From<ReadError> for WalError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Truncated { field } => WalError::Truncated { field },
            ReadError::NotUtf8 { field } => WalError::Invalid {
                field,
                reason: "not UTF-8",
            },
        }
    }
}

/// Data objects carry entries; a fence object carries none and marks the slot
/// where a new owner's epoch begins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectKind {
    Data,
    Fence,
}

impl ObjectKind {
    fn code(self) -> u8 {
        match self {
            ObjectKind::Data => 1,
            ObjectKind::Fence => 2,
        }
    }

    fn from_code(code: u8) -> Result<Self, WalError> {
        match code {
            1 => Ok(ObjectKind::Data),
            2 => Ok(ObjectKind::Fence),
            _ => Err(WalError::Invalid {
                field: "kind",
                reason: "not 1 (data) or 2 (fence)",
            }),
        }
    }
}

/// Who wrote an object: the owning instance, its writer epoch, and a random id
/// unique to this one write (used to recognise our own write after an ambiguous
/// conditional PUT).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WriterId {
    pub instance: [u8; 16],
    pub epoch: u64,
    pub write_id: [u8; 16],
}

/// Header of a WAL object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalHeader {
    pub kind: ObjectKind,
    pub slot: u64,
    /// The slot of the object this one follows in its writer's chain
    /// ([`NO_SLOT`] for none). Data objects continue the chain that starts at
    /// their owner's fence; the walk admits them only if they do.
    pub prev_slot: u64,
    pub writer: WriterId,
    pub shard: String,
}

/// A decoded (or to-be-encoded) WAL object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WalObject {
    pub header: WalHeader,
    pub entries: Vec<WalEntry>,
}

impl WalObject {
    /// A fence object: no entries. `prev_slot` records the chain it follows
    /// (informational; the walk admits fences by epoch alone).
    pub fn fence(slot: u64, prev_slot: u64, writer: WriterId, shard: String) -> Self {
        WalObject {
            header: WalHeader {
                kind: ObjectKind::Fence,
                slot,
                prev_slot,
                writer,
                shard,
            },
            entries: Vec::new(),
        }
    }
}

/// An encoded object as payload chunks (large pages are not copied) plus its
/// total length. Concatenating the chunks gives the object's bytes.
#[derive(Debug, Clone)]
pub struct EncodedObject {
    pub chunks: Vec<Bytes>,
    pub len: usize,
}

impl EncodedObject {
    /// The object as one contiguous buffer.
    pub fn to_bytes(&self) -> Bytes {
        if self.chunks.len() == 1 {
            return self.chunks[0].clone();
        }
        let mut out = BytesMut::with_capacity(self.len);
        for chunk in &self.chunks {
            out.extend_from_slice(chunk);
        }
        out.freeze()
    }
}

/// Validation of an object before it is written (paired with the decoder's
/// checks after it is read).
fn check_encodable(object: &WalObject) -> Result<(), WalError> {
    let h = &object.header;
    if h.shard.is_empty() || h.shard.len() > SHARD_NAME_BYTES_MAX {
        return Err(WalError::Invalid {
            field: "shard",
            reason: "length must be 1..=64 bytes",
        });
    }
    if object.entries.len() > ENTRIES_MAX {
        return Err(WalError::Invalid {
            field: "entry count",
            reason: "too many entries",
        });
    }
    if h.prev_slot != NO_SLOT && h.prev_slot >= h.slot {
        return Err(WalError::Invalid {
            field: "previous slot",
            reason: "must precede the object's own slot",
        });
    }
    if h.kind == ObjectKind::Fence && !object.entries.is_empty() {
        return Err(WalError::Invalid {
            field: "kind",
            reason: "a fence object carries no entries",
        });
    }
    for entry in &object.entries {
        match entry {
            WalEntry::Producer(p) if p.producer_id.len() > PRODUCER_ID_BYTES_MAX => {
                return Err(WalError::Invalid {
                    field: "producer id",
                    reason: "longer than 256 bytes",
                })
            }
            WalEntry::StreamSeq(s) if s.seq.len() > STREAM_SEQ_BYTES_MAX => {
                return Err(WalError::Invalid {
                    field: "stream seq",
                    reason: "longer than 256 bytes",
                })
            }
            WalEntry::Consumer(c) => check_consumer(&c.name, c.change.len())?,
            WalEntry::Create(c) if c.account.len() > ACCOUNT_BYTES_MAX => {
                return Err(WalError::Invalid {
                    field: "account",
                    reason: "longer than 64 bytes",
                })
            }
            WalEntry::Append(a) if a.pages.iter().any(|p| p.len() > u32::MAX as usize) => {
                return Err(WalError::Invalid {
                    field: "page",
                    reason: "longer than u32::MAX",
                })
            }
            WalEntry::Append(a) if a.first_offset.checked_add(a.record_count).is_none() => {
                return Err(WalError::Invalid {
                    field: "record count",
                    reason: "offset range overflows u64",
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// Encodes an object. Fails only on values the format cannot hold (an
/// over-long name or id, too many entries, an object over the size limit).
pub fn encode(object: &WalObject) -> Result<EncodedObject, WalError> {
    check_encodable(object)?;
    let mut enc = ChunkWriter::new();
    let h = &object.header;
    let b = &mut enc.buf;
    b.put_slice(&MAGIC);
    b.put_u16_le(FORMAT_VERSION);
    b.put_u8(h.kind.code());
    b.put_u8(0);
    b.put_u64_le(h.slot);
    b.put_u64_le(h.prev_slot);
    b.put_u64_le(h.writer.epoch);
    b.put_slice(&h.writer.instance);
    b.put_slice(&h.writer.write_id);
    b.put_u16_le(h.shard.len() as u16);
    b.put_slice(h.shard.as_bytes());
    b.put_u32_le(object.entries.len() as u32);
    for entry in &object.entries {
        encode_entry(&mut enc, entry);
    }
    let (chunks, len) = enc.finish();
    if len > OBJECT_BYTES_MAX {
        return Err(WalError::TooLarge { len });
    }
    Ok(EncodedObject { chunks, len })
}

/// Bytes of an object's header with a shard name of `shard_len` bytes,
/// through its entry count (the trailing CRC is counted in
/// [`OBJECT_TRAILER_BYTES`]).
pub const fn header_encoded_len(shard_len: usize) -> usize {
    8 + 2 + 1 + 1 + 8 + 8 + 8 + 16 + 16 + 2 + shard_len + 4
}

/// Bytes after the last entry (the CRC).
pub const OBJECT_TRAILER_BYTES: usize = 4;

/// Bytes one entry takes in an encoded object (tag, length, body).
pub fn entry_encoded_len(entry: &WalEntry) -> usize {
    ENTRY_FRAME_BYTES + body_len(entry)
}

/// Bytes an append entry takes whose pages have these lengths (for callers
/// that size an entry before its pages are sealed).
pub fn append_entry_encoded_len(page_lens: impl Iterator<Item = usize>) -> usize {
    ENTRY_FRAME_BYTES + APPEND_FIXED_BYTES + page_lens.map(|len| 4 + len).sum::<usize>()
}

/// Tag u8 and body length u32 before every entry body.
const ENTRY_FRAME_BYTES: usize = 1 + 4;
/// An append body before its pages: stream, offsets, counts, timestamp, page count.
const APPEND_FIXED_BYTES: usize = 24 + 8 + 8 + 8 + 8 + 4;

fn body_len(entry: &WalEntry) -> usize {
    match entry {
        WalEntry::Create(c) => 24 + 8 + 16 + 16 + 2 + c.account.len(),
        WalEntry::Append(a) => {
            APPEND_FIXED_BYTES + a.pages.iter().map(|p| 4 + p.len()).sum::<usize>()
        }
        WalEntry::Producer(p) => 24 + 2 + p.producer_id.len() + 8 * 4 + 16,
        WalEntry::StreamSeq(s) => 24 + 2 + s.seq.len(),
        WalEntry::Close(_) => 24 + 8,
        WalEntry::Delete(_) => 24,
        WalEntry::Consumer(c) => 24 + 2 + c.name.len() + 4 + c.change.len(),
        WalEntry::Usage(_) => 24 + 8 * 3,
    }
}

/// A consumer entry's name and change must fit their limits.
fn check_consumer(name: &str, change_len: usize) -> Result<(), WalError> {
    if name.is_empty() || name.len() > CONSUMER_NAME_BYTES_MAX {
        return Err(WalError::Invalid {
            field: "consumer name",
            reason: "length must be 1..=128 bytes",
        });
    }
    if change_len > CONSUMER_CHANGE_BYTES_MAX {
        return Err(WalError::Invalid {
            field: "consumer change",
            reason: "longer than 4 MiB",
        });
    }
    Ok(())
}

fn put_stream(b: &mut BytesMut, s: &StreamRef) {
    b.put_slice(&s.id);
    b.put_u64_le(s.incarnation);
}

fn encode_entry(enc: &mut ChunkWriter, entry: &WalEntry) {
    let len = body_len(entry);
    let tag = match entry {
        WalEntry::Create(_) => TAG_CREATE,
        WalEntry::Append(_) => TAG_APPEND,
        WalEntry::Producer(_) => TAG_PRODUCER,
        WalEntry::StreamSeq(_) => TAG_STREAM_SEQ,
        WalEntry::Close(_) => TAG_CLOSE,
        WalEntry::Delete(_) => TAG_DELETE,
        WalEntry::Consumer(_) => TAG_CONSUMER,
        WalEntry::Usage(_) => TAG_USAGE,
    };
    enc.buf.put_u8(tag);
    enc.buf.put_u32_le(len as u32);
    match entry {
        WalEntry::Create(c) => {
            put_stream(&mut enc.buf, &c.stream);
            enc.buf.put_u64_le(c.created_ms);
            enc.buf.put_slice(&c.epoch);
            enc.buf.put_slice(&c.key_fingerprint);
            enc.buf.put_u16_le(c.account.len() as u16);
            enc.buf.put_slice(&c.account);
        }
        WalEntry::Append(a) => {
            let b = &mut enc.buf;
            put_stream(b, &a.stream);
            b.put_u64_le(a.first_offset);
            b.put_u64_le(a.record_count);
            b.put_u64_le(a.payload_bytes);
            b.put_u64_le(a.timestamp_ms);
            b.put_u32_le(a.pages.len() as u32);
            for page in &a.pages {
                enc.buf.put_u32_le(page.len() as u32);
                enc.put_page(page);
            }
        }
        WalEntry::Producer(p) => {
            let b = &mut enc.buf;
            put_stream(b, &p.stream);
            b.put_u16_le(p.producer_id.len() as u16);
            b.put_slice(p.producer_id.as_bytes());
            b.put_u64_le(p.epoch);
            b.put_u64_le(p.seq);
            b.put_u64_le(p.first_offset);
            b.put_u64_le(p.next_offset);
            b.put_slice(&p.digest);
        }
        WalEntry::StreamSeq(s) => {
            put_stream(&mut enc.buf, &s.stream);
            enc.buf.put_u16_le(s.seq.len() as u16);
            enc.buf.put_slice(&s.seq);
        }
        WalEntry::Close(c) => {
            put_stream(&mut enc.buf, &c.stream);
            enc.buf.put_u64_le(c.closed_ms);
        }
        WalEntry::Delete(d) => put_stream(&mut enc.buf, &d.stream),
        WalEntry::Consumer(c) => {
            let b = &mut enc.buf;
            put_stream(b, &c.stream);
            b.put_u16_le(c.name.len() as u16);
            b.put_slice(c.name.as_bytes());
            b.put_u32_le(c.change.len() as u32);
            b.put_slice(&c.change);
        }
        WalEntry::Usage(u) => {
            let b = &mut enc.buf;
            put_stream(b, &u.stream);
            b.put_u64_le(u.reads);
            b.put_u64_le(u.read_bytes);
            b.put_u64_le(u.last_read_ms);
        }
    }
}

/// Accumulates an object as chunks: small fields are copied into a buffer,
/// large pages are referenced. Computes the CRC over the chunks in order.
struct ChunkWriter {
    chunks: Vec<Bytes>,
    buf: BytesMut,
    len: usize,
    crc: u32,
}

impl ChunkWriter {
    fn new() -> Self {
        ChunkWriter {
            chunks: Vec::new(),
            buf: BytesMut::with_capacity(4096),
            len: 0,
            crc: 0,
        }
    }

    fn push_chunk(&mut self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        self.crc = crc32c::crc32c_append(self.crc, &chunk);
        self.len += chunk.len();
        self.chunks.push(chunk);
    }

    fn put_page(&mut self, page: &Bytes) {
        if page.len() >= PAGE_CHUNK_MIN_BYTES {
            let pending = self.buf.split().freeze();
            self.push_chunk(pending);
            self.push_chunk(page.clone());
        } else {
            self.buf.put_slice(page);
        }
    }

    fn finish(mut self) -> (Vec<Bytes>, usize) {
        let pending = self.buf.split().freeze();
        self.push_chunk(pending);
        let crc = self.crc;
        self.buf.put_u32_le(crc);
        let trailer = self.buf.split().freeze();
        self.len += trailer.len();
        self.chunks.push(trailer);
        (self.chunks, self.len)
    }
}

/// Reads only the header (after full validation of length, magic, version and
/// CRC). Cheaper than [`decode`] when only the writer is needed.
pub fn decode_header(bytes: &Bytes) -> Result<WalHeader, WalError> {
    let mut body = validated_body(bytes)?;
    read_header(&mut body)
}

/// Decodes and validates a WAL object.
pub fn decode(bytes: &Bytes) -> Result<WalObject, WalError> {
    let mut body = validated_body(bytes)?;
    let header = read_header(&mut body)?;
    let count = body.read_u32("entry count")? as usize;
    if count > ENTRIES_MAX {
        return Err(WalError::Invalid {
            field: "entry count",
            reason: "too many entries",
        });
    }
    if header.kind == ObjectKind::Fence && count != 0 {
        return Err(WalError::Invalid {
            field: "kind",
            reason: "a fence object carries no entries",
        });
    }
    // Every entry takes at least 5 bytes: bound the allocation by the input.
    let mut entries = Vec::with_capacity(count.min(body.len() / 5));
    for index in 0..count {
        let tag = body.read_u8("entry tag")?;
        let mut entry_body = body.read_prefixed_u32("entry length", "entry body")?;
        let declared = entry_body.len();
        let entry = decode_entry(tag, &mut entry_body)?;
        if !entry_body.is_empty() {
            return Err(WalError::EntryLength {
                index,
                declared,
                used: declared - entry_body.len(),
            });
        }
        entries.push(entry);
    }
    if !body.is_empty() {
        return Err(WalError::Invalid {
            field: "entries",
            reason: "trailing bytes after the last entry",
        });
    }
    Ok(WalObject { header, entries })
}

/// Checks length, magic, version and CRC; returns the bytes after the magic and
/// version and before the trailer.
fn validated_body(bytes: &Bytes) -> Result<Bytes, WalError> {
    let len = bytes.len();
    if len > OBJECT_BYTES_MAX {
        return Err(WalError::TooLarge { len });
    }
    if len < HEADER_FIXED_BYTES + 2 + 4 + TRAILER_BYTES {
        return Err(WalError::TooShort { len });
    }
    if bytes[..8] != MAGIC {
        return Err(WalError::BadMagic);
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != FORMAT_VERSION {
        return Err(WalError::UnsupportedVersion { found: version });
    }
    let crc_at = len - TRAILER_BYTES;
    let stored = u32::from_le_bytes([
        bytes[crc_at],
        bytes[crc_at + 1],
        bytes[crc_at + 2],
        bytes[crc_at + 3],
    ]);
    let computed = crc32c::crc32c(&bytes[..crc_at]);
    if stored != computed {
        return Err(WalError::CrcMismatch { stored, computed });
    }
    Ok(bytes.slice(10..crc_at))
}

fn read_header(body: &mut Bytes) -> Result<WalHeader, WalError> {
    let kind = ObjectKind::from_code(body.read_u8("kind")?)?;
    if body.read_u8("reserved")? != 0 {
        return Err(WalError::Invalid {
            field: "reserved",
            reason: "must be zero",
        });
    }
    let slot = body.read_u64("slot")?;
    let prev_slot = body.read_u64("previous slot")?;
    if prev_slot != NO_SLOT && prev_slot >= slot {
        return Err(WalError::Invalid {
            field: "previous slot",
            reason: "must precede the object's own slot",
        });
    }
    let epoch = body.read_u64("writer epoch")?;
    let instance = body.read_array("writer instance")?;
    let write_id = body.read_array("write id")?;
    let name_len = body.read_u16("shard name length")? as usize;
    if name_len == 0 || name_len > SHARD_NAME_BYTES_MAX {
        return Err(WalError::Invalid {
            field: "shard name",
            reason: "length must be 1..=64 bytes",
        });
    }
    let shard = body.read_utf8(name_len, "shard name")?;
    Ok(WalHeader {
        kind,
        slot,
        prev_slot,
        writer: WriterId {
            instance,
            epoch,
            write_id,
        },
        shard,
    })
}

fn decode_entry(tag: u8, b: &mut Bytes) -> Result<WalEntry, WalError> {
    Ok(match tag {
        TAG_CREATE => WalEntry::Create(CreateEntry {
            stream: get_stream(b)?,
            created_ms: b.read_u64("created_ms")?,
            epoch: b.read_array("stream epoch")?,
            key_fingerprint: b.read_array("key fingerprint")?,
            account: get_account(b)?,
        }),
        TAG_APPEND => {
            let stream = get_stream(b)?;
            let first_offset = b.read_u64("first offset")?;
            let record_count = b.read_u64("record count")?;
            let payload_bytes = b.read_u64("payload bytes")?;
            let timestamp_ms = b.read_u64("timestamp")?;
            let page_count = b.read_u32("page count")? as usize;
            if first_offset.checked_add(record_count).is_none() {
                return Err(WalError::Invalid {
                    field: "record count",
                    reason: "offset range overflows u64",
                });
            }
            let mut pages = Vec::with_capacity(page_count.min(b.len() / 4));
            for _ in 0..page_count {
                pages.push(b.read_prefixed_u32("page length", "page")?);
            }
            WalEntry::Append(AppendEntry {
                stream,
                first_offset,
                record_count,
                payload_bytes,
                timestamp_ms,
                pages,
            })
        }
        TAG_PRODUCER => {
            let stream = get_stream(b)?;
            let id_len = b.read_u16("producer id length")? as usize;
            if id_len > PRODUCER_ID_BYTES_MAX {
                return Err(WalError::Invalid {
                    field: "producer id",
                    reason: "longer than 256 bytes",
                });
            }
            WalEntry::Producer(ProducerEntry {
                stream,
                producer_id: b.read_utf8(id_len, "producer id")?,
                epoch: b.read_u64("producer epoch")?,
                seq: b.read_u64("producer seq")?,
                first_offset: b.read_u64("producer first offset")?,
                next_offset: b.read_u64("producer next offset")?,
                digest: b.read_array("producer digest")?,
            })
        }
        TAG_STREAM_SEQ => {
            let stream = get_stream(b)?;
            let len = b.read_u16("stream seq length")? as usize;
            if len > STREAM_SEQ_BYTES_MAX {
                return Err(WalError::Invalid {
                    field: "stream seq",
                    reason: "longer than 256 bytes",
                });
            }
            WalEntry::StreamSeq(StreamSeqEntry {
                stream,
                seq: b.read_bytes(len, "stream seq")?,
            })
        }
        TAG_CLOSE => WalEntry::Close(CloseEntry {
            stream: get_stream(b)?,
            closed_ms: b.read_u64("closed_ms")?,
        }),
        TAG_DELETE => WalEntry::Delete(DeleteEntry {
            stream: get_stream(b)?,
        }),
        TAG_CONSUMER => {
            let stream = get_stream(b)?;
            let name_len = b.read_u16("consumer name length")? as usize;
            if name_len == 0 || name_len > CONSUMER_NAME_BYTES_MAX {
                return Err(WalError::Invalid {
                    field: "consumer name",
                    reason: "length must be 1..=128 bytes",
                });
            }
            let name = b.read_utf8(name_len, "consumer name")?;
            let change_len = b.read_u32("consumer change length")? as usize;
            check_consumer(&name, change_len)?;
            WalEntry::Consumer(ConsumerEntry {
                stream,
                name,
                change: b.read_bytes(change_len, "consumer change")?,
            })
        }
        TAG_USAGE => WalEntry::Usage(UsageEntry {
            stream: get_stream(b)?,
            reads: b.read_u64("reads")?,
            read_bytes: b.read_u64("read bytes")?,
            last_read_ms: b.read_u64("last read ms")?,
        }),
        tag => return Err(WalError::UnknownTag { tag }),
    })
}

/// A Create entry's account: absent (the body ends: written before
/// accounts), or a length u16 and 0..=64 bytes.
fn get_account(b: &mut Bytes) -> Result<Bytes, WalError> {
    if b.is_empty() {
        return Ok(Bytes::new());
    }
    let len = b.read_u16("account length")? as usize;
    if len > ACCOUNT_BYTES_MAX {
        return Err(WalError::Invalid {
            field: "account",
            reason: "longer than 64 bytes",
        });
    }
    Ok(b.read_bytes(len, "account")?)
}

fn get_stream(b: &mut Bytes) -> Result<StreamRef, WalError> {
    Ok(StreamRef {
        id: b.read_array("stream id")?,
        incarnation: b.read_u64("incarnation")?,
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn encoded_lengths_add_up_to_the_encoding() {
        let object = sample();
        let predicted = header_encoded_len(object.header.shard.len())
            + object.entries.iter().map(entry_encoded_len).sum::<usize>()
            + OBJECT_TRAILER_BYTES;
        assert_eq!(predicted, encode(&object).unwrap().len);
        for entry in &object.entries {
            if let WalEntry::Append(a) = entry {
                assert_eq!(
                    append_entry_encoded_len(a.pages.iter().map(Bytes::len)),
                    entry_encoded_len(entry)
                );
            }
        }
    }

    use super::*;
    use proptest::prelude::*;

    fn writer() -> WriterId {
        WriterId {
            instance: [7; 16],
            epoch: 3,
            write_id: [9; 16],
        }
    }

    fn stream(n: u8) -> StreamRef {
        StreamRef {
            id: [n; 16],
            incarnation: n as u64 * 10,
        }
    }

    fn sample() -> WalObject {
        WalObject {
            header: WalHeader {
                kind: ObjectKind::Data,
                slot: 42,
                prev_slot: 40,
                writer: writer(),
                shard: "s0".into(),
            },
            entries: vec![
                WalEntry::Create(CreateEntry {
                    stream: stream(1),
                    created_ms: 5,
                    epoch: [6; 16],
                    key_fingerprint: [8; 16],
                    account: Bytes::from_static(b"project-a"),
                }),
                WalEntry::Append(AppendEntry {
                    stream: stream(1),
                    first_offset: 0,
                    record_count: 3,
                    payload_bytes: 11,
                    timestamp_ms: 77,
                    pages: vec![
                        Bytes::from_static(b"page-one"),
                        Bytes::from(vec![5u8; 40_000]),
                    ],
                }),
                WalEntry::Producer(ProducerEntry {
                    stream: stream(1),
                    producer_id: "p-1".into(),
                    epoch: 2,
                    seq: 9,
                    first_offset: 0,
                    next_offset: 3,
                    digest: [4; 16],
                }),
                WalEntry::StreamSeq(StreamSeqEntry {
                    stream: stream(1),
                    seq: Bytes::from_static(b"000123"),
                }),
                WalEntry::Close(CloseEntry {
                    stream: stream(1),
                    closed_ms: 99,
                }),
                WalEntry::Delete(DeleteEntry { stream: stream(2) }),
                WalEntry::Consumer(ConsumerEntry {
                    stream: stream(1),
                    name: "workers".into(),
                    change: Bytes::from_static(b"\x01change"),
                }),
                WalEntry::Usage(UsageEntry {
                    stream: stream(1),
                    reads: 3,
                    read_bytes: 4096,
                    last_read_ms: 123,
                }),
            ],
        }
    }

    /// A Create entry as written before accounts (its body ends after the
    /// key fingerprint) reads with no account; one whose account is longer
    /// than the limit is refused.
    #[test]
    fn a_create_without_an_account_reads_as_none() {
        let create = CreateEntry {
            stream: stream(1),
            created_ms: 5,
            epoch: [6; 16],
            key_fingerprint: [8; 16],
            account: Bytes::new(),
        };
        let object = WalObject {
            header: sample().header,
            entries: vec![WalEntry::Create(create.clone())],
        };
        let mut v = encode(&object).unwrap().to_bytes().to_vec();
        let at = header_encoded_len(object.header.shard.len());
        assert_eq!(v[at], TAG_CREATE);
        let body_len = u32::from_le_bytes(v[at + 1..at + 5].try_into().unwrap());
        // Drop the account length (two zero bytes) at the body's end.
        let end = at + 5 + body_len as usize;
        assert_eq!(&v[end - 2..end], &[0, 0]);
        v.drain(end - 2..end);
        v[at + 1..at + 5].copy_from_slice(&(body_len - 2).to_le_bytes());
        assert_eq!(decode(&with_valid_crc(v)).unwrap(), object);

        let mut long = create;
        long.account = Bytes::from(vec![b'a'; ACCOUNT_BYTES_MAX + 1]);
        let object = WalObject {
            header: sample().header,
            entries: vec![WalEntry::Create(long)],
        };
        assert!(encode(&object).is_err());
    }

    #[test]
    fn round_trip_every_entry_kind() {
        let object = sample();
        let encoded = encode(&object).unwrap();
        assert!(encoded.chunks.len() > 1, "the large page is its own chunk");
        let bytes = encoded.to_bytes();
        assert_eq!(bytes.len(), encoded.len);
        assert_eq!(decode(&bytes).unwrap(), object);
        assert_eq!(decode_header(&bytes).unwrap(), object.header);
    }

    #[test]
    fn fence_round_trip_and_fence_with_entries_rejected() {
        let fence = WalObject::fence(8, NO_SLOT, writer(), "s0".into());
        let bytes = encode(&fence).unwrap().to_bytes();
        assert_eq!(decode(&bytes).unwrap(), fence);
        let mut bad = sample();
        bad.header.kind = ObjectKind::Fence;
        assert!(encode(&bad).is_err());
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = encode(&sample()).unwrap().to_bytes();
        for len in 0..bytes.len() {
            assert!(
                decode(&bytes.slice(..len)).is_err(),
                "prefix of {len} bytes"
            );
        }
    }

    #[test]
    fn every_single_bit_flip_is_an_error() {
        let mut small = sample();
        if let WalEntry::Append(a) = &mut small.entries[1] {
            a.pages.truncate(1);
        }
        let bytes = encode(&small).unwrap().to_bytes();
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut v = bytes.to_vec();
                v[i] ^= 1 << bit;
                assert!(decode(&Bytes::from(v)).is_err(), "flip byte {i} bit {bit}");
            }
        }
    }

    #[test]
    fn wrong_version_and_magic_rejected() {
        let mut v = encode(&sample()).unwrap().to_bytes().to_vec();
        v[8] = 2;
        assert_eq!(
            decode(&Bytes::from(v.clone())),
            Err(WalError::UnsupportedVersion { found: 2 })
        );
        v[0] = b'X';
        assert_eq!(decode(&Bytes::from(v)), Err(WalError::BadMagic));
    }

    #[test]
    fn oversized_input_rejected_without_reading_it() {
        let big = Bytes::from(vec![0u8; OBJECT_BYTES_MAX + 1]);
        assert!(matches!(decode(&big), Err(WalError::TooLarge { .. })));
    }

    /// Re-seals a hand-edited body with a valid CRC, to reach the field checks.
    fn with_valid_crc(mut v: Vec<u8>) -> Bytes {
        let n = v.len() - 4;
        let crc = crc32c::crc32c(&v[..n]);
        v[n..].copy_from_slice(&crc.to_le_bytes());
        Bytes::from(v)
    }

    #[test]
    fn lying_lengths_with_valid_crc_are_errors() {
        let object = WalObject {
            header: sample().header,
            entries: vec![WalEntry::Delete(DeleteEntry { stream: stream(2) })],
        };
        let v = encode(&object).unwrap().to_bytes().to_vec();
        let header_len = HEADER_FIXED_BYTES + 2 + 2;
        // Entry count larger than present.
        let mut more = v.clone();
        more[header_len..header_len + 4].copy_from_slice(&5u32.to_le_bytes());
        assert!(decode(&with_valid_crc(more)).is_err());
        // Entry body length larger than the object.
        let mut long = v.clone();
        let len_at = header_len + 4 + 1;
        long[len_at..len_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&with_valid_crc(long)).is_err());
        // Unknown tag.
        let mut tag = v.clone();
        tag[header_len + 4] = 200;
        assert_eq!(
            decode(&with_valid_crc(tag)),
            Err(WalError::UnknownTag { tag: 200 })
        );
    }

    fn arb_stream() -> impl Strategy<Value = StreamRef> {
        (any::<[u8; 16]>(), any::<u64>())
            .prop_map(|(id, incarnation)| StreamRef { id, incarnation })
    }

    fn arb_entry() -> impl Strategy<Value = WalEntry> {
        prop_oneof![
            (
                arb_stream(),
                "[a-z0-9:.-]{1,128}",
                proptest::collection::vec(any::<u8>(), 0..64)
            )
                .prop_map(|(stream, name, change)| {
                    WalEntry::Consumer(ConsumerEntry {
                        stream,
                        name,
                        change: Bytes::from(change),
                    })
                }),
            (arb_stream(), any::<u64>(), any::<[u8; 16]>()).prop_map(
                |(stream, created_ms, epoch)| WalEntry::Create(CreateEntry {
                    stream,
                    created_ms,
                    epoch,
                    key_fingerprint: epoch,
                    account: Bytes::copy_from_slice(&epoch[..(created_ms % 17) as usize]),
                })
            ),
            (
                arb_stream(),
                0u64..1 << 40,
                0u64..1 << 20,
                any::<u64>(),
                any::<u64>(),
                proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..4)
            )
                .prop_map(
                    |(stream, first_offset, record_count, payload_bytes, timestamp_ms, pages)| {
                        WalEntry::Append(AppendEntry {
                            stream,
                            first_offset,
                            record_count,
                            payload_bytes,
                            timestamp_ms,
                            pages: pages.into_iter().map(Bytes::from).collect(),
                        })
                    }
                ),
            (
                arb_stream(),
                "[a-z0-9-]{0,40}",
                any::<u64>(),
                any::<u64>(),
                any::<[u8; 16]>()
            )
                .prop_map(|(stream, producer_id, epoch, seq, digest)| {
                    WalEntry::Producer(ProducerEntry {
                        stream,
                        producer_id,
                        epoch,
                        seq,
                        first_offset: seq,
                        next_offset: seq.saturating_add(1),
                        digest,
                    })
                }),
            (arb_stream(), proptest::collection::vec(any::<u8>(), 0..40)).prop_map(
                |(stream, seq)| {
                    WalEntry::StreamSeq(StreamSeqEntry {
                        stream,
                        seq: Bytes::from(seq),
                    })
                }
            ),
            (arb_stream(), any::<u64>())
                .prop_map(|(stream, closed_ms)| WalEntry::Close(CloseEntry { stream, closed_ms })),
            arb_stream().prop_map(|stream| WalEntry::Delete(DeleteEntry { stream })),
            (arb_stream(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
                |(stream, reads, read_bytes, last_read_ms)| WalEntry::Usage(UsageEntry {
                    stream,
                    reads,
                    read_bytes,
                    last_read_ms,
                })
            ),
        ]
    }

    proptest! {
        #[test]
        fn any_object_round_trips(
            slot in any::<u64>(),
            epoch in any::<u64>(),
            shard in "[a-z0-9]{1,64}",
            entries in proptest::collection::vec(arb_entry(), 0..8),
        ) {
            let object = WalObject {
                header: WalHeader {
                    kind: ObjectKind::Data,
                    slot,
                    prev_slot: slot.checked_sub(1).unwrap_or(NO_SLOT),
                    writer: WriterId { instance: [1; 16], epoch, write_id: [2; 16] },
                    shard,
                },
                entries,
            };
            let bytes = encode(&object).unwrap().to_bytes();
            prop_assert_eq!(decode(&bytes).unwrap(), object);
        }

        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(&Bytes::from(data));
        }

        #[test]
        fn arbitrary_bodies_with_valid_frame_never_panic(
            body in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let mut v = MAGIC.to_vec();
            v.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
            v.extend_from_slice(&body);
            v.extend_from_slice(&[0; 4]);
            let _ = decode(&with_valid_crc(v));
        }
    }
}
