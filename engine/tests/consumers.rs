//! Consumer groups' durable state through the engine: every change rides
//! the WAL, is rebuilt by a new owner's replay, sealed into index runs, and
//! dropped with its stream.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use strata_engine::consumer::durable::{ConsumerChange, ConsumerSetup, DurableConsumer};
use strata_engine::consumer::{ConsumerConfig, ConsumerEvent, RecordRef};
use strata_engine::{
    AppendRequest, EngineEnv, EngineError, InstanceId, Shard, ShardConfig, ShardName, StreamRef,
};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

fn cipher() -> Arc<StreamCipher> {
    Arc::new(StreamCipher::new(
        StreamEpoch([7; 16]),
        StreamKey::from_bytes([1; 32]),
    ))
}

const STREAM: StreamRef = StreamRef {
    id: [3; 16],
    incarnation: 1,
};

/// Seals only when asked (or at shutdown).
fn manual() -> ShardConfig {
    ShardConfig {
        seal_bytes: u64::MAX,
        seal_objects: u64::MAX,
        seal_age: Duration::from_secs(24 * 3600),
        ..ShardConfig::default()
    }
}

async fn open(store: &Arc<dyn ObjectStore>, instance: u8) -> Shard {
    Shard::open(
        EngineEnv::production(store.clone()),
        ShardName::new("s0").unwrap(),
        InstanceId([instance; 16]),
        manual(),
    )
    .await
    .unwrap()
}

fn setup() -> ConsumerSetup {
    ConsumerSetup {
        config: ConsumerConfig {
            visibility_ms: 30_000,
            max_attempts: 3,
            max_batch: 10,
        },
        settings: Bytes::from_static(br#"{"maxAttempts":3}"#),
    }
}

fn record(key: &'static [u8], position: u64) -> RecordRef {
    RecordRef {
        routing_key: Bytes::from_static(key),
        position,
    }
}

fn deliver(key: &'static [u8], position: u64, lease: u64) -> ConsumerEvent {
    ConsumerEvent::Delivered {
        record: record(key, position),
        lease,
        deadline_ms: 1_000 + lease,
    }
}

async fn populated(store: &Arc<dyn ObjectStore>) -> (Shard, DurableConsumer) {
    let shard = open(store, 1).await;
    shard.create_stream(STREAM, &cipher()).await.unwrap();
    let records = (0..6).map(|i| Bytes::from(format!("r{i}"))).collect();
    shard
        .append(AppendRequest::new(STREAM, cipher(), records))
        .await
        .unwrap();
    let changes = [
        ConsumerChange::Configure {
            generation: 1,
            setup: setup(),
        },
        ConsumerChange::Records {
            generation: 1,
            floor: 0,
            events: vec![deliver(b"a", 0, 1), deliver(b"b", 1, 2)],
        },
        ConsumerChange::Records {
            generation: 1,
            floor: 0,
            events: vec![
                ConsumerEvent::Finished {
                    record: record(b"b", 1),
                },
                ConsumerEvent::Retried {
                    record: record(b"a", 0),
                    visible_at_ms: 77,
                },
            ],
        },
    ];
    for change in &changes {
        shard
            .change_consumer(STREAM, "workers", change)
            .await
            .unwrap();
    }
    let state = shard.consumer(&STREAM, "workers").expect("configured");
    assert_eq!(state.generation, 1);
    assert_eq!(state.last_lease, 2);
    assert!(state.done.contains(1) && !state.done.contains(0));
    assert_eq!(state.heads[&Bytes::from_static(b"a")].visible_at_ms, 77);
    (shard, state)
}

#[tokio::test]
async fn a_new_owner_rebuilds_consumer_state_from_the_wal() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (old, state) = populated(&store).await;
    old.crash();
    let new = open(&store, 2).await;
    assert_eq!(new.consumer(&STREAM, "workers"), Some(state));
    assert_eq!(new.consumer_generation_max(&STREAM), 1);
}

#[tokio::test]
async fn consumer_state_is_sealed_into_index_runs_and_continues_after_them() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (shard, state) = populated(&store).await;
    shard.seal_now().await.unwrap();
    shard.crash();
    let sealed = open(&store, 2).await;
    assert_eq!(
        sealed.last_recovery().data_objects_applied,
        0,
        "nothing replayed"
    );
    assert_eq!(sealed.consumer(&STREAM, "workers"), Some(state));
    // A change after the seal lands on the sealed state.
    sealed
        .change_consumer(
            STREAM,
            "workers",
            &ConsumerChange::Records {
                generation: 1,
                floor: 2,
                events: vec![ConsumerEvent::Finished {
                    record: record(b"a", 0),
                }],
            },
        )
        .await
        .unwrap();
    let after = sealed.consumer(&STREAM, "workers").unwrap();
    assert_eq!(after.done.floor, 2);
    assert!(after.heads.is_empty());
    sealed.crash();
    let reopened = open(&store, 3).await;
    assert_eq!(reopened.consumer(&STREAM, "workers"), Some(after));
}

#[tokio::test]
async fn deleting_a_consumer_or_its_stream_drops_its_state_and_keeps_generations_rising() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let (shard, _) = populated(&store).await;
    shard
        .change_consumer(STREAM, "workers", &ConsumerChange::Delete { generation: 1 })
        .await
        .unwrap();
    assert_eq!(shard.consumer(&STREAM, "workers"), None);
    assert_eq!(shard.consumer_generation_max(&STREAM), 1);
    shard.seal_now().await.unwrap();
    shard.crash();
    let reopened = open(&store, 2).await;
    assert_eq!(reopened.consumer(&STREAM, "workers"), None);
    assert_eq!(reopened.consumer_generation_max(&STREAM), 1, "sealed too");
    reopened
        .change_consumer(
            STREAM,
            "again",
            &ConsumerChange::Configure {
                generation: 2,
                setup: setup(),
            },
        )
        .await
        .unwrap();
    reopened.delete_stream(STREAM).await.unwrap();
    assert_eq!(reopened.consumer(&STREAM, "again"), None);
    let missing = reopened
        .change_consumer(STREAM, "again", &ConsumerChange::Delete { generation: 2 })
        .await;
    assert!(
        matches!(missing, Err(EngineError::StreamNotFound)),
        "{missing:?}"
    );
}
