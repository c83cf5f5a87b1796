//! `strata bench consumers`: consumer groups end to end over HTTP. Starts
//! `strata serve` (this binary) on a fresh local-directory store, then
//! appenders post records (`--batch` per request, each request to the next
//! of `--keys` routing keys) while
//! workers long-poll the consumer (`waitMs` 1000) and acknowledge what they
//! get, until every record is acknowledged.
//!
//! Prints messages/s (records acknowledged over the run), the delivery
//! latency (from an append's acknowledgement to the pull answer that carried
//! its record), pull and settle latency, the WAL objects the shard wrote per
//! 1,000 messages (WAL slots are numbered in order, so the newest slot's
//! number counts them; appends, pulls and settles share them), and the
//! server's peak RSS.
//!
//! With `--rate` the appenders offer a fixed load (open loop: each request
//! leaves at its scheduled time, or at once when its appender is behind), so
//! the delivery latency is measured at a load the consumer can drain rather
//! than as the age of a growing backlog. `--server-bin` serves another build
//! under the same client, for comparing builds.
//!
//! Invariant: the run ends only when every record was acknowledged exactly
//! once by a settle the server counted (a redelivery would show as
//! `redelivered`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde_json::{json, Value};

use super::error::BenchError;

const KEY: &str = "Y29uc3VtZXItYmVuY2gtZGV2ZWxvcG1lbnQta2V5ISE";
const NAME: &str = "consumer-bench";

#[derive(Args, Debug)]
pub struct ConsumersBench {
    /// Records appended.
    #[arg(long, default_value_t = 20_000)]
    records: u64,
    /// Records per append request (`records:batch` when above 1; a batch
    /// goes to one routing key).
    #[arg(long, default_value_t = 1)]
    batch: u64,
    /// Routing keys the records go to, in turn.
    #[arg(long, default_value_t = 1_000)]
    keys: u64,
    /// Concurrent appenders.
    #[arg(long, default_value_t = 16)]
    appenders: usize,
    /// Pulling workers.
    #[arg(long, default_value_t = 16)]
    workers: usize,
    /// Messages per pull (the consumer's maxBatchRecords).
    #[arg(long, default_value_t = 10)]
    max: u64,
    /// The server's emulated store latency per PUT (0: the local store's own).
    #[arg(long, default_value_t = 0)]
    put_latency_ms: u64,
    /// Records per second the appenders offer in all (open loop); unset, each
    /// appender sends its next request as soon as the last is answered.
    #[arg(long)]
    rate: Option<u64>,
    /// The `strata` binary to serve (default: this one).
    #[arg(long)]
    server_bin: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, serde::Serialize)]
struct ConsumersReport {
    records: u64,
    batch: u64,
    keys: u64,
    appenders: usize,
    workers: usize,
    put_latency_ms: u64,
    rate: Option<u64>,
    seconds: f64,
    messages_per_sec: f64,
    redelivered: u64,
    delivery_ms_p50: f64,
    delivery_ms_p99: f64,
    pull_ms_p50: f64,
    pull_ms_p99: f64,
    settle_ms_p50: f64,
    settle_ms_p99: f64,
    pulls: u64,
    wal_objects_per_1000_messages: f64,
    server_peak_rss_bytes: u64,
}

/// What the workers share.
struct Run {
    client: reqwest::Client,
    base: String,
    /// When each record's append was acknowledged.
    acked_at: Mutex<Vec<Option<Instant>>>,
    seen: Mutex<HashSet<String>>,
    delivery: Mutex<Histogram<u64>>,
    pull: Mutex<Histogram<u64>>,
    settle: Mutex<Histogram<u64>>,
    settled: AtomicU64,
    redelivered: AtomicU64,
    pulls: AtomicU64,
    records: u64,
    /// When the appenders started, and how many records per second they
    /// offer (open loop) if set.
    started: Instant,
    rate: Option<u64>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3).expect("valid bounds")
}

fn micros(d: Duration) -> u64 {
    (d.as_micros() as u64).max(1)
}

fn ms_at(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1000.0
}

