//! Kill -9 while 32 clients append, restart on the same store, and check that
//! every acknowledged append is readable at the offset it was acknowledged
//! with; several rounds. Runs on the local-directory store, and on a real
//! S3-compatible server when scripts/test provides one (feature s3-tests).

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{client, free_port, Server};
use parking_lot::Mutex;

const CLIENTS: usize = 32;
const ROUNDS: usize = 3;
/// Acknowledged appends per client before the kill (at least).
const ACKS_BEFORE_KILL: usize = 15;
/// Server flags that make seals and garbage collection frequent.
const SEAL_OFTEN: &[&str] = &["--seal-objects", "3", "--gc-grace-ms", "0"];

fn position(offset: &str) -> u64 {
    offset.split_once('_').unwrap().1.parse().unwrap()
}

async fn read_all(client: &reqwest::Client, url: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut offset = "-1".to_string();
    loop {
        let response = client
            .get(format!("{url}?offset={offset}"))
            .send()
            .await
            .expect("read");
        assert_eq!(response.status(), 200, "read {url}");
        let up_to_date = response.headers().contains_key("stream-up-to-date");
        let next = response.headers()["stream-next-offset"]
            .to_str()
            .unwrap()
            .to_string();
        let body = response.bytes().await.expect("body");
        let values: Vec<String> = serde_json::from_slice(&body).expect("json array");
        out.extend(values);
        if up_to_date || next == offset {
            return out;
        }
        offset = next;
    }
}

async fn crash_rounds(store: &str, extra: &[&str]) {
    let client = client();
    let port = free_port();
    // stream index → position → payload of every acknowledged append
    let acked: Arc<Mutex<Vec<BTreeMap<u64, String>>>> =
        Arc::new(Mutex::new(vec![BTreeMap::new(); CLIENTS]));
    let server = Server::start(store, port, extra).await;
    for i in 0..CLIENTS {
        let r = client
            .put(server.url(&format!("crash-{i}")))
            .header("content-type", "application/json")
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }
    let mut server = Some(server);
    for round in 0..ROUNDS {
        // Not `unwrap_or`: its argument would start a second server that
        // takes the shard over from the first.
        let live = match server.take() {
            Some(first) => first,
            None => Server::start(store, port, extra).await,
        };
        let done = Arc::new(AtomicUsize::new(0));
        // A refusal before the kill is a failure (it would also stall the wait).
        let refused: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let mut tasks = Vec::new();
        for i in 0..CLIENTS {
            let client = client.clone();
            let url = live.url(&format!("crash-{i}"));
            let acked = acked.clone();
            let done = done.clone();
            let refused = refused.clone();
            tasks.push(tokio::spawn(async move {
                let mut n = 0usize;
                loop {
                    let payload = format!("r{round}-c{i}-n{n}");
                    n += 1;
                    let answer = client
                        .post(&url)
                        .header("content-type", "application/json")
                        .body(serde_json::to_string(&payload).unwrap())
                        .timeout(Duration::from_secs(10))
                        .send()
                        .await;
                    match answer {
                        Ok(r) if r.status().as_u16() == 204 => {
                            let next =
                                position(r.headers()["stream-next-offset"].to_str().unwrap());
                            acked.lock()[i].insert(next - 1, payload);
                            if n == ACKS_BEFORE_KILL {
                                done.fetch_add(1, Ordering::SeqCst);
                            }
                        }
                        Ok(r) if n <= ACKS_BEFORE_KILL => {
                            let status = r.status();
                            let body = r.text().await.unwrap_or_default();
                            *refused.lock() = Some(format!("client {i}: {status} {body}"));
                            return;
                        }
                        // Cut off by the kill: not acknowledged.
                        Ok(_) | Err(_) => return,
                    }
                }
            }));
        }
        // Kill once every client has had its appends acknowledged, mid-flight.
        while done.load(Ordering::SeqCst) < CLIENTS {
            if let Some(why) = refused.lock().clone() {
                panic!(
                    "an append was refused before the kill (server log: {}): {why}",
                    live.log_path().display()
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        live.kill_9();
        for task in tasks {
            task.await.unwrap();
        }
        let restarted = Server::start(store, port, extra).await;
        for i in 0..CLIENTS {
            let records = read_all(&client, &restarted.url(&format!("crash-{i}"))).await;
            let acked = acked.lock()[i].clone();
            for (position, payload) in &acked {
                assert_eq!(
                    records.get(*position as usize),
                    Some(payload),
                    "round {round}, stream {i}: acknowledged record at {position} after kill -9"
                );
            }
            let unique: std::collections::HashSet<&String> = records.iter().collect();
            assert_eq!(unique.len(), records.len(), "no record twice");
        }
        server = Some(restarted);
    }
    let total: usize = acked.lock().iter().map(BTreeMap::len).sum();
    assert!(total >= CLIENTS * ACKS_BEFORE_KILL * ROUNDS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_acknowledged_append_on_a_local_store() {
    let dir = tempfile::tempdir().unwrap();
    // Seal every few WAL objects and collect garbage at once, so kills land
    // between seals, manifest swaps and deletions too.
    crash_rounds(dir.path().to_str().unwrap(), SEAL_OFTEN).await;
    // The records' plaintext is in no file of the store.
    let mut files = Vec::new();
    fn walk(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out)
            } else {
                out.push(p)
            }
        }
    }
    walk(dir.path(), &mut files);
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        assert!(
            !bytes.windows(6).any(|w| w == b"r0-c0-"),
            "{} holds record plaintext",
            f.display()
        );
    }
}

#[cfg(feature = "s3-tests")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_acknowledged_append_on_s3() {
    let endpoint = std::env::var("STRATA_TEST_S3_ENDPOINT").expect("scripts/test starts moto");
    let bucket = std::env::var("STRATA_TEST_S3_BUCKET").expect("STRATA_TEST_S3_BUCKET");
    std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
    let prefix = format!("crash-{}", std::process::id());
    crash_rounds(
        &format!("s3://{bucket}/{prefix}"),
        &[
            "--s3-endpoint",
            &endpoint,
            "--s3-region",
            "us-east-1",
            "--s3-allow-http",
            SEAL_OFTEN[0],
            SEAL_OFTEN[1],
            SEAL_OFTEN[2],
            SEAL_OFTEN[3],
        ],
    )
    .await;
}

