//! The server's memory stays bounded whatever the request mix: bodies that
//! trickle in and never end, large appends against a slow store (staged
//! entries), producers, live readers past the budget, and requests a fleet
//! member forwards. Each flood would take far more than the bound if a queue
//! or buffer were unbounded; the server's resident set (VmRSS) is sampled
//! throughout and must stay within [`RSS_GROWTH_MAX_MB`] of its size before.
#![allow(clippy::disallowed_methods)]

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::fleet::Fleet;
use common::{client, free_port, holds_within, Server, DEV_KEY};
use tokio::io::AsyncWriteExt;

/// How much the server may grow over its size before the floods, in MiB.
/// Its bounds ([`BOUNDS`]): 16 MiB of buffered bodies, 16 MiB queued and
/// 16 MiB staged or in flight per shard (and the WAL objects encoded from
/// them), 32 MiB acknowledged and not yet sealed (and the segment a seal
/// builds from them), 16 MiB of SSE frames, 64 KiB each way of each held
/// connection's buffers (about 1,300 connections), and the allocator's
/// slack. Without any one bound, its flood alone would pass this.
const RSS_GROWTH_MAX_MB: u64 = 320;
/// Body size of the floods, and what the budgets are.
const BODY_BYTES: usize = 4 << 20;

fn rss_mb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb / 1024)
}

