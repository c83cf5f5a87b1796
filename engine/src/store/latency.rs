//! A fixed per-call latency before PUTs and GETs (and, optionally, LIST, HEAD and
//! DELETE), for benchmarks and tests that emulate a remote object store.
//!
//! Unlike `object_store::throttle::ThrottledStore` it wraps any store, including
//! the local one (whose GETs return files, which `ThrottledStore` cannot wrap),
//! and it is precise: tokio's timer rounds every sleep up to the next
//! millisecond tick, which would turn an emulated 25 ms PUT into 25–26 ms. Waits
//! here are served by one timer thread that parks until each deadline (tens of
//! microseconds late at most). It uses real time, not tokio's (possibly paused)
//! clock; the deterministic simulation has its own fault layer.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use object_store::path::Path;
use object_store::Result;
use tokio::sync::oneshot;

use super::layer::{StoreLayer, StoreOp};

#[derive(Debug, Clone, Copy, Default)]
pub struct Latency {
    pub put: Duration,
    pub get: Duration,
    /// LIST, HEAD, DELETE and COPY.
    pub other: Duration,
}

#[async_trait]
impl StoreLayer for Latency {
    async fn before(&self, op: StoreOp, _location: Option<&Path>) -> Result<()> {
        let wait = match op {
            StoreOp::Put => self.put,
            StoreOp::Get => self.get,
            StoreOp::Head | StoreOp::List | StoreOp::Delete | StoreOp::Copy => self.other,
        };
        if !wait.is_zero() {
            precise_sleep(wait).await;
        }
        Ok(())
    }
}

struct Wake {
    deadline: Instant,
    seq: u64,
    done: oneshot::Sender<()>,
}

impl PartialEq for Wake {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}
impl Eq for Wake {}
impl PartialOrd for Wake {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Wake {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.deadline, self.seq).cmp(&(other.deadline, other.seq))
    }
}

fn timer() -> &'static std::sync::Mutex<Sender<Wake>> {
    static TIMER: OnceLock<std::sync::Mutex<Sender<Wake>>> = OnceLock::new();
    TIMER.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("strata-latency-timer".into())
            .spawn(move || run_timer(rx))
            .expect("spawn the latency timer thread");
        std::sync::Mutex::new(tx)
    })
}

// Real time on purpose: this emulates a store's latency for benchmarks.
#[allow(clippy::disallowed_methods)]
fn run_timer(requests: Receiver<Wake>) {
    let mut pending: BinaryHeap<Reverse<Wake>> = BinaryHeap::new();
    loop {
        let now = Instant::now();
        while pending.peek().is_some_and(|w| w.0.deadline <= now) {
            let Reverse(wake) = pending.pop().expect("peeked");
            let _ = wake.done.send(());
        }
        let next = match pending.peek() {
            Some(w) => requests.recv_timeout(w.0.deadline - now),
            None => requests.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match next {
            Ok(wake) => pending.push(Reverse(wake)),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Sleeps for `wait` of real time, accurate to tens of microseconds.
#[allow(clippy::disallowed_methods)]
pub async fn precise_sleep(wait: Duration) {
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let (done, rx) = oneshot::channel();
    let wake = Wake {
        deadline: Instant::now() + wait,
        seq: SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        done,
    };
    let sent = timer()
        .lock()
        .map(|tx| tx.send(wake).is_ok())
        .unwrap_or(false);
    if !sent || rx.await.is_err() {
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    #[allow(clippy::disallowed_methods)]
    async fn sleeps_about_as_long_as_asked() {
        for ms in [1u64, 5, 25] {
            let start = Instant::now();
            precise_sleep(Duration::from_millis(ms)).await;
            let took = start.elapsed();
            assert!(took >= Duration::from_millis(ms), "{ms} ms took {took:?}");
        }
    }
}
