//! Peak RSS of one run: a background thread samples `VmRSS` of
//! `/proc/self/status` every 5 ms until stopped.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::bench::harness::proc_status_bytes;

const RSS_SAMPLE_EVERY: Duration = Duration::from_millis(5);

/// Samples this process's RSS in the background until stopped.
pub(super) struct RssSampler {
    pub(super) start_bytes: u64,
    pub(super) peak_bytes: Arc<AtomicU64>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) thread: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    pub(super) fn start() -> RssSampler {
        let start_bytes = proc_status_bytes("VmRSS:");
        let peak_bytes = Arc::new(AtomicU64::new(start_bytes));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let peak_bytes = peak_bytes.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("rss-sampler".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        peak_bytes.fetch_max(proc_status_bytes("VmRSS:"), Ordering::Relaxed);
                        std::thread::sleep(RSS_SAMPLE_EVERY);
                    }
                })
                .ok()
        };
        RssSampler {
            start_bytes,
            peak_bytes,
            stop,
            thread,
        }
    }

    pub(super) fn stop(mut self) -> RssPeak {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let last = proc_status_bytes("VmRSS:");
        RssPeak {
            start_bytes: self.start_bytes,
            peak_bytes: self.peak_bytes.load(Ordering::Relaxed).max(last),
        }
    }
}

/// What an [`RssSampler`] saw.
#[derive(Debug, Clone, Copy)]
pub(super) struct RssPeak {
    pub(super) start_bytes: u64,
    pub(super) peak_bytes: u64,
}

impl RssPeak {
    pub(super) fn growth_bytes(&self) -> u64 {
        self.peak_bytes.saturating_sub(self.start_bytes)
    }
}
