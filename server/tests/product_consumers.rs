//! Consumer groups (`…/consumers/{c}`, `:pull`, `:settle`) against the real
//! binary: configuration and its conflicts, per-key FIFO delivery with one
//! lease per key, settles counted and applied atomically (stale tokens
//! counted, never applied), redelivery when a lease's visibility passes,
//! dead letters (exactly once, across a kill -9 between their steps or
//! not), dropped poison without a dead-letter stream, long-polls woken by
//! appends, and state that survives kill -9 and sealing.

mod common;

use common::product::{Answer, Api, JSON_DOC, OTHER_KEY};
use common::{free_port, Server, DEV_KEY};
use reqwest::Method;
use serde_json::{json, Value};

const TOKEN: &str = "token-of-project-alpha";
/// Seal often, so state is read back from index runs as well as the WAL.
const SEAL_OFTEN: [&str; 4] = ["--seal-objects", "3", "--gc-grace-ms", "0"];

async fn start(store: &std::path::Path) -> Server {
    let mut args = vec!["--project-token".to_string(), format!("alpha:{TOKEN}")];
    args.extend(SEAL_OFTEN.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start(store.to_str().unwrap(), free_port(), &args).await
}

async fn configure(api: &Api, name: &str, consumer: &str, doc: &str) -> Answer {
    Api::send(
        api.request(Method::PUT, &format!("{name}/consumers/{consumer}"))
            .body(doc.to_string()),
    )
    .await
}

async fn pull(api: &Api, name: &str, consumer: &str, body: Value) -> Answer {
    Api::send(
        api.request(Method::POST, &format!("{name}/consumers/{consumer}:pull"))
            .body(body.to_string()),
    )
    .await
}

async fn settle(api: &Api, name: &str, consumer: &str, body: Value) -> Answer {
    Api::send(
        api.request(Method::POST, &format!("{name}/consumers/{consumer}:settle"))
            .body(body.to_string()),
    )
    .await
}

/// The messages of a successful pull.
fn messages(answer: &Answer) -> Vec<Value> {
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.header("cache-control"), Some("no-store"));
    answer.json()["messages"]
        .as_array()
        .expect("messages")
        .clone()
}

fn values(messages: &[Value]) -> Vec<(String, i64)> {
    messages
        .iter()
        .map(|m| {
            (
                m["routingKey"].as_str().unwrap().to_string(),
                m["value"]["n"].as_i64().unwrap(),
            )
        })
        .collect()
}

fn token(message: &Value) -> String {
    message["leaseToken"].as_str().unwrap().to_string()
}

async fn append_n(api: &Api, name: &str, routing_key: &str, n: i64) {
    let answer = api
        .append(name, routing_key, &json!({"n": n}).to_string())
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
}

