//! Segments, seals, index runs and garbage collection, end to end through the
//! engine: bounded recovery, routing-key skipping (counted with a recording
//! store), damaged chunks, reclamation, pinned reads and the idle cost.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStore;
use strata_engine::layout::{ImmutableKind, ShardLayout};
use strata_engine::shard::ChunkCache;
use strata_engine::store::{Layered, RequestCounts, StoreLayer, StoreOp};
use strata_engine::{
    AppendRequest, EngineEnv, EngineError, InstanceId, ReadLimits, Shard, ShardConfig, ShardName,
    StreamRef,
};
use strata_manifest::{CasObject, Manifest, ManifestCodec, RetryPolicy};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};
use tokio::sync::Notify;

fn cipher() -> Arc<StreamCipher> {
    Arc::new(StreamCipher::new(
        StreamEpoch([7; 16]),
        StreamKey::from_bytes([1; 32]),
    ))
}

fn stream(n: u8) -> StreamRef {
    StreamRef {
        id: [n; 16],
        incarnation: 1,
    }
}

fn shard_name() -> ShardName {
    ShardName::new("s0").unwrap()
}

fn layout() -> ShardLayout {
    ShardLayout::new(shard_name())
}

/// Seals only when asked (or at shutdown); garbage waits `grace`.
fn manual(grace: Duration) -> ShardConfig {
    ShardConfig {
        seal_bytes: u64::MAX,
        seal_objects: u64::MAX,
        seal_age: Duration::from_secs(24 * 3600),
        gc_grace: grace,
        ..ShardConfig::default()
    }
}

async fn open(store: &Arc<dyn ObjectStore>, instance: u8, config: ShardConfig) -> Shard {
    Shard::open(
        EngineEnv::production(store.clone()),
        shard_name(),
        InstanceId([instance; 16]),
        config,
    )
    .await
    .unwrap()
}

async fn create(shard: &Shard, s: StreamRef) {
    shard.create_stream(s, &cipher()).await.unwrap();
}

async fn append(shard: &Shard, s: StreamRef, key: &str, texts: &[String]) {
    let mut request = AppendRequest::new(
        s,
        cipher(),
        texts.iter().map(|t| Bytes::from(t.clone())).collect(),
    );
    request.routing_key = Bytes::from(key.to_string());
    shard.append(request).await.unwrap();
}

/// Every record of a stream from `from`, in reads of at most `limits`.
async fn read_all(
    shard: &Shard,
    s: &StreamRef,
    from: u64,
    limits: ReadLimits,
    key: Option<&str>,
) -> Result<Vec<(u64, String)>, EngineError> {
    let mut out = Vec::new();
    let mut at = from;
    for _ in 0..100_000 {
        let batch = shard
            .read(s, at, limits, &cipher(), key.map(str::as_bytes))
            .await?;
        out.extend(
            batch
                .records
                .iter()
                .map(|r| (r.offset, String::from_utf8(r.payload.to_vec()).unwrap())),
        );
        at = batch.next_offset;
        if batch.up_to_date() {
            return Ok(out);
        }
    }
    panic!("read did not finish");
}

async fn manifest(store: &Arc<dyn ObjectStore>) -> Manifest {
    CasObject::<ManifestCodec>::new(store.clone(), layout().manifest(), RetryPolicy::default())
        .load()
        .await
        .unwrap()
        .unwrap()
        .value
}

async fn names(store: &Arc<dyn ObjectStore>, prefix: &Path) -> Vec<Path> {
    store
        .list(Some(prefix))
        .map_ok(|m| m.location)
        .try_collect()
        .await
        .unwrap()
}

/// A store that counts the requests reaching `inner`.
fn counted(inner: Arc<dyn ObjectStore>) -> (Arc<dyn ObjectStore>, Arc<RequestCounts>) {
    let layered = Layered::new(inner, RequestCounts::default());
    let counts = layered.layer().clone();
    (Arc::new(layered), counts)
}

fn texts(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}-{i}")).collect()
}

