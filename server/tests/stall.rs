//! A store that stops answering, in process: the server runs over an
//! in-memory store behind a [`Stall`] layer with a short append deadline.
//! While the store is stalled, every request that needs it is answered
//! within the deadline (plus slack): writes 503 `outcome_unknown`, reads 503
//! `unavailable`, both with `Retry-After`; a live wait at a tail keeps its own
//! timeout. After the release, the writes that timed out complete, producer
//! retries answer as duplicates, and every record is there exactly once.
//! A WAL write that fails after it may have reached the store answers 503
//! `outcome_unknown` on both surfaces too.

// The answers' real latency is what these tests measure.
#![allow(clippy::disallowed_methods)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use common::product::{producer, Answer, Api, JSON_DOC};
use common::DEV_KEY;
use futures::future::{join_all, BoxFuture};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::ObjectStore;
use reqwest::{Method, RequestBuilder};
use serde_json::Value;
use strata_engine::store::{Layered, Stall, StoreLayer, StoreOp};
use strata_engine::ShardStatus;
use strata_server::cli::serve::{ServeArgs, Server};

/// The server's `--append-timeout-ms`.
const DEADLINE: Duration = Duration::from_millis(300);
/// How late an answer may be past the deadline (a busy, shared machine).
const SLACK: Duration = Duration::from_millis(1700);
/// The server's `--long-poll-timeout-ms`, and the product reads' `waitMs`.
const LIVE_WAIT_MS: u64 = 1000;
/// Producers per surface.
const PRODUCERS: usize = 4;
/// Acknowledged appends per producer before the stall, and after it.
const BEFORE: u64 = 5;
const AFTER: u64 = 3;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// A server over an in-memory store behind a layer `L`, serving until
/// stopped.
struct InProcess<L: StoreLayer + Default> {
    base: String,
    store: Arc<Layered<L>>,
    shards: Vec<strata_engine::Shard>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl<L: StoreLayer + Default> InProcess<L> {
    async fn start() -> InProcess<L> {
        let _ = common::client(); // installs the TLS crypto provider
        let deadline_ms = DEADLINE.as_millis().to_string();
        let live_ms = LIVE_WAIT_MS.to_string();
        let cli = Cli::parse_from([
            "strata",
            "--listen",
            "127.0.0.1:0",
            "--append-timeout-ms",
            &deadline_ms,
            "--long-poll-timeout-ms",
            &live_ms,
            "--cache-bytes",
            "0",
            "--dev-default-key",
            DEV_KEY,
        ]);
        let store = Arc::new(Layered::new(Arc::new(InMemory::new()), L::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dyn_store: Arc<dyn ObjectStore> = store.clone();
        let server = Server::open(&cli.serve, dyn_store, listener)
            .await
            .expect("the server opens");
        let base = format!("http://{}", server.local_addr());
        let shards = server.shards().to_vec();
        let common::Running { stop, task } = common::run_in_process(server);
        InProcess {
            base,
            store,
            shards,
            stop: Some(stop),
            task: Some(task),
        }
    }

    fn layer(&self) -> &L {
        self.store.layer()
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("the server stops");
        }
    }
}

impl InProcess<Stall> {
    fn stall(&self) -> &Stall {
        self.layer()
    }
}

/// What one request got, and how long it took.
struct Timed {
    what: String,
    elapsed: Duration,
    answer: Answer,
}

impl Timed {
    fn code(&self) -> String {
        if self.answer.body.is_empty() {
            return String::new();
        }
        serde_json::from_slice::<Value>(&self.answer.body)
            .ok()
            .and_then(|v| v["error"]["code"].as_str().map(str::to_string))
            .unwrap_or_default()
    }

    /// Answered in time, with `status` and (when given) the error `code`.
    fn expect(&self, status: u16, code: &str) -> &Self {
        assert!(
            self.elapsed <= DEADLINE + SLACK,
            "{}: answered after {:?}",
            self.what,
            self.elapsed
        );
        assert_eq!(
            (self.answer.status, self.code().as_str()),
            (status, code),
            "{}: {}",
            self.what,
            self.answer.text()
        );
        if status == 503 {
            assert_eq!(
                self.answer.header("retry-after"),
                Some("1"),
                "{}: Retry-After",
                self.what
            );
        }
        self
    }
}

/// Sends and times a request; a request the server does not answer within
/// the client's timeout fails the test.
fn timed(what: impl Into<String>, builder: RequestBuilder) -> BoxFuture<'static, Timed> {
    Box::pin(send_timed(what.into(), builder))
}

async fn send_timed(what: String, builder: RequestBuilder) -> Timed {
    let started = Instant::now();
    let response = builder
        .send()
        .await
        .unwrap_or_else(|e| panic!("{what}: no answer after {:?}: {e}", started.elapsed()));
    let answer = Answer::from(response).await;
    Timed {
        what,
        elapsed: started.elapsed(),
        answer,
    }
}

struct Surfaces {
    base: String,
    http: reqwest::Client,
    api: Api,
}

impl Surfaces {
    /// Clients of both surfaces of the server at `base`, whose requests
    /// fail rather than wait long past the deadline.
    fn of(base: &str) -> Surfaces {
        let timeout = DEADLINE + SLACK + Duration::from_secs(8);
        Surfaces {
            base: base.to_string(),
            http: reqwest::Client::builder().timeout(timeout).build().unwrap(),
            api: Api::at(base, None, DEV_KEY).with_timeout(timeout),
        }
    }

