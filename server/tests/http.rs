//! The HTTP surface's answers to bad input, limits and authentication, over
//! the real binary: the documented 4xx with a JSON error body, never a 5xx.

mod common;

use common::{client, eventually, free_port, hangup, Server, DEV_KEY};
use reqwest::{Method, StatusCode};

const OTHER_KEY: &str = "b3RoZXIta2V5LW9mLXRoaXJ0eS10d28tYnl0ZXMhISE";

async fn error_code(response: reqwest::Response) -> (StatusCode, String) {
    let status = response.status();
    let body = response.bytes().await.unwrap();
    let v: serde_json::Value = serde_json::from_slice(&body)
        .unwrap_or_else(|_| panic!("{status}: error body is JSON: {body:?}"));
    let code = v["error"]["code"].as_str().expect("error.code").to_string();
    assert!(v["error"]["message"].is_string(), "error.message");
    (status, code)
}

#[tokio::test]
async fn keys_are_required_checked_and_never_confused() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path().to_str().unwrap(), free_port(), &[]).await;
    let c = client();
    let url = server.url("keyed");
    let put = |key: &'static str| {
        c.put(&url)
            .header("content-type", "text/plain")
            .header("stream-encryption-key", key)
    };
    assert_eq!(put(OTHER_KEY).send().await.unwrap().status(), 201);
    // The same config with another key: 403, not "exists".
    let (status, code) = error_code(put(DEV_KEY).send().await.unwrap()).await;
    assert_eq!((status.as_u16(), code.as_str()), (403, "wrong_key"));
    let append = c
        .post(&url)
        .header("content-type", "text/plain")
        .header("stream-encryption-key", DEV_KEY)
        .body("x")
        .send()
        .await
        .unwrap();
    let (status, code) = error_code(append).await;
    assert_eq!((status.as_u16(), code.as_str()), (403, "wrong_key"));
    let read = c
        .get(format!("{url}?offset=-1"))
        .header("stream-encryption-key", DEV_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 403);
    let bad = c
        .get(format!("{url}?offset=-1"))
        .header("stream-encryption-key", "not-a-key")
        .send()
        .await
        .unwrap();
    let (status, code) = error_code(bad).await;
    assert_eq!((status.as_u16(), code.as_str()), (400, "invalid_key"));
}

