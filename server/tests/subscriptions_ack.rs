//! A subscription's acknowledgement is checked against each stream's tail.
//! A tail that cannot be read now (the stream's shard is moving between
//! owners) is unknown, not 0: the acknowledgement answers a retryable 503 and
//! applies nothing, instead of refusing a valid offset as out of range; once
//! the shard is served again the same acknowledgement lands.

// The wait for the wake is bounded in real time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use common::DEV_KEY;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use serde_json::{json, Value};
use strata_server::cli::serve::{ServeArgs, Server};
use strata_server::service::routing::{ShardIndex, Slot};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    serve: ServeArgs,
}

const SUBS: &str = "/v1/stream/__ds/subscriptions/s1";

async fn send(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: &Value,
) -> (u16, Value) {
    let answer = common::json_request(client, method, url, token, body)
        .send()
        .await
        .expect("the server answers");
    let status = answer.status().as_u16();
    let text = answer.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_whose_tail_cannot_be_read_now_is_retryable() {
    let client = common::client();
    let shared: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let cli = Cli::parse_from([
        "strata",
        "--listen",
        "127.0.0.1:0",
        "--shards",
        "4",
        "--cache-bytes",
        "0",
        "--dev-default-key",
        DEV_KEY,
    ]);
    let server = Server::open(&cli.serve, shared, listener)
        .await
        .expect("the server opens");
    let state = server.state().clone();
    let common::Running { stop, task } = common::run_in_process(server);
    let router = state.streams.router();
    // A linked stream off shard 0 (which serves the subscriptions).
    let (stream, index) = (0..64)
        .map(|i| format!("jobs/{i}"))
        .map(|name| {
            let index = router.index_of(&strata_engine::stream_id("default", &name));
            (name, index)
        })
        .find(|(_, index)| *index != ShardIndex(0))
        .expect("a stream off shard 0");
    for name in [stream.as_str(), "wakes"] {
        let (status, body) = send(
            &client,
            reqwest::Method::PUT,
            &format!("{base}/v1/stream/{name}"),
            None,
            &Value::Null,
        )
        .await;
        assert_eq!(status, 201, "create {name}: {body}");
    }
    let config = json!({"type": "pull-wake", "pattern": "jobs/*", "wake_stream": "wakes"});
    let (status, body) = send(
        &client,
        reqwest::Method::PUT,
        &format!("{base}{SUBS}"),
        None,
        &config,
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = send(
        &client,
        reqwest::Method::POST,
        &format!("{base}/v1/stream/{stream}"),
        None,
        &json!({"n": 1}),
    )
    .await;
    assert!((200..300).contains(&status), "append: {status} {body}");
    // Claim once the append is pending.
    let deadline = Instant::now() + Duration::from_secs(30);
    let claim = loop {
        let (status, claim) = send(
            &client,
            reqwest::Method::POST,
            &format!("{base}{SUBS}/claim"),
            None,
            &json!({"worker": "w1"}),
        )
        .await;
        let pending = claim["streams"]
            .as_array()
            .is_some_and(|s| s.iter().any(|s| s["has_pending"] == json!(true)));
        if status == 200 && pending {
            break claim;
        }
        assert!(Instant::now() < deadline, "claim: {status} {claim}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let offset = claim["streams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["path"] == json!(stream))
        .expect("the stream is in the claim")["tail_offset"]
        .clone();
    let ack = json!({
        "wake_id": claim["wake_id"],
        "generation": claim["generation"],
        "acks": [{"stream": stream, "offset": offset}],
        "done": true,
    });
    let token = claim["token"].as_str().unwrap().to_string();
    let ack_url = format!("{base}{SUBS}/ack");
    // The stream's shard moves away: its tail cannot be read now.
    let held = router.place(index, Slot::Unowned);
    let (status, refused) =
        send(&client, reqwest::Method::POST, &ack_url, Some(&token), &ack).await;
    assert_eq!(status, 503, "an ack whose tail is unreadable: {refused}");
    // Served again: the same acknowledgement lands (nothing was applied).
    router.place(index, held);
    let (status, answer) = send(&client, reqwest::Method::POST, &ack_url, Some(&token), &ack).await;
    assert_eq!(status, 200, "the ack once the shard is served: {answer}");
    let _ = stop.send(());
    task.await.unwrap();
}
