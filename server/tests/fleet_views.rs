//! Two fleet members that disagree about the live set, in process: both
//! serve one in-memory store, and member A's heartbeat writes can be held
//! back. Held past the lease, A's own lease lapses first (it stops answering
//! from its shards and releases them), then B judges A dead and claims
//! everything; released, A is seen again and placement gives it shards back.
//! Producers append through both members all along: no acknowledged append
//! is lost, none is applied twice, and no answer is other than a success or
//! a retryable refusal.

// Waits for ownership to settle are bounded in real time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use clap::Parser;
use common::fleet::{check_streams, create, progress, start_producers, Producers, Tally};
use common::DEV_KEY;
use futures::stream::{BoxStream, StreamExt};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore};
use parking_lot::Mutex;
use strata_engine::store::{Layered, StoreLayer, StoreOp};
use strata_server::cli::serve::{ServeArgs, Server};
use strata_server::http::AppState;

const PRODUCERS: usize = 4;
/// Enough shards that each of two members owns some (placement gives one
/// member all 16 with probability 2 / 2^16).
const SHARDS: &str = "16";
const SHARD_COUNT: usize = 16;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

/// Holds back PUTs under `fleet/` while closed; fails every request once
/// the store is cut; shows a haunted heartbeat as renewed in every listing
/// (a view that keeps a dead member live); counts every request.
#[derive(Debug)]
struct HeartbeatGate {
    open: tokio::sync::watch::Sender<bool>,
    cut: AtomicBool,
    haunted: Mutex<Option<Path>>,
    hauntings: Arc<AtomicU64>,
    requests: AtomicU64,
    heartbeats: AtomicU64,
}

impl Default for HeartbeatGate {
    fn default() -> Self {
        HeartbeatGate {
            open: tokio::sync::watch::Sender::new(true),
            cut: AtomicBool::new(false),
            haunted: Mutex::new(None),
            hauntings: Arc::new(AtomicU64::new(0)),
            requests: AtomicU64::new(0),
            heartbeats: AtomicU64::new(0),
        }
    }
}

#[async_trait]
impl StoreLayer for HeartbeatGate {
    async fn before(&self, op: StoreOp, location: Option<&Path>) -> object_store::Result<()> {
        let in_fleet = location.is_some_and(|l| l.as_ref().starts_with("fleet"));
        self.requests.fetch_add(1, Ordering::SeqCst);
        if self.cut.load(Ordering::SeqCst) {
            return Err(object_store::Error::Generic {
                store: "test",
                source: "the store is cut off".into(),
            });
        }
        if op == StoreOp::Put && in_fleet {
            self.heartbeats.fetch_add(1, Ordering::SeqCst);
            let mut open = self.open.subscribe();
            let _ = open.wait_for(|open| *open).await;
        }
        Ok(())
    }

    fn list(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
        offset: Option<&Path>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let listing = strata_engine::store::inner_listing(inner, prefix, offset);
        let Some(haunted) = self.haunted.lock().clone() else {
            return listing;
        };
        let hauntings = self.hauntings.clone();
        listing
            .map(move |meta| {
                meta.map(|mut meta| {
                    if meta.location == haunted {
                        let n = hauntings.fetch_add(1, Ordering::SeqCst);
                        meta.e_tag = Some(format!("haunted-{n}"));
                        meta.last_modified = chrono::Utc::now();
                    }
                    meta
                })
            })
            .boxed()
    }
}

