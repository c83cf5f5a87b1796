//! Exactly-once across kill -9: producers append to their own routing keys
//! while the server is killed and restarted on the same store; every producer
//! retries its unanswered request with the same (id, epoch, seq) until it is
//! answered. Afterwards each key holds each producer's records exactly once,
//! in order, with no gap.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::product::{producer, Api, JSON_DOC};
use common::{free_port, Server, DEV_KEY};
use reqwest::Method;
use serde_json::{json, Value};

const WRITERS: u64 = 6;
const RECORDS_PER_WRITER: u64 = 40;

/// Sends `seq` of writer `w` until the server answers it (across restarts).
async fn send_until_answered(api: &Api, w: u64, seq: u64) -> Value {
    for _ in 0..2_000 {
        let request = producer(
            api.request(Method::POST, "crash/records")
                .header("prisma-routing-key", format!("k{w}"))
                .header("content-type", "application/json")
                .body(json!({"w": w, "s": seq}).to_string()),
            &format!("p{w}"),
            0,
            seq,
        );
        match request.send().await {
            Ok(r) if r.status() == 200 => {
                return serde_json::from_slice(&r.bytes().await.unwrap()).unwrap()
            }
            Ok(r) if r.status().is_server_error() => {}
            Ok(r) => panic!(
                "writer {w} seq {seq}: {} {}",
                r.status(),
                r.text().await.unwrap()
            ),
            Err(_) => {} // the server is down: retry the same request
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("writer {w} seq {seq} was never answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_stay_exactly_once_across_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap().to_string();
    let port = free_port();
    let server = Server::start(&store, port, &[]).await;
    let api = Api::new(&server, None, DEV_KEY);
    assert_eq!(api.create("crash", JSON_DOC).await.status, 201);
    let acked = Arc::new(AtomicU64::new(0));
    let duplicates = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let api = api.clone();
            let acked = acked.clone();
            let duplicates = duplicates.clone();
            tokio::spawn(async move {
                for seq in 0..RECORDS_PER_WRITER {
                    let answer = send_until_answered(&api, w, seq).await;
                    if answer["duplicate"] == true {
                        duplicates.fetch_add(1, Ordering::Relaxed);
                    }
                    acked.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Kill while the writers are mid-way, then start again on the same store.
    for _ in 0..2_000 {
        if acked.load(Ordering::Relaxed) >= WRITERS * RECORDS_PER_WRITER / 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let at_kill = acked.load(Ordering::Relaxed);
    server.kill_9();
    let server = Server::start(&store, port, &[]).await;
    for writer in writers {
        writer.await.unwrap();
    }
    assert!(
        at_kill < WRITERS * RECORDS_PER_WRITER,
        "the kill came mid-way"
    );
    for w in 0..WRITERS {
        let (records, _) = api.read_all_json("crash", &format!("k{w}")).await;
        let expected: Vec<Value> = (0..RECORDS_PER_WRITER)
            .map(|s| json!({"w": w, "s": s}))
            .collect();
        assert_eq!(
            records, expected,
            "writer {w}: exactly once, in order, no gap"
        );
    }
    // The default key saw none of it; the collection is intact after a second restart.
    assert_eq!(api.read("crash", "", None).await.text(), "[]");
    server.kill_9();
    let _server = Server::start(&store, port, &[]).await;
    let (records, _) = api.read_all_json("crash", "k0").await;
    assert_eq!(records.len() as u64, RECORDS_PER_WRITER);
    eprintln!(
        "killed after {at_kill} acknowledged appends; {} retries answered as duplicates",
        duplicates.load(Ordering::Relaxed)
    );
}