#[tokio::test]
async fn without_a_development_key_requests_must_carry_one() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    // No --dev-default-key: start the binary directly.
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--store"])
        .arg(dir.path())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let server = Server {
        child,
        base: format!("http://127.0.0.1:{port}"),
        port,
        log_from: 0,
    };
    let c = client();
    let base = server.base.clone();
    let mut ready = false;
    for _ in 0..600 {
        if c.get(format!("{base}/healthz")).send().await.is_ok() {
            ready = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(ready);
    let r = c
        .put(format!("{base}/v1/stream/nokey"))
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    let (status, code) = error_code(r).await;
    assert_eq!((status.as_u16(), code.as_str()), (400, "missing_key"));
}

#[tokio::test]
async fn malformed_requests_get_4xx_with_json_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path().to_str().unwrap(),
        free_port(),
        &["--max-body-bytes", "1024", "--max-record-bytes", "100"],
    )
    .await;
    let c = client();
    let ok = c
        .put(server.url("s"))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 201);
    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            c.get(format!("{}/v1/stream/a//b", server.base)),
            400,
            "bad_request",
        ),
        (
            c.get(format!("{}/v1/stream/%FF", server.base)),
            400,
            "bad_request",
        ),
        (
            c.get(format!("{}/v1/stream/__x", server.base)),
            400,
            "bad_request",
        ),
        (c.get(format!("{}/nowhere", server.base)), 404, "not_found"),
        (c.get(server.url("missing")), 404, "not_found"),
        (
            c.get(format!("{}?offset=zzz", server.url("s"))),
            400,
            "bad_request",
        ),
        (
            c.get(format!("{}?offset=", server.url("s"))),
            400,
            "bad_request",
        ),
        (
            c.get(format!("{}?live=sse", server.url("s"))),
            400,
            "bad_request",
        ),
        (
            c.get(format!("{}?offset=-1&live=forever", server.url("s"))),
            400,
            "bad_request",
        ),
        (
            c.get(format!(
                "{}?offset=0000000000000000_0000000000000099",
                server.url("s")
            )),
            400,
            "bad_request",
        ),
        (
            c.request(Method::PATCH, server.url("s")),
            405,
            "method_not_allowed",
        ),
        (
            c.put(server.url("t")).header("stream-ttl", "1e3"),
            400,
            "bad_request",
        ),
        (
            c.put(server.url("t")).header("stream-expires-at", "soon"),
            400,
            "bad_request",
        ),
        (
            c.put(server.url("t")).header("stream-fork-sub-offset", "1"),
            400,
            "bad_request",
        ),
        (
            c.put(server.url("t"))
                .header("stream-forked-from", "/elsewhere/x"),
            400,
            "bad_request",
        ),
        (
            c.post(server.url("s"))
                .header("content-type", "application/json")
                .body("{nope"),
            400,
            "bad_request",
        ),
        (
            c.post(server.url("s"))
                .header("content-type", "application/json")
                .body("[]"),
            400,
            "bad_request",
        ),
        (c.post(server.url("s")).body("x"), 400, "bad_request"),
        (
            c.post(server.url("s"))
                .header("content-type", "application/json")
                .header("producer-id", "p")
                .body("1"),
            400,
            "bad_request",
        ),
        (
            c.post(server.url("s"))
                .header("content-type", "application/json")
                .header("producer-id", "p")
                .header("producer-epoch", "-1")
                .header("producer-seq", "0")
                .body("1"),
            400,
            "bad_request",
        ),
        (
            c.post(server.url("s"))
                .header("content-type", "application/json")
                .body(format!("\"{}\"", "x".repeat(200))),
            413,
            "record_too_large",
        ),
        (
            c.post(server.url("s"))
                .header("content-type", "application/json")
                .body(format!("[{}]", vec!["1"; 600].join(","))),
            413,
            "body_too_large",
        ),
        (
            c.post(server.url("s"))
                .header("content-type", "text/plain")
                .body("x"),
            409,
            "content_type_mismatch",
        ),
    ];
    for (request, status, code) in cases {
        let built = request.build().unwrap();
        let what = format!("{} {}", built.method(), built.url());
        let (got_status, got_code) = error_code(c.execute(built).await.unwrap()).await;
        assert_eq!(
            (got_status.as_u16(), got_code.as_str()),
            (status, code),
            "{what}"
        );
    }
    // A body refused for its size is read to its end first (dropped), so
    // the connection stays open for the client's next request; one too
    // large to drain says the connection closes.
    let refused = c
        .post(server.url("s"))
        .header("content-type", "application/json")
        .body(format!("[{}]", vec!["1"; 600].join(",")))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 413);
    assert_eq!(refused.headers().get("connection"), None);
    let next = c
        .post(server.url("s"))
        .header("content-type", "application/json")
        .body("[1]")
        .send()
        .await
        .unwrap();
    assert!(next.status().is_success(), "{}", next.status());
    let mut raw = tokio::net::TcpStream::connect(server.base.trim_start_matches("http://"))
        .await
        .unwrap();
    let head = "POST /v1/stream/s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
                content-length: 104857600\r\n\r\n";
    tokio::io::AsyncWriteExt::write_all(&mut raw, head.as_bytes())
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = tokio::io::AsyncReadExt::read_to_end(&mut raw, &mut answer).await;
    let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
    assert!(answer.starts_with("http/1.1 413"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    // A body too large to drain before answering is still read (and
    // dropped) while the answer goes out, so a client that sends all of it
    // reads the 413 instead of failing its write on a closed connection
    // (RFC 9112 §9.6); the connection closes after.
    for _ in 0..3 {
        let big = c
            .post(server.url("s"))
            .header("content-type", "application/json")
            .body(vec![b'1'; 8 << 20])
            .send()
            .await
            .expect("the refusal, not a failed write");
        assert_eq!(big.status(), 413);
        assert_eq!(
            big.headers().get("connection").map(|v| v.as_bytes()),
            Some(&b"close"[..])
        );
    }
    // Arbitrary offsets and producer values never reach a 5xx.
    for garbage in [
        "%00",
        "a%20b",
        "../x",
        "1_1",
        "-2",
        "NOW",
        "%E2%82%AC",
        "0000000000000000_",
        "_",
    ] {
        let r = c
            .get(format!("{}?offset={garbage}", server.url("s")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "offset {garbage}");
    }
    for value in ["", " ", "01", "1.0", "99999999999999999999", "0x1"] {
        let r = c
            .post(server.url("s"))
            .header("content-type", "application/json")
            .header("producer-id", "p")
            .header("producer-epoch", value)
            .header("producer-seq", "0")
            .body("1")
            .send()
            .await
            .unwrap();
        assert!(
            r.status().is_client_error() || r.status().is_success(),
            "epoch {value:?}: {}",
            r.status()
        );
    }
}

/// The raw route takes the product's `Prisma-Encryption-Key` as well as
/// `Stream-Encryption-Key`, with the same meaning; both, naming different
/// keys, is 400. `GET /` describes the server.
#[tokio::test]
async fn the_raw_route_takes_either_key_header_and_the_root_describes_the_server() {
    const OTHER_KEY: &str = "cmF3LXJvdXRlLXByb2R1Y3QtaGVhZGVyLWtleS0zMiE";
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path().to_str().unwrap(), free_port(), &[]).await;
    let c = client();
    let created = c
        .put(server.url("k"))
        .header("prisma-encryption-key", OTHER_KEY)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let appended = c
        .post(server.url("k"))
        .header("stream-encryption-key", OTHER_KEY)
        .header("prisma-encryption-key", OTHER_KEY)
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert!(appended.status().is_success(), "{}", appended.status());
    let read = c
        .get(format!("{}?offset=-1", server.url("k")))
        .header("prisma-encryption-key", OTHER_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    assert_eq!(read.text().await.unwrap(), "hello");
    // Without a key header the development key is used: not this stream's.
    let keyless = c
        .get(format!("{}?offset=-1", server.url("k")))
        .send()
        .await
        .unwrap();
    assert_eq!(keyless.status(), 403);
    let both = c
        .get(format!("{}?offset=-1", server.url("k")))
        .header("stream-encryption-key", DEV_KEY)
        .header("prisma-encryption-key", OTHER_KEY)
        .send()
        .await
        .unwrap();
    let (status, code) = error_code(both).await;
    assert_eq!((status.as_u16(), code.as_str()), (400, "invalid_key"));

    let root = c.get(format!("{}/", server.base)).send().await.unwrap();
    assert_eq!(root.status(), 200);
    assert_eq!(root.headers()["content-type"], "application/json");
    let root: serde_json::Value = serde_json::from_slice(&root.bytes().await.unwrap()).unwrap();
    assert_eq!(root["name"], "strata");
    assert_eq!(root["surfaces"]["product"]["path"], "/v1/streams/{name}");
    assert_eq!(
        root["surfaces"]["durableStreams"]["path"],
        "/v1/stream/{name}"
    );
}

#[tokio::test]
async fn bearer_tokens_guard_the_api() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path().to_str().unwrap(),
        free_port(),
        &[
            "--auth-token",
            "sesame-sesame-open",
            "--auth-token",
            "other-other-other",
        ],
    )
    .await;
    let c = client();
    let denied = c
        .put(server.url("a"))
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    let (status, code) = error_code(denied).await;
    assert_eq!((status.as_u16(), code.as_str()), (401, "unauthorized"));
    let wrong = c
        .put(server.url("a"))
        .bearer_auth("nope")
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    for token in ["sesame-sesame-open", "other-other-other"] {
        let ok = c
            .put(server.url("a"))
            .bearer_auth(token)
            .header("content-type", "text/plain")
            .send()
            .await
            .unwrap();
        assert!(ok.status().is_success(), "{token}");
    }
    // Preflights never need a token, and errors carry the security headers.
    let pre = c
        .request(Method::OPTIONS, server.url("a"))
        .send()
        .await
        .unwrap();
    assert_eq!(pre.status(), 204);
    assert_eq!(pre.headers()["x-content-type-options"], "nosniff");
}

