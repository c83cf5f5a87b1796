//! `strata shard list | inspect | verify` end to end: a shard written through
//! the engine on a local directory, then damaged one way per test; `verify`
//! must name the damage (exit code 3) and pass on the healthy shard (0).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt};
use strata_engine::store::{open_store, StoreOptions};
use strata_engine::{
    AppendRequest, EngineEnv, EngineError, InstanceId, ReadLimits, Shard, ShardConfig, ShardName,
    StreamRef,
};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

mod common;

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
    let (store, shard) = build_live_shard(dir).await;
    shard.crash();
    store
}

/// As `build_shard`, with the owner still running.
async fn build_live_shard(dir: &Path) -> (Arc<dyn ObjectStore>, Shard) {
    let store = open_store(dir.to_str().unwrap(), &StoreOptions::default()).unwrap();
    let shard = build_live_shard_in(&store).await;
    (store, shard)
}

/// `build_shard` in any store.
async fn build_shard_in(store: &Arc<dyn ObjectStore>) {
    build_live_shard_in(store).await.crash();
}

async fn build_live_shard_in(store: &Arc<dyn ObjectStore>) -> Shard {
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
    shard
}

/// The payloads of one stream, read by a new owner of the shard.
async fn read_stream(store: &Arc<dyn ObjectStore>, s: StreamRef) -> Vec<String> {
    let shard = Shard::open(
        EngineEnv::production(store.clone()),
        ShardName::new("s0").unwrap(),
        InstanceId([9; 16]),
        ShardConfig::default(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    let mut from = 0;
    for _ in 0..1000 {
        let batch = shard
            .read(&s, from, ReadLimits::default(), &cipher(), None)
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
            break;
        }
    }
    shard.shutdown().await;
    out
}

/// What `build_shard` acknowledged on stream 1.
fn expected_stream_1() -> Vec<String> {
    let mut out: Vec<String> = (0..4)
        .flat_map(|round| (0..10).map(move |i| format!("r{round}-{i}")))
        .collect();
    out.extend((0..5).map(|i| format!("tail-{i}")));
    out
}

fn repair(args: &[&str], dir: &Path) -> (i32, serde_json::Value) {
    repair_at(args, &Target::local(dir))
}

fn repair_at(args: &[&str], target: &Target) -> (i32, serde_json::Value) {
    let mut all = vec!["shard"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = strata_at(&all, target);
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "no JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), json)
}

fn strata(args: &[&str], dir: &Path) -> Output {
    strata_at(args, &Target::local(dir))
}

/// Where a test's shard lives: a store URL, and the flags that reach it.
struct Target {
    url: String,
    flags: Vec<String>,
    options: StoreOptions,
}

impl Target {
    fn local(dir: &Path) -> Target {
        Target {
            url: dir.to_str().unwrap().to_string(),
            flags: Vec::new(),
            options: StoreOptions::default(),
        }
    }

    /// A fresh prefix of the moto bucket `scripts/test` starts.
    #[cfg(feature = "s3-tests")]
    #[allow(clippy::disallowed_methods)] // a unique prefix per run, not simulated time
    fn s3(name: &str) -> Target {
        let endpoint = std::env::var("STRATA_TEST_S3_ENDPOINT").expect("scripts/test starts moto");
        let bucket = std::env::var("STRATA_TEST_S3_BUCKET").expect("STRATA_TEST_S3_BUCKET");
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let s3 = strata_engine::store::S3Options {
            endpoint: Some(endpoint.clone()),
            region: Some("us-east-1".into()),
            access_key_id: Some("testing".into()),
            secret_access_key: Some("testing".into()),
            allow_http: true,
        };
        Target {
            url: format!("s3://{bucket}/{name}-{nonce}"),
            flags: [
                "--s3-endpoint",
                &endpoint,
                "--s3-region",
                "us-east-1",
                "--s3-access-key-id",
                "testing",
                "--s3-secret-access-key",
                "testing",
                "--s3-allow-http",
            ]
            .iter()
            .map(|f| f.to_string())
            .collect(),
            options: StoreOptions {
                s3,
                ..StoreOptions::default()
            },
        }
    }

    fn open(&self) -> Arc<dyn ObjectStore> {
        open_store(&self.url, &self.options).unwrap()
    }
}

fn strata_at(args: &[&str], target: &Target) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .arg("--store")
        .arg(&target.url)
        .args(&target.flags)
        .output()
        .expect("strata runs")
}

fn verify(dir: &Path, deep: bool) -> (i32, serde_json::Value) {
    verify_at(&Target::local(dir), deep)
}

fn verify_at(target: &Target, deep: bool) -> (i32, serde_json::Value) {
    let mut args = vec!["shard", "verify", "s0", "--json"];
    if deep {
        args.push("--deep");
    }
    let out = strata_at(&args, target);
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

/// `recover` refuses (exit 3) and lists exactly stream 1's offsets
/// `from..to` as unrecoverable.
fn assert_recover_names_only_stream_1_records(dir: &Path, from: u64, to: u64) {
    let (code, repaired) = repair(&["recover", "s0", "--force"], dir);
    assert_eq!(code, EXIT_DAMAGED, "{repaired}");
    let lost = repaired["unrecoverable"].as_array().unwrap();
    assert_eq!(lost.len(), 1, "{repaired}");
    assert_eq!(lost[0]["stream_id"], "01".repeat(16));
    assert_eq!(
        (lost[0]["from"].as_u64(), lost[0]["to"].as_u64()),
        (Some(from), Some(to))
    );
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
    // No repair brings those records back: recover says exactly which.
    assert_recover_names_only_stream_1_records(dir.path(), 0, 10);
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
    // The missing record and the four after it cannot be reached.
    assert_recover_names_only_stream_1_records(dir.path(), 40, 45);
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

#[tokio::test]
async fn rollback_restores_a_retained_version_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = build_shard(dir.path()).await;
    let inspect = strata(&["shard", "inspect", "s0", "--json"], dir.path());
    let view: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    let versions = view["retained_versions"].as_array().unwrap().clone();
    assert_eq!(versions.len(), 4, "the claim and three seals: {view}");
    // Back to the version after the first seal: the WAL since still covers
    // everything, so nothing is lost.
    let to = versions[1].as_u64().unwrap().to_string();
    let (code, report) = repair(&["rollback", "s0", "--to", &to, "--force"], dir.path());
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["outcome"]["status"], "done", "{report}");
    assert_eq!(report["restored_from"]["version"], versions[1], "{report}");
    assert!(report["lost"].as_array().unwrap().is_empty(), "{report}");
    let (healthy, after) = verify(dir.path(), true);
    assert_eq!(healthy, 0, "{after}");
    assert_eq!(read_stream(&store, stream(1)).await, expected_stream_1());
}

#[tokio::test]
async fn a_repair_refuses_without_force_right_after_a_write() {
    let dir = tempfile::tempdir().unwrap();
    build_shard(dir.path()).await;
    let (code, report) = repair(&["rollback", "s0", "--to", "2"], dir.path());
    assert_eq!(code, EXIT_DAMAGED, "{report}");
    let why = report["outcome"]["reason"].as_str().unwrap();
    assert!(why.contains("live owner"), "{report}");
}

#[tokio::test]
async fn recover_rebuilds_a_deleted_manifest_from_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let store = build_shard(dir.path()).await;
    std::fs::remove_file(dir.path().join("shards/s0/manifest")).unwrap();
    let (code, report) = repair(&["recover", "s0", "--force"], dir.path());
    assert_eq!(code, 0, "{report}");
    assert!(report["lost"].as_array().unwrap().is_empty(), "{report}");
    let (healthy, after) = verify(dir.path(), true);
    assert_eq!(healthy, 0, "{after}");
    assert_eq!(read_stream(&store, stream(1)).await, expected_stream_1());
    // Nothing left to do.
    let (code, again) = repair(&["recover", "s0", "--force"], dir.path());
    assert_eq!(
        (code, again["healthy"].as_bool()),
        (0, Some(true)),
        "{again}"
    );
}

