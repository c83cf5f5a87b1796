//! The shard engine's contract, one behaviour per test, on an in-memory store.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use strata_engine::{
    AppendKind, AppendRequest, CreateAck, EngineEnv, EngineError, InstanceId, ProducerClaim,
    ReadLimits, Shard, ShardConfig, ShardName, StreamRef, WaitOutcome,
};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

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

async fn open(store: &Arc<dyn ObjectStore>, instance: u8) -> Result<Shard, EngineError> {
    Shard::open(
        EngineEnv::production(store.clone()),
        ShardName::new("s0").unwrap(),
        InstanceId([instance; 16]),
        ShardConfig::default(),
    )
    .await
}

fn records(texts: &[&str]) -> Vec<Bytes> {
    texts.iter().map(|t| Bytes::from(t.to_string())).collect()
}

async fn payloads(shard: &Shard, s: &StreamRef, from: u64) -> Vec<String> {
    shard
        .read(s, from, ReadLimits::default(), &cipher(), None)
        .await
        .unwrap()
        .records
        .into_iter()
        .map(|r| String::from_utf8(r.payload.to_vec()).unwrap())
        .collect()
}

#[tokio::test]
async fn append_read_reopen() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1).await.unwrap();
    let s = stream(1);
    assert_eq!(
        shard.create_stream(s, &cipher()).await.unwrap(),
        CreateAck::Created
    );
    assert_eq!(
        shard.create_stream(s, &cipher()).await.unwrap(),
        CreateAck::AlreadyExists
    );
    let ack = shard
        .append(AppendRequest::new(s, cipher(), records(&["a", "b"])))
        .await
        .unwrap();
    assert_eq!((ack.first_offset, ack.next_offset), (0, 2));
    let ack = shard
        .append(AppendRequest::new(s, cipher(), records(&["c"])))
        .await
        .unwrap();
    assert_eq!((ack.first_offset, ack.next_offset), (2, 3));
    assert_eq!(payloads(&shard, &s, 0).await, ["a", "b", "c"]);
    assert_eq!(payloads(&shard, &s, 1).await, ["b", "c"]);
    shard.shutdown().await;

    let reopened = open(&store, 2).await.unwrap();
    assert_eq!(payloads(&reopened, &s, 0).await, ["a", "b", "c"]);
    assert_eq!(reopened.last_recovery().epoch, 2);
    let ack = reopened
        .append(AppendRequest::new(s, cipher(), records(&["d"])))
        .await
        .unwrap();
    assert_eq!(ack.first_offset, 3);
}

#[tokio::test]
async fn unknown_stream_empty_append_and_close() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1).await.unwrap();
    let s = stream(2);
    let missing = shard
        .append(AppendRequest::new(s, cipher(), records(&["x"])))
        .await;
    assert_eq!(missing.unwrap_err(), EngineError::StreamNotFound);
    shard.create_stream(s, &cipher()).await.unwrap();
    let empty = shard.append(AppendRequest::new(s, cipher(), vec![])).await;
    assert_eq!(empty.unwrap_err(), EngineError::EmptyAppend);
    let mut last = AppendRequest::new(s, cipher(), records(&["final"]));
    last.close = true;
    let ack = shard.append(last).await.unwrap();
    assert!(ack.closed);
    let again = shard.close_stream(s, cipher()).await.unwrap();
    assert_eq!(again.kind, AppendKind::AlreadyClosed);
    assert_eq!(again.next_offset, 1);
    let refused = shard
        .append(AppendRequest::new(s, cipher(), records(&["more"])))
        .await;
    assert_eq!(
        refused.unwrap_err(),
        EngineError::StreamClosed { next_offset: 1 }
    );
    shard.shutdown().await;
    let reopened = open(&store, 2).await.unwrap();
    assert!(reopened.stream_info(&s).unwrap().tail.closed_ms.is_some());
}

