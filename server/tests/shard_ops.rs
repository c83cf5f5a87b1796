//! `strata shard list | inspect | verify` end to end: a shard written through
//! the engine on a local directory, then damaged one way per test; `verify`
//! must name the damage (exit code 3) and pass on the healthy shard (0).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use bytes::Bytes;
use object_store::ObjectStore;
use strata_engine::store::{open_store, StoreOptions};
use strata_engine::{
    AppendRequest, EngineEnv, InstanceId, Shard, ShardConfig, ShardName, StreamRef,
};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

const EXIT_DAMAGED: i32 = 3;

fn cipher() -> Arc<StreamCipher> {
    Arc::new(StreamCipher::new(
        StreamEpoch([5; 16]),
        StreamKey::from_bytes([6; 32]),
    ))
}

fn stream(n: u8) -> StreamRef {
    StreamRef {
        id: [n; 16],
        incarnation: 1,
    }
}

/// Two streams; three seals; then five more WAL objects after the last seal;
/// the owner then stops without a final seal, as after a crash.
async fn build_shard(dir: &Path) -> Arc<dyn ObjectStore> {
    let store = open_store(dir.to_str().unwrap(), &StoreOptions::default()).unwrap();
    let config = ShardConfig {
        seal_bytes: u64::MAX,
        seal_objects: u64::MAX,
        seal_age: std::time::Duration::from_secs(3600),
        ..ShardConfig::default()
    };
    let shard = Shard::open(
        EngineEnv::production(store.clone()),
        ShardName::new("s0").unwrap(),
        InstanceId([1; 16]),
        config,
    )
    .await
    .unwrap();
    for s in [stream(1), stream(2)] {
        shard.create_stream(s, &cipher()).await.unwrap();
    }
    for round in 0..4 {
        for s in [stream(1), stream(2)] {
            let records = (0..10)
                .map(|i| Bytes::from(format!("r{round}-{i}")))
                .collect();
            shard
                .append(AppendRequest::new(s, cipher(), records))
                .await
                .unwrap();
        }
        if round < 3 {
            shard.seal_now().await.unwrap();
        }
    }
    for i in 0..5 {
        shard
            .append(AppendRequest::new(
                stream(1),
                cipher(),
                vec![Bytes::from(format!("tail-{i}"))],
            ))
            .await
            .unwrap();
    }
    shard.crash();
    store
}

fn strata(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .arg("--store")
        .arg(dir)
        .output()
        .expect("strata runs")
}

fn verify(dir: &Path, deep: bool) -> (i32, serde_json::Value) {
    let mut args = vec!["shard", "verify", "s0", "--json"];
    if deep {
        args.push("--deep");
    }
    let out = strata(&args, dir);
    let code = out.status.code().expect("exit code");
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verify printed no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, json)
}

fn kinds(report: &serde_json::Value) -> Vec<String> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap().to_string())
        .collect()
}

fn files_under(dir: &Path, folder: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir.join("shards/s0").join(folder))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    files.sort();
    files
}

fn flip_byte(file: &Path, at: usize) {
    let mut bytes = std::fs::read(file).unwrap();
    let at = at.min(bytes.len() - 1);
    bytes[at] ^= 0x20;
    std::fs::write(file, bytes).unwrap();
}

#[tokio::test]
async fn a_healthy_shard_lists_inspects_and_verifies() {
    let dir = tempfile::tempdir().unwrap();
    build_shard(dir.path()).await;
    let (code, report) = verify(dir.path(), true);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["counts"]["streams"], 2);
    assert_eq!(report["counts"]["index_runs"], 3);
    assert_eq!(report["counts"]["wal_objects"], 7, "{report}");
    assert_eq!(report["counts"]["chunks_read"], 6);

    let list = strata(&["shard", "list", "--json"], dir.path());
    assert!(list.status.success());
    let shards: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(shards[0]["shard"], "s0");
    assert_eq!(shards[0]["manifest"]["writer_epoch"], 1);

    let inspect = strata(&["shard", "inspect", "s0", "--json"], dir.path());
    assert!(inspect.status.success());
    let view: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    let streams = view["streams"].as_array().unwrap();
    assert_eq!(streams.len(), 2);
    assert_eq!(streams[0]["next_offset"], 45);
    assert_eq!(streams[0]["sealed_chunks"], 3);
    assert_eq!(streams[0]["unsealed_from"], 30);
    assert_eq!(streams[1]["next_offset"], 40);
    // Text output names the same things.
    let text = strata(&["shard", "inspect", "s0"], dir.path());
    assert!(String::from_utf8_lossy(&text.stdout).contains("shard s0"));
}

