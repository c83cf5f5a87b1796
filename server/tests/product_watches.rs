//! Watches against the real binary: definitions, observation long-polls
//! woken by durable appends of their own key only (product and raw
//! appends), the capability as the only authority (forged, expired, foreign
//! and missing ones all get one 403), and cursors that resync instead of
//! answering a silent "unchanged" after a restart.

// Capabilities carry wall-clock expiries; the test signs them as a client.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::product::{epoch_of, Answer, Api, QueryPairs};
use common::{free_port, Server, DEV_KEY};
use reqwest::Method;
use serde_json::{json, Value};
use strata_segments::StreamKey;
use strata_server::service::product::config::WatchDef;
use strata_server::service::product::watch_cap::{CapabilityScope, WaitSigKey};
use strata_server::service::product::watch_keys::{definition_id, watch_key, WatchKey};

const TOKEN: &str = "token-of-project-alpha";
const DOC: &str =
    r#"{"format":{"kind":"json"},"watches":[{"name":"by-customer","fields":["/customerId"]}]}"#;

async fn start(store: &std::path::Path) -> Server {
    let project = format!("alpha:{TOKEN}");
    Server::start(
        store.to_str().unwrap(),
        free_port(),
        &["--project-token", &project],
    )
    .await
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// What a client holding the stream key derives offline.
struct Watcher {
    base: String,
    collection: String,
    epoch: [u8; 16],
    sig: WaitSigKey,
    def_id: [u8; 16],
    def: WatchDef,
    http: reqwest::Client,
}

impl Watcher {
    fn new(server: &Server, collection: &str, meta: &Value) -> Watcher {
        let epoch = epoch_of(meta);
        let key = StreamKey::parse(DEV_KEY).unwrap();
        let def = WatchDef {
            name: "by-customer".into(),
            fields: vec!["/customerId".into()],
        };
        Watcher {
            base: server.base.clone(),
            collection: collection.into(),
            epoch,
            sig: WaitSigKey::derive(&epoch, key.expose()),
            def_id: definition_id(&epoch, &def),
            def,
            http: common::client(),
        }
    }

    fn key_of(&self, customer: &str) -> WatchKey {
        watch_key(&self.def_id, &self.def, &json!({ "customerId": customer })).unwrap()
    }

    fn capability(&self, key: WatchKey, expiry_s: u64) -> String {
        CapabilityScope {
            project: "alpha",
            collection: &self.collection,
            epoch: &self.epoch,
            watch: &self.def.name,
            key,
        }
        .sign(&self.sig, expiry_s)
    }

    fn url(&self, watch: &str, key: &str) -> String {
        format!(
            "{}/v1/streams/{}/watches/{watch}/keys/{key}",
            self.base, self.collection
        )
    }

    /// One observation with the capability in the header.
    async fn observe(&self, key: WatchKey, cursor: Option<&str>, timeout_ms: u64) -> Answer {
        let cap = self.capability(key, now_s() + 120);
        self.observe_with(key, &cap, cursor, timeout_ms).await
    }

    async fn observe_with(
        &self,
        key: WatchKey,
        cap: &str,
        cursor: Option<&str>,
        timeout_ms: u64,
    ) -> Answer {
        let mut query = vec![("timeoutMs", timeout_ms.to_string())];
        if let Some(c) = cursor {
            query.push(("cursor", c.to_string()));
        }
        let request = self
            .http
            .get(self.url(&self.def.name, &key.hex()))
            .header("authorization", format!("Prisma-Watch {cap}"))
            .pairs(&query);
        Api::send(request).await
    }
}

/// An answer's (invalidated, reason, cursor), checking its headers.
fn verdict(answer: &Answer) -> (bool, Option<String>, String) {
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.header("cache-control"), Some("no-store"));
    assert_eq!(answer.header("referrer-policy"), Some("no-referrer"));
    let v = answer.json();
    (
        v["invalidated"].as_bool().expect("invalidated"),
        v["reason"].as_str().map(str::to_string),
        v["cursor"].as_str().expect("cursor").to_string(),
    )
}

async fn append(api: &Api, customer: &str) {
    let body = json!({ "customerId": customer, "total": 1 }).to_string();
    let answer = api.append("orders", customer, &body).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
}

