//! The real `strata serve` on S3 (a moto server of this test's own), frozen
//! with SIGSTOP for longer than the server's `--append-timeout-ms` while
//! producers on both surfaces append: every request is answered within the
//! deadline (plus slack), the ones that timed out are retried with the same
//! producer tuple once the store is back (SIGCONT), and every record is there
//! exactly once, in order. Needs moto in `.venv` (`scripts/test` installs it).

// The answers' real latency is what these tests measure.
#![allow(clippy::disallowed_methods)]
#![cfg(feature = "s3-tests")]

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::product::{producer, JSON_DOC};
use common::{client, free_port, Server, DEV_KEY};
use parking_lot::Mutex;
use reqwest::RequestBuilder;
use serde_json::Value;
use tokio::sync::watch;

/// The server's `--append-timeout-ms`.
const DEADLINE: Duration = Duration::from_millis(1500);
/// How late an answer may be past the deadline (a busy, shared machine).
const SLACK: Duration = Duration::from_millis(2500);
/// How long the store stays frozen: well past the deadline and the slack,
/// so that an unbounded wait cannot pass for a bounded one.
const FREEZE: Duration = Duration::from_secs(7);
/// Producers per surface, and the records each writes before the freeze
/// and in all.
const PRODUCERS: usize = 4;
const BEFORE: u64 = 10;
const TOTAL: u64 = 25;
/// Appenders without producer headers (more load while frozen).
const PLAIN: usize = 2;
const BUCKET: &str = "stall";

/// A moto server of this test, always resumed and killed when dropped.
struct Moto {
    child: Child,
    endpoint: String,
}

