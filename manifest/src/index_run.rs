//! Index runs (format version 3; versions 1 and 2 are still read): immutable
//! objects holding a shard's sealed state, sorted by stream. `docs/FORMATS.md`
//! ("Index runs") is the prose twin.
//!
//! A run is written by a seal (or by merging runs) and listed by the manifest.
//! Each entry names a stream incarnation, its tail state after the run, and the
//! chunks sealed into segments by that run. Reading the runs a manifest lists
//! from oldest to newest, a newer entry's tail *shadows* an older one's, and
//! chunks *accumulate* (a newer incarnation starts over).
//!
//! ```text
//! magic "STRATAIX" · version u16 · reserved u16
//! run id u64 · chain end u64 (the last WAL slot whose effects the run holds)
//! entry count u32
//! entries, sorted by stream id, each stream once:
//!   stream id [16] · incarnation u64 · tail · chunk count u32 ·
//!   chunks × (length u32 · chunk reference bytes, opaque here) ·
//!   consumers length u32 · consumer table bytes (opaque here; version 2 only,
//!   absent in version 1, where it reads as empty)
//! tail:
//!   status u8 (0 open, 1 closed, 2 deleted) · next offset u64 · payload bytes u64
//!   created ms u64 · closed ms u64 · last append ms u64 (u64::MAX: none)
//!   stream epoch [16] · key fingerprint [16]
//!   stream seq: present u8 · length u16 · bytes
//!   producer count u32 · producers × (id length u16 · id · epoch u64 · seq u64 ·
//!                                     first offset u64 · next offset u64 · digest [16])
//!   usage (version 3 only; older runs read as none):
//!     account length u16 · account (0..=64 bytes) · reads u64 · read bytes u64 ·
//!     last read ms u64 (u64::MAX: none)
//! CRC-32C of every preceding byte, u32
//! ```

use bytes::{BufMut, Bytes, BytesMut};
use strata_codec::{ReadBytes, ReadError};

pub const MAGIC: [u8; 8] = *b"STRATAIX";
pub const FORMAT_VERSION: u16 = 3;
/// The oldest version the decoder still reads (no consumer tables, no usage).
pub const FORMAT_VERSION_V1: u16 = 1;
/// The version before usage (consumer tables, no usage).
pub const FORMAT_VERSION_V2: u16 = 2;
/// Longest account name.
pub const ACCOUNT_BYTES_MAX: usize = 64;
/// Largest consumer table of one stream in a run.
pub const CONSUMERS_BYTES_MAX: usize = 256 << 20;
pub const RUN_BYTES_MAX: usize = 1 << 30;
const NONE_MS: u64 = u64::MAX;
const ID_BYTES_MAX: usize = 256;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexRunError {
    #[error("index run too short: {len} bytes")]
    TooShort { len: usize },
    #[error("index run too large: {len} bytes")]
    TooLarge { len: usize },
    #[error("bad index run magic")]
    BadMagic,
    #[error("unsupported index run version {found}")]
    UnsupportedVersion { found: u16 },
    #[error("index run CRC mismatch")]
    CrcMismatch,
    #[error("index run truncated while reading {field}")]
    Truncated { field: &'static str },
    #[error("index run field {field} is invalid: {reason}")]
    Invalid {
        field: &'static str,
        reason: &'static str,
    },
}

impl From<ReadError> for IndexRunError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Truncated { field } => IndexRunError::Truncated { field },
            ReadError::NotUtf8 { field } => IndexRunError::Invalid {
                field,
                reason: "not UTF-8",
            },
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailStatus {
    Open,
    Closed,
    Deleted,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerRecord {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
    pub first_offset: u64,
    pub next_offset: u64,
    pub digest: [u8; 16],
}

/// A stream's tail state as a run records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TailRecord {
    pub status: TailStatus,
    pub next_offset: u64,
    pub payload_bytes: u64,
    pub created_ms: u64,
    pub closed_ms: Option<u64>,
    pub last_append_ms: Option<u64>,
    pub epoch: [u8; 16],
    pub key_fingerprint: [u8; 16],
    pub stream_seq: Option<Bytes>,
    pub producers: Vec<ProducerRecord>,
    pub usage: UsageRecord,
}

/// Whom a stream is counted for and how much it was read (version 3; runs
/// of older versions read as the default: no account, no reads).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageRecord {
    pub account: Bytes,
    pub reads: u64,
    pub read_bytes: u64,
    pub last_read_ms: Option<u64>,
}