#[tokio::test]
async fn recover_quarantines_a_corrupt_run_and_keeps_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let store = build_shard(dir.path()).await;
    let runs = files_under(dir.path(), "index");
    let newest = runs.last().unwrap().clone();
    flip_byte(&newest, 40);
    let (code, report) = repair(&["recover", "s0", "--force"], dir.path());
    assert_eq!(code, 0, "{report}");
    let name = newest.file_name().unwrap().to_str().unwrap();
    let quarantined = report["quarantined"].as_array().unwrap();
    assert!(
        quarantined
            .iter()
            .any(|q| q.as_str().unwrap().ends_with(name)),
        "{report}"
    );
    assert!(!newest.exists(), "moved away");
    let kept = std::fs::read_dir(dir.path().join("quarantine/shards/s0/index"))
        .unwrap()
        .count();
    assert_eq!(kept, 1, "the damaged run is kept under quarantine/");
    assert!(report["lost"].as_array().unwrap().is_empty(), "{report}");
    let (healthy, after) = verify(dir.path(), true);
    assert_eq!(healthy, 0, "{after}");
    assert_eq!(read_stream(&store, stream(1)).await, expected_stream_1());
}

#[tokio::test]
async fn a_repair_that_would_lose_records_is_refused_and_names_them() {
    let dir = tempfile::tempdir().unwrap();
    build_shard(dir.path()).await;
    // The WAL below the replay point is gone, as after garbage collection:
    // version 2 (after the first seal) can no longer replay the later seals.
    let manifest: serde_json::Value =
        serde_json::from_slice(&strata(&["shard", "inspect", "s0", "--json"], dir.path()).stdout)
            .unwrap();
    let replay = manifest["manifest"]["replay_slot"].as_u64().unwrap();
    for file in files_under(dir.path(), "wal") {
        let slot: u64 = file.file_name().unwrap().to_str().unwrap().parse().unwrap();
        if slot < replay {
            std::fs::remove_file(file).unwrap();
        }
    }
    let (code, report) = repair(&["rollback", "s0", "--to", "2", "--force"], dir.path());
    assert_eq!(code, EXIT_DAMAGED, "{report}");
    assert_eq!(report["outcome"]["status"], "refused", "{report}");
    let lost = report["lost"].as_array().unwrap();
    assert_eq!(
        lost.len(),
        2,
        "both streams lose their later seals: {report}"
    );
    let one = lost
        .iter()
        .find(|l| l["stream_id"] == "01".repeat(16))
        .unwrap();
    assert_eq!(
        (one["from"].as_u64(), one["to"].as_u64()),
        (Some(10), Some(45)),
        "{report}"
    );
    // Nothing changed.
    let (healthy, after) = verify(dir.path(), false);
    assert_eq!(healthy, 0, "{after}");
}