#[tokio::test]
async fn a_close_needs_no_key_and_a_wrong_key_writes_nothing() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1).await.unwrap();
    let s = stream(9);
    shard.create_stream(s, &cipher()).await.unwrap();
    shard
        .append(AppendRequest::new(s, cipher(), records(&["a"])))
        .await
        .unwrap();
    let wrong = Arc::new(StreamCipher::new(
        StreamEpoch([7; 16]),
        StreamKey::from_bytes([2; 32]),
    ));
    assert_eq!(
        shard.close_stream(s, wrong).await.unwrap_err(),
        EngineError::WrongKey
    );
    let closed = shard.close_stream_without_key(s).await.unwrap();
    assert_eq!((closed.kind, closed.next_offset), (AppendKind::Appended, 1));
    assert!(closed.closed);
    let again = shard.close_stream_without_key(s).await.unwrap();
    assert_eq!(again.kind, AppendKind::AlreadyClosed);
    assert_eq!(
        shard
            .append(AppendRequest::new(s, cipher(), records(&["b"])))
            .await
            .unwrap_err(),
        EngineError::StreamClosed { next_offset: 1 }
    );
    let missing = shard.close_stream_without_key(stream(10)).await;
    assert_eq!(missing.unwrap_err(), EngineError::StreamNotFound);
    shard.shutdown().await;
    let reopened = open(&store, 2).await.unwrap();
    assert!(reopened.stream_info(&s).unwrap().tail.closed_ms.is_some());
    assert_eq!(payloads(&reopened, &s, 0).await, ["a"]);
}

#[tokio::test]
async fn producers_deduplicate_and_fence() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1).await.unwrap();
    let s = stream(3);
    shard.create_stream(s, &cipher()).await.unwrap();
    let with = |epoch, seq, text: &str| {
        let mut r = AppendRequest::new(s, cipher(), records(&[text]));
        r.producer = Some(ProducerClaim {
            id: "p".into(),
            epoch,
            seq,
            digest: [0; 16],
        });
        r
    };
    assert_eq!(
        shard.append(with(0, 0, "a")).await.unwrap().kind,
        AppendKind::Appended
    );
    let dup = shard.append(with(0, 0, "a")).await.unwrap();
    assert!(matches!(dup.kind, AppendKind::Duplicate(_)));
    assert_eq!(dup.first_offset, 0);
    assert_eq!(
        shard.append(with(0, 5, "x")).await.unwrap_err(),
        EngineError::ProducerSeqGap {
            expected: 1,
            received: 5
        }
    );
    assert_eq!(shard.append(with(1, 0, "b")).await.unwrap().first_offset, 1);
    assert_eq!(
        shard.append(with(0, 1, "z")).await.unwrap_err(),
        EngineError::ProducerStaleEpoch { current_epoch: 1 }
    );
    assert_eq!(
        shard.append(with(2, 3, "z")).await.unwrap_err(),
        EngineError::ProducerNewEpochNeedsSeqZero
    );
    shard.shutdown().await;
    let reopened = open(&store, 2).await.unwrap();
    let dup = reopened.append(with(1, 0, "b")).await.unwrap();
    assert!(matches!(dup.kind, AppendKind::Duplicate(_)));
    assert_eq!(payloads(&reopened, &s, 0).await, ["a", "b"]);
}

#[tokio::test]
async fn stream_seq_must_increase() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1).await.unwrap();
    let s = stream(4);
    shard.create_stream(s, &cipher()).await.unwrap();
    let with = |seq: &'static str| {
        let mut r = AppendRequest::new(s, cipher(), records(&["r"]));
        r.stream_seq = Some(Bytes::from_static(seq.as_bytes()));
        r
    };
    shard.append(with("0001")).await.unwrap();
    assert_eq!(
        shard.append(with("0001")).await.unwrap_err(),
        EngineError::StreamSeqConflict
    );
    assert_eq!(
        shard.append(with("0000")).await.unwrap_err(),
        EngineError::StreamSeqConflict
    );
    shard.append(with("0002")).await.unwrap();
}

