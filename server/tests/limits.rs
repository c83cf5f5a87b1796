//! Per-project limits (`--limits-file`): append rates, live readers and
//! collections are refused with 429, the contract's codes and a
//! `Retry-After`, for the project over its limit only; `SIGHUP` re-reads
//! the file, and a broken file changes nothing.
#![allow(clippy::disallowed_methods)]

mod common;

use common::product::{Api, JSON_DOC};
use common::{client, eventually, free_port, hangup, Server, DEV_KEY};
use reqwest::{Method, StatusCode};
use serde_json::json;

const FLOOD: &str = "flood-token-0000001";
const CALM: &str = "calm-token-00000002";

async fn start(dir: &std::path::Path, limits: &serde_json::Value) -> (Server, std::path::PathBuf) {
    let file = dir.join("limits.json");
    std::fs::write(&file, limits.to_string()).unwrap();
    let store = dir.join("store");
    let server = Server::start(
        store.to_str().unwrap(),
        free_port(),
        &[
            "--project-token",
            &format!("flood:{FLOOD}"),
            "--project-token",
            &format!("calm:{CALM}"),
            "--limits-file",
            file.to_str().unwrap(),
        ],
    )
    .await;
    (server, file)
}

async fn append(api: &Api, name: &str, n: u64) -> common::product::Answer {
    Api::send(
        api.request(Method::POST, &format!("{name}/records"))
            .header("content-type", "application/json")
            .body(json!({ "n": n }).to_string()),
    )
    .await
}

