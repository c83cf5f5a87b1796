//! A shard whose manifest is missing while its folders still hold objects is
//! never started empty (epoch 1, nothing replayed): opening refuses and names
//! the repair. A shard with nothing in the store starts fresh.

use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use strata_engine::layout::ShardLayout;
use strata_engine::{
    AppendRequest, EngineEnv, EngineError, InstanceId, Shard, ShardConfig, ShardName, StreamRef,
};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

const STREAM: StreamRef = StreamRef {
    id: [4; 16],
    incarnation: 1,
};

fn cipher() -> Arc<StreamCipher> {
    Arc::new(StreamCipher::new(
        StreamEpoch([1; 16]),
        StreamKey::from_bytes([9; 32]),
    ))
}

fn layout() -> ShardLayout {
    ShardLayout::new(ShardName::new("s0").unwrap())
}

async fn open(store: &Arc<dyn ObjectStore>, instance: u8) -> Result<Shard, EngineError> {
    Shard::open(
        EngineEnv::production(store.clone()),
        ShardName::new("s0").unwrap(),
        InstanceId([instance; 16]),
        ShardConfig::default(),
    )
    .await
}

fn assert_refused_naming_recover(opened: Result<Shard, EngineError>) {
    match opened {
        Err(e @ EngineError::ManifestMissing { .. }) => {
            let text = e.to_string();
            assert!(text.contains("strata shard recover s0"), "{text}");
        }
        Err(other) => panic!("expected ManifestMissing, got {other:?}"),
        Ok(shard) => panic!(
            "opened a shard with data and no manifest at epoch {}",
            shard.last_recovery().epoch
        ),
    }
}

async fn manifest_exists(store: &Arc<dyn ObjectStore>) -> bool {
    store.head(&layout().manifest()).await.is_ok()
}

/// An owner wrote and sealed, then the manifest was lost: a new opener must
/// not create an initial manifest (epoch 1, replay from slot 0, no runs),
/// which would serve nothing the shard held and sit below the old owner's
/// epoch.
#[tokio::test]
async fn a_shard_with_data_but_no_manifest_is_not_started_empty() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let first = open(&store, 1).await.unwrap();
    first.create_stream(STREAM, &cipher()).await.unwrap();
    first
        .append(AppendRequest::new(
            STREAM,
            cipher(),
            vec![Bytes::from_static(b"kept")],
        ))
        .await
        .unwrap();
    first.seal_now().await.unwrap();
    first.crash();
    store.delete(&layout().manifest()).await.unwrap();
    assert_refused_naming_recover(open(&store, 2).await);
    assert!(!manifest_exists(&store).await, "nothing was created");
}

/// One object in any of the shard's folders is enough to refuse.
#[tokio::test]
async fn any_object_in_the_shard_folders_refuses_an_initial_manifest() {
    let l = layout();
    let strays = [
        l.wal(7),
        l.index_run(strata_engine::layout::ObjectId::new(2, 1)),
        l.segment(strata_engine::layout::ObjectId::new(2, 0)),
        l.manifest_history(3),
    ];
    for stray in strays {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        store
            .put(&stray, PutPayload::from_static(b"left over"))
            .await
            .unwrap();
        assert_refused_naming_recover(open(&store, 1).await);
        assert!(!manifest_exists(&store).await, "{stray}");
    }
}

/// Objects of another shard, or outside the shard's folders, do not count.
#[tokio::test]
async fn an_empty_shard_starts_fresh() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    for other in [
        Path::from("shards/s1/wal/00000000000000000000"),
        Path::from("shards/s00/wal/00000000000000000000"),
        Path::from("quarantine/shards/s0/manifest.1"),
    ] {
        store
            .put(&other, PutPayload::from_static(b"x"))
            .await
            .unwrap();
    }
    let shard = open(&store, 1).await.unwrap();
    assert_eq!(shard.last_recovery().epoch, 1);
    shard.shutdown().await;
    // And it opens again from its manifest.
    let again = open(&store, 2).await.unwrap();
    assert_eq!(again.last_recovery().epoch, 2);
    again.shutdown().await;
}