#[tokio::test]
async fn delete_and_recreate_with_a_new_incarnation() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1).await.unwrap();
    let s = stream(5);
    shard.create_stream(s, &cipher()).await.unwrap();
    shard
        .append(AppendRequest::new(s, cipher(), records(&["old"])))
        .await
        .unwrap();
    shard.delete_stream(s).await.unwrap();
    assert!(shard.stream_info(&s).is_none());
    assert_eq!(
        shard.create_stream(s, &cipher()).await.unwrap_err(),
        EngineError::StaleIncarnation
    );
    let s2 = StreamRef {
        incarnation: 2,
        ..s
    };
    shard.create_stream(s2, &cipher()).await.unwrap();
    assert_eq!(
        shard
            .append(AppendRequest::new(s2, cipher(), records(&["new"])))
            .await
            .unwrap()
            .first_offset,
        0
    );
    assert_eq!(
        shard
            .read(&s, 0, ReadLimits::default(), &cipher(), None)
            .await
            .unwrap_err(),
        EngineError::StreamNotFound
    );
    shard.shutdown().await;
    let reopened = open(&store, 2).await.unwrap();
    assert_eq!(payloads(&reopened, &s2, 0).await, ["new"]);
}

#[tokio::test]
async fn waiters_wake_on_durable_data() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1).await.unwrap();
    let s = stream(6);
    shard.create_stream(s, &cipher()).await.unwrap();
    let timed_out = shard
        .wait_for(&s, 0, Duration::from_millis(10))
        .await
        .unwrap();
    assert_eq!(timed_out, WaitOutcome::TimedOut { tail: 0 });
    let waiter = {
        let shard = shard.clone();
        tokio::spawn(async move { shard.wait_for(&s, 0, Duration::from_secs(30)).await })
    };
    shard
        .append(AppendRequest::new(s, cipher(), records(&["x"])))
        .await
        .unwrap();
    assert_eq!(
        waiter.await.unwrap().unwrap(),
        WaitOutcome::Ready {
            tail: 1,
            closed: false
        }
    );
}

#[tokio::test]
async fn a_new_owner_fences_the_old_one() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let old = open(&store, 1).await.unwrap();
    let s = stream(7);
    old.create_stream(s, &cipher()).await.unwrap();
    old.append(AppendRequest::new(s, cipher(), records(&["before"])))
        .await
        .unwrap();
    let new = open(&store, 2).await.unwrap();
    let late = old
        .append(AppendRequest::new(s, cipher(), records(&["late"])))
        .await;
    assert_eq!(late.unwrap_err(), EngineError::Fenced);
    assert_eq!(old.status(), strata_engine::ShardStatus::Fenced);
    new.append(AppendRequest::new(s, cipher(), records(&["after"])))
        .await
        .unwrap();
    assert_eq!(payloads(&new, &s, 0).await, ["before", "after"]);
}

#[tokio::test]
async fn large_batches_span_pages_and_round_trip() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1).await.unwrap();
    let s = stream(8);
    shard.create_stream(s, &cipher()).await.unwrap();
    let many: Vec<Bytes> = (0..10_000)
        .map(|i| Bytes::from(format!("record-{i}")))
        .collect();
    let ack = shard
        .append(AppendRequest::new(s, cipher(), many.clone()))
        .await
        .unwrap();
    assert_eq!(ack.next_offset, 10_000);
    let mut got = Vec::new();
    let mut from = 0;
    loop {
        let batch = shard
            .read(
                &s,
                from,
                ReadLimits {
                    max_records: 3_000,
                    max_bytes: 1 << 20,
                },
                &cipher(),
                None,
            )
            .await
            .unwrap();
        got.extend(batch.records.into_iter().map(|r| r.payload));
        from = batch.next_offset;
        if from == batch.tail {
            break;
        }
    }
    assert_eq!(got, many);
}

