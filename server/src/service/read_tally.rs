//! The reads tallied in memory until the usage flush writes them to their
//! shards (see `usage`). Bounded: past [`TALLY_STREAMS_MAX`] streams a flush
//! is due at once.

use std::collections::HashMap;

use parking_lot::Mutex;
use strata_engine::StreamRef;

/// Streams the tally holds before a flush is due regardless of the interval.
pub const TALLY_STREAMS_MAX: usize = 100_000;

/// Reads of one stream since the last flush.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Pending {
    pub(super) reads: u64,
    pub(super) read_bytes: u64,
    pub(super) last_read_ms: u64,
}

/// Reads not yet written to their shards.
#[derive(Debug, Default)]
pub struct ReadTally {
    pub(super) pending: Mutex<HashMap<StreamRef, Pending>>,
    /// Wakes the flush task early (the tally is full, or the server stops).
    pub(super) wake: tokio::sync::Notify,
}

impl ReadTally {
    /// Counts a read of `stream` that returned `bytes` of payload at
    /// `now_ms` (`reads` 0: an access that read nothing, such as a wait).
    pub fn record(&self, stream: StreamRef, reads: u64, bytes: u64, now_ms: u64) {
        let mut pending = self.pending.lock();
        let full = pending.len() >= TALLY_STREAMS_MAX;
        let entry = pending.entry(stream).or_default();
        entry.reads += reads;
        entry.read_bytes += bytes;
        entry.last_read_ms = entry.last_read_ms.max(now_ms);
        if full {
            self.wake.notify_one();
        }
    }

    pub(super) fn take(&self) -> HashMap<StreamRef, Pending> {
        std::mem::take(&mut *self.pending.lock())
    }
}
