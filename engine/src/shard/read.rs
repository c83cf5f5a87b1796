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
use super::state::{DurableStream, StoredPage, StreamStatus};
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

/// Bytes of chunks and unsealed pages one keyed read may look through (its
/// own records still stop at [`ReadLimits`]). A routing key's records are
/// sparse when many keys interleave, and looking through a decoded chunk
/// costs only the key's own pages (`Chunk::pages_of_key`), so a keyed read
/// is not cut at `max_bytes` of other keys' data as a full read is; chunks
/// are still fetched [`CHUNK_FETCHES_MAX`] at a time and the read stops at
/// the first window that fills it.
const KEYED_SCAN_BYTES_MAX: usize = 64 << 20;
/// Chunks one read (keyed or not) may look through, however small they are.
const READ_CHUNKS_MAX: usize = 1024;

/// What a read takes from the stream's state under its read lock.
struct Selection {
    /// Sealed chunks from the one holding `from`, contiguous.
    chunks: Vec<SealedChunk>,
    /// Unsealed pages to take (of the read's key only, for a keyed read),
    /// once the chunks reach the unsealed tier.
    pages: Vec<StoredPage>,
    /// The end of the last unsealed page looked through (0 if none): a read
    /// that is not full has moved past it.
    pages_end: u64,
    tail: u64,
    closed: bool,
}

impl Selection {
    /// Chooses chunks, then unsealed pages, from `from` on: a full read up to
    /// `max_bytes` of them (at least one), a keyed read up to `max_bytes` and
    /// `max_records` of its key's unsealed pages and [`KEYED_SCAN_BYTES_MAX`]
    /// looked through; either at most [`READ_CHUNKS_MAX`] chunks.
    fn of(
        state: &DurableStream,
        from: u64,
        limits: ReadLimits,
        routing_key: Option<&[u8]>,
    ) -> Selection {
        let scan_bytes_max = match routing_key {
            Some(_) => KEYED_SCAN_BYTES_MAX.max(limits.max_bytes),
            None => limits.max_bytes,
        };
        // `taken` counts against the read's limits, `scanned` everything
        // looked through; they are equal for a full read.
        let (mut taken, mut scanned) = (0usize, 0usize);
        let mut chunks: Vec<SealedChunk> = Vec::new();
        let unsealed_from = state.unsealed_from();
        if from < unsealed_from {
            let start = state.sealed.partition_point(|c| c.end_offset() <= from);
            for chunk in &state.sealed[start..] {
                if !chunks.is_empty()
                    && (taken >= limits.max_bytes
                        || scanned >= scan_bytes_max
                        || chunks.len() >= READ_CHUNKS_MAX)
                {
                    break;
                }
                scanned += chunk.chunk.length as usize;
                if routing_key.is_none() {
                    taken += chunk.chunk.length as usize;
                }
                chunks.push(chunk.clone());
            }
        }
        let mut pages: Vec<StoredPage> = Vec::new();
        let mut pages_end = 0u64;
        let sealed_done = chunks
            .last()
            .is_none_or(|c| c.end_offset() >= unsealed_from);
        if sealed_done {
            let start = state.pages.partition_point(|p| p.end_offset() <= from);
            let mut records = 0usize;
            for page in &state.pages[start..] {
                if !(pages.is_empty() && chunks.is_empty())
                    && (taken >= limits.max_bytes
                        || records >= limits.max_records
                        || scanned >= scan_bytes_max)
                {
                    break;
                }
                scanned += page.bytes.len();
                pages_end = page.end_offset();
                if routing_key.is_some_and(|rk| rk != page.routing_key.as_ref()) {
                    continue;
                }
                taken += page.bytes.len();
                records += page.record_count as usize;
                pages.push(page.clone());
            }
        }
        Selection {
            chunks,
            pages,
            pages_end,
            tail: state.tail.next_offset,
            closed: state.tail.status == StreamStatus::Closed,
        }
    }