#[tokio::test]
async fn sealed_and_unsealed_tiers_read_as_one_log_across_reopens() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1, manual(Duration::from_secs(600))).await;
    let s = stream(1);
    create(&shard, s).await;
    let mut expected = Vec::new();
    for round in 0..5 {
        let batch = texts(&format!("r{round}"), 0..7);
        append(&shard, s, "", &batch[..3]).await;
        append(&shard, s, "", &batch[3..]).await;
        expected.extend(batch);
        if round < 4 {
            shard.seal_now().await.unwrap();
        }
    }
    let want: Vec<(u64, String)> = expected
        .iter()
        .enumerate()
        .map(|(i, t)| (i as u64, t.clone()))
        .collect();
    let tiny = ReadLimits {
        max_records: 2,
        max_bytes: 10,
    };
    for from in [0, 1, 6, 7, 20, 27, 34, 35] {
        let got = read_all(&shard, &s, from, tiny, None).await.unwrap();
        assert_eq!(got, want[from as usize..], "small reads from {from}");
        let got = read_all(&shard, &s, from, ReadLimits::default(), None)
            .await
            .unwrap();
        assert_eq!(got, want[from as usize..], "whole reads from {from}");
    }
    let m = manifest(&store).await;
    assert_eq!(m.segments.len(), 4, "one segment per seal");
    assert_eq!(
        m.index_runs.len(),
        4,
        "one run per seal, fewer than the merge limit"
    );
    shard.crash();

    let reopened = open(&store, 2, manual(Duration::from_secs(600))).await;
    let report = reopened.last_recovery();
    assert_eq!(
        report.data_objects_applied, 2,
        "only the two appends after the last seal are replayed"
    );
    let got = read_all(&reopened, &s, 0, tiny, None).await.unwrap();
    assert_eq!(got, want);
    // More appends continue the same log.
    append(&reopened, s, "", &texts("after", 0..2)).await;
    reopened.seal_now().await.unwrap();
    let got = read_all(&reopened, &s, 33, ReadLimits::default(), None)
        .await
        .unwrap();
    let mut tail = want[33..].to_vec();
    tail.extend([(35, "after-0".to_string()), (36, "after-1".to_string())]);
    assert_eq!(got, tail);
}

