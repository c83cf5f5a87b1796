//! Tests of the `Subscriptions` facade over a real stream service (one shard
//! on an in-memory store) with an injected manual clock and seeded entropy.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::{BodyExt, Full};
use strata_engine::{Clock, EngineEnv, InstanceId, SeededEntropy, Shard, ShardConfig, ShardName};
use strata_manifest::RetryPolicy;

use super::*;
use crate::service::registry::Registry;
use crate::service::subscriptions::requests::LEASE_MS_MIN;
use crate::service::subscriptions::tokens::TOKEN_LIFETIME_S;
use crate::service::subscriptions::webhook::DELIVERY_ATTEMPTS_MAX;
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
    let subs = Subscriptions::open_with_policy(streams.clone(), store, true, policy)
        .await
        .unwrap();
    World {
        clock,
        streams,
        subs,
        key: StreamKey::parse(KEY).unwrap(),
    }
}

impl World {
    async fn create(&self, name: &str) {
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
            .create(DEFAULT_PROJECT, name, spec, &self.key)
            .await
            .unwrap();
    }

    /// Appends one record and tells the subscriptions (no observer is set).
    async fn append(&self, name: &str) {
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
                DEFAULT_PROJECT,
                name,
                spec,
                &self.key,
                StoreDeadline::after(Duration::from_secs(30)),
            )
            .await
            .unwrap();
        self.subs.on_append(name.to_string()).await;
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
    let put = w
        .subs
        .put(
            "s1",
            config(Kind::PullWake, 600_000, None),
            "http://h",
            Some(w.key.clone()),
        )
        .await
        .unwrap();
    assert!(put.created);
    assert_eq!(put.subscription.created_at, "2023-11-14T22:13:20.123Z");
    w.append("a").await;
    let claim = w
        .subs
        .claim(
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
        w.subs.get("s1").await.unwrap().status,
        SubStatus::Failed,
        "a wake given up on leaves the subscription failed"
    );
}