/// The answer to a PUT of stream `a` with `token`.
async fn put_with(server: &Server, token: &str) -> StatusCode {
    client()
        .put(server.url("a"))
        .bearer_auth(token)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap()
        .status()
}

/// A short development token is accepted on a loopback address. `SIGHUP`
/// re-reads the tokens file: a removed token stops working, an added one
/// starts, and a file that does not parse leaves the tokens in force.
#[tokio::test]
async fn sighup_reloads_the_tokens_file_and_a_broken_file_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "default devtoken\nalpha alpha-token-0000001\n").unwrap();
    let server = Server::start(
        dir.path().join("data").to_str().unwrap(),
        free_port(),
        &["--tokens-file", tokens.to_str().unwrap()],
    )
    .await;
    assert!(put_with(&server, "devtoken").await.is_success());
    assert_eq!(put_with(&server, "beta-token-00000002").await, 401);

    std::fs::write(
        &tokens,
        "alpha alpha-token-0000001\nbeta beta-token-00000002\n",
    )
    .unwrap();
    hangup(&server);
    eventually("the added token works", || async {
        put_with(&server, "beta-token-00000002").await.is_success()
    })
    .await;
    assert_eq!(put_with(&server, "devtoken").await, 401);
    assert!(put_with(&server, "alpha-token-0000001").await.is_success());

    std::fs::write(&tokens, "alpha has three words\n").unwrap();
    hangup(&server);
    eventually("the broken file is reported", || async {
        server.log_text().contains("tokens not reloaded")
    })
    .await;
    assert!(put_with(&server, "beta-token-00000002").await.is_success());
    assert!(put_with(&server, "alpha-token-0000001").await.is_success());
}