#[tokio::test]
async fn recovery_after_100k_appends_replays_only_the_objects_since_the_last_seal() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let latency = strata_engine::store::with_latency(
        memory.clone(),
        strata_engine::store::Latency {
            put: Duration::from_millis(2),
            get: Duration::from_millis(1),
            other: Duration::from_millis(1),
        },
    );
    let (store, counts) = counted(latency);
    let config = ShardConfig::default();
    let seal_objects = config.seal_objects;
    let shard = open(&store, 1, config.clone()).await;
    const STREAMS: u8 = 16;
    const APPENDERS: usize = 128;
    const APPENDS: usize = 100_000;
    for n in 0..STREAMS {
        create(&shard, stream(n)).await;
    }
    let mut tasks = tokio::task::JoinSet::new();
    for a in 0..APPENDERS {
        let shard = shard.clone();
        tasks.spawn(async move {
            for i in 0..APPENDS / APPENDERS {
                let s = stream(((a + i) % STREAMS as usize) as u8);
                let request =
                    AppendRequest::new(s, cipher(), vec![Bytes::from(format!("{a}-{i}"))]);
                shard.append(request).await.unwrap();
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.unwrap();
    }
    let written = counts.snapshot().puts;
    let total: u64 = (0..STREAMS)
        .map(|n| shard.stream_info(&stream(n)).unwrap().tail.next_offset)
        .sum();
    assert_eq!(total, (APPENDS / APPENDERS * APPENDERS) as u64);
    shard.crash();

    let m = manifest(&memory).await;
    let since_seal = names(&memory, &layout().wal_prefix())
        .await
        .iter()
        .filter_map(|p| layout().parse_wal_slot(p))
        .filter(|&slot| slot >= m.replay.slot)
        .count() as u64;
    let reopened = open(&store, 2, config).await;
    let report = reopened.last_recovery();
    assert_eq!(
        report.wal_objects_applied, since_seal,
        "exactly the objects after the replay point are replayed"
    );
    assert!(
        report.data_objects_applied <= 2 * seal_objects,
        "{} data objects replayed; seals every {seal_objects}",
        report.data_objects_applied
    );
    assert!(
        written > 8 * seal_objects,
        "the run wrote {written} objects"
    );
    let total: u64 = (0..STREAMS)
        .map(|n| reopened.stream_info(&stream(n)).unwrap().tail.next_offset)
        .sum();
    assert_eq!(total, (APPENDS / APPENDERS * APPENDERS) as u64);
    // Spot-check one stream end to end through both tiers.
    let got = read_all(&reopened, &stream(3), 0, ReadLimits::default(), None)
        .await
        .unwrap();
    assert_eq!(
        got.len() as u64,
        reopened.stream_info(&stream(3)).unwrap().tail.next_offset
    );
}

#[tokio::test]
async fn a_routing_key_read_fetches_only_chunks_whose_summary_admits_the_key() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (store, counts) = counted(memory.clone());
    let shard = open(&store, 1, manual(Duration::from_secs(600))).await;
    let s = stream(1);
    create(&shard, s).await;
    // Twelve seals; seal i holds key k(i % 4), and seal 5 also holds k1.
    let mut expected_k1 = Vec::new();
    let mut offset = 0u64;
    for i in 0..12 {
        let key = format!("k{}", i % 4);
        let batch = texts(&format!("{key}-s{i}"), 0..3);
        append(&shard, s, &key, &batch).await;
        if key == "k1" {
            expected_k1.extend((offset..offset + 3).zip(batch.iter().cloned()));
        }
        offset += 3;
        if i == 5 {
            let extra = texts("k1-extra", 0..2);
            append(&shard, s, "k1", &extra).await;
            expected_k1.extend((offset..offset + 2).zip(extra));
            offset += 2;
        }
        shard.seal_now().await.unwrap();
    }
    // Unsealed pages are filtered too.
    append(&shard, s, "k1", &texts("k1-tail", 0..1)).await;
    expected_k1.push((offset, "k1-tail-0".into()));
    append(&shard, s, "k2", &texts("k2-tail", 0..1)).await;

    let admitting = 3; // the chunks of seals 1, 5 and 9
    let before = counts.snapshot();
    let got = read_all(&shard, &s, 0, ReadLimits::default(), Some("k1"))
        .await
        .unwrap();
    let gets = counts.snapshot().gets - before.gets;
    assert_eq!(got, expected_k1);
    assert_eq!(
        gets, admitting,
        "one GET per chunk holding k1, none for the others"
    );

    // A key no chunk holds costs no GET at all.
    let before = counts.snapshot();
    let got = read_all(&shard, &s, 0, ReadLimits::default(), Some("absent"))
        .await
        .unwrap();
    assert!(got.is_empty());
    assert_eq!(counts.snapshot().gets, before.gets);

    // Without a key every chunk is fetched.
    let before = counts.snapshot();
    let all = read_all(&shard, &s, 0, ReadLimits::default(), None)
        .await
        .unwrap();
    assert_eq!(all.len() as u64, offset + 2);
    assert_eq!(counts.snapshot().gets - before.gets, 12);
}

/// A keyed read looks past other keys' data instead of stopping at
/// `max_bytes` of it: a rare key spread over many chunks (and unsealed pages)
/// full of another key's records comes back in one read, at the offsets a
/// full read gives it, and the read ends at the tail.
#[tokio::test]
async fn a_keyed_read_looks_past_other_keys_data_in_one_read() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1, manual(Duration::from_secs(600))).await;
    let s = stream(1);
    create(&shard, s).await;
    // Incompressible: each round's chunk is bigger than `max_bytes` below.
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let bulk: Vec<String> = (0..64)
        .map(|_| {
            (0..13)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    format!("{state:016x}")
                })
                .collect()
        })
        .collect();
    for round in 0..10 {
        append(&shard, s, "bulk", &bulk).await;
        append(&shard, s, "rare", &[format!("rare-{round}")]).await;
        if round < 8 {
            shard.seal_now().await.unwrap();
        }
    }
    append(&shard, s, "bulk", &bulk).await;
    let limits = ReadLimits {
        max_records: 10_000,
        max_bytes: 4096,
    };
    let batch = shard
        .read(&s, 0, limits, &cipher(), Some(b"rare".as_slice()))
        .await
        .unwrap();
    let got: Vec<(u64, String)> = batch
        .records
        .iter()
        .map(|r| (r.offset, String::from_utf8(r.payload.to_vec()).unwrap()))
        .collect();
    let expected: Vec<(u64, String)> = (0..10u64)
        .map(|round| (round * 65 + 64, format!("rare-{round}")))
        .collect();
    assert_eq!(got, expected, "8 sealed chunks and 2 rounds unsealed");
    assert!(
        batch.up_to_date(),
        "the read moved past the bulk to the tail"
    );
    assert_eq!(batch.next_offset, 10 * 65 + 64);
    // A full read still stops at about `max_bytes` of records.
    let full = shard.read(&s, 0, limits, &cipher(), None).await.unwrap();
    assert!(full.records.len() < 64 && !full.up_to_date());
}

