//! Stream state and the one function that changes it.
//!
//! Replay and the live acker apply WAL entries with the same code
//! ([`StreamTable::apply`]), and the committer validates requests against a
//! staged copy of the same [`Tail`]s, so the state a recovery rebuilds is by
//! construction the state the live owner published.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use strata_manifest::index_run::UsageRecord;
use strata_segments::parse_header;
use strata_wal::{AppendEntry, CreateEntry, StreamRef, WalEntry};

use super::chunk::SealedChunk;
use crate::consumer::durable::{ConsumerChange, ConsumerTable};

/// Lifecycle of a stream incarnation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamStatus {
    Open,
    Closed,
    Deleted,
}

/// What a shard remembers about an idempotent producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerState {
    pub epoch: u64,
    pub seq: u64,
    /// Offsets given to the last accepted append.
    pub first_offset: u64,
    pub next_offset: u64,
    pub digest: [u8; 16],
}

/// The tail state of one stream incarnation (no record data).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub stream: StreamRef,
    /// The incarnation's stream epoch and key fingerprint (from its Create).
    pub epoch: [u8; 16],
    pub key_fingerprint: [u8; 16],
    pub status: StreamStatus,
    pub next_offset: u64,
    /// Sum of payload bytes ever appended (the logical size).
    pub payload_bytes: u64,
    pub created_ms: u64,
    pub closed_ms: Option<u64>,
    pub last_append_ms: Option<u64>,
    pub stream_seq: Option<Bytes>,
    pub producers: BTreeMap<String, ProducerState>,
    /// Whom the stream is counted for (from its Create) and its reads so far
    /// (from Usage entries).
    pub usage: UsageRecord,
}

impl Tail {
    pub fn new(create: &CreateEntry) -> Self {
        Tail {
            stream: create.stream,
            epoch: create.epoch,
            key_fingerprint: create.key_fingerprint,
            status: StreamStatus::Open,
            next_offset: 0,
            payload_bytes: 0,
            created_ms: create.created_ms,
            closed_ms: None,
            last_append_ms: None,
            stream_seq: None,
            producers: BTreeMap::new(),
            usage: UsageRecord {
                account: create.account.clone(),
                ..UsageRecord::default()
            },
        }
    }

    /// When the stream was last written or read, as far as the shard knows
    /// (reads are known as of the last usage entry): the idle clock of a
    /// stream that expires.
    pub fn last_access_ms(&self) -> u64 {
        [
            Some(self.created_ms),
            self.last_append_ms,
            self.closed_ms,
            self.usage.last_read_ms,
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(self.created_ms)
    }

    /// True when this tail is the live incarnation `stream`.
    pub fn is_live(&self, stream: &StreamRef) -> bool {
        self.stream == *stream && self.status != StreamStatus::Deleted
    }
}

/// A durable page held in memory, indexed by its offsets.
#[derive(Debug, Clone)]
pub struct StoredPage {
    pub first_offset: u64,
    pub record_count: u32,
    pub routing_key: Bytes,
    pub bytes: Bytes,
}

impl DurableStream {
    /// Bytes the stream holds in the store: sealed chunks and unsealed pages.
    pub fn stored_bytes(&self) -> u64 {
        let sealed: u64 = self.sealed.iter().map(|c| c.chunk.length).sum();
        sealed + self.page_bytes
    }
}

impl StoredPage {
    pub fn end_offset(&self) -> u64 {
        self.first_offset + self.record_count as u64
    }
}

/// Why an entry cannot be applied: the log contradicts itself (a bug or damage,
/// never a client error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("entry for unknown stream incarnation {incarnation}")]
    UnknownStream { incarnation: u64 },
    #[error("stream incarnation {found} is not the live one ({live})")]
    WrongIncarnation { found: u64, live: u64 },
    #[error("append at offset {found} but the stream's tail is {expected}")]
    OffsetMismatch { expected: u64, found: u64 },
    #[error("append to a stream that is not open")]
    NotOpen,
    #[error("page inside an append entry is invalid: {reason}")]
    BadPage { reason: String },
    #[error("consumer change is invalid: {reason}")]
    BadConsumerChange { reason: String },
}

