//! The shard's single actor task: committer, flush pump and acker.
//!
//! One task owns every mutable part of the write path, so offsets are assigned
//! in queue order without locks and a seed replays a simulation exactly. The
//! only state it shares is the durable `StreamCell`s, written here after an
//! object is acknowledged and read by readers.
//!
//! Objects are numbered by *issue* (the order the pump sent them); WAL *slots*
//! are their names. The acker acknowledges the contiguous prefix of issued
//! objects whose PUTs succeeded. A failed object stops the pump; once every
//! earlier object has been acknowledged, the failed one and everything after it
//! are answered `OutcomeUnknown` and the shard re-opens itself from the store.
//!
//! This file holds the actor and its `select!` loop (and taking commands off
//! the queue); each role's code is a file of its own: `commit.rs` (the
//! committer), `pump.rs` (the flush pump), `ack.rs` (the acker),
//! `recover.rs` (failure, fencing and re-opening), `schedule.rs` (sealing
//! and garbage collection). The actor's state is grouped by role in
//! `parts.rs`; what is staged is `batch.rs`'s (docs/ARCHITECTURE.md, "Write
//! path and durability").

mod ack;
mod batch;
mod commit;
mod parts;
mod pump;
mod recover;
mod schedule;

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use self::batch::Reply;
use self::parts::{Collector, Inbox, Ownership, PutLatency, Sealer, Staging, WalPipeline};
use crate::error::EngineError;
use crate::shard::api::ShardStatus;
use crate::shard::command::Command;
use crate::shard::ctx::ShardCtx;
use crate::shard::gc::GcQueue;
use crate::shard::recovery::Opened;
use crate::shard::seal::SealState;
use crate::shard::shared::ShardShared;

/// Commands taken from the queue per wake-up before completions are looked at.
const DRAIN_COMMANDS_MAX: usize = 1024;
/// Most scheduler yields spent gathering a burst of requests before a flush.
const SETTLE_ROUNDS_MAX: usize = 8;

pub(crate) struct Actor {
    ctx: Arc<ShardCtx>,
    shared: Arc<ShardShared>,
    inbox: Inbox,
    owner: Ownership,
    staging: Staging,
    wal: WalPipeline,
    sealer: Sealer,
    collector: Collector,
}

impl Actor {
    pub(crate) fn new(
        ctx: Arc<ShardCtx>,
        shared: Arc<ShardShared>,
        rx: mpsc::Receiver<Command>,
        opened: Opened,
    ) -> Self {
        let mut actor = Actor {
            owner: Ownership {
                manifest: opened.manifest.clone(),
                epoch: 0,
                fenced: false,
                reopen_needed: false,
            },
            ctx,
            shared,
            inbox: Inbox {
                rx,
                receiving: true,
                shutdown_reply: None,
            },
            staging: Staging {
                staged: HashMap::new(),
                batches: VecDeque::new(),
                pending_bytes: 0,
            },
            wal: WalPipeline {
                inflight: VecDeque::new(),
                next_issue: 0,
                puts: JoinSet::new(),
                put_tasks: HashMap::new(),
                next_slot: 0,
                chain_end: strata_wal::NO_SLOT,
                occupied: BTreeSet::new(),
                last_flush_start: None,
                put_latency: PutLatency::default(),
                herd: None,
                failed_issue: None,
            },
            sealer: Sealer {
                state: SealState::default(),
                tasks: JoinSet::new(),
                started: None,
            },
            collector: Collector {
                queue: GcQueue::default(),
                tasks: JoinSet::new(),
                collecting: false,
            },
        };
        actor.install(opened);
        actor
    }