/// A chunk with more routing keys than an exact summary lists gets a bloom
/// filter; its index run must load on reopen and key reads still filter.
#[tokio::test]
async fn many_key_chunks_reload_from_their_run_and_still_filter() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&memory, 1, manual(Duration::from_secs(600))).await;
    let s = stream(1);
    create(&shard, s).await;
    for k in 0..100 {
        append(
            &shard,
            s,
            &format!("key-{k}"),
            &texts(&format!("v{k}"), 0..2),
        )
        .await;
    }
    shard.seal_now().await.unwrap();
    append(&shard, s, "other", &texts("o", 0..2)).await;
    shard.seal_now().await.unwrap();
    shard.shutdown().await;

    let (store, counts) = counted(memory.clone());
    let reopened = open(&store, 2, manual(Duration::from_secs(600))).await;
    assert_eq!(reopened.sealed_chunks(&s), 2);
    let before = counts.snapshot().gets;
    let got = read_all(&reopened, &s, 0, ReadLimits::default(), Some("key-42"))
        .await
        .unwrap();
    assert_eq!(got, vec![(84, "v42-0".into()), (85, "v42-1".into())]);
    assert_eq!(
        counts.snapshot().gets - before,
        1,
        "only the many-key chunk is fetched"
    );
}

#[tokio::test]
async fn the_chunk_cache_serves_repeated_reads_without_gets() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (store, counts) = counted(memory.clone());
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(ChunkCache::new(dir.path().join("cache"), 64 << 20).unwrap());
    let config = ShardConfig {
        chunk_cache: Some(cache.clone()),
        ..manual(Duration::from_secs(600))
    };
    let shard = open(&store, 1, config).await;
    let s = stream(1);
    create(&shard, s).await;
    for i in 0..3 {
        append(&shard, s, "", &texts(&format!("c{i}"), 0..50)).await;
        shard.seal_now().await.unwrap();
    }
    let first = read_all(&shard, &s, 0, ReadLimits::default(), None)
        .await
        .unwrap();
    let after_first = counts.snapshot().gets;
    let second = read_all(&shard, &s, 0, ReadLimits::default(), None)
        .await
        .unwrap();
    assert_eq!(first, second);
    assert_eq!(
        counts.snapshot().gets,
        after_first,
        "warm reads make no GET"
    );
    // Written to disk off the runtime: once every fetch has settled.
    cache.settled().await;
    assert!(cache.used_bytes() > 0);
}

