//! Tests of the `Subscriptions` facade over a real stream service (one shard
//! on an in-memory store) with an injected manual clock and seeded entropy.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::{BodyExt, Full};
use strata_engine::{Clock, EngineEnv, InstanceId, SeededEntropy, Shard, ShardConfig, ShardName};
use strata_manifest::RetryPolicy;

use std::time::Duration;

use bytes::Bytes;
use object_store::ObjectStore;

use super::*;
use crate::service::registry::Registry;
use crate::service::subscriptions::requests::LEASE_MS_MIN;
use crate::service::subscriptions::requests::{AckEntry, AckRequest, ClaimRequest, WakeRef};
use crate::service::subscriptions::store::Kind;
use crate::service::subscriptions::tokens::TOKEN_LIFETIME_S;
use crate::service::subscriptions::webhook::DELIVERY_ATTEMPTS_MAX;
use crate::service::subscriptions::{ClaimAnswer, PutAnswer};
use crate::service::{AppendSpec, StoreDeadline, DEFAULT_PROJECT};
use crate::service::{CreateMode, CreateSpec, Expiry, StreamsConfig};

const START_MS: u64 = 1_700_000_000_123;
const KEY: &str = "dGVzdC1kZXZlbG9wbWVudC1rZXktMzItYnl0ZXMhISE";

/// A clock that moves only when told to.
struct ManualClock(AtomicU64);

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

struct World {
    store: Arc<dyn ObjectStore>,
    clock: Arc<ManualClock>,
    streams: Arc<Streams>,
    subs: Arc<Subscriptions>,
    key: StreamKey,
}

async fn world(policy: DeliveryPolicy) -> World {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let clock = Arc::new(ManualClock(AtomicU64::new(START_MS)));
    let entropy = Arc::new(SeededEntropy::new(7));
    crate::service::topology::settle(&store, 1).await.unwrap();
    let env = EngineEnv {
        store: store.clone(),
        clock: clock.clone(),
        entropy: entropy.clone(),
        crash_points: None,
    };
    let shard = Shard::open(
        env,
        ShardName::new("s0").unwrap(),
        InstanceId([1; 16]),
        ShardConfig::default(),
    )
    .await
    .unwrap();
    let registry = Registry::new(store.clone(), RetryPolicy::default(), START_MS);
    let streams = Arc::new(
        Streams::new(
            registry,
            vec![shard],
            clock.clone(),
            entropy,
            StreamsConfig::default(),
        )
        .unwrap(),
    );
    let subs = open_subs(&streams, &store, policy).await;
    let store = store.clone();
    World {
        store,
        clock,
        streams,
        subs,
        key: StreamKey::parse(KEY).unwrap(),
    }
}

/// A subscription service on `streams` (another server of the same store,
/// when called again).
async fn open_subs(
    streams: &Arc<Streams>,
    store: &Arc<dyn ObjectStore>,
    policy: DeliveryPolicy,
) -> Arc<Subscriptions> {
    let signer = Signer::load(store, || streams.random_bytes16())
        .await
        .unwrap();
    Subscriptions::open_with_policy(streams.clone(), signer, true, false, policy)
        .await
        .unwrap()
}

impl World {
    /// A pull-wake subscription `id` on stream `a` in `project`.
    async fn put_pull_wake(&self, project: &str, id: &str) -> PutAnswer {
        self.subs
            .put(
                project,
                id,
                config(Kind::PullWake, 600_000, None),
                "http://h",
                Some(self.key.clone()),
            )
            .await
            .unwrap()
    }

    async fn create(&self, name: &str) {
        self.create_in(DEFAULT_PROJECT, name).await
    }

    async fn create_in(&self, project: &str, name: &str) {
        let spec = CreateSpec {
            mode: CreateMode::Raw,
            watches: Vec::new(),
            content_type: Some("application/octet-stream".into()),
            expiry: Expiry::default(),
            closed: false,
            body: Bytes::new(),
            fork: None,
        };
        self.streams
            .create(project, name, spec, &self.key)
            .await
            .unwrap();
    }

    /// Appends one record and tells the subscriptions (no observer is set).
    async fn append(&self, name: &str) {
        self.append_in(DEFAULT_PROJECT, name).await
    }