#[tokio::test]
async fn a_repair_fences_a_live_zombie_writer() {
    let dir = tempfile::tempdir().unwrap();
    let (store, zombie) = build_live_shard(dir.path()).await;
    let versions: serde_json::Value =
        serde_json::from_slice(&strata(&["shard", "inspect", "s0", "--json"], dir.path()).stdout)
            .unwrap();
    let newest = versions["retained_versions"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .as_u64()
        .unwrap()
        .to_string();
    let (code, report) = repair(&["rollback", "s0", "--to", &newest, "--force"], dir.path());
    assert_eq!(code, 0, "{report}");
    // The old owner's next write fails: it is fenced, and writes nothing.
    let late = zombie
        .append(AppendRequest::new(
            stream(1),
            cipher(),
            vec![Bytes::from("after the repair")],
        ))
        .await;
    assert!(
        matches!(
            late,
            Err(EngineError::Fenced) | Err(EngineError::OutcomeUnknown)
        ),
        "{late:?}"
    );
    zombie.crash();
    assert_eq!(read_stream(&store, stream(1)).await, expected_stream_1());
}

#[tokio::test]
async fn recover_without_any_retained_version_rebuilds_from_the_objects() {
    let dir = tempfile::tempdir().unwrap();
    let store = build_shard(dir.path()).await;
    std::fs::remove_file(dir.path().join("shards/s0/manifest")).unwrap();
    std::fs::remove_dir_all(dir.path().join("shards/s0/manifest-history")).unwrap();
    let (code, report) = repair(&["recover", "s0", "--force"], dir.path());
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["restored_from"]["kind"], "rebuilt", "{report}");
    assert!(report["lost"].as_array().unwrap().is_empty(), "{report}");
    let (healthy, after) = verify(dir.path(), true);
    assert_eq!(healthy, 0, "{after}");
    assert_eq!(read_stream(&store, stream(1)).await, expected_stream_1());
}

#[tokio::test]
async fn recover_rebuilds_around_a_corrupt_run_when_no_version_avoids_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = build_shard(dir.path()).await;
    std::fs::remove_dir_all(dir.path().join("shards/s0/manifest-history")).unwrap();
    let runs = files_under(dir.path(), "index");
    flip_byte(&runs[2], 40);
    // What only the corrupt run held (a close, a delete, a producer's state,
    // a stream without records) cannot be verified: refused unless the
    // operator accepts that loss.
    let (code, report) = repair(&["recover", "s0", "--force"], dir.path());
    assert_eq!(code, 3, "{report}");
    assert_eq!(report["outcome"]["status"], "refused", "{report}");
    let undone = report["lost_changes"].as_array().unwrap();
    assert_eq!(undone.len(), 1, "{report}");
    assert!(
        undone[0]["change"]
            .as_str()
            .unwrap()
            .contains("does not decode"),
        "{report}"
    );
    let (code, report) = repair(&["recover", "s0", "--force", "--accept-loss"], dir.path());
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["restored_from"]["kind"], "rebuilt", "{report}");
    assert_eq!(
        report["quarantined"].as_array().unwrap().len(),
        1,
        "{report}"
    );
    assert!(report["lost"].as_array().unwrap().is_empty(), "{report}");
    let (healthy, after) = verify(dir.path(), true);
    assert_eq!(healthy, 0, "{after}");
    assert_eq!(read_stream(&store, stream(1)).await, expected_stream_1());
}

const MANIFEST: &str = "shards/s0/manifest";

