//! Failure, fencing and re-opening. Once every object before a failed one is
//! acknowledged, the rest are answered `OutcomeUnknown` and the owner
//! re-opens the shard from the store (a re-claim that only succeeds if
//! nobody else claimed meanwhile), so no staged state survives a failure. A
//! fenced owner acknowledges nothing more. `install` adopts what an open
//! found.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{reject, Actor};
use crate::error::EngineError;
use crate::layout::ObjectId;
use crate::shard::api::ShardStatus;
use crate::shard::command::Command;
use crate::shard::gc::{self, GcQueue};
use crate::shard::metrics::ShardMetrics;
use crate::shard::recovery::{self, Opened};
use crate::shard::seal::SealState;
use crate::shard::shared::StreamCell;
use crate::shard::state::StreamStatus;

impl Actor {
    /// Once every object before the failed one is acknowledged: fail the rest
    /// and re-open the shard from the store.
    pub(super) async fn settle_failure(&mut self) {
        if self.owner.fenced {
            return;
        }
        let wal_failed = self
            .wal
            .failed_issue
            .is_some_and(|failed| self.wal.inflight.front().is_none_or(|f| f.issue >= failed));
        if !wal_failed && !self.owner.reopen_needed {
            return;
        }
        self.fail_pending(EngineError::OutcomeUnknown);
        self.wal.failed_issue = None;
        // A seal in flight lands or fails before the re-claim, so the manifest
        // we re-claim from is the one we last wrote.
        while let Some(joined) = self.sealer.tasks.join_next().await {
            self.on_seal_joined(joined);
        }
        if self.owner.fenced {
            return;
        }
        // This re-open reads the manifest from the store, which settles a
        // seal whose outcome was unknown too (one that joined just above
        // included): no second re-open for it.
        self.owner.reopen_needed = false;
        self.reopen().await;
    }

    pub(super) fn fail_pending(&mut self, error: EngineError) {
        // Dropping the set aborts the PUTs still running.
        self.wal.puts = JoinSet::new();
        self.wal.put_tasks.clear();
        for object in self.wal.inflight.drain(..) {
            for queued in object.replies {
                queued.reply.fail(error.clone());
            }
        }
        for batch in self.staging.batches.drain(..) {
            for queued in batch.replies {
                queued.reply.fail(error.clone());
            }
        }
        self.staging.pending_bytes = 0;
    }

    /// A newer owner holds the shard. `fenced_at` is the issue of the object
    /// whose slot a newer owner's object took, if one did: that object and
    /// every later one cannot be in the newer owner's log (they lie at or
    /// after its fence), so their requests are answered `Fenced` (not
    /// written; retry elsewhere as is). Objects issued before it may have
    /// landed before the fence and be part of the newer owner's log: their
    /// requests are answered `OutcomeUnknown`, as is everything in flight
    /// when no slot says where the fence lies (a seal or a garbage check
    /// found the newer owner).
    pub(super) fn become_fenced(&mut self, fenced_at: Option<u64>) {
        self.owner.fenced = true;
        ShardMetrics::add(&self.shared.metrics.fences, 1);
        for waiter in self.sealer.state.waiting.drain(..) {
            let _ = waiter.send(Err(EngineError::Fenced));
        }
        self.wal.failed_issue = None;
        // Dropping the set aborts the PUTs still running.
        self.wal.puts = JoinSet::new();
        self.wal.put_tasks.clear();
        for object in self.wal.inflight.drain(..) {
            let error = match fenced_at {
                Some(at) if object.issue >= at => EngineError::Fenced,
                _ => EngineError::OutcomeUnknown,
            };
            for queued in object.replies {
                queued.reply.fail(error.clone());
            }
        }
        for batch in self.staging.batches.drain(..) {
            for queued in batch.replies {
                queued.reply.fail(EngineError::Fenced);
            }
        }
        self.staging.pending_bytes = 0;
        self.shared.status.send_replace(ShardStatus::Fenced);
    }

    /// Re-claims the shard (only if nobody else claimed it since our own claim)
    /// and rebuilds its state from the store, retrying store failures.
    pub(super) async fn reopen(&mut self) {
        self.shared.status.send_replace(ShardStatus::Recovering);
        let mut attempt = 0u32;
        let claimed = loop {
            match recovery::reclaim(&self.ctx, self.owner.epoch).await {
                Ok(claimed) => break claimed,
                Err(EngineError::Fenced) => return self.become_fenced(None),
                Err(error) => {
                    if !self.back_off(&mut attempt, &error).await {
                        return self.stop_reopening();
                    }
                }
            }
        };
        self.owner.manifest = claimed.clone();
        loop {
            match recovery::walk_and_fence(&self.ctx, claimed.clone()).await {
                Ok(opened) => {
                    self.install(opened);
                    self.shared.status.send_replace(ShardStatus::Active);
                    return;
                }
                Err(EngineError::Fenced) => return self.become_fenced(None),
                Err(error) => {
                    if !self.back_off(&mut attempt, &error).await {
                        return self.stop_reopening();
                    }
                }
            }
        }
    }

