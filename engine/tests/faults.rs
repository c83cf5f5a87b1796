//! Defects around the write path, each forced with a store layer that holds or
//! reorders one kind of call: a seal's manifest write that lands after it was
//! given up, garbage collection by an owner an operator's rollback replaced,
//! requests in flight when their owner is fenced, floods of entries without
//! pages, and WAL limits checked before the PUT task.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, PutResult};
use parking_lot::Mutex;
use strata_engine::admin::repair::{rollback, RepairOptions, RepairOutcome};
use strata_engine::consumer::durable::{ConsumerChange, ConsumerSetup};
use strata_engine::consumer::ConsumerConfig;
use strata_engine::layout::ShardLayout;
use strata_engine::store::{Layered, StoreLayer};
use strata_engine::{
    AppendRequest, EngineEnv, EngineError, InstanceId, ProducerClaim, ReadLimits, Shard,
    ShardConfig, ShardName, ShardStatus, StreamRef,
};
use strata_manifest::{CasObject, Manifest, ManifestCodec, RetryPolicy};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};
use tokio::sync::Notify;

fn cipher() -> Arc<StreamCipher> {
    Arc::new(StreamCipher::new(
        StreamEpoch([5; 16]),
        StreamKey::from_bytes([2; 32]),
    ))
}

const STREAM: StreamRef = StreamRef {
    id: [4; 16],
    incarnation: 1,
};

fn shard_name() -> ShardName {
    ShardName::new("f0").unwrap()
}

