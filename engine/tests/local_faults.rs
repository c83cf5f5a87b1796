//! A shard on the local-directory store whose fsyncs fail (the store's test
//! fault hooks): nothing is acknowledged on a read-back alone after a failed
//! fsync, and every acknowledged record survives a crash and a new owner.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::ObjectStore;
use strata_engine::store::{local_store, FsyncFaults, SyncPoint, SyncWrite};
use strata_engine::{
    AppendRequest, EngineEnv, EngineError, InstanceId, ReadLimits, Shard, ShardConfig, ShardName,
    StreamRef,
};
use strata_manifest::{CasObject, ManifestCodec, RetryPolicy};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

const STREAM: StreamRef = StreamRef {
    id: [3; 16],
    incarnation: 1,
};

fn cipher() -> Arc<StreamCipher> {
    Arc::new(StreamCipher::new(
        StreamEpoch([2; 16]),
        StreamKey::from_bytes([8; 32]),
    ))
}

fn config() -> ShardConfig {
    ShardConfig {
        seal_bytes: u64::MAX,
        seal_objects: u64::MAX,
        seal_age: Duration::from_secs(3600),
        store_retry: RetryPolicy {
            attempts: 5,
            initial_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(50),
        },
        reopen_backoff_max: Duration::from_millis(50),
        ..ShardConfig::default()
    }
}

struct Local {
    _dir: tempfile::TempDir,
    store: Arc<dyn ObjectStore>,
    faults: Arc<FsyncFaults>,
}

fn local() -> Local {
    let dir = tempfile::tempdir().unwrap();
    let layered = local_store(dir.path()).unwrap();
    let faults = layered.layer().fsync_faults().clone();
    Local {
        _dir: dir,
        store: Arc::new(layered),
        faults,
    }
}

async fn open(store: &Arc<dyn ObjectStore>, instance: u8) -> Result<Shard, EngineError> {
    Shard::open(
        EngineEnv::production(store.clone()),
        ShardName::new("s0").unwrap(),
        InstanceId([instance; 16]),
        config(),
    )
    .await
}

async fn append(shard: &Shard, text: &str) -> Result<(), EngineError> {
    shard
        .append(AppendRequest::new(
            STREAM,
            cipher(),
            vec![Bytes::from(text.to_string())],
        ))
        .await
        .map(|_| ())
}

/// Appends once the shard takes appends again: a shard re-opening after a
/// failed write refuses them (`Unavailable`, nothing written) until it is
/// active.
async fn append_when_active(shard: &Shard, text: &str) -> Result<(), EngineError> {
    for _ in 0..2_000 {
        match append(shard, text).await {
            Err(EngineError::Unavailable { .. }) => {
                tokio::time::sleep(Duration::from_millis(5)).await
            }
            other => return other,
        }
    }
    panic!("the shard never became active again");
}

async fn read_all(shard: &Shard) -> Vec<String> {
    let mut out = Vec::new();
    let mut from = 0;
    loop {
        let batch = shard
            .read(&STREAM, from, ReadLimits::default(), &cipher(), None)
            .await
            .unwrap();
        out.extend(
            batch
                .records
                .iter()
                .map(|r| String::from_utf8(r.payload.to_vec()).unwrap()),
        );
        from = batch.next_offset;
        if batch.up_to_date() {
            return out;
        }
    }
}

/// What a new owner reads must hold every acknowledged record, in order;
/// anything else it holds is one of the records whose outcome was unknown.
async fn assert_new_owner_serves(
    store: &Arc<dyn ObjectStore>,
    acked: &[String],
    unknown: &[String],
) {
    let shard = open(store, 200).await.unwrap();
    let read = read_all(&shard).await;
    let kept: Vec<&String> = read.iter().filter(|r| acked.contains(r)).collect();
    assert_eq!(kept, acked.iter().collect::<Vec<_>>(), "read {read:?}");
    assert!(
        read.iter()
            .all(|r| acked.contains(r) || unknown.contains(r)),
        "read {read:?}"
    );
    shard.shutdown().await;
}