    /// A shutdown asked while re-opening: the shard stops without the store
    /// (nothing is staged; the next owner recovers from the store alone).
    pub(super) fn stop_reopening(&mut self) {
        tracing::warn!(shard = %self.ctx.layout.shard(), "shutdown while re-opening: stopping without the store");
        self.shared.status.send_replace(ShardStatus::Stopped);
    }

    /// Waits before the next re-open attempt; false once a shutdown was
    /// asked meanwhile (commands that reached the queue before the shard
    /// started re-opening are refused: it is not taking any).
    pub(super) async fn back_off(&mut self, attempt: &mut u32, error: &EngineError) -> bool {
        let wait = self
            .ctx
            .config
            .store_retry
            .backoff(*attempt)
            .min(self.ctx.config.reopen_backoff_max);
        tracing::warn!(shard = %self.ctx.layout.shard(), %error, ?wait, "re-open failed; retrying");
        tokio::time::sleep(wait).await;
        *attempt = attempt.saturating_add(1);
        while self.inbox.receiving {
            match self.inbox.rx.try_recv() {
                Ok(Command::Shutdown { reply }) => {
                    self.inbox.shutdown_reply = Some(reply);
                    self.stop_receiving();
                }
                Ok(other) => reject(
                    other,
                    EngineError::Unavailable {
                        reason: "shard is re-opening after a store failure".into(),
                    },
                ),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => self.stop_receiving(),
            }
        }
        self.inbox.receiving
    }

    /// Adopts a freshly opened shard: its manifest, epoch, slots and state.
    pub(super) fn install(&mut self, opened: Opened) {
        let now = Instant::now();
        ShardMetrics::add(&self.shared.metrics.claims, 1);
        let mut seal = SealState {
            dirty_since: (!opened.touched.is_empty()).then_some(now),
            dirty: opened.touched,
            objects_unsealed: opened.data_objects,
            durable_chain_end: opened.chain_end,
            fence_window: opened.fence_window,
            next_object_id: opened.manifest.value.next_object_id,
            final_started: self.sealer.state.final_started,
            waiting: std::mem::take(&mut self.sealer.state.waiting),
            ..SealState::default()
        };
        for durable in opened.table.streams.values() {
            if durable.tail.status != StreamStatus::Deleted {
                durable.sealed.iter().for_each(|c| seal.adopt(c));
            }
        }
        seal.dead = opened
            .manifest
            .value
            .segments
            .iter()
            .map(|s| ObjectId(s.id))
            .filter(|id| !seal.live_chunks.contains_key(id))
            .collect();
        self.sealer.state = seal;
        // The sweep finds again whatever was queued, with a fresh grace period.
        self.collector.queue = GcQueue::default();
        let (ctx, manifest) = (self.ctx.clone(), opened.manifest.value.clone());
        let epoch = opened.epoch;
        let delay = gc::sweep_delay(&self.ctx, epoch);
        self.collector.tasks.spawn(async move {
            tokio::time::sleep(delay).await;
            gc::sweep(ctx, manifest, epoch).await
        });
        self.owner.manifest = opened.manifest;
        self.owner.epoch = opened.epoch;
        self.wal.next_slot = opened.next_slot;
        self.wal.chain_end = opened.chain_end;
        self.wal.occupied = opened.occupied;
        self.staging.staged = opened
            .table
            .streams
            .iter()
            .map(|(id, d)| (*id, d.tail.clone()))
            .collect();
        let mut memory = 0;
        {
            let mut cells = self.shared.streams.write();
            for (id, durable) in opened.table.streams {
                memory += durable.page_bytes;
                match cells.get(&id) {
                    Some(cell) => {
                        *cell.state.write() = durable;
                        cell.bump();
                    }
                    None => {
                        cells.insert(id, Arc::new(StreamCell::new(durable)));
                    }
                }
            }
        }
        self.shared
            .memory_page_bytes
            .store(memory, Ordering::Relaxed);
        *self.shared.last_recovery.lock() = opened.report;
    }
}