#[tokio::test]
async fn a_missing_manifest_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    build_shard(dir.path()).await;
    std::fs::remove_file(dir.path().join("shards/s0/manifest")).unwrap();
    let (code, report) = verify(dir.path(), false);
    assert_eq!(code, EXIT_DAMAGED);
    assert!(
        kinds(&report).contains(&"manifest_missing".to_string()),
        "{report}"
    );
}

#[tokio::test]
async fn a_corrupt_index_run_is_reported_by_name() {
    let dir = tempfile::tempdir().unwrap();
    build_shard(dir.path()).await;
    let runs = files_under(dir.path(), "index");
    assert_eq!(runs.len(), 3);
    flip_byte(&runs[1], 40);
    let (code, report) = verify(dir.path(), false);
    assert_eq!(code, EXIT_DAMAGED);
    let finding = &report["findings"][0];
    assert_eq!(finding["kind"], "index_run_corrupt", "{report}");
    let name = runs[1].file_name().unwrap().to_str().unwrap();
    assert!(
        finding["object"].as_str().unwrap().ends_with(name),
        "{report}"
    );
}

#[tokio::test]
async fn a_corrupt_chunk_is_found_by_a_deep_verify() {
    let dir = tempfile::tempdir().unwrap();
    build_shard(dir.path()).await;
    let segments = files_under(dir.path(), "seg");
    assert_eq!(segments.len(), 3);
    // Inside the first chunk's pages (well before the table and trailer).
    flip_byte(&segments[0], 200);
    let (shallow, _) = verify(dir.path(), false);
    assert_eq!(
        shallow, 0,
        "the tables are intact: only reading chunks finds it"
    );
    let (code, report) = verify(dir.path(), true);
    assert_eq!(code, EXIT_DAMAGED);
    assert_eq!(
        kinds(&report),
        vec!["chunk_corrupt".to_string()],
        "{report}"
    );
    let name = segments[0].file_name().unwrap().to_str().unwrap();
    assert!(report["findings"][0]["object"]
        .as_str()
        .unwrap()
        .contains(name));
}

#[tokio::test]
async fn a_wal_object_deleted_in_the_middle_is_a_gap() {
    let dir = tempfile::tempdir().unwrap();
    build_shard(dir.path()).await;
    let wal = files_under(dir.path(), "wal");
    // The last seven objects follow the replay point; remove the third of them.
    let victim = &wal[wal.len() - 5];
    std::fs::remove_file(victim).unwrap();
    let (code, report) = verify(dir.path(), false);
    assert_eq!(code, EXIT_DAMAGED);
    let finding = &report["findings"][0];
    assert_eq!(finding["kind"], "wal_gap", "{report}");
    let name = victim.file_name().unwrap().to_str().unwrap();
    assert!(
        finding["object"].as_str().unwrap().ends_with(name),
        "{report}"
    );
    assert!(
        finding["detail"].as_str().unwrap().contains("4 object(s)"),
        "{report}"
    );
}

#[tokio::test]
async fn usage_errors_and_store_errors_have_their_own_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let bad_name = strata(&["shard", "verify", "NOT_A_SHARD"], dir.path());
    assert_eq!(
        bad_name.status.code(),
        Some(2),
        "an invalid shard name is a usage error"
    );
    // A store that cannot be opened is an error, not damage.
    let unreachable = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["shard", "list", "--store", "s3://"])
        .output()
        .unwrap();
    assert_eq!(unreachable.status.code(), Some(1));
    let usage = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["shard", "verify"])
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(2), "clap's usage error");
}
