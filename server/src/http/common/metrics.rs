//! `GET /metrics`: the server's metrics in the OpenMetrics text format
//! (which Prometheus scrapes), encoded by `prometheus-client`.
//!
//! Two kinds of metric:
//! * the HTTP layer's own, counted as requests finish
//!   ([`HttpMetrics::finished`]): requests by surface, method and status
//!   class, and their latency by surface (until the response's head, so a
//!   long-poll counts its wait and an SSE stream only its start). The label
//!   sets are closed, so every series is a preallocated atomic: counting a
//!   request takes no lock and allocates nothing;
//! * read at scrape time ([`ShardCollector`]): every owned shard's counts and
//!   gauges from the engine (`Shard::metrics`), and the live connections.
//!
//! Label values come from closed sets: surfaces, methods, status classes and
//! shard names (fixed by the store's topology). No stream or collection name
//! is ever a label. Project names are, for the per-project families
//! ([`ProjectCollector`]), but only the [`PROJECT_SERIES_MAX`] projects with
//! the most appended bytes: the others are summed under `project="_other"`
//! (a name no project can have), so the number of series is bounded by the
//! configuration, not by the traffic.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Method, StatusCode};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use strata_engine::shard::metrics::{HistogramSnapshot, LatencyHistogram, ShardMetricsSnapshot};
use strata_engine::shard::ChunkCache;

use crate::service::Streams;

/// The content type of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Upper bounds of the request-latency buckets, in milliseconds.
const REQUEST_BOUNDS_MS: [f64; 15] = [
    0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 1_000.0, 2_500.0, 10_000.0,
    30_000.0,
];

/// Which part of the API a request is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    Raw,
    Product,
    Subscriptions,
    Fleet,
    Operations,
    Other,
}

const SURFACES: [Surface; 6] = [
    Surface::Raw,
    Surface::Product,
    Surface::Subscriptions,
    Surface::Fleet,
    Surface::Operations,
    Surface::Other,
];

impl Surface {
    pub fn label(self) -> &'static str {
        match self {
            Surface::Raw => "raw",
            Surface::Product => "product",
            Surface::Subscriptions => "subscriptions",
            Surface::Fleet => "fleet",
            Surface::Operations => "operations",
            Surface::Other => "other",
        }
    }
}

/// The surface a path belongs to.
pub fn surface_of(path: &str) -> Surface {
    if path.starts_with("/v1/stream/__ds/") {
        Surface::Subscriptions
    } else if path.starts_with("/v1/stream/") {
        Surface::Raw
    } else if path == "/v1/streams" || path.starts_with("/v1/streams/") {
        Surface::Product
    } else if path.starts_with("/v1/fleet/") || path.starts_with("/v1/peer/") {
        Surface::Fleet
    } else if matches!(path, "/" | "/healthz" | "/metrics") {
        Surface::Operations
    } else {
        Surface::Other
    }
}

const METHODS: [&str; 7] = ["GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "other"];

fn method_index(method: &Method) -> usize {
    match *method {
        Method::GET => 0,
        Method::HEAD => 1,
        Method::POST => 2,
        Method::PUT => 3,
        Method::DELETE => 4,
        Method::OPTIONS => 5,
        _ => 6,
    }
}

/// `2xx`…`5xx`, except that 429 and 503 (the answers to overload and to an
/// unavailable store) are their own.
const STATUSES: [&str; 7] = ["1xx", "2xx", "3xx", "4xx", "429", "5xx", "503"];

fn status_index(status: StatusCode) -> usize {
    match status.as_u16() {
        429 => 4,
        503 => 6,
        100..=199 => 0,
        200..=299 => 1,
        300..=399 => 2,
        400..=499 => 3,
        _ => 5,
    }
}

const SERIES: usize = SURFACES.len() * METHODS.len() * STATUSES.len();

fn series_index(surface: Surface, method: usize, status: usize) -> usize {
    (surface as usize * METHODS.len() + method) * STATUSES.len() + status
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    surface: &'static str,
    method: &'static str,
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SurfaceLabels {
    surface: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShardLabels {
    shard: String,
}

/// The HTTP layer's counts, one atomic per series.
#[derive(Debug)]
struct RequestCounts {
    answered: Box<[AtomicU64]>,
    latency: [LatencyHistogram; SURFACES.len()],
}

/// The registry and the HTTP layer's own metrics.
pub struct HttpMetrics {
    registry: Registry,
    counts: Arc<RequestCounts>,
    chunk_cache: Arc<std::sync::OnceLock<Arc<ChunkCache>>>,
}

impl HttpMetrics {
    /// Metrics over `streams`' shards and the `live` connection count.
    pub fn new(streams: Arc<Streams>, live: Arc<AtomicUsize>) -> Self {
        let counts = Arc::new(RequestCounts {
            answered: (0..SERIES).map(|_| AtomicU64::new(0)).collect(),
            latency: std::array::from_fn(|_| LatencyHistogram::new(&REQUEST_BOUNDS_MS)),
        });
        let mut registry = Registry::with_prefix("strata");
        registry.register_collector(Box::new(RequestCollector {
            counts: counts.clone(),
            live,
        }));
        registry.register_collector(Box::new(ShardCollector {
            streams: streams.clone(),
        }));
        registry.register_collector(Box::new(super::metrics_projects::ProjectCollector {
            streams,
        }));
        let chunk_cache = Arc::new(std::sync::OnceLock::new());
        registry.register_collector(Box::new(CacheCollector {
            cache: chunk_cache.clone(),
        }));
        registry.register_collector(Box::new(PoolCollector));
        HttpMetrics {
            registry,
            counts,
            chunk_cache,
        }
    }

    /// Reports `cache` (the process's chunk cache, if it has one) from now on.
    pub fn set_chunk_cache(&self, cache: Arc<ChunkCache>) {
        let _ = self.chunk_cache.set(cache);
    }

    /// Counts a request to `surface` answered with `status` after `took`.
    pub fn finished(&self, surface: Surface, method: &Method, status: StatusCode, took: Duration) {
        let series = series_index(surface, method_index(method), status_index(status));
        self.counts.answered[series].fetch_add(1, Ordering::Relaxed);
        self.counts.latency[surface as usize].observe(took);
    }

    /// The exposition, as of now.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail; a metric that could not encode
        // would be a bug in this module.
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "metrics did not encode");
        }
        out
    }
}

