//! Two processes on one local-directory store.
//!
//! The test binary re-runs itself as child processes (selected by
//! `STRATA_CHILD`), so the store's compare-and-swap and create-only writes are
//! exercised across real processes, as they are when two servers share a disk.

use std::collections::{BTreeMap, HashSet};
use std::process::{Command, Stdio};
use std::sync::Arc;

use bytes::Bytes;
use object_store::ObjectStore;
use strata_engine::store::{open_store, StoreOptions};
use strata_engine::{
    AppendRequest, EngineEnv, EngineError, InstanceId, ReadLimits, Shard, ShardConfig, ShardName,
    StreamRef,
};
use strata_manifest::{CasError, CasObject, Manifest, ManifestCodec, RetryPolicy};
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

const STREAM: StreamRef = StreamRef {
    id: [42; 16],
    incarnation: 1,
};
const APPENDS_PER_CHILD: usize = 150;
const CAS_ROUNDS_PER_CHILD: u64 = 150;

fn cipher() -> Arc<StreamCipher> {
    Arc::new(StreamCipher::new(
        StreamEpoch([1; 16]),
        StreamKey::from_bytes([2; 32]),
    ))
}

fn store(dir: &str) -> Arc<dyn ObjectStore> {
    open_store(dir, &StoreOptions::default()).expect("local store")
}

async fn open(store: &Arc<dyn ObjectStore>, instance: u8) -> Result<Shard, EngineError> {
    Shard::open(
        EngineEnv::production(store.clone()),
        ShardName::new("contended").unwrap(),
        InstanceId([instance; 16]),
        ShardConfig::default(),
    )
    .await
}

/// Child: append records, re-claiming the shard whenever it is fenced; print
/// every acknowledged offset.
async fn child_appender(dir: &str, name: &str) {
    let store = store(dir);
    let instance = name.as_bytes()[0];
    let mut shard = loop {
        if let Ok(s) = open(&store, instance).await {
            break s;
        }
    };
    let _ = shard.create_stream(STREAM, &cipher()).await;
    // Rendezvous: both children hold an open shard before either appends, so
    // the one that opened first is fenced by the other, and so on.
    let root = std::path::Path::new(dir);
    std::fs::write(root.join(format!("ready-{name}")), b"").expect("marker");
    let peers_ready = || {
        ["a", "b"]
            .iter()
            .all(|peer| root.join(format!("ready-{peer}")).exists())
    };
    for _ in 0..10_000 {
        if peers_ready() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    for i in 0..APPENDS_PER_CHILD {
        let payload = format!("{name}-{i}");
        let request = AppendRequest::new(STREAM, cipher(), vec![Bytes::from(payload.clone())]);
        match shard.append(request).await {
            Ok(ack) => println!("ACK {} {payload}", ack.first_offset),
            Err(EngineError::Fenced) => {
                println!("FENCED");
                shard = loop {
                    if let Ok(s) = open(&store, instance).await {
                        break s;
                    }
                };
            }
            Err(e) => println!("ERR {e}"),
        }
    }
}

/// Child: increment a counter held in a manifest by compare-and-swap.
async fn child_cas(dir: &str) {
    let store = store(dir);
    let cas = CasObject::<ManifestCodec>::new(
        store,
        object_store::path::Path::from("counter/manifest"),
        RetryPolicy::default(),
    );
    let mut wins = 0u64;
    let mut token = std::process::id() as u64 * 1_000_000;
    while wins < CAS_ROUNDS_PER_CHILD {
        token += 1;
        let mut write_id = [0u8; 16];
        write_id[..8].copy_from_slice(&token.to_le_bytes());
        let current = cas.load().await.expect("load");
        let result = match current {
            None => {
                cas.create(Manifest::initial("c".into(), [0; 16], write_id))
                    .await
            }
            Some(v) => {
                let mut next = v.value.successor(v.value.writer);
                next.writer.write_id = write_id;
                cas.replace(&v, next).await
            }
        };
        match result {
            Ok(_) => wins += 1,
            Err(CasError::Conflict { .. }) => {}
            Err(e) => panic!("CAS failed: {e}"),
        }
    }
    println!("WINS {wins}");
}

#[tokio::test]
async fn child_process() {
    let (Ok(mode), Ok(dir)) = (std::env::var("STRATA_CHILD"), std::env::var("STRATA_DIR")) else {
        return; // only meaningful when spawned by the tests below
    };
    // libtest prints "test child_process ... " before our output: start a line.
    println!();
    match mode.as_str() {
        "cas" => child_cas(&dir).await,
        name => child_appender(&dir, name).await,
    }
}

fn spawn_children(dir: &str, modes: &[&str]) -> Vec<String> {
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = modes
        .iter()
        .map(|mode| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "child_process",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("STRATA_CHILD", mode)
                .env("STRATA_DIR", dir)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn child")
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("child runs");
            assert!(out.status.success(), "child failed");
            String::from_utf8(out.stdout).expect("utf-8")
        })
        .collect()
}

#[tokio::test]
async fn compare_and_swap_is_atomic_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap().to_string();
    let outputs = spawn_children(&dir, &["cas", "cas"]);
    let total: u64 = outputs
        .iter()
        .flat_map(|o| o.lines())
        .filter_map(|l| l.strip_prefix("WINS "))
        .map(|n| n.parse::<u64>().unwrap())
        .sum();
    assert_eq!(total, 2 * CAS_ROUNDS_PER_CHILD);
    let cas = CasObject::<ManifestCodec>::new(
        store(&dir),
        object_store::path::Path::from("counter/manifest"),
        RetryPolicy::default(),
    );
    // Every successful swap advanced the version by one: no update was lost.
    assert_eq!(cas.load().await.unwrap().unwrap().value.version, total);
}

#[tokio::test]
async fn two_processes_contending_for_a_shard_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().to_str().unwrap().to_string();
    let outputs = spawn_children(&dir, &["a", "b"]);
    let mut acked: BTreeMap<u64, String> = BTreeMap::new();
    let mut fenced = 0;
    for line in outputs.iter().flat_map(|o| o.lines()) {
        if let Some(rest) = line.strip_prefix("ACK ") {
            let (offset, payload) = rest.split_once(' ').unwrap();
            let previous = acked.insert(offset.parse().unwrap(), payload.to_string());
            assert!(previous.is_none(), "offset {offset} acknowledged twice");
        } else if line == "FENCED" {
            fenced += 1;
        }
    }
    assert!(
        fenced > 0,
        "the children never took the shard from each other"
    );
    assert!(acked.len() > APPENDS_PER_CHILD / 2);

    let store = store(&dir);
    let shard = open(&store, 9).await.unwrap();
    let mut records = Vec::new();
    let mut from = 0;
    loop {
        let batch = shard
            .read(&STREAM, from, ReadLimits::default(), &cipher(), None)
            .await
            .unwrap();
        records.extend(batch.records.iter().map(|r| (r.offset, r.payload.clone())));
        from = batch.next_offset;
        if batch.up_to_date() {
            break;
        }
    }
    for (i, (offset, _)) in records.iter().enumerate() {
        assert_eq!(*offset, i as u64, "offsets are contiguous");
    }
    let unique: HashSet<&Bytes> = records.iter().map(|(_, p)| p).collect();
    assert_eq!(unique.len(), records.len(), "no record is stored twice");
    for (offset, payload) in &acked {
        assert_eq!(
            records.get(*offset as usize).map(|(_, p)| p.as_ref()),
            Some(payload.as_bytes()),
            "acknowledged record at {offset} survives"
        );
    }
}