impl Moto {
    async fn start() -> Moto {
        let bin = concat!(env!("CARGO_MANIFEST_DIR"), "/../.venv/bin/moto_server");
        assert!(
            std::path::Path::new(bin).exists(),
            "{bin} is missing: run scripts/test, or `source scripts/moto.sh; strata_start_moto`, once to install moto"
        );
        let port = free_port();
        let child = Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto starts");
        let moto = Moto {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let http = client();
        let started = Instant::now();
        loop {
            if let Ok(r) = http.get(&moto.endpoint).send().await {
                if r.status().is_success() {
                    break;
                }
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "moto did not start"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let bucket = http
            .put(format!("{}/{BUCKET}", moto.endpoint))
            .send()
            .await
            .expect("create the bucket");
        assert!(bucket.status().is_success(), "create the bucket");
        moto
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: sending a signal to our own child process.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(sent, 0, "signal {signal} to moto");
    }

    fn freeze(&self) {
        self.signal(libc::SIGSTOP);
    }

    fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        // SAFETY: as above; a stopped process must be resumed to die cleanly.
        unsafe {
            libc::kill(self.child.id() as libc::pid_t, libc::SIGCONT);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One answer: status, error code, body.
struct Answered {
    status: u16,
    code: String,
    body: Value,
}

/// Sends a request and checks that it was answered within the deadline plus
/// slack; 503s must carry `Retry-After`.
async fn bounded(what: &str, builder: RequestBuilder, worst: &Mutex<Duration>) -> Answered {
    let started = Instant::now();
    let response = builder
        .send()
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer after {:?}: {e}", started.elapsed()));
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.bytes().await.expect("body");
    let elapsed = started.elapsed();
    {
        let mut worst = worst.lock();
        *worst = (*worst).max(elapsed);
    }
    assert!(
        elapsed <= DEADLINE + SLACK,
        "{what}: answered {status} after {elapsed:?}"
    );
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let code = body["error"]["code"].as_str().unwrap_or("").to_string();
    if status == 503 {
        assert_eq!(
            headers.get("retry-after").and_then(|v| v.to_str().ok()),
            Some("1"),
            "{what}: Retry-After"
        );
    }
    Answered { status, code, body }
}

/// What the test counts while the producers run.
#[derive(Default)]
struct Tally {
    /// Producer requests answered 503 `outcome_unknown` (or 503
    /// `unavailable`, or 429).
    refused: AtomicUsize,
    /// Producer retries after the store came back that answered as duplicates.
    duplicates: AtomicUsize,
    worst: Mutex<Duration>,
}

#[derive(Clone, Copy)]
enum Surface {
    Raw,
    Product,
}

struct Target {
    base: String,
    http: reqwest::Client,
}

impl Target {
    fn append(&self, surface: Surface, i: usize, seq: u64) -> RequestBuilder {
        let body = format!("\"{i}-{seq}\"");
        match surface {
            Surface::Raw => producer(
                self.http
                    .post(format!("{}/v1/stream/r", self.base))
                    .header("content-type", "application/json")
                    .body(body),
                &format!("raw-{i}"),
                0,
                seq,
            ),
            Surface::Product => producer(
                self.http
                    .post(format!("{}/v1/streams/p/records", self.base))
                    .header("prisma-encryption-key", DEV_KEY)
                    .header("prisma-routing-key", format!("k{i}"))
                    .body(body),
                &format!("product-{i}"),
                0,
                seq,
            ),
        }
    }
}

/// Whether an answer is a refusal the request is sent again after, with the
/// same producer tuple: 503 (outcome unknown, or not applied) or 429.
fn refused(answer: &Answered, what: &str) -> bool {
    match (answer.status, answer.code.as_str()) {
        (200 | 204, _) => false,
        (503, "outcome_unknown" | "unavailable") | (429, _) => true,
        _ => panic!(
            "{what}: unexpected answer {} {}",
            answer.status, answer.body
        ),
    }
}

/// One producer: `seq` `0..before` in any case, then on to `TOTAL`, sending a
/// refused request again (same tuple) only once the store is back.
async fn produce(
    target: Arc<Target>,
    surface: Surface,
    i: usize,
    range: std::ops::Range<u64>,
    back: watch::Receiver<bool>,
    tally: Arc<Tally>,
) {
    let mut back = back;
    for seq in range {
        let mut retry = false;
        loop {
            let what = format!("producer {i} seq {seq}");
            let answer = bounded(&what, target.append(surface, i, seq), &tally.worst).await;
            if refused(&answer, &what) {
                tally.refused.fetch_add(1, Ordering::SeqCst);
                retry = true;
                back.wait_for(|b| *b).await.expect("the test runs");
                continue;
            }
            let duplicate = match surface {
                // A fresh producer append with a body answers 200, a duplicate 204.
                Surface::Raw => answer.status == 204,
                Surface::Product => answer.body["duplicate"] == true,
            };
            if duplicate {
                assert!(retry, "{what}: a first attempt answered as a duplicate");
                tally.duplicates.fetch_add(1, Ordering::SeqCst);
            }
            break;
        }
    }
}

async fn raw_records(http: &reqwest::Client, url: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut offset = "-1".to_string();
    loop {
        let response = http
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
        let values: Vec<String> = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        out.extend(values);
        if up_to_date || next == offset {
            return out;
        }
        offset = next;
    }
}

async fn product_records(http: &reqwest::Client, base: &str, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cursor = String::new();
    loop {
        let response = http
            .get(format!(
                "{base}/v1/streams/p/records?routingKey={key}&cursor={cursor}"
            ))
            .header("prisma-encryption-key", DEV_KEY)
            .send()
            .await
            .expect("read");
        assert_eq!(response.status(), 200, "read p/{key}");
        let up_to_date = response.headers().contains_key("prisma-up-to-date");
        cursor = response.headers()["prisma-next-cursor"]
            .to_str()
            .unwrap()
            .to_string();
        let values: Vec<String> = serde_json::from_slice(&response.bytes().await.unwrap()).unwrap();
        out.extend(values);
        if up_to_date {
            return out;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_s3_gets_bounded_answers_and_loses_nothing() {
    let moto = Moto::start().await;
    let deadline_ms = DEADLINE.as_millis().to_string();
    let server = Server::start(
        &format!("s3://{BUCKET}/stall-{}", std::process::id()),
        free_port(),
        &[
            "--s3-endpoint",
            &moto.endpoint,
            "--s3-region",
            "us-east-1",
            "--s3-access-key-id",
            "testing",
            "--s3-secret-access-key",
            "testing",
            "--s3-allow-http",
            "--append-timeout-ms",
            &deadline_ms,
        ],
    )
    .await;
    let http = reqwest::Client::builder()
        .timeout(DEADLINE + SLACK + FREEZE + Duration::from_secs(10))
        .build()
        .unwrap();
    let created = http
        .put(server.url("r"))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let created = http
        .put(server.url("plain"))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let created = http
        .put(format!("{}/v1/streams/p", server.base))
        .header("prisma-encryption-key", DEV_KEY)
        .body(JSON_DOC)
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);

    let target = Arc::new(Target {
        base: server.base.clone(),
        http: http.clone(),
    });
    let tally = Arc::new(Tally::default());
    let (back_tx, back) = watch::channel(false);
    let producers = |range: std::ops::Range<u64>| {
        let mut tasks = Vec::new();
        for surface in [Surface::Raw, Surface::Product] {
            for i in 0..PRODUCERS {
                tasks.push(tokio::spawn(produce(
                    target.clone(),
                    surface,
                    i,
                    range.clone(),
                    back.clone(),
                    tally.clone(),
                )));
            }
        }
        tasks
    };
    for task in producers(0..BEFORE) {
        task.await.unwrap();
    }
    assert_eq!(tally.refused.load(Ordering::SeqCst), 0);

    moto.freeze();
    let frozen_at = Instant::now();
    let tasks = producers(BEFORE..TOTAL);
    // Plain appends keep coming while frozen; the acknowledged ones are kept.
    let plain_acked: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut plain = Vec::new();
    for a in 0..PLAIN {
        let (http, url, back, acked) = (
            http.clone(),
            server.url("plain"),
            back.clone(),
            plain_acked.clone(),
        );
        let worst = tally.clone();
        plain.push(tokio::spawn(async move {
            for n in 0.. {
                if *back.borrow() {
                    return;
                }
                let record = format!("{a}-{n}");
                let request = http
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(format!("\"{record}\""));
                let answer = bounded(&format!("plain {record}"), request, &worst.worst).await;
                if !refused(&answer, &record) {
                    acked.lock().push(record);
                }
            }
        }));
    }
    // Every producer had a request refused while frozen; then the store
    // stays frozen for the rest of FREEZE (the stimulus), and comes back.
    let started = Instant::now();
    while tally.refused.load(Ordering::SeqCst) < 2 * PRODUCERS {
        assert!(
            started.elapsed() < DEADLINE + SLACK + Duration::from_secs(5),
            "the producers' requests were not answered while the store was frozen"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(FREEZE.saturating_sub(frozen_at.elapsed())).await;
    moto.thaw();
    back_tx.send_replace(true);
    for task in tasks.into_iter().chain(plain) {
        task.await.unwrap();
    }

    // Every producer's records exactly once and in order; every acknowledged
    // plain append exactly once.
    let raw = raw_records(&http, &server.url("r")).await;
    let mut by_producer: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for record in &raw {
        let i: usize = record.split('-').next().unwrap().parse().unwrap();
        by_producer.entry(i).or_default().push(record.clone());
    }
    for i in 0..PRODUCERS {
        let expected: Vec<String> = (0..TOTAL).map(|n| format!("{i}-{n}")).collect();
        assert_eq!(by_producer.get(&i), Some(&expected), "raw producer {i}");
        let product = product_records(&http, &server.base, &format!("k{i}")).await;
        assert_eq!(product, expected, "product producer {i}");
    }
    let plain_records = raw_records(&http, &server.url("plain")).await;
    for record in plain_acked.lock().iter() {
        assert_eq!(
            plain_records.iter().filter(|r| *r == record).count(),
            1,
            "acknowledged plain append {record}"
        );
    }
    let refused = tally.refused.load(Ordering::SeqCst);
    let duplicates = tally.duplicates.load(Ordering::SeqCst);
    eprintln!(
        "frozen {FREEZE:?}: {refused} refused answers, {duplicates} retries answered as duplicates, slowest answer {:?}",
        *tally.worst.lock()
    );
    drop(server);
    drop(moto);
}
