//! A sealed chunk as the engine holds it: the segment that holds it and the
//! segment table's chunk entry, and its bytes in an index run (segment id
//! `u64` little-endian, then the table's chunk entry).
//!
//! This file depends on no other file of the shard: the stream state
//! (`state.rs`) holds chunks, and the run conversions (`sealed.rs`) encode
//! them (docs/ARCHITECTURE.md, "Sealing, the state index and garbage
//! collection").

use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use strata_segments::segment::{decode_chunk_ref, encode_chunk_ref, ChunkRef};

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
