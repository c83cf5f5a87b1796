//! Fork sources served by another fleet member.
//!
//! Owns [`SourceReads`] (how this member reads a fork source whose shard
//! another member serves; HTTP, in `http::peers`), its request and answer
//! ([`SourceRead`], [`SourceBatch`]). The owner's side of it is
//! `Streams::read_source` (`chain.rs`: the source's records from its local
//! shard).
//!
//! Invariants:
//! * a source is named by project, name and incarnation; the owner reads it
//!   only if its descriptor still has that incarnation and is not deleted
//!   (a source kept only for its forks is read), so a read never returns
//!   another incarnation's records;
//! * the owner reads only the source's default routing key (a fork inherits
//!   nothing else) and decrypts with the caller's key, checked against the
//!   descriptor like any read; the records travel between members only;
//! * a batch is bounded by the request's `max_records` and `max_bytes`
//!   (at most [`SOURCE_RECORDS_MAX`] records).

use std::future::Future;
use std::pin::Pin;

use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use strata_engine::{KeySpan, ReadBatch};
use strata_segments::{Record, StreamKey};

use super::error::ServiceError;

/// Most records one source read answers.
pub const SOURCE_RECORDS_MAX: usize = 10_000;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A read of a fork source at its owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRead {
    pub project: String,
    pub name: String,
    pub incarnation: u64,
    /// The source's own offset to read from.
    pub from: u64,
    pub max_records: usize,
    pub max_bytes: usize,
}

/// One record of a source read (the payload in base64).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceRecord {
    pub offset: u64,
    pub timestamp_ms: u64,
    pub payload: String,
    pub append_start: bool,
}

/// The answer to a [`SourceRead`]: the engine's read batch, on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceBatch {
    pub records: Vec<SourceRecord>,
    pub next_offset: u64,
    pub tail: u64,
    pub closed: bool,
}

impl SourceBatch {
    pub fn of(batch: ReadBatch) -> SourceBatch {
        SourceBatch {
            records: batch
                .records
                .into_iter()
                .map(|r| SourceRecord {
                    offset: r.offset,
                    timestamp_ms: r.timestamp_ms,
                    payload: B64.encode(&r.payload),
                    append_start: r.append_start,
                })
                .collect(),
            next_offset: batch.next_offset,
            tail: batch.tail,
            closed: batch.closed,
        }
    }

    /// The engine's batch again (a payload that is not base64 is refused).
    pub fn into_batch(self) -> Result<ReadBatch, ServiceError> {
        let records = self
            .records
            .into_iter()
            .map(|r| {
                let payload = B64.decode(r.payload.as_bytes()).map_err(|e| {
                    ServiceError::Unavailable(format!("a source read answered a bad record: {e}"))
                })?;
                Ok(Record {
                    offset: r.offset,
                    timestamp_ms: r.timestamp_ms,
                    payload: Bytes::from(payload),
                    append_start: r.append_start,
                })
            })
            .collect::<Result<Vec<_>, ServiceError>>()?;
        // A source read is of the default routing key only.
        let spans = vec![KeySpan {
            routing_key: Bytes::new(),
            records: records.len(),
        }];
        Ok(ReadBatch {
            records,
            spans,
            next_offset: self.next_offset,
            tail: self.tail,
            closed: self.closed,
        })
    }
}

/// A dead letter for a stream another member serves: appended there with
/// the producer the saga names (docs/API.md, "Dead letters").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterAppend {
    pub project: String,
    /// The dead-letter stream.
    pub name: String,
    /// The source record's routing key, base64.
    pub routing_key: String,
    /// The dead letter's JSON text.
    pub payload: String,
    pub producer_id: String,
    /// The producer digest, hex.
    pub digest: String,
}

impl DeadLetterAppend {
    /// The routing key and digest, decoded (`None`: not what a member sends).
    pub fn parts(&self) -> Option<(Bytes, [u8; 16])> {
        let routing_key = B64.decode(self.routing_key.as_bytes()).ok()?;
        let digest: [u8; 16] = hex::decode(&self.digest).ok()?.try_into().ok()?;
        Some((Bytes::from(routing_key), digest))
    }
}

/// How a member appends a dead letter to a stream another member serves.
pub trait DeadLetterPeers: Send + Sync {
    fn append(
        &self,
        url: &str,
        request: DeadLetterAppend,
        key: &StreamKey,
    ) -> BoxFuture<Result<(), ServiceError>>;
}

/// How a member reads a fork source another member serves.
pub trait SourceReads: Send + Sync {
    /// Reads `request` from the member at `url`, under `key`.
    fn read(
        &self,
        url: &str,
        request: SourceRead,
        key: &StreamKey,
    ) -> BoxFuture<Result<ReadBatch, ServiceError>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_crosses_the_wire_unchanged() {
        let batch = ReadBatch {
            records: vec![Record {
                offset: 3,
                timestamp_ms: 7,
                payload: Bytes::from_static(b"\x00\xffrecord"),
                append_start: true,
            }],
            spans: vec![strata_engine::KeySpan {
                routing_key: Bytes::new(),
                records: 1,
            }],
            next_offset: 4,
            tail: 9,
            closed: true,
        };
        let wire = serde_json::to_string(&SourceBatch::of(batch.clone())).unwrap();
        let back: SourceBatch = serde_json::from_str(&wire).unwrap();
        let again = back.into_batch().unwrap();
        assert_eq!(again.records.len(), 1);
        assert_eq!(again.records[0].payload, batch.records[0].payload);
        assert_eq!(
            (
                again.next_offset,
                again.tail,
                again.closed,
                again.records[0].offset
            ),
            (4, 9, true, 3)
        );
    }
}
