//! Exactly-once across kill -9: producers append to their own routing keys
//! while the server is killed and restarted on the same store; every producer
//! retries its unanswered request with the same (id, epoch, seq) until it is
//! answered. Afterwards each key holds each producer's records exactly once,
//! in order, with no gap, and after another restart a retry of each
//! producer's last answered request is a duplicate with its original cursor.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use common::product::{producer, Api, JSON_DOC};
use common::{free_port, Server, DEV_KEY};
use reqwest::Method;
use serde_json::{json, Value};

const WRITERS: u64 = 6;
const RECORDS_PER_WRITER: u64 = 40;

/// The server's life: how many times it was (re)started and is ready.
type Generation = tokio::sync::watch::Receiver<u64>;

/// Sends `seq` of writer `w` until the server answers it. A request that
/// fails (the server is down: connections are never reused) waits for the
/// next start, then goes again with the same producer tuple.
async fn send_until_answered(api: &Api, generation: &mut Generation, w: u64, seq: u64) -> Value {
    for _ in 0..100 {
        let started = *generation.borrow_and_update();
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
            // A restarted server may still be reopening its shard: go again.
            Ok(r) if r.status().is_server_error() => {}
            Ok(r) => panic!(
                "writer {w} seq {seq}: {} {}",
                r.status(),
                r.text().await.unwrap()
            ),
            Err(_) => {
                generation
                    .wait_for(|g| *g > started)
                    .await
                    .expect("the test outlives its writers");
            }
        }
    }
    panic!("writer {w} seq {seq} was never answered");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_stay_exactly_once_across_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap().to_string();
    let port = free_port();
    let server = Server::start(&store, port, &[]).await;
    let api = Api::new(&server, None, DEV_KEY).fresh_connections();
    assert_eq!(api.create("crash", JSON_DOC).await.status, 201);
    let (acked_tx, mut acked_rx) = tokio::sync::watch::channel(0u64);
    let acked_tx = Arc::new(acked_tx);
    let (generation_tx, generation_rx) = tokio::sync::watch::channel(1u64);
    let duplicates = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let api = api.clone();
            let acked = acked_tx.clone();
            let mut generation = generation_rx.clone();
            let duplicates = duplicates.clone();
            tokio::spawn(async move {
                let mut last = Value::Null;
                for seq in 0..RECORDS_PER_WRITER {
                    last = send_until_answered(&api, &mut generation, w, seq).await;
                    if last["duplicate"] == true {
                        duplicates.fetch_add(1, Ordering::Relaxed);
                    }
                    acked.send_modify(|n| *n += 1);
                }
                last
            })
        })
        .collect();
    // Kill once a quarter is acknowledged, then start again on the same store.
    let at_kill = *acked_rx
        .wait_for(|n| *n >= WRITERS * RECORDS_PER_WRITER / 4)
        .await
        .unwrap();
    server.kill_9();
    let server = Server::start(&store, port, &[]).await;
    generation_tx.send_replace(2);
    let mut last_answers = Vec::new();
    for writer in writers {
        last_answers.push(writer.await.unwrap());
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
    // Producer state came back from the store: a retry of each writer's last
    // answered request (a client that lost the answer) is a duplicate with
    // the original cursor, and writes nothing.
    let mut generation = generation_rx.clone();
    for (w, original) in (0..WRITERS).zip(&last_answers) {
        let retry = send_until_answered(&api, &mut generation, w, RECORDS_PER_WRITER - 1).await;
        assert_eq!(retry["duplicate"], true, "writer {w}: {retry}");
        assert_eq!(retry["count"], 0);
        assert_eq!(
            retry["cursor"], original["cursor"],
            "writer {w}: the original cursor"
        );
    }
    let (records, _) = api.read_all_json("crash", "k0").await;
    assert_eq!(records.len() as u64, RECORDS_PER_WRITER);
    eprintln!(
        "killed after {at_kill} acknowledged appends; {} retries answered as duplicates",
        duplicates.load(Ordering::Relaxed)
    );
}
