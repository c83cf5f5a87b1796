//! The S3 store against a real S3-compatible server (moto), started by
//! `scripts/test`: conditional PUTs, concurrent compare-and-swap, and a shard
//! that opens, appends, is taken over and recovers through S3.
#![cfg(feature = "s3-tests")]

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};
use strata_engine::store::{open_store, S3Options, StoreOptions};
use strata_engine::{
    AppendRequest, EngineEnv, EngineError, InstanceId, ReadLimits, Shard, ShardConfig, ShardName,
    StreamRef,
};
use strata_manifest::{CasObject, Manifest, ManifestCodec, RetryPolicy};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

fn s3(prefix: &str) -> Arc<dyn ObjectStore> {
    let endpoint = std::env::var("STRATA_TEST_S3_ENDPOINT")
        .expect("STRATA_TEST_S3_ENDPOINT: run the tests with scripts/test, which starts moto");
    let bucket = std::env::var("STRATA_TEST_S3_BUCKET").expect("STRATA_TEST_S3_BUCKET");
    let options = StoreOptions {
        s3: S3Options {
            endpoint: Some(endpoint),
            region: Some("us-east-1".into()),
            access_key_id: Some("testing".into()),
            secret_access_key: Some("testing".into()),
            allow_http: true,
        },
        ..StoreOptions::default()
    };
    #[allow(clippy::disallowed_methods)] // a unique prefix per run, not simulated time
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    open_store(&format!("s3://{bucket}/{prefix}-{nonce}"), &options).expect("s3 store")
}

#[tokio::test]
async fn create_only_puts_refuse_an_existing_object() {
    let store = s3("create-only");
    let path = Path::from("shards/x/wal/00000000000000000000");
    let create = PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    store
        .put_opts(&path, PutPayload::from_static(b"a"), create.clone())
        .await
        .unwrap();
    let again = store
        .put_opts(&path, PutPayload::from_static(b"b"), create)
        .await;
    assert!(matches!(
        again,
        Err(object_store::Error::AlreadyExists { .. })
    ));
}

#[tokio::test]
async fn concurrent_compare_and_swap_has_one_winner_per_round() {
    let cas = CasObject::<ManifestCodec>::new(
        s3("cas"),
        Path::from("shards/x/manifest"),
        RetryPolicy::default(),
    );
    let mut current = cas
        .create(Manifest::initial("x".into(), [0; 16], [0; 16]))
        .await
        .unwrap();
    for round in 1..=10u8 {
        let attempts = (0..6u8).map(|w| {
            let cas = cas.clone();
            let current = current.clone();
            async move {
                let mut next = current.value.successor(current.value.writer);
                next.writer.write_id = [round * 16 + w; 16];
                cas.replace(&current, next).await
            }
        });
        let results = futures::future::join_all(attempts).await;
        let winners: Vec<_> = results.into_iter().filter_map(Result::ok).collect();
        assert_eq!(winners.len(), 1, "round {round}");
        current = winners.into_iter().next().unwrap();
    }
    assert_eq!(cas.load().await.unwrap().unwrap().value.version, 11);
}

#[tokio::test]
async fn a_shard_on_s3_recovers_and_fences() {
    let store = s3("shard");
    let cipher = Arc::new(StreamCipher::new(
        StreamEpoch([4; 16]),
        StreamKey::from_bytes([5; 32]),
    ));
    let stream = StreamRef {
        id: [1; 16],
        incarnation: 1,
    };
    let open = |instance: u8| {
        Shard::open(
            EngineEnv::production(store.clone()),
            ShardName::new("s3").unwrap(),
            InstanceId([instance; 16]),
            ShardConfig::default(),
        )
    };
    let first = open(1).await.unwrap();
    first.create_stream(stream, &cipher).await.unwrap();
    for i in 0..20 {
        first
            .append(AppendRequest::new(
                stream,
                cipher.clone(),
                vec![Bytes::from(format!("r{i}"))],
            ))
            .await
            .unwrap();
    }
    let second = open(2).await.unwrap();
    let late = first
        .append(AppendRequest::new(
            stream,
            cipher.clone(),
            vec![Bytes::from_static(b"late")],
        ))
        .await;
    assert_eq!(late.unwrap_err(), EngineError::Fenced);
    let batch = second
        .read(&stream, 0, ReadLimits::default(), &cipher, None)
        .await
        .unwrap();
    let payloads: Vec<String> = batch
        .records
        .iter()
        .map(|r| String::from_utf8(r.payload.to_vec()).unwrap())
        .collect();
    assert_eq!(
        payloads,
        (0..20).map(|i| format!("r{i}")).collect::<Vec<_>>()
    );
}
