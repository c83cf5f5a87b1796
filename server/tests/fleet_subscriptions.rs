//! `__ds` subscriptions in a fleet of three `strata serve --fleet` processes:
//! a pull-wake subscription whose pattern links streams on every member's
//! shards sees appends made through any member (the relay) and their tails
//! (read from their owners); when the member serving the subscriptions (the
//! owner of shard 0) is killed with SIGKILL, the next one carries the
//! claimed wake on — its holder, generation and token — and appends made
//! after the move wake the subscription again.

// Waiting for the new coordinator is bounded in real time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::client;
use common::fleet::{create, Fleet, MEMBERS};
use serde_json::{json, Value};

const STREAMS: usize = 6;
/// Longest the fleet may take to serve the subscriptions again after the
/// coordinator's death (a lease, a beat, a reload; slack for 2 cores).
const MOVE_MAX: Duration = Duration::from_secs(30);

fn subs_url(base: &str, tail: &str) -> String {
    format!("{base}/v1/stream/__ds/subscriptions/s1{tail}")
}

/// Sends `body` to `url` until it answers something other than 503 or a
/// connection failure (bounded by [`MOVE_MAX`]); answers status and JSON.
async fn send_settled(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: Option<&str>,
    body: &Value,
) -> (u16, Value) {
    let deadline = Instant::now() + MOVE_MAX;
    loop {
        let request = common::json_request(client, method.clone(), url, token, body);
        match request.send().await {
            Ok(r) if r.status() != 503 => {
                let status = r.status().as_u16();
                let text = r.text().await.unwrap_or_default();
                return (status, serde_json::from_str(&text).unwrap_or(Value::Null));
            }
            _ => {}
        }
        assert!(Instant::now() < deadline, "{url}: no settled answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn post_settled(
    client: &reqwest::Client,
    url: &str,
    token: Option<&str>,
    body: &Value,
) -> (u16, Value) {
    send_settled(client, reqwest::Method::POST, url, token, body).await
}

async fn append(client: &reqwest::Client, base: &str, stream: &str, value: u64) {
    let answer = client
        .post(format!("{base}/v1/stream/{stream}"))
        .header("content-type", "application/json")
        .body(json!({ "n": value }).to_string())
        .send()
        .await
        .expect("append");
    assert!(
        answer.status().is_success(),
        "append {stream}: {}",
        answer.status()
    );
}

/// The pending streams of a claim answer, with their tail offsets.
fn pending(claim: &Value) -> BTreeMap<String, String> {
    claim["streams"]
        .as_array()
        .expect("streams")
        .iter()
        .filter(|s| s["has_pending"] == json!(true))
        .map(|s| {
            let path = s["path"].as_str().unwrap_or_default().to_string();
            (
                path,
                s["tail_offset"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Claims through `base` until every one of `expected` is pending.
async fn claim_all(client: &reqwest::Client, base: &str, worker: &str, expected: usize) -> Value {
    let deadline = Instant::now() + MOVE_MAX;
    loop {
        let (status, claim) = post_settled(
            client,
            &subs_url(base, "/claim"),
            None,
            &json!({ "worker": worker }),
        )
        .await;
        if status == 200 && pending(&claim).len() == expected {
            return claim;
        }
        assert!(
            status == 200 || status == 409,
            "claim through {base}: {status} {claim}"
        );
        assert!(Instant::now() < deadline, "claim: {status} {claim}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_follow_shard_zero_and_keep_their_wakes() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap().to_string();
    let mut fleet = Fleet::start(&store, &[]).await;
    let bases: Vec<String> = (0..MEMBERS).map(|i| fleet.base(i)).collect();
    let client = client();
    for i in 0..STREAMS {
        create(&client, &bases, &format!("jobs/{i}")).await;
    }
    create(&client, &bases, "wakes").await;
    let config = json!({"type": "pull-wake", "pattern": "jobs/*", "wake_stream": "wakes"});
    let (status, put) = send_settled(
        &client,
        reqwest::Method::PUT,
        &subs_url(&bases[1], ""),
        None,
        &config,
    )
    .await;
    assert_eq!(status, 201, "{put}");
    // Appends through every member, to streams on every member's shards.
    for i in 0..STREAMS {
        append(&client, &bases[i % MEMBERS], &format!("jobs/{i}"), 1).await;
    }
    let claim = claim_all(&client, &bases[2], "w1", STREAMS).await;
    let generation = claim["generation"].as_u64().unwrap();
    let token = claim["token"].as_str().unwrap().to_string();
    // Which member serves the subscriptions: a forwarded answer names it.
    let got = client.get(subs_url(&bases[0], "")).send().await.unwrap();
    let coordinator = match got.headers().get("streams-replay-to") {
        Some(url) => bases
            .iter()
            .position(|b| b == url.to_str().unwrap())
            .expect("a member's URL"),
        None => 0,
    };
    fleet.kill_9(coordinator);
    let survivor = &bases[(coordinator + 1) % MEMBERS];
    // The next coordinator carried the claimed wake on: another worker is
    // told who holds it, and the holder's token acknowledges it.
    let (status, refused) = post_settled(
        &client,
        &subs_url(survivor, "/claim"),
        None,
        &json!({"worker": "w2"}),
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(refused["error"]["code"], "ALREADY_CLAIMED", "{refused}");
    assert_eq!(refused["error"]["current_holder"], "w1", "{refused}");
    let acks: Vec<Value> = pending(&claim)
        .into_iter()
        .map(|(stream, offset)| json!({"stream": stream, "offset": offset}))
        .collect();
    let ack =
        json!({"wake_id": claim["wake_id"], "generation": generation, "acks": acks, "done": true});
    let (status, answer) =
        post_settled(&client, &subs_url(survivor, "/ack"), Some(&token), &ack).await;
    assert_eq!(status, 200, "the holder's ack after the move: {answer}");
    // Appends after the move wake it again (told to the new coordinator),
    // whichever live member they go through and whoever owns the shard now.
    let live: Vec<&String> = (0..MEMBERS)
        .filter(|&i| i != coordinator)
        .map(|i| &bases[i])
        .collect();
    for (n, i) in [0usize, 3].into_iter().enumerate() {
        append(&client, live[n % live.len()], &format!("jobs/{i}"), 2).await;
    }
    let again = claim_all(&client, live[1 % live.len()], "w3", 2).await;
    assert!(
        again["generation"].as_u64().unwrap() > generation,
        "{again}"
    );
    assert_eq!(
        pending(&again).keys().cloned().collect::<Vec<_>>(),
        ["jobs/0", "jobs/3"]
    );
}

/// A fleet's first member claims shard 0 in its first beat, before its own
/// lease is established: it serves the subscriptions all the same (it once
/// gave up loading them, and a lone member never served them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_member_serves_the_subscriptions() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap().to_string();
    let port = common::free_port();
    let url = format!("http://127.0.0.1:{port}");
    let member = common::Server::start(
        &store,
        port,
        &[
            "--fleet",
            "--advertise-url",
            &url,
            "--shards",
            "2",
            "--heartbeat-ms",
            "500",
            "--fleet-lease-ms",
            "2000",
        ],
    )
    .await;
    let client = client();
    create(&client, std::slice::from_ref(&url), "jobs/a").await;
    create(&client, std::slice::from_ref(&url), "wakes").await;
    let config = json!({"type": "pull-wake", "pattern": "jobs/*", "wake_stream": "wakes"});
    let (status, put) = send_settled(
        &client,
        reqwest::Method::PUT,
        &subs_url(&url, ""),
        None,
        &config,
    )
    .await;
    assert_eq!(status, 201, "{put}");
    append(&client, &url, "jobs/a", 1).await;
    let claim = claim_all(&client, &url, "w1", 1).await;
    assert_eq!(claim["generation"], 1, "{claim}");
    drop(member);
}