/// The engine's WAL PUT meets a published object whose directory fsync
/// failed twice: the append answers `OutcomeUnknown` (the store said
/// `DurabilityUnknown`), never Ok on a read-back of its own write id; the
/// owner re-claims, and every acknowledged record is served.
#[tokio::test]
async fn a_wal_object_whose_fsync_failed_is_not_acknowledged() {
    let local = local();
    let shard = open(&local.store, 1).await.unwrap();
    shard.create_stream(STREAM, &cipher()).await.unwrap();
    let mut acked = Vec::new();
    for i in 0..5 {
        let text = format!("before-{i}");
        append(&shard, &text).await.unwrap();
        acked.push(text);
    }
    local.faults.fail(SyncWrite::Create, SyncPoint::Dir, 1, 2);
    let unknown = append(&shard, "unknown").await;
    assert_eq!(unknown, Err(EngineError::OutcomeUnknown));
    assert!(local.faults.spent());
    for i in 0..5 {
        let text = format!("after-{i}");
        append_when_active(&shard, &text).await.unwrap();
        acked.push(text);
    }
    assert_eq!(shard.last_recovery().epoch, 2, "re-claimed once");
    shard.crash();
    assert_new_owner_serves(&local.store, &acked, &["unknown".to_string()]).await;
}

/// A directory fsync that fails once and succeeds when synced again is a
/// durable write: it is acknowledged.
#[tokio::test]
async fn a_wal_object_synced_on_the_second_try_is_acknowledged() {
    let local = local();
    let shard = open(&local.store, 1).await.unwrap();
    shard.create_stream(STREAM, &cipher()).await.unwrap();
    local.faults.fail(SyncWrite::Create, SyncPoint::Dir, 1, 1);
    append(&shard, "synced twice").await.unwrap();
    assert_eq!(local.faults.injected(), 1);
    assert_eq!(shard.last_recovery().epoch, 1, "no re-claim");
    shard.crash();
    assert_new_owner_serves(&local.store, &["synced twice".to_string()], &[]).await;
}

/// A claim whose manifest write's durability is unknown does not open the
/// shard (it was not read back as written); the next open claims again, from
/// that manifest, with one more epoch, and serves everything acknowledged.
#[tokio::test]
async fn a_claim_whose_manifest_fsync_failed_does_not_open() {
    let local = local();
    let first = open(&local.store, 1).await.unwrap();
    first.create_stream(STREAM, &cipher()).await.unwrap();
    append(&first, "one").await.unwrap();
    first.crash();
    local.faults.fail(SyncWrite::Replace, SyncPoint::Dir, 1, 2);
    let failed = open(&local.store, 2).await;
    assert!(
        matches!(failed, Err(EngineError::Store { .. })),
        "{:?}",
        failed.as_ref().err()
    );
    let manifest = CasObject::<ManifestCodec>::new(
        local.store.clone(),
        strata_engine::layout::ShardLayout::new(ShardName::new("s0").unwrap()).manifest(),
        RetryPolicy::default(),
    );
    let written = manifest.load().await.unwrap().unwrap();
    assert_eq!(written.value.writer.epoch, 2, "the write reached the store");
    let second = open(&local.store, 2).await.unwrap();
    assert_eq!(second.last_recovery().epoch, 3);
    append(&second, "two").await.unwrap();
    second.crash();
    assert_new_owner_serves(&local.store, &["one".into(), "two".into()], &[]).await;
}

/// After a failed WAL write the owner re-claims; when that re-claim's
/// manifest write has unknown durability, the next attempt finds the
/// manifest of its own later epoch and claims again from it (a fresh,
/// durable write) instead of adopting it.
#[tokio::test]
async fn a_reclaim_of_unknown_durability_claims_again() {
    let local = local();
    let shard = open(&local.store, 1).await.unwrap();
    shard.create_stream(STREAM, &cipher()).await.unwrap();
    append(&shard, "one").await.unwrap();
    local.faults.fail(SyncWrite::Create, SyncPoint::Dir, 1, 2);
    local.faults.fail(SyncWrite::Replace, SyncPoint::Dir, 1, 2);
    assert_eq!(
        append(&shard, "unknown").await,
        Err(EngineError::OutcomeUnknown)
    );
    append_when_active(&shard, "two").await.unwrap();
    assert!(local.faults.spent());
    assert_eq!(
        shard.last_recovery().epoch,
        3,
        "claimed again from the manifest of unknown durability"
    );
    shard.crash();
    assert_new_owner_serves(
        &local.store,
        &["one".into(), "two".into()],
        &["unknown".into()],
    )
    .await;
}
