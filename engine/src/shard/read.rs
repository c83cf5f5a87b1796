//! Reads and waits. Readers take a stream's durable pages under a short read
//! lock, then authenticate and decrypt outside it; they never see staged state.

use std::time::Duration;

use strata_segments::{open_page, PageError, Record, StreamCipher};

use super::state::{StoredPage, StreamStatus};
use super::Shard;
use crate::error::EngineError;
use crate::ids::StreamRef;

/// How much one read may return. At least one record is returned when any is
/// available, whatever the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    pub max_records: usize,
    pub max_bytes: usize,
}

impl Default for ReadLimits {
    fn default() -> Self {
        ReadLimits {
            max_records: 10_000,
            max_bytes: 4 << 20,
        }
    }
}

/// Records from one read and where the stream stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadBatch {
    pub records: Vec<Record>,
    /// Where the next read continues.
    pub next_offset: u64,
    /// The stream's durable tail when the read started.
    pub tail: u64,
    pub closed: bool,
}

impl ReadBatch {
    pub fn up_to_date(&self) -> bool {
        self.next_offset >= self.tail
    }
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitOutcome {
    /// Data exists past the offset, or the stream is closed.
    Ready {
        tail: u64,
        closed: bool,
    },
    TimedOut {
        tail: u64,
    },
}

impl Shard {
    /// Reads records from `from` (records of `routing_key` only, if given).
    pub fn read(
        &self,
        stream: &StreamRef,
        from: u64,
        limits: ReadLimits,
        cipher: &StreamCipher,
        routing_key: Option<&[u8]>,
    ) -> Result<ReadBatch, EngineError> {
        let cell = self
            .inner
            .shared
            .cell(&stream.id)
            .ok_or(EngineError::StreamNotFound)?;
        let (pages, tail, closed) = {
            let state = cell.state.read();
            if !state.tail.is_live(stream) {
                return Err(EngineError::StreamNotFound);
            }
            if cipher.epoch().0 != state.tail.epoch
                || !cipher.matches_fingerprint(&state.tail.key_fingerprint)
            {
                return Err(EngineError::WrongKey);
            }
            let start = state.pages.partition_point(|p| p.end_offset() <= from);
            let mut chosen: Vec<StoredPage> = Vec::new();
            let mut bytes = 0usize;
            let mut records = 0usize;
            for page in &state.pages[start..] {
                if !chosen.is_empty()
                    && (bytes >= limits.max_bytes || records >= limits.max_records)
                {
                    break;
                }
                bytes += page.bytes.len();
                records += page.record_count as usize;
                chosen.push(page.clone());
            }
            (
                chosen,
                state.tail.next_offset,
                state.tail.status == StreamStatus::Closed,
            )
        };
        let mut out = Vec::new();
        let mut next_offset = from.min(tail);
        let mut bytes = 0usize;
        'pages: for page in &pages {
            if routing_key.is_some_and(|rk| rk != page.routing_key.as_ref()) {
                next_offset = page.end_offset();
                continue;
            }
            let header = strata_segments::parse_header(&page.bytes)?;
            let page_cipher = cipher.page_cipher(&header.routing_key, header.key_version);
            let opened = open_page(&page_cipher, &page.bytes).map_err(|e| match e {
                PageError::Authentication => EngineError::PageAuthentication {
                    offset: page.first_offset,
                },
                other => EngineError::Page(other),
            })?;
            for record in opened.records {
                if record.offset < from {
                    continue;
                }
                if !out.is_empty() && (bytes >= limits.max_bytes || out.len() >= limits.max_records)
                {
                    break 'pages;
                }
                bytes += record.payload.len();
                next_offset = record.offset + 1;
                out.push(record);
            }
        }
        Ok(ReadBatch {
            records: out,
            next_offset,
            tail,
            closed,
        })
    }

    /// Waits until the stream has data past `offset` (its durable tail is beyond
    /// it), the stream is closed, or `timeout` passes.
    pub async fn wait_for(
        &self,
        stream: &StreamRef,
        offset: u64,
        timeout: Duration,
    ) -> Result<WaitOutcome, EngineError> {
        let cell = self
            .inner
            .shared
            .cell(&stream.id)
            .ok_or(EngineError::StreamNotFound)?;
        let mut changed = cell.changed.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let tail = {
                let state = cell.state.read();
                if !state.tail.is_live(stream) {
                    return Err(EngineError::StreamNotFound);
                }
                let tail = state.tail.next_offset;
                let closed = state.tail.status == StreamStatus::Closed;
                if tail > offset || closed {
                    return Ok(WaitOutcome::Ready { tail, closed });
                }
                tail
            };
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    return Err(EngineError::Unavailable {
                        reason: "shard stopped".into(),
                    })
                }
                Err(_) => return Ok(WaitOutcome::TimedOut { tail }),
            }
        }
    }
}
