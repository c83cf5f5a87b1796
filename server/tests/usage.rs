//! Usage (docs/API.md §13): a collection's and a project's records, bytes
//! and reads, kept in the shards so that they survive a restart and a kill
//! -9 (reads as of the last usage flush); another project's usage is not
//! found; and a project's stored-bytes limit refuses its appends.

mod common;

use common::product::{Answer, Api, JSON_DOC};
use common::{client, eventually, free_port, Server, DEV_KEY};
use reqwest::Method;
use serde_json::{json, Value};

const ALPHA: &str = "alpha-token-0000001";
const BETA: &str = "beta-token-00000002";

fn args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--project-token",
        "alpha:alpha-token-0000001",
        "--project-token",
        "beta:beta-token-00000002",
        "--usage-flush-ms",
        "100",
    ];
    args.extend_from_slice(extra);
    args
}

async fn usage(api: &Api, path: &str) -> Answer {
    Api::send(api.keyless(Method::GET, &format!("{}{path}", api.base))).await
}

async fn append(api: &Api, name: &str, value: Value) {
    let answer = Api::send(
        api.request(Method::POST, &format!("{name}/records"))
            .header("content-type", "application/json")
            .body(value.to_string()),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
}

async fn read(api: &Api, name: &str) {
    let answer = Api::send(api.request(Method::GET, &format!("{name}/records"))).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
}

/// WAL objects the server wrote so far (from `/metrics`).
async fn wal_puts(server: &Server) -> f64 {
    let text = client()
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .filter(|l| l.starts_with("strata_wal_puts_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_counted_and_survives_restarts_and_kills() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap().to_string();
    let port = free_port();
    let server = Server::start(&store, port, &args(&[])).await;
    let alpha = Api::new(&server, Some(ALPHA), DEV_KEY);
    let beta = Api::new(&server, Some(BETA), DEV_KEY);
    for name in ["one", "two"] {
        let created = Api::send(alpha.request(Method::PUT, name).body(JSON_DOC)).await;
        assert_eq!(created.status, 201, "{}", created.text());
    }
    let created = Api::send(beta.request(Method::PUT, "one").body(JSON_DOC)).await;
    assert_eq!(created.status, 201);
    for n in 0..3 {
        append(&alpha, "one", json!({ "n": n })).await;
    }
    append(&alpha, "two", json!("x")).await;
    append(&beta, "one", json!("y")).await;
    for _ in 0..2 {
        read(&alpha, "one").await;
    }

    let one = usage(&alpha, "/v1/streams/one/usage").await;
    assert_eq!(one.status, 200, "{}", one.text());
    assert_eq!(one.header("cache-control"), Some("no-store"));
    let one = one.json();
    assert_eq!(one["name"], "one");
    assert_eq!(one["records"], 3);
    assert_eq!(one["appendedBytes"], 3 * r#"{"n":0}"#.len());
    assert!(one["storedBytes"].as_u64().unwrap() > 0);
    assert_eq!(one["reads"], 2);
    assert!(one["readBytes"].as_u64().unwrap() >= 2 * 3 * 7);
    assert!(one["lastAccessAt"].as_u64().unwrap() >= one["createdAt"].as_u64().unwrap());

    let project = usage(&alpha, "/v1/projects/alpha/usage").await;
    assert_eq!(project.status, 200, "{}", project.text());
    let project = project.json();
    assert_eq!(project["project"], "alpha");
    assert_eq!(project["collections"], 2);
    assert_eq!(project["records"], 4);
    assert_eq!(project["reads"], 2);
    assert_eq!(project["complete"], true);
    assert_eq!(project["limits"]["storedBytes"], Value::Null);
    // Another project's usage is not found, like a missing project.
    usage(&alpha, "/v1/projects/beta/usage")
        .await
        .expect_error(404, "not_found");
    let theirs = usage(&beta, "/v1/projects/beta/usage").await.json();
    assert_eq!(
        (theirs["collections"].clone(), theirs["records"].clone()),
        (json!(1), json!(1))
    );
    // A collection named like the route is refused.
    Api::send(alpha.request(Method::PUT, "x/usage").body(JSON_DOC))
        .await
        .expect_error(405, "method_not_allowed");

    // A clean restart keeps everything, reads included.
    let pid = libc::pid_t::try_from(server.child.id()).unwrap();
    // SAFETY: signalling a child process this test owns.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let mut server = server;
    assert!(server.child.wait().unwrap().success());
    drop(server);
    let server = Server::start(&store, port, &args(&[])).await;
    let alpha = Api::new(&server, Some(ALPHA), DEV_KEY);
    let after = usage(&alpha, "/v1/projects/alpha/usage").await.json();
    assert_eq!(
        (
            after["collections"].clone(),
            after["records"].clone(),
            after["reads"].clone()
        ),
        (json!(2), json!(4), json!(2))
    );
    // A read flushed before a kill -9 is kept too.
    let before = wal_puts(&server).await;
    read(&alpha, "two").await;
    eventually("the read is written to the shard", || async {
        wal_puts(&server).await > before
    })
    .await;
    server.kill_9();
    let server = Server::start(&store, port, &args(&[])).await;
    let alpha = Api::new(&server, Some(ALPHA), DEV_KEY);
    let two = usage(&alpha, "/v1/streams/two/usage").await.json();
    assert_eq!(
        (two["records"].clone(), two["reads"].clone()),
        (json!(1), json!(1))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_bytes_limit_refuses_appends_once_reached() {
    let dir = tempfile::tempdir().unwrap();
    let limits = dir.path().join("limits.json");
    std::fs::write(
        &limits,
        json!({"projects": {"alpha": {"storedBytes": 2000}}}).to_string(),
    )
    .unwrap();
    let store = dir.path().join("store");
    let server = Server::start(
        store.to_str().unwrap(),
        free_port(),
        &args(&["--limits-file", limits.to_str().unwrap()]),
    )
    .await;
    let alpha = Api::new(&server, Some(ALPHA), DEV_KEY);
    let beta = Api::new(&server, Some(BETA), DEV_KEY);
    for api in [&alpha, &beta] {
        let created = Api::send(api.request(Method::PUT, "c").body(JSON_DOC)).await;
        assert_eq!(created.status, 201);
    }
    let record = json!("x".repeat(200));
    let mut refused = None;
    for _ in 0..40 {
        let answer = Api::send(
            alpha
                .request(Method::POST, "c/records")
                .header("content-type", "application/json")
                .body(record.to_string()),
        )
        .await;
        match answer.status {
            200 => {}
            429 => {
                refused = Some(answer);
                break;
            }
            other => panic!("{other}: {}", answer.text()),
        }
    }
    let refused = refused.expect("40 records of 200 bytes pass 2,000 stored bytes");
    refused.expect_error(429, "stored_bytes_limit");
    assert_eq!(refused.json()["error"]["details"]["limit"], "storedBytes");
    let stored = usage(&alpha, "/v1/projects/alpha/usage").await.json();
    assert!(stored["storedBytes"].as_u64().unwrap() >= 2000, "{stored}");
    assert_eq!(stored["limits"]["storedBytes"], 2000);
    // The other project is not limited.
    for _ in 0..20 {
        append(&beta, "c", record.clone()).await;
    }
}
