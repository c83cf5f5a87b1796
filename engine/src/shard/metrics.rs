//! A shard's running counts for operators: WAL PUTs (how many, their bytes,
//! records and latency), failures, fences, claims, seals and their latency.
//! The actor writes them with relaxed atomics as things happen; readers take
//! a [`ShardMetricsSnapshot`] (`Shard::metrics`) whenever they like. Nothing
//! here is read back by the engine: the counts steer nothing.
//!
//! Counters only grow for the life of the process (a reopen keeps them);
//! gauges (queue depth, PUTs in flight, unsealed bytes) are read at snapshot
//! time. Latencies go into fixed buckets ([`LATENCY_BOUNDS_MS`]), the same
//! for every shard, so a dashboard can sum them across shards.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency buckets, in milliseconds (a last, unbounded
/// bucket follows).
pub const LATENCY_BOUNDS_MS: [f64; 14] = [
    1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 5_000.0, 10_000.0,
];

/// A latency histogram over fixed bucket bounds (milliseconds), written
/// with relaxed atomics: observing takes no lock.
#[derive(Debug)]
pub struct LatencyHistogram {
    bounds_ms: &'static [f64],
    /// Observations at or under each bound, not cumulated (the last slot:
    /// over every bound).
    buckets: Box<[AtomicU64]>,
    sum_us: AtomicU64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new(&LATENCY_BOUNDS_MS)
    }
}

