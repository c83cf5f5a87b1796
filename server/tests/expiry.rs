//! Streams whose TTL passes while nobody touches them are retired by the
//! server on its own (and their data reclaimed by garbage collection), also
//! when they were created before a restart.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{client, free_port, Server};

/// The descriptor state `strata stream inspect` reports.
fn descriptor_state(store: &Path, name: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args([
            "stream",
            "inspect",
            &format!("default/{name}"),
            "--json",
            "--store",
        ])
        .arg(store)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["descriptor"]["state"].as_str().unwrap().to_string()
}

/// Segment objects in the store (the sealed data of every stream).
fn segments(store: &Path) -> usize {
    std::fs::read_dir(store.join("shards/s0/seg"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Polls `done` every 100 ms for at most `limit`.
async fn within(limit: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never happened: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn create_with_ttl(server: &Server, name: &str, ttl_s: u64) {
    let r = client()
        .put(server.url(name))
        .header("content-type", "text/plain")
        .header("stream-ttl", ttl_s.to_string())
        .body("expiring data")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
}

#[tokio::test]
async fn an_untouched_stream_expires_and_its_data_is_reclaimed() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap().to_string();
    let sealing = ["--seal-age-ms", "100", "--gc-grace-ms", "0"];
    let server = Server::start(&store, free_port(), &sealing).await;
    // Sealed into segments of their own.
    create_with_ttl(&server, "short", 2).await;
    within(
        Duration::from_secs(10),
        "the first stream is sealed",
        || segments(dir.path()) == 1,
    )
    .await;
    create_with_ttl(&server, "long", 3600).await;
    within(
        Duration::from_secs(10),
        "the second stream is sealed",
        || segments(dir.path()) == 2,
    )
    .await;
    // Nobody reads or writes it again.
    within(
        Duration::from_secs(20),
        "the stream expires unasked",
        || descriptor_state(dir.path(), "short") == "deleted",
    )
    .await;
    assert_eq!(descriptor_state(dir.path(), "long"), "live");
    // Its segment is collected once a seal drops it; the other stays.
    within(
        Duration::from_secs(20),
        "the expired stream's segment is collected",
        || segments(dir.path()) == 1,
    )
    .await;
    let r = client().get(server.url("long")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "expiring data");
}

#[tokio::test]
async fn streams_created_before_a_restart_still_expire_unasked() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap().to_string();
    let port = free_port();
    let server = Server::start(&store, port, &[]).await;
    create_with_ttl(&server, "before-restart", 1).await;
    server.kill_9();
    let _restarted = Server::start(&store, port, &[]).await;
    within(
        Duration::from_secs(20),
        "the stream expires after the restart",
        || descriptor_state(dir.path(), "before-restart") == "deleted",
    )
    .await;
}

/// The idle clock survives a restart: a stream last used before a restart
/// expires its TTL after that use, not after the restart (the shard keeps
/// its last write, and its last read as of the last usage flush).
#[tokio::test]
async fn a_restart_does_not_postpone_an_idle_expiry() {
    #![allow(clippy::disallowed_methods)]
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap().to_string();
    let port = free_port();
    let flush = ["--usage-flush-ms", "100"];
    let mut server = Server::start(&store, port, &flush).await;
    create_with_ttl(&server, "idle", 4).await;
    // Used last now: read (a read renews the sliding TTL).
    let used = std::time::Instant::now();
    let r = client().get(server.url("idle")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    // A clean stop writes the tallied reads; the restart comes 2 s later,
    // so a clock counted from the restart would expire it at 6 s, not 4 s.
    let pid = libc::pid_t::try_from(server.child.id()).unwrap();
    // SAFETY: signalling a child process this test owns.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    assert!(server.child.wait().unwrap().success());
    drop(server);
    within(Duration::from_secs(5), "two seconds pass", || {
        used.elapsed() >= Duration::from_secs(2)
    })
    .await;
    let restarted = Server::start(&store, port, &flush).await;
    // HEAD does not renew the TTL.
    let head = || async {
        client()
            .head(restarted.url("idle"))
            .send()
            .await
            .unwrap()
            .status()
    };
    assert_eq!(head().await, 200, "not expired before its time");
    let mut gone = false;
    while used.elapsed() < Duration::from_millis(5_500) {
        if head().await == 404 {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "still there {:?} after its last use", used.elapsed());
    assert!(used.elapsed() >= Duration::from_secs(4), "expired early");
}

/// Reads the names in the default project's catalog from its bucket objects.
fn catalog_names(store: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let Ok(dir) = std::fs::read_dir(store.join("registry/default/catalog")) else {
        return names;
    };
    for entry in dir {
        let path = entry.unwrap().path();
        // Only bucket objects (the local store stages writes beside them).
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let bytes = std::fs::read(path).unwrap();
        let bucket: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        for e in bucket["entries"].as_array().unwrap() {
            names.push(e["name"].as_str().unwrap().to_string());
        }
    }
    names.sort();
    names
}

#[tokio::test]
async fn an_idle_product_collection_expires_and_leaves_the_catalog() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path().to_str().unwrap(), free_port(), &[]).await;
    let api = common::product::Api::new(&server, None, common::DEV_KEY);
    let idle = r#"{"format":{"kind":"json"},"expiry":{"idle":"1s"}}"#;
    assert_eq!(api.create("fleeting", idle).await.status, 201);
    assert_eq!(
        api.create("lasting", common::product::JSON_DOC)
            .await
            .status,
        201
    );
    assert_eq!(api.append("fleeting", "k", "1").await.status, 200);
    assert_eq!(catalog_names(dir.path()), ["fleeting", "lasting"]);
    within(
        Duration::from_secs(20),
        "the idle collection expires unasked",
        || descriptor_state(dir.path(), "fleeting") == "deleted",
    )
    .await;
    assert_eq!(catalog_names(dir.path()), ["lasting"]);
    api.metadata("fleeting")
        .await
        .expect_error(404, "not_found");
    // The name is free: a new incarnation.
    assert_eq!(api.create("fleeting", idle).await.status, 201);
}