/// One consumer catching up chunk by chunk: each read starts fetches of the
/// next chunks, a later read waits for the fetch in flight instead of issuing
/// its own GET, so every chunk is fetched exactly once and several GETs
/// overlap (the latency store makes the overlap necessary for the count).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catch_up_read_fetches_the_next_chunks_ahead_once_each() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (counted_store, counts) = counted(memory.clone());
    let store = strata_engine::store::with_latency(
        counted_store,
        strata_engine::store::Latency {
            put: Duration::ZERO,
            get: Duration::from_millis(30),
            other: Duration::ZERO,
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(ChunkCache::new(dir.path().join("cache"), 64 << 20).unwrap());
    let config = ShardConfig {
        chunk_cache: Some(cache.clone()),
        ..manual(Duration::from_secs(600))
    };
    // Written and sealed through a shard without the cache.
    let writer = open(&memory, 1, manual(Duration::from_secs(600))).await;
    let s = stream(1);
    create(&writer, s).await;
    const CHUNKS: usize = 10;
    for i in 0..CHUNKS {
        append(&writer, s, "", &texts(&format!("c{i}"), 0..50)).await;
        writer.seal_now().await.unwrap();
    }
    writer.shutdown().await;
    let reader = open(&store, 2, config).await;
    assert_eq!(reader.sealed_chunks(&s), CHUNKS);
    let gets_at_open = counts.snapshot().gets;
    // One chunk per read (a read returns at least one record).
    let one_chunk = ReadLimits {
        max_records: usize::MAX,
        max_bytes: 1,
    };
    let first = reader
        .read(&s, 0, one_chunk, &cipher(), None)
        .await
        .unwrap();
    assert!(first.next_offset > 0);
    // The next chunks arrive without another read: the one read above plus
    // READ_AHEAD_CHUNKS (4) fetched ahead of it.
    cache.settled().await;
    assert_eq!(
        counts.snapshot().gets - gets_at_open,
        5,
        "no chunk was fetched ahead"
    );
    let records = read_all(&reader, &s, 0, one_chunk, None).await.unwrap();
    assert_eq!(records.len(), CHUNKS * 50);
    assert_eq!(
        counts.snapshot().gets - gets_at_open,
        CHUNKS as u64,
        "each chunk is fetched once, by the reader or ahead of it"
    );
}

#[tokio::test]
async fn a_damaged_chunk_is_a_clear_error_naming_its_object() {
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().to_str().unwrap().to_string();
    let store =
        strata_engine::store::open_store(&url, &strata_engine::store::StoreOptions::default())
            .unwrap();
    let shard = open(&store, 1, manual(Duration::from_secs(600))).await;
    let s = stream(1);
    create(&shard, s).await;
    append(&shard, s, "", &texts("precious", 0..20)).await;
    shard.seal_now().await.unwrap();
    shard.shutdown().await;
    let segments = names(&store, &layout().immutable_prefix(ImmutableKind::Segment)).await;
    assert_eq!(segments.len(), 1);
    let file = dir.path().join(segments[0].as_ref());
    let mut bytes = std::fs::read(&file).unwrap();
    let middle = bytes.len() / 3;
    bytes[middle] ^= 0x40;
    std::fs::write(&file, bytes).unwrap();

    let reopened = open(&store, 2, manual(Duration::from_secs(600))).await;
    let error = read_all(&reopened, &s, 0, ReadLimits::default(), None)
        .await
        .unwrap_err();
    match &error {
        EngineError::Corrupt { object, .. } => {
            assert!(object.contains(segments[0].as_ref()), "{error}")
        }
        other => panic!("expected a damage error, got {other}"),
    }
    // The stream's metadata is intact; only the damaged data is refused.
    assert_eq!(reopened.stream_info(&s).unwrap().tail.next_offset, 20);
}

/// Waits (in virtual time) until `done` holds.
async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..10_000 {
        if done().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("never happened: {what}");
}

#[tokio::test(start_paused = true)]
async fn garbage_collection_reclaims_old_wal_merged_runs_and_dead_segments() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let grace = Duration::from_secs(600);
    let config = ShardConfig {
        max_index_runs: 2,
        ..manual(grace)
    };
    let shard = open(&memory, 1, config.clone()).await;
    let (keep, doomed) = (stream(1), stream(2));
    create(&shard, keep).await;
    create(&shard, doomed).await;
    // The doomed stream's data sits alone in the first segment.
    append(&shard, doomed, "", &texts("doomed", 0..10)).await;
    shard.seal_now().await.unwrap();
    let doomed_segment = manifest(&memory).await.segments[0].id;
    for round in 0..4 {
        append(&shard, keep, "", &texts(&format!("keep{round}"), 0..5)).await;
        shard.seal_now().await.unwrap();
    }
    shard.delete_stream(doomed).await.unwrap();
    shard.seal_now().await.unwrap();

    let m = manifest(&memory).await;
    assert!(
        m.index_runs.len() <= 2,
        "runs are merged: {:?}",
        m.index_runs
    );
    assert!(
        !m.segments.iter().any(|s| s.id == doomed_segment),
        "the dead segment left the manifest"
    );
    // Nothing is deleted before the grace period…
    let all_wal = names(&memory, &layout().wal_prefix()).await.len();
    tokio::time::sleep(grace / 2).await;
    assert_eq!(names(&memory, &layout().wal_prefix()).await.len(), all_wal);
    // …and afterwards exactly what the manifest no longer needs is gone.
    eventually("garbage collected", || {
        let memory = memory.clone();
        async move { only_referenced_objects_remain(&memory).await }
    })
    .await;
    assert!(shard.gc_deleted_objects() > 0);

    // The shard re-opens from what is left, with every live record.
    shard.crash();
    let reopened = open(&memory, 2, config).await;
    let got = read_all(&reopened, &keep, 0, ReadLimits::default(), None)
        .await
        .unwrap();
    assert_eq!(got.len(), 20);
    assert!(reopened.stream_info(&doomed).is_none());
}

