//! [`ChunkCache`]: sealed chunks on local disk, one file each, memory-mapped
//! when read, evicted least-recently-used beyond a byte budget, plus the
//! decoded chunks kept in memory (least-recently-used beyond 64 MiB, counting
//! what decoding holds beside the bytes: directory, page handles, key index) and the
//! map of fetches in flight that readers share. Cached bytes are validated
//! again whenever they are decoded from the file, so a damaged cache file is
//! dropped, never served; chunks never change, so a decoded chunk stays
//! right. Fetching and validating chunks is `tiers.rs`'s; this file knows
//! nothing of shards (docs/ARCHITECTURE.md, "Reads").

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::{BoxFuture, Shared};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use strata_segments::segment::Chunk;

use hex::encode as hex;

struct CacheEntry {
    bytes: u64,
    tick: u64,
}

#[derive(Default)]
struct CacheState {
    entries: HashMap<String, CacheEntry>,
    by_tick: BTreeMap<u64, String>,
    bytes: u64,
    tick: u64,
}

/// Decoded chunks kept in memory, least recently used first out: a chunk read
/// again skips mapping its file, its CRC and its directory parse. Chunks never
/// change, so an entry stays right for as long as a read can ask for it.
#[derive(Default)]
struct DecodedChunks {
    entries: HashMap<String, (Arc<Chunk>, u64, u64)>,
    by_tick: BTreeMap<u64, String>,
    bytes: u64,
    tick: u64,
}

/// Bytes of chunks the decoded memo holds, at most.
const DECODED_BYTES_MAX: u64 = 64 << 20;

/// A chunk fetch in flight: its bytes once fetched and validated, `None` if
/// it failed.
pub(super) type ChunkFetch = Shared<BoxFuture<'static, Option<Bytes>>>;

/// How readers found the chunks they asked for, since the cache was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheCounts {
    /// Found decoded in memory.
    pub memory_hits: u64,
    /// Found on local disk.
    pub disk_hits: u64,
    /// Fetched from the store (or joined to a fetch in flight).
    pub misses: u64,
    /// Bytes the disk cache holds now.
    pub used_bytes: u64,
}

#[derive(Debug, Default)]
pub(super) struct CacheCountsCell {
    pub(super) memory_hits: AtomicU64,
    pub(super) disk_hits: AtomicU64,
    pub(super) misses: AtomicU64,
}

impl CacheCountsCell {
    pub(super) fn count(counter: &AtomicU64) {
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A bounded, least-recently-used cache of chunks on local disk.
pub struct ChunkCache {
    dir: PathBuf,
    max_bytes: u64,
    state: Mutex<CacheState>,
    pub(super) in_flight: Mutex<HashMap<String, ChunkFetch>>,
    decoded: Mutex<DecodedChunks>,
    pub(super) read_ahead_bytes: AtomicU64,
    /// How reads found their chunks (see [`CacheCounts`]).
    pub(super) counts: CacheCountsCell,
    /// Woken whenever a fetch leaves `in_flight`.
    pub(super) fetch_settled: tokio::sync::Notify,
}

impl std::fmt::Debug for ChunkCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkCache")
            .field("dir", &self.dir)
            .field("max_bytes", &self.max_bytes)
            .finish()
    }
}

impl ChunkCache {
    /// A cache in `dir` (emptied first: entries are not trusted across runs).
    pub fn new(dir: PathBuf, max_bytes: u64) -> std::io::Result<Self> {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        Ok(ChunkCache {
            dir,
            max_bytes,
            state: Mutex::new(CacheState::default()),
            in_flight: Mutex::new(HashMap::new()),
            decoded: Mutex::new(DecodedChunks::default()),
            read_ahead_bytes: AtomicU64::new(0),
            counts: CacheCountsCell::default(),
            fetch_settled: tokio::sync::Notify::new(),
        })
    }

    /// Whether `key` is cached (without touching its recency).
    pub(super) fn contains(&self, key: &str) -> bool {
        self.state.lock().entries.contains_key(key)
    }

    pub(super) fn in_flight(&self, key: &str) -> Option<ChunkFetch> {
        self.in_flight.lock().get(key).cloned()
    }

    fn file(&self, key: &str) -> PathBuf {
        self.dir.join(hex(&Sha256::digest(key.as_bytes())[..16]))
    }

