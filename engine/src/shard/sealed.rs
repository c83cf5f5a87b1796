//! The sealed tier as the engine holds it: chunk references (segment id plus
//! the segment table's chunk entry) and the conversion of stream tails to and
//! from index-run records. Loading a manifest's runs, oldest first, rebuilds
//! every stream's tail (newer runs shadow older) and its sealed chunks (which
//! accumulate; a newer incarnation starts over).

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use strata_manifest::index_run::{IndexRun, ProducerRecord, RunEntry, TailRecord, TailStatus};
use strata_segments::segment::{decode_chunk_ref, encode_chunk_ref, ChunkRef};
use strata_wal::StreamRef;

use super::state::{DurableStream, ProducerState, StreamStatus, StreamTable, Tail};
use crate::layout::ObjectId;

/// A sealed chunk: which segment holds it, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedChunk {
    pub segment: ObjectId,
    pub chunk: Arc<ChunkRef>,
}

impl SealedChunk {
    pub fn first_offset(&self) -> u64 {
        self.chunk.first_offset
    }

    pub fn end_offset(&self) -> u64 {
        self.chunk.end_offset
    }
}

/// An index run's chunk bytes: segment id u64, then the table's chunk entry.
pub fn encode_sealed(chunk: &SealedChunk) -> Bytes {
    let mut b = BytesMut::new();
    b.put_u64_le(chunk.segment.0);
    encode_chunk_ref(&mut b, &chunk.chunk);
    b.freeze()
}

pub fn decode_sealed(bytes: &Bytes) -> Result<SealedChunk, String> {
    let mut b = bytes.clone();
    let segment = b
        .try_get_u64_le()
        .map_err(|_| "chunk reference truncated".to_string())?;
    let chunk = decode_chunk_ref(&mut b, "index run chunk").map_err(|e| e.to_string())?;
    if !b.is_empty() {
        return Err("trailing bytes after a chunk reference".into());
    }
    Ok(SealedChunk {
        segment: ObjectId(segment),
        chunk: Arc::new(chunk),
    })
}

pub fn tail_record(tail: &Tail) -> TailRecord {
    TailRecord {
        status: match tail.status {
            StreamStatus::Open => TailStatus::Open,
            StreamStatus::Closed => TailStatus::Closed,
            StreamStatus::Deleted => TailStatus::Deleted,
        },
        next_offset: tail.next_offset,
        payload_bytes: tail.payload_bytes,
        created_ms: tail.created_ms,
        closed_ms: tail.closed_ms,
        last_append_ms: tail.last_append_ms,
        epoch: tail.epoch,
        key_fingerprint: tail.key_fingerprint,
        stream_seq: tail.stream_seq.clone(),
        producers: tail
            .producers
            .iter()
            .map(|(id, p)| ProducerRecord {
                id: id.clone(),
                epoch: p.epoch,
                seq: p.seq,
                first_offset: p.first_offset,
                next_offset: p.next_offset,
                digest: p.digest,
            })
            .collect(),
    }
}

pub fn tail_from_record(stream: StreamRef, r: &TailRecord) -> Tail {
    Tail {
        stream,
        epoch: r.epoch,
        key_fingerprint: r.key_fingerprint,
        status: match r.status {
            TailStatus::Open => StreamStatus::Open,
            TailStatus::Closed => StreamStatus::Closed,
            TailStatus::Deleted => StreamStatus::Deleted,
        },
        next_offset: r.next_offset,
        payload_bytes: r.payload_bytes,
        created_ms: r.created_ms,
        closed_ms: r.closed_ms,
        last_append_ms: r.last_append_ms,
        stream_seq: r.stream_seq.clone(),
        producers: r
            .producers
            .iter()
            .map(|p| {
                (
                    p.id.clone(),
                    ProducerState {
                        epoch: p.epoch,
                        seq: p.seq,
                        first_offset: p.first_offset,
                        next_offset: p.next_offset,
                        digest: p.digest,
                    },
                )
            })
            .collect(),
    }
}

/// A run entry for a stream: its tail, and the chunks this run sealed for it.
pub fn run_entry(tail: &Tail, chunks: &[SealedChunk]) -> RunEntry {
    RunEntry {
        stream_id: tail.stream.id,
        incarnation: tail.stream.incarnation,
        tail: tail_record(tail),
        chunks: chunks.iter().map(encode_sealed).collect(),
    }
}

/// Applies one run (newer than everything applied before) to a table: its
/// tail replaces the stream's, and its chunks replace the stream's chunks
/// from their first offset on. A full run lists them all (replacing
/// everything), an incremental one continues them; when runs that no
/// manifest lists are applied too (an operator's rebuild), a newer owner's
/// run wins over an older one's. Chunks that would leave a gap are refused.
pub fn apply_run(table: &mut StreamTable, run: &IndexRun) -> Result<(), String> {
    for entry in &run.entries {
        let stream = StreamRef {
            id: entry.stream_id,
            incarnation: entry.incarnation,
        };
        let chunks = entry
            .chunks
            .iter()
            .map(decode_sealed)
            .collect::<Result<Vec<_>, _>>()?;
        let tail = tail_from_record(stream, &entry.tail);
        match table.streams.get_mut(&entry.stream_id) {
            Some(existing) if existing.tail.stream.incarnation > entry.incarnation => {}
            Some(existing) if existing.tail.stream.incarnation == entry.incarnation => {
                if let Some(first) = chunks.first() {
                    existing
                        .sealed
                        .retain(|c| c.end_offset() <= first.first_offset());
                    if existing
                        .sealed
                        .last()
                        .is_some_and(|c| c.end_offset() != first.first_offset())
                    {
                        return Err("chunks that do not continue the stream".into());
                    }
                }
                existing.tail = tail;
                existing.sealed.extend(chunks);
                if existing.tail.status == StreamStatus::Deleted {
                    existing.sealed.clear();
                }
            }
            _ => {
                let deleted = tail.status == StreamStatus::Deleted;
                let mut fresh = DurableStream::empty(tail);
                if !deleted {
                    fresh.sealed = chunks;
                }
                table.streams.insert(entry.stream_id, fresh);
            }
        }
    }
    Ok(())
}
