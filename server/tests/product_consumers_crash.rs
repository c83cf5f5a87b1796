//! Consumer groups across kill -9 under traffic: workers pull and settle
//! while the server is killed and restarted on the same store, twice.
//! Afterwards every record was acknowledged at least once; no record came
//! back after its acknowledgement was answered; within a routing key no
//! record was handed out while an earlier one of the key had not been
//! acknowledged (per-key FIFO); and a consumer that retries everything
//! dead-lettered each record exactly once.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::product::{Api, JSON_DOC};
use common::{free_port, Server, DEV_KEY};
use parking_lot::{Mutex, RwLock};
use reqwest::Method;
use serde_json::{json, Value};

const KEYS: u64 = 20;
const PER_KEY: u64 = 15;
const KILLS: usize = 2;
const SEAL_OFTEN: [&str; 4] = ["--seal-objects", "3", "--gc-grace-ms", "0"];

async fn start(store: &std::path::Path) -> Server {
    Server::start(store.to_str().unwrap(), free_port(), &SEAL_OFTEN).await
}

/// What the "ack" workers saw, in the order things happened.
#[derive(Default)]
struct Ledger {
    /// (key, n) acknowledged with a 200 answer, and when (a tick).
    confirmed: HashMap<(String, u64), u64>,
    /// (key, n) whose ack was sent (answered or not).
    ack_sent: BTreeSet<(String, u64)>,
    violations: Vec<String>,
}

/// The server's current address and its restarts, a clock of logical
/// ticks, and the count of confirmed acknowledgements (the tests wait on
/// these, never on time).
struct Shared {
    base: RwLock<String>,
    restarts: tokio::sync::watch::Sender<u64>,
    confirmed: tokio::sync::watch::Sender<usize>,
    tick: AtomicU64,
    stop: AtomicBool,
}

impl Shared {
    fn api(&self) -> Api {
        Api::at(&self.base.read(), None, DEV_KEY).fresh_connections()
    }

    fn now(&self) -> u64 {
        self.tick.fetch_add(1, Ordering::SeqCst)
    }
}

/// POSTs `body` until the server answers 200: a request that fails waits
/// for the next restart (at most a few seconds, then it is sent again).
async fn post_until_answered(shared: &Shared, path: &str, body: &Value) -> Option<Value> {
    for _ in 0..100 {
        let started = *shared.restarts.borrow();
        let api = shared.api();
        let sent = api
            .request(Method::POST, path)
            .body(body.to_string())
            .send()
            .await;
        if let Ok(response) = sent {
            if response.status() == 200 {
                // A body cut off by a kill is sent again, like no answer.
                if let Ok(bytes) = response.bytes().await {
                    if let Ok(value) = serde_json::from_slice(&bytes) {
                        return Some(value);
                    }
                }
            }
        }
        if shared.stop.load(Ordering::SeqCst) {
            return None;
        }
        let mut restarts = shared.restarts.subscribe();
        let restarted = restarts.wait_for(|r| *r > started);
        let _ = tokio::time::timeout(Duration::from_secs(3), restarted).await;
    }
    panic!("{path}: the server never answered");
}

fn key_n(message: &Value) -> (String, u64) {
    (
        message["routingKey"].as_str().unwrap().to_string(),
        message["value"]["n"].as_u64().unwrap(),
    )
}

async fn ack_worker(shared: Arc<Shared>, ledger: Arc<Mutex<Ledger>>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let sent_at = shared.now();
        let pull = json!({"waitMs": 300});
        let Some(answer) = post_until_answered(&shared, "src/consumers/ack:pull", &pull).await
        else {
            return;
        };
        let messages = answer["messages"].as_array().cloned().unwrap_or_default();
        {
            let mut ledger = ledger.lock();
            for m in &messages {
                let (key, n) = key_n(m);
                if let Some(at) = ledger.confirmed.get(&(key.clone(), n)) {
                    if *at < sent_at {
                        ledger.violations.push(format!(
                            "{key}/{n} handed out again after its acknowledgement was answered"
                        ));
                    }
                }
                let earlier_open = (0..n)
                    .filter(|e| e % KEYS == n % KEYS)
                    .find(|e| !ledger.ack_sent.contains(&(key.clone(), *e)));
                if let Some(e) = earlier_open {
                    ledger.violations.push(format!(
                        "{key}/{n} handed out before {key}/{e} was acknowledged (per-key FIFO)"
                    ));
                }
            }
        }
        if messages.is_empty() {
            continue;
        }
        let acks: Vec<Value> = messages
            .iter()
            .map(|m| json!({"leaseToken": m["leaseToken"]}))
            .collect();
        ledger.lock().ack_sent.extend(messages.iter().map(key_n));
        let api = shared.api();
        let settled = api
            .request(Method::POST, "src/consumers/ack:settle")
            .body(json!({ "acks": acks }).to_string())
            .send()
            .await;
        if let Ok(response) = settled {
            if response.status() == 200 {
                let bytes = response.bytes().await.unwrap_or_default();
                let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                // Only acknowledgements the server counted as acked are
                // durable; a stale one (an expired lease) is not.
                if body["stale"] == 0 {
                    let at = shared.now();
                    let mut ledger = ledger.lock();
                    for m in &messages {
                        ledger.confirmed.insert(key_n(m), at);
                    }
                    shared.confirmed.send_replace(ledger.confirmed.len());
                }
            }
        }
    }
}