/// Samples `pid`'s RSS every 50 ms into `peak` until `stop` is set.
fn watch_rss(pid: u32, peak: Arc<AtomicU64>, stop: Arc<std::sync::atomic::AtomicBool>) {
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            peak.fetch_max(rss_mb(pid), Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// Opens `count` connections at once that each send the head of a raw
/// append of `BODY_BYTES` and most of its body, then stall (held until the
/// tasks are aborted).
fn trickle(base: &str, count: usize) -> Vec<tokio::task::JoinHandle<()>> {
    let addr = base.trim_start_matches("http://").to_string();
    (0..count)
        .map(|i| {
            let addr = addr.clone();
            tokio::spawn(async move {
                let Ok(mut socket) = tokio::net::TcpStream::connect(&addr).await else {
                    return;
                };
                let head = format!(
                    "POST /v1/stream/flood-{} HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nStream-Encryption-Key: {DEV_KEY}\r\nContent-Length: {BODY_BYTES}\r\n\r\n",
                    i % 8
                );
                let part = vec![b'x'; BODY_BYTES - 1024];
                if socket.write_all(head.as_bytes()).await.is_ok() {
                    let _ = socket.write_all(&part).await;
                }
                // Stalls with the socket open.
                std::future::pending::<()>().await;
            })
        })
        .collect()
}

/// Sends `count` appends of `BODY_BYTES` at once and waits for every answer.
async fn append_flood(base: &str, count: usize) -> (usize, usize) {
    let c = client();
    let body = bytes::Bytes::from(vec![b'y'; BODY_BYTES]);
    let sent: Vec<_> = (0..count)
        .map(|i| {
            let request = c
                .post(format!("{base}/v1/stream/flood-{}", i % 8))
                .header("content-type", "application/octet-stream")
                .header("producer-id", format!("p{i}"))
                .header("producer-epoch", "0")
                .header("producer-seq", "0")
                .body(body.clone());
            tokio::spawn(async move {
                let r = request.send().await?;
                let status = r.status().as_u16();
                Ok::<_, reqwest::Error>((status, r.text().await.unwrap_or_default()))
            })
        })
        .collect();
    let (mut ok, mut refused) = (0, 0);
    let mut why = std::collections::BTreeMap::<String, usize>::new();
    for task in sent {
        match task.await.unwrap() {
            Ok((200 | 204, _)) => ok += 1,
            // Refused: the shard's queue, the body budget (each retryable).
            Ok((status @ (429 | 503), text)) => {
                refused += 1;
                *why.entry(format!("{status} {}", &text[..text.len().min(120)]))
                    .or_default() += 1;
            }
            Ok((other, text)) => panic!("answer {other}: {text}"),
            Err(e) => {
                refused += 1;
                *why.entry(format!("{e}")).or_default() += 1;
            }
        }
    }
    eprintln!("[memory] {base}: refusals {why:?}");
    (ok, refused)
}

/// Opens `count` SSE readers at once; answers those admitted and how many
/// were refused.
async fn readers(base: &str, count: usize) -> (Vec<reqwest::Response>, usize) {
    let c = client();
    let asked: Vec<_> = (0..count)
        .map(|i| {
            let request = c.get(format!(
                "{base}/v1/stream/flood-{}?offset=-1&live=sse",
                i % 8
            ));
            tokio::spawn(async move { request.send().await })
        })
        .collect();
    let mut open = Vec::new();
    let mut refused = 0;
    for task in asked {
        let r = task.await.unwrap().unwrap();
        match r.status().as_u16() {
            200 => open.push(r),
            503 => refused += 1,
            other => panic!("answer {other}"),
        }
    }
    (open, refused)
}

async fn create_streams(base: &str) {
    let c = client();
    for i in 0..8 {
        // A fleet's shards may still be moving: 503s are sent again.
        let created = common::fleet::settled(|| {
            c.put(format!("{base}/v1/stream/flood-{i}"))
                .header("content-type", "application/octet-stream")
        })
        .await;
        assert!(
            (200..300).contains(&created.status),
            "create: {}",
            created.status
        );
    }
}

const BOUNDS: [&str; 16] = [
    "--max-body-bytes",
    "4194304",
    "--max-buffered-body-bytes",
    "16777216",
    "--max-pending-bytes",
    "16777216",
    "--seal-bytes",
    "8388608",
    "--max-unsealed-bytes",
    "33554432",
    "--max-live-connections",
    "256",
    "--max-live-buffer-bytes",
    "16777216",
    "--emulate-put-latency-ms",
    "200",
];

/// Runs every flood against `target` while sampling `pid`; answers the
/// growth of its RSS in MiB.
async fn flood(target: &str, pid: u32) -> u64 {
    let before = rss_mb(pid);
    let peak = Arc::new(AtomicU64::new(before));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    watch_rss(pid, peak.clone(), stop.clone());
    // 200 bodies of 4 MiB that stall (800 MiB if all were buffered): the
    // server cuts them after their pause and takes appends again.
    let stalled = trickle(target, 200);
    eprintln!("[memory] {target}: 200 stalled bodies sent");
    // Their pause is cut after 10 s, a wait for the budget after 10 s.
    let c = client();
    let last = std::sync::Mutex::new(String::new());
    let taken = holds_within(Duration::from_secs(60), || async {
        let answer = c
            .post(format!("{target}/v1/stream/flood-0"))
            .header("content-type", "application/octet-stream")
            .body("probe")
            .send()
            .await;
        let text = match answer {
            Ok(r) if r.status().is_success() => return true,
            Ok(r) => format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
            Err(e) => e.to_string(),
        };
        *last.lock().unwrap() = text;
        false
    })
    .await;
    assert!(
        taken,
        "appends were never taken again: {}",
        last.lock().unwrap()
    );
    eprintln!(
        "[memory] {target}: appends taken again; peak {}",
        peak.load(Ordering::Relaxed)
    );
    // 120 appends of 4 MiB at once against a slow store (480 MiB), each
    // with its own producer.
    // (All refused happens when a fleet's shard moves under the load: the
    // flood is sent again, as clients would.)
    let mut flooded = append_flood(target, 120).await;
    for _ in 0..3 {
        if flooded.0 > 0 {
            break;
        }
        flooded = append_flood(target, 120).await;
    }
    let (ok, refused) = flooded;
    eprintln!(
        "[memory] {target}: append flood: {ok} ok, {refused} refused; peak {}",
        peak.load(Ordering::Relaxed)
    );
    assert!(ok > 0 && ok + refused == 120, "{ok} {refused}");
    // 1,000 live readers against a budget of 256, then appends they read
    // (and never take from their connections).
    let (open, refused_readers) = readers(target, 1000).await;
    eprintln!(
        "[memory] {target}: {} readers open, {refused_readers} refused",
        open.len()
    );
    assert!(refused_readers > 0 && open.len() <= 256);
    let (ok_more, _) = append_flood(target, 60).await;
    drop(open);
    for task in stalled {
        task.abort();
    }
    stop.store(true, Ordering::Relaxed);
    let growth = peak.load(Ordering::Relaxed).saturating_sub(before);
    eprintln!(
        "rss before {before} MiB, peak growth {growth} MiB; appends ok {ok}+{ok_more}, refused {refused}"
    );
    growth
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_stays_bounded_under_every_flood() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path().to_str().unwrap(), free_port(), &BOUNDS).await;
    create_streams(&server.base).await;
    let growth = flood(&server.base, server.child.id()).await;
    assert!(growth <= RSS_GROWTH_MAX_MB, "grew {growth} MiB");
    // Still serving.
    let r = client().get(server.url("flood-0")).send().await.unwrap();
    assert!(r.status().is_success());
}

/// The same floods through a fleet member that forwards them to the owner:
/// neither member grows past the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarding_member_stays_bounded_too() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = Fleet::start(dir.path().to_str().unwrap(), &BOUNDS).await;
    let bases: Vec<String> = (0..common::fleet::MEMBERS).map(|i| fleet.base(i)).collect();
    create_streams(&bases[0]).await;
    let pids: Vec<u32> = fleet
        .members
        .iter()
        .map(|m| m.as_ref().unwrap().child.id())
        .collect();
    let before: Vec<u64> = pids.iter().map(|p| rss_mb(*p)).collect();
    let peaks: Vec<Arc<AtomicU64>> = before
        .iter()
        .map(|b| Arc::new(AtomicU64::new(*b)))
        .collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for (pid, peak) in pids.iter().zip(&peaks) {
        watch_rss(*pid, peak.clone(), stop.clone());
    }
    flood(&bases[0], pids[0]).await;
    stop.store(true, Ordering::Relaxed);
    for (i, (peak, before)) in peaks.iter().zip(&before).enumerate() {
        let growth = peak.load(Ordering::Relaxed).saturating_sub(*before);
        assert!(growth <= RSS_GROWTH_MAX_MB, "member {i} grew {growth} MiB");
    }
}