    /// The sealed chunks after the selected ones (that may hold the read's
    /// key), for the cache to fetch ahead.
    fn ahead_of(&self, sealed: &[SealedChunk], key_hash: Option<u64>) -> Vec<SealedChunk> {
        let Some(last) = self.chunks.last() else {
            return Vec::new();
        };
        let next = sealed.partition_point(|c| c.end_offset() <= last.end_offset());
        sealed[next..]
            .iter()
            .filter(|c| key_hash.is_none_or(|h| c.chunk.summary.may_contain(h)))
            .take(READ_AHEAD_CHUNKS)
            .cloned()
            .collect()
    }
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

impl Collector {
    /// Takes a chunk's pages from `from` on.
    fn take_chunk(&mut self, cipher: &StreamCipher, chunk: &Chunk) -> Result<(), EngineError> {
        for (entry, page) in chunk.directory.iter().zip(&chunk.pages) {
            let end = entry.first_offset + entry.record_count as u64;
            if end <= self.from {
                self.skip_to(end);
                continue;
            }
            self.take_page(cipher, page, None)?;
            if self.full {
                break;
            }
        }
        Ok(())
    }

    /// Takes the pages of one routing key (hash `key_hash`) from `from` on,
    /// visiting only those pages (the chunk's key index) and skipping the
    /// others' offsets: the same records and `next_offset` as a walk of the
    /// whole directory, at a cost proportional to the key's own pages.
    fn take_key_of_chunk(
        &mut self,
        cipher: &StreamCipher,
        chunk: &Chunk,
        key_hash: u64,
        routing_key: &[u8],
    ) -> Result<(), EngineError> {
        for &index in chunk.pages_of_key(key_hash) {
            let index = index as usize;
            let (Some(entry), Some(page)) = (chunk.directory.get(index), chunk.pages.get(index))
            else {
                break;
            };
            let end = entry.first_offset + entry.record_count as u64;
            if end <= self.from {
                continue;
            }
            // The pages before this one in the chunk hold other keys.
            self.skip_to(entry.first_offset);
            self.take_page(cipher, page, Some(routing_key))?;
            if self.full {
                break;
            }
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
        let (selection, ahead, _pins) = {
            let state = cell.state.read();
            if !state.tail.is_live(stream) {
                return Err(EngineError::StreamNotFound);
            }
            if cipher.epoch().0 != state.tail.epoch
                || !cipher.matches_fingerprint(&state.tail.key_fingerprint)
            {
                return Err(EngineError::WrongKey);
            }
            let selection = Selection::of(&state, from, limits, routing_key);
            if from < state.unsealed_from() {
                check_tiling(&selection.chunks, from, state.unsealed_from()).map_err(|reason| {
                    EngineError::corrupt(format!("{} (sealed tier)", self.name()), reason)
                })?;
            }
            // Pinned before the lock is released: see `ShardShared::pin_segments`.
            let pins = (!selection.chunks.is_empty()).then(|| {
                self.inner
                    .shared
                    .pin_segments(selection.chunks.iter().map(|c| c.segment))
            });
            let ahead = selection.ahead_of(&state.sealed, key_hash);
            (selection, ahead, pins)
        };
        let ctx = &self.inner.ctx;
        read_ahead(ctx, ahead);
        let mut reader = Collector {
            out: Vec::new(),
            spans: Vec::new(),
            next_offset: from.min(selection.tail),
            bytes: 0,
            from,
            limits,
            full: false,
        };
        // A window of chunks is fetched at once; the read stops at the first
        // window that fills it.
        for window in selection.chunks.chunks(CHUNK_FETCHES_MAX) {
            let fetches: Vec<_> = window
                .iter()
                .map(|c| fetch_chunk(ctx, c, key_hash))
                .collect();
            let loaded = futures::future::try_join_all(fetches).await?;
            for (sealed, chunk) in window.iter().zip(loaded) {
                match (chunk, key_hash, routing_key) {
                    (None, _, _) => {}
                    (Some(chunk), Some(hash), Some(key)) => {
                        reader.take_key_of_chunk(cipher, &chunk, hash, key)?
                    }
                    (Some(chunk), _, _) => reader.take_chunk(cipher, &chunk)?,
                }
                if reader.full {
                    break;
                }
                reader.skip_to(sealed.end_offset());
            }
            if reader.full {
                break;
            }
        }
        for page in &selection.pages {
            if reader.full {
                break;
            }
            // Pages between the chosen ones hold other keys.
            reader.skip_to(page.first_offset);
            reader.take_page(cipher, &page.bytes, None)?;
        }
        reader.skip_to(selection.pages_end);
        Ok(ReadBatch {
            records: reader.out,
            spans: reader.spans,
            next_offset: reader.next_offset,
            tail: selection.tail,
            closed: selection.closed,
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