/// SIGTERM while clients append: the server stops accepting, answers or fails
/// the requests in flight, flushes, and exits 0; every acknowledged append is
/// there after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_shuts_down_gracefully_and_keeps_every_acknowledged_append() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap().to_string();
    let port = free_port();
    let client = client();
    let mut server = Server::start(&store, port, &[]).await;
    let url = server.url("graceful");
    let created = client
        .put(&url)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let acked = Arc::new(Mutex::new(BTreeMap::new()));
    let count = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (client, url, acked, count) =
            (client.clone(), url.clone(), acked.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            for n in 0.. {
                let payload = format!("g{i}-{n}");
                let answer = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(serde_json::to_string(&payload).unwrap())
                    .send()
                    .await;
                match answer {
                    Ok(r) if r.status() == 204 => {
                        let next = position(r.headers()["stream-next-offset"].to_str().unwrap());
                        acked.lock().insert(next - 1, payload);
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                    _ => return,
                }
            }
        }));
    }
    while count.load(Ordering::SeqCst) < 200 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // SAFETY: sending a signal to our own child process.
    let pid = server.child.id() as libc::pid_t;
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let mut status = None;
    for _ in 0..400 {
        if let Some(s) = server.child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let status = status.expect("the server exits after SIGTERM");
    assert!(status.success(), "exit status {status}");
    for task in tasks {
        task.await.unwrap();
    }
    drop(server);
    let restarted = Server::start(&store, port, &[]).await;
    let records = read_all(&client, &restarted.url("graceful")).await;
    for (position, payload) in acked.lock().iter() {
        assert_eq!(
            records.get(*position as usize),
            Some(payload),
            "acknowledged record at {position}"
        );
    }
}