/// Whether the store holds exactly what its manifest references: its runs and
/// segments, WAL objects from the replay point, and below it only tiny
/// tombstones in fence windows.
async fn only_referenced_objects_remain(store: &Arc<dyn ObjectStore>) -> bool {
    let m = manifest(store).await;
    let ids = |kind: ImmutableKind| async move {
        names(store, &layout().immutable_prefix(kind))
            .await
            .iter()
            .filter_map(|p| layout().parse_object_id(p, kind))
            .map(|id| id.0)
            .collect::<BTreeSet<u64>>()
    };
    let runs = ids(ImmutableKind::IndexRun).await;
    let segments = ids(ImmutableKind::Segment).await;
    let stale_wal = store
        .list(Some(&layout().wal_prefix()))
        .try_collect::<Vec<_>>()
        .await
        .unwrap()
        .into_iter()
        .filter(|meta| {
            let slot = layout().parse_wal_slot(&meta.location).unwrap();
            let in_window = m.fence_windows.iter().any(|w| w.contains(slot));
            slot < m.replay.slot && !(in_window && meta.size < 1024)
        })
        .count();
    runs == m.index_runs.iter().map(|r| r.id).collect::<BTreeSet<_>>()
        && segments == m.segments.iter().map(|s| s.id).collect::<BTreeSet<_>>()
        && stale_wal == 0
}

/// Holds GETs (or, with `puts`, PUTs) of segment objects while `hold` is set.
#[derive(Debug, Default)]
struct HoldSegmentGets {
    hold: AtomicBool,
    puts: bool,
    reached: Notify,
    release: Notify,
}

#[async_trait]
impl StoreLayer for HoldSegmentGets {
    async fn before(&self, op: StoreOp, location: Option<&Path>) -> object_store::Result<()> {
        let segment = location.is_some_and(|p| p.as_ref().contains("/seg/"));
        let held = if self.puts {
            StoreOp::Put
        } else {
            StoreOp::Get
        };
        if op == held && segment && self.hold.load(Ordering::SeqCst) {
            self.reached.notify_one();
            self.release.notified().await;
        }
        Ok(())
    }
}

#[tokio::test(start_paused = true)]
async fn a_read_in_progress_keeps_the_segment_it_needs() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let layered = Layered::new(memory.clone(), HoldSegmentGets::default());
    let gate = layered.layer().clone();
    let store: Arc<dyn ObjectStore> = Arc::new(layered);
    let shard = open(&store, 1, manual(Duration::ZERO)).await;
    let s = stream(1);
    create(&shard, s).await;
    append(&shard, s, "", &texts("held", 0..10)).await;
    shard.seal_now().await.unwrap();

    gate.hold.store(true, Ordering::SeqCst);
    let reader = {
        let shard = shard.clone();
        tokio::spawn(async move { read_all(&shard, &s, 0, ReadLimits::default(), None).await })
    };
    gate.reached.notified().await;
    // While the read waits for its chunk, the stream is deleted and its
    // segment becomes garbage with no grace at all.
    shard.delete_stream(s).await.unwrap();
    shard.seal_now().await.unwrap();
    let segment_prefix = layout().immutable_prefix(ImmutableKind::Segment);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        names(&memory, &segment_prefix).await.len(),
        1,
        "the pinned segment survives"
    );
    gate.hold.store(false, Ordering::SeqCst);
    gate.release.notify_one();
    let got = reader.await.unwrap().unwrap();
    assert_eq!(
        got.len(),
        10,
        "the read that started before the delete completes"
    );
    eventually("unpinned segment collected", || {
        let memory = memory.clone();
        let prefix = segment_prefix.clone();
        async move { names(&memory, &prefix).await.is_empty() }
    })
    .await;
}