    pub(crate) async fn run(mut self) {
        loop {
            let drained = !self.inbox.receiving
                && self.staging.batches.is_empty()
                && self.wal.inflight.is_empty();
            if drained && self.sealer.tasks.is_empty() {
                if !self.wants_final_seal() {
                    break;
                }
                self.sealer.state.final_started = true;
                self.start_seal();
            }
            let accept = self.inbox.receiving && self.can_accept();
            let gap_deadline = self.gap_deadline();
            let seal_deadline = self.seal_deadline();
            let gc_deadline = self.gc_deadline();
            let far = Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                biased;
                Some(joined) = self.wal.puts.join_next_with_id(), if !self.wal.puts.is_empty() => {
                    self.on_put_joined(joined);
                }
                Some(joined) = self.sealer.tasks.join_next(), if !self.sealer.tasks.is_empty() => {
                    self.on_seal_joined(joined);
                }
                Some(joined) = self.collector.tasks.join_next(), if !self.collector.tasks.is_empty() => {
                    self.on_gc_joined(joined);
                }
                command = self.inbox.rx.recv(), if accept => match command {
                    Some(command) => {
                        self.on_command(command);
                        self.drain_commands();
                    }
                    None => self.stop_receiving(),
                },
                _ = tokio::time::sleep_until(gap_deadline.unwrap_or(far)), if gap_deadline.is_some() => {}
                _ = tokio::time::sleep_until(seal_deadline.unwrap_or(far)), if seal_deadline.is_some() => {}
                _ = tokio::time::sleep_until(gc_deadline.unwrap_or(far)), if gc_deadline.is_some() => {}
                else => {
                    // Nothing can make progress: only possible once fenced or stopped.
                    if self.inbox.receiving && !self.owner.fenced {
                        tracing::error!(shard = %self.ctx.layout.shard(), "shard actor has nothing to wait on");
                    }
                    break;
                }
            }
            self.settle_failure().await;
            if self.flush_is_ready() {
                self.settle_herd().await;
            }
            self.flush_ready();
            self.maybe_seal();
            self.maybe_collect();
            self.publish_gauges();
        }
        if !self.owner.fenced {
            self.shared.status.send_replace(ShardStatus::Stopped);
        }
        if let Some(reply) = self.inbox.shutdown_reply.take() {
            let _ = reply.send(());
        }
    }

    /// The gauges operators read (`metrics`, the debug endpoint).
    fn publish_gauges(&self) {
        let m = &self.shared.metrics;
        let inflight_bytes: usize = self.wal.inflight.iter().map(|f| f.bytes).sum();
        m.puts_in_flight
            .store(self.wal.inflight.len() as u64, Ordering::Relaxed);
        m.inflight_bytes
            .store(inflight_bytes as u64, Ordering::Relaxed);
        m.pending_bytes
            .store(self.staging.pending_bytes as u64, Ordering::Relaxed);
        m.epoch.store(self.owner.epoch, Ordering::Relaxed);
        m.replay_slot
            .store(self.owner.manifest.value.replay.slot, Ordering::Relaxed);
        m.next_slot.store(self.wal.next_slot, Ordering::Relaxed);
    }

    fn can_accept(&self) -> bool {
        self.wal.failed_issue.is_none()
            && self.staging.pending_bytes < self.ctx.config.max_pending_bytes
    }

    /// Takes what is queued, up to [`DRAIN_COMMANDS_MAX`]; returns how many.
    fn drain_commands(&mut self) -> usize {
        for taken in 0..DRAIN_COMMANDS_MAX {
            if !(self.inbox.receiving && self.can_accept()) {
                return taken;
            }
            match self.inbox.rx.try_recv() {
                Ok(command) => self.on_command(command),
                Err(_) => return taken,
            }
        }
        DRAIN_COMMANDS_MAX
    }

    /// Herd settle before a flush: requests answered by the last
    /// acknowledgement are re-submitted by tasks that are runnable right now.
    /// Yield to them while each round still brings new requests, so they share
    /// this PUT instead of each taking a pipeline slot of its own. Costs
    /// microseconds, never a timer.
    async fn settle_herd(&mut self) {
        for _ in 0..SETTLE_ROUNDS_MAX {
            tokio::task::yield_now().await;
            if self.drain_commands() == 0 {
                return;
            }
        }
    }

    fn stop_receiving(&mut self) {
        self.inbox.receiving = false;
        self.inbox.rx.close();
        while let Ok(command) = self.inbox.rx.try_recv() {
            reject(command, EngineError::ShuttingDown);
        }
    }

    fn on_command(&mut self, command: Command) {
        if self.owner.fenced {
            // A fenced owner still stops when asked (it has nothing to flush).
            if let Command::Shutdown { reply } = command {
                self.inbox.shutdown_reply = Some(reply);
                return self.stop_receiving();
            }
            return reject(command, EngineError::Fenced);
        }
        match command {
            Command::Append(job) => self.commit_append(*job),
            Command::Create { create, reply } => self.commit_create(create, reply),
            Command::Delete { stream, reply } => self.commit_delete(stream, reply),
            Command::Consumer { entry, reply } => self.commit_consumer(entry, reply),
            Command::Usage { usage, reply } => self.commit_usage(usage, reply),
            Command::Barrier { reply } => self.reply_when_durable(Reply::Unit(reply, Ok(()))),
            Command::Seal { reply } => {
                if self.sealer.state.dirty.is_empty() && self.sealer.state.objects_unsealed == 0 {
                    let _ = reply.send(Ok(()));
                } else {
                    self.sealer.state.waiting.push(reply);
                }
            }
            Command::Shutdown { reply } => {
                self.inbox.shutdown_reply = Some(reply);
                self.stop_receiving();
            }
        }
    }
}

fn reject(command: Command, error: EngineError) {
    match command {
        Command::Append(job) => {
            let _ = job.reply.send(Err(error));
        }
        Command::Create { reply, .. } => {
            let _ = reply.send(Err(error));
        }
        Command::Delete { reply, .. }
        | Command::Consumer { reply, .. }
        | Command::Usage { reply, .. }
        | Command::Barrier { reply }
        | Command::Seal { reply } => {
            let _ = reply.send(Err(error));
        }
        Command::Shutdown { reply } => {
            let _ = reply.send(());
        }
    }
}