/// A stream's durable state: its tail, its sealed chunks (in segment objects),
/// and the pages not yet sealed (in memory and in WAL objects). Sealed chunks
/// and unsealed pages tile the offsets `0..tail.next_offset` without a gap.
#[derive(Debug, Clone)]
pub struct DurableStream {
    pub tail: Tail,
    pub sealed: Vec<SealedChunk>,
    pub pages: Vec<StoredPage>,
    pub page_bytes: u64,
    /// The stream's consumer groups (see `consumer::durable`).
    pub consumers: ConsumerTable,
}

impl DurableStream {
    pub fn empty(tail: Tail) -> Self {
        DurableStream {
            tail,
            sealed: Vec::new(),
            pages: Vec::new(),
            page_bytes: 0,
            consumers: ConsumerTable::default(),
        }
    }

    /// The first offset held in memory (the end of the sealed tier).
    pub fn unsealed_from(&self) -> u64 {
        self.pages
            .first()
            .map_or(self.tail.next_offset, |p| p.first_offset)
    }
}

/// Parses the clear headers of an append entry's pages and checks that they
/// tile `first_offset .. first_offset + record_count` exactly.
pub fn index_pages(
    first_offset: u64,
    record_count: u64,
    pages: &[Bytes],
) -> Result<Vec<StoredPage>, ApplyError> {
    let mut expected = first_offset;
    let mut out = Vec::with_capacity(pages.len());
    for page in pages {
        let header = parse_header(page).map_err(|e| ApplyError::BadPage {
            reason: e.to_string(),
        })?;
        if header.first_offset != expected {
            return Err(ApplyError::BadPage {
                reason: format!(
                    "page starts at {} where {expected} was expected",
                    header.first_offset
                ),
            });
        }
        expected = header.end_offset();
        out.push(StoredPage {
            first_offset: header.first_offset,
            record_count: header.record_count,
            routing_key: header.routing_key,
            bytes: page.clone(),
        });
    }
    if expected != first_offset + record_count {
        return Err(ApplyError::BadPage {
            reason: format!(
                "pages cover {first_offset}..{expected}, the entry declares {record_count} records"
            ),
        });
    }
    Ok(out)
}

/// The stream an entry is about.
pub fn entry_stream(entry: &WalEntry) -> StreamRef {
    match entry {
        WalEntry::Create(e) => e.stream,
        WalEntry::Append(e) => e.stream,
        WalEntry::Producer(e) => e.stream,
        WalEntry::StreamSeq(e) => e.stream,
        WalEntry::Close(e) => e.stream,
        WalEntry::Delete(e) => e.stream,
        WalEntry::Consumer(e) => e.stream,
        WalEntry::Usage(e) => e.stream,
    }
}

/// Applies an entry to a tail. `Create` is decided by the caller through
/// [`create_replaces`]; every other entry needs the live incarnation.
pub fn apply_to_tail(tail: &mut Tail, entry: &WalEntry) -> Result<(), ApplyError> {
    let stream = entry_stream(entry);
    if tail.stream != stream {
        return Err(ApplyError::WrongIncarnation {
            found: stream.incarnation,
            live: tail.stream.incarnation,
        });
    }
    if tail.status == StreamStatus::Deleted {
        return Err(ApplyError::UnknownStream {
            incarnation: stream.incarnation,
        });
    }
    match entry {
        WalEntry::Create(_) => {}
        WalEntry::Append(a) => apply_append_to_tail(tail, a)?,
        WalEntry::Producer(p) => {
            tail.producers
                .insert(p.producer_id.clone(), ProducerState::from(p));
        }
        WalEntry::StreamSeq(s) => tail.stream_seq = Some(s.seq.clone()),
        // Consumer state is the durable stream's, not the tail's.
        WalEntry::Consumer(_) => {}
        WalEntry::Usage(u) => {
            let usage = &mut tail.usage;
            usage.reads = usage.reads.saturating_add(u.reads);
            usage.read_bytes = usage.read_bytes.saturating_add(u.read_bytes);
            usage.last_read_ms = usage.last_read_ms.max(Some(u.last_read_ms));
        }
        WalEntry::Close(c) => {
            if tail.status == StreamStatus::Open {
                tail.status = StreamStatus::Closed;
                tail.closed_ms = Some(c.closed_ms);
            }
        }
        WalEntry::Delete(_) => {
            tail.status = StreamStatus::Deleted;
            tail.producers.clear();
            tail.stream_seq = None;
        }
    }
    Ok(())
}