/// Logs written to a file carry no terminal colour codes; `--log-format json`
/// writes one JSON object per line and nothing else (no console lines),
/// from start to stop.
#[tokio::test]
async fn logs_are_plain_text_off_a_terminal_and_json_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let text = Server::start(dir.path().join("t").to_str().unwrap(), free_port(), &[]).await;
    let log = text.log_text();
    assert!(log.contains("listening"), "{log}");
    assert!(
        !log.contains('\u{1b}'),
        "colour codes in a log file: {log:?}"
    );
    drop(text);

    let mut json = Server::start(
        dir.path().join("j").to_str().unwrap(),
        free_port(),
        &["--log-format", "json"],
    )
    .await;
    let pid = libc::pid_t::try_from(json.child.id()).unwrap();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    assert!(json.child.wait().unwrap().success());
    let log = json.log_text();
    let mut messages = Vec::new();
    for line in log.lines().filter(|l| !l.is_empty()) {
        let event: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(
            event["level"].is_string() && event["timestamp"].is_string(),
            "{line}"
        );
        messages.push(event["message"].as_str().unwrap_or_default().to_string());
    }
    // (The test server's RUST_LOG keeps the engine's events, not the server's.)
    assert!(messages.iter().any(|m| m == "shard opened"), "{messages:?}");
}

/// On an address others can reach, a token shorter than 16 characters is
/// refused at start.
#[tokio::test]
async fn a_short_token_is_refused_off_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["serve", "--listen", &format!("0.0.0.0:{port}"), "--store"])
        .arg(dir.path())
        .args(["--auth-token", "devtoken"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = libc::pid_t::try_from(child.id()).unwrap();
    let exited = tokio::task::spawn_blocking(move || child.wait_with_output());
    let Ok(output) = tokio::time::timeout(std::time::Duration::from_secs(30), exited).await else {
        unsafe { libc::kill(pid, libc::SIGKILL) };
        panic!("the server started with a short token on 0.0.0.0");
    };
    let output = output.unwrap().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("at least 16"), "{stderr}");
}

