//! Data at rest: records appended through the engine to a local-directory
//! store appear in none of the store's files, and neither does the stream key.

use std::sync::Arc;

use bytes::Bytes;
use strata_engine::store::{open_store, StoreOptions};
use strata_engine::{
    AppendRequest, EngineEnv, InstanceId, Shard, ShardConfig, ShardName, StreamRef,
};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

const CANARY: &[u8] = b"CANARY-plaintext-7c1f0e";

fn files_under(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[tokio::test]
async fn plaintext_and_keys_never_reach_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(dir.path().to_str().unwrap(), &StoreOptions::default()).unwrap();
    let key_bytes = [0x5au8; 32];
    let cipher = Arc::new(StreamCipher::new(
        StreamEpoch([3; 16]),
        StreamKey::from_bytes(key_bytes),
    ));
    let shard = Shard::open(
        EngineEnv::production(store),
        ShardName::new("rest").unwrap(),
        InstanceId([1; 16]),
        ShardConfig::default(),
    )
    .await
    .unwrap();
    let stream = StreamRef {
        id: [8; 16],
        incarnation: 1,
    };
    shard.create_stream(stream, &cipher).await.unwrap();
    // A small record, a large compressible one, and many records in one batch.
    let mut batch = vec![Bytes::from_static(CANARY)];
    batch.push(Bytes::from(CANARY.repeat(500)));
    batch.extend((0..200).map(|i| Bytes::from([CANARY, format!("-{i}").as_bytes()].concat())));
    for record in batch {
        shard
            .append(AppendRequest::new(stream, cipher.clone(), vec![record]))
            .await
            .unwrap();
    }
    let many: Vec<Bytes> = (0..1000).map(|_| Bytes::from_static(CANARY)).collect();
    shard
        .append(AppendRequest::new(stream, cipher.clone(), many))
        .await
        .unwrap();
    shard.shutdown().await;

    let mut files = Vec::new();
    files_under(dir.path(), &mut files);
    let wal_files = files
        .iter()
        .filter(|f| f.to_string_lossy().contains("/wal/"))
        .count();
    assert!(
        wal_files >= 3,
        "the data is in WAL objects ({wal_files} files)"
    );
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !contains(&bytes, CANARY),
            "{} holds plaintext",
            file.display()
        );
        assert!(
            !contains(&bytes, &key_bytes),
            "{} holds the key",
            file.display()
        );
    }
}