/// Seals only when asked; store retries are short.
fn manual() -> ShardConfig {
    ShardConfig {
        seal_bytes: u64::MAX,
        seal_objects: u64::MAX,
        seal_age: Duration::from_secs(24 * 3600),
        store_retry: RetryPolicy {
            attempts: 3,
            initial_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(20),
        },
        reopen_backoff_max: Duration::from_millis(50),
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

fn request(texts: &[&str]) -> AppendRequest {
    AppendRequest::new(
        STREAM,
        cipher(),
        texts.iter().map(|t| Bytes::from(t.to_string())).collect(),
    )
}

async fn append(shard: &Shard, texts: &[&str]) -> Result<(), EngineError> {
    shard.append(request(texts)).await.map(|_| ())
}

async fn read_all(shard: &Shard) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = 0;
    for _ in 0..10_000 {
        let batch = shard
            .read(&STREAM, at, ReadLimits::default(), &cipher(), None)
            .await
            .unwrap();
        out.extend(
            batch
                .records
                .iter()
                .map(|r| String::from_utf8(r.payload.to_vec()).unwrap()),
        );
        at = batch.next_offset;
        if batch.up_to_date() {
            return out;
        }
    }
    panic!("read did not finish");
}

async fn manifest(store: &Arc<dyn ObjectStore>) -> Manifest {
    CasObject::<ManifestCodec>::new(
        store.clone(),
        ShardLayout::new(shard_name()).manifest(),
        RetryPolicy::default(),
    )
    .load()
    .await
    .unwrap()
    .unwrap()
    .value
}

/// Waits (in paused time, at most `rounds` × 10 ms) until `shard` is active.
async fn until_active(shard: &Shard, rounds: u32) -> ShardStatus {
    for _ in 0..rounds {
        if shard.status() == ShardStatus::Active {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shard.status()
}

// ------------------------------------------------------------ late manifest

/// While armed, every conditional manifest replace is answered with a
/// time-out and held; `land` performs the held writes later, in order.
#[derive(Debug, Default)]
struct LateManifest {
    armed: AtomicBool,
    held: Mutex<Vec<(Path, PutPayload, PutOptions)>>,
}

#[async_trait]
impl StoreLayer for LateManifest {
    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let is_replace = matches!(opts.mode, PutMode::Update(_));
        if self.armed.load(Ordering::SeqCst)
            && is_replace
            && location.as_ref().ends_with("manifest")
        {
            self.held.lock().push((location.clone(), payload, opts));
            return Err(object_store::Error::Generic {
                store: "LateManifest",
                source: "request timed out".into(),
            });
        }
        inner.put_opts(location, payload, opts).await
    }
}

impl LateManifest {
    async fn land(&self, inner: &Arc<dyn ObjectStore>) -> usize {
        let held = std::mem::take(&mut *self.held.lock());
        let mut landed = 0;
        for (path, payload, opts) in held {
            if inner.put_opts(&path, payload, opts).await.is_ok() {
                landed += 1;
            }
        }
        landed
    }
}

/// A seal's manifest write times out on every attempt, the seal is given up,
/// then the write lands. The next seal's compare-and-swap meets that write of
/// its own owner: the owner must re-open from the store, never fence itself.
#[tokio::test(start_paused = true)]
async fn a_seal_write_that_lands_after_its_time_out_does_not_fence_the_owner() {
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let layered = Layered::new(inner.clone(), LateManifest::default());
    let late = layered.layer().clone();
    let store: Arc<dyn ObjectStore> = Arc::new(layered);
    let shard = open(&store, 1, manual()).await;
    shard.create_stream(STREAM, &cipher()).await.unwrap();
    append(&shard, &["a"]).await.unwrap();

    late.armed.store(true, Ordering::SeqCst);
    assert!(
        shard.seal_now().await.is_err(),
        "every manifest write timed out"
    );
    late.armed.store(false, Ordering::SeqCst);
    let before = manifest(&inner).await.version;
    assert_eq!(late.land(&inner).await, 1, "the first held write lands");
    assert_eq!(manifest(&inner).await.version, before + 1);

    append(&shard, &["b"]).await.unwrap();
    // This seal's CAS meets the late write: the owner re-opens.
    let _ = shard.seal_now().await;
    assert_eq!(
        until_active(&shard, 500).await,
        ShardStatus::Active,
        "a late write of the owner's own must not fence it"
    );
    append(&shard, &["c"]).await.unwrap();
    shard.seal_now().await.unwrap();
    assert_eq!(read_all(&shard).await, ["a", "b", "c"]);
    shard.crash();
    let next = open(&store, 2, manual()).await;
    assert_eq!(read_all(&next).await, ["a", "b", "c"]);
}

// ------------------------------------------------- collection after rollback

/// An owner keeps running, idle, after an operator rolled the shard back to an
/// older retained version. When its garbage's grace ends it must find that it
/// no longer owns the shard and delete nothing the restored manifest lists.
#[tokio::test(start_paused = true)]
async fn an_owner_replaced_by_a_rollback_deletes_nothing_when_its_grace_ends() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let config = ShardConfig {
        gc_grace: Duration::from_secs(5),
        // Every seal after the first is a full run replacing the older ones.
        max_index_runs: 1,
        ..manual()
    };
    let a = open(&store, 1, config).await;
    a.create_stream(STREAM, &cipher()).await.unwrap();
    append(&a, &["one", "two"]).await.unwrap();
    a.seal_now().await.unwrap();
    let first = manifest(&store).await;
    assert_eq!(first.index_runs.len(), 1);
    append(&a, &["three"]).await.unwrap();
    a.seal_now().await.unwrap();
    let second = manifest(&store).await;
    assert_ne!(
        second.index_runs, first.index_runs,
        "a full run replaced the first"
    );

    let report = rollback(
        &EngineEnv::production(store.clone()),
        &shard_name(),
        first.version,
        InstanceId([9; 16]),
        RepairOptions {
            force: true,
            accept_loss: true,
            dry_run: false,
            ..repair_options()
        },
    )
    .await
    .unwrap();
    assert_eq!(report.outcome, RepairOutcome::Done);
    let restored = manifest(&store).await;
    assert!(
        restored
            .index_runs
            .iter()
            .any(|r| first.index_runs.contains(r)),
        "the restored manifest lists the first run again"
    );

    // Owner A's grace ends: it must check ownership first.
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(a.gc_deleted_objects(), 0, "the old owner deleted objects");
    assert_eq!(a.status(), ShardStatus::Fenced);
    let next = open(&store, 3, manual()).await;
    assert_eq!(read_all(&next).await, ["one", "two", "three"]);
}

// --------------------------------------------------- in flight at the fence

/// What to do with the next WAL PUTs, in order.
#[derive(Debug, Clone, Copy)]
enum WalHold {
    /// Store the object now, hold the answer until released.
    Answer,
    /// Hold the write itself until released.
    Write,
    /// Store the object now and answer an error (the answer was lost).
    LoseAnswer,
}

/// Holds the next WAL PUTs as planned, each until its own release.
#[derive(Debug, Default)]
struct WalGate {
    plan: Mutex<VecDeque<(WalHold, Arc<Notify>)>>,
    reached: Notify,
    /// Every WAL PUT that is not held takes this long.
    latency: Duration,
}

impl WalGate {
    /// Plans a hold of the next unplanned WAL PUT; returns its release.
    fn hold(&self, kind: WalHold) -> Arc<Notify> {
        let release = Arc::new(Notify::new());
        self.plan.lock().push_back((kind, release.clone()));
        release
    }
}

#[async_trait]
impl StoreLayer for WalGate {
    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let hold = if location.as_ref().contains("/wal/") {
            self.plan.lock().pop_front()
        } else {
            None
        };
        match hold {
            None => {
                tokio::time::sleep(self.latency).await;
                inner.put_opts(location, payload, opts).await
            }
            Some((WalHold::Answer, release)) => {
                let result = inner.put_opts(location, payload, opts).await;
                self.reached.notify_one();
                release.notified().await;
                result
            }
            Some((WalHold::Write, release)) => {
                self.reached.notify_one();
                release.notified().await;
                inner.put_opts(location, payload, opts).await
            }
            Some((WalHold::LoseAnswer, _)) => {
                inner.put_opts(location, payload, opts).await?;
                Err(object_store::Error::Generic {
                    store: "WalGate",
                    source: "the answer was lost".into(),
                })
            }
        }
    }
}