struct Member {
    base: String,
    state: Arc<AppState>,
    gate: Arc<Layered<HeartbeatGate>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Member {
    async fn start(shared: Arc<dyn ObjectStore>) -> Member {
        Member::start_with(shared, &[]).await
    }

    async fn start_with(shared: Arc<dyn ObjectStore>, extra: &[&str]) -> Member {
        Member::start_advertising(shared, extra, None).await
    }

    /// A member that tells the others `advertised` (`None`: its own URL).
    async fn start_advertising(
        shared: Arc<dyn ObjectStore>,
        extra: &[&str],
        advertised: Option<&str>,
    ) -> Member {
        let _ = common::client(); // installs the TLS crypto provider
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let mut args = vec![
            "strata",
            "--listen",
            "127.0.0.1:0",
            "--fleet",
            "--advertise-url",
            advertised.unwrap_or(&base),
            "--shards",
            SHARDS,
            "--heartbeat-ms",
            "200",
            "--fleet-lease-ms",
            "1500",
            "--long-poll-timeout-ms",
            "500",
            "--cache-bytes",
            "0",
            "--dev-default-key",
            DEV_KEY,
        ];
        args.extend_from_slice(extra);
        let cli = Cli::parse_from(args);
        let gate = Arc::new(Layered::new(shared, HeartbeatGate::default()));
        let store: Arc<dyn ObjectStore> = gate.clone();
        let server = Server::open(&cli.serve, store, listener)
            .await
            .expect("the member opens");
        let state = server.state().clone();
        let common::Running { stop, task } = common::run_in_process(server);
        Member {
            base,
            state,
            gate,
            stop: Some(stop),
            task: Some(task),
        }
    }

    fn owned(&self) -> usize {
        self.state.streams.router().owned().len()
    }

    /// Requests this member sent to the store, and its heartbeats.
    fn requests(&self) -> (u64, u64) {
        let layer = self.gate.layer();
        (
            layer.requests.load(Ordering::SeqCst),
            layer.heartbeats.load(Ordering::SeqCst),
        )
    }

    fn hold_heartbeats(&self, held: bool) {
        self.gate.layer().open.send_replace(!held);
    }

    /// From now on this member's listings show `other`'s heartbeat renewed.
    fn haunt(&self, other: &Member) {
        let path = strata_server::service::names::fleet_heartbeat(&other.instance());
        *self.gate.layer().haunted.lock() = Some(path);
    }

    /// Every store request of this member fails from now on.
    fn cut_off_the_store(&self) {
        self.gate.layer().cut.store(true, Ordering::SeqCst);
    }

    fn instance(&self) -> strata_engine::InstanceId {
        self.state
            .fleet
            .get()
            .expect("a fleet member")
            .fleet
            .instance()
    }

    fn serves(&self, index: strata_server::service::routing::ShardIndex) -> bool {
        matches!(
            self.state.streams.router().locate_index(index),
            strata_server::service::routing::Location::Local(_)
        )
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
    }
}

/// Logs to the test's output, as `RUST_LOG` says (default: warnings).
fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        ))
        .with_test_writer()
        .try_init();
}