/// A refusal of the append rate is answered only after part of its
/// window (up to 1 s) has passed, and its `retryAfterMs` counts from the
/// answer: a client that resends at once costs one request per window.
#[tokio::test]
async fn a_rate_refusal_is_held_for_its_window() {
    let dir = tempfile::tempdir().unwrap();
    let limits = json!({"projects": {"flood": {"appendRequestsPerSecond": 1}}});
    let (server, _) = start(dir.path(), &limits).await;
    let flood = Api::new(&server, Some(FLOOD), DEV_KEY);
    let created = Api::send(flood.request(Method::PUT, "c").body(JSON_DOC)).await;
    assert_eq!(created.status, 201, "{}", created.text());
    assert_eq!(append(&flood, "c", 0).await.status, 200);
    let asked = std::time::Instant::now();
    let refused = append(&flood, "c", 1).await;
    let waited = asked.elapsed();
    refused.expect_error(429, "rate_limited");
    // The bucket was empty: the next token was about 1 s away.
    assert!(
        waited >= std::time::Duration::from_millis(500),
        "{waited:?}"
    );
    let left = refused.json()["error"]["details"]["retryAfterMs"]
        .as_u64()
        .unwrap();
    assert!(left <= 500, "retryAfterMs {left} after {waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_over_its_append_rate_is_refused_and_another_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let limits = json!({"projects": {"flood": {"appendRequestsPerSecond": 20}}});
    let (server, _) = start(dir.path(), &limits).await;
    let flood = Api::new(&server, Some(FLOOD), DEV_KEY);
    let calm = Api::new(&server, Some(CALM), DEV_KEY);
    for api in [&flood, &calm] {
        let created = Api::send(api.request(Method::PUT, "c").body(JSON_DOC)).await;
        assert_eq!(created.status, 201, "{}", created.text());
    }
    let started = std::time::Instant::now();
    let (mut admitted, mut refused) = (0u64, None);
    for n in 0..60 {
        let answer = append(&flood, "c", n).await;
        match answer.status {
            200 => admitted += 1,
            429 => refused = Some(answer),
            other => panic!("{other}: {}", answer.text()),
        }
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    let refused = refused.expect("60 appends at once pass a limit of 20 per second");
    refused.expect_error(429, "rate_limited");
    let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
    assert!(retry_after >= 1);
    let details = &refused.json()["error"]["details"];
    assert_eq!(details["limit"], "appendRequestsPerSecond");
    assert_eq!(details["value"], 20);
    assert!(details["retryAfterMs"].as_u64().unwrap() <= 50);
    // One second's worth at once, then the refill while the test ran.
    let most = 20 + (20.0 * elapsed_s).ceil() as u64;
    assert!(
        (20..=most).contains(&admitted),
        "{admitted} admitted in {elapsed_s:.2} s"
    );
    // The other project is not limited at all.
    for n in 0..60 {
        assert_eq!(append(&calm, "c", n).await.status, 200);
    }
    // The raw route answers the same code.
    let raw = client()
        .post(format!("{}/v1/stream/c", server.base))
        .bearer_auth(FLOOD)
        .header("content-type", "application/json")
        .header("stream-encryption-key", DEV_KEY)
        .body("[1]");
    let mut raw_refused = None;
    for _ in 0..60 {
        let answer = raw.try_clone().unwrap().send().await.unwrap();
        if answer.status() == StatusCode::TOO_MANY_REQUESTS {
            raw_refused = Some(answer);
            break;
        }
    }
    let raw_refused = raw_refused.expect("the raw route shares the project's bucket");
    assert!(raw_refused.headers().contains_key("retry-after"));
    let body: serde_json::Value =
        serde_json::from_slice(&raw_refused.bytes().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_readers_and_collections_are_limited_per_project_and_reloaded() {
    let dir = tempfile::tempdir().unwrap();
    let limits = json!({"default": {"liveReaders": 1, "collections": 2}});
    let (server, file) = start(dir.path(), &limits).await;
    let flood = Api::new(&server, Some(FLOOD), DEV_KEY);
    let calm = Api::new(&server, Some(CALM), DEV_KEY);
    for name in ["a", "b"] {
        let created = Api::send(flood.request(Method::PUT, name).body(JSON_DOC)).await;
        assert_eq!(created.status, 201, "{}", created.text());
    }
    let third = Api::send(flood.request(Method::PUT, "c").body(JSON_DOC)).await;
    third.expect_error(429, "stream_limit");
    assert_eq!(third.json()["error"]["details"]["value"], 2);
    // The same create again is not a new collection.
    let again = Api::send(flood.request(Method::PUT, "a").body(JSON_DOC)).await;
    assert_eq!(again.status, 200, "{}", again.text());
    // Another project counts its own.
    let theirs = Api::send(calm.request(Method::PUT, "c").body(JSON_DOC)).await;
    assert_eq!(theirs.status, 201, "{}", theirs.text());
    // A deleted collection frees its place.
    let deleted = Api::send(flood.keyless(Method::DELETE, &flood.url("b"))).await;
    assert_eq!(deleted.status, 204, "{}", deleted.text());
    let created = Api::send(flood.request(Method::PUT, "c").body(JSON_DOC)).await;
    assert_eq!(created.status, 201, "{}", created.text());

    // One live reader: an SSE stream held open takes the project's place.
    let sse = |token: &str| {
        client()
            .get(format!("{}/v1/stream/a?offset=-1&live=sse", server.base))
            .bearer_auth(token)
            .header("stream-encryption-key", DEV_KEY)
            .send()
    };
    let held = sse(FLOOD).await.unwrap();
    assert_eq!(held.status(), 200);
    let refused = sse(FLOOD).await.unwrap();
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    let body: serde_json::Value = serde_json::from_slice(&refused.bytes().await.unwrap()).unwrap();
    assert_eq!(body["error"]["code"], "project_concurrency_limit");
    let product_refused =
        Api::send(flood.request(Method::GET, "a/records:long-poll?routingKey=&waitMs=1000")).await;
    product_refused.expect_error(429, "project_concurrency_limit");
    // Another project's reader is its own.
    let calm_reader = client()
        .get(format!("{}/v1/stream/c?offset=-1&live=sse", server.base))
        .bearer_auth(CALM)
        .header("stream-encryption-key", DEV_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(calm_reader.status(), 200);
    // The held reader ends: its place is free again.
    drop(held);
    eventually("the closed reader's place is free", || async {
        sse(FLOOD).await.unwrap().status() == 200
    })
    .await;

    // SIGHUP re-reads the file: more collections now.
    std::fs::write(&file, json!({"default": {"collections": 5}}).to_string()).unwrap();
    hangup(&server);
    eventually("the new limit is in force", || async {
        let answer = Api::send(flood.request(Method::PUT, "d").body(JSON_DOC)).await;
        answer.status == 201
    })
    .await;
    // A broken file leaves the limits in force.
    std::fs::write(&file, "{\"default\": {\"collection\": 1}}").unwrap();
    hangup(&server);
    eventually("the broken file is reported", || async {
        server.log_text().contains("limits not reloaded")
    })
    .await;
    let e = Api::send(flood.request(Method::PUT, "e").body(JSON_DOC)).await;
    assert_eq!(e.status, 201, "{}", e.text());
}

#[tokio::test]
async fn a_broken_limits_file_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.json");
    std::fs::write(&file, r#"{"default": {"appendRequestsPerSecond": 0}}"#).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port())])
        .arg("--store")
        .arg(dir.path().join("store"))
        .arg("--limits-file")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("rate of 0"), "{stderr}");
}
