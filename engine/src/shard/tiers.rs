//! Fetching sealed chunks: one ranged GET per chunk, validated (magic,
//! version, CRC, directory tiling, and that it is the chunk the index says)
//! before use, through the shard's optional on-disk [`ChunkCache`]
//! (`cache.rs`).
//!
//! Read-ahead: a read in the sealed tier starts background fetches of the
//! next few chunks of its stream into the cache ([`read_ahead`]), so one
//! consumer catching up keeps several GETs in flight instead of paying one
//! round trip per chunk. Fetches in flight are shared: a reader that wants a
//! chunk being fetched waits for that GET instead of issuing another. The
//! bytes fetched ahead at once are bounded (`READ_AHEAD_BYTES_MAX` per cache);
//! a failed fetch ahead is dropped silently (the reader then fetches itself
//! and reports the error).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::FutureExt;
use object_store::ObjectStore;
use strata_segments::segment::{decode_chunk, Chunk};

use super::cache::{CacheCountsCell, ChunkCache, ChunkFetch};
use super::chunk::SealedChunk;
use super::ctx::ShardCtx;
use crate::error::EngineError;

/// Chunks a read fetches ahead of itself, at most.
pub(crate) const READ_AHEAD_CHUNKS: usize = 4;
/// Bytes of chunks being fetched ahead at once, per cache, at most.
const READ_AHEAD_BYTES_MAX: u64 = 64 << 20;

/// The cache key of a chunk: its object's name and byte range.
fn cache_key(ctx: &ShardCtx, sealed: &SealedChunk) -> String {
    use std::fmt::Write as _;
    let mut key = ctx.layout.segment_name(sealed.segment);
    let _ = write!(key, "@{}+{}", sealed.chunk.position, sealed.chunk.length);
    key
}

/// Loads one sealed chunk: from the cache, from a fetch in flight (joining
/// it), or with one ranged GET (shared with other readers while it runs).
pub(crate) async fn load_chunk(
    ctx: &Arc<ShardCtx>,
    sealed: &SealedChunk,
) -> Result<Arc<Chunk>, EngineError> {
    let r = &sealed.chunk;
    if let Some(cache) = ctx.config.chunk_cache.as_ref() {
        let key = cache_key(ctx, sealed);
        if let Some(chunk) = cache.decoded(&key) {
            CacheCountsCell::count(&cache.counts.memory_hits);
            return Ok(chunk);
        }
        if let Some(bytes) = cache.get(&key) {
            match check(sealed, decode_chunk(&bytes)) {
                Ok(chunk) => {
                    CacheCountsCell::count(&cache.counts.disk_hits);
                    let chunk = Arc::new(chunk);
                    cache.remember(&key, chunk.clone(), r.length);
                    return Ok(chunk);
                }
                Err(_) => cache.remove(&key),
            }
        }
        CacheCountsCell::count(&cache.counts.misses);
        if let Some(fetch) = shared_fetch(ctx, cache, sealed.clone(), key.clone(), FetchFor::Reader)
        {
            if let Some(bytes) = fetch.await {
                if let Ok(chunk) = check(sealed, decode_chunk(&bytes)) {
                    let chunk = Arc::new(chunk);
                    cache.remember(&key, chunk.clone(), r.length);
                    return Ok(chunk);
                }
            }
        }
        // The shared fetch failed: fetch again, to report why.
    }
    let path = ctx.layout.segment(sealed.segment);
    let bytes = get_range(ctx, &path, r.position..r.position + r.length).await?;
    check(sealed, decode_chunk(&bytes))
        .map(Arc::new)
        .map_err(|reason| EngineError::corrupt(format!("{path} (chunk at {})", r.position), reason))
}

/// Who a shared fetch is for: a reader waiting on it, or the read-ahead
/// (which has a byte budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FetchFor {
    Reader,
    ReadAhead,
}