/// Waits (at most 30 s) until `condition` holds.
async fn until(what: &str, condition: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits for the stopped producers, checks their streams, stops the members.
async fn finish(
    tasks: Vec<tokio::task::JoinHandle<()>>,
    tallies: &[Arc<Mutex<Tally>>],
    bases: &[String],
    a: Member,
    b: Member,
) {
    for task in tasks {
        task.await.unwrap();
    }
    check_streams(tallies, bases).await;
    a.stop().await;
    b.stop().await;
}

/// Two members that share shards, with producers appending through both.
struct Producing {
    shared: Arc<dyn ObjectStore>,
    a: Member,
    b: Member,
    bases: Vec<String>,
    stop: Arc<AtomicBool>,
    tallies: Vec<Arc<Mutex<Tally>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Producing {
    /// Starts both members, creates the streams, and waits until every
    /// producer had appends acknowledged.
    async fn start() -> Producing {
        init_tracing();
        let shared: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let a = Member::start(shared.clone()).await;
        let b = Member::start(shared.clone()).await;
        let bases = vec![a.base.clone(), b.base.clone()];
        until("both members own shards", || {
            a.owned() > 0 && b.owned() > 0 && a.owned() + b.owned() == SHARD_COUNT
        })
        .await;
        assert_eq!(a.owned() + b.owned(), SHARD_COUNT);
        // A create may meet a hand-off still in flight: retryable 503s are
        // retried, anything else fails the test.
        let Producers {
            stop,
            tallies,
            tasks,
        } = start_producers(&bases, PRODUCERS).await;
        progress(20, &tallies).await;
        Producing {
            shared,
            a,
            b,
            bases,
            stop,
            tallies,
            tasks,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_heartbeat_moves_shards_away_and_back_without_loss_or_duplicates() {
    let Producing {
        shared: _,
        a,
        b,
        bases,
        stop,
        tallies,
        tasks,
    } = Producing::start().await;
    eprintln!("views: producing");

    // A's heartbeats are late: its lease lapses and it lets go of its shards
    // before B may judge it dead; then B claims them all.
    a.hold_heartbeats(true);
    until("A has let go of its shards", || a.owned() == 0).await;
    until("B owns every shard", || b.owned() == SHARD_COUNT).await;
    eprintln!("views: B owns all");
    progress(20, &tallies).await;
    eprintln!("views: producing through B alone");

    // A's heartbeats land again: B sees it, and placement gives it shards
    // back (handed off by B).
    a.hold_heartbeats(false);
    until("A owns shards again", || {
        a.owned() > 0 && a.owned() + b.owned() == SHARD_COUNT
    })
    .await;
    progress(20, &tallies).await;

    stop.store(true, Ordering::SeqCst);
    finish(tasks, &tallies, &bases, a, b).await;
}

/// The fleet's steady cost: an idle member sends one heartbeat PUT and one
/// LIST per beat and nothing else (at the default 2 s beat, 1 request/s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_member_costs_one_put_and_one_list_per_beat() {
    let shared: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let a = Member::start(shared.clone()).await;
    let b = Member::start(shared.clone()).await;
    until("the shards are placed", || {
        a.owned() > 0 && b.owned() > 0 && a.owned() + b.owned() == SHARD_COUNT
    })
    .await;
    // Let the hand-offs of the join finish (two beats), then count.
    let (_, beat0) = a.requests();
    until("two beats passed", || a.requests().1 >= beat0 + 2).await;
    let (requests_before, beats_before) = a.requests();
    until("20 beats passed", || a.requests().1 >= beats_before + 20).await;
    let (requests_after, beats_after) = a.requests();
    let beats = beats_after - beats_before;
    let requests = requests_after - requests_before;
    eprintln!("fleet cost: {requests} requests in {beats} beats");
    // Each beat is a PUT and a LIST; the window may cut one beat in two.
    assert!(
        requests <= 2 * beats + 1,
        "{requests} requests in {beats} beats"
    );
    a.stop().await;
    b.stop().await;
}

/// `--fleet-routing replay`: a member answers a request for a stream another
/// member serves with 409 `not_stream_owner` and `Streams-Replay-To` (the
/// owner's URL) on both surfaces; the owner serves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_member_names_the_owner_on_both_surfaces() {
    init_tracing();
    let shared: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let replay = ["--fleet-routing", "replay"];
    let a = Member::start_with(shared.clone(), &replay).await;
    let b = Member::start_with(shared.clone(), &replay).await;
    until("the shards are placed", || {
        a.owned() > 0 && b.owned() > 0 && a.owned() + b.owned() == SHARD_COUNT
    })
    .await;
    let client = common::client();
    // A stream served by B, asked of A.
    let router = a.state.streams.router();
    let name = (0..1000)
        .map(|i| format!("replayed-{i}"))
        .find(|n| {
            let id = strata_engine::stream_id(strata_server::service::DEFAULT_PROJECT, n);
            matches!(
                router.locate(&id),
                strata_server::service::routing::Location::Elsewhere(_)
            )
        })
        .expect("a stream B serves");
    let raw = client
        .put(format!("{}/v1/stream/{name}", a.base))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status(), 409);
    assert_eq!(raw.headers()["streams-replay-to"], b.base.as_str());
    let body: serde_json::Value = serde_json::from_slice(&raw.bytes().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "not_stream_owner");
    let product = client
        .get(format!("{}/v1/streams/{name}", a.base))
        .send()
        .await
        .unwrap();
    assert_eq!(product.status(), 409);
    assert_eq!(product.headers()["streams-replay-to"], b.base.as_str());
    let body: serde_json::Value = serde_json::from_slice(&product.bytes().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "not_stream_owner");
    assert_eq!(body["error"]["retryable"], false);
    // Replayed to the owner, the request is served.
    let created = client
        .put(format!("{}/v1/stream/{name}", b.base))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    a.stop().await;
    b.stop().await;
}

/// A stale claim: while producers append through both members, another
/// instance claims a shard B serves (bumping its epoch and fencing B), then
/// goes away without serving it; B finds its shard fenced and claims it
/// again. No acknowledged append is lost and none is applied twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_claim_of_a_served_shard_loses_nothing() {
    let Producing {
        shared,
        a,
        b,
        bases,
        stop,
        tallies,
        tasks,
    } = Producing::start().await;
    // The shards of the producers' streams, claimed by a stranger one
    // after another while the producers keep appending (each is served by
    // A or B: every shard is).
    let router = b.state.streams.router();
    let mut claimed = 0;
    for p in 0..PRODUCERS {
        let id = strata_engine::stream_id("default", &format!("fleet-{p}"));
        let index = router.index_of(&id);
        if !(a.serves(index) || b.serves(index)) {
            continue;
        }
        let stranger = strata_engine::Shard::open(
            strata_engine::EngineEnv::production(shared.clone()),
            index.shard_name().unwrap(),
            strata_engine::InstanceId([0xee; 16]),
            strata_engine::ShardConfig::default(),
        )
        .await
        .expect("the stranger claims");
        stranger.crash();
        claimed += 1;
        eprintln!("views: a stranger claimed shard {}", index.0);
        progress(20, &tallies).await;
    }
    assert!(claimed > 0, "no member served the producers' shards");
    stop.store(true, Ordering::SeqCst);
    finish(tasks, &tallies, &bases, a, b).await;
}

/// The epoch of `member`'s active handle of shard `index` (0: none).
fn owner_epoch(member: &Member, index: strata_server::service::routing::ShardIndex) -> u64 {
    match member.state.streams.router().locate_index(index) {
        strata_server::service::routing::Location::Local(shard)
            if shard.status() == strata_engine::ShardStatus::Active =>
        {
            shard.last_recovery().epoch
        }
        _ => 0,
    }
}

/// One exactly-once append of `"v{seq}"` to `stream` through `base`: its
/// status and body.
async fn produce_once(base: &str, stream: &str, seq: u64) -> (u16, String) {
    let answer = common::client()
        .post(format!("{base}/v1/stream/{stream}"))
        .header("content-type", "application/json")
        .header("producer-id", "stale")
        .header("producer-epoch", "0")
        .header("producer-seq", seq.to_string())
        .body(format!("\"v{seq}\""))
        .send()
        .await
        .expect("the member answers");
    let status = answer.status().as_u16();
    (status, answer.text().await.unwrap_or_default())
}

/// A member whose handle of a shard was fenced by another server, and that
/// has not written since, holds a state behind the store's: the producer's
/// next sequence looks like a gap to it. It confirms its claim before it
/// answers such a rejection, and answers a retryable 503 instead; once the
/// shard is claimed again the append lands, exactly once. A stream created
/// meanwhile is, likewise, not answered as not found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_member_does_not_call_an_acknowledged_sequence_a_gap() {
    init_tracing();
    let shared: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let a = Member::start(shared.clone()).await;
    let b = Member::start(shared.clone()).await;
    until("both members serve shards", || {
        a.owned() > 0 && b.owned() > 0
    })
    .await;
    until("every shard is served", || {
        a.owned() + b.owned() == SHARD_COUNT
    })
    .await;
    let bases = vec![a.base.clone(), b.base.clone()];
    create(&common::client(), &bases, "stale-1").await;
    let id = strata_engine::stream_id("default", "stale-1");
    let index = a.state.streams.router().index_of(&id);
    let owner = if a
        .state
        .streams
        .router()
        .owned()
        .iter()
        .any(|(i, _)| *i == index)
    {
        &a
    } else {
        &b
    };
    assert_eq!(produce_once(&owner.base, "stale-1", 0).await.0, 200);
    // Another server (a single instance on the same store) claims every
    // shard, fencing the members' handles, and acknowledges sequence 1.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let single_base = format!("http://{}", listener.local_addr().unwrap());
    let cli = Cli::parse_from([
        "strata",
        "--listen",
        "127.0.0.1:0",
        "--shards",
        SHARDS,
        "--cache-bytes",
        "0",
        "--dev-default-key",
        DEV_KEY,
    ]);
    let single = Server::open(&cli.serve, shared.clone(), listener)
        .await
        .expect("the single server opens");
    let common::Running { stop, task } = common::run_in_process(single);
    assert_eq!(produce_once(&single_base, "stale-1", 1).await.0, 200);
    // It also creates a stream the members' handles have never seen.
    let client = common::client();
    let created = client
        .put(format!("{single_base}/v1/stream/stale-2"))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let appended = client
        .post(format!("{single_base}/v1/stream/stale-2"))
        .header("content-type", "application/json")
        .body("\"w0\"")
        .send()
        .await
        .unwrap();
    assert!(appended.status().is_success());
    let _ = stop.send(());
    task.await.unwrap();
    // The owner's handle has not written since: sequence 2 is no gap. The
    // stale handle answers a retryable 503 (or, had something written and
    // the shard been claimed again already, the append lands).
    let epoch_before = owner_epoch(owner, index);
    let (status, body) = produce_once(&owner.base, "stale-1", 2).await;
    assert!(
        status == 503 || status == 200,
        "sequence 2 answered {status}: {body}"
    );
    if status == 503 {
        until("the owner claims the shard again", || {
            owner_epoch(owner, index) > epoch_before
        })
        .await;
        let (status, body) = produce_once(&owner.base, "stale-1", 2).await;
        assert_eq!(status, 200, "sequence 2 after the claim: {body}");
    }
    for base in &bases {
        let records = common::fleet::read_all(&client, base, "stale-1").await;
        assert_eq!(records, ["v0", "v1", "v2"], "through {base}");
        // Read first through a member whose handle is stale: a retryable
        // 503 until the shard is claimed again, never a 404.
        let records = common::fleet::read_all(&client, base, "stale-2").await;
        assert_eq!(records, ["w0"], "through {base}");
    }
    a.stop().await;
    b.stop().await;
}

