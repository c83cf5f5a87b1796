//! Load for fleet tests: exactly-once producers that append through every
//! member in turn (moving on when one does not answer), and the check that
//! every stream holds exactly what its producer had acknowledged, the same
//! through every member.
#![allow(dead_code, clippy::disallowed_methods)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::{client, free_port, Server};

/// Members of a test fleet.
pub const MEMBERS: usize = 3;
pub const SHARDS: &str = "6";
/// Heartbeat and lease shorter than the defaults (500 ms, 2 s), so that
/// tests spend seconds, not minutes, waiting for failovers.
pub const HEARTBEAT_MS: &str = "500";
pub const LEASE_MS: u64 = 2_000;

/// A test fleet of [`MEMBERS`] `strata serve --fleet` processes on one store.
pub struct Fleet {
    store: String,
    ports: Vec<u16>,
    pub members: Vec<Option<Server>>,
    extra: Vec<String>,
    lease_ms: String,
}

impl Fleet {
    pub async fn start(store: &str, extra: &[&str]) -> Fleet {
        Fleet::start_with_lease(store, extra, LEASE_MS).await
    }

    /// [`Fleet::start`] with another `--fleet-lease-ms`.
    pub async fn start_with_lease(store: &str, extra: &[&str], lease_ms: u64) -> Fleet {
        let ports: Vec<u16> = (0..MEMBERS).map(|_| free_port()).collect();
        let mut fleet = Fleet {
            store: store.to_string(),
            ports,
            members: (0..MEMBERS).map(|_| None).collect(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            lease_ms: lease_ms.to_string(),
        };
        for i in 0..MEMBERS {
            fleet.restart(i).await;
        }
        fleet
    }

    pub fn base(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[i])
    }

    pub async fn restart(&mut self, i: usize) {
        let url = self.base(i);
        let mut args: Vec<&str> = vec![
            "--fleet",
            "--advertise-url",
            &url,
            "--shards",
            SHARDS,
            "--heartbeat-ms",
            HEARTBEAT_MS,
            "--fleet-lease-ms",
            &self.lease_ms,
            "--cache-bytes",
            "0",
        ];
        args.extend(self.extra.iter().map(String::as_str));
        self.members[i] = Some(Server::start(&self.store, self.ports[i], &args).await);
    }

    pub fn kill_9(&mut self, i: usize) {
        if let Some(member) = self.members[i].take() {
            member.kill_9();
        }
    }

    /// SIGTERM, then waits (bounded) for the process to hand off and exit.
    pub async fn terminate(&mut self, i: usize) {
        let Some(mut member) = self.members[i].take() else {
            return;
        };
        let pid = member.child.id() as i32;
        // SAFETY: signalling a child process this test owns.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        // Waits on the process's exit itself (bounded), not on a poll.
        let exited = tokio::task::spawn_blocking(move || member.child.wait());
        let status = tokio::time::timeout(Duration::from_secs(60), exited)
            .await
            .unwrap_or_else(|_| panic!("member {i} did not exit after SIGTERM"))
            .expect("the wait task")
            .expect("wait");
        assert!(status.success(), "member {i} exited with {status}");
    }
}