/// One stream incarnation in a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEntry {
    pub stream_id: [u8; 16],
    pub incarnation: u64,
    pub tail: TailRecord,
    /// Chunk references sealed by this run (encoded by the segments format).
    pub chunks: Vec<Bytes>,
    /// The stream's consumer groups after the run (the engine's encoding;
    /// empty: none). Shadows older runs' like the tail does.
    pub consumers: Bytes,
}

/// An index run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexRun {
    pub id: u64,
    pub chain_end: u64,
    /// Sorted by stream id, each stream once.
    pub entries: Vec<RunEntry>,
}

fn check(run: &IndexRun) -> Result<(), IndexRunError> {
    if run
        .entries
        .windows(2)
        .any(|w| w[0].stream_id >= w[1].stream_id)
    {
        return Err(IndexRunError::Invalid {
            field: "entries",
            reason: "must be sorted by stream id, each stream once",
        });
    }
    for e in &run.entries {
        if e.consumers.len() > CONSUMERS_BYTES_MAX {
            return Err(IndexRunError::Invalid {
                field: "consumers",
                reason: "larger than 256 MiB",
            });
        }
        if e.tail.usage.account.len() > ACCOUNT_BYTES_MAX {
            return Err(IndexRunError::Invalid {
                field: "account",
                reason: "longer than 64 bytes",
            });
        }
        if e.tail.producers.iter().any(|p| p.id.len() > ID_BYTES_MAX)
            || e.tail
                .stream_seq
                .as_ref()
                .is_some_and(|s| s.len() > ID_BYTES_MAX)
        {
            return Err(IndexRunError::Invalid {
                field: "tail",
                reason: "producer ids and stream seqs are at most 256 bytes",
            });
        }
    }
    Ok(())
}

fn put_opt_ms(b: &mut BytesMut, v: Option<u64>) {
    b.put_u64_le(v.unwrap_or(NONE_MS));
}

pub fn encode(run: &IndexRun) -> Result<Bytes, IndexRunError> {
    check(run)?;
    let mut b = BytesMut::new();
    b.put_slice(&MAGIC);
    b.put_u16_le(FORMAT_VERSION);
    b.put_u16_le(0);
    b.put_u64_le(run.id);
    b.put_u64_le(run.chain_end);
    b.put_u32_le(run.entries.len() as u32);
    for e in &run.entries {
        b.put_slice(&e.stream_id);
        b.put_u64_le(e.incarnation);
        let t = &e.tail;
        b.put_u8(match t.status {
            TailStatus::Open => 0,
            TailStatus::Closed => 1,
            TailStatus::Deleted => 2,
        });
        b.put_u64_le(t.next_offset);
        b.put_u64_le(t.payload_bytes);
        b.put_u64_le(t.created_ms);
        put_opt_ms(&mut b, t.closed_ms);
        put_opt_ms(&mut b, t.last_append_ms);
        b.put_slice(&t.epoch);
        b.put_slice(&t.key_fingerprint);
        match &t.stream_seq {
            Some(seq) => {
                b.put_u8(1);
                b.put_u16_le(seq.len() as u16);
                b.put_slice(seq);
            }
            None => {
                b.put_u8(0);
                b.put_u16_le(0);
            }
        }
        b.put_u32_le(t.producers.len() as u32);
        for p in &t.producers {
            b.put_u16_le(p.id.len() as u16);
            b.put_slice(p.id.as_bytes());
            b.put_u64_le(p.epoch);
            b.put_u64_le(p.seq);
            b.put_u64_le(p.first_offset);
            b.put_u64_le(p.next_offset);
            b.put_slice(&p.digest);
        }
        let u = &t.usage;
        b.put_u16_le(u.account.len() as u16);
        b.put_slice(&u.account);
        b.put_u64_le(u.reads);
        b.put_u64_le(u.read_bytes);
        put_opt_ms(&mut b, u.last_read_ms);
        b.put_u32_le(e.chunks.len() as u32);
        for c in &e.chunks {
            b.put_u32_le(c.len() as u32);
            b.put_slice(c);
        }
        b.put_u32_le(e.consumers.len() as u32);
        b.put_slice(&e.consumers);
    }
    let crc = crc32c::crc32c(&b);
    b.put_u32_le(crc);
    if b.len() > RUN_BYTES_MAX {
        return Err(IndexRunError::TooLarge { len: b.len() });
    }
    Ok(b.freeze())
}