/// An owner that stops answering (its URL refuses connections, its store is
/// cut off): a member whose own listings still show it live sends the
/// owner's requests on to the member placement gives the shard without it,
/// which claims the shard by its own listings. The append lands there,
/// exactly once, without waiting for the lagging member's view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_view_lags_sends_a_dead_owners_requests_to_the_next_owner() {
    init_tracing();
    let shared: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let a = Member::start(shared.clone()).await;
    let b = Member::start(shared.clone()).await;
    // D advertises a URL nobody listens on: every forward to it is refused,
    // as to a killed process. It weighs 4, so it owns most shards.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let nowhere = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let d =
        Member::start_advertising(shared.clone(), &["--fleet-weight", "4"], Some(&nowhere)).await;
    until("every shard is served", || {
        a.owned() + b.owned() + d.owned() == SHARD_COUNT && d.owned() > 0
    })
    .await;
    // A stream on a shard of D's whose next owner is B; A forwards.
    let fleet = a.state.fleet.get().expect("a fleet member").fleet.clone();
    let router = a.state.streams.router();
    let (stream, index) = (0..10_000)
        .map(|i| format!("lag-{i}"))
        .map(|name| {
            let index = router.index_of(&strata_engine::stream_id("default", &name));
            (name, index)
        })
        .find(|(_, index)| {
            d.serves(*index)
                && fleet
                    .owner_without(*index, &[d.instance()])
                    .is_some_and(|next| next.instance == b.instance())
        })
        .expect("a shard of D's that B would take");
    create(&common::client(), std::slice::from_ref(&d.base), &stream).await;
    assert_eq!(produce_once(&d.base, &stream, 0).await.0, 200);
    // A's listings keep D live; then D dies.
    a.haunt(&d);
    d.cut_off_the_store();
    until("B claims the shard", || b.serves(index)).await;
    let (status, body) = produce_once(&a.base, &stream, 1).await;
    assert_eq!(status, 200, "through the lagging member: {body}");
    assert!(
        a.gate.layer().hauntings.load(Ordering::SeqCst) > 0,
        "A's listings showed D renewed"
    );
    let records = common::fleet::read_all(&common::client(), &b.base, &stream).await;
    assert_eq!(records, ["v0", "v1"]);
    a.stop().await;
    b.stop().await;
    d.stop().await;
}
