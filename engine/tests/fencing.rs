//! Fencing under interleavings that need precise timing, forced with a gate
//! that holds a store call until the test releases it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, PutOptions, PutPayload, PutResult};
use strata_engine::store::{Layered, StoreLayer, StoreOp};
use strata_engine::{
    AppendRequest, EngineEnv, EngineError, InstanceId, ReadLimits, Shard, ShardConfig, ShardName,
    StreamRef,
};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};
use tokio::sync::Notify;

/// Holds the first LIST after it is armed until released.
#[derive(Debug, Default)]
struct ListGate {
    armed: AtomicBool,
    reached: Notify,
    release: Notify,
}

#[async_trait]
impl StoreLayer for ListGate {
    async fn before(&self, op: StoreOp, _location: Option<&Path>) -> object_store::Result<()> {
        if op == StoreOp::List && self.armed.swap(false, Ordering::SeqCst) {
            self.reached.notify_one();
            self.release.notified().await;
        }
        Ok(())
    }
}

fn cipher() -> Arc<StreamCipher> {
    Arc::new(StreamCipher::new(
        StreamEpoch([1; 16]),
        StreamKey::from_bytes([1; 32]),
    ))
}

const STREAM: StreamRef = StreamRef {
    id: [9; 16],
    incarnation: 1,
};

async fn open(store: Arc<dyn ObjectStore>, instance: u8) -> Result<Shard, EngineError> {
    Shard::open(
        EngineEnv::production(store),
        ShardName::new("gate").unwrap(),
        InstanceId([instance; 16]),
        ShardConfig::default(),
    )
    .await
}

/// Owner A claims, then stalls before listing the WAL; owner B claims after it,
/// walks and fences. When A resumes, its walk meets B's newer fence: A must
/// stop as fenced, not fence after B and acknowledge writes B's successors
/// would skip as stale.
#[tokio::test]
async fn an_owner_that_walks_into_a_newer_fence_is_fenced() {
    let gated = Layered::new(Arc::new(InMemory::new()), ListGate::default());
    let gate = gated.layer().clone();
    let store: Arc<dyn ObjectStore> = Arc::new(gated);

    let first = open(store.clone(), 1).await.unwrap();
    first.create_stream(STREAM, &cipher()).await.unwrap();
    first
        .append(AppendRequest::new(
            STREAM,
            cipher(),
            vec![Bytes::from_static(b"one")],
        ))
        .await
        .unwrap();
    first.crash();

    gate.armed.store(true, Ordering::SeqCst);
    let slow = tokio::spawn(open(store.clone(), 2));
    gate.reached.notified().await; // A has claimed and is stalled at its LIST
    let fast = open(store.clone(), 3).await.unwrap();
    gate.release.notify_one();
    let slow = slow.await.unwrap();
    assert_eq!(slow.err(), Some(EngineError::Fenced));

    fast.append(AppendRequest::new(
        STREAM,
        cipher(),
        vec![Bytes::from_static(b"two")],
    ))
    .await
    .unwrap();
    let read = fast
        .read(&STREAM, 0, ReadLimits::default(), &cipher(), None)
        .await
        .unwrap();
    let payloads: Vec<&[u8]> = read.records.iter().map(|r| r.payload.as_ref()).collect();
    assert_eq!(payloads, [b"one".as_ref(), b"two".as_ref()]);
}

/// When armed, answers the next WAL PUT `AlreadyExists` without storing it,
/// as if the slot had been taken and then deleted before it was read back.
#[derive(Debug, Default)]
struct WalSlotTakenThenGone {
    armed: AtomicBool,
}

#[async_trait]
impl StoreLayer for WalSlotTakenThenGone {
    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        if location.as_ref().contains("/wal/") && self.armed.swap(false, Ordering::SeqCst) {
            return Err(object_store::Error::AlreadyExists {
                path: location.to_string(),
                source: "taken".into(),
            });
        }
        inner.put_opts(location, payload, opts).await
    }
}