pub fn decode(bytes: &Bytes) -> Result<IndexRun, IndexRunError> {
    let len = bytes.len();
    if len > RUN_BYTES_MAX {
        return Err(IndexRunError::TooLarge { len });
    }
    if len < 8 + 2 + 2 + 8 + 8 + 4 + 4 {
        return Err(IndexRunError::TooShort { len });
    }
    if bytes[..8] != MAGIC {
        return Err(IndexRunError::BadMagic);
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if !(FORMAT_VERSION_V1..=FORMAT_VERSION).contains(&version) {
        return Err(IndexRunError::UnsupportedVersion { found: version });
    }
    let crc_at = len - 4;
    if crc32c::crc32c(&bytes[..crc_at])
        != u32::from_le_bytes(bytes[crc_at..].try_into().expect("4 bytes"))
    {
        return Err(IndexRunError::CrcMismatch);
    }
    let mut b = bytes.slice(10..crc_at);
    if b.read_u16("reserved")? != 0 {
        return Err(IndexRunError::Invalid {
            field: "reserved",
            reason: "must be zero",
        });
    }
    let id = b.read_u64("run id")?;
    let chain_end = b.read_u64("chain end")?;
    let count = b.read_u32("entry count")? as usize;
    let mut entries = Vec::with_capacity(count.min(b.len() / 64));
    for _ in 0..count {
        let stream_id = b.read_array("stream id")?;
        let incarnation = b.read_u64("incarnation")?;
        let status = match b.read_u8("status")? {
            0 => TailStatus::Open,
            1 => TailStatus::Closed,
            2 => TailStatus::Deleted,
            _ => {
                return Err(IndexRunError::Invalid {
                    field: "status",
                    reason: "not 0, 1 or 2",
                })
            }
        };
        let next_offset = b.read_u64("next offset")?;
        let payload_bytes = b.read_u64("payload bytes")?;
        let created_ms = b.read_u64("created ms")?;
        let closed_ms = Some(b.read_u64("closed ms")?).filter(|v| *v != NONE_MS);
        let last_append_ms = Some(b.read_u64("last append ms")?).filter(|v| *v != NONE_MS);
        let epoch = b.read_array("epoch")?;
        let key_fingerprint = b.read_array("key fingerprint")?;
        let has_seq = b.read_u8("stream seq flag")?;
        let seq_len = b.read_u16("stream seq length")? as usize;
        let stream_seq = match has_seq {
            0 if seq_len == 0 => None,
            1 if seq_len <= ID_BYTES_MAX => Some(b.read_bytes(seq_len, "stream seq")?),
            _ => {
                return Err(IndexRunError::Invalid {
                    field: "stream seq",
                    reason: "bad flag or length",
                })
            }
        };
        let producer_count = b.read_u32("producer count")? as usize;
        b.ensure_items(producer_count, 2 + 32 + 16, "producers")?;
        let mut producers = Vec::with_capacity(producer_count);
        for _ in 0..producer_count {
            let id_len = b.read_u16("producer id length")? as usize;
            if id_len > ID_BYTES_MAX {
                return Err(IndexRunError::Invalid {
                    field: "producer id",
                    reason: "longer than 256 bytes",
                });
            }
            let id = b.read_utf8(id_len, "producer id")?;
            producers.push(ProducerRecord {
                id,
                epoch: b.read_u64("producer epoch")?,
                seq: b.read_u64("producer seq")?,
                first_offset: b.read_u64("producer first offset")?,
                next_offset: b.read_u64("producer next offset")?,
                digest: b.read_array("producer digest")?,
            });
        }
        let usage = if version >= FORMAT_VERSION {
            get_usage(&mut b)?
        } else {
            UsageRecord::default()
        };
        let chunk_count = b.read_u32("chunk count")? as usize;
        b.ensure_items(chunk_count, 4, "chunks")?;
        let mut chunks = Vec::with_capacity(chunk_count);
        for _ in 0..chunk_count {
            chunks.push(b.read_prefixed_u32("chunk length", "chunk")?);
        }
        let consumers = if version == FORMAT_VERSION_V1 {
            Bytes::new()
        } else {
            b.read_prefixed_u32("consumers length", "consumers")?
        };
        entries.push(RunEntry {
            stream_id,
            incarnation,
            tail: TailRecord {
                status,
                next_offset,
                payload_bytes,
                created_ms,
                closed_ms,
                last_append_ms,
                epoch,
                key_fingerprint,
                stream_seq,
                producers,
                usage,
            },
            chunks,
            consumers,
        });
    }
    if !b.is_empty() {
        return Err(IndexRunError::Invalid {
            field: "entries",
            reason: "trailing bytes after the last entry",
        });
    }
    let run = IndexRun {
        id,
        chain_end,
        entries,
    };
    check(&run)?;
    Ok(run)
}

fn get_usage(b: &mut Bytes) -> Result<UsageRecord, IndexRunError> {
    let account_len = b.read_u16("account length")? as usize;
    if account_len > ACCOUNT_BYTES_MAX {
        return Err(IndexRunError::Invalid {
            field: "account",
            reason: "longer than 64 bytes",
        });
    }
    Ok(UsageRecord {
        account: b.read_bytes(account_len, "account")?,
        reads: b.read_u64("reads")?,
        read_bytes: b.read_u64("read bytes")?,
        last_read_ms: Some(b.read_u64("last read ms")?).filter(|v| *v != NONE_MS),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn tail(next: u64) -> TailRecord {
        TailRecord {
            status: TailStatus::Closed,
            next_offset: next,
            payload_bytes: 99,
            created_ms: 1,
            closed_ms: Some(5),
            last_append_ms: None,
            epoch: [3; 16],
            key_fingerprint: [4; 16],
            stream_seq: Some(Bytes::from_static(b"007")),
            producers: vec![ProducerRecord {
                id: "p".into(),
                epoch: 1,
                seq: 2,
                first_offset: 3,
                next_offset: 4,
                digest: [5; 16],
            }],
            usage: UsageRecord {
                account: Bytes::from_static(b"project-a"),
                reads: 12,
                read_bytes: 3400,
                last_read_ms: Some(77),
            },
        }
    }

    fn sample() -> IndexRun {
        IndexRun {
            id: 7,
            chain_end: 41,
            entries: vec![
                RunEntry {
                    stream_id: [1; 16],
                    incarnation: 2,
                    tail: tail(10),
                    chunks: vec![Bytes::from_static(b"chunk-ref-1"), Bytes::from_static(b"2")],
                    consumers: Bytes::from_static(b"consumer-table"),
                },
                RunEntry {
                    stream_id: [9; 16],
                    incarnation: 1,
                    tail: TailRecord {
                        status: TailStatus::Open,
                        stream_seq: None,
                        producers: vec![],
                        ..tail(0)
                    },
                    chunks: vec![],
                    consumers: Bytes::new(),
                },
            ],
        }
    }

    #[test]
    fn round_trip() {
        let run = sample();
        assert_eq!(decode(&encode(&run).unwrap()).unwrap(), run);
    }

    /// `run` (one entry, no usage, no consumers) encoded as `version`: the
    /// current encoding without the usage block (version 2), and without the
    /// last field, the consumers length (version 1).
    fn encoded_as(run: &IndexRun, version: u16) -> Bytes {
        let current = encode(run).unwrap();
        let mut usage = vec![0u8; 2 + 8 + 8];
        usage.extend_from_slice(&NONE_MS.to_le_bytes());
        let at = current
            .windows(usage.len())
            .position(|w| w == usage.as_slice())
            .expect("the empty usage block");
        let mut old = Vec::from(&current[..at]);
        old.extend_from_slice(&current[at + usage.len()..current.len() - 4]);
        if version == FORMAT_VERSION_V1 {
            old.truncate(old.len() - 4);
        }
        old[8..10].copy_from_slice(&version.to_le_bytes());
        let crc = crc32c::crc32c(&old);
        old.extend_from_slice(&crc.to_le_bytes());
        Bytes::from(old)
    }

    #[test]
    fn older_versions_read_with_no_usage_and_version_1_with_no_consumers() {
        let mut run = sample();
        run.entries.truncate(1);
        run.entries[0].tail.usage = UsageRecord::default();
        let v2 = encoded_as(&run, FORMAT_VERSION_V2);
        assert_eq!(decode(&v2).unwrap(), run);
        run.entries[0].consumers = Bytes::new();
        let v1 = encoded_as(&run, FORMAT_VERSION_V1);
        assert_eq!(decode(&v1).unwrap(), run);
    }

    #[test]
    fn unsorted_entries_are_refused_both_ways() {
        let mut run = sample();
        run.entries.reverse();
        assert!(encode(&run).is_err());
    }

    #[test]
    fn truncations_and_flips_are_errors() {
        let bytes = encode(&sample()).unwrap();
        for len in 0..bytes.len() {
            assert!(decode(&bytes.slice(..len)).is_err());
        }
        for i in 0..bytes.len() {
            let mut v = bytes.to_vec();
            v[i] ^= 0x20;
            assert!(decode(&Bytes::from(v)).is_err(), "byte {i}");
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&Bytes::from(data));
        }
    }
}