/// Owner A has two WAL objects in flight: the first stored (its answer
/// delayed), the second not yet. Owner B opens, walks the first (its records
/// are B's now) and fences the second's slot. A must answer the first's
/// request "outcome unknown" (it is durable; a client that retries it as new
/// would duplicate it) and the second's "fenced" (certainly not written).
#[tokio::test]
async fn requests_in_flight_at_a_fence_are_outcome_unknown_unless_after_it() {
    let layered = Layered::new(Arc::new(InMemory::new()), WalGate::default());
    let gate = layered.layer().clone();
    let store: Arc<dyn ObjectStore> = Arc::new(layered);
    let config = ShardConfig {
        pipeline_depth: 4,
        pipeline_min_bytes: 0,
        ..manual()
    };
    let a = open(&store, 1, config).await;
    a.create_stream(STREAM, &cipher()).await.unwrap();
    let answer = gate.hold(WalHold::Answer);
    let write = gate.hold(WalHold::Write);
    let first = tokio::spawn({
        let a = a.clone();
        async move { a.append(request(&["stored"])).await }
    });
    gate.reached.notified().await;
    let second = tokio::spawn({
        let a = a.clone();
        async move { a.append(request(&["held"])).await }
    });
    gate.reached.notified().await;

    let b = open(&store, 2, manual()).await;
    assert_eq!(read_all(&b).await, ["stored"], "B walked the stored object");
    // The held write meets B's fence; then the held answer arrives.
    write.notify_one();
    let second = second.await.unwrap();
    answer.notify_one();
    let first = first.await.unwrap();
    assert_eq!(second, Err(EngineError::Fenced));
    assert_eq!(first, Err(EngineError::OutcomeUnknown));
    assert_eq!(a.status(), ShardStatus::Fenced);
    assert_eq!(read_all(&b).await, ["stored"]);
}

/// A fenced owner still shuts down when asked: its actor stops (nothing is
/// left to flush) instead of waiting for commands forever.
#[tokio::test]
async fn a_fenced_owner_shuts_down() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let a = open(&store, 1, manual()).await;
    a.create_stream(STREAM, &cipher()).await.unwrap();
    let _b = open(&store, 2, manual()).await;
    assert_eq!(append(&a, &["late"]).await, Err(EngineError::Fenced));
    assert_eq!(a.status(), ShardStatus::Fenced);
    tokio::time::timeout(Duration::from_secs(10), a.shutdown())
        .await
        .expect("the fenced owner's shutdown returns");
}

/// While switched on, every store call fails.
#[derive(Debug, Default)]
struct Outage {
    on: AtomicBool,
}

#[async_trait]
impl StoreLayer for Outage {
    async fn before(
        &self,
        _op: strata_engine::store::StoreOp,
        _location: Option<&Path>,
    ) -> object_store::Result<()> {
        if self.on.load(Ordering::SeqCst) {
            return Err(object_store::Error::Generic {
                store: "Outage",
                source: "the store is out".into(),
            });
        }
        Ok(())
    }
}