/// Applies an append's offsets and sizes to a tail (pages are not needed).
pub fn apply_append_to_tail(tail: &mut Tail, a: &AppendEntry) -> Result<(), ApplyError> {
    if tail.stream != a.stream {
        return Err(ApplyError::WrongIncarnation {
            found: a.stream.incarnation,
            live: tail.stream.incarnation,
        });
    }
    if tail.status != StreamStatus::Open {
        return Err(ApplyError::NotOpen);
    }
    if a.first_offset != tail.next_offset {
        return Err(ApplyError::OffsetMismatch {
            expected: tail.next_offset,
            found: a.first_offset,
        });
    }
    tail.next_offset += a.record_count;
    tail.payload_bytes += a.payload_bytes;
    tail.last_append_ms = Some(a.timestamp_ms);
    Ok(())
}

/// Whether a `Create` of `stream` replaces the current tail (a newer
/// incarnation, or a first creation), is a repeat (same live incarnation), or
/// is stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateVerdict {
    New,
    Exists,
    Stale,
}

pub fn create_verdict(current: Option<&Tail>, stream: &StreamRef) -> CreateVerdict {
    match current {
        None => CreateVerdict::New,
        Some(t) if t.stream.incarnation < stream.incarnation => CreateVerdict::New,
        Some(t) if t.stream.incarnation == stream.incarnation => {
            if t.status == StreamStatus::Deleted {
                CreateVerdict::Stale
            } else {
                CreateVerdict::Exists
            }
        }
        Some(_) => CreateVerdict::Stale,
    }
}

/// Durable streams by id: what replay builds and the acker publishes into.
#[derive(Debug, Default, Clone)]
pub struct StreamTable {
    pub streams: HashMap<[u8; 16], DurableStream>,
}

impl StreamTable {
    /// Applies one entry.
    pub fn apply(&mut self, entry: &WalEntry) -> Result<(), ApplyError> {
        let id = entry_stream(entry).id;
        if let Some(fresh) = apply_entry(self.streams.get_mut(&id), entry)? {
            self.streams.insert(id, fresh);
        }
        Ok(())
    }
}

/// Applies an entry to one stream's durable state (`None`: the shard has none).
/// Returns the state that replaces it when a `Create` starts a new incarnation.
pub fn apply_entry(
    current: Option<&mut DurableStream>,
    entry: &WalEntry,
) -> Result<Option<DurableStream>, ApplyError> {
    let stream = entry_stream(entry);
    if let WalEntry::Create(c) = entry {
        let tail = current.as_ref().map(|d| &d.tail);
        return match create_verdict(tail, &stream) {
            CreateVerdict::New => Ok(Some(DurableStream::empty(Tail::new(c)))),
            CreateVerdict::Exists => Ok(None),
            CreateVerdict::Stale => Err(ApplyError::WrongIncarnation {
                found: stream.incarnation,
                live: tail.map(|t| t.stream.incarnation).unwrap_or(0),
            }),
        };
    }
    let durable = current.ok_or(ApplyError::UnknownStream {
        incarnation: stream.incarnation,
    })?;
    apply_to_durable(durable, entry)?;
    Ok(None)
}

/// Applies a non-create entry to a durable stream (tail and pages).
pub fn apply_to_durable(durable: &mut DurableStream, entry: &WalEntry) -> Result<(), ApplyError> {
    let pages = match entry {
        WalEntry::Append(a) => Some(index_pages(a.first_offset, a.record_count, &a.pages)?),
        _ => None,
    };
    let consumer = match entry {
        WalEntry::Consumer(c) => Some((
            c.name.as_str(),
            ConsumerChange::decode(&c.change).map_err(|e| ApplyError::BadConsumerChange {
                reason: e.to_string(),
            })?,
        )),
        _ => None,
    };
    apply_to_tail(&mut durable.tail, entry)?;
    if let Some((name, change)) = consumer {
        durable.consumers.fold(name, &change);
    }
    if let Some(pages) = pages {
        durable.page_bytes += pages.iter().map(|p| p.bytes.len() as u64).sum::<u64>();
        durable.pages.extend(pages);
    }
    if matches!(entry, WalEntry::Delete(_)) {
        durable.pages = Vec::new();
        durable.sealed = Vec::new();
        durable.page_bytes = 0;
        durable.consumers = ConsumerTable::default();
    }
    Ok(())
}

