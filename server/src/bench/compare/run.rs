//! One `strata bench compare`: every workload on both engines in each round,
//! the rounds alternating which engine goes first, then the rows of the
//! report (median and spread per figure, Strata over SlateDB).

use std::time::{Duration, Instant};

use super::args::{CompareBench, EngineKind};
use super::context::Context;
use super::report::{
    print_report, CompareReport, EnginePeak, Metric, PeakTracker, Row, Samples, Spread, RSS_METRIC,
};
use super::rss::RssSampler;
use super::workload::{run_workload, workloads};
use crate::bench::error::BenchError;
use crate::bench::harness::{proc_status_bytes, LoadWindow};
use crate::bench::slatedb::SlateTuning;

/// Runs the comparison on a multi-thread runtime and prints its report.
pub(super) fn compare(args: &CompareBench) -> Result<(), BenchError> {
    if args.rounds == 0 || args.seconds <= 0.0 || args.warmup_seconds < 0.0 {
        return Err(BenchError::Usage(
            "rounds and seconds must be positive".into(),
        ));
    }
    if args.appenders.contains(&0) || args.record_bytes == 0 {
        return Err(BenchError::Usage(
            "appenders and record bytes must be positive".into(),
        ));
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let report = runtime.block_on(run(args))?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

pub(super) async fn run(args: &CompareBench) -> Result<CompareReport, BenchError> {
    let started = Instant::now();
    let context = Context {
        args,
        tuning: SlateTuning {
            flush_interval_ms: args.slatedb_flush_interval_ms,
            l0_sst_size_bytes: args.slatedb_l0_sst_size_bytes,
            manifest_poll_interval_ms: args.slatedb_manifest_poll_interval_ms,
            scan_read_ahead_bytes: args.slatedb_scan_read_ahead_bytes,
            scan_fetch_tasks: args.slatedb_scan_fetch_tasks,
        },
        window: LoadWindow {
            warmup: Duration::from_secs_f64(args.warmup_seconds),
            measured: Duration::from_secs_f64(args.seconds),
        },
    };
    let workloads = workloads(args);
    let mut samples: Vec<Samples> = workloads.iter().map(|_| Samples::default()).collect();
    let baseline_bytes = proc_status_bytes("VmRSS:");
    let mut peaks = [PeakTracker::default(); 2];
    for round in 0..args.rounds {
        let order = if round % 2 == 0 {
            [EngineKind::Strata, EngineKind::SlateDb]
        } else {
            [EngineKind::SlateDb, EngineKind::Strata]
        };
        for (workload, samples) in workloads.iter().zip(samples.iter_mut()) {
            for kind in order {
                if args.only.is_some_and(|only| only != kind) {
                    continue;
                }
                eprintln!(
                    "[compare] round {}/{}: {:?}, {}",
                    round + 1,
                    args.rounds,
                    kind,
                    workload.label()
                );
                let rss = RssSampler::start();
                let mut metrics = run_workload(&context, kind, workload).await?;
                let peak = rss.stop();
                let tracker = &mut peaks[kind as usize];
                tracker.growth_bytes = tracker.growth_bytes.max(peak.growth_bytes());
                tracker.above_baseline_bytes = tracker
                    .above_baseline_bytes
                    .max(peak.peak_bytes.saturating_sub(baseline_bytes));
                metrics.push(Metric::down(
                    RSS_METRIC,
                    peak.growth_bytes() as f64 / (1 << 20) as f64,
                ));
                for metric in &metrics {
                    eprintln!("[compare]   {:<36} {:>12.2}", metric.name, metric.value);
                }
                samples.of(kind).push(metrics);
            }
        }
    }
    let mut rows = Vec::new();
    for (workload, samples) in workloads.iter().zip(&samples) {
        let names: Vec<Metric> = samples
            .strata
            .first()
            .or(samples.slatedb.first())
            .cloned()
            .unwrap_or_default();
        for (index, metric) in names.iter().enumerate() {
            let values = |runs: &Vec<Vec<Metric>>| -> Vec<f64> {
                runs.iter()
                    .filter_map(|m| m.get(index))
                    .map(|m| m.value)
                    .collect()
            };
            let strata = Spread::of(&values(&samples.strata));
            let slatedb = Spread::of(&values(&samples.slatedb));
            let ratio = match (strata, slatedb) {
                (Some(a), Some(b)) if b.median != 0.0 => Some(a.median / b.median),
                _ => None,
            };
            rows.push(Row {
                workload: workload.label(),
                appenders: workload.appenders(),
                metric: metric.name,
                higher_is_better: metric.higher_is_better,
                strata,
                slatedb,
                strata_over_slatedb: ratio,
            });
        }
    }
    Ok(CompareReport {
        mode: if args.sweep { "sweep" } else { "compare" },
        rounds: args.rounds,
        measured_s: args.seconds,
        warmup_s: args.warmup_seconds,
        put_latency_ms: args.put_latency_ms,
        get_latency_ms: args.get_latency_ms,
        store: "object_store InMemory behind request counting and an emulated latency",
        slatedb_version: "0.18",
        slatedb: context.tuning,
        strata_pipeline_depth: args.strata_pipeline_depth,
        rows,
        rss_process_baseline_bytes: baseline_bytes,
        peak_rss: [EngineKind::Strata, EngineKind::SlateDb]
            .into_iter()
            .map(|engine| EnginePeak {
                engine,
                rss_peak_above_process_baseline_bytes: peaks[engine as usize].above_baseline_bytes,
                rss_peak_above_run_start_bytes: peaks[engine as usize].growth_bytes,
            })
            .collect(),
        wall_s: started.elapsed().as_secs_f64(),
    })
}
