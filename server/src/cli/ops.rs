//! `strata shard list | inspect | verify` and `strata stream inspect`:
//! operator tools over any store URL, with nothing but the bucket.
//!
//! They are read-only (GET, HEAD, LIST), so they are safe against a shard a
//! live owner holds. Output is human-readable by default and one JSON
//! document with `--json`. Exit codes: 0 healthy, 3 damage found
//! ([`EXIT_DAMAGED`]), 2 usage errors (clap's, and [`OpsError::Usage`]), 1
//! any other failure (for example a store that cannot be reached).

use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use object_store::ObjectStore;
use strata_engine::admin::repair::{
    self, RepairError, RepairOptions, RepairOutcome, RepairReport, RestoreSource,
};
use strata_engine::admin::{self as ops, Inspection, ShardSummary, StreamSummary, Verification};
use strata_engine::store::{open_store, StoreOptions};
use strata_engine::{EngineEnv, InstanceId, OsEntropy, ShardConfig, ShardName};
use strata_manifest::{CasObject, RetryPolicy};

use crate::cli::serve::S3Args;
use crate::service::registry::{Descriptor, DescriptorCodec};

/// Exit code when verification found damage.
pub const EXIT_DAMAGED: u8 = 3;

#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    #[error("store: {0}")]
    Store(#[from] strata_engine::store::StoreError),
    #[error("{0}")]
    Engine(#[from] strata_engine::EngineError),
    #[error("{0}")]
    Usage(String),
    #[error("reading {what}: {reason}")]
    Registry { what: String, reason: String },
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Repair(RepairError),
}

/// Where the shards are.
#[derive(Args, Debug, Clone)]
pub struct StoreArgs {
    /// Object store: a directory, file:///dir, memory:// or s3://bucket/prefix.
    #[arg(long, default_value = "./strata-data")]
    pub store: String,
    #[command(flatten)]
    pub s3: S3Args,
    /// Print one JSON document instead of text.
    #[arg(long, global = true)]
    pub json: bool,
}

impl StoreArgs {
    pub(super) fn open(&self) -> Result<Arc<dyn ObjectStore>, OpsError> {
        let options = StoreOptions {
            s3: self.s3.options(),
            ..StoreOptions::default()
        };
        Ok(open_store(&self.store, &options)?)
    }
}

#[derive(Subcommand, Debug)]
pub enum ShardCommand {
    /// Every shard in the store, with its owner's epoch and sizes.
    List(StoreArgs),
    /// A shard's manifest, index runs, segments, WAL range and streams.
    Inspect {
        shard: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Restores a shard with a damaged or missing manifest or index run from
    /// its newest usable retained manifest version; damaged objects are moved
    /// under quarantine/. Fences any live owner.
    Recover {
        shard: String,
        #[command(flatten)]
        repair: RepairArgs,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Restores a shard to a retained manifest version. Fences any live owner.
    Rollback {
        shard: String,
        /// The manifest version to restore (`shard inspect` lists them).
        #[arg(long)]
        to: u64,
        #[command(flatten)]
        repair: RepairArgs,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Checks every object a shard needs; exit code 3 when damage is found.
    Verify {
        shard: String,
        /// Also read and check every live chunk.
        #[arg(long)]
        deep: bool,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// How far a repair may go.
#[derive(Args, Debug, Clone)]
pub struct RepairArgs {
    /// Proceed although the shard was written recently: a live owner may hold
    /// it, and it is fenced (its clients see it unavailable until restarted).
    #[arg(long)]
    pub force: bool,
    /// Proceed although records would become unreachable (they are listed).
    #[arg(long)]
    pub accept_loss: bool,
    /// Report what would be done, change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// A shard written within this many seconds is presumed to have a live owner.
    #[arg(long, default_value_t = 60)]
    pub live_window_s: u64,
}

/// With `--force`, how long a repair waits after fencing a live owner before
/// it reads the store (a garbage collection batch in flight finishes).
const REPAIR_QUIESCE: std::time::Duration = std::time::Duration::from_secs(2);

impl RepairArgs {
    fn options(&self) -> RepairOptions {
        RepairOptions {
            force: self.force,
            accept_loss: self.accept_loss,
            dry_run: self.dry_run,
            live_window: std::time::Duration::from_secs(self.live_window_s),
            quiesce: REPAIR_QUIESCE,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum StreamCommand {
    /// A stream's descriptor and its state in its shard.
    Inspect {
        /// `<project>/<name>` (the Durable Streams routes use project `default`).
        stream: String,
        #[command(flatten)]
        store: StoreArgs,
    },
}

pub(super) fn runtime() -> Result<tokio::runtime::Runtime, OpsError> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

fn shard_name(text: &str) -> Result<ShardName, OpsError> {
    ShardName::new(text).map_err(|e| OpsError::Usage(e.to_string()))
}

pub(super) fn print_json<T: serde::Serialize>(value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("error: encoding JSON: {e}"),
    }
}

pub fn run_shard(command: ShardCommand) -> Result<ExitCode, OpsError> {
    let rt = runtime()?;
    match command {
        ShardCommand::List(store) => {
            let shards = rt.block_on(ops::list_shards(&store.open()?))?;
            if store.json {
                print_json(&shards);
            } else {
                print_list(&shards);
            }
            Ok(ExitCode::SUCCESS)
        }
        ShardCommand::Inspect { shard, store } => {
            let env = EngineEnv::production(store.open()?);
            let inspection = rt.block_on(ops::inspect(&env, &shard_name(&shard)?))?;
            if store.json {
                print_json(&inspection);
            } else {
                print_inspection(&inspection);
            }
            Ok(ExitCode::SUCCESS)
        }
        ShardCommand::Recover {
            shard,
            repair,
            store,
        } => {
            let env = EngineEnv::production(store.open()?);
            let instance = InstanceId(strata_engine::Entropy::bytes16(&OsEntropy));
            match rt.block_on(repair::recover(
                &env,
                &shard_name(&shard)?,
                instance,
                repair.options(),
            )) {
                Err(RepairError::Healthy) => {
                    if store.json {
                        print_json(&serde_json::json!({ "shard": shard, "healthy": true }));
                    } else {
                        println!("shard {shard} is healthy; nothing to recover");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => Err(OpsError::Repair(e)),
                Ok(report) => Ok(finish_repair(&report, store.json)),
            }
        }
        ShardCommand::Rollback {
            shard,
            to,
            repair,
            store,
        } => {
            let env = EngineEnv::production(store.open()?);
            let instance = InstanceId(strata_engine::Entropy::bytes16(&OsEntropy));
            let report = rt
                .block_on(repair::rollback(
                    &env,
                    &shard_name(&shard)?,
                    to,
                    instance,
                    repair.options(),
                ))
                .map_err(OpsError::Repair)?;
            Ok(finish_repair(&report, store.json))
        }
        ShardCommand::Verify { shard, deep, store } => {
            let env = EngineEnv::production(store.open()?);
            let bar = progress_bar(store.json);
            let report = {
                let bar = bar.clone();
                let progress = move |p: ops::Progress| {
                    bar.set_length(p.total);
                    bar.set_position(p.done);
                    bar.set_message(p.step);
                };
                rt.block_on(ops::verify(&env, &shard_name(&shard)?, deep, &progress))?
            };
            bar.finish_and_clear();
            if store.json {
                print_json(&report);
            } else {
                print_verification(&report);
            }
            Ok(if report.healthy() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(EXIT_DAMAGED)
            })
        }
    }
}

/// Prints a repair's report; exit 0 when it was carried out, 3 when it was
/// refused (the damage remains), 0 for a dry run.
fn finish_repair(report: &RepairReport, json: bool) -> ExitCode {
    if json {
        print_json(report);
    } else {
        match report.restored_from {
            RestoreSource::History(v) => println!(
                "shard {}: restored from retained manifest version {v}",
                report.shard
            ),
            RestoreSource::Rebuilt => println!(
                "shard {}: rebuilt from its index runs, segments and WAL",
                report.shard
            ),
            RestoreSource::Current => println!(
                "shard {}: the manifest stands; nothing restored",
                report.shard
            ),
        }
        for l in &report.unrecoverable {
            println!(
                "  DAMAGED, UNRECOVERABLE: stream {} incarnation {} offsets {}..{}",
                l.stream_id, l.incarnation, l.from, l.to
            );
        }
        for q in &report.quarantined {
            println!("  quarantined {q}");
        }
        if report.lost.is_empty() {
            println!("  no acknowledged record that is still present is lost");
        }
        for l in &report.lost {
            println!(
                "  UNRECOVERABLE: stream {} incarnation {} offsets {}..{}",
                l.stream_id, l.incarnation, l.from, l.to
            );
        }
        for c in &report.lost_changes {
            match &c.stream_id {
                Some(id) => println!(
                    "  UNDONE: stream {id} incarnation {}: {}",
                    c.incarnation, c.change
                ),
                None => println!("  UNDONE: {}", c.change),
            }
        }
        println!("  next offsets afterwards:");
        for s in &report.streams {
            println!(
                "    {} incarnation {} ({}): {}",
                s.stream_id, s.incarnation, s.status, s.next_offset
            );
        }
        match (
            &report.outcome,
            report.written_version,
            report.reopened_epoch,
        ) {
            (RepairOutcome::Refused(why), _, _) => println!("NOT DONE: {why}"),
            (RepairOutcome::DryRun, _, _) => println!("dry run: nothing written"),
            (RepairOutcome::Done, Some(v), Some(e)) => {
                println!("  wrote manifest version {v}; reopened and fenced at epoch {e}")
            }
            (RepairOutcome::Done, _, _) => {}
        }
    }
    match &report.outcome {
        RepairOutcome::Done | RepairOutcome::DryRun => ExitCode::SUCCESS,
        RepairOutcome::Refused(_) => ExitCode::from(EXIT_DAMAGED),
    }
}

/// A bar on stderr, hidden for JSON output and when stderr is not a terminal.
fn progress_bar(json: bool) -> ProgressBar {
    if json {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    if let Ok(style) = ProgressStyle::with_template("{msg:>16} [{bar:40}] {pos}/{len}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

fn print_list(shards: &[ShardSummary]) {
    if shards.is_empty() {
        println!("no shards");
        return;
    }
    println!(
        "{:<16} {:>8} {:>6} {:>12} {:>5} {:>9} {:>14}",
        "shard", "version", "epoch", "replay slot", "runs", "segments", "sealed bytes"
    );
    for s in shards {
        match &s.manifest {
            Some(m) => println!(
                "{:<16} {:>8} {:>6} {:>12} {:>5} {:>9} {:>14}",
                s.shard,
                m.version,
                m.writer_epoch,
                m.replay_slot,
                m.index_runs,
                m.segments,
                m.sealed_bytes
            ),
            None => println!(
                "{:<16} manifest unreadable: {}",
                s.shard,
                s.manifest_error.as_deref().unwrap_or("unknown")
            ),
        }
    }
}

fn print_inspection(i: &Inspection) {
    let m = &i.manifest;
    println!("shard {}", i.shard);
    println!(
        "  manifest  version {}, owner epoch {} (instance {}), next object id {}",
        m.version, m.writer_epoch, m.writer_instance, m.next_object_id
    );
    println!(
        "  WAL       replay from slot {}, {} object(s) listed ({}), next free slot {}; walk applied {}, skipped {}",
        m.replay_slot,
        i.wal.objects,
        match (i.wal.first_slot, i.wal.last_slot) {
            (Some(a), Some(b)) => format!("slots {a}..={b}"),
            _ => "none".into(),
        },
        i.wal.end_slot,
        i.wal.applied,
        i.wal.skipped
    );
    println!("  index runs ({}):", i.index_runs.len());
    for r in &i.index_runs {
        println!("    {}  {} bytes, epoch {}", r.path, r.bytes, r.epoch);
    }
    println!("  segments ({}):", i.segments.len());
    for s in &i.segments {
        println!("    {}  {} bytes, epoch {}", s.path, s.bytes, s.epoch);
    }
    let windows: Vec<String> = i
        .fence_windows
        .iter()
        .map(|(a, b)| format!("{a}..{b}"))
        .collect();
    println!("  fence windows: {}", windows.join(", "));
    println!(
        "  retained manifest versions: {}",
        match (i.retained_versions.first(), i.retained_versions.last()) {
            (Some(a), Some(b)) => format!("{} ({a}..={b})", i.retained_versions.len()),
            _ => "none".into(),
        }
    );
    println!("  streams ({}):", i.streams.len());
    print_streams(&i.streams);
}

fn print_streams(streams: &[StreamSummary]) {
    if streams.is_empty() {
        return;
    }
    println!(
        "    {:<32} {:>5} {:<7} {:>12} {:>14} {:>7} {:>12} {:>7}",
        "stream id",
        "inc",
        "status",
        "next offset",
        "payload bytes",
        "chunks",
        "unsealed at",
        "pages"
    );
    for s in streams {
        println!(
            "    {:<32} {:>5} {:<7} {:>12} {:>14} {:>7} {:>12} {:>7}",
            s.stream_id,
            s.incarnation,
            s.status,
            s.next_offset,
            s.payload_bytes,
            s.sealed_chunks,
            s.unsealed_from,
            s.unsealed_pages
        );
    }
}

fn print_verification(v: &Verification) {
    let c = &v.counts;
    println!(
        "shard {}: checked {} index run(s), {} segment(s), {} chunk reference(s), {} WAL object(s), {} stream(s){}",
        v.shard,
        c.index_runs,
        c.segments,
        c.chunk_references,
        c.wal_objects,
        c.streams,
        if v.deep {
            format!(", read {} chunk(s)", c.chunks_read)
        } else {
            String::new()
        }
    );
    if v.healthy() {
        println!("healthy");
        return;
    }
    println!("DAMAGED: {} finding(s)", v.findings.len());
    for f in &v.findings {
        println!("  {:?}: {}: {}", f.kind, f.object, f.detail);
    }
}

/// A stream as `stream inspect` shows it.
#[derive(Debug, serde::Serialize)]
struct StreamInspection {
    project: String,
    name: String,
    descriptor: Descriptor,
    /// The shard holding the stream's current incarnation, if any does.
    shard: Option<String>,
    state: Option<StreamSummary>,
}

pub fn run_stream(command: StreamCommand) -> Result<ExitCode, OpsError> {
    let rt = runtime()?;
    match command {
        StreamCommand::Inspect { stream, store } => {
            let (project, name) = stream
                .split_once('/')
                .filter(|(p, n)| !p.is_empty() && !n.is_empty())
                .ok_or_else(|| OpsError::Usage("expected <project>/<name>".into()))?;
            let object_store = store.open()?;
            let inspection = rt.block_on(inspect_stream(object_store, project, name))?;
            if store.json {
                print_json(&inspection);
            } else {
                let d = &inspection.descriptor;
                println!("stream {}/{}", inspection.project, inspection.name);
                println!(
                    "  descriptor  id {}, incarnation {}, state {:?}, content type {}",
                    d.stream_id, d.incarnation, d.state, d.content_type
                );
                match (&inspection.shard, &inspection.state) {
                    (Some(shard), Some(state)) => {
                        println!("  shard {shard}:");
                        print_streams(std::slice::from_ref(state));
                    }
                    _ => println!("  no shard holds this incarnation"),
                }
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn inspect_stream(
    store: Arc<dyn ObjectStore>,
    project: &str,
    name: &str,
) -> Result<StreamInspection, OpsError> {
    let path = crate::service::names::stream_descriptor(project, name);
    let registry_error = |reason: String| OpsError::Registry {
        what: path.to_string(),
        reason,
    };
    let descriptor =
        CasObject::<DescriptorCodec>::new(store.clone(), path.clone(), RetryPolicy::default())
            .load()
            .await
            .map_err(|e| registry_error(e.to_string()))?
            .ok_or_else(|| registry_error("no such stream".into()))?
            .value;
    let id = descriptor
        .stream_id_bytes()
        .ok_or_else(|| registry_error("the descriptor's stream id is not hex".into()))?;
    // The descriptor does not record its shard: look in each.
    let env = EngineEnv::production(store.clone());
    let mut found = None;
    for shard in ops::list_shards(&store).await? {
        let name = shard_name(&shard.shard)?;
        let view =
            strata_engine::shard::inspect_log(env.clone(), name, ShardConfig::default()).await?;
        if let Some(s) = view.streams.streams.get(&id) {
            if s.tail.stream.incarnation == descriptor.incarnation {
                found = Some((shard.shard.clone(), StreamSummary::of(s)));
                break;
            }
        }
    }
    let (shard, state) = match found {
        Some((shard, state)) => (Some(shard), Some(state)),
        None => (None, None),
    };
    Ok(StreamInspection {
        project: project.to_string(),
        name: name.to_string(),
        descriptor,
        shard,
        state,
    })
}
