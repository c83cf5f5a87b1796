//! `strata fleet status`: the live members of a fleet, their load, and each
//! shard's computed owner beside the owner its manifest names
//! (docs/RUNBOOK.md, "Reading fleet status").

use std::process::ExitCode;

use clap::Subcommand;

use super::ops::{print_json, runtime, OpsError, StoreArgs};
use crate::service::fleet::status::{self, FleetStatus};

#[derive(Subcommand, Debug)]
pub enum FleetCommand {
    /// Members (URL, state, heartbeat age, load) and shard owners.
    Status {
        #[command(flatten)]
        store: StoreArgs,
        /// The fleet's lease (`--fleet-lease-ms` of its members).
        #[arg(long, default_value_t = 6_000)]
        fleet_lease_ms: u64,
    },
}

pub fn run(command: FleetCommand) -> Result<ExitCode, OpsError> {
    let FleetCommand::Status {
        store,
        fleet_lease_ms,
    } = command;
    let rt = runtime()?;
    let now_ms = strata_engine::Clock::now_ms(&strata_engine::SystemClock);
    let found = rt
        .block_on(status::read(&store.open()?, fleet_lease_ms, now_ms))
        .map_err(|e| OpsError::Usage(e.to_string()))?;
    if store.json {
        print_json(&found);
    } else {
        print_status(&found);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_status(status: &FleetStatus) {
    let live = status.members.iter().filter(|m| m.live).count();
    println!(
        "members: {live} live of {} heartbeats (lease {} ms)",
        status.members.len(),
        status.lease_ms
    );
    for m in &status.members {
        let state = m
            .state
            .map_or("?".to_string(), |s| format!("{s:?}").to_lowercase());
        let load = m.load.as_ref().map_or(String::new(), |l| {
            format!(
                "shards {} · {} appends/s · queue {}",
                l.shards_owned, l.append_rate, l.queue_depth
            )
        });
        println!(
            "  {} {:<5} {:<8} age {:>6} ms  {}  {}{}",
            m.instance,
            if m.live { "live" } else { "dead" },
            state,
            m.heartbeat_age_ms,
            m.url.as_deref().unwrap_or("-"),
            load,
            m.error
                .as_ref()
                .map_or(String::new(), |e| format!("  ({e})")),
        );
    }
    println!("shards: {}", status.shards.len());
    for s in &status.shards {
        let agrees = s.computed_owner.is_some() && s.computed_owner == s.manifest_instance;
        println!(
            "  {:<6} owner {} {}  manifest epoch {} by {}{}",
            s.shard,
            s.computed_owner.as_deref().unwrap_or("(none)"),
            s.computed_owner_url.as_deref().unwrap_or(""),
            s.manifest_epoch.map_or("-".to_string(), |e| e.to_string()),
            s.manifest_instance.as_deref().unwrap_or("-"),
            if agrees {
                ""
            } else {
                "  (moving or not yet claimed)"
            },
        );
    }
}