/// Encodes the HTTP layer's counts (series never seen are left out).
struct RequestCollector {
    counts: Arc<RequestCounts>,
    live: Arc<AtomicUsize>,
}

impl std::fmt::Debug for RequestCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestCollector").finish_non_exhaustive()
    }
}

impl Collector for RequestCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(
            "http_requests",
            "Requests answered, by surface, method and status class",
            None,
            MetricType::Counter,
        )?;
        for surface in SURFACES {
            for (m, method) in METHODS.iter().enumerate() {
                for (s, status) in STATUSES.iter().enumerate() {
                    let n =
                        self.counts.answered[series_index(surface, m, s)].load(Ordering::Relaxed);
                    if n == 0 {
                        continue;
                    }
                    let labels = RequestLabels {
                        surface: surface.label(),
                        method,
                        status,
                    };
                    ConstCounter::new(n).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        let mut family = encoder.encode_descriptor(
            "http_request_duration_seconds",
            "Time from a request's arrival to its response's head, by surface",
            None,
            MetricType::Histogram,
        )?;
        for surface in SURFACES {
            let h = self.counts.latency[surface as usize].snapshot();
            if h.count == 0 {
                continue;
            }
            let labels = SurfaceLabels {
                surface: surface.label(),
            };
            encode_histogram(family.encode_family(&labels)?, &h)?;
        }
        let live = self.live.load(Ordering::Relaxed);
        ConstGauge::new(live as i64).encode(encoder.encode_descriptor(
            "http_live_connections",
            "Open long-poll and SSE requests",
            None,
            MetricType::Gauge,
        )?)
    }
}

fn encode_histogram(
    mut encoder: prometheus_client::encoding::MetricEncoder,
    h: &HistogramSnapshot,
) -> Result<(), std::fmt::Error> {
    encoder.encode_histogram::<NoLabelSet>(h.sum_seconds, h.count, &h.per_bucket_seconds(), None)
}

/// The chunk cache's counts (shared by every shard of the process).
#[derive(Debug)]
struct CacheCollector {
    cache: Arc<std::sync::OnceLock<Arc<ChunkCache>>>,
}

impl Collector for CacheCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(cache) = self.cache.get() else {
            return Ok(());
        };
        let counts = cache.counts();
        let mut family = encoder.encode_descriptor(
            "chunk_cache_lookups",
            "Sealed chunks readers asked for, by where they were found (memory, disk, store)",
            None,
            MetricType::Counter,
        )?;
        for (found, n) in [
            ("memory", counts.memory_hits),
            ("disk", counts.disk_hits),
            ("store", counts.misses),
        ] {
            ConstCounter::new(n).encode(family.encode_family(&[("found", found)])?)?;
        }
        ConstGauge::new(counts.used_bytes as i64).encode(encoder.encode_descriptor(
            "chunk_cache_bytes",
            "Bytes the local chunk cache holds",
            None,
            MetricType::Gauge,
        )?)
    }
}

/// The local-directory store's pools of reusable files (process-wide;
/// nothing when no local store is open).
#[derive(Debug)]
struct PoolCollector;

