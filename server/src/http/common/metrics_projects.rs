//! The per-project families of `/metrics`: appends admitted and their bytes,
//! refusals by limit and live readers (this server's counts since start),
//! and stored bytes (the shards this server serves: a fleet's total is the
//! sum over its members; pages count until sealed, then their chunks, so the
//! figure grows a little at a seal).
//!
//! Bounded: only the [`PROJECT_SERIES_MAX`] projects with the most appended
//! bytes (then stored bytes) have series of their own; the rest are summed
//! under `project="_other"`.

use std::collections::HashMap;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::service::admission::{LimitKind, ProjectCounts};
use crate::service::Streams;

/// Projects with series of their own.
pub const PROJECT_SERIES_MAX: usize = 100;
/// The label of every other project's sum (project names start with a
/// letter or digit).
const OTHER: &str = "_other";

/// One project's row.
#[derive(Debug, Clone, Default)]
struct Row {
    counts: ProjectCounts,
    stored_bytes: u64,
}

impl Row {
    fn add(&mut self, other: &Row) {
        let (a, b) = (&mut self.counts, &other.counts);
        a.appends += b.appends;
        a.append_bytes += b.append_bytes;
        a.live_readers += b.live_readers;
        for (mine, theirs) in a.refused.iter_mut().zip(b.refused) {
            *mine += theirs;
        }
        self.stored_bytes += other.stored_bytes;
    }
}

/// Reads the per-project counts at scrape time.
pub struct ProjectCollector {
    pub streams: Arc<Streams>,
}

impl std::fmt::Debug for ProjectCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProjectCollector").finish_non_exhaustive()
    }
}

impl ProjectCollector {
    /// The rows to show: the largest projects, then `_other`.
    fn rows(&self) -> Vec<Row> {
        let mut rows: HashMap<String, Row> = HashMap::new();
        for counts in self.streams.admission().project_counts() {
            let project = counts.project.clone();
            rows.entry(project).or_default().counts = counts;
        }
        for (_, shard) in self.streams.router().owned() {
            for (account, usage) in shard.usage_by_account() {
                let Ok(project) = std::str::from_utf8(&account) else {
                    continue;
                };
                if project.is_empty() {
                    continue;
                }
                let row = rows.entry(project.to_string()).or_default();
                row.counts.project = project.to_string();
                row.stored_bytes += usage.stored_bytes;
            }
        }
        let mut rows: Vec<Row> = rows.into_values().collect();
        rows.sort_by(|a, b| {
            (b.counts.append_bytes, b.stored_bytes).cmp(&(a.counts.append_bytes, a.stored_bytes))
        });
        if rows.len() > PROJECT_SERIES_MAX {
            let mut other = Row::default();
            for row in rows.drain(PROJECT_SERIES_MAX..) {
                other.add(&row);
            }
            other.counts.project = OTHER.to_string();
            rows.push(other);
        }
        rows
    }
}

/// A per-project family.
struct Family {
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    value: fn(&Row) -> u64,
}

const FAMILIES: [Family; 4] = [
    Family {
        name: "project_append_requests",
        help: "Append requests admitted (both surfaces), by project",
        kind: MetricType::Counter,
        value: |r| r.counts.appends,
    },
    Family {
        name: "project_append_bytes",
        help: "Body bytes of the append requests admitted, by project",
        kind: MetricType::Counter,
        value: |r| r.counts.append_bytes,
    },
    Family {
        name: "project_live_readers",
        help: "Long-polls and SSE streams open on this server, by project",
        kind: MetricType::Gauge,
        value: |r| r.counts.live_readers,
    },
    Family {
        name: "project_stored_bytes",
        help: "Bytes the project's streams hold in the store, on the shards this server serves",
        kind: MetricType::Gauge,
        value: |r| r.stored_bytes,
    },
];

impl Collector for ProjectCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows = self.rows();
        for family in &FAMILIES {
            let mut encoded =
                encoder.encode_descriptor(family.name, family.help, None, family.kind)?;
            for row in &rows {
                let value = (family.value)(row);
                let labels = [("project", row.counts.project.as_str())];
                let metric = encoded.encode_family(&labels)?;
                match family.kind {
                    MetricType::Counter => ConstCounter::new(value).encode(metric)?,
                    _ => ConstGauge::new(value as i64).encode(metric)?,
                }
            }
        }
        let mut refused = encoder.encode_descriptor(
            "project_refusals",
            "Requests refused by a project limit (429), by project and limit",
            None,
            MetricType::Counter,
        )?;
        for row in &rows {
            for kind in LimitKind::ALL {
                let n = row.counts.refused[kind as usize];
                if n == 0 {
                    continue;
                }
                let labels = [
                    ("project", row.counts.project.as_str()),
                    ("limit", kind.name()),
                ];
                ConstCounter::new(n).encode(refused.encode_family(&labels)?)?;
            }
        }
        Ok(())
    }
}