    async fn append_in(&self, project: &str, name: &str) {
        let spec = AppendSpec {
            routing_key: Bytes::new(),
            content_type: Some("application/octet-stream".into()),
            body: Bytes::from_static(b"record"),
            records: None,
            producer: None,
            stream_seq: None,
            close: false,
        };
        self.streams
            .append(
                project,
                name,
                spec,
                &self.key,
                StoreDeadline::after(Duration::from_secs(30)),
            )
            .await
            .unwrap();
        self.subs.on_append(project, name.to_string()).await;
    }
}

fn config(kind: Kind, lease_ttl_ms: u64, webhook_url: Option<String>) -> SubConfig {
    SubConfig {
        kind,
        pattern: None,
        streams: ["a".to_string()].into_iter().collect(),
        webhook_url,
        wake_stream: (kind == Kind::PullWake).then(|| "wakes".to_string()),
        lease_ttl_ms,
        description: None,
    }
}

#[test]
fn creation_times_are_rfc3339_with_milliseconds() {
    assert_eq!(rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(rfc3339_ms(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
}

/// Creation times and token lifetimes are read from the injected clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn time_comes_from_the_injected_clock() {
    let w = world(DeliveryPolicy::default()).await;
    w.create("a").await;
    let put = w.put_pull_wake(DEFAULT_PROJECT, "s1").await;
    assert!(put.created);
    assert_eq!(put.subscription.created_at, "2023-11-14T22:13:20.123Z");
    w.append("a").await;
    let claim = w
        .subs
        .claim(
            DEFAULT_PROJECT,
            "s1",
            ClaimRequest {
                worker: "w1".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(claim.generation, 1);
    let verified = w.subs.verify_token("s1", Some(&claim.token)).unwrap();
    assert_eq!(verified.generation(), 1);
    // The token lives TOKEN_LIFETIME_S on the injected clock, not the machine's.
    w.clock.0.store(
        (START_MS / 1000 + TOKEN_LIFETIME_S + 1) * 1000,
        Ordering::SeqCst,
    );
    assert!(matches!(
        w.subs.verify_token("s1", Some(&claim.token)),
        Err(SubError::TokenExpired)
    ));
}

/// A webhook receiver answering 500 to everything; it publishes the
/// generations of the wakes it was sent, in order.
async fn failing_receiver() -> (String, tokio::sync::watch::Receiver<Vec<u64>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (log, seen) = tokio::sync::watch::channel(Vec::new());
    let log = Arc::new(log);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let log = log.clone();
            let service = hyper::service::service_fn(
                move |request: hyper::Request<hyper::body::Incoming>| {
                    let log = log.clone();
                    async move {
                        let body = request.into_body().collect().await.unwrap().to_bytes();
                        let wake: serde_json::Value = serde_json::from_slice(&body).unwrap();
                        let generation = wake["generation"].as_u64().unwrap();
                        log.send_modify(|seen| seen.push(generation));
                        let mut reply =
                            hyper::Response::new(Full::new(Bytes::from_static(b"down")));
                        *reply.status_mut() = hyper::StatusCode::INTERNAL_SERVER_ERROR;
                        Ok::<_, Infallible>(reply)
                    }
                },
            );
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(socket), service),
            );
        }
    });
    (url, seen)
}

/// A wake whose webhook keeps failing is POSTed DELIVERY_ATTEMPTS_MAX times,
/// no more; when its lease lapses the normal wake path delivers it afresh,
/// under a new generation, again at most DELIVERY_ATTEMPTS_MAX times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_webhook_is_retried_a_bounded_number_of_times_per_wake() {
    let w = world(DeliveryPolicy {
        first_delay_ms: 0,
        ..DeliveryPolicy::default()
    })
    .await;
    let (url, mut seen) = failing_receiver().await;
    w.create("a").await;
    w.subs
        .put(
            DEFAULT_PROJECT,
            "s1",
            config(Kind::Webhook, LEASE_MS_MIN, Some(url)),
            "http://h",
            None,
        )
        .await
        .unwrap();
    w.append("a").await;
    let per_wake = DELIVERY_ATTEMPTS_MAX as usize;
    // Wait (on the condition, with a generous deadline) for two wakes' worth.
    let seen = tokio::time::timeout(
        Duration::from_secs(60),
        seen.wait_for(|seen| seen.len() >= 2 * per_wake),
    )
    .await
    .expect("two wakes were delivered")
    .unwrap()
    .clone();
    assert_eq!(&seen[..per_wake], vec![1; per_wake].as_slice(), "{seen:?}");
    assert_eq!(
        &seen[per_wake..2 * per_wake],
        vec![2; per_wake].as_slice(),
        "{seen:?}"
    );
    assert_eq!(
        w.subs.get(DEFAULT_PROJECT, "s1").await.unwrap().status,
        SubStatus::Failed,
        "a wake given up on leaves the subscription failed"
    );
}