/// An owner re-opening through a store outage still shuts down when asked,
/// within one back-off, instead of retrying the store forever.
#[tokio::test(start_paused = true)]
async fn an_owner_reopening_through_an_outage_shuts_down() {
    let layered = Layered::new(Arc::new(InMemory::new()), Outage::default());
    let outage = layered.layer().clone();
    let store: Arc<dyn ObjectStore> = Arc::new(layered);
    let shard = open(&store, 1, manual()).await;
    shard.create_stream(STREAM, &cipher()).await.unwrap();
    outage.on.store(true, Ordering::SeqCst);
    assert_eq!(
        append(&shard, &["lost"]).await,
        Err(EngineError::OutcomeUnknown)
    );
    assert_eq!(shard.status(), ShardStatus::Recovering);
    tokio::time::timeout(Duration::from_secs(10), shard.shutdown())
        .await
        .expect("the shutdown of a re-opening owner returns");
    assert_eq!(shard.status(), ShardStatus::Stopped);
}

/// Owner A's PUT lands but its answer is lost; before A's retry, owner B
/// opens (its log takes A's object), seals and tombstones the slot. A's
/// retry meets B's tombstone: A must not answer "fenced" (not written) — the
/// record is in B's log — but "outcome unknown".
#[tokio::test(start_paused = true)]
async fn a_retry_that_meets_a_tombstone_over_its_own_landed_write_is_outcome_unknown() {
    let layered = Layered::new(Arc::new(InMemory::new()), WalGate::default());
    let gate = layered.layer().clone();
    let store: Arc<dyn ObjectStore> = Arc::new(layered);
    let a = open(&store, 1, manual()).await;
    a.create_stream(STREAM, &cipher()).await.unwrap();
    let _first = gate.hold(WalHold::LoseAnswer);
    let retry = gate.hold(WalHold::Write);
    let appended = tokio::spawn({
        let a = a.clone();
        async move { a.append(request(&["landed"])).await }
    });
    gate.reached.notified().await;
    let b = open(
        &store,
        2,
        ShardConfig {
            gc_grace: Duration::ZERO,
            ..manual()
        },
    )
    .await;
    assert_eq!(read_all(&b).await, ["landed"], "B's log took A's object");
    b.seal_now().await.unwrap();
    for _ in 0..1000 {
        if b.gc_deleted_objects() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        b.gc_deleted_objects() > 0,
        "B collected the slots it sealed"
    );
    retry.notify_one();
    assert_eq!(appended.await.unwrap(), Err(EngineError::OutcomeUnknown));
    assert_eq!(read_all(&b).await, ["landed"]);
}

// ------------------------------------------------------ entries without pages

/// Creates carry no page bytes. Queued behind a slow PUT, a flood of them is
/// still cut into objects within the entry limit, and each is answered.
#[tokio::test]
async fn a_flood_of_creates_behind_a_slow_put_is_cut_by_entry_count() {
    let layered = Layered::new(Arc::new(InMemory::new()), WalGate::default());
    let gate = layered.layer().clone();
    let store: Arc<dyn ObjectStore> = Arc::new(layered);
    let config = ShardConfig {
        pipeline_depth: 1,
        max_object_entries: 4,
        ..manual()
    };
    let shard = open(&store, 1, config).await;
    let release = gate.hold(WalHold::Write);
    let slow = tokio::spawn({
        let shard = shard.clone();
        async move { shard.create_stream(STREAM, &cipher()).await }
    });
    gate.reached.notified().await;
    let creates: Vec<_> = (0..30u8)
        .map(|i| {
            let shard = shard.clone();
            tokio::spawn(async move {
                let stream = StreamRef {
                    id: [100 + i; 16],
                    incarnation: 1,
                };
                shard.create_stream(stream, &cipher()).await
            })
        })
        .collect();
    // Let every create reach the committer before the slow PUT returns.
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    release.notify_one();
    slow.await.unwrap().unwrap();
    for create in creates {
        create.await.unwrap().unwrap();
    }
    let wal: Vec<_> = store
        .list(Some(&ShardLayout::new(shard_name()).wal_prefix()))
        .map_ok(|m| m.location)
        .try_collect()
        .await
        .unwrap();
    let mut data_objects = 0;
    for path in wal {
        let bytes = store.get(&path).await.unwrap().bytes().await.unwrap();
        let object = strata_wal::decode(&bytes).unwrap();
        assert!(
            object.entries.len() <= 4,
            "{path}: {} entries",
            object.entries.len()
        );
        data_objects += usize::from(!object.entries.is_empty());
    }
    assert!(
        data_objects >= 31 / 4,
        "{data_objects} data objects for 31 creates"
    );
}