#[tokio::test]
async fn an_observation_wakes_on_a_durable_append_of_its_own_key_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let api = Api::new(&server, Some(TOKEN), DEV_KEY);
    let meta = api.create("orders", DOC).await;
    assert_eq!(meta.status, 201, "{}", meta.text());
    // Definitions: with the token, without the key.
    let list = Api::send(api.keyless(Method::GET, &api.url("orders/watches"))).await;
    assert_eq!(list.status, 200, "{}", list.text());
    assert_eq!(
        list.json(),
        json!({"watches": [{"name": "by-customer", "fields": ["/customerId"]}]})
    );
    let one = Api::send(api.keyless(Method::GET, &api.url("orders/watches/by-customer"))).await;
    assert_eq!(one.json()["fields"], json!(["/customerId"]));
    Api::send(api.keyless(Method::GET, &api.url("orders/watches/nope")))
        .await
        .expect_error(404, "unknown_watch");

    let w = Watcher::new(&server, "orders", &meta.json());
    let c1 = w.key_of("c1");
    let (changed, _, c0) = verdict(&w.observe(c1, None, 50).await);
    assert!(!changed, "nothing happened yet");
    // Another key's append leaves c1 unchanged.
    append(&api, "c2").await;
    let (changed, _, after_c2) = verdict(&w.observe(c1, Some(&c0), 50).await);
    assert!(!changed, "c2 is not c1");
    // A parked observation wakes when c1's append is durable, and the
    // record is readable by then.
    let parked = {
        let w = Watcher::new(&server, "orders", &meta.json());
        let cursor = after_c2.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            (
                w.observe(c1, Some(&cursor), 20_000).await,
                started.elapsed(),
            )
        })
    };
    append(&api, "c1").await;
    let (answer, waited) = parked.await.unwrap();
    let (changed, reason, after_c1) = verdict(&answer);
    assert!(
        changed && reason.as_deref() == Some("changed"),
        "{}",
        answer.text()
    );
    assert!(
        waited < Duration::from_secs(15),
        "woken, not timed out: {waited:?}"
    );
    let (records, _) = api.read_all_json("orders", "c1").await;
    assert_eq!(records.len(), 1, "readable once published");
    // The answer's cursor covers that change; the older cursor still sees it.
    assert!(!verdict(&w.observe(c1, Some(&after_c1), 50).await).0);
    assert!(verdict(&w.observe(c1, Some(&c0), 50).await).0);
    // A raw append (the default routing key) fires the same watch.
    let raw = Api::send(
        w.http
            .post(format!("{}/v1/stream/orders", server.base))
            .bearer_auth(TOKEN)
            .header("stream-encryption-key", DEV_KEY)
            .header("content-type", "application/json")
            .body(r#"{"customerId":"c1","via":"raw"}"#),
    )
    .await;
    assert!(raw.status < 300, "{}", raw.text());
    assert!(verdict(&w.observe(c1, Some(&after_c1), 50).await).0);
    // `?cap=` works as the header does.
    let cap = w.capability(c1, now_s() + 60);
    let by_query = Api::send(
        w.http
            .get(w.url("by-customer", &c1.hex()))
            .pairs(&[("cap", cap.as_str()), ("timeoutMs", "10")]),
    )
    .await;
    assert_eq!(by_query.status, 200, "{}", by_query.text());
}

#[tokio::test]
async fn every_capability_refusal_is_the_same_403_and_cursors_resync_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let api = Api::new(&server, Some(TOKEN), DEV_KEY);
    let meta = api.create("orders", DOC).await;
    assert_eq!(meta.status, 201);
    assert_eq!(api.create("other", DOC).await.status, 201);
    let w = Watcher::new(&server, "orders", &meta.json());
    let c1 = w.key_of("c1");
    let other_meta = api.metadata("other").await.json();
    let foreign = Watcher::new(&server, "other", &other_meta);
    let missing = Watcher {
        collection: "missing".into(),
        ..Watcher::new(&server, "orders", &meta.json())
    };
    let refusals = [
        w.capability(c1, now_s().saturating_sub(120)), // expired
        w.capability(c1, now_s() + 3_600),             // too long-lived
        w.capability(w.key_of("c2"), now_s() + 60),    // another key
        foreign.capability(c1, now_s() + 60),          // another collection
        format!("alpha.{}.{}", now_s() + 60, "0".repeat(32)), // forged
        w.capability(c1, now_s() + 60).replacen("alpha", "beta", 1),
        String::new(),
        TOKEN.to_string(),
    ];
    let mut bodies = Vec::new();
    for cap in &refusals {
        let answer = w.observe_with(c1, cap, None, 10).await;
        answer.expect_error(403, "watch_unauthorized");
        bodies.push(answer.text());
    }
    // A collection that does not exist answers the same.
    let answer = missing
        .observe_with(c1, &missing.capability(c1, now_s() + 60), None, 10)
        .await;
    answer.expect_error(403, "watch_unauthorized");
    bodies.push(answer.text());
    bodies.dedup();
    assert_eq!(bodies.len(), 1, "one body for every refusal: {bodies:?}");
    // A bearer token alone grants no observation; a capability no reads.
    let bearer = Api::send(
        w.http
            .get(w.url("by-customer", &c1.hex()))
            .bearer_auth(TOKEN),
    )
    .await;
    bearer.expect_error(403, "watch_unauthorized");
    let cap = w.capability(c1, now_s() + 60);
    let read = Api::send(
        w.http
            .get(api.url("orders/records"))
            .header("authorization", format!("Prisma-Watch {cap}"))
            .header("prisma-encryption-key", DEV_KEY),
    )
    .await;
    read.expect_error(401, "unauthorized");
    // Malformed keys and cursors.
    Api::send(w.http.get(w.url("by-customer", "xyz")))
        .await
        .expect_error(400, "invalid_watch_key");
    w.observe(c1, Some("not-a-cursor"), 10)
        .await
        .expect_error(400, "invalid_cursor");

    // A cursor from before a restart resyncs: the journal is new.
    let (_, _, before) = verdict(&w.observe(c1, None, 10).await);
    server.kill_9();
    let server = start(dir.path()).await;
    let w = Watcher {
        base: server.base.clone(),
        ..w
    };
    let (invalidated, reason, after) = verdict(&w.observe(c1, Some(&before), 10).await);
    assert!(invalidated && reason.as_deref() == Some("resync"));
    assert!(!verdict(&w.observe(c1, Some(&after), 10).await).0);
}