#[tokio::test]
async fn full_queues_answer_429_and_full_live_slots_503() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        dir.path().to_str().unwrap(),
        free_port(),
        &[
            "--ingest-queue-capacity",
            "1",
            "--max-pending-bytes",
            "64",
            "--pipeline-depth",
            "1",
            "--emulate-put-latency-ms",
            "100",
            "--max-live-connections",
            "1",
        ],
    )
    .await;
    let c = client();
    assert_eq!(
        c.put(server.url("q"))
            .header("content-type", "text/plain")
            .send()
            .await
            .unwrap()
            .status(),
        201
    );
    let appends = (0..40).map(|i| {
        c.post(server.url("q"))
            .header("content-type", "text/plain")
            .body(format!("r{i}"))
            .send()
    });
    let answers = futures::future::join_all(appends).await;
    let mut overloaded = 0;
    for answer in answers {
        let r = answer.unwrap();
        match r.status().as_u16() {
            204 => {}
            429 => {
                assert!(r.headers().contains_key("retry-after"));
                overloaded += 1;
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert!(overloaded > 0, "a full queue answers 429");
    // Refusals are logged by class, not one line each.
    eventually("the refusals are logged", || async {
        server.log_text().contains("requests refused")
    })
    .await;
    // One line for the class at once, then at most one per 10 s (the test
    // takes less than 20 s), however many were refused.
    let lines = server
        .log_text()
        .lines()
        .filter(|l| l.contains("requests refused") && l.contains("overloaded"))
        .count();
    assert!(
        (1..=2).contains(&lines),
        "{lines} lines for {overloaded} refusals"
    );
    // An SSE reader holds the only live slot (its headers prove it); a
    // long-poll is refused until the SSE reader goes away.
    let holder = c
        .get(format!("{}?offset=now&live=sse", server.url("q")))
        .send()
        .await
        .unwrap();
    assert_eq!(holder.status(), 200);
    let refused = c
        .get(format!("{}?offset=now&live=long-poll", server.url("q")))
        .send()
        .await
        .unwrap();
    assert!(refused.headers().contains_key("retry-after"));
    let (status, code) = error_code(refused).await;
    assert_eq!((status.as_u16(), code.as_str()), (503, "live_capacity"));
    drop(holder);
    let mut admitted = false;
    for _ in 0..200 {
        let r = c
            .get(format!("{}?offset=now&live=long-poll", server.url("q")))
            .send()
            .await
            .unwrap();
        if r.status() != 503 {
            admitted = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(admitted, "the slot is released when the SSE reader leaves");
}

#[tokio::test]
async fn a_second_instance_on_a_busy_address_fails_without_fencing_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap().to_string();
    let port = free_port();
    let first = Server::start(&store, port, &[]).await;
    let c = client();
    let created = c
        .put(first.url("busy"))
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert!(created.status().is_success());
    let second = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--store"])
        .arg(&store)
        .args(["--dev-default-key", DEV_KEY])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!second.success(), "the second instance must not start");
    // The first still owns its shard: an append is acknowledged.
    let appended = c
        .post(first.url("busy"))
        .header("content-type", "text/plain")
        .body("still mine")
        .send()
        .await
        .unwrap();
    assert_eq!(appended.status(), StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn a_store_keeps_the_shard_count_it_was_first_served_with() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().to_str().unwrap().to_string();
    let first = Server::start(&store, free_port(), &["--shards", "2"]).await;
    drop(first);
    let other = std::process::Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["serve", "--listen", &format!("127.0.0.1:{}", free_port())])
        .args(["--store", &store, "--shards", "3"])
        .output()
        .unwrap();
    assert!(!other.status.success());
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(stderr.contains("--shards 2"), "{stderr}");
    // The same count starts.
    let _again = Server::start(&store, free_port(), &["--shards", "2"]).await;
}
