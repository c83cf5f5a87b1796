//! Snapshot scans (`GET /v1/streams/{name}:scan`) against the real binary:
//! every record the first page's snapshot holds comes back exactly once, in
//! position order, with its routing key, across page boundaries, sealing and
//! garbage collection, later appends and a restart of the server; and the
//! cursor refuses everything that is not this scan's (400 `invalid_cursor`)
//! or has expired (410 `scan_expired`).

mod common;

use base64::Engine as _;
use common::product::{epoch_of, Answer, Api, QueryPairs, BYTES_DOC, OTHER_KEY};
use common::{free_port, Server, DEV_KEY};
use reqwest::Method;
use serde_json::{json, Value};
use strata_segments::StreamKey;
use strata_server::service::product::scan_cursor::{ScanCursor, ScanScope};

const TOKEN: &str = "token-of-project-alpha";
/// A JSON collection with a watch: its metadata shows the epoch, which lets
/// the test build a cursor of its own (an expired one).
const JSON_WATCHED: &str =
    r#"{"format":{"kind":"json"},"watches":[{"name":"by-k","fields":["/k"]}]}"#;
/// Seal often and collect at once, so a scan's pages straddle seals and GC.
const SEAL_OFTEN: [&str; 4] = ["--seal-objects", "3", "--gc-grace-ms", "0"];

async fn start(store: &std::path::Path) -> Server {
    let mut args = vec!["--project-token".to_string(), format!("alpha:{TOKEN}")];
    args.extend(SEAL_OFTEN.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    Server::start(store.to_str().unwrap(), free_port(), &args).await
}

async fn scan(api: &Api, name: &str, cursor: Option<&str>, max_bytes: usize) -> Answer {
    let mut query = vec![("maxBytes", max_bytes.to_string())];
    if let Some(c) = cursor {
        query.push(("cursor", c.to_string()));
    }
    Api::send(
        api.request(Method::GET, &format!("{name}:scan"))
            .pairs(&query),
    )
    .await
}

/// One page's items, and the cursor to go on with (`None`: complete).
fn page(answer: &Answer) -> (Vec<Value>, Option<String>) {
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.header("cache-control"), Some("no-store"));
    assert_eq!(answer.header("content-type"), Some("application/json"));
    let next = answer.header("prisma-next-scan-cursor").map(str::to_string);
    let complete = answer.header("prisma-scan-complete") == Some("true");
    assert!(
        next.is_some() != complete,
        "a page carries a next cursor or completion, never both or neither"
    );
    let items = answer.json().as_array().expect("an array").clone();
    (items, next)
}