/// An idempotent producer's claim on one append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerClaim {
    pub id: String,
    pub epoch: u64,
    pub seq: u64,
    /// Digest of the request's content (a retry must match it to be a duplicate).
    pub digest: [u8; 16],
}

/// The Durable Streams producer rules (PROTOCOL.md §5.2.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProducerVerdict {
    Accept,
    Duplicate(ProducerState),
    StaleEpoch { current_epoch: u64 },
    NewEpochNeedsSeqZero,
    Gap { expected: u64, received: u64 },
}

pub fn judge_producer(state: Option<&ProducerState>, claim: &ProducerClaim) -> ProducerVerdict {
    let Some(state) = state else {
        return if claim.seq == 0 {
            ProducerVerdict::Accept
        } else {
            ProducerVerdict::Gap {
                expected: 0,
                received: claim.seq,
            }
        };
    };
    if claim.epoch < state.epoch {
        return ProducerVerdict::StaleEpoch {
            current_epoch: state.epoch,
        };
    }
    if claim.epoch > state.epoch {
        return if claim.seq == 0 {
            ProducerVerdict::Accept
        } else {
            ProducerVerdict::NewEpochNeedsSeqZero
        };
    }
    if claim.seq <= state.seq {
        ProducerVerdict::Duplicate(state.clone())
    } else if claim.seq == state.seq + 1 {
        ProducerVerdict::Accept
    } else {
        ProducerVerdict::Gap {
            expected: state.seq + 1,
            received: claim.seq,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(epoch: u64, seq: u64) -> ProducerClaim {
        ProducerClaim {
            id: "p".into(),
            epoch,
            seq,
            digest: [0; 16],
        }
    }

    fn state(epoch: u64, seq: u64) -> ProducerState {
        ProducerState {
            epoch,
            seq,
            first_offset: 0,
            next_offset: 1,
            digest: [0; 16],
        }
    }

    #[test]
    fn producer_rules() {
        assert_eq!(judge_producer(None, &claim(0, 0)), ProducerVerdict::Accept);
        assert_eq!(judge_producer(None, &claim(3, 0)), ProducerVerdict::Accept);
        assert_eq!(
            judge_producer(None, &claim(0, 2)),
            ProducerVerdict::Gap {
                expected: 0,
                received: 2
            }
        );
        let s = state(2, 5);
        assert_eq!(
            judge_producer(Some(&s), &claim(1, 9)),
            ProducerVerdict::StaleEpoch { current_epoch: 2 }
        );
        assert_eq!(
            judge_producer(Some(&s), &claim(3, 0)),
            ProducerVerdict::Accept
        );
        assert_eq!(
            judge_producer(Some(&s), &claim(3, 1)),
            ProducerVerdict::NewEpochNeedsSeqZero
        );
        assert_eq!(
            judge_producer(Some(&s), &claim(2, 5)),
            ProducerVerdict::Duplicate(s.clone())
        );
        assert_eq!(
            judge_producer(Some(&s), &claim(2, 0)),
            ProducerVerdict::Duplicate(s.clone())
        );
        assert_eq!(
            judge_producer(Some(&s), &claim(2, 6)),
            ProducerVerdict::Accept
        );
        assert_eq!(
            judge_producer(Some(&s), &claim(2, 8)),
            ProducerVerdict::Gap {
                expected: 6,
                received: 8
            }
        );
    }

    #[test]
    fn create_verdicts() {
        let s = |inc| StreamRef {
            id: [1; 16],
            incarnation: inc,
        };
        let mut t = Tail::new(&CreateEntry {
            stream: s(2),
            created_ms: 0,
            epoch: [0; 16],
            key_fingerprint: [0; 16],
            account: Bytes::new(),
        });
        assert_eq!(create_verdict(None, &s(1)), CreateVerdict::New);
        assert_eq!(create_verdict(Some(&t), &s(2)), CreateVerdict::Exists);
        assert_eq!(create_verdict(Some(&t), &s(3)), CreateVerdict::New);
        assert_eq!(create_verdict(Some(&t), &s(1)), CreateVerdict::Stale);
        t.status = StreamStatus::Deleted;
        assert_eq!(create_verdict(Some(&t), &s(2)), CreateVerdict::Stale);
        assert_eq!(create_verdict(Some(&t), &s(3)), CreateVerdict::New);
    }
}