/// `recover` on a shard whose manifest does not decode, as a user would
/// meet it: the manifest is replaced (conditionally on the corrupt object's
/// e-tag, never deleted first), its exact bytes are kept under
/// `quarantine/`, and every record is served again.
async fn recover_replaces_a_corrupt_manifest(target: &Target) {
    let store = target.open();
    build_shard_in(&store).await;
    let manifest = object_store::path::Path::from(MANIFEST);
    store
        .put(
            &manifest,
            object_store::PutPayload::from_static(b"garbage\n"),
        )
        .await
        .unwrap();
    let (code, report) = repair_at(&["recover", "s0", "--force"], target);
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["outcome"]["status"], "done", "{report}");
    assert!(report["lost"].as_array().unwrap().is_empty(), "{report}");
    let quarantined = report["quarantined"].as_array().unwrap();
    assert_eq!(quarantined.len(), 1, "{report}");
    assert_eq!(quarantined[0], MANIFEST, "{report}");
    let kept: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(store.list(Some(
        &object_store::path::Path::from("quarantine/shards/s0"),
    )))
    .await
    .unwrap();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(
        kept[0]
            .location
            .as_ref()
            .starts_with("quarantine/shards/s0/manifest."),
        "{kept:?}"
    );
    let bytes = store
        .get(&kept[0].location)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(&bytes[..], b"garbage\n", "the exact bytes read are kept");
    let (healthy, after) = verify_at(target, true);
    assert_eq!(healthy, 0, "{after}");
    assert_eq!(read_stream(&store, stream(1)).await, expected_stream_1());
}

/// `recover` on a shard whose manifest was deleted: written create-only,
/// then the shard opens (which it refuses to do on its own, see
/// `serve_refuses_a_shard_whose_manifest_is_missing`).
async fn recover_restores_a_deleted_manifest(target: &Target) {
    let store = target.open();
    build_shard_in(&store).await;
    store
        .delete(&object_store::path::Path::from(MANIFEST))
        .await
        .unwrap();
    let (code, report) = repair_at(&["recover", "s0", "--force"], target);
    assert_eq!(code, 0, "{report}");
    assert!(
        report["quarantined"].as_array().unwrap().is_empty(),
        "{report}"
    );
    assert!(report["lost"].as_array().unwrap().is_empty(), "{report}");
    let (healthy, after) = verify_at(target, true);
    assert_eq!(healthy, 0, "{after}");
    assert_eq!(read_stream(&store, stream(1)).await, expected_stream_1());
}

#[tokio::test]
async fn recover_replaces_a_corrupt_manifest_on_a_local_store() {
    let dir = tempfile::tempdir().unwrap();
    recover_replaces_a_corrupt_manifest(&Target::local(dir.path())).await;
}

#[tokio::test]
async fn recover_restores_a_deleted_manifest_on_a_local_store() {
    let dir = tempfile::tempdir().unwrap();
    recover_restores_a_deleted_manifest(&Target::local(dir.path())).await;
}

#[cfg(feature = "s3-tests")]
#[tokio::test]
async fn recover_replaces_a_corrupt_manifest_on_s3() {
    recover_replaces_a_corrupt_manifest(&Target::s3("recover-corrupt")).await;
}

#[cfg(feature = "s3-tests")]
#[tokio::test]
async fn recover_restores_a_deleted_manifest_on_s3() {
    recover_restores_a_deleted_manifest(&Target::s3("recover-deleted")).await;
}

/// `strata serve` on a store whose shard lost its manifest but not its data
/// refuses to start, names `strata shard recover`, and writes no manifest;
/// after the repair it starts.
#[tokio::test]
async fn serve_refuses_a_shard_whose_manifest_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let store = build_shard(dir.path()).await;
    std::fs::remove_file(dir.path().join(MANIFEST)).unwrap();
    let serve = |dir: &Path| {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(env!("CARGO_BIN_EXE_strata"))
            .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--store"])
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("strata starts");
        (child, port)
    };
    let (mut child, port) = serve(dir.path());
    // It must exit on its own; answering /healthz means it started.
    let exited = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        let healthz = common::client()
            .get(format!("http://127.0.0.1:{port}/healthz"))
            .timeout(std::time::Duration::from_millis(200))
            .send()
            .await;
        if healthz.is_ok_and(|r| r.status().is_success()) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("strata serve started a shard that has data but no manifest");
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!exited.success(), "{stderr}");
    assert!(stderr.contains("strata shard recover s0"), "{stderr}");
    assert!(
        !dir.path().join(MANIFEST).exists(),
        "no manifest was created"
    );
    let (code, report) = repair(&["recover", "s0", "--force"], dir.path());
    assert_eq!(code, 0, "{report}");
    assert_eq!(read_stream(&store, stream(1)).await, expected_stream_1());
}
