//! Reads and waits. Readers take a stream's durable pages under a short read
//! lock, then authenticate and decrypt outside it; they never see staged state.

use std::time::Duration;

use bytes::Bytes;
use strata_segments::segment::{routing_key_hash, Chunk};
use strata_segments::{open_page, PageError, Record, StreamCipher};

use super::api::ShardStatus;
use super::chunk::SealedChunk;
use super::ctx::ShardCtx;
use super::handle::Shard;
use super::state::{StoredPage, StreamStatus};
use super::tiers::{load_chunk, read_ahead, READ_AHEAD_CHUNKS};
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

/// A run of consecutive records of one routing key in a [`ReadBatch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpan {
    pub routing_key: Bytes,
    pub records: usize,
}

/// Records from one read and where the stream stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadBatch {
    pub records: Vec<Record>,
    /// The routing keys of `records`, in order: one span per page taken, so
    /// the spans' counts add up to `records.len()`.
    pub spans: Vec<KeySpan>,
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

    /// Each record with its routing key.
    pub fn keyed(&self) -> impl Iterator<Item = (&Bytes, &Record)> {
        debug_assert_eq!(
            self.spans.iter().map(|s| s.records).sum::<usize>(),
            self.records.len()
        );
        self.spans
            .iter()
            .flat_map(|span| std::iter::repeat_n(&span.routing_key, span.records))
            .zip(&self.records)
    }
}

/// Sealed chunks fetched at once by one read.
const CHUNK_FETCHES_MAX: usize = 8;

/// The chunks a read chose must start at or before `from` and follow each
/// other without a gap up to the unsealed pages: a read never skips offsets
/// silently (it would otherwise return nothing and never catch up).
fn check_tiling(chunks: &[SealedChunk], from: u64, unsealed_from: u64) -> Result<(), String> {
    let Some(first) = chunks.first() else {
        return Err(format!("no sealed chunk holds offset {from}"));
    };
    if first.first_offset() > from {
        return Err(format!("no sealed chunk holds offset {from}"));
    }
    for pair in chunks.windows(2) {
        if pair[0].end_offset() != pair[1].first_offset() {
            return Err(format!(
                "sealed chunks leave offsets {}..{} out",
                pair[0].end_offset(),
                pair[1].first_offset()
            ));
        }
    }
    let last = chunks.last().map_or(from, SealedChunk::end_offset);
    if last > unsealed_from {
        return Err(format!(
            "sealed chunks reach {last}, past the unsealed pages at {unsealed_from}"
        ));
    }
    Ok(())
}

/// A chunk a read needs, or `None` when its routing-key summary excludes the
/// key (no GET is made).
async fn fetch_chunk(
    ctx: &std::sync::Arc<ShardCtx>,
    sealed: &SealedChunk,
    key_hash: Option<u64>,
) -> Result<Option<std::sync::Arc<Chunk>>, EngineError> {
    if key_hash.is_some_and(|h| !sealed.chunk.summary.may_contain(h)) {
        return Ok(None);
    }
    load_chunk(ctx, sealed).await.map(Some)
}

/// Accumulates a read's records up to its limits.
struct Collector {
    out: Vec<Record>,
    spans: Vec<KeySpan>,
    next_offset: u64,
    bytes: usize,
    from: u64,
    limits: ReadLimits,
    full: bool,
}

impl Collector {
    fn skip_to(&mut self, end: u64) {
        if !self.full {
            self.next_offset = self.next_offset.max(end);
        }
    }