// ------------------------------------------------------ consumer changes

fn configure_consumer() -> ConsumerChange {
    ConsumerChange::Configure {
        generation: 1,
        setup: ConsumerSetup {
            config: ConsumerConfig {
                visibility_ms: 30_000,
                max_attempts: 3,
                max_batch: 10,
            },
            settings: Bytes::from_static(br#"{"maxAttempts":3}"#),
        },
    }
}

/// The pump's rule for urgent batches, in paused time (a PUT that is not
/// issued shows as a 5 s time-out that costs no wall time), with PUTs that
/// take 25 ms. A consumer change is a client's round trip (a pull's leases, a
/// settle): while the PUT ahead is young its batch goes behind it at once,
/// carrying whatever was staged with it. A small append waits for the PUT
/// ahead instead, to share the next object with the appends its answer
/// wakes. So does a consumer change once the PUTs ahead are older than three
/// quarters of a PUT: acknowledgements go in issue order, so going sooner
/// would save it less than a quarter of a PUT and cost an object.
#[tokio::test(start_paused = true)]
async fn a_consumer_change_goes_behind_a_young_put_in_flight_where_a_small_append_waits() {
    let gate = WalGate {
        latency: Duration::from_millis(25),
        ..WalGate::default()
    };
    let layered = Layered::new(Arc::new(InMemory::new()), gate);
    let gate = layered.layer().clone();
    let store: Arc<dyn ObjectStore> = Arc::new(layered);
    let config = ShardConfig {
        pipeline_depth: 4,
        pipeline_min_bytes: 16 << 10,
        ..manual()
    };
    let shard = open(&store, 1, config).await;
    shard.create_stream(STREAM, &cipher()).await.unwrap();
    let spawn_append = |text: &'static str| {
        let shard = shard.clone();
        tokio::spawn(async move { append(&shard, &[text]).await })
    };
    let spawn_change = |name: &'static str| {
        let shard = shard.clone();
        tokio::spawn(async move {
            shard
                .change_consumer(STREAM, name, &configure_consumer())
                .await
        })
    };
    let issued = || tokio::time::timeout(Duration::from_secs(5), gate.reached.notified());

    let releases = [
        gate.hold(WalHold::Write),
        gate.hold(WalHold::Write),
        gate.hold(WalHold::Write),
    ];
    let held = spawn_append("held");
    issued().await.expect("the first append is issued");
    let young = spawn_change("young");
    issued()
        .await
        .expect("a consumer change waited for a young PUT in flight");
    let small = spawn_append("small");
    assert!(
        issued().await.is_err(),
        "a small append went behind the PUTs in flight"
    );
    let late = spawn_change("late");
    assert!(
        issued().await.is_err(),
        "a consumer change went behind PUTs almost done"
    );

    for release in &releases {
        release.notify_one();
    }
    issued()
        .await
        .expect("the waiting batch goes once the PUTs ahead are answered");
    held.await.unwrap().unwrap();
    small.await.unwrap().unwrap();
    young.await.unwrap().unwrap();
    late.await.unwrap().unwrap();
    assert_eq!(read_all(&shard).await, ["held", "small"]);
    for name in ["young", "late"] {
        assert!(shard.consumer(&STREAM, name).is_some(), "{name}");
    }
}

#[test]
fn the_default_entry_cut_is_the_formats_limit() {
    assert_eq!(
        ShardConfig::default().max_object_entries,
        strata_wal::ENTRIES_MAX
    );
}

// -------------------------------------------------------- limits at the API