/// A WAL object that vanishes after its PUT met `AlreadyExists` can only
/// have been deleted by a newer owner's garbage collection: the writer is
/// fenced. (Retrying would write into a slot below the newer owner's replay
/// point, and acknowledge a record no later walk reads.)
#[tokio::test]
async fn a_wal_slot_that_vanishes_after_already_exists_fences_the_writer() {
    let layered = Layered::new(Arc::new(InMemory::new()), WalSlotTakenThenGone::default());
    let layer = layered.layer().clone();
    let store: Arc<dyn ObjectStore> = Arc::new(layered);
    let shard = open(store.clone(), 1).await.unwrap();
    shard.create_stream(STREAM, &cipher()).await.unwrap();
    layer.armed.store(true, Ordering::SeqCst);
    let append = shard
        .append(AppendRequest::new(
            STREAM,
            cipher(),
            vec![Bytes::from_static(b"never acknowledged")],
        ))
        .await;
    assert_eq!(append.err(), Some(EngineError::Fenced));
    assert_eq!(shard.status(), strata_engine::ShardStatus::Fenced);
}

/// A handle fenced by a newer owner that has not written since still holds
/// the older state: it would call a producer's next sequence a gap. Before
/// it answers such a rejection it confirms its claim, learns it is fenced,
/// and stops.
#[tokio::test]
async fn a_fenced_handle_that_has_not_written_confirms_its_claim_before_a_rejection() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let produce = |seq: u64| {
        let mut request =
            AppendRequest::new(STREAM, cipher(), vec![Bytes::from(format!("r{seq}"))]);
        request.producer = Some(strata_engine::ProducerClaim {
            id: "p".into(),
            epoch: 0,
            seq,
            digest: [0; 16],
        });
        request
    };
    let old = open(store.clone(), 1).await.unwrap();
    old.create_stream(STREAM, &cipher()).await.unwrap();
    old.append(produce(0)).await.unwrap();
    old.confirm_claim().await.expect("the first owner holds it");
    // A newer owner takes over and acknowledges the producer's next record.
    let new = open(store.clone(), 2).await.unwrap();
    new.append(produce(1)).await.unwrap();
    // The old handle, never having written since, calls sequence 2 a gap…
    let stale = old.append(produce(2)).await.unwrap_err();
    assert!(
        matches!(stale, EngineError::ProducerSeqGap { .. }),
        "{stale:?}"
    );
    assert!(stale.may_be_stale());
    // …which it must not answer: its claim is gone.
    assert_eq!(old.confirm_claim().await, Err(EngineError::Fenced));
    assert_eq!(old.status(), strata_engine::ShardStatus::Fenced);
    new.confirm_claim().await.expect("the newer owner holds it");
    new.append(produce(2)).await.unwrap();
}

/// A claim made from a manifest read earlier (the fleet reads it to see who
/// holds the shard, then claims from that read) fails as fenced when
/// another owner claimed in between, and leaves that owner serving; one made
/// from a fresh read claims.
#[tokio::test]
async fn a_claim_from_a_stale_manifest_read_is_fenced() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let name = ShardName::new("gate").unwrap();
    let retry = ShardConfig::default().store_retry;
    let first = open(store.clone(), 1).await.unwrap();
    let read = strata_engine::ClaimRead::load(&store, &name, retry)
        .await
        .unwrap();
    assert_eq!(read.holder().unwrap().instance, InstanceId([1; 16]));
    let second = open(store.clone(), 2).await.unwrap();
    let stale = Shard::open_from(
        EngineEnv::production(store.clone()),
        name.clone(),
        InstanceId([3; 16]),
        ShardConfig::default(),
        read,
    )
    .await;
    assert!(
        matches!(stale, Err(EngineError::Fenced)),
        "a claim from a replaced read must fail as fenced, got {:?}",
        stale.err()
    );
    second.create_stream(STREAM, &cipher()).await.unwrap();
    let fresh = strata_engine::ClaimRead::load(&store, &name, retry)
        .await
        .unwrap();
    assert_eq!(fresh.holder().unwrap().instance, InstanceId([2; 16]));
    let third = Shard::open_from(
        EngineEnv::production(store.clone()),
        name,
        InstanceId([3; 16]),
        ShardConfig::default(),
        fresh,
    )
    .await
    .unwrap();
    assert!(third.stream_info(&STREAM).is_some());
    drop(first);
}
