//! The product API (`/v1/streams`) against the real binary: tenancy,
//! collections, records, producers, key reads, live transports, seal, the
//! catalog, and every error code of the contract provoked at least once.

mod common;

use std::time::Duration;

use common::product::{producer, Answer, Api, QueryPairs, BYTES_DOC, JSON_DOC, OTHER_KEY};
use common::{free_port, Server, DEV_KEY};
use reqwest::Method;
use serde_json::{json, Value};

const TOKEN_A: &str = "token-of-project-alpha";
const TOKEN_B: &str = "token-of-project-beta!";

async fn start(extra: &[&str]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "--project-token".to_string(),
        format!("alpha:{TOKEN_A}"),
        "--project-token".to_string(),
        format!("beta:{TOKEN_B}"),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(dir.path().to_str().unwrap(), free_port(), &args).await;
    (dir, server)
}

fn alpha(server: &Server) -> Api {
    Api::new(server, Some(TOKEN_A), DEV_KEY)
}

#[tokio::test]
async fn collections_are_created_idempotently_and_deleted() {
    let (_dir, server) = start(&[]).await;
    let api = alpha(&server);
    let doc = r#"{"format":{"kind":"json"},"expiry":{"idle":"1d"},"watches":[{"name":"by-customer","fields":["/customerId"]}]}"#;
    let created = api.create("orders/eu", doc).await;
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(created.header("cache-control"), Some("no-store"));
    let meta = created.json();
    assert_eq!(meta["name"], "orders/eu");
    assert_eq!(meta["contentType"], "application/json");
    assert_eq!(meta["sealed"], false);
    assert_eq!(meta["expiry"], json!({"idle": "86400s"}));
    assert_eq!(meta["watches"][0]["fields"], json!(["/customerId"]));
    assert_eq!(meta["epoch"].as_str().map(str::len), Some(32));
    assert!(meta["createdAt"].as_u64().is_some());
    // The same normalized document (other spelling, other order) is a safe retry.
    let same = r#"{"watches":[{"fields":["/customerId"],"name":"by-customer"}],"expiry":{"idle":86400},"format":{"kind":"json"}}"#;
    let again = api.create("orders/eu", same).await;
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.json(), meta);
    // Another configuration conflicts; the same one with another key is refused.
    api.create("orders/eu", JSON_DOC)
        .await
        .expect_error(409, "config_mismatch");
    api.with_key(OTHER_KEY)
        .create("orders/eu", same)
        .await
        .expect_error(403, "wrong_key");
    // Metadata needs no key.
    let got = api.metadata("orders/eu").await;
    assert_eq!(got.status, 200);
    assert_eq!(got.json(), meta);
    // Product create writes no records.
    let (records, _) = api.read_all_json("orders/eu", "").await;
    assert!(records.is_empty());
    assert_eq!(api.append("orders/eu", "k", r#"{"a":1}"#).await.status, 200);
    // Delete, then it is gone; the name is free for a new incarnation.
    let deleted = api.delete("orders/eu").await;
    assert_eq!(deleted.status, 204);
    api.metadata("orders/eu")
        .await
        .expect_error(404, "not_found");
    api.delete("orders/eu").await.expect_error(404, "not_found");
    let recreated = api.create("orders/eu", JSON_DOC).await;
    assert_eq!(recreated.status, 201);
    assert_ne!(recreated.json()["createdAt"], Value::Null);
    let (records, _) = api.read_all_json("orders/eu", "k").await;
    assert!(records.is_empty(), "a new incarnation starts empty");
    // Bytes collections keep their content type.
    let bytes = api
        .create(
            "blobs",
            r#"{"format":{"kind":"bytes","contentType":"application/x-protobuf"}}"#,
        )
        .await;
    assert_eq!(bytes.status, 201);
    assert_eq!(bytes.json()["contentType"], "application/x-protobuf");
    let at = api
        .create(
            "dated",
            r#"{"format":{"kind":"json"},"expiry":{"at":"2099-01-01T00:00:00Z"}}"#,
        )
        .await;
    assert_eq!(at.json()["expiry"], json!({"at": "2099-01-01T00:00:00Z"}));
}

#[tokio::test]
async fn invalid_creation_documents_are_400_invalid_config() {
    let (_dir, server) = start(&[]).await;
    let api = alpha(&server);
    let big = format!(
        r#"{{"format":{{"kind":"json"}},"x":"{}"}}"#,
        "a".repeat(300 << 10)
    );
    for doc in [
        "",
        "not json",
        "{}",
        r#"{"format":{"kind":"text"}}"#,
        r#"{"format":{"kind":"json"},"profile":"evented"}"#,
        r#"{"format":{"kind":"json"},"ordering":"global"}"#,
        r#"{"format":{"kind":"json"},"expiry":{"idle":"0s"}}"#,
        r#"{"format":{"kind":"json"},"expiry":{"idle":"1d","at":"2099-01-01T00:00:00Z"}}"#,
        r#"{"format":{"kind":"json"},"expiry":{"at":"2001-01-01T00:00:00Z"}}"#,
        r#"{"format":{"kind":"bytes"},"watches":[{"name":"w","fields":["/a"]}]}"#,
        r#"{"format":{"kind":"json"},"watches":[{"name":"w","fields":["a"]}]}"#,
        big.as_str(),
    ] {
        api.create("c", doc)
            .await
            .expect_error(400, "invalid_config");
    }
    // The key is checked first: missing, then malformed.
    let missing = Api::send(
        api.keyless(Method::PUT, &api.url("c"))
            .body(JSON_DOC.to_string()),
    )
    .await;
    missing.expect_error(400, "missing_key");
    api.with_key("too-short")
        .create("c", JSON_DOC)
        .await
        .expect_error(400, "invalid_key");
}

#[tokio::test]
async fn records_are_partitioned_by_routing_key_and_read_by_cursor() {
    let (_dir, server) = start(&[]).await;
    let api = alpha(&server);
    assert_eq!(api.create("events", JSON_DOC).await.status, 201);
    // Interleaved appends to three keys; JSON text kept minus whitespace.
    for i in 0..5 {
        for key in ["a", "b", ""] {
            let body = format!(r#"{{ "key" : "{key}", "i" : {i}, "n": 1.50 }}"#);
            let answer = api.append("events", key, &body).await;
            assert_eq!(answer.status, 200, "{}", answer.text());
            let v = answer.json();
            assert_eq!(
                (v["count"].as_u64(), v["duplicate"].as_bool()),
                (Some(1), Some(false))
            );
            assert_eq!(v["sealed"], false);
            assert!(v["cursor"].is_string());
        }
    }
    // A top-level array is one array-valued record on `records`.
    assert_eq!(api.append("events", "a", "[1, 2]").await.json()["count"], 1);
    let page = api.read("events", "a", None).await;
    assert_eq!(page.status, 200);
    assert_eq!(page.header("content-type"), Some("application/json"));
    assert_eq!(page.header("cache-control"), Some("no-store"));
    assert_eq!(page.header("prisma-up-to-date"), Some("true"));
    assert!(page.header("prisma-sealed").is_none());
    assert!(page
        .headers
        .keys()
        .all(|k| !k.as_str().starts_with("stream-")));
    let text = page.text();
    assert!(
        text.starts_with(r#"[{"key":"a","i":0,"n":1.50},"#),
        "{text}"
    );
    assert!(
        text.ends_with(r#"{"key":"a","i":4,"n":1.50},[1,2]]"#),
        "{text}"
    );
    let records = page.json();
    assert_eq!(records.as_array().unwrap().len(), 6);
    // The cursor continues after the last record; `now` is an empty page at the tail.
    let cursor = page.cursor();
    assert_eq!(api.append("events", "a", "7").await.status, 200);
    assert_eq!(api.append("events", "b", "8").await.status, 200);
    let next = api.read("events", "a", Some(&cursor)).await;
    assert_eq!(next.text(), "[7]");
    let now = api.read("events", "a", Some("now")).await;
    assert_eq!(
        (now.text().as_str(), now.header("prisma-up-to-date")),
        ("[]", Some("true"))
    );
    assert_eq!(
        api.read("events", "a", Some(&now.cursor())).await.text(),
        "[]"
    );
    // The default key holds only its own records.
    let (defaults, _) = api.read_all_json("events", "").await;
    assert_eq!(defaults.len(), 5);
    assert!(defaults.iter().all(|r| r["key"] == ""));
    // Cursors are bound to their key, collection and class.
    let b_cursor = api.read("events", "b", None).await.cursor();
    api.read("events", "a", Some(&b_cursor))
        .await
        .expect_error(400, "invalid_cursor");
    assert_eq!(api.create("other", JSON_DOC).await.status, 201);
    api.read("other", "a", Some(&cursor))
        .await
        .expect_error(400, "invalid_cursor");
    for bad in [
        "0000000000000000_0000000000000003",
        "-1",
        "garbage!!",
        &cursor[..cursor.len() - 2],
    ] {
        api.read("events", "a", Some(bad))
            .await
            .expect_error(400, "invalid_cursor");
    }
    // A wrong key reads nothing.
    api.with_key(OTHER_KEY)
        .read("events", "a", None)
        .await
        .expect_error(403, "wrong_key");
    // maxBytes pages (clamped to at least 4 KiB) and the client loops to the end.
    let big = format!(r#""{}""#, "x".repeat(3000));
    for _ in 0..6 {
        assert_eq!(api.append("events", "big", &big).await.status, 200);
    }
    let first = Api::send(
        api.request(Method::GET, "events/records")
            .pairs(&[("routingKey", "big"), ("maxBytes", "1")]),
    )
    .await;
    let n = first.json().as_array().unwrap().len();
    assert!((1..6).contains(&n), "{n} records in a 4 KiB page");
    assert!(first.header("prisma-up-to-date").is_none());
    let (all, _) = api.read_all_json("events", "big").await;
    assert_eq!(all.len(), 6);
}

#[tokio::test]
async fn batches_are_atomic_and_bounded() {
    let (_dir, server) = start(&["--max-body-bytes", "1000000"]).await;
    let api = alpha(&server);
    assert_eq!(api.create("j", JSON_DOC).await.status, 201);
    assert_eq!(api.create("b", BYTES_DOC).await.status, 201);
    let ok = api.batch("j", "k", r#"[{"a": 1}, [2, 3], "x"]"#).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.json()["count"], 3);
    let (records, _) = api.read_all_json("j", "k").await;
    assert_eq!(records, vec![json!({"a": 1}), json!([2, 3]), json!("x")]);
    api.batch("j", "k", "[]")
        .await
        .expect_error(400, "empty_batch");
    api.batch("j", "k", r#"{"a":1}"#)
        .await
        .expect_error(400, "invalid_body");
    api.batch("j", "k", "[1,")
        .await
        .expect_error(400, "invalid_body");
    let too_many = format!("[{}]", vec!["1"; 10_001].join(","));
    api.batch("j", "k", &too_many)
        .await
        .expect_error(400, "batch_too_large");
    api.append("j", "k", "{oops")
        .await
        .expect_error(400, "invalid_body");
    // Nothing of the refused batches landed.
    let (records, _) = api.read_all_json("j", "k").await;
    assert_eq!(records.len(), 3);
    let refused = api.batch("b", "k", "[1]").await;
    refused.expect_error(405, "batch_unsupported_format");
    assert_eq!(
        refused.header("allow"),
        Some(""),
        "a 405 names what is allowed: nothing"
    );
    let empty = Api::send(api.request(Method::POST, "b/records").body("")).await;
    empty.expect_error(400, "empty_body");
    let raw = Api::send(
        api.request(Method::POST, "b/records")
            .header("content-type", "application/octet-stream")
            .body(vec![0u8, 1, 2, 255]),
    )
    .await;
    assert_eq!(raw.status, 200);
    let raw2 = Api::send(api.request(Method::POST, "b/records").body(vec![9u8, 9])).await;
    assert_eq!(raw2.status, 200);
    // A bytes page is one record's bytes: record boundaries survive.
    let read = api.read("b", "", None).await;
    assert_eq!(&read.body[..], &[0u8, 1, 2, 255]);
    assert_eq!(
        read.header("content-type"),
        Some("application/octet-stream")
    );
    assert!(read.header("prisma-up-to-date").is_none());
    let second = api.read("b", "", Some(&read.cursor())).await;
    assert_eq!(&second.body[..], &[9u8, 9]);
    assert_eq!(second.header("prisma-up-to-date"), Some("true"));
    // Content type, body size and routing key limits.
    let wrong_type = Api::send(
        api.request(Method::POST, "j/records")
            .header("content-type", "text/plain")
            .body("1"),
    )
    .await;
    wrong_type.expect_error(409, "content_type_mismatch");
    let huge = format!(r#""{}""#, "x".repeat(1_100_000));
    api.append("j", "k", &huge)
        .await
        .expect_error(413, "body_too_large");
    api.append("j", &"r".repeat(1025), "1")
        .await
        .expect_error(400, "invalid_routing_key");
    assert_eq!(api.append("j", &"r".repeat(1024), "1").await.status, 200);
    // Routing keys are exact bytes: no trimming or case folding.
    assert_eq!(api.append("j", "Key", "1").await.status, 200);
    assert_eq!(api.read_all_json("j", "key").await.0.len(), 0);
}

#[tokio::test]
async fn producers_are_exactly_once_per_routing_key() {
    let (_dir, server) = start(&[]).await;
    let api = alpha(&server);
    assert_eq!(api.create("p", JSON_DOC).await.status, 201);
    let send = |key: &'static str, epoch: u64, seq: u64, body: &'static str| {
        let api = api.clone();
        async move {
            Api::send(producer(
                api.request(Method::POST, "p/records")
                    .header("prisma-routing-key", key)
                    .body(body),
                "writer-1",
                epoch,
                seq,
            ))
            .await
        }
    };
    let first = send("k", 0, 0, "1").await;
    assert_eq!(first.status, 200);
    let second = send("k", 0, 1, "2").await;
    assert_eq!(second.json()["duplicate"], false);
    // A retry of the last request: duplicate, nothing written, original cursor.
    let retry = send("k", 0, 1, "2").await;
    assert_eq!(retry.status, 200);
    let v = retry.json();
    assert_eq!(
        (v["duplicate"].as_bool(), v["count"].as_u64()),
        (Some(true), Some(0))
    );
    assert_eq!(v["cursor"], second.json()["cursor"]);
    // The same sequence with other bytes.
    send("k", 0, 1, "3")
        .await
        .expect_error(409, "producer_sequence_reused");
    let gap = send("k", 0, 5, "5").await;
    gap.expect_error(409, "producer_gap");
    assert_eq!(
        gap.json()["error"]["details"],
        json!({"expected": 2, "received": 5})
    );
    send("k", 1, 3, "9")
        .await
        .expect_error(400, "producer_epoch_must_start_at_zero");
    assert_eq!(send("k", 1, 0, "10").await.status, 200);
    let stale = send("k", 0, 2, "9").await;
    stale.expect_error(403, "stale_producer_epoch");
    assert_eq!(stale.json()["error"]["details"]["currentEpoch"], 1);
    // Another routing key is another scope: it starts at (0, 0).
    assert_eq!(send("other", 0, 0, "1").await.json()["duplicate"], false);
    let (records, _) = api.read_all_json("p", "k").await;
    assert_eq!(records, vec![json!(1), json!(2), json!(10)]);
    // All three headers or none; reserved ids.
    let partial = Api::send(
        api.request(Method::POST, "p/records")
            .header("producer-id", "w")
            .body("1"),
    )
    .await;
    partial.expect_error(400, "invalid_producer");
    Api::send(producer(
        api.request(Method::POST, "p/records").body("1"),
        "__seal",
        0,
        0,
    ))
    .await
    .expect_error(400, "invalid_producer");
}

#[tokio::test]
async fn seal_is_durable_monotonic_and_idempotent() {
    let (_dir, server) = start(&[]).await;
    let api = alpha(&server);
    assert_eq!(api.create("s", JSON_DOC).await.status, 201);
    assert_eq!(api.append("s", "k", "1").await.status, 200);
    let seal = |body: &'static str, seq: u64| {
        let api = api.clone();
        async move {
            Api::send(producer(
                api.request(Method::POST, "s:seal").body(body),
                "closer",
                0,
                seq,
            ))
            .await
        }
    };
    let sealed = seal(r#"{"final": {"done": true}, "routingKey": "k"}"#, 0).await;
    assert_eq!(sealed.status, 200, "{}", sealed.text());
    assert_eq!(sealed.json()["sealed"], true);
    // A retry of the producer's final is a duplicate, not an error.
    let retry = seal(r#"{"final": {"done": true}, "routingKey": "k"}"#, 0).await;
    assert_eq!(retry.status, 200, "{}", retry.text());
    assert_eq!(retry.json()["duplicate"], true);
    // Appends are refused; seal-only retries are idempotent, even without a key.
    api.append("s", "k", "2").await.expect_error(409, "sealed");
    api.append("s", "", "2").await.expect_error(409, "sealed");
    let keyless = Api::send(api.keyless(Method::POST, &api.url("s:seal"))).await;
    assert_eq!(keyless.status, 200);
    assert_eq!(keyless.json(), json!({"sealed": true}));
    // Another final after the seal is refused.
    api.seal("s", r#"{"final": 3}"#)
        .await
        .expect_error(409, "sealed");
    assert_eq!(api.metadata("s").await.json()["sealed"], true);
    let page = api.read("s", "k", None).await;
    assert_eq!(page.json(), json!([1, {"done": true}]));
    assert_eq!(page.header("prisma-sealed"), Some("true"));
    // A live read at the sealed tail ends at once.
    let poll = Api::send(api.request(Method::GET, "s/records:long-poll").pairs(&[
        ("routingKey", "k"),
        ("cursor", &page.cursor()),
        ("waitMs", "20000"),
    ]))
    .await;
    assert_eq!(poll.status, 204);
    assert_eq!(poll.header("prisma-sealed"), Some("true"));
    // A seal with no final and no key on a fresh collection.
    assert_eq!(api.create("t", BYTES_DOC).await.status, 201);
    let plain = Api::send(api.keyless(Method::POST, &api.url("t:seal")).body("{}")).await;
    assert_eq!(plain.status, 200);
    api.seal("t", r#"{"final": 1}"#)
        .await
        .expect_error(409, "sealed");
    api.seal("nope", "{}").await.expect_error(404, "not_found");
    api.seal("t", r#"{"final": 1, "extra": 2}"#)
        .await
        .expect_error(400, "invalid_body");
}

#[tokio::test]
async fn projects_are_isolated() {
    let (_dir, server) = start(&[]).await;
    let a = alpha(&server);
    let b = Api::new(&server, Some(TOKEN_B), DEV_KEY);
    assert_eq!(a.create("shared-name", JSON_DOC).await.status, 201);
    assert_eq!(a.append("shared-name", "", "1").await.status, 200);
    // Beta sees the same 404 for alpha's name as for a name nobody has.
    let theirs = b.metadata("shared-name").await;
    let nobodys = b.metadata("never-created").await;
    theirs.expect_error(404, "not_found");
    assert_eq!(theirs.body, nobodys.body);
    b.read("shared-name", "", None)
        .await
        .expect_error(404, "not_found");
    b.delete("shared-name").await.expect_error(404, "not_found");
    // Names are unique per project: beta gets its own collection.
    assert_eq!(b.create("shared-name", BYTES_DOC).await.status, 201);
    assert_eq!(
        a.metadata("shared-name").await.json()["contentType"],
        "application/json"
    );
    // The raw route is the token's project too.
    let raw = common::client()
        .get(format!("{}/v1/stream/shared-name?offset=-1", server.base))
        .bearer_auth(TOKEN_A)
        .header("stream-encryption-key", DEV_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(raw.text().await.unwrap(), "[1]");
    // Catalogs list only their own project.
    let names = |answer: Answer| -> Vec<String> {
        answer.json()["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(a.create("only-alpha", JSON_DOC).await.status, 201);
    assert_eq!(names(a.catalog(&[]).await).len(), 2);
    assert_eq!(names(b.catalog(&[]).await), vec!["shared-name".to_string()]);
    // No token, or a wrong one: 401.
    let nobody = Api::new(&server, None, DEV_KEY);
    nobody
        .metadata("shared-name")
        .await
        .expect_error(401, "unauthorized");
    Api::new(&server, Some("not-a-configured-token"), DEV_KEY)
        .catalog(&[])
        .await
        .expect_error(401, "unauthorized");
}

#[tokio::test]
async fn the_catalog_pages_without_descriptor_reads() {
    let (_dir, server) = start(&[]).await;
    let api = alpha(&server);
    let mut expected = Vec::new();
    for i in 0..40 {
        let name = format!("c/{i:02}");
        assert_eq!(api.create(&name, JSON_DOC).await.status, 201);
        expected.push(name);
    }
    assert_eq!(api.delete("c/07").await.status, 204);
    expected.retain(|n| n != "c/07");
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..100 {
        let mut query = vec![("limit", "9".to_string())];
        if let Some(c) = &cursor {
            query.push(("cursor", c.clone()));
        }
        let page = api.catalog(&query).await;
        assert_eq!(page.status, 200, "{}", page.text());
        let v = page.json();
        let items = v["streams"].as_array().unwrap();
        assert!(items.len() <= 9);
        for item in items {
            assert_eq!(item["contentType"], "application/json");
            assert!(item["createdAt"].as_u64().is_some());
            seen.push(item["name"].as_str().unwrap().to_string());
        }
        match v["cursor"].as_str() {
            Some(c) => cursor = Some(c.to_string()),
            None => break,
        }
    }
    seen.sort();
    assert_eq!(seen, expected);
    api.catalog(&[("cursor", "%%%".to_string())])
        .await
        .expect_error(400, "invalid_cursor");
    // Token classes stay apart: a key cursor is no catalog cursor, and back.
    let key_cursor = api.read("c/00", "", None).await.cursor();
    api.catalog(&[("cursor", key_cursor)])
        .await
        .expect_error(400, "invalid_cursor");
    let catalog_cursor = api.catalog(&[("limit", "1".to_string())]).await.json()["cursor"]
        .as_str()
        .unwrap()
        .to_string();
    api.read("c/00", "", Some(&catalog_cursor))
        .await
        .expect_error(400, "invalid_cursor");
    api.catalog(&[("limit", "0".to_string())])
        .await
        .expect_error(400, "invalid_parameter");
    api.catalog(&[("limit", "1001".to_string())])
        .await
        .expect_error(400, "invalid_parameter");
    api.catalog(&[("bogus", "1".to_string())])
        .await
        .expect_error(400, "unknown_parameter");
}

#[tokio::test]
async fn live_reads_wait_for_their_key() {
    let (_dir, server) = start(&[]).await;
    let api = alpha(&server);
    assert_eq!(api.create("live", JSON_DOC).await.status, 201);
    let tail = api.read("live", "k", Some("now")).await.cursor();
    // Another key's appends do not answer the poll; the key's own does.
    let poller = {
        let api = api.clone();
        let tail = tail.clone();
        tokio::spawn(async move {
            Api::send(api.request(Method::GET, "live/records:long-poll").pairs(&[
                ("routingKey", "k"),
                ("cursor", tail.as_str()),
                ("waitMs", "20000"),
            ]))
            .await
        })
    };
    assert_eq!(api.append("live", "other", "0").await.status, 200);
    assert_eq!(api.append("live", "k", r#"{"x":1}"#).await.status, 200);
    let woke = poller.await.unwrap();
    assert_eq!(woke.status, 200, "{}", woke.text());
    assert_eq!(woke.json(), json!([{"x": 1}]));
    // A poll that times out: 204 with the cursor, up to date.
    let idle = Api::send(api.request(Method::GET, "live/records:long-poll").pairs(&[
        ("routingKey", "k"),
        ("cursor", woke.cursor().as_str()),
        ("waitMs", "50"),
    ]))
    .await;
    assert_eq!(idle.status, 204);
    assert_eq!(idle.header("prisma-up-to-date"), Some("true"));
    assert!(idle.header("prisma-next-cursor").is_some());
    // SSE: a data event with the records, then a control event with the cursor.
    let sse = Api::send(
        api.request(Method::GET, "live/records:sse")
            .pairs(&[("routingKey", "k"), ("waitMs", "100")]),
    )
    .await;
    assert_eq!(sse.status, 200);
    assert_eq!(sse.header("content-type"), Some("text/event-stream"));
    let text = sse.text();
    assert!(
        text.starts_with("event: data\ndata:[{\"x\":1}]\n\nevent: control\ndata:{"),
        "{text}"
    );
    assert!(
        text.contains("\"nextCursor\":\"") && text.contains("\"upToDate\":true"),
        "{text}"
    );
    // Sealed: the SSE stream ends with sealed:true.
    assert_eq!(api.seal("live", "{}").await.status, 200);
    let ended = tokio::time::timeout(
        Duration::from_secs(20),
        Api::send(
            api.request(Method::GET, "live/records:sse")
                .pairs(&[("routingKey", "k"), ("waitMs", "20000")]),
        ),
    )
    .await
    .expect("a sealed stream's SSE ends at once");
    assert!(ended.text().contains("\"sealed\":true"), "{}", ended.text());
}

#[tokio::test]
async fn bad_input_gets_the_documented_4xx() {
    let (_dir, server) = start(&[]).await;
    let api = alpha(&server);
    assert_eq!(api.create("x", JSON_DOC).await.status, 201);
    let c = common::client();
    let req = |method: Method, path: &str| api.request(method, path);
    // Removed inputs are refused, never translated.
    for header in [
        "stream-encryption-key",
        "stream-ttl",
        "stream-key",
        "stream-ordering",
    ] {
        Api::send(req(Method::GET, "x").header(header, "1"))
            .await
            .expect_error(400, "unknown_field");
    }
    Api::send(req(Method::GET, "x/records").pairs(&[("key", "a")]))
        .await
        .expect_error(400, "unknown_field");
    Api::send(req(Method::GET, "x/records").pairs(&[("offset", "-1")]))
        .await
        .expect_error(400, "unknown_field");
    Api::send(
        req(Method::POST, "x/records")
            .pairs(&[("routingKey", "a")])
            .body("1"),
    )
    .await
    .expect_error(400, "unknown_field");
    Api::send(req(Method::GET, "x/records").pairs(&[("colour", "red")]))
        .await
        .expect_error(400, "unknown_parameter");
    Api::send(req(Method::GET, "x/records?cursor=now&cursor=now"))
        .await
        .expect_error(400, "duplicate_parameter");
    // Names.
    for name in ["a//b", "__ds", "a%2Frecords", "%FF", "a%00b"] {
        Api::send(req(Method::GET, name))
            .await
            .expect_error(400, "invalid_name");
    }
    let long = "n".repeat(513);
    Api::send(req(Method::GET, &long))
        .await
        .expect_error(400, "invalid_name");
    // Routes and methods.
    Api::send(req(Method::PATCH, "x"))
        .await
        .expect_error(405, "method_not_allowed");
    Api::send(req(Method::PUT, "x/records"))
        .await
        .expect_error(405, "method_not_allowed");
    Api::send(req(Method::GET, "x:seal"))
        .await
        .expect_error(405, "method_not_allowed");
    Api::send(req(Method::GET, "x/records:batch"))
        .await
        .expect_error(405, "method_not_allowed");
    Api::send(req(Method::POST, "x:scan"))
        .await
        .expect_error(405, "method_not_allowed");
    Api::send(req(Method::GET, "x:pull"))
        .await
        .expect_error(404, "unknown_route");
    Api::send(req(Method::GET, "x/consumers/c/d"))
        .await
        .expect_error(404, "unknown_route");
    Api::send(req(Method::GET, "x/consumers/c:peek"))
        .await
        .expect_error(404, "unknown_route");
    Api::send(req(Method::GET, "x/records:tail"))
        .await
        .expect_error(404, "unknown_route");
    // The path decides the methods: another one is 405 before the query is judged.
    let trace = Method::from_bytes(b"TRACE").unwrap();
    let traced = Api::send(req(trace, "x/records:long-poll").pairs(&[("routingKey", "a")])).await;
    traced.expect_error(405, "method_not_allowed");
    assert_eq!(traced.header("allow"), Some("GET"));
    // Whole numbers past u64 are clamped like any other large value.
    let huge = "1".repeat(30);
    let page = Api::send(req(Method::GET, "x/records").pairs(&[("maxBytes", &huge)])).await;
    assert_eq!(page.status, 200, "{}", page.text());
    for bad in ["1.5", "-1", "+", "1e3", ""] {
        Api::send(req(Method::GET, "x/records").pairs(&[("maxBytes", bad)]))
            .await
            .expect_error(400, "invalid_parameter");
    }
    // Keys.
    let no_key = Api::send(api.keyless(Method::GET, &api.url("x/records"))).await;
    no_key.expect_error(400, "missing_key");
    Api::send(
        api.keyless(Method::POST, &api.url("x/records"))
            .header("prisma-encryption-key", "!!!")
            .body("1"),
    )
    .await
    .expect_error(400, "invalid_key");
    api.with_key(OTHER_KEY)
        .append("x", "", "1")
        .await
        .expect_error(403, "stale_or_wrong_credentials");
    // Missing and deleted collections.
    api.append("missing", "", "1")
        .await
        .expect_error(404, "not_found");
    api.read("missing", "", None)
        .await
        .expect_error(404, "not_found");
    // No 5xx for garbage bodies anywhere.
    for path in ["x", "x/records", "x/records:batch", "x:seal"] {
        for body in [&b"\xff\xfe"[..], b"{", b"[[[[[[[[[[", b"null"] {
            let r = c
                .post(api.url(path))
                .bearer_auth(TOKEN_A)
                .header("prisma-encryption-key", DEV_KEY)
                .body(body.to_vec())
                .send()
                .await
                .unwrap();
            assert!(r.status().as_u16() < 500, "{path}: {}", r.status());
        }
    }
}

#[tokio::test]
async fn routes_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap().to_string();
    let port = free_port();
    let args = ["--project-token".to_string(), format!("alpha:{TOKEN_A}")];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(&store, port, &args).await;
    let api = alpha(&server);
    assert_eq!(api.create("r", JSON_DOC).await.status, 201);
    assert_eq!(api.append("r", "k", "1").await.status, 200);
    let cursor = api.read("r", "k", None).await.cursor();
    assert_eq!(
        api.seal("r", r#"{"final": 2, "routingKey": "k"}"#)
            .await
            .status,
        200
    );
    server.kill_9();
    let server = Server::start(&store, free_port(), &args).await;
    let api = alpha(&server);
    // Cursors, seal state, records and the catalog come back from the store.
    let page = api.read("r", "k", Some(&cursor)).await;
    assert_eq!(page.json(), json!([2]));
    assert_eq!(page.header("prisma-sealed"), Some("true"));
    assert_eq!(api.metadata("r").await.json()["sealed"], true);
    let catalog = api.catalog(&[]).await.json();
    assert_eq!(catalog["streams"][0]["name"], "r");
}

#[tokio::test]
async fn names_kept_for_forks_answer_gone() {
    let (_dir, server) = start(&[]).await;
    let api = alpha(&server);
    let raw = |method: Method, name: &str| {
        common::client()
            .request(method, format!("{}/v1/stream/{name}", server.base))
            .bearer_auth(TOKEN_A)
            .header("stream-encryption-key", DEV_KEY)
    };
    assert_eq!(api.create("src", JSON_DOC).await.status, 201);
    assert_eq!(api.append("src", "", "1").await.status, 200);
    let fork = Api::send(
        raw(Method::PUT, "fork")
            .header("content-type", "application/json")
            .header("stream-forked-from", "/v1/stream/src"),
    )
    .await;
    assert_eq!(fork.status, 201, "{}", fork.text());
    // Deleting a source with a live fork keeps it for the fork: 410 / 409 gone.
    assert_eq!(api.delete("src").await.status, 204);
    api.metadata("src").await.expect_error(410, "gone");
    api.read("src", "", None).await.expect_error(410, "gone");
    api.delete("src").await.expect_error(410, "gone");
    api.create("src", JSON_DOC).await.expect_error(409, "gone");
    // The fork still reads through it; once the fork goes, the name is free.
    assert_eq!(api.read("fork", "", None).await.text(), "[1]");
    assert_eq!(api.delete("fork").await.status, 204);
    assert_eq!(api.create("src", JSON_DOC).await.status, 201);
}

#[tokio::test]
async fn live_readers_are_bounded() {
    let (_dir, server) = start(&["--max-live-connections", "1"]).await;
    let api = alpha(&server);
    assert_eq!(api.create("busy", JSON_DOC).await.status, 201);
    // An SSE response holds its slot from its headers until the client leaves.
    let held = api
        .request(Method::GET, "busy/records:sse")
        .pairs(&[("cursor", "now"), ("waitMs", "20000")])
        .send()
        .await
        .unwrap();
    assert_eq!(held.status(), 200);
    let refused = Api::send(
        api.request(Method::GET, "busy/records:long-poll")
            .pairs(&[("cursor", "now"), ("waitMs", "10")]),
    )
    .await;
    refused.expect_error(503, "subscription_capacity");
    assert_eq!(refused.json()["error"]["retryable"], true);
    assert!(refused.header("retry-after").is_some());
    // A reader whose stream ends frees its slot before its response ends:
    // once the body is complete, the next live read is served at once.
    assert_eq!(api.seal("busy", "{}").await.status, 200);
    let ended = held.bytes().await.unwrap();
    assert!(String::from_utf8_lossy(&ended).contains("\"sealed\":true"));
    let after_end = Api::send(
        api.request(Method::GET, "busy/records:long-poll")
            .pairs(&[("cursor", "now"), ("waitMs", "10")]),
    )
    .await;
    assert_eq!(
        after_end.status, 204,
        "the slot is free once the stream ended"
    );
    // A reader that leaves frees its slot too (the server notices the closed
    // connection): hold it again, leave, and probe until it is served. Each
    // probe is answered at once (503 while held, 204 once free), so the loop
    // waits on the release itself, bounded by its attempts.
    assert_eq!(api.create("busy2", JSON_DOC).await.status, 201);
    let held = api
        .request(Method::GET, "busy2/records:sse")
        .pairs(&[("cursor", "now"), ("waitMs", "20000")])
        .send()
        .await
        .unwrap();
    assert_eq!(held.status(), 200);
    drop(held);
    let mut answered = 0;
    for _ in 0..20_000 {
        answered = Api::send(
            api.request(Method::GET, "busy/records:long-poll")
                .pairs(&[("cursor", "now"), ("waitMs", "10")]),
        )
        .await
        .status;
        if answered == 204 {
            break;
        }
        assert_eq!(answered, 503, "a probe is refused while the slot is held");
    }
    assert_eq!(answered, 204, "the slot is free again");
}

#[tokio::test]
async fn oversized_seal_bodies_are_413() {
    let (_dir, server) = start(&["--max-body-bytes", "1000"]).await;
    let api = alpha(&server);
    assert_eq!(api.create("s", JSON_DOC).await.status, 201);
    let big = format!(r#"{{"final":"{}"}}"#, "x".repeat(2000));
    api.seal("s", &big)
        .await
        .expect_error(413, "body_too_large");
    assert_eq!(api.metadata("s").await.json()["sealed"], false);
}

#[tokio::test]
async fn seal_bodies_and_cors() {
    let (_dir, server) = start(&["--max-record-bytes", "100"]).await;
    let api = alpha(&server);
    assert_eq!(api.create("n", JSON_DOC).await.status, 201);
    // A null final is a record.
    let sealed = api.seal("n", r#"{"final": null}"#).await;
    assert_eq!(sealed.status, 200, "{}", sealed.text());
    assert_eq!(api.read("n", "", None).await.text(), "[null]");
    assert_eq!(api.create("m", JSON_DOC).await.status, 201);
    for body in ["[]", "[5]", "5", r#"{"final": 1, "routingKey": 7}"#] {
        let refused = api.seal("m", body).await;
        assert_eq!(refused.status, 400, "{body}: {}", refused.text());
    }
    assert_eq!(api.metadata("m").await.json()["sealed"], false);
    // Records over --max-record-bytes are refused, nothing written.
    let big = format!(r#""{}""#, "x".repeat(200));
    api.append("m", "", &big)
        .await
        .expect_error(413, "body_too_large");
    api.batch("m", "", &format!("[1, {big}]"))
        .await
        .expect_error(413, "body_too_large");
    // Size before syntax: a malformed body too large for a record is 413.
    api.append("m", "", &format!("{{{}", "x".repeat(200)))
        .await
        .expect_error(413, "body_too_large");
    api.append("m", "", "{x")
        .await
        .expect_error(400, "invalid_body");
    assert_eq!(api.read("m", "", None).await.text(), "[]");
    // Browsers may send the product headers and read the cursor headers.
    let pre = common::client()
        .request(Method::OPTIONS, api.url("m/records"))
        .send()
        .await
        .unwrap();
    let allowed = pre.headers()["access-control-allow-headers"]
        .to_str()
        .unwrap()
        .to_string();
    for name in [
        "Prisma-Encryption-Key",
        "Prisma-Routing-Key",
        "Prisma-Consumer-Version",
    ] {
        assert!(allowed.contains(name), "{name} not allowed: {allowed}");
    }
    assert_eq!(pre.headers()["cache-control"], "no-store");
    let page = api.read("m", "", None).await;
    let exposed = page.header("access-control-expose-headers").unwrap();
    for name in [
        "Prisma-Next-Cursor",
        "Prisma-Sealed",
        "Prisma-Up-To-Date",
        "Prisma-Consumer-Version",
        "Prisma-Next-Scan-Cursor",
        "Prisma-Scan-Complete",
    ] {
        assert!(exposed.contains(name), "{name} not exposed: {exposed}");
    }
    // A UTF-8 producer id.
    let utf8 = Api::send(producer(
        api.request(Method::POST, "m/records").body("1"),
        "écrivain",
        0,
        0,
    ))
    .await;
    assert_eq!(utf8.status, 200, "{}", utf8.text());
}

/// The entries of one catalog bucket file of project `alpha`, edited by `f`.
fn edit_bucket(store: &std::path::Path, name: &str, f: impl FnOnce(&mut Vec<Value>)) {
    let bucket = strata_server::service::names::catalog_bucket_of(
        name,
        strata_server::service::catalog::BUCKETS,
    );
    let path = store.join(format!("registry/alpha/catalog/{bucket:02}.json"));
    let mut doc: Value = match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).unwrap(),
        Err(_) => json!({"format": 1, "entries": [], "write_token": "00".repeat(16)}),
    };
    let mut entries = doc["entries"].as_array().cloned().unwrap_or_default();
    f(&mut entries);
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    doc["entries"] = Value::Array(entries);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, serde_json::to_vec(&doc).unwrap()).unwrap();
}

#[tokio::test]
async fn the_catalog_heals_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap().to_string();
    let args = ["--project-token".to_string(), format!("alpha:{TOKEN_A}")];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Server::start(&store, free_port(), &args).await;
    let api = alpha(&server);
    for name in ["kept", "lost"] {
        assert_eq!(api.create(name, JSON_DOC).await.status, 201);
    }
    server.kill_9();
    // What a crash between a descriptor write and its catalog write leaves:
    // a live stream missing from the catalog, a deleted one still listed.
    edit_bucket(dir.path(), "lost", |entries| {
        entries.retain(|e| e["name"] != "lost")
    });
    edit_bucket(dir.path(), "ghost", |entries| {
        entries.push(json!({"name": "ghost", "content_type": "application/json", "created_ms": 1, "incarnation": 1}))
    });
    let server = Server::start(&store, free_port(), &args).await;
    let api = alpha(&server);
    let names = || async {
        let page = api.catalog(&[]).await.json();
        let mut names: Vec<String> = page["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect();
        names.sort();
        names
    };
    // The start-up scan runs in the background; a listing waits for it.
    assert_eq!(names().await, ["kept", "lost"]);
}