#[tokio::test]
async fn a_wrong_key_is_refused_before_any_page_is_touched() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1).await.unwrap();
    let s = stream(9);
    shard.create_stream(s, &cipher()).await.unwrap();
    shard
        .append(AppendRequest::new(s, cipher(), records(&["secret"])))
        .await
        .unwrap();
    let other = Arc::new(StreamCipher::new(
        StreamEpoch([7; 16]),
        StreamKey::from_bytes([2; 32]),
    ));
    assert_eq!(
        shard
            .append(AppendRequest::new(s, other.clone(), records(&["x"])))
            .await
            .unwrap_err(),
        EngineError::WrongKey
    );
    assert_eq!(
        shard
            .read(&s, 0, ReadLimits::default(), &other, None)
            .await
            .unwrap_err(),
        EngineError::WrongKey
    );
    assert_eq!(
        shard.create_stream(s, &other).await.unwrap_err(),
        EngineError::WrongKey
    );
    shard.shutdown().await;
    // The fingerprint survives recovery; the key itself is stored nowhere.
    let reopened = open(&store, 2).await.unwrap();
    assert_eq!(
        reopened
            .read(&s, 0, ReadLimits::default(), &other, None)
            .await
            .unwrap_err(),
        EngineError::WrongKey
    );
    assert_eq!(payloads(&reopened, &s, 0).await, ["secret"]);
}

/// The operators' counts follow what the shard did: PUTs written with their
/// records and latency, the claim, a seal, and the fence by a newer owner.
#[tokio::test]
async fn metrics_count_puts_records_claims_seals_and_fences() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1).await.unwrap();
    let s = stream(1);
    shard.create_stream(s, &cipher()).await.unwrap();
    shard
        .append(AppendRequest::new(s, cipher(), records(&["a", "b", "c"])))
        .await
        .unwrap();
    let m = shard.metrics();
    assert_eq!((m.claims, m.fences, m.wal_put_failures), (1, 0, 0));
    assert_eq!(m.wal_puts, 2, "the create and the append");
    assert_eq!(m.wal_records, 3);
    assert!(m.wal_put_bytes > 0 && m.unsealed_bytes > 0);
    assert_eq!(m.wal_put_latency.count, m.wal_puts);
    assert_eq!(m.puts_in_flight, 0);

    shard.seal_now().await.unwrap();
    let m = shard.metrics();
    assert_eq!((m.seals, m.seal_failures, m.seal_latency.count), (1, 0, 1));
    assert_eq!(m.unsealed_bytes, 0);

    let _newer = open(&store, 2).await.unwrap();
    let fenced = shard
        .append(AppendRequest::new(s, cipher(), records(&["late"])))
        .await;
    assert_eq!(fenced.unwrap_err(), EngineError::Fenced);
    let m = shard.metrics();
    assert_eq!((m.fences, m.wal_put_failures, m.wal_records), (1, 1, 3));
}

/// An answer goes out as soon as its own entries are visible, while the rest
/// of its object may still be publishing: a caller that reads on the answer,
/// on another worker, must find its records (read-your-writes per answer,
/// not per object). Many streams share each object, so a reply sent ahead of
/// its entry would be read before it lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_append_is_readable_the_moment_its_answer_arrives() {
    use strata_engine::store::{Latency, Layered};
    const STREAMS: u8 = 250;
    const ROUNDS: u32 = 12;
    let slow = Latency {
        put: Duration::from_millis(2),
        ..Latency::default()
    };
    let store: Arc<dyn ObjectStore> = Arc::new(Layered::new(Arc::new(InMemory::new()), slow));
    let shard = open(&store, 1).await.unwrap();
    for n in 1..=STREAMS {
        shard.create_stream(stream(n), &cipher()).await.unwrap();
    }
    let mut tasks = tokio::task::JoinSet::new();
    for n in 1..=STREAMS {
        let shard = shard.clone();
        tasks.spawn(async move {
            let s = stream(n);
            for round in 0..ROUNDS {
                let text = format!("{n}-{round}");
                let ack = shard
                    .append(AppendRequest::new(s, cipher(), records(&[&text])))
                    .await
                    .unwrap();
                let seen = shard
                    .read(&s, ack.first_offset, ReadLimits::default(), &cipher(), None)
                    .await
                    .unwrap();
                let first = seen.records.first().map(|r| r.payload.clone());
                assert_eq!(
                    first,
                    Some(Bytes::from(text)),
                    "stream {n}: offset {} not visible on its answer",
                    ack.first_offset
                );
            }
        });
    }
    while let Some(joined) = tasks.join_next().await {
        joined.unwrap();
    }
    shard.shutdown().await;
}