impl LatencyHistogram {
    /// A histogram over `bounds_ms`, ascending.
    pub fn new(bounds_ms: &'static [f64]) -> Self {
        debug_assert!(bounds_ms.windows(2).all(|w| w[0] < w[1]));
        LatencyHistogram {
            bounds_ms,
            buckets: (0..=bounds_ms.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_us: AtomicU64::new(0),
        }
    }

    pub fn observe(&self, took: Duration) {
        let ms = took.as_secs_f64() * 1_000.0;
        let bucket = self
            .bounds_ms
            .iter()
            .position(|bound| ms <= *bound)
            .unwrap_or(self.bounds_ms.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.sum_us.fetch_add(us, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut cumulative = 0;
        let buckets = self.buckets[..self.bounds_ms.len()]
            .iter()
            .map(|b| {
                cumulative += b.load(Ordering::Relaxed);
                cumulative
            })
            .collect();
        let count = cumulative + self.buckets[self.bounds_ms.len()].load(Ordering::Relaxed);
        HistogramSnapshot {
            bounds_ms: self.bounds_ms,
            cumulative: buckets,
            count,
            sum_seconds: self.sum_us.load(Ordering::Relaxed) as f64 / 1e6,
        }
    }
}

/// A histogram as read: cumulative counts per bound, the total count and
/// the sum of observations.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    pub bounds_ms: &'static [f64],
    pub cumulative: Vec<u64>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl Default for HistogramSnapshot {
    fn default() -> Self {
        LatencyHistogram::default().snapshot()
    }
}

impl HistogramSnapshot {
    /// Per bucket as exposition formats take them: (upper bound in seconds,
    /// observations in that bucket alone), the last bound `f64::MAX`.
    pub fn per_bucket_seconds(&self) -> Vec<(f64, u64)> {
        let mut previous = 0;
        let mut buckets: Vec<(f64, u64)> = self
            .bounds_ms
            .iter()
            .zip(&self.cumulative)
            .map(|(bound_ms, cumulative)| {
                let in_bucket = cumulative - previous;
                previous = *cumulative;
                (bound_ms / 1_000.0, in_bucket)
            })
            .collect();
        buckets.push((f64::MAX, self.count - previous));
        buckets
    }
}

/// What the actor counts (see the module header).
#[derive(Debug, Default)]
pub(crate) struct ShardMetrics {
    pub wal_puts: AtomicU64,
    pub wal_put_bytes: AtomicU64,
    pub wal_put_failures: AtomicU64,
    pub wal_records: AtomicU64,
    pub wal_put_latency: LatencyHistogram,
    pub puts_in_flight: AtomicU64,
    /// Encoded bytes of the objects in flight, and bytes staged or in
    /// flight (the ingest's memory).
    pub inflight_bytes: AtomicU64,
    pub pending_bytes: AtomicU64,
    /// The owner's epoch, the manifest's replay slot (the oldest WAL object a
    /// re-open reads) and the next slot a WAL object takes.
    pub epoch: AtomicU64,
    pub replay_slot: AtomicU64,
    pub next_slot: AtomicU64,
    pub seals: AtomicU64,
    pub seal_failures: AtomicU64,
    pub seal_latency: LatencyHistogram,
    pub fences: AtomicU64,
    pub claims: AtomicU64,
}

impl ShardMetrics {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// A shard's counts and gauges at one moment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShardMetricsSnapshot {
    /// WAL objects written (acknowledged by the store).
    pub wal_puts: u64,
    /// Encoded bytes of those objects' entries.
    pub wal_put_bytes: u64,
    /// WAL PUTs that failed (after the store retries), collided or were fenced.
    pub wal_put_failures: u64,
    /// Records the written objects carried.
    pub wal_records: u64,
    /// From issue to the store's answer, written PUTs only.
    pub wal_put_latency: HistogramSnapshot,
    /// WAL PUTs issued and not yet answered.
    pub puts_in_flight: u64,
    /// Encoded bytes of the objects in flight.
    pub inflight_bytes: u64,
    /// Bytes staged or in flight.
    pub pending_bytes: u64,
    /// The owner's epoch, the manifest's replay slot and the next WAL slot.
    pub epoch: u64,
    pub replay_slot: u64,
    pub next_slot: u64,
    /// Commands waiting in the ingest queue.
    pub queue_depth: u64,
    /// Page bytes acknowledged and not yet sealed (held in memory).
    pub unsealed_bytes: u64,
    /// Seals that landed, seals that did not.
    pub seals: u64,
    pub seal_failures: u64,
    /// From the seal's start to its manifest landing (landed seals only).
    pub seal_latency: HistogramSnapshot,
    /// Objects garbage collection deleted.
    pub gc_deleted_objects: u64,
    /// Times this process's owner was fenced by a newer one.
    pub fences: u64,
    /// Claims (opens and re-opens, each a new epoch) by this process.
    pub claims: u64,
}

impl ShardMetrics {
    pub(crate) fn snapshot(&self) -> ShardMetricsSnapshot {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ShardMetricsSnapshot {
            wal_puts: load(&self.wal_puts),
            wal_put_bytes: load(&self.wal_put_bytes),
            wal_put_failures: load(&self.wal_put_failures),
            wal_records: load(&self.wal_records),
            wal_put_latency: self.wal_put_latency.snapshot(),
            puts_in_flight: load(&self.puts_in_flight),
            inflight_bytes: load(&self.inflight_bytes),
            pending_bytes: load(&self.pending_bytes),
            epoch: load(&self.epoch),
            replay_slot: load(&self.replay_slot),
            next_slot: load(&self.next_slot),
            seals: load(&self.seals),
            seal_failures: load(&self.seal_failures),
            seal_latency: self.seal_latency.snapshot(),
            fences: load(&self.fences),
            claims: load(&self.claims),
            ..ShardMetricsSnapshot::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_count_everything() {
        let h = LatencyHistogram::default();
        for ms in [0, 1, 3, 30, 20_000] {
            h.observe(Duration::from_millis(ms));
        }
        let s = h.snapshot();
        assert_eq!(s.count, 5);
        assert_eq!(s.cumulative[0], 2, "0 and 1 ms are at or under 1 ms");
        assert_eq!(s.cumulative[2], 3, "3 ms is under 5 ms");
        assert_eq!(s.cumulative[5], 4, "30 ms is under 50 ms");
        assert_eq!(
            s.cumulative[LATENCY_BOUNDS_MS.len() - 1],
            4,
            "20 s is over every bound"
        );
        assert!((s.sum_seconds - 20.034).abs() < 1e-9);
        let per_bucket = s.per_bucket_seconds();
        assert_eq!(per_bucket.len(), LATENCY_BOUNDS_MS.len() + 1);
        assert_eq!(per_bucket.iter().map(|(_, n)| n).sum::<u64>(), 5);
        assert_eq!(per_bucket[0], (0.001, 2));
        assert_eq!(per_bucket[LATENCY_BOUNDS_MS.len()], (f64::MAX, 1));
    }
}