#[tokio::test]
async fn configuration_conflicts_versions_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let api = Api::new(&server, Some(TOKEN), DEV_KEY);
    assert_eq!(api.create("orders", JSON_DOC).await.status, 201);

    let created = configure(&api, "orders", "workers", r#"{"maxAttempts":3}"#).await;
    assert_eq!(created.status, 201, "{}", created.text());
    let version = created
        .header("prisma-consumer-version")
        .unwrap()
        .to_string();
    assert_eq!(
        created.json(),
        json!({"visibilityTimeoutMs":30000,"maxAttempts":3,"maxBatchRecords":10})
    );
    let same = configure(
        &api,
        "orders",
        "workers",
        r#"{"maxAttempts":3,"maxBatchRecords":10}"#,
    )
    .await;
    assert_eq!(same.status, 200, "the same configuration spelled out");
    assert_eq!(
        same.header("prisma-consumer-version"),
        Some(version.as_str())
    );
    configure(&api, "orders", "workers", r#"{"maxAttempts":4}"#)
        .await
        .expect_error(409, "consumer_config_conflict");
    configure(&api, "orders", "bad%01name", "{}")
        .await
        .expect_error(400, "invalid_consumer_name");
    configure(&api, "orders", "bad:verb", "{}")
        .await
        .expect_error(404, "unknown_route");
    configure(&api, "orders", "w2", r#"{"maxAttempts":0}"#)
        .await
        .expect_error(400, "invalid_config");
    configure(&api, "orders", "w2", r#"{"deadLetterStream":"nowhere"}"#)
        .await
        .expect_error(400, "unknown_dead_letter_stream");
    assert_eq!(api.create("other-key", JSON_DOC).await.status, 201);
    let other = api.with_key(OTHER_KEY);
    assert_eq!(other.create("keyed-apart", JSON_DOC).await.status, 201);
    configure(
        &api,
        "orders",
        "w2",
        r#"{"deadLetterStream":"keyed-apart"}"#,
    )
    .await
    .expect_error(400, "dead_letter_key_mismatch");
    assert_eq!(api.create("sealed-dlq", JSON_DOC).await.status, 201);
    assert_eq!(api.seal("sealed-dlq", "{}").await.status, 200);
    configure(&api, "orders", "w2", r#"{"deadLetterStream":"sealed-dlq"}"#)
        .await
        .expect_error(400, "dead_letter_sealed");
    configure(&api, "orders", "w2", "{}")
        .await
        .status
        .eq(&201)
        .then_some(())
        .expect("a second consumer");
    configure(&other, "orders", "w3", "{}")
        .await
        .expect_error(403, "wrong_key");

    let read = Api::send(api.keyless(Method::GET, &api.url("orders/consumers/workers"))).await;
    assert_eq!(read.status, 200);
    assert_eq!(
        read.header("prisma-consumer-version"),
        Some(version.as_str())
    );
    Api::send(api.keyless(Method::GET, &api.url("orders/consumers/nobody")))
        .await
        .expect_error(404, "unknown_consumer");

    let delete = |v: Option<&str>| {
        let mut r = api.keyless(Method::DELETE, &api.url("orders/consumers/workers"));
        if let Some(v) = v {
            r = r.header("prisma-consumer-version", v);
        }
        Api::send(r)
    };
    delete(None)
        .await
        .expect_error(428, "missing_consumer_version");
    delete(Some("999"))
        .await
        .expect_error(409, "consumer_version_conflict");

    // A lease of the first generation is stale for the recreated consumer.
    append_n(&api, "orders", "k", 1).await;
    let first = messages(&pull(&api, "orders", "workers", json!({})).await);
    assert_eq!(first.len(), 1);
    assert_eq!(delete(Some(&version)).await.status, 204);
    pull(&api, "orders", "workers", json!({}))
        .await
        .expect_error(404, "consumer_not_found");
    let again = configure(&api, "orders", "workers", r#"{"maxAttempts":3}"#).await;
    assert_eq!(again.status, 201);
    let newer: u64 = again
        .header("prisma-consumer-version")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        newer > version.parse::<u64>().unwrap(),
        "versions only grow"
    );
    let answer = settle(
        &api,
        "orders",
        "workers",
        json!({"acks":[{"leaseToken": token(&first[0])}]}),
    )
    .await;
    assert_eq!(answer.json()["stale"], 1, "{}", answer.text());
    let redelivered = messages(&pull(&api, "orders", "workers", json!({})).await);
    assert_eq!(values(&redelivered), vec![("k".into(), 1)]);
    assert_eq!(redelivered[0]["attempts"], 1, "a new consumer starts over");
}

#[tokio::test]
async fn delivery_is_per_key_fifo_with_atomic_settles_and_redelivery() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let api = Api::new(&server, Some(TOKEN), DEV_KEY);
    assert_eq!(api.create("jobs", JSON_DOC).await.status, 201);
    let config = r#"{"visibilityTimeoutMs":1000,"maxAttempts":5}"#;
    assert_eq!(configure(&api, "jobs", "w", config).await.status, 201);
    for (key, n) in [("a", 0), ("a", 1), ("b", 2), ("a", 3), ("c", 4)] {
        append_n(&api, "jobs", key, n).await;
    }
    let first = messages(&pull(&api, "jobs", "w", json!({"max": 10})).await);
    assert_eq!(
        values(&first),
        vec![("a".into(), 0), ("b".into(), 2), ("c".into(), 4)],
        "one lease per key, each key's oldest record"
    );
    assert!(first.iter().all(|m| m["attempts"] == 1));
    let blocked = pull(&api, "jobs", "w", json!({})).await;
    assert!(
        messages(&blocked).is_empty(),
        "a's next record waits for a's lease"
    );
    assert_eq!(blocked.json()["backlog"], 5);

    // One settle: ack a, retry b at once, extend c; a forged and a repeated
    // token count as stale and change nothing.
    let answer = settle(
        &api,
        "jobs",
        "w",
        json!({
            "acks": [{"leaseToken": token(&first[0])}, {"leaseToken": token(&first[0])},
                     {"leaseToken": "forged"}],
            "retries": [{"leaseToken": token(&first[1]), "delayMs": 0}],
            "extends": [{"leaseToken": token(&first[2]), "visibilityMs": 60000}],
        }),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let counts = answer.json();
    assert_eq!(
        (
            &counts["acked"],
            &counts["retried"],
            &counts["extended"],
            &counts["stale"]
        ),
        (&json!(1), &json!(1), &json!(1), &json!(2))
    );
    assert_eq!(counts["backlog"], 4);
    let second = messages(&pull(&api, "jobs", "w", json!({})).await);
    let mut got = values(&second);
    got.sort();
    assert_eq!(got, vec![("a".into(), 1), ("b".into(), 2)]);
    let b = second.iter().find(|m| m["routingKey"] == "b").unwrap();
    assert_eq!(b["attempts"], 2, "a retry counts an attempt");

    // Visibility: the unsettled leases come back after 1 s; a long-poll
    // waits for it rather than the test sleeping.
    let redelivered = messages(&pull(&api, "jobs", "w", json!({"waitMs": 10000})).await);
    let mut got = values(&redelivered);
    got.sort();
    assert_eq!(got, vec![("a".into(), 1), ("b".into(), 2)]);
    assert!(redelivered
        .iter()
        .all(|m| m["attempts"].as_u64().unwrap() >= 2));
    // A token of an expired lease is stale.
    let late = settle(
        &api,
        "jobs",
        "w",
        json!({"acks":[{"leaseToken": token(&second[0])}]}),
    )
    .await;
    assert_eq!(late.json()["stale"], 1);

    // A long-poll is woken by an append to a key with nothing leased.
    let waiter = {
        let api = api.clone();
        tokio::spawn(async move { pull(&api, "jobs", "w", json!({"waitMs": 20000})).await })
    };
    append_n(&api, "jobs", "d", 5).await;
    let woken = messages(&waiter.await.unwrap());
    assert_eq!(values(&woken), vec![("d".into(), 5)]);

    // Bad bodies.
    pull(&api, "jobs", "w", json!({"max": 0}))
        .await
        .expect_error(400, "invalid_body");
    pull(&api, "jobs", "w", json!({"waitMs": 25001}))
        .await
        .expect_error(400, "invalid_body");
    settle(&api, "jobs", "w", json!({"extends":[{"leaseToken":"x"}]}))
        .await
        .expect_error(400, "invalid_body");
    pull(&api.with_key(OTHER_KEY), "jobs", "w", json!({}))
        .await
        .expect_error(403, "wrong_key");
}

#[tokio::test]
async fn poison_is_dead_lettered_exactly_once_or_dropped_and_state_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let api = Api::new(&server, Some(TOKEN), DEV_KEY);
    for name in ["src", "dlq"] {
        assert_eq!(api.create(name, JSON_DOC).await.status, 201);
    }
    let with_dlq = r#"{"maxAttempts":1,"deadLetterStream":"dlq","visibilityTimeoutMs":1000}"#;
    assert_eq!(configure(&api, "src", "d", with_dlq).await.status, 201);
    assert_eq!(
        configure(&api, "src", "drop", r#"{"maxAttempts":1}"#)
            .await
            .status,
        201
    );
    append_n(&api, "src", "p", 7).await;
    append_n(&api, "src", "q", 8).await;

    for consumer in ["d", "drop"] {
        let got = messages(&pull(&api, "src", consumer, json!({})).await);
        assert_eq!(got.len(), 2);
        let p = got.iter().find(|m| m["routingKey"] == "p").unwrap();
        let q = got.iter().find(|m| m["routingKey"] == "q").unwrap();
        let answer = settle(
            &api,
            "src",
            consumer,
            json!({"retries":[{"leaseToken": token(p), "delayMs": 0}],
                   "acks":[{"leaseToken": token(q)}]}),
        )
        .await;
        assert_eq!(answer.json()["retried"], 1);
        // Its one attempt is spent: the next pull dead-letters (or drops) it.
        let after = pull(&api, "src", consumer, json!({})).await;
        assert!(messages(&after).is_empty(), "{}", after.text());
        assert_eq!(after.json()["backlog"], 0);
    }
    let (dead, _) = api.read_all_json("dlq", "p").await;
    assert_eq!(dead.len(), 1, "one dead letter, from d only: {dead:?}");
    let letter = &dead[0];
    assert_eq!(letter["sourceStream"], "src");
    assert_eq!(letter["consumer"], "d");
    assert_eq!(letter["routingKey"], "p");
    assert_eq!(letter["attempts"], 1);
    assert_eq!(letter["value"], json!({"n": 7}));
    assert!(letter["messageId"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));

    // A lease outstanding at a kill -9 stays leased afterwards (and comes
    // back after its visibility, its attempt counted); acknowledged records
    // never come back.
    assert_eq!(api.create("src2", JSON_DOC).await.status, 201);
    let keep = r#"{"maxAttempts":5,"visibilityTimeoutMs":1000}"#;
    assert_eq!(configure(&api, "src2", "keep", keep).await.status, 201);
    append_n(&api, "src2", "r", 9).await;
    append_n(&api, "src2", "s", 10).await;
    let leased = messages(&pull(&api, "src2", "keep", json!({})).await);
    assert_eq!(leased.len(), 2);
    let s_msg = leased.iter().find(|m| m["routingKey"] == "s").unwrap();
    let acked = settle(
        &api,
        "src2",
        "keep",
        json!({"acks":[{"leaseToken": token(s_msg)}]}),
    )
    .await;
    assert_eq!(acked.json()["acked"], 1);
    server.kill_9();
    let server = start(dir.path()).await;
    let api = Api::new(&server, Some(TOKEN), DEV_KEY);
    let now = pull(&api, "src2", "keep", json!({})).await;
    assert!(messages(&now).is_empty(), "still leased: {}", now.text());
    assert_eq!(now.json()["backlog"], 1);
    let back = messages(&pull(&api, "src2", "keep", json!({"waitMs": 10000})).await);
    assert_eq!(values(&back), vec![("r".into(), 9)]);
    assert_eq!(
        back[0]["attempts"], 2,
        "the attempt before the kill was counted"
    );
    let (dead, _) = api.read_all_json("dlq", "p").await;
    assert_eq!(dead.len(), 1, "the dead letter is still there, once");
}

/// Starts a server that aborts (like kill -9) at a step of a dead letter.
async fn start_crashing_at(store: &std::path::Path, step: &str) -> Server {
    let args = [
        "--project-token",
        &format!("alpha:{TOKEN}"),
        "--test-crash-at",
        step,
    ];
    Server::start(store.to_str().unwrap(), free_port(), &args).await
}

#[tokio::test]
async fn a_crash_between_the_steps_of_a_dead_letter_neither_loses_nor_duplicates_it() {
    for step in ["dead-letter-after-mark", "dead-letter-after-append"] {
        let dir = tempfile::tempdir().unwrap();
        let server = start_crashing_at(dir.path(), step).await;
        let api = Api::new(&server, Some(TOKEN), DEV_KEY).fresh_connections();
        for name in ["src", "dlq"] {
            assert_eq!(api.create(name, JSON_DOC).await.status, 201);
        }
        let config = r#"{"maxAttempts":1,"deadLetterStream":"dlq"}"#;
        assert_eq!(configure(&api, "src", "d", config).await.status, 201);
        append_n(&api, "src", "p", 7).await;
        let got = messages(&pull(&api, "src", "d", json!({})).await);
        let retry = json!({"retries":[{"leaseToken": token(&got[0]), "delayMs": 0}]});
        assert_eq!(settle(&api, "src", "d", retry).await.json()["retried"], 1);
        // This pull dead-letters the record, and the server aborts mid-way.
        let crashed = api
            .request(Method::POST, "src/consumers/d:pull")
            .body("{}")
            .send()
            .await;
        assert!(crashed.is_err(), "{step}: the server died answering");
        let mut server = server;
        assert!(
            server.child.wait().expect("reaped").code().is_none(),
            "aborted"
        );
        let server = start(dir.path()).await;
        let api = Api::new(&server, Some(TOKEN), DEV_KEY);
        // The next pull resumes the dead letter.
        let after = pull(&api, "src", "d", json!({})).await;
        assert!(messages(&after).is_empty(), "{step}: {}", after.text());
        assert_eq!(after.json()["backlog"], 0, "{step}");
        let (dead, _) = api.read_all_json("dlq", "p").await;
        assert_eq!(dead.len(), 1, "{step}: exactly one dead letter: {dead:?}");
        assert_eq!(dead[0]["value"], json!({"n": 7}));
        drop(server);
    }
}