async fn retry_worker(shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let pull = json!({"waitMs": 300});
        let Some(answer) = post_until_answered(&shared, "src/consumers/dead:pull", &pull).await
        else {
            return;
        };
        let messages = answer["messages"].as_array().cloned().unwrap_or_default();
        if messages.is_empty() {
            continue;
        }
        let retries: Vec<Value> = messages
            .iter()
            .map(|m| json!({"leaseToken": m["leaseToken"], "delayMs": 0}))
            .collect();
        let api = shared.api();
        let _ = api
            .request(Method::POST, "src/consumers/dead:settle")
            .body(json!({ "retries": retries }).to_string())
            .send()
            .await;
    }
}

async fn backlog(shared: &Shared, consumer: &str) -> u64 {
    let path = format!("src/consumers/{consumer}:pull");
    // `max` 1 with a lease long enough to matter little: the count is what
    // is read here; a message it takes is settled by the workers' next round
    // after its visibility.
    // The server's own wait paces the polls (nothing to hand out: it
    // answers after 200 ms).
    let answer = post_until_answered(shared, &path, &json!({"max": 1, "waitMs": 200}))
        .await
        .expect("answered");
    answer["backlog"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_keep_their_promises_across_kill_9_under_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(dir.path()).await;
    let api = Api::new(&server, None, DEV_KEY);
    for name in ["src", "dlq"] {
        assert_eq!(api.create(name, JSON_DOC).await.status, 201);
    }
    let configure = |name: &str, doc: Value| {
        api.request(Method::PUT, &format!("src/consumers/{name}"))
            .body(doc.to_string())
            .send()
    };
    let ack = json!({"maxAttempts": 10, "visibilityTimeoutMs": 1000});
    assert_eq!(configure("ack", ack).await.unwrap().status(), 201);
    let dead = json!({"maxAttempts": 2, "visibilityTimeoutMs": 1000, "deadLetterStream": "dlq"});
    assert_eq!(configure("dead", dead).await.unwrap().status(), 201);
    // Record n has key k(n % KEYS); within a key, n grows with position.
    for n in 0..KEYS * PER_KEY {
        let answer = api
            .append(
                "src",
                &format!("k{}", n % KEYS),
                &json!({"n": n}).to_string(),
            )
            .await;
        assert_eq!(answer.status, 200, "{}", answer.text());
    }

    let shared = Arc::new(Shared {
        base: RwLock::new(server.base.clone()),
        restarts: tokio::sync::watch::Sender::new(0),
        confirmed: tokio::sync::watch::Sender::new(0),
        tick: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let mut workers = Vec::new();
    for _ in 0..4 {
        workers.push(tokio::spawn(ack_worker(shared.clone(), ledger.clone())));
    }
    for _ in 0..2 {
        workers.push(tokio::spawn(retry_worker(shared.clone())));
    }
    for kill in 0..KILLS {
        // Let traffic get going (a condition: some acknowledgements landed).
        let target = ((kill as u64 + 1) * KEYS * PER_KEY / (KILLS as u64 + 2)) as usize;
        let mut confirmed = shared.confirmed.subscribe();
        let progressed = confirmed.wait_for(|n| *n >= target);
        tokio::time::timeout(Duration::from_secs(60), progressed)
            .await
            .expect("the workers make progress")
            .expect("the counter lives");
        server.kill_9();
        server = start(dir.path()).await;
        *shared.base.write() = server.base.clone();
        shared.restarts.send_modify(|r| *r += 1);
    }
    // Drain: both consumers' backlogs reach 0.
    for consumer in ["ack", "dead"] {
        let mut drained = false;
        for _ in 0..600 {
            if backlog(&shared, consumer).await == 0 {
                drained = true;
                break;
            }
        }
        assert!(drained, "{consumer} never drained");
    }
    shared.stop.store(true, Ordering::SeqCst);
    for w in workers {
        w.await.unwrap();
    }

    let acked: BTreeSet<u64> = {
        let ledger = ledger.lock();
        assert!(ledger.violations.is_empty(), "{:#?}", ledger.violations);
        ledger.ack_sent.iter().map(|(_, n)| *n).collect()
    };
    assert_eq!(
        acked.len() as u64,
        KEYS * PER_KEY,
        "every record acknowledged"
    );
    // Every record dead-lettered exactly once.
    let api = Api::new(&server, None, DEV_KEY);
    let mut letters: BTreeMap<u64, usize> = BTreeMap::new();
    let mut ids = BTreeSet::new();
    for k in 0..KEYS {
        let (records, _) = api.read_all_json("dlq", &format!("k{k}")).await;
        for letter in records {
            *letters
                .entry(letter["value"]["n"].as_u64().unwrap())
                .or_default() += 1;
            assert!(ids.insert(letter["messageId"].as_str().unwrap().to_string()));
        }
    }
    let twice: Vec<_> = letters.iter().filter(|(_, c)| **c != 1).collect();
    assert!(twice.is_empty(), "dead-lettered more than once: {twice:?}");
    assert_eq!(
        letters.len() as u64,
        KEYS * PER_KEY,
        "every record dead-lettered"
    );
}