    /// Cached bytes, memory-mapped; `None` on a miss.
    pub fn get(&self, key: &str) -> Option<Bytes> {
        {
            let mut st = self.state.lock();
            let tick = st.tick + 1;
            st.tick = tick;
            let old = st
                .entries
                .get_mut(key)
                .map(|e| std::mem::replace(&mut e.tick, tick))?;
            st.by_tick.remove(&old);
            st.by_tick.insert(tick, key.to_string());
        }
        let file = std::fs::File::open(self.file(key)).ok()?;
        // SAFETY: cache files are written whole before they are published by
        // rename and never modified in place; eviction unlinks them, which
        // leaves existing mappings valid.
        let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
        Some(Bytes::from_owner(map))
    }

    /// A chunk decoded before (and its recency renewed).
    pub(super) fn decoded(&self, key: &str) -> Option<Arc<Chunk>> {
        let mut memo = self.decoded.lock();
        let tick = memo.tick + 1;
        memo.tick = tick;
        let (chunk, old) = memo
            .entries
            .get_mut(key)
            .map(|e| (e.0.clone(), std::mem::replace(&mut e.2, tick)))?;
        // The recency list's own copy of the key moves to the new tick.
        let name = memo.by_tick.remove(&old).unwrap_or_else(|| key.to_string());
        memo.by_tick.insert(tick, name);
        Some(chunk)
    }

    /// Keeps a decoded chunk of `encoded_bytes` bytes, counted with what its
    /// decoding holds beside them (directory, page handles, key index:
    /// [`Chunk::decoded_bytes_max`]), evicting the least recently used ones
    /// beyond [`DECODED_BYTES_MAX`].
    pub(super) fn remember(&self, key: &str, chunk: Arc<Chunk>, encoded_bytes: u64) {
        let bytes = encoded_bytes.saturating_add(chunk.decoded_bytes_max());
        if bytes > DECODED_BYTES_MAX {
            return;
        }
        let mut memo = self.decoded.lock();
        let tick = memo.tick + 1;
        memo.tick = tick;
        if let Some((_, old_bytes, old_tick)) =
            memo.entries.insert(key.to_string(), (chunk, bytes, tick))
        {
            memo.by_tick.remove(&old_tick);
            memo.bytes -= old_bytes;
        }
        memo.by_tick.insert(tick, key.to_string());
        memo.bytes += bytes;
        while memo.bytes > DECODED_BYTES_MAX {
            let Some((_, oldest)) = memo.by_tick.pop_first() else {
                break;
            };
            if let Some((_, b, _)) = memo.entries.remove(&oldest) {
                memo.bytes -= b;
            }
        }
    }

    pub fn remove(&self, key: &str) {
        {
            let mut memo = self.decoded.lock();
            if let Some((_, b, tick)) = memo.entries.remove(key) {
                memo.by_tick.remove(&tick);
                memo.bytes -= b;
            }
        }
        let mut st = self.state.lock();
        if let Some(e) = st.entries.remove(key) {
            st.by_tick.remove(&e.tick);
            st.bytes -= e.bytes;
        }
        let _ = std::fs::remove_file(self.file(key));
    }

    pub fn put(&self, key: &str, bytes: &Bytes) {
        let len = bytes.len() as u64;
        if len > self.max_bytes {
            return;
        }
        let path = self.file(key);
        let staging = path.with_extension("tmp");
        if std::fs::write(&staging, bytes).is_err() || std::fs::rename(&staging, &path).is_err() {
            let _ = std::fs::remove_file(&staging);
            return;
        }
        let mut evict = Vec::new();
        {
            let mut st = self.state.lock();
            let tick = st.tick + 1;
            st.tick = tick;
            if let Some(old) = st
                .entries
                .insert(key.to_string(), CacheEntry { bytes: len, tick })
            {
                st.by_tick.remove(&old.tick);
                st.bytes -= old.bytes;
            }
            st.by_tick.insert(tick, key.to_string());
            st.bytes += len;
            while st.bytes > self.max_bytes {
                let Some((_, victim)) = st.by_tick.pop_first() else {
                    break;
                };
                if let Some(e) = st.entries.remove(&victim) {
                    st.bytes -= e.bytes;
                }
                evict.push(victim);
            }
        }
        for victim in evict {
            let _ = std::fs::remove_file(self.file(&victim));
        }
    }