struct ServerProcess {
    child: Child,
    dir: PathBuf,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> Result<u16, BenchError> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

async fn start_server(args: &ConsumersBench) -> Result<(ServerProcess, String), BenchError> {
    let dir = std::env::temp_dir().join(format!(
        "strata-bench-consumers-{}-{}",
        std::process::id(),
        free_port()?
    ));
    std::fs::create_dir_all(&dir)?;
    let port = free_port()?;
    let binary = match &args.server_bin {
        Some(path) => path.clone(),
        None => std::env::current_exe()?,
    };
    let mut command = Command::new(binary);
    command
        .args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--store"])
        .arg(dir.join("data"))
        .args(["--dev-default-key", KEY])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if args.put_latency_ms > 0 {
        command.args(["--emulate-put-latency-ms", &args.put_latency_ms.to_string()]);
    }
    let server = ServerProcess {
        child: command.spawn()?,
        dir,
    };
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    for _ in 0..400 {
        if let Ok(r) = client.get(format!("{base}/healthz")).send().await {
            if r.status().is_success() {
                return Ok((server, base));
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    Err(BenchError::Http("the server did not start".into()))
}

async fn call(
    run: &Run,
    method: reqwest::Method,
    path: &str,
    body: String,
) -> Result<(u16, Value), BenchError> {
    let answer = run
        .client
        .request(method, format!("{}/v1/streams/{path}", run.base))
        .header("prisma-encryption-key", KEY)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| BenchError::Http(format!("{path}: {e}")))?;
    let status = answer.status().as_u16();
    let bytes = answer
        .bytes()
        .await
        .map_err(|e| BenchError::Http(format!("{path}: {e}")))?;
    Ok((
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    ))
}

/// Which records appender `first` (of `step`) sends, a batch at a time.
struct AppendPlan {
    first: u64,
    step: u64,
    keys: u64,
    batch: u64,
}

async fn appender(run: Arc<Run>, plan: AppendPlan) -> Result<(), BenchError> {
    let batches = run.records.div_ceil(plan.batch);
    let mut b = plan.first;
    while b < batches {
        let lo = b * plan.batch;
        let hi = (lo + plan.batch).min(run.records);
        if let Some(rate) = run.rate {
            let due = run.started + Duration::from_secs_f64(lo as f64 / rate.max(1) as f64);
            tokio::time::sleep_until(due.into()).await;
        }
        let (path, body) = if plan.batch == 1 {
            ("records", json!({ "n": lo }).to_string())
        } else {
            let records: Vec<Value> = (lo..hi).map(|n| json!({ "n": n })).collect();
            ("records:batch", Value::Array(records).to_string())
        };
        let request = run
            .client
            .post(format!("{}/v1/streams/{NAME}/{path}", run.base))
            .header("prisma-encryption-key", KEY)
            .header("prisma-routing-key", format!("k{}", b % plan.keys))
            .header("content-type", "application/json")
            .body(body);
        let answer = request
            .send()
            .await
            .map_err(|e| BenchError::Http(format!("append: {e}")))?;
        if answer.status() != 200 {
            return Err(BenchError::Http(format!(
                "append answered {}",
                answer.status()
            )));
        }
        let now = Instant::now();
        let mut acked_at = run.acked_at.lock();
        for n in lo..hi {
            acked_at[n as usize] = Some(now);
        }
        drop(acked_at);
        b += plan.step;
    }
    Ok(())
}

async fn worker(run: Arc<Run>, max: u64) -> Result<(), BenchError> {
    let pull = json!({"max": max, "waitMs": 1000}).to_string();
    while run.settled.load(Ordering::SeqCst) < run.records {
        let sent = Instant::now();
        let (status, answer) = call(
            &run,
            reqwest::Method::POST,
            &format!("{NAME}/consumers/bench:pull"),
            pull.clone(),
        )
        .await?;
        let received = Instant::now();
        if status != 200 {
            return Err(BenchError::Http(format!(
                "pull answered {status}: {answer}"
            )));
        }
        run.pulls.fetch_add(1, Ordering::Relaxed);
        let _ = run.pull.lock().record(micros(received - sent));
        let messages = answer["messages"].as_array().cloned().unwrap_or_default();
        if messages.is_empty() {
            continue;
        }
        {
            let acked_at = run.acked_at.lock();
            let mut seen = run.seen.lock();
            let mut delivery = run.delivery.lock();
            for m in &messages {
                if !seen.insert(m["id"].as_str().unwrap_or("").to_string()) {
                    run.redelivered.fetch_add(1, Ordering::Relaxed);
                }
                let n = m["value"]["n"].as_u64().unwrap_or(0) as usize;
                // An answer that beat its append's own answer counts as 0.
                let latency = acked_at
                    .get(n)
                    .copied()
                    .flatten()
                    .map_or(Duration::ZERO, |at| received.saturating_duration_since(at));
                let _ = delivery.record(micros(latency));
            }
        }
        let acks: Vec<Value> = messages
            .iter()
            .map(|m| json!({"leaseToken": m["leaseToken"]}))
            .collect();
        let sent = Instant::now();
        let (status, answer) = call(
            &run,
            reqwest::Method::POST,
            &format!("{NAME}/consumers/bench:settle"),
            json!({ "acks": acks }).to_string(),
        )
        .await?;
        let _ = run.settle.lock().record(micros(sent.elapsed()));
        if status != 200 {
            return Err(BenchError::Http(format!(
                "settle answered {status}: {answer}"
            )));
        }
        run.settled
            .fetch_add(answer["acked"].as_u64().unwrap_or(0), Ordering::SeqCst);
    }
    Ok(())
}

/// The newest WAL slot's number in a local-directory store.
fn wal_slot_max(data: &Path) -> u64 {
    let shards = data.join("shards");
    let Ok(shards) = std::fs::read_dir(shards) else {
        return 0;
    };
    shards
        .flatten()
        .filter_map(|shard| std::fs::read_dir(shard.path().join("wal")).ok())
        .flat_map(|wal| wal.flatten())
        .filter_map(|f| f.file_name().to_str()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0)
}

fn server_peak_rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

async fn consumers_bench(args: &ConsumersBench) -> Result<ConsumersReport, BenchError> {
    let (server, base) = start_server(args).await?;
    let mut run = Run {
        client: reqwest::Client::new(),
        base,
        acked_at: Mutex::new(vec![None; args.records as usize]),
        seen: Mutex::new(HashSet::new()),
        delivery: Mutex::new(histogram()),
        pull: Mutex::new(histogram()),
        settle: Mutex::new(histogram()),
        settled: AtomicU64::new(0),
        redelivered: AtomicU64::new(0),
        pulls: AtomicU64::new(0),
        records: args.records,
        started: Instant::now(),
        rate: args.rate,
    };
    let (status, _) = call(
        &run,
        reqwest::Method::PUT,
        NAME,
        r#"{"format":{"kind":"json"}}"#.into(),
    )
    .await?;
    let config = json!({"maxBatchRecords": args.max, "visibilityTimeoutMs": 600_000}).to_string();
    let (configured, _) = call(
        &run,
        reqwest::Method::PUT,
        &format!("{NAME}/consumers/bench"),
        config,
    )
    .await?;
    if status != 201 || configured != 201 {
        return Err(BenchError::Http(
            "could not create the collection and its consumer".into(),
        ));
    }
    let data = server.dir.join("data");
    let slots_before = wal_slot_max(&data);
    run.started = Instant::now();
    let started = run.started;
    let run = Arc::new(run);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..args.workers {
        tasks.spawn(worker(run.clone(), args.max));
    }
    let step = args.appenders.max(1) as u64;
    for first in 0..step {
        let plan = AppendPlan {
            first,
            step,
            keys: args.keys.max(1),
            batch: args.batch.max(1),
        };
        tasks.spawn(appender(run.clone(), plan));
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let wal_objects = wal_slot_max(&data) - slots_before;
    let (delivery, pull, settle) = (run.delivery.lock(), run.pull.lock(), run.settle.lock());
    Ok(ConsumersReport {
        records: args.records,
        batch: args.batch,
        keys: args.keys,
        appenders: args.appenders,
        workers: args.workers,
        put_latency_ms: args.put_latency_ms,
        rate: args.rate,
        seconds,
        messages_per_sec: args.records as f64 / seconds,
        redelivered: run.redelivered.load(Ordering::Relaxed),
        delivery_ms_p50: ms_at(&delivery, 0.5),
        delivery_ms_p99: ms_at(&delivery, 0.99),
        pull_ms_p50: ms_at(&pull, 0.5),
        pull_ms_p99: ms_at(&pull, 0.99),
        settle_ms_p50: ms_at(&settle, 0.5),
        settle_ms_p99: ms_at(&settle, 0.99),
        pulls: run.pulls.load(Ordering::Relaxed),
        wal_objects_per_1000_messages: wal_objects as f64 * 1000.0 / args.records.max(1) as f64,
        server_peak_rss_bytes: server_peak_rss(server.child.id()),
    })
}

pub fn consumers(args: &ConsumersBench) -> Result<(), BenchError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(consumers_bench(args))?;
    if args.json {
        println!("{}", serde_json::to_string(&report).expect("serialisable"));
        return Ok(());
    }
    println!(
        "consumers bench: {} records over {} keys, {} appenders{}, {} workers, {} ms PUT latency",
        report.records,
        report.keys,
        report.appenders,
        report
            .rate
            .map_or(String::new(), |r| format!(" offering {r}/s")),
        report.workers,
        report.put_latency_ms
    );
    println!(
        "  {:.0} messages/s; delivery p50 {:.2} ms, p99 {:.2} ms; {} redelivered",
        report.messages_per_sec, report.delivery_ms_p50, report.delivery_ms_p99, report.redelivered
    );
    println!(
        "  pull p50 {:.2} / p99 {:.2} ms, settle p50 {:.2} / p99 {:.2} ms; {} pulls; {:.1} WAL objects per 1,000 messages; server peak RSS {} MiB",
        report.pull_ms_p50,
        report.pull_ms_p99,
        report.settle_ms_p50,
        report.settle_ms_p99,
        report.pulls,
        report.wal_objects_per_1000_messages,
        report.server_peak_rss_bytes >> 20
    );
    Ok(())
}
