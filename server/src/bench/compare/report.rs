//! The figures of `strata bench compare` and their report: per-run metrics,
//! their median and spread over the rounds, peak RSS per engine, printed as a
//! table or one JSON object.

use super::args::EngineKind;
use crate::bench::slatedb::SlateTuning;

/// One figure a run produced.
#[derive(Debug, Clone, Copy)]
pub(super) struct Metric {
    pub(super) name: &'static str,
    pub(super) higher_is_better: bool,
    pub(super) value: f64,
}

impl Metric {
    pub(super) fn up(name: &'static str, value: f64) -> Metric {
        Metric {
            name,
            higher_is_better: true,
            value,
        }
    }

    pub(super) fn down(name: &'static str, value: f64) -> Metric {
        Metric {
            name,
            higher_is_better: false,
            value,
        }
    }
}

pub(super) const RSS_METRIC: &str = "peak RSS above the run's start, MiB";

/// Median and range of one figure over the rounds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub(super) struct Spread {
    pub(super) median: f64,
    pub(super) min: f64,
    pub(super) max: f64,
    pub(super) runs: usize,
}

impl Spread {
    pub(super) fn of(values: &[f64]) -> Option<Spread> {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = match n {
            0 => return None,
            _ if n % 2 == 1 => sorted[n / 2],
            _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
        };
        Some(Spread {
            median,
            min: sorted[0],
            max: sorted[n - 1],
            runs: n,
        })
    }
}

/// One line of the comparison.
#[derive(Debug, serde::Serialize)]
pub(super) struct Row {
    pub(super) workload: String,
    pub(super) appenders: Option<usize>,
    pub(super) metric: &'static str,
    pub(super) higher_is_better: bool,
    pub(super) strata: Option<Spread>,
    pub(super) slatedb: Option<Spread>,
    /// Strata's median over SlateDB's.
    pub(super) strata_over_slatedb: Option<f64>,
}

#[derive(Debug, serde::Serialize)]
pub(super) struct EnginePeak {
    pub(super) engine: EngineKind,
    /// Highest RSS sample during the engine's runs minus the RSS before
    /// the first run of the process.
    pub(super) rss_peak_above_process_baseline_bytes: u64,
    /// Highest growth within one run (peak minus the run's first sample).
    pub(super) rss_peak_above_run_start_bytes: u64,
}

#[derive(Debug, serde::Serialize)]
pub(super) struct CompareReport {
    pub(super) mode: &'static str,
    pub(super) rounds: usize,
    pub(super) measured_s: f64,
    pub(super) warmup_s: f64,
    pub(super) put_latency_ms: u64,
    pub(super) get_latency_ms: u64,
    pub(super) store: &'static str,
    pub(super) slatedb_version: &'static str,
    pub(super) slatedb: SlateTuning,
    pub(super) strata_pipeline_depth: usize,
    pub(super) rows: Vec<Row>,
    pub(super) rss_process_baseline_bytes: u64,
    pub(super) peak_rss: Vec<EnginePeak>,
    pub(super) wall_s: f64,
}

/// The runs of one workload, per engine.
#[derive(Default)]
pub(super) struct Samples {
    pub(super) strata: Vec<Vec<Metric>>,
    pub(super) slatedb: Vec<Vec<Metric>>,
}

impl Samples {
    pub(super) fn of(&mut self, kind: EngineKind) -> &mut Vec<Vec<Metric>> {
        match kind {
            EngineKind::Strata => &mut self.strata,
            EngineKind::SlateDb => &mut self.slatedb,
        }
    }
}

/// Highest RSS figures of one engine over its runs.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct PeakTracker {
    pub(super) above_baseline_bytes: u64,
    pub(super) growth_bytes: u64,
}

fn format_spread(spread: Option<Spread>) -> String {
    match spread {
        None => "-".into(),
        Some(s) if s.runs == 1 => format_value(s.median),
        Some(s) => format!(
            "{} ({}–{})",
            format_value(s.median),
            format_value(s.min),
            format_value(s.max)
        ),
    }
}

fn format_value(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude >= 1000.0 {
        let whole = value.round() as i64;
        let digits = whole.unsigned_abs().to_string();
        let mut grouped = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                grouped.push(',');
            }
            grouped.push(c);
        }
        if whole < 0 {
            format!("-{grouped}")
        } else {
            grouped
        }
    } else if magnitude >= 100.0 {
        format!("{value:.0}")
    } else if magnitude >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

pub(super) fn print_report(report: &CompareReport) {
    println!(
        "strata bench compare ({}): {} round(s), {} s measured after {} s warm-up per append run, \
         PUT latency {} ms, GET latency {} ms on reads and re-opens; {}",
        report.mode,
        report.rounds,
        report.measured_s,
        report.warmup_s,
        report.put_latency_ms,
        report.get_latency_ms,
        report.store
    );
    println!(
        "SlateDB {}: flush_interval {} ms, l0_sst_size_bytes {}, manifest_poll_interval {} ms, \
         scans: read-ahead {} B, {} fetch tasks, DurabilityLevel::Remote; Strata: ShardConfig defaults, pipeline depth {}",
        report.slatedb_version,
        report.slatedb.flush_interval_ms,
        report.slatedb.l0_sst_size_bytes,
        report.slatedb.manifest_poll_interval_ms,
        report.slatedb.scan_read_ahead_bytes,
        report.slatedb.scan_fetch_tasks,
        report.strata_pipeline_depth
    );
    println!();
    println!("| workload | metric | Strata, median (min–max) | SlateDB, median (min–max) | Strata ÷ SlateDB |");
    println!("| --- | --- | ---: | ---: | ---: |");
    for row in &report.rows {
        let arrow = if row.higher_is_better { "↑" } else { "↓" };
        println!(
            "| {} | {} {arrow} | {} | {} | {} |",
            row.workload,
            row.metric,
            format_spread(row.strata),
            format_spread(row.slatedb),
            row.strata_over_slatedb
                .map_or("-".into(), |r| format!("{r:.2}×"))
        );
    }
    println!();
    let mib = |bytes: u64| bytes as f64 / (1 << 20) as f64;
    for peak in &report.peak_rss {
        println!(
            "peak RSS, {:?}: {:.0} MiB above the process baseline ({:.0} MiB before the first run), \
             {:.0} MiB above the start of one run (highest over its runs)",
            peak.engine,
            mib(peak.rss_peak_above_process_baseline_bytes),
            mib(report.rss_process_baseline_bytes),
            mib(peak.rss_peak_above_run_start_bytes)
        );
    }
    println!("wall time {:.0} s", report.wall_s);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_and_formats() {
        let spread = Spread::of(&[3.0, 1.0, 2.0]).unwrap();
        assert_eq!((spread.median, spread.min, spread.max), (2.0, 1.0, 3.0));
        assert_eq!(Spread::of(&[1.0, 2.0]).unwrap().median, 1.5);
        assert!(Spread::of(&[]).is_none());
        assert_eq!(format_value(36_469.4), "36,469");
        assert_eq!(format_value(25.654), "25.7");
        assert_eq!(format_value(1.234), "1.23");
    }
}