/// `seal_now` while a seal that covers everything is running returns when
/// that seal ends (it used to wait for some later change).
#[tokio::test(start_paused = true)]
async fn seal_now_during_a_seal_returns_when_it_lands() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let layered = Layered::new(
        memory.clone(),
        HoldSegmentGets {
            puts: true,
            ..Default::default()
        },
    );
    let gate = layered.layer().clone();
    let store: Arc<dyn ObjectStore> = Arc::new(layered);
    let shard = open(&store, 1, manual(Duration::from_secs(600))).await;
    let s = stream(1);
    create(&shard, s).await;
    append(&shard, s, "", &texts("x", 0..10)).await;
    gate.hold.store(true, Ordering::SeqCst);
    let first = {
        let shard = shard.clone();
        tokio::spawn(async move { shard.seal_now().await })
    };
    gate.reached.notified().await;
    let second = {
        let shard = shard.clone();
        tokio::spawn(async move { shard.seal_now().await })
    };
    // Let the second request reach the shard before the seal goes on.
    tokio::time::sleep(Duration::from_secs(1)).await;
    gate.hold.store(false, Ordering::SeqCst);
    gate.release.notify_one();
    first.await.unwrap().unwrap();
    tokio::time::timeout(Duration::from_secs(3600), second)
        .await
        .expect("the second seal_now returns")
        .unwrap()
        .unwrap();
    assert_eq!(shard.unsealed_bytes(), 0);
}

#[tokio::test(start_paused = true)]
async fn an_idle_shard_makes_no_requests() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (store, counts) = counted(memory.clone());
    // Default thresholds: the age trigger seals what the appends left.
    let shard = open(&store, 1, ShardConfig::default()).await;
    for n in 0..50 {
        create(&shard, stream(n)).await;
        append(&shard, stream(n), "", &texts("x", 0..3)).await;
    }
    // Let the age trigger seal and the grace period pass.
    let config = ShardConfig::default();
    tokio::time::sleep(config.seal_age + config.gc_grace + Duration::from_secs(60)).await;
    assert!(
        shard.unsealed_bytes() == 0,
        "the age trigger sealed everything"
    );
    let before = counts.snapshot();
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert_eq!(counts.snapshot(), before, "an idle hour costs no request");
}

#[tokio::test]
async fn a_graceful_shutdown_seals_so_the_next_open_replays_no_data() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&memory, 1, ShardConfig::default()).await;
    let s = stream(1);
    create(&shard, s).await;
    append(&shard, s, "", &texts("bye", 0..5)).await;
    shard.shutdown().await;
    let reopened = open(&memory, 2, ShardConfig::default()).await;
    assert_eq!(reopened.last_recovery().data_objects_applied, 0);
    let got = read_all(&reopened, &s, 0, ReadLimits::default(), None)
        .await
        .unwrap();
    assert_eq!(got.len(), 5);
}

/// An open's sweep (a listing of each of the shard's folders) waits at
/// least `sweep_delay`: right after a claim the store serves the shard's first
/// appends (and, in a failover, the other claims), and what the sweep finds
/// waits `gc_grace` anyway. It still runs, and still collects what an older
/// owner left.
#[tokio::test(start_paused = true)]
async fn an_open_sweeps_after_its_delay_and_still_collects() {
    let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let first = open(&memory, 1, manual(Duration::from_secs(600))).await;
    let s = stream(1);
    create(&first, s).await;
    append(&first, s, "", &texts("x", 0..5)).await;
    first.seal_now().await.unwrap();
    // The old owner dies before collecting what its seal left (its grace
    // period had not passed).
    first.crash();
    assert!(!only_referenced_objects_remain(&memory).await);
    let delay = Duration::from_secs(10);
    let config = ShardConfig {
        sweep_delay: delay,
        ..manual(Duration::ZERO)
    };
    let (store, counts) = counted(memory.clone());
    let second = open(&store, 2, config).await;
    let after_open = counts.snapshot().lists;
    tokio::time::sleep(delay - Duration::from_secs(1)).await;
    assert_eq!(
        counts.snapshot().lists,
        after_open,
        "no sweep before its delay"
    );
    assert!(!only_referenced_objects_remain(&memory).await);
    eventually("the sweep collected the old owner's garbage", || {
        let memory = memory.clone();
        async move { only_referenced_objects_remain(&memory).await }
    })
    .await;
    assert!(
        counts.snapshot().lists >= after_open + 3,
        "the sweep listed wal/, index/ and seg/"
    );
    assert_eq!(second.stream_info(&s).unwrap().tail.next_offset, 5);
}
