//! Stream tails to and from index-run records, and loading runs into a
//! [`StreamTable`]. (Chunk references themselves, a segment id plus the
//! segment table's chunk entry, are `chunk.rs`'s, re-exported here.) Loading a manifest's runs, oldest first, rebuilds
//! every stream's tail (newer runs shadow older) and its sealed chunks (which
//! accumulate; a newer incarnation starts over).

use bytes::Bytes;
use strata_manifest::index_run::{IndexRun, ProducerRecord, RunEntry, TailRecord, TailStatus};
use strata_wal::StreamRef;

use crate::consumer::durable::ConsumerTable;

pub use super::chunk::{decode_sealed, encode_sealed, SealedChunk};
use super::producer::NamedProducer;
use super::state::{DurableStream, ProducerState, StreamStatus, StreamTable, Tail};

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
            .map(|(id, state)| ProducerRecord::from(NamedProducer { id, state }))
            .collect(),
        usage: tail.usage.clone(),
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
            .map(|p| (p.id.clone(), ProducerState::from(p)))
            .collect(),
        usage: r.usage.clone(),
    }
}

/// A run entry for a stream: its tail, the chunks this run sealed for it,
/// and its encoded consumer table.
pub fn run_entry(tail: &Tail, chunks: &[SealedChunk], consumers: Bytes) -> RunEntry {
    RunEntry {
        stream_id: tail.stream.id,
        incarnation: tail.stream.incarnation,
        tail: tail_record(tail),
        chunks: chunks.iter().map(encode_sealed).collect(),
        consumers,
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
        let consumers = ConsumerTable::decode(&entry.consumers)
            .map_err(|e| format!("consumer table of an index run entry: {e}"))?;
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
                existing.consumers = consumers;
                if existing.tail.status == StreamStatus::Deleted {
                    existing.sealed.clear();
                    existing.consumers = ConsumerTable::default();
                }
            }
            _ => {
                let deleted = tail.status == StreamStatus::Deleted;
                let mut fresh = DurableStream::empty(tail);
                if !deleted {
                    fresh.sealed = chunks;
                    fresh.consumers = consumers;
                }
                table.streams.insert(entry.stream_id, fresh);
            }
        }
    }
    Ok(())
}
