//! `GET /metrics`: the exposition parses, counts what was done, and names
//! no stream.

mod common;

use common::{client, free_port, Server};

/// The value of the series `name{labels}` (labels exactly as exposed).
fn value(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|line| {
        let (name, value) = line.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

/// The sum over every series of metric `name` (any labels).
fn total(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Creates the text stream at `url`, asserting it is new.
async fn create_text_stream(c: &reqwest::Client, url: &str) {
    let created = c
        .put(url)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
}

/// The server's exposition now.
async fn scrape(c: &reqwest::Client, base: &str) -> String {
    c.get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn metrics_count_requests_and_wal_puts_and_name_no_stream() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path().to_str().unwrap(), free_port(), &[]).await;
    let c = client();
    let name = "a-stream-name-that-must-not-be-a-label";
    let url = server.url(name);
    create_text_stream(&c, &url).await;
    for i in 0..5 {
        let r = c
            .post(&url)
            .header("content-type", "text/plain")
            .body(format!("record {i}"))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success());
    }
    let missing = c.get(server.url("missing")).send().await.unwrap();
    assert_eq!(missing.status(), 404);

    let answer = c
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    assert!(answer.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/openmetrics-text"));
    let text = answer.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(!text.contains(name), "a stream name is a label: {text}");
    // On the local store every create-only put counts where its file came
    // from (the reuse pool or a new one), and the pool's size is a gauge.
    let created = |from: &str| {
        value(
            &text,
            &format!(r#"strata_local_store_created_files_total{{from="{from}"}}"#),
        )
        .unwrap_or_else(|| panic!("no {from} series: {text}"))
    };
    // The create and five appends wrote at least six WAL objects.
    assert!(created("pool") + created("new") >= 6.0, "{text}");
    assert!(
        value(&text, "strata_local_store_pool_files").is_some(),
        "{text}"
    );
    assert!(
        value(&text, "strata_local_store_pooled_files_total").is_some(),
        "{text}"
    );

    let appends = value(
        &text,
        r#"strata_http_requests_total{surface="raw",method="POST",status="2xx"}"#,
    );
    assert_eq!(appends, Some(5.0), "{text}");
    let not_found = value(
        &text,
        r#"strata_http_requests_total{surface="raw",method="GET",status="4xx"}"#,
    );
    assert_eq!(not_found, Some(1.0), "{text}");
    assert!(total(&text, "strata_http_request_duration_seconds_count") >= 7.0);
    assert!(text.contains("strata_http_live_connections 0"), "{text}");

    // The create and the five appends are in the WAL (one record each).
    assert!(total(&text, "strata_wal_records_total") >= 5.0, "{text}");
    let puts = total(&text, "strata_wal_puts_total");
    assert!(puts >= 2.0, "{text}");
    assert_eq!(total(&text, "strata_wal_put_duration_seconds_count"), puts);
    let infinite: f64 = text
        .lines()
        .filter(|l| {
            l.starts_with("strata_wal_put_duration_seconds_bucket{") && l.contains(r#"le="+Inf""#)
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert_eq!(infinite, puts, "every PUT is in the +Inf bucket");
    assert!(total(&text, "strata_shard_claims_total") >= 1.0);
    assert_eq!(total(&text, "strata_shard_fences_total"), 0.0);
    assert_eq!(total(&text, "strata_wal_put_failures_total"), 0.0);
}

/// Every strata_… metric name anywhere in the dashboard's expressions.
fn dashboard_metric_names(dashboard: &serde_json::Value, out: &mut Vec<String>) {
    match dashboard {
        serde_json::Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value.as_str()) {
                    ("expr" | "query", Some(expr)) => {
                        let names: Vec<String> = expr
                            .match_indices("strata_")
                            .map(|(at, _)| {
                                expr[at..]
                                    .chars()
                                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                                    .collect()
                            })
                            .collect();
                        assert!(
                            !names.is_empty() || key == "query",
                            "{expr} names no metric"
                        );
                        out.extend(names);
                    }
                    _ => dashboard_metric_names(value, out),
                }
            }
        }
        serde_json::Value::Array(items) => {
            items.iter().for_each(|v| dashboard_metric_names(v, out))
        }
        _ => {}
    }
}

/// docs/grafana/strata.json asks only for series the server exports.
#[tokio::test]
async fn the_dashboard_names_only_exported_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path().to_str().unwrap(), free_port(), &[]).await;
    let c = client();
    create_text_stream(&c, &server.url("d")).await;
    let text = scrape(&c, &server.base).await;
    let exported: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/grafana/strata.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut names = Vec::new();
    dashboard_metric_names(&dashboard, &mut names);
    assert!(names.len() >= 15, "{names:?}");
    for name in &names {
        assert!(
            exported.contains(name.as_str()),
            "the dashboard asks for {name}, which the server does not export: {exported:?}"
        );
    }
}

/// With `--metrics-listen`, `/metrics` moves to that address: the main one
/// answers 404 for it, and the metrics address serves nothing else.
#[tokio::test]
async fn metrics_listen_serves_the_metrics_apart() {
    let dir = tempfile::tempdir().unwrap();
    let metrics_port = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let server = Server::start(
        dir.path().to_str().unwrap(),
        free_port(),
        &["--metrics-listen", &metrics_addr],
    )
    .await;
    let c = client();
    create_text_stream(&c, &server.url("m")).await;
    let main = c
        .get(format!("{}/metrics", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(main.status(), 404);
    let apart = c
        .get(format!("http://{metrics_addr}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(apart.status(), 200);
    let text = apart.text().await.unwrap();
    assert_eq!(
        value(
            &text,
            r#"strata_http_requests_total{surface="raw",method="PUT",status="2xx"}"#
        ),
        Some(1.0),
        "{text}"
    );
    let other = c
        .get(format!("http://{metrics_addr}/v1/stream/m"))
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    // Only GET and HEAD read them; anything else is 405 naming those two.
    for path in ["/metrics", "/healthz"] {
        let head = c
            .head(format!("http://{metrics_addr}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(head.status(), 200, "HEAD {path}");
        let posted = c
            .post(format!("http://{metrics_addr}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(posted.status(), 405, "POST {path}");
        assert_eq!(
            posted.headers().get("allow").and_then(|v| v.to_str().ok()),
            Some("GET, HEAD"),
            "POST {path}"
        );
    }
}

/// The debug endpoints: always on the metrics address; on the main one only
/// with the operator token (else 404); the configuration holds no secret.
#[tokio::test]
async fn debug_endpoints_show_shards_and_configuration_to_operators() {
    let dir = tempfile::tempdir().unwrap();
    let metrics_addr = format!("127.0.0.1:{}", free_port());
    let operator = "operator-token-0123456789";
    let server = Server::start(
        dir.path().to_str().unwrap(),
        free_port(),
        &[
            "--metrics-listen",
            &metrics_addr,
            "--operator-token",
            operator,
            "--project-token",
            "p:project-token-000001",
        ],
    )
    .await;
    let c = client();
    let created = c
        .put(server.url("d"))
        .bearer_auth("project-token-000001")
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let get = |url: String, token: Option<&str>| {
        let mut request = c.get(url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    let shards = get(format!("http://{metrics_addr}/debug/shards"), None)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let shards: serde_json::Value = serde_json::from_slice(&shards).unwrap();
    let first = &shards["shards"][0];
    assert_eq!(first["served"], "here", "{shards}");
    assert!(first["epoch"].as_u64().unwrap() >= 1, "{shards}");
    assert!(
        first["walNextSlot"].as_u64().unwrap() > first["walReplaySlot"].as_u64().unwrap(),
        "{shards}"
    );
    let config = get(format!("http://{metrics_addr}/debug/config"), None)
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(config.contains(r#""operatorToken":true"#), "{config}");
    assert!(config.contains(r#""projectTokens":1"#), "{config}");
    assert!(!config.contains(operator) && !config.contains("project-token-000001"));
    for token in [
        None,
        Some("project-token-000001"),
        Some("operator-token-0123456780"),
    ] {
        let refused = get(format!("{}/debug/shards", server.base), token)
            .await
            .unwrap();
        assert_eq!(refused.status(), 404, "{token:?}");
    }
    let main = get(format!("{}/debug/config", server.base), Some(operator))
        .await
        .unwrap();
    assert_eq!(main.status(), 200);
}

/// Reads of sealed data count where their chunks came from: the store the
/// first time, the cache after. A clean stop seals everything, so the
/// restarted server holds the record in a chunk only.
#[tokio::test]
async fn chunk_cache_lookups_count_the_store_then_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("data");
    let cache = dir.path().join("cache");
    let args = ["--cache-dir", cache.to_str().unwrap()];
    let mut first = Server::start(store.to_str().unwrap(), free_port(), &args).await;
    let c = client();
    let url = first.url("sealed");
    create_text_stream(&c, &url).await;
    let appended = c
        .post(&url)
        .header("content-type", "text/plain")
        .body("kept in a chunk")
        .send()
        .await
        .unwrap();
    assert!(appended.status().is_success());
    let pid = libc::pid_t::try_from(first.child.id()).unwrap();
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    assert!(first.child.wait().unwrap().success());
    drop(first);

    let server = Server::start(store.to_str().unwrap(), free_port(), &args).await;
    let before = scrape(&c, &server.base).await;
    assert_eq!(
        total(&before, "strata_shard_unsealed_bytes"),
        0.0,
        "{before}"
    );
    for _ in 0..2 {
        let read = c
            .get(format!("{}?offset=-1", server.url("sealed")))
            .send()
            .await
            .unwrap();
        assert_eq!(read.text().await.unwrap(), "kept in a chunk");
    }
    let text = scrape(&c, &server.base).await;
    let lookups = |found: &str| {
        value(
            &text,
            &format!(r#"strata_chunk_cache_lookups_total{{found="{found}"}}"#),
        )
        .unwrap_or_else(|| panic!("no {found} lookups: {text}"))
    };
    assert!(lookups("store") >= 1.0, "{text}");
    assert!(lookups("memory") + lookups("disk") >= 1.0, "{text}");
}