impl Collector for PoolCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let counts = strata_engine::store::pool_counts();
        if counts.stores == 0 {
            return Ok(());
        }
        let mut family = encoder.encode_descriptor(
            "local_store_created_files",
            "Create-only puts on the local store, by where their file came from: a pooled file or a new one",
            None,
            MetricType::Counter,
        )?;
        for (from, n) in [("pool", counts.reused), ("new", counts.created)] {
            ConstCounter::new(n).encode(family.encode_family(&[("from", from)])?)?;
        }
        ConstCounter::new(counts.pooled).encode(encoder.encode_descriptor(
            "local_store_pooled_files",
            "Deletes on the local store that kept the file for reuse",
            None,
            MetricType::Counter,
        )?)?;
        ConstCounter::new(counts.spares).encode(encoder.encode_descriptor(
            "local_store_spare_files",
            "Empty files made ahead for reuse while deletes had not filled the pool",
            None,
            MetricType::Counter,
        )?)?;
        ConstGauge::new(counts.files as i64).encode(encoder.encode_descriptor(
            "local_store_pool_files",
            "Files waiting in the local store's pools",
            None,
            MetricType::Gauge,
        )?)
    }
}

/// Reads the engine's counts of every owned shard at scrape time.
struct ShardCollector {
    streams: Arc<Streams>,
}

impl std::fmt::Debug for ShardCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardCollector").finish_non_exhaustive()
    }
}

type ShardRow = (ShardLabels, ShardMetricsSnapshot);

/// One counter or gauge per shard.
struct Scalar {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    value: fn(&ShardMetricsSnapshot) -> u64,
}

const SCALARS: [Scalar; 12] = [
    Scalar {
        name: "wal_puts",
        help: "WAL objects written",
        kind: MetricType::Counter,
        value: |m| m.wal_puts,
    },
    Scalar {
        name: "wal_put_bytes",
        help: "Encoded entry bytes of the WAL objects written",
        kind: MetricType::Counter,
        value: |m| m.wal_put_bytes,
    },
    Scalar {
        name: "wal_put_failures",
        help: "WAL PUTs that failed after retries, collided or were fenced",
        kind: MetricType::Counter,
        value: |m| m.wal_put_failures,
    },
    Scalar {
        name: "wal_records",
        help: "Records carried by the WAL objects written",
        kind: MetricType::Counter,
        value: |m| m.wal_records,
    },
    Scalar {
        name: "wal_puts_in_flight",
        help: "WAL PUTs issued and not yet answered (pipeline occupancy)",
        kind: MetricType::Gauge,
        value: |m| m.puts_in_flight,
    },
    Scalar {
        name: "shard_queue_depth",
        help: "Commands waiting in the shard's ingest queue",
        kind: MetricType::Gauge,
        value: |m| m.queue_depth,
    },
    Scalar {
        name: "shard_unsealed_bytes",
        help: "Durable page bytes held in memory until a seal",
        kind: MetricType::Gauge,
        value: |m| m.unsealed_bytes,
    },
    Scalar {
        name: "seals",
        help: "Seals that landed",
        kind: MetricType::Counter,
        value: |m| m.seals,
    },
    Scalar {
        name: "seal_failures",
        help: "Seals that failed, were fenced or ended with an unknown outcome",
        kind: MetricType::Counter,
        value: |m| m.seal_failures,
    },
    Scalar {
        name: "gc_deleted_objects",
        help: "Objects garbage collection deleted",
        kind: MetricType::Counter,
        value: |m| m.gc_deleted_objects,
    },
    Scalar {
        name: "shard_fences",
        help: "Times this process's owner of the shard was fenced by a newer one",
        kind: MetricType::Counter,
        value: |m| m.fences,
    },
    Scalar {
        name: "shard_claims",
        help: "Claims of the shard by this process (opens and re-opens)",
        kind: MetricType::Counter,
        value: |m| m.claims,
    },
];

fn encode_histograms(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: &[ShardRow],
    pick: fn(&ShardMetricsSnapshot) -> &HistogramSnapshot,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, snapshot) in rows {
        encode_histogram(family.encode_family(labels)?, pick(snapshot))?;
    }
    Ok(())
}

impl Collector for ShardCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows: Vec<ShardRow> = self
            .streams
            .router()
            .owned()
            .into_iter()
            .map(|(_, shard)| {
                let labels = ShardLabels {
                    shard: shard.name().to_string(),
                };
                (labels, shard.metrics())
            })
            .collect();
        for scalar in &SCALARS {
            let mut family =
                encoder.encode_descriptor(scalar.name, scalar.help, None, scalar.kind)?;
            for (labels, snapshot) in &rows {
                let value = (scalar.value)(snapshot);
                let metric = family.encode_family(labels)?;
                match scalar.kind {
                    MetricType::Counter => ConstCounter::new(value).encode(metric)?,
                    _ => ConstGauge::new(value as i64).encode(metric)?,
                }
            }
        }
        encode_histograms(
            &mut encoder,
            "wal_put_duration_seconds",
            "WAL PUTs written, from issue to the store's answer",
            &rows,
            |m| &m.wal_put_latency,
        )?;
        encode_histograms(
            &mut encoder,
            "seal_duration_seconds",
            "Seals that landed, from start to the manifest write",
            &rows,
            |m| &m.seal_latency,
        )
    }
}