/// A producer id the WAL cannot hold is refused by `append` itself; it never
/// reaches the PUT task, where it would fail the group commit it shares.
#[tokio::test]
async fn an_over_long_producer_id_is_refused_before_it_can_fail_a_group_commit() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1, manual()).await;
    shard.create_stream(STREAM, &cipher()).await.unwrap();
    let mut bad = request(&["bad"]);
    bad.producer = Some(ProducerClaim {
        id: "p".repeat(strata_wal::PRODUCER_ID_BYTES_MAX + 1),
        epoch: 0,
        seq: 0,
        digest: [0; 16],
    });
    let mut long_seq = request(&["bad"]);
    long_seq.stream_seq = Some(Bytes::from(vec![
        b'9';
        strata_wal::STREAM_SEQ_BYTES_MAX + 1
    ]));
    let (good, bad, long_seq) = tokio::join!(
        shard.append(request(&["good"])),
        shard.append(bad),
        shard.append(long_seq)
    );
    assert!(good.is_ok(), "{good:?}");
    assert!(
        matches!(
            bad,
            Err(EngineError::TooLarge {
                what: "producer id",
                ..
            })
        ),
        "{bad:?}"
    );
    assert!(
        matches!(
            long_seq,
            Err(EngineError::TooLarge {
                what: "Stream-Seq",
                ..
            })
        ),
        "{long_seq:?}"
    );
    assert_eq!(shard.status(), ShardStatus::Active);
    assert_eq!(read_all(&shard).await, ["good"]);
}

// -------------------------------------------------- repairs undo no change

fn repair_options() -> RepairOptions {
    RepairOptions {
        force: true,
        accept_loss: false,
        dry_run: false,
        live_window: Duration::from_secs(60),
        quiesce: Duration::from_secs(1),
    }
}

/// A close is acknowledged and sealed, and the WAL object that held it is
/// collected. Rolling back to the version before the close recovers every
/// record, but would open the stream again: the rollback must refuse.
#[tokio::test(start_paused = true)]
async fn a_rollback_that_would_undo_an_acknowledged_close_is_refused() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let config = ShardConfig {
        gc_grace: Duration::from_millis(10),
        ..manual()
    };
    let a = open(&store, 1, config).await;
    a.create_stream(STREAM, &cipher()).await.unwrap();
    append(&a, &["one", "two"]).await.unwrap();
    a.seal_now().await.unwrap();
    let before_close = manifest(&store).await.version;
    a.close_stream(STREAM, cipher()).await.unwrap();
    a.seal_now().await.unwrap();
    // The WAL object holding the close is garbage now: let it be collected.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(a.gc_deleted_objects() > 0);
    a.shutdown().await;

    let report = rollback(
        &EngineEnv::production(store.clone()),
        &shard_name(),
        before_close,
        InstanceId([9; 16]),
        repair_options(),
    )
    .await
    .unwrap();
    assert!(
        matches!(report.outcome, RepairOutcome::Refused(_)),
        "{:?}",
        report.outcome
    );
    assert!(
        report.lost.is_empty(),
        "no record is lost: {:?}",
        report.lost
    );
    assert!(!report.lost_changes.is_empty());
    let next = open(&store, 3, manual()).await;
    assert!(next.stream_info(&STREAM).unwrap().tail.status == strata_engine::StreamStatus::Closed);
}

/// The newest index run is damaged and the WAL objects it sealed are
/// collected: no retained version can vouch for what the run held (here a
/// close), so recovery refuses rather than restore an older state silently.
#[tokio::test(start_paused = true)]
async fn recovery_from_a_damaged_run_whose_wal_was_collected_is_refused() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let config = ShardConfig {
        gc_grace: Duration::from_millis(10),
        ..manual()
    };
    let a = open(&store, 1, config).await;
    a.create_stream(STREAM, &cipher()).await.unwrap();
    append(&a, &["one"]).await.unwrap();
    a.seal_now().await.unwrap();
    a.close_stream(STREAM, cipher()).await.unwrap();
    a.seal_now().await.unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    a.shutdown().await;
    let newest_run = manifest(&store).await.index_runs.last().copied().unwrap();
    let layout = ShardLayout::new(shard_name());
    store
        .put(
            &layout.index_run(strata_engine::layout::ObjectId(newest_run.id)),
            PutPayload::from_static(b"garbage\n"),
        )
        .await
        .unwrap();
    let report = strata_engine::admin::repair::recover(
        &EngineEnv::production(store.clone()),
        &shard_name(),
        InstanceId([9; 16]),
        repair_options(),
    )
    .await
    .unwrap();
    assert!(
        matches!(report.outcome, RepairOutcome::Refused(_)),
        "{:?}",
        report.outcome
    );
    assert!(!report.lost_changes.is_empty());
}
