//! Usage accounting: a stream created for an account is counted for it
//! (records, appended and stored bytes, reads) through the WAL, a reopen
//! that replays it, a seal into index runs and a reopen from the runs; a
//! deleted stream is counted no more, and usage logged for it is skipped.

use std::sync::Arc;

use bytes::Bytes;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use strata_engine::{
    AccountUsage, AppendRequest, EngineEnv, InstanceId, Shard, ShardConfig, ShardName, StreamRef,
};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};
use strata_wal::UsageEntry;

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

async fn open(store: &Arc<dyn ObjectStore>, instance: u8) -> Shard {
    Shard::open(
        EngineEnv::production(store.clone()),
        ShardName::new("s0").unwrap(),
        InstanceId([instance; 16]),
        ShardConfig::default(),
    )
    .await
    .unwrap()
}

/// `usage` without its stored bytes, which change when pages are sealed
/// into chunks (a chunk frames its pages), as a reopen may do.
fn logical(usage: AccountUsage) -> AccountUsage {
    assert!(usage.stored_bytes > 0 || usage.streams == 0);
    AccountUsage {
        stored_bytes: 0,
        ..usage
    }
}

fn reads(s: StreamRef, reads: u64, read_bytes: u64, last_read_ms: u64) -> UsageEntry {
    UsageEntry {
        stream: s,
        reads,
        read_bytes,
        last_read_ms,
    }
}

#[tokio::test]
async fn usage_is_counted_per_account_through_replay_and_seal() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1).await;
    let alpha = Bytes::from_static(b"alpha");
    for n in [1, 2] {
        shard
            .create_stream_for(stream(n), &cipher(), alpha.clone())
            .await
            .unwrap();
    }
    shard
        .create_stream_for(stream(3), &cipher(), Bytes::from_static(b"beta"))
        .await
        .unwrap();
    shard.create_stream(stream(4), &cipher()).await.unwrap();
    for n in [1, 2, 3, 4] {
        let records = vec![Bytes::from(vec![b'x'; 100 * n as usize]); 2];
        shard
            .append(AppendRequest::new(stream(n), cipher(), records))
            .await
            .unwrap();
    }
    shard
        .record_usage(vec![
            reads(stream(1), 3, 600, 1_000),
            reads(stream(2), 1, 400, 2_000),
            reads(stream(3), 5, 0, 3_000),
        ])
        .await
        .unwrap();
    shard
        .record_usage(vec![reads(stream(1), 1, 200, 500)])
        .await
        .unwrap();
    let expect_alpha = |usage: AccountUsage| {
        assert_eq!(usage.streams, 2);
        assert_eq!(usage.records, 4);
        assert_eq!(usage.appended_bytes, 2 * 100 + 2 * 200);
        assert_eq!((usage.reads, usage.read_bytes), (5, 1_200));
        assert!(usage.stored_bytes > 0);
    };
    let alpha_usage = shard.usage_of(b"alpha");
    expect_alpha(alpha_usage);
    assert_eq!(shard.usage_of(b"beta").reads, 5);
    assert_eq!(shard.usage_of(b"").streams, 1, "created for nobody");
    // The last read is the latest one logged, not the last logged.
    let info = shard.stream_info(&stream(1)).unwrap();
    assert_eq!(info.tail.usage.last_read_ms, Some(1_000));
    assert_eq!(info.tail.usage.account, alpha);
    assert!(info.tail.last_access_ms() >= 1_000);
    shard.shutdown().await;

    // Replayed from the WAL by the next owner (the shard is crashed, not
    // stopped: a clean stop would seal it first).
    shard.crash();
    let shard = open(&store, 2).await;
    assert_eq!(logical(shard.usage_of(b"alpha")), logical(alpha_usage));
    // Sealed into index runs, then opened from them. Stored bytes are now
    // the chunks' (pages with their chunk framing).
    shard.seal_now().await.unwrap();
    shard.shutdown().await;
    let shard = open(&store, 3).await;
    let sealed = shard.usage_of(b"alpha");
    assert_eq!(
        (sealed.streams, sealed.records, sealed.appended_bytes),
        (2, 4, 600)
    );
    assert_eq!((sealed.reads, sealed.read_bytes), (5, 1_200));
    assert!(sealed.stored_bytes > 0);
    assert_eq!(
        shard
            .stream_info(&stream(1))
            .unwrap()
            .tail
            .usage
            .last_read_ms,
        Some(1_000)
    );

    // A deleted stream counts no more, and its late usage is skipped.
    shard.delete_stream(stream(2)).await.unwrap();
    shard
        .record_usage(vec![
            reads(stream(2), 9, 9, 9),
            reads(stream(1), 1, 1, 4_000),
        ])
        .await
        .unwrap();
    let after = shard.usage_of(b"alpha");
    assert_eq!((after.streams, after.records, after.reads), (1, 2, 5));
    shard.crash();
    let shard = open(&store, 4).await;
    assert_eq!(logical(shard.usage_of(b"alpha")), logical(after));
    shard.shutdown().await;
}

#[tokio::test]
async fn an_account_longer_than_the_limit_is_refused() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard = open(&store, 1).await;
    let long = Bytes::from(vec![b'a'; strata_wal::ACCOUNT_BYTES_MAX + 1]);
    assert!(shard
        .create_stream_for(stream(1), &cipher(), long)
        .await
        .is_err());
    shard.shutdown().await;
}