fn claim_request(worker: &str) -> ClaimRequest {
    ClaimRequest {
        worker: worker.into(),
    }
}

/// Done with the claimed wake, every linked stream acknowledged to its tail.
fn done(claim: &ClaimAnswer) -> AckRequest {
    let acks = claim
        .streams
        .iter()
        .map(|s| AckEntry::Ack {
            stream: s.path.clone(),
            offset: crate::ds::offsets::Offset::parse(&s.tail_offset).unwrap().0,
        })
        .collect();
    AckRequest {
        wake: WakeRef {
            wake_id: Some(claim.wake_id.clone()),
            generation: Some(claim.generation),
        },
        acks,
        done: true,
    }
}

/// The next server to serve the subscriptions (a restart, or another fleet
/// member claiming shard 0) carries a claimed wake on: its holder, its
/// generation and the holder's token, which it accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimed_wake_survives_a_move_to_another_server() {
    let w = world(DeliveryPolicy::default()).await;
    w.create("a").await;
    w.put_pull_wake(DEFAULT_PROJECT, "s1").await;
    w.append("a").await;
    let claim = w
        .subs
        .claim(DEFAULT_PROJECT, "s1", claim_request("w1"))
        .await
        .unwrap();
    w.subs.suspend().await;
    assert!(matches!(
        w.subs.get(DEFAULT_PROJECT, "s1").await,
        Err(SubError::Unavailable(_))
    ));
    let next = open_subs(&w.streams, &w.store, DeliveryPolicy::default()).await;
    match next.claim(DEFAULT_PROJECT, "s1", claim_request("w2")).await {
        Err(SubError::AlreadyClaimed { holder, generation }) => {
            assert_eq!((holder.as_str(), generation), ("w1", claim.generation))
        }
        other => panic!("the stored holder was not carried on: {other:?}"),
    }
    let token = next.verify_token("s1", Some(&claim.token)).unwrap();
    let answer = next.acknowledge(&token, done(&claim)).await.unwrap();
    assert!(answer.ok && !answer.next_wake);
    // The retired service acts on nothing, even with a valid token.
    let old = w.subs.verify_token("s1", Some(&claim.token)).unwrap();
    assert!(w.subs.acknowledge(&old, done(&claim)).await.is_err());
    // Done means done: nothing is pending any more, on a third server too.
    let third = open_subs(&w.streams, &w.store, DeliveryPolicy::default()).await;
    assert!(matches!(
        third
            .claim(DEFAULT_PROJECT, "s1", claim_request("w3"))
            .await,
        Err(SubError::NoPendingWork)
    ));
}

/// Projects do not share subscriptions: the same id in two projects is two
/// subscriptions, and a token acts only in the project it names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_and_tokens_belong_to_one_project() {
    let w = world(DeliveryPolicy::default()).await;
    for project in [DEFAULT_PROJECT, "other"] {
        w.create_in(project, "a").await;
        w.put_pull_wake(project, "s1").await;
    }
    w.append_in("other", "a").await;
    assert!(matches!(
        w.subs
            .claim(DEFAULT_PROJECT, "s1", claim_request("w1"))
            .await,
        Err(SubError::NoPendingWork)
    ));
    let claim = w
        .subs
        .claim("other", "s1", claim_request("w1"))
        .await
        .unwrap();
    let token = w.subs.verify_token("s1", Some(&claim.token)).unwrap();
    assert_eq!(token.project(), "other");
    w.subs.acknowledge(&token, done(&claim)).await.unwrap();
    w.subs.delete(DEFAULT_PROJECT, "s1").await.unwrap();
    assert!(w.subs.get("other", "s1").await.is_ok());
    assert!(matches!(
        w.subs.get(DEFAULT_PROJECT, "s1").await,
        Err(SubError::NotFound)
    ));
}