    fn raw(&self, method: Method, name: &str) -> RequestBuilder {
        self.http
            .request(method, format!("{}/v1/stream/{name}", self.base))
    }

    fn raw_append(&self, name: &str, body: &str) -> RequestBuilder {
        self.raw(Method::POST, name)
            .header("content-type", "application/json")
            .body(body.to_string())
    }

    fn raw_producer(&self, i: usize, seq: u64) -> RequestBuilder {
        producer(
            self.raw_append("r", &record(i, seq)),
            &format!("raw-{i}"),
            0,
            seq,
        )
    }

    fn product_producer(&self, i: usize, seq: u64) -> RequestBuilder {
        producer(
            self.api
                .request(Method::POST, "p/records")
                .header("prisma-routing-key", format!("k{i}"))
                .body(record(i, seq)),
            &format!("product-{i}"),
            0,
            seq,
        )
    }

    fn final_seal(&self) -> RequestBuilder {
        producer(
            self.api
                .request(Method::POST, "p-final:seal")
                .body(r#"{"final":"the end"}"#),
            "sealer",
            0,
            0,
        )
    }

    /// Every record of the raw stream `name`, reading from the start.
    async fn raw_records(&self, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut offset = "-1".to_string();
        loop {
            let page = timed(
                format!("read {name}"),
                self.raw(Method::GET, &format!("{name}?offset={offset}")),
            )
            .await;
            assert_eq!(page.answer.status, 200, "{}", page.answer.text());
            let values: Vec<String> = serde_json::from_slice(&page.answer.body).unwrap();
            out.extend(values);
            let next = page
                .answer
                .header("stream-next-offset")
                .unwrap()
                .to_string();
            if page.answer.header("stream-up-to-date") == Some("true") || next == offset {
                return out;
            }
            offset = next;
        }
    }
}

fn record(i: usize, seq: u64) -> String {
    format!("\"{i}-{seq}\"")
}

/// Polls until `done` holds (a condition the test waits for, never a guess
/// at how long something takes).
async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !done().await {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what}: not after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_store_gets_bounded_answers_and_loses_nothing() {
    let server = InProcess::<Stall>::start().await;
    let s = Surfaces::of(&server.base);

    // Streams and collections, and acknowledged records before the stall.
    for name in ["r", "r-close", "r-doomed"] {
        let created = timed(
            format!("create {name}"),
            s.raw(Method::PUT, name)
                .header("content-type", "application/json"),
        )
        .await;
        assert_eq!(created.answer.status, 201);
    }
    for name in ["p", "p-final", "p-seal", "p-doomed"] {
        assert_eq!(s.api.create(name, JSON_DOC).await.status, 201);
    }
    for seq in 0..BEFORE {
        for i in 0..PRODUCERS {
            timed("raw append", s.raw_producer(i, seq))
                .await
                .expect(200, "");
            timed("product append", s.product_producer(i, seq))
                .await
                .expect(200, "");
        }
    }
    // Sealed, so that reading from the start needs the store.
    for shard in &server.shards {
        shard.seal_now().await.unwrap();
    }

    server.stall().stall();
    // Writes, all at once: each producer's next request twice (the second a
    // retry while the first is pending), a plain append, a close, a batch,
    // seals, creates and deletes.
    let mut writes = Vec::new();
    for i in 0..PRODUCERS {
        for attempt in 0..2 {
            writes.push(timed(
                format!("raw producer {i} seq {BEFORE} attempt {attempt}"),
                s.raw_producer(i, BEFORE),
            ));
            writes.push(timed(
                format!("product producer {i} seq {BEFORE} attempt {attempt}"),
                s.product_producer(i, BEFORE),
            ));
        }
    }
    writes.extend([
        timed("raw plain append", s.raw_append("r", "\"plain\"")),
        timed(
            "raw close",
            s.raw(Method::POST, "r-close")
                .header("stream-closed", "true"),
        ),
        timed("raw create", s.raw(Method::PUT, "r-new")),
        timed("raw delete", s.raw(Method::DELETE, "r-doomed")),
        timed(
            "product batch",
            s.api
                .request(Method::POST, "p/records:batch")
                .header("prisma-routing-key", "batch")
                .body("[1,2,3]"),
        ),
        timed("product final seal", s.final_seal()),
        timed(
            "product plain seal",
            s.api.request(Method::POST, "p-seal:seal").body("{}"),
        ),
        timed(
            "product create",
            s.api.request(Method::PUT, "p-new").body(JSON_DOC),
        ),
        timed("product delete", s.api.request(Method::DELETE, "p-doomed")),
    ]);
    // Reads that need the store: sealed chunks, names never looked up, the
    // catalog. Live waits at a tail: their own timeout, not the deadline.
    let reads = join_all([
        timed(
            "raw read of sealed records",
            s.raw(Method::GET, "r?offset=-1"),
        ),
        timed(
            "product read of sealed records",
            s.api.request(Method::GET, "p/records?routingKey=k0"),
        ),
        timed(
            "raw read of an unknown name",
            s.raw(Method::GET, "r-never?offset=-1"),
        ),
        timed(
            "product metadata of an unknown name",
            s.api.request(Method::GET, "p-never"),
        ),
        timed(
            "catalog",
            s.api
                .keyless(Method::GET, &format!("{}/v1/streams", server.base)),
        ),
    ]);
    let live = join_all([
        timed(
            "raw long-poll at the tail",
            s.raw(Method::GET, "r?offset=now&live=long-poll"),
        ),
        timed(
            "product long-poll at the tail",
            s.api.request(
                Method::GET,
                &format!("p/records:long-poll?routingKey=k0&cursor=now&waitMs={LIVE_WAIT_MS}"),
            ),
        ),
    ]);
    let (writes, reads, live) = tokio::join!(join_all(writes), reads, live);
    assert!(
        server.stall().held() > 0,
        "the store was stalled throughout"
    );
    for write in &writes {
        write.expect(503, "outcome_unknown");
    }
    for read in &reads {
        read.expect(503, "unavailable");
    }
    for wait in &live {
        assert_eq!(
            wait.answer.status,
            204,
            "{}: {}",
            wait.what,
            wait.answer.text()
        );
        assert!(
            wait.elapsed >= Duration::from_millis(LIVE_WAIT_MS),
            "{}: a live wait keeps its own timeout ({:?})",
            wait.what,
            wait.elapsed
        );
    }

    server.stall().release();
    // The timed-out writes complete; retries answer as duplicates.
    for i in 0..PRODUCERS {
        let raw = timed("raw retry", s.raw_producer(i, BEFORE)).await;
        raw.expect(204, "");
        assert_eq!(raw.answer.header("producer-seq"), Some("5"));
        let product = timed("product retry", s.product_producer(i, BEFORE)).await;
        product.expect(200, "");
        assert_eq!(product.answer.json()["duplicate"], true, "{}", product.what);
    }
    let sealed = timed("final seal retry", s.final_seal()).await;
    sealed.expect(200, "");
    assert_eq!(sealed.answer.json()["duplicate"], true);
    assert_eq!(sealed.answer.json()["sealed"], true);
    for seq in BEFORE + 1..=BEFORE + AFTER {
        for i in 0..PRODUCERS {
            timed("raw append", s.raw_producer(i, seq))
                .await
                .expect(200, "");
            timed("product append", s.product_producer(i, seq))
                .await
                .expect(200, "");
        }
    }
    eventually("the raw close lands", || async {
        let head = timed("head r-close", s.raw(Method::HEAD, "r-close")).await;
        head.answer.header("stream-closed") == Some("true")
    })
    .await;
    eventually("the raw create lands", || async {
        timed("head r-new", s.raw(Method::HEAD, "r-new"))
            .await
            .answer
            .status
            == 200
    })
    .await;
    eventually("the raw delete lands", || async {
        timed("head r-doomed", s.raw(Method::HEAD, "r-doomed"))
            .await
            .answer
            .status
            == 404
    })
    .await;
    eventually("the product create lands", || async {
        s.api.metadata("p-new").await.status == 200
    })
    .await;
    eventually("the product delete lands", || async {
        s.api.metadata("p-doomed").await.status == 404
    })
    .await;
    eventually("the plain seal lands", || async {
        s.api.metadata("p-seal").await.json()["sealed"] == true
    })
    .await;
    eventually("the batch lands", || async {
        s.api.read_all_json("p", "batch").await.0.len() == 3
    })
    .await;

    // Every producer's records, exactly once and in order; nothing
    // acknowledged is lost.
    let raw = s.raw_records("r").await;
    for i in 0..PRODUCERS {
        let mine: Vec<&String> = raw
            .iter()
            .filter(|r| r.starts_with(&format!("{i}-")))
            .collect();
        let expected: Vec<String> = (0..=BEFORE + AFTER).map(|n| format!("{i}-{n}")).collect();
        assert_eq!(
            mine,
            expected.iter().collect::<Vec<_>>(),
            "raw producer {i}"
        );
    }
    assert_eq!(
        raw.iter().filter(|r| *r == "plain").count(),
        1,
        "the plain append that timed out completed once"
    );
    for i in 0..PRODUCERS {
        let (records, _) = s.api.read_all_json("p", &format!("k{i}")).await;
        let expected: Vec<Value> = (0..=BEFORE + AFTER)
            .map(|n| Value::String(format!("{i}-{n}")))
            .collect();
        assert_eq!(records, expected, "product producer {i}");
    }
    let (finals, _) = s.api.read_all_json("p-final", "").await;
    assert_eq!(finals, vec![Value::String("the end".into())]);
    server.stop().await;
}

/// Refuses WAL PUTs (a definite error, as from a store that lost its
/// permissions mid-write) while switched on.
#[derive(Debug, Default)]
struct FailWalPuts {
    on: AtomicBool,
}

#[async_trait::async_trait]
impl StoreLayer for FailWalPuts {
    async fn before(&self, op: StoreOp, location: Option<&Path>) -> object_store::Result<()> {
        let wal = location.is_some_and(|p| p.as_ref().contains("/wal/"));
        if op == StoreOp::Put && wal && self.on.load(Ordering::SeqCst) {
            return Err(object_store::Error::PermissionDenied {
                path: location.map(|p| p.to_string()).unwrap_or_default(),
                source: "WAL writes are switched off".into(),
            });
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_wal_write_answers_outcome_unknown_on_both_surfaces() {
    let server = InProcess::<FailWalPuts>::start().await;
    let s = Surfaces::of(&server.base);
    let created = timed(
        "create r",
        s.raw(Method::PUT, "r")
            .header("content-type", "application/json"),
    )
    .await;
    assert_eq!(created.answer.status, 201);
    assert_eq!(s.api.create("p", JSON_DOC).await.status, 201);
    timed("raw append", s.raw_producer(0, 0))
        .await
        .expect(200, "");
    timed("product append", s.product_producer(0, 0))
        .await
        .expect(200, "");

    let active = || async {
        server
            .shards
            .iter()
            .all(|shard| shard.status() == ShardStatus::Active)
    };
    // One surface at a time: the failure re-opens the shard, and a request
    // that meets a re-opening shard is refused as unavailable.
    for surface in ["raw", "product"] {
        server.layer().on.store(true, Ordering::SeqCst);
        let request = if surface == "raw" {
            s.raw_producer(0, 1)
        } else {
            s.product_producer(0, 1)
        };
        timed(format!("{surface} append whose WAL write fails"), request)
            .await
            .expect(503, "outcome_unknown");
        server.layer().on.store(false, Ordering::SeqCst);
        eventually("the shard re-opens", active).await;
    }
    // The retries: appended once (the refused write never reached the store).
    let raw = timed("raw retry", s.raw_producer(0, 1)).await;
    assert!(
        matches!(raw.answer.status, 200 | 204),
        "{}",
        raw.answer.text()
    );
    let product = timed("product retry", s.product_producer(0, 1)).await;
    product.expect(200, "");
    assert_eq!(s.raw_records("r").await, vec!["0-0", "0-1"]);
    let (records, _) = s.api.read_all_json("p", "k0").await;
    assert_eq!(records, vec![Value::from("0-0"), Value::from("0-1")]);
    server.stop().await;
}