    /// Returns once no fetch is in flight: every chunk fetched so far (by a
    /// reader or ahead of one) is in the cache, or failed.
    pub async fn settled(&self) {
        loop {
            let notified = self.fetch_settled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.in_flight.lock().is_empty() {
                return;
            }
            notified.await;
        }
    }

    /// How reads found their chunks, and the bytes held.
    pub fn counts(&self) -> CacheCounts {
        let load = |c: &AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        CacheCounts {
            memory_hits: load(&self.counts.memory_hits),
            disk_hits: load(&self.counts.disk_hits),
            misses: load(&self.counts.misses),
            used_bytes: self.used_bytes(),
        }
    }

    pub fn used_bytes(&self) -> u64 {
        self.state.lock().bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(first_offset: u64) -> Arc<Chunk> {
        Arc::new(Chunk::new(
            [0; 16],
            1,
            first_offset,
            1,
            Vec::new(),
            Vec::new(),
        ))
    }

    #[test]
    fn decoded_chunks_are_kept_within_their_budget() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ChunkCache::new(dir.path().join("cache"), 1 << 30).unwrap();
        let third = DECODED_BYTES_MAX / 3 + 1;
        cache.remember("a", chunk(1), third);
        cache.remember("b", chunk(2), third);
        assert_eq!(cache.decoded("a").unwrap().first_offset, 1); // a is now newer
        cache.remember("c", chunk(3), third);
        assert!(
            cache.decoded("b").is_none(),
            "least recently used goes first"
        );
        assert!(cache.decoded("a").is_some() && cache.decoded("c").is_some());
        cache.remember("huge", chunk(4), DECODED_BYTES_MAX + 1);
        assert!(
            cache.decoded("huge").is_none(),
            "a chunk over the budget is not kept"
        );
        cache.remove("a");
        assert!(
            cache.decoded("a").is_none(),
            "removal forgets the decoded chunk"
        );
        assert!(cache.decoded.lock().bytes <= DECODED_BYTES_MAX);
    }

    /// A chunk of many small pages holds more in its directory, page
    /// handles and key index than in its bytes: the budget counts them.
    #[test]
    fn a_decoded_chunks_directory_and_key_index_count_against_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ChunkCache::new(dir.path().join("cache"), 1 << 30).unwrap();
        let pages = 200_000;
        let entry = strata_segments::segment::DirectoryEntry {
            first_offset: 0,
            record_count: 1,
            append_start: true,
            position: 0,
            length: 1,
            routing_key_hash: 0,
        };
        let many = |first_offset| {
            Arc::new(Chunk::new(
                [0; 16],
                1,
                first_offset,
                pages as u64,
                vec![entry.clone(); pages],
                Vec::new(),
            ))
        };
        let counted = many(0).decoded_bytes_max();
        let directory =
            (pages * std::mem::size_of::<strata_segments::segment::DirectoryEntry>()) as u64;
        let key_index = strata_segments::key_index::KeyIndex::bytes_max(pages) as u64;
        assert!(counted >= directory + key_index);
        cache.remember("a", many(0), 1);
        assert_eq!(cache.decoded.lock().bytes, counted + 1);
        // Their encoded bytes alone (1 each) would keep every one of them.
        let fit = DECODED_BYTES_MAX / (counted + 1);
        for n in 1..=fit + 1 {
            cache.remember(&format!("c{n}"), many(n), 1);
        }
        assert!(cache.decoded.lock().bytes <= DECODED_BYTES_MAX);
        assert!(cache.decoded("a").is_none(), "the oldest went to make room");
    }

    #[test]
    fn lru_evicts_beyond_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ChunkCache::new(dir.path().join("cache"), 250).unwrap();
        cache.put("a", &Bytes::from(vec![1u8; 100]));
        cache.put("b", &Bytes::from(vec![2u8; 100]));
        assert_eq!(cache.get("a").unwrap()[0], 1); // a is now newer than b
        cache.put("c", &Bytes::from(vec![3u8; 100]));
        assert!(cache.get("b").is_none(), "least recently used goes first");
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        assert!(cache.used_bytes() <= 250);
        cache.remove("a");
        assert!(cache.get("a").is_none());
    }
}