/// The fetch of `sealed` in flight, joined or started (`None`: a read-ahead
/// over its budget). A started fetch GETs the chunk, validates it, writes it
/// to the cache from a blocking thread, and leaves the in-flight map only
/// once cached (its finished future keeps handing out the bytes), so a reader
/// always finds a chunk fetched once in one of the two.
fn shared_fetch(
    ctx: &Arc<ShardCtx>,
    cache: &Arc<ChunkCache>,
    sealed: SealedChunk,
    key: String,
    purpose: FetchFor,
) -> Option<ChunkFetch> {
    let mut in_flight = cache.in_flight.lock();
    if let Some(running) = in_flight.get(&key) {
        return Some(running.clone());
    }
    let budget = match purpose {
        FetchFor::ReadAhead => sealed.chunk.length,
        FetchFor::Reader => 0,
    };
    if budget > 0 {
        if cache.read_ahead_bytes.load(Ordering::Relaxed) + budget > READ_AHEAD_BYTES_MAX {
            return None;
        }
        cache.read_ahead_bytes.fetch_add(budget, Ordering::Relaxed);
    }
    let ctx = ctx.clone();
    let owner = cache.clone();
    let fetch_key = key.clone();
    let fetch = async move {
        let path = ctx.layout.segment(sealed.segment);
        let range = sealed.chunk.position..sealed.chunk.position + sealed.chunk.length;
        let fetched = get_range(&ctx, &path, range)
            .await
            .ok()
            .filter(|bytes| check(&sealed, decode_chunk(bytes)).is_ok());
        let settle = {
            let owner = owner.clone();
            let key = fetch_key.clone();
            move || {
                owner.in_flight.lock().remove(&key);
                owner.read_ahead_bytes.fetch_sub(budget, Ordering::Relaxed);
                owner.fetch_settled.notify_waiters();
            }
        };
        match &fetched {
            Some(bytes) => {
                let bytes = bytes.clone();
                tokio::task::spawn_blocking(move || {
                    owner.put(&fetch_key, &bytes);
                    settle();
                });
            }
            None => settle(),
        }
        fetched
    }
    .boxed()
    .shared();
    in_flight.insert(key, fetch.clone());
    drop(in_flight);
    // Driven to the end even if every reader waiting on it goes away.
    tokio::spawn(fetch.clone());
    Some(fetch)
}

/// Starts background fetches of `ahead` (the chunks a reader will want next)
/// into the cache, skipping those cached or in flight, within the read-ahead
/// byte budget. Does nothing without a cache.
pub(crate) fn read_ahead(ctx: &Arc<ShardCtx>, ahead: Vec<SealedChunk>) {
    let Some(cache) = ctx.config.chunk_cache.as_ref() else {
        return;
    };
    for sealed in ahead {
        let key = cache_key(ctx, &sealed);
        if cache.contains(&key) || cache.in_flight(&key).is_some() {
            continue;
        }
        if shared_fetch(ctx, cache, sealed, key, FetchFor::ReadAhead).is_none() {
            return;
        }
    }
}

/// A chunk is only used if it decodes and is the one the index describes.
pub(crate) fn check(
    sealed: &SealedChunk,
    decoded: Result<Chunk, strata_segments::segment::SegmentError>,
) -> Result<Chunk, String> {
    let chunk = decoded.map_err(|e| e.to_string())?;
    let r = &sealed.chunk;
    if chunk.stream_id != r.stream_id
        || chunk.incarnation != r.incarnation
        || chunk.first_offset != r.first_offset
        || chunk.first_offset + chunk.record_count != r.end_offset
    {
        return Err("the chunk is not the one the index describes".into());
    }
    Ok(chunk)
}

async fn get_range(
    ctx: &ShardCtx,
    path: &object_store::path::Path,
    range: std::ops::Range<u64>,
) -> Result<Bytes, EngineError> {
    let store: &Arc<dyn ObjectStore> = &ctx.env.store;
    let retry = &ctx.config.store_retry;
    let result = super::io::with_retries(retry, || {
        object_store::ObjectStoreExt::get_range(store.as_ref(), path, range.clone())
    })
    .await;
    match result {
        Ok(bytes) => Ok(bytes),
        Err(object_store::Error::NotFound { .. }) => {
            Err(EngineError::corrupt(path, "the segment object is missing"))
        }
        Err(e) => Err(EngineError::store(&e)),
    }
}