fn segments(store: &std::path::Path) -> usize {
    std::fs::read_dir(store.join("shards/s0/seg"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Appends `count` records to `routing_key`, one request each (bigger than
/// they need be, so a 4 KiB page holds a few dozen).
async fn append_records(api: &Api, name: &str, routing_key: &str, from: u32, count: u32) {
    for n in from..from + count {
        let body = json!({"k": routing_key, "n": n, "pad": "x".repeat(80)}).to_string();
        let answer = api.append(name, routing_key, &body).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
}

#[tokio::test]
async fn a_scan_returns_its_snapshot_exactly_once_across_seals_appends_and_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let api = Api::new(&server, Some(TOKEN), DEV_KEY);
    assert_eq!(api.create("orders", JSON_WATCHED).await.status, 201);
    // The snapshot: 120 records over 6 keys, interleaved, and one batch.
    let keys = ["a", "b", "c", "d", "e", ""];
    let mut expected: Vec<(String, u32)> = Vec::new();
    for round in 0..4u32 {
        for key in keys {
            append_records(&api, "orders", key, round * 5, 5).await;
            expected.extend((round * 5..round * 5 + 5).map(|n| (key.to_string(), n)));
        }
    }
    let batch: Vec<Value> = (100..110u32)
        .map(|n| json!({"k": "z", "n": n, "pad": "y"}))
        .collect();
    let answer = api
        .batch("orders", "z", &Value::Array(batch).to_string())
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    expected.extend((100..110u32).map(|n| ("z".to_string(), n)));

    let first = scan(&api, "orders", None, 4096).await;
    let (mut items, mut next) = page(&first);
    assert!(
        !items.is_empty() && items.len() < expected.len(),
        "{} items",
        items.len()
    );
    // Appends after the first page are not part of the snapshot; sealing
    // and GC run meanwhile (the store's segments show it).
    let segments_before = segments(dir.path());
    append_records(&api, "orders", "a", 1_000, 30).await;
    for _ in 0..200 {
        if segments(dir.path()) > segments_before {
            break;
        }
        append_records(&api, "orders", "late", 2_000, 1).await;
    }
    assert!(
        segments(dir.path()) > segments_before,
        "a seal ran during the scan"
    );
    // A restart loses nothing: the cursor is the whole state of the scan.
    server.kill_9();
    let server = start(dir.path()).await;
    let api = Api::new(&server, Some(TOKEN), DEV_KEY);
    let mut pages = 1;
    while let Some(cursor) = next {
        let answer = scan(&api, "orders", Some(&cursor), 4096).await;
        let (more, after) = page(&answer);
        assert!(!more.is_empty(), "a page before completion is never empty");
        items.extend(more);
        next = after;
        pages += 1;
        assert!(pages < 100, "the scan ends");
    }
    assert!(pages >= 3, "the snapshot spans pages ({pages})");
    let got: Vec<(String, u32)> = items
        .iter()
        .map(|item| {
            let key = item["routingKey"].as_str().expect("routingKey").to_string();
            let value = &item["value"];
            assert_eq!(value["k"].as_str(), Some(key.as_str()), "{item}");
            (key, value["n"].as_u64().expect("n") as u32)
        })
        .collect();
    assert_eq!(
        got, expected,
        "every captured record once, in position order"
    );
    // A new scan's snapshot holds the later appends too.
    let (mut all, mut next) = page(&scan(&api, "orders", None, 8 << 20).await);
    while let Some(cursor) = next {
        let (more, after) = page(&scan(&api, "orders", Some(&cursor), 8 << 20).await);
        all.extend(more);
        next = after;
    }
    assert!(all.len() >= expected.len() + 30, "{}", all.len());
    assert_eq!(all[..expected.len()], items[..]);
}

#[tokio::test]
async fn scan_pages_render_bytes_as_base64_and_refuse_cursors_not_their_own() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let api = Api::new(&server, Some(TOKEN), DEV_KEY);
    // An empty collection: one empty, complete page.
    let meta = api.create("orders", JSON_WATCHED).await;
    assert_eq!(meta.status, 201);
    let (items, next) = page(&scan(&api, "orders", None, 4096).await);
    assert!(items.is_empty() && next.is_none());
    // Bytes collections: `valueB64`, standard base64.
    assert_eq!(api.create("blobs", BYTES_DOC).await.status, 201);
    let raw = b"\x00\xffbinary\n".to_vec();
    let answer = Api::send(
        api.request(Method::POST, "blobs/records")
            .header("prisma-routing-key", "dev-1")
            .header("content-type", "application/octet-stream")
            .body(raw.clone()),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let (items, next) = page(&scan(&api, "blobs", None, 4096).await);
    assert_eq!(
        items,
        vec![json!({"routingKey": "dev-1",
                    "valueB64": base64::engine::general_purpose::STANDARD.encode(&raw)})]
    );
    assert!(next.is_none());

    append_records(&api, "orders", "a", 0, 60).await;
    let (_, next) = page(&scan(&api, "orders", None, 4096).await);
    let scan_cursor = next.expect("more than one page");
    // Another collection's scan cursor, a key cursor, a tampered one.
    scan(&api, "blobs", Some(&scan_cursor), 4096)
        .await
        .expect_error(400, "invalid_cursor");
    let key_cursor = api.read("orders", "a", None).await.cursor();
    scan(&api, "orders", Some(&key_cursor), 4096)
        .await
        .expect_error(400, "invalid_cursor");
    api.read("orders", "a", Some(&scan_cursor))
        .await
        .expect_error(400, "invalid_cursor");
    let mut tampered = scan_cursor.clone().into_bytes();
    tampered[10] = if tampered[10] == b'A' { b'B' } else { b'A' };
    let tampered = String::from_utf8(tampered).unwrap();
    scan(&api, "orders", Some(&tampered), 4096)
        .await
        .expect_error(400, "invalid_cursor");
    // The key is checked before the cursor; a wrong key learns nothing.
    scan(&api.with_key(OTHER_KEY), "orders", Some(&scan_cursor), 4096)
        .await
        .expect_error(403, "wrong_key");
    Api::send(api.keyless(Method::GET, &api.url("orders:scan")))
        .await
        .expect_error(400, "missing_key");
    scan(&api, "missing", None, 4096)
        .await
        .expect_error(404, "not_found");
    Api::send(api.request(Method::POST, "orders:scan"))
        .await
        .expect_error(405, "method_not_allowed");
    Api::send(
        api.request(Method::GET, "orders:scan")
            .pairs(&[("limit", "3")]),
    )
    .await
    .expect_error(400, "unknown_parameter");
    // A cursor whose time is up: 410, never a silent restart.
    let key = StreamKey::parse(DEV_KEY).unwrap();
    let scope = ScanScope {
        project: "alpha",
        epoch: epoch_of(&meta.json()),
        key: &key,
    };
    let expired = ScanCursor {
        end: 60,
        position: 1,
        expires_ms: 1,
    };
    scan(&api, "orders", Some(&scope.encode(&expired)), 4096)
        .await
        .expect_error(410, "scan_expired");
    // The same scope with time left is accepted: the test built it right.
    let live = ScanCursor {
        expires_ms: u64::MAX,
        ..expired
    };
    let (items, _) = page(&scan(&api, "orders", Some(&scope.encode(&live)), 4096).await);
    assert_eq!(items[0]["value"]["n"], 1);
    // After the collection is deleted and created again, old cursors are
    // another incarnation's.
    assert_eq!(api.delete("orders").await.status, 204);
    assert_eq!(api.create("orders", JSON_WATCHED).await.status, 201);
    scan(&api, "orders", Some(&scan_cursor), 4096)
        .await
        .expect_error(400, "invalid_cursor");
}

/// A fork's scan walks its source first, up to the fork point, as a read
/// does (a source contributes its default key only), then the fork's own
/// records of every key; the source's later records are not the fork's.
#[tokio::test]
async fn a_forks_scan_reads_its_source_up_to_the_fork_point_then_its_own_records() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let api = Api::new(&server, Some(TOKEN), DEV_KEY);
    assert_eq!(api.create("src", JSON_WATCHED).await.status, 201);
    for n in 0..3 {
        let answer = api
            .append("src", "", &json!({"k": "", "n": n}).to_string())
            .await;
        assert_eq!(answer.status, 200, "{}", answer.text());
    }
    let fork = Api::send(
        common::client()
            .put(format!("{}/v1/stream/fork", server.base))
            .bearer_auth(TOKEN)
            .header("stream-encryption-key", DEV_KEY)
            .header("content-type", "application/json")
            .header("stream-forked-from", "/v1/stream/src"),
    )
    .await;
    assert_eq!(fork.status, 201, "{}", fork.text());
    // After the fork point: the source's record is not the fork's.
    let late = api
        .append("src", "", &json!({"k": "", "n": 99}).to_string())
        .await;
    assert_eq!(late.status, 200);
    append_records(&api, "fork", "a", 10, 2).await;
    let (items, next) = page(&scan(&api, "fork", None, 4096).await);
    assert!(next.is_none(), "one page");
    let got: Vec<(String, u64)> = items
        .iter()
        .map(|i| {
            (
                i["routingKey"].as_str().unwrap().to_string(),
                i["value"]["n"].as_u64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, u64)> = [("", 0), ("", 1), ("", 2), ("a", 10), ("a", 11)]
        .iter()
        .map(|(k, n)| (k.to_string(), *n))
        .collect();
    assert_eq!(got, want);
}