    /// Takes a page's records from `from` on; with `routing_key`, a page of
    /// another key (one whose hash only collided) is skipped.
    fn take_page(
        &mut self,
        cipher: &StreamCipher,
        page: &Bytes,
        routing_key: Option<&[u8]>,
    ) -> Result<(), EngineError> {
        let header = strata_segments::parse_header(page)?;
        if routing_key.is_some_and(|rk| rk != header.routing_key.as_ref()) {
            self.skip_to(header.end_offset());
            return Ok(());
        }
        let page_cipher = cipher.page_cipher(&header.routing_key, header.key_version);
        let opened = open_page(&page_cipher, page).map_err(|e| match e {
            PageError::Authentication => EngineError::PageAuthentication {
                offset: header.first_offset,
            },
            other => EngineError::Page(other),
        })?;
        let before = self.out.len();
        for record in opened.records {
            if record.offset < self.from {
                continue;
            }
            if !self.out.is_empty()
                && (self.bytes >= self.limits.max_bytes
                    || self.out.len() >= self.limits.max_records)
            {
                self.full = true;
                break;
            }
            self.bytes += record.payload.len();
            self.next_offset = record.offset + 1;
            self.out.push(record);
        }
        if self.out.len() > before {
            self.spans.push(KeySpan {
                routing_key: header.routing_key,
                records: self.out.len() - before,
            });
        }
        Ok(())
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
    /// Reads records from `from` (records of `routing_key` only, if given):
    /// sealed chunks first (ranged GETs in parallel, through the chunk cache;
    /// a chunk whose routing-key summary excludes the key is skipped without a
    /// GET), then the unsealed pages in memory. The two tiers are taken from
    /// one snapshot, so a seal in flight never opens a hole.
    pub async fn read(
        &self,
        stream: &StreamRef,
        from: u64,
        limits: ReadLimits,
        cipher: &StreamCipher,
        routing_key: Option<&[u8]>,
    ) -> Result<ReadBatch, EngineError> {
        let result = self
            .read_tiers(stream, from, limits, cipher, routing_key)
            .await;
        // A superseded owner's sealed objects may be collected by the newer
        // owner (before this one has learnt it is fenced): that is not damage.
        match result {
            Err(e @ EngineError::Corrupt { .. }) => {
                if self.status() == super::api::ShardStatus::Fenced || self.superseded().await {
                    Err(EngineError::Fenced)
                } else {
                    Err(e)
                }
            }
            other => other,
        }
    }

    /// Whether the manifest in the store names another writer than this
    /// owner at its current epoch (a newer owner, or an operator's repair).
    async fn superseded(&self) -> bool {
        let ctx = &self.inner.ctx;
        let epoch = self.last_recovery().epoch;
        match ctx.manifest.load().await {
            Ok(Some(m)) => {
                m.value.writer.instance != ctx.instance.0 || m.value.writer.epoch != epoch
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }

    async fn read_tiers(
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
        let key_hash = routing_key.map(routing_key_hash);
        let (chunks, ahead, pages, tail, closed, _pins) = {
            let state = cell.state.read();
            if !state.tail.is_live(stream) {
                return Err(EngineError::StreamNotFound);
            }
            if cipher.epoch().0 != state.tail.epoch
                || !cipher.matches_fingerprint(&state.tail.key_fingerprint)
            {
                return Err(EngineError::WrongKey);
            }
            let mut bytes = 0usize;
            let mut chunks: Vec<SealedChunk> = Vec::new();
            let unsealed_from = state.unsealed_from();
            if from < unsealed_from {
                let start = state.sealed.partition_point(|c| c.end_offset() <= from);
                for chunk in &state.sealed[start..] {
                    if !chunks.is_empty() && bytes >= limits.max_bytes {
                        break;
                    }
                    bytes += chunk.chunk.length as usize;
                    chunks.push(chunk.clone());
                }
            }
            if from < unsealed_from {
                check_tiling(&chunks, from, unsealed_from).map_err(|reason| {
                    EngineError::corrupt(format!("{} (sealed tier)", self.name()), reason)
                })?;
            }
            // The chunks after these, for the cache to fetch ahead.
            let ahead: Vec<SealedChunk> = match chunks.last() {
                Some(last) => {
                    let next = state
                        .sealed
                        .partition_point(|c| c.end_offset() <= last.end_offset());
                    state.sealed[next..]
                        .iter()
                        .filter(|c| key_hash.is_none_or(|h| c.chunk.summary.may_contain(h)))
                        .take(READ_AHEAD_CHUNKS)
                        .cloned()
                        .collect()
                }
                None => Vec::new(),
            };
            let mut chosen: Vec<StoredPage> = Vec::new();
            let sealed_done = chunks
                .last()
                .is_none_or(|c| c.end_offset() >= unsealed_from);
            if sealed_done {
                let start = state.pages.partition_point(|p| p.end_offset() <= from);
                let mut records = 0usize;
                for page in &state.pages[start..] {
                    if !(chosen.is_empty() && chunks.is_empty())
                        && (bytes >= limits.max_bytes || records >= limits.max_records)
                    {
                        break;
                    }
                    bytes += page.bytes.len();
                    records += page.record_count as usize;
                    chosen.push(page.clone());
                }
            }
            // Pinned before the lock is released: see `ShardShared::pin_segments`.
            let pins = (!chunks.is_empty()).then(|| {
                self.inner
                    .shared
                    .pin_segments(chunks.iter().map(|c| c.segment))
            });
            (
                chunks,
                ahead,
                chosen,
                state.tail.next_offset,
                state.tail.status == StreamStatus::Closed,
                pins,
            )
        };
        let ctx = &self.inner.ctx;
        read_ahead(ctx, ahead);
        let mut loaded: Vec<Option<std::sync::Arc<Chunk>>> = Vec::with_capacity(chunks.len());
        for window in chunks.chunks(CHUNK_FETCHES_MAX) {
            let fetches: Vec<_> = window
                .iter()
                .map(|c| fetch_chunk(ctx, c, key_hash))
                .collect();
            loaded.extend(futures::future::try_join_all(fetches).await?);
        }
        let mut reader = Collector {
            out: Vec::new(),
            spans: Vec::new(),
            next_offset: from.min(tail),
            bytes: 0,
            from,
            limits,
            full: false,
        };
        for (sealed, chunk) in chunks.iter().zip(loaded) {
            let Some(chunk) = chunk else {
                reader.skip_to(sealed.end_offset());
                continue;
            };
            for (entry, page) in chunk.directory.iter().zip(&chunk.pages) {
                let end = entry.first_offset + entry.record_count as u64;
                if end <= from || key_hash.is_some_and(|h| h != entry.routing_key_hash) {
                    reader.skip_to(end);
                    continue;
                }
                reader.take_page(cipher, page, routing_key)?;
                if reader.full {
                    break;
                }
            }
            if reader.full {
                break;
            }
        }
        for page in &pages {
            if reader.full {
                break;
            }
            if routing_key.is_some_and(|rk| rk != page.routing_key.as_ref()) {
                reader.skip_to(page.end_offset());
                continue;
            }
            reader.take_page(cipher, &page.bytes, None)?;
        }
        Ok(ReadBatch {
            records: reader.out,
            spans: reader.spans,
            next_offset: reader.next_offset,
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
        let mut status = self.inner.shared.status.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            // A shard that stopped or was fenced answers no more waits: the
            // reader asks again (elsewhere, when ownership moved).
            if matches!(
                *status.borrow_and_update(),
                ShardStatus::Stopped | ShardStatus::Fenced
            ) {
                return Err(EngineError::Unavailable {
                    reason: "shard stopped".into(),
                });
            }
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
            let woken = tokio::time::timeout_at(deadline, async {
                tokio::select! {
                    woken = changed.changed() => woken.is_ok(),
                    woken = status.changed() => woken.is_ok(),
                }
            });
            match woken.await {
                Ok(true) => {}
                Ok(false) => {
                    return Err(EngineError::Unavailable {
                        reason: "shard stopped".into(),
                    })
                }
                Err(_) => return Ok(WaitOutcome::TimedOut { tail }),
            }
        }
    }
}
