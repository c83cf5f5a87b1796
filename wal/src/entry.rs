//! The entries of a WAL object: one change to a shard's state each (their
//! byte layout is `format`'s; docs/FORMATS.md, "WAL objects").

use bytes::Bytes;

/// A stream incarnation: the 16-byte stream id and the incarnation number the
/// registry minted when this incarnation was created.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamRef {
    pub id: [u8; 16],
    pub incarnation: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateEntry {
    pub stream: StreamRef,
    pub created_ms: u64,
    /// The incarnation's random stream epoch (HKDF salt of its keys).
    pub epoch: [u8; 16],
    /// Fingerprint of the stream key (never the key itself).
    pub key_fingerprint: [u8; 16],
    /// Whom the stream's usage is counted for (the server's project), 0..=64
    /// bytes; empty: nobody. Create entries written before accounts were
    /// recorded end after the key fingerprint and read as empty.
    pub account: Bytes,
}

/// Records `first_offset .. first_offset + record_count` of a stream, as pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendEntry {
    pub stream: StreamRef,
    pub first_offset: u64,
    pub record_count: u64,
    /// Sum of the records' payload lengths (the stream's logical size grows by it).
    pub payload_bytes: u64,
    pub timestamp_ms: u64,
    /// Opaque page bytes (format owned by the `segments` crate).
    pub pages: Vec<Bytes>,
}

/// The state of an idempotent producer after an accepted append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    pub stream: StreamRef,
    pub producer_id: String,
    pub epoch: u64,
    pub seq: u64,
    /// Offsets the accepted append was given (answered again to a duplicate).
    pub first_offset: u64,
    pub next_offset: u64,
    /// Digest of the accepted request's content (recognises a reused sequence).
    pub digest: [u8; 16],
}

/// The last accepted `Stream-Seq` value of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSeqEntry {
    pub stream: StreamRef,
    pub seq: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseEntry {
    pub stream: StreamRef,
    pub closed_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteEntry {
    pub stream: StreamRef,
}

/// A change to one consumer group of a stream. The change body is opaque
/// here: its format belongs to the engine (docs/FORMATS.md, "Consumer
/// changes").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerEntry {
    pub stream: StreamRef,
    /// 1..=128 bytes of UTF-8.
    pub name: String,
    pub change: Bytes,
}

/// Reads of a stream since the previous usage entry, and when the last of
/// them was (usage accounting and the idle clock of streams that expire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageEntry {
    pub stream: StreamRef,
    pub reads: u64,
    pub read_bytes: u64,
    pub last_read_ms: u64,
}

/// One change to a shard's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalEntry {
    Create(CreateEntry),
    Append(AppendEntry),
    Producer(ProducerEntry),
    StreamSeq(StreamSeqEntry),
    Close(CloseEntry),
    Delete(DeleteEntry),
    Consumer(ConsumerEntry),
    Usage(UsageEntry),
}