/// Creates `stream` through the members in turn: while the fleet forms,
/// shards move and a create may get a retryable 503 (bounded retries).
/// Sends until a member answers other than a retryable 503 or a dropped
/// connection (the fleet may still be settling its shards, or failing one
/// over), at most a bounded number of times.
pub async fn settled(make: impl Fn() -> reqwest::RequestBuilder) -> super::product::Answer {
    for _ in 0..300 {
        if let Ok(response) = make().send().await {
            let answer = super::product::Answer::from(response).await;
            if answer.status != 503 {
                return answer;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no member answered");
}

/// The member serving collection `name`, once every member agrees: the
/// owner answers without `Streams-Replay-To` and every other member names it.
/// A fleet that has just started (or lost a member) disagrees until each
/// member has seen the same heartbeats, so this asks again (bounded).
pub async fn agreed_owner(fleet: &Fleet, apis: &[super::product::Api], name: &str) -> usize {
    for _ in 0..300 {
        let mut named = Vec::with_capacity(apis.len());
        for api in apis {
            let answer = settled(|| api.keyless(reqwest::Method::GET, &api.url(name))).await;
            assert_eq!(answer.status, 200, "{}", answer.text());
            named.push(answer.header("streams-replay-to").map(str::to_string));
        }
        let serving: Vec<usize> = (0..apis.len()).filter(|i| named[*i].is_none()).collect();
        if let [owner] = serving[..] {
            let base = fleet.base(owner);
            if named.iter().flatten().all(|n| *n == base) {
                return owner;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the members never agreed on who serves {name}");
}

pub async fn create(client: &reqwest::Client, bases: &[String], stream: &str) {
    create_with(client, bases, stream, &[]).await
}

/// [`create`] with more request headers (a fork's, say).
pub async fn create_with(
    client: &reqwest::Client,
    bases: &[String],
    stream: &str,
    headers: &[(&str, &str)],
) {
    for attempt in 0..200 {
        let base = &bases[attempt % bases.len()];
        let mut request = client
            .put(format!("{base}/v1/stream/{stream}"))
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let answer = request.send().await;
        match answer {
            Ok(r) if r.status().is_success() => return,
            Ok(r) if r.status() == 503 => {}
            Ok(r) => panic!(
                "create {stream}: {} {}",
                r.status(),
                r.text().await.unwrap_or_default()
            ),
            Err(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("create {stream}: no member accepted it");
}

/// What a producer saw.
#[derive(Default)]
pub struct Tally {
    /// Sequence numbers acknowledged, in order (0, 1, 2, …).
    pub acked: u64,
    /// The longest time between two acknowledgements, and when it ended.
    pub gap_max: Duration,
    pub gap_end: Option<Instant>,
    /// Answers that are neither a success nor retryable.
    pub fatal: Vec<String>,
    pub retried: u64,
}

/// One exactly-once producer on its own stream, appending through every
/// member in turn until `stop`; a retryable failure sends the same sequence
/// number again through the next member.
pub async fn produce(
    bases: Vec<String>,
    stream: String,
    tally: Arc<Mutex<Tally>>,
    stop: Arc<AtomicBool>,
) {
    let client = client();
    let mut seq = 0u64;
    let mut turn = 0usize;
    let mut last_ack = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let base = &bases[turn % bases.len()];
        turn += 1;
        let answer = client
            .post(format!("{base}/v1/stream/{stream}"))
            .header("content-type", "application/json")
            .header("producer-id", &stream)
            .header("producer-epoch", "0")
            .header("producer-seq", seq.to_string())
            .body(format!("\"{stream}-{seq}\""))
            .timeout(Duration::from_secs(15))
            .send()
            .await;
        let retryable = match answer {
            Ok(r) if r.status().is_success() => {
                let mut t = tally.lock();
                t.acked = seq + 1;
                if last_ack.elapsed() > t.gap_max {
                    t.gap_max = last_ack.elapsed();
                    t.gap_end = Some(Instant::now());
                }
                last_ack = Instant::now();
                seq += 1;
                continue;
            }
            Ok(r) if matches!(r.status().as_u16(), 429 | 503) => true,
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                tally
                    .lock()
                    .fatal
                    .push(format!("{stream} seq {seq} via {base}: {status} {body}"));
                return;
            }
            // The member is down or was cut off mid-request.
            Err(_) => true,
        };
        if retryable {
            tally.lock().retried += 1;
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Every record of a stream, read through `base`.
pub async fn read_all(client: &reqwest::Client, base: &str, stream: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut offset = "-1".to_string();
    for _ in 0..10_000 {
        let response = client
            .get(format!("{base}/v1/stream/{stream}?offset={offset}"))
            .send()
            .await
            .expect("read");
        // Ownership may still be settling after the last restart.
        if response.status() == 503 {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        }
        assert_eq!(response.status(), 200, "read {stream} via {base}");
        let up_to_date = response.headers().contains_key("stream-up-to-date");
        let next = response.headers()["stream-next-offset"]
            .to_str()
            .unwrap()
            .to_string();
        let values: Vec<String> =
            serde_json::from_slice(&response.bytes().await.unwrap()).expect("json array");
        out.extend(values);
        if up_to_date || next == offset {
            return out;
        }
        offset = next;
    }
    panic!("reading {stream} did not end");
}

/// Waits until every producer had `more` appends acknowledged (bounded):
/// the shards of all of them are served again.
pub async fn progress(more: u64, tallies: &[Arc<Mutex<Tally>>]) {
    let targets: Vec<u64> = tallies.iter().map(|t| t.lock().acked + more).collect();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let fatal: Vec<String> = tallies
            .iter()
            .flat_map(|t| t.lock().fatal.clone())
            .collect();
        assert!(fatal.is_empty(), "non-retryable answers: {fatal:?}");
        if tallies
            .iter()
            .zip(&targets)
            .all(|(t, target)| t.lock().acked >= *target)
        {
            return;
        }
        assert!(Instant::now() < deadline, "the fleet made no progress");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Checks every producer's stream through every member: exactly the
/// acknowledged records, in order, and at most one more (the last append
/// sent may have landed without its answer). Answers the longest pause.
pub async fn check_streams(tallies: &[Arc<Mutex<Tally>>], bases: &[String]) -> Duration {
    let client = client();
    let mut gap_max = Duration::ZERO;
    for (p, tally) in tallies.iter().enumerate() {
        let (acked, fatal, pause) = {
            let t = tally.lock();
            (t.acked, t.fatal.clone(), t.gap_max)
        };
        assert!(fatal.is_empty(), "producer {p}: {fatal:?}");
        gap_max = gap_max.max(pause);
        let stream = format!("fleet-{p}");
        let expected: Vec<String> = (0..acked).map(|s| format!("{stream}-{s}")).collect();
        for base in bases {
            let records = read_all(&client, base, &stream).await;
            // The last append sent may have landed without its answer.
            let exact = records == expected;
            let one_more = records.len() == expected.len() + 1
                && records[..expected.len()] == expected[..]
                && records[expected.len()] == format!("{stream}-{acked}");
            assert!(
                exact || one_more,
                "{stream} via {base}: {} records, {} acknowledged; first difference at {:?}",
                records.len(),
                expected.len(),
                records.iter().zip(&expected).position(|(a, b)| a != b)
            );
        }
    }
    gap_max
}

/// Follows `stream` live over SSE through the members in turn, reconnecting
/// (to the next member) from the last offset a control event confirmed, and
/// records every record in `seen`, until `stop`. Records of a data event
/// count only once the control event after them arrived (so a cut
/// connection never leaves a partial batch behind).
pub async fn follow_sse(
    bases: Vec<String>,
    stream: String,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) {
    let client = client();
    let mut offset = "-1".to_string();
    let mut turn = 0usize;
    while !stop.load(Ordering::SeqCst) {
        let base = &bases[turn % bases.len()];
        turn += 1;
        let url = format!("{base}/v1/stream/{stream}?offset={offset}&live=sse");
        let Ok(Ok(mut response)) =
            tokio::time::timeout(Duration::from_secs(10), client.get(&url).send()).await
        else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        if !response.status().is_success() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        let mut buffer = String::new();
        let mut pending: Vec<String> = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let chunk = match tokio::time::timeout(Duration::from_secs(5), response.chunk()).await {
                Ok(Ok(Some(chunk))) => chunk,
                _ => break,
            };
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                let kind = event
                    .lines()
                    .find_map(|l| l.strip_prefix("event:"))
                    .map(str::trim);
                let data: String = event
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .collect::<Vec<_>>()
                    .join("\n");
                match kind {
                    Some("data") => {
                        let values: Vec<String> =
                            serde_json::from_str(&data).expect("an SSE data event is a JSON array");
                        pending.extend(values);
                    }
                    Some("control") => {
                        let control: serde_json::Value =
                            serde_json::from_str(&data).expect("an SSE control event is JSON");
                        if let Some(next) = control["streamNextOffset"].as_str() {
                            offset = next.to_string();
                        }
                        seen.lock().append(&mut pending);
                    }
                    _ => {}
                }
            }
        }
    }
}

/// Exactly-once producers on streams `fleet-0` … `fleet-{count-1}`.
pub struct Producers {
    pub stop: Arc<AtomicBool>,
    pub tallies: Vec<Arc<Mutex<Tally>>>,
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Creates the streams `fleet-0` … and starts [`Producers`] on them,
/// appending through `bases` until their `stop`.
pub async fn start_producers(bases: &[String], count: usize) -> Producers {
    let client = client();
    for p in 0..count {
        create(&client, bases, &format!("fleet-{p}")).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let tallies: Vec<Arc<Mutex<Tally>>> = (0..count).map(|_| Arc::default()).collect();
    let tasks = (0..count)
        .map(|p| {
            tokio::spawn(produce(
                bases.to_vec(),
                format!("fleet-{p}"),
                tallies[p].clone(),
                stop.clone(),
            ))
        })
        .collect();
    Producers {
        stop,
        tallies,
        tasks,
    }
}
