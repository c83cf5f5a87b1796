//! Forks across fleet members: a fork whose source lives on a shard another
//! member serves is created and read through any member, its source's
//! records read from the source's owner (`POST /v1/fleet/source`). Three
//! `strata serve --fleet` processes, six shards, twelve forks of four
//! sources: most pairs cross members.

// Waits for a settling fleet are bounded in real time.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::{Duration, Instant};

use common::client;
use common::fleet::{create, create_with, Fleet, MEMBERS};

const SOURCES: usize = 4;
const FORKS_PER_SOURCE: usize = 3;
/// Longest one read may keep answering 503 (the fleet settling).
const SETTLE_MAX: Duration = Duration::from_secs(20);

async fn append(client: &reqwest::Client, base: &str, stream: &str, value: &str) {
    let deadline = Instant::now() + SETTLE_MAX;
    loop {
        let answer = client
            .post(format!("{base}/v1/stream/{stream}"))
            .header("content-type", "application/json")
            .body(serde_json::json!([value]).to_string())
            .send()
            .await
            .expect("append");
        if answer.status().is_success() {
            return;
        }
        assert_eq!(answer.status(), 503, "append {stream}");
        assert!(
            Instant::now() < deadline,
            "append {stream}: 503 for too long"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every record of `stream` through `base`, 503s retried for a bounded time.
async fn read(client: &reqwest::Client, base: &str, stream: &str) -> Vec<String> {
    let deadline = Instant::now() + SETTLE_MAX;
    loop {
        let answer = client
            .get(format!("{base}/v1/stream/{stream}?offset=-1"))
            .send()
            .await
            .expect("read");
        let status = answer.status();
        let text = answer.text().await.unwrap_or_default();
        if status == 200 {
            return serde_json::from_str(&text).expect("a JSON array");
        }
        assert_eq!(status, 503, "read {stream} via {base}: {text}");
        assert!(
            Instant::now() < deadline,
            "read {stream} via {base}: {text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_read_their_sources_from_other_members() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap().to_string();
    let fleet = Fleet::start(&store, &[]).await;
    let bases: Vec<String> = (0..MEMBERS).map(|i| fleet.base(i)).collect();
    let client = client();
    for s in 0..SOURCES {
        let source = format!("source-{s}");
        create(&client, &bases, &source).await;
        for r in 0..3 {
            append(
                &client,
                &bases[r % MEMBERS],
                &source,
                &format!("{source}/{r}"),
            )
            .await;
        }
    }
    for s in 0..SOURCES {
        let source = format!("source-{s}");
        for f in 0..FORKS_PER_SOURCE {
            let fork = format!("fork-{s}-{f}");
            let via = std::slice::from_ref(&bases[(s + f) % MEMBERS]);
            let from = format!("/v1/stream/{source}");
            create_with(&client, via, &fork, &[("stream-forked-from", &from)]).await;
            append(&client, &bases[f % MEMBERS], &fork, &format!("{fork}/own")).await;
        }
    }
    for s in 0..SOURCES {
        let source = format!("source-{s}");
        for f in 0..FORKS_PER_SOURCE {
            let fork = format!("fork-{s}-{f}");
            let mut expected: Vec<String> = (0..3).map(|r| format!("{source}/{r}")).collect();
            expected.push(format!("{fork}/own"));
            for base in &bases {
                assert_eq!(
                    read(&client, base, &fork).await,
                    expected,
                    "{fork} via {base}"
                );
            }
        }
    }
    drop(fleet);
}
