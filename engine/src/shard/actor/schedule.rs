//! Scheduling the sealer and the garbage collector: when a seal is due (by
//! bytes, objects or age; at most one at a time, never while failed,
//! fenced or re-opening), what it snapshots, and what a landed seal frees;
//! when garbage falls due (segments a read pins wait) and what a collection
//! or sweep answered.

use std::sync::atomic::Ordering;
use std::time::Duration;

use strata_manifest::ReplayPoint;
use tokio::time::Instant;

use super::Actor;
use crate::error::EngineError;
use crate::layout::ObjectId;
use crate::shard::api::ShardStatus;
use crate::shard::gc::{self, GcOutcome};
use crate::shard::metrics::ShardMetrics;
use crate::shard::seal::{self, SealFailure, SealPlan, SealResult, SealStream};

/// A pinned segment's deletion is looked at again after this long.
const PINNED_RECHECK: Duration = Duration::from_secs(1);
/// A failed deletion is tried again after this long.
const GC_RETRY: Duration = Duration::from_secs(30);

impl Actor {
    pub(super) fn may_seal(&self) -> bool {
        !self.owner.fenced
            && !self.owner.reopen_needed
            && self.wal.failed_issue.is_none()
            && self.sealer.tasks.is_empty()
            && *self.shared.status.borrow() == ShardStatus::Active
    }

    pub(super) fn wants_final_seal(&self) -> bool {
        self.may_seal() && !self.sealer.state.final_started && !self.sealer.state.dirty.is_empty()
    }

    /// When the age trigger (or the back-off after a failure) falls due.
    pub(super) fn seal_deadline(&self) -> Option<Instant> {
        if !self.may_seal() {
            return None;
        }
        let due = self.sealer.state.dirty_since? + self.ctx.config.seal_age;
        Some(self.sealer.state.retry_at.map_or(due, |r| r.max(due)))
    }

    pub(super) fn maybe_seal(&mut self) {
        if !self.may_seal() {
            return;
        }
        if self.sealer.state.dirty.is_empty() {
            // `seal_now` callers that asked while a seal covering everything
            // was running: answered now, or sealed for the acknowledged
            // objects that changed no stream (the replay point still moves).
            if !self.sealer.state.waiting.is_empty() {
                if self.sealer.state.objects_unsealed == 0 {
                    for waiter in self.sealer.state.waiting.drain(..) {
                        let _ = waiter.send(Ok(()));
                    }
                } else {
                    self.start_seal();
                }
            }
            return;
        }
        let now = Instant::now();
        if self.sealer.state.retry_at.is_some_and(|r| r > now)
            && self.sealer.state.waiting.is_empty()
        {
            return;
        }
        let config = &self.ctx.config;
        let memory = self.shared.memory_page_bytes.load(Ordering::Relaxed);
        let due = !self.sealer.state.waiting.is_empty()
            || memory >= config.seal_bytes
            || self.sealer.state.objects_unsealed >= config.seal_objects
            || self
                .sealer
                .state
                .dirty_since
                .is_some_and(|since| since + config.seal_age <= now);
        if due {
            self.start_seal();
        }
    }

    /// Snapshots the durable state of the dirty streams (every stream, when
    /// the run count calls for a full run) and starts the seal task.
    pub(super) fn start_seal(&mut self) {
        let full =
            self.owner.manifest.value.index_runs.len() + 1 > self.ctx.config.max_index_runs.max(1);
        let dirty = self.sealer.state.begin();
        self.sealer.state.sealing_waiters = std::mem::take(&mut self.sealer.state.waiting);
        let ids: Vec<[u8; 16]> = if full {
            self.shared.streams.read().keys().copied().collect()
        } else {
            dirty.into_iter().collect()
        };
        let mut streams = Vec::with_capacity(ids.len());
        for id in ids {
            let Some(cell) = self.shared.cell(&id) else {
                continue;
            };
            let state = cell.state.read();
            streams.push(SealStream {
                tail: state.tail.clone(),
                pages: state.pages.iter().map(|p| p.bytes.clone()).collect(),
                prior: if full {
                    state.sealed.clone()
                } else {
                    Vec::new()
                },
                consumers: state.consumers.encode(),
            });
        }
        streams.sort_by_key(|s| s.tail.stream.id);
        let base_id = self
            .sealer
            .state
            .next_object_id
            .max(self.owner.manifest.value.next_object_id);
        self.sealer.state.next_object_id = base_id + 2;
        let chain_end = self.sealer.state.durable_chain_end;
        let plan = SealPlan {
            base: self.owner.manifest.clone(),
            write_id: self.ctx.env.entropy.bytes16(),
            replay: ReplayPoint {
                slot: chain_end + 1,
                epoch_floor: self.owner.epoch,
                chain_end,
            },
            segment_id: ObjectId::new(self.owner.epoch, base_id),
            run_id: ObjectId::new(self.owner.epoch, base_id + 1),
            next_object_id: base_id + 2,
            full,
            streams,
            dead_segments: self.sealer.state.dead.iter().copied().collect(),
            fence_window: self.sealer.state.fence_window,
        };
        tracing::debug!(
            shard = %self.ctx.layout.shard(),
            full,
            streams = plan.streams.len(),
            replay_slot = plan.replay.slot,
            "seal started"
        );
        self.sealer.started = Some(Instant::now());
        self.sealer.tasks.spawn(seal::run(self.ctx.clone(), plan));
    }

    pub(super) fn on_seal_joined(&mut self, joined: Result<SealResult, tokio::task::JoinError>) {
        let now = Instant::now();
        let metrics = &self.shared.metrics;
        let started = self.sealer.started.take();
        let counter = match &joined {
            Ok(Ok(_)) => &metrics.seals,
            _ => &metrics.seal_failures,
        };
        ShardMetrics::add(counter, 1);
        if let (Ok(Ok(_)), Some(started)) = (&joined, started) {
            metrics.seal_latency.observe(now - started);
        }
        let done = match joined {
            Ok(Ok(done)) => done,
            Ok(Err(SealFailure::Fenced)) => {
                tracing::warn!(shard = %self.ctx.layout.shard(), "seal refused: fenced by a newer owner");
                self.sealer.state.failed(now, EngineError::Fenced);
                return self.become_fenced(None);
            }
            Ok(Err(SealFailure::Failed(error))) => {
                tracing::warn!(shard = %self.ctx.layout.shard(), %error, "seal failed; backing off");
                return self.sealer.state.failed(now, error);
            }
            Ok(Err(SealFailure::Unknown(error))) => {
                tracing::warn!(shard = %self.ctx.layout.shard(), %error, "seal outcome unknown; re-opening from the store");
                self.sealer.state.failed(now, error);
                self.owner.reopen_needed = true;
                return;
            }
            Err(error) => {
                tracing::error!(shard = %self.ctx.layout.shard(), %error, "seal task ended abnormally");
                return self.sealer.state.failed(
                    now,
                    EngineError::Unavailable {
                        reason: "the seal task ended abnormally".into(),
                    },
                );
            }
        };
        self.sealer.state.succeeded();
        tracing::info!(
            shard = %self.ctx.layout.shard(),
            version = done.manifest.value.version,
            replay_slot = done.manifest.value.replay.slot,
            chunks = done.chunks.len(),
            duration_ms = started.map_or(0, |s| (now - s).as_millis() as u64),
            "seal landed"
        );
        self.owner.manifest = done.manifest;
        for dead in &done.dead_segments {
            self.sealer.state.dead.remove(dead);
            self.sealer.state.live_chunks.remove(dead);
        }
        // The sealed pages leave memory; their chunk joins the sealed tier.
        let mut freed = 0u64;
        for new in done.chunks {
            let Some(cell) = self.shared.cell(&new.stream.id) else {
                continue;
            };
            let mut state = cell.state.write();
            if !state.tail.is_live(&new.stream) {
                continue;
            }
            let count = state
                .pages
                .partition_point(|p| p.end_offset() <= new.chunk.end_offset());
            let tiles = state.pages.first().map(|p| p.first_offset)
                == Some(new.chunk.first_offset())
                && state.pages[..count].last().map(|p| p.end_offset())
                    == Some(new.chunk.end_offset());
            if !tiles {
                tracing::error!(shard = %self.ctx.layout.shard(), "sealed chunk does not match the stream's unsealed pages; keeping them in memory");
                continue;
            }
            let bytes: u64 = state.pages[..count]
                .iter()
                .map(|p| p.bytes.len() as u64)
                .sum();
            state.pages.drain(..count);
            state.page_bytes -= bytes;
            freed += bytes;
            self.sealer.state.adopt(&new.chunk);
            state.sealed.push(new.chunk);
        }
        self.shared
            .memory_page_bytes
            .fetch_sub(freed, Ordering::Relaxed);
        if let Some(segment) = done.segment {
            if !self.sealer.state.live_chunks.contains_key(&segment) {
                self.sealer.state.dead.insert(segment);
            }
        }
        let due = now + self.ctx.config.gc_grace;
        for garbage in done.garbage {
            self.collector.queue.push(due, garbage);
        }
    }

    // ---------------------------------------------------------- garbage collector

    pub(super) fn gc_deadline(&self) -> Option<Instant> {
        if self.owner.fenced || self.collector.collecting {
            return None;
        }
        self.collector.queue.next_due()
    }

    pub(super) fn maybe_collect(&mut self) {
        if self.owner.fenced || self.collector.collecting {
            return;
        }
        let now = Instant::now();
        if self.collector.queue.next_due().is_none_or(|due| due > now) {
            return;
        }
        let mut batch = Vec::new();
        for garbage in self.collector.queue.take_due(now) {
            match garbage {
                gc::Garbage::Segment(id) if self.shared.is_pinned(id) => {
                    self.collector.queue.push(now + PINNED_RECHECK, garbage);
                }
                other => batch.push(other),
            }
        }
        if batch.is_empty() {
            return;
        }
        self.collector.collecting = true;
        self.collector
            .tasks
            .spawn(gc::collect(self.ctx.clone(), batch, self.owner.epoch));
    }

    pub(super) fn on_gc_joined(&mut self, joined: Result<GcOutcome, tokio::task::JoinError>) {
        let now = Instant::now();
        match joined {
            Ok(GcOutcome::Swept(Ok(found))) => {
                let due = now + self.ctx.config.gc_grace;
                for garbage in found {
                    self.collector.queue.push(due, garbage);
                }
            }
            Ok(GcOutcome::Swept(Err(error))) => {
                tracing::warn!(shard = %self.ctx.layout.shard(), %error, "garbage sweep failed; the next open sweeps again");
            }
            Ok(GcOutcome::Collected { failed, deleted }) => {
                self.collector.collecting = false;
                tracing::info!(
                    shard = %self.ctx.layout.shard(),
                    deleted,
                    failed = failed.len(),
                    "garbage collected"
                );
                self.shared
                    .gc_deleted_objects
                    .fetch_add(deleted, Ordering::Relaxed);
                for garbage in failed {
                    self.collector.queue.push(now + GC_RETRY, garbage);
                }
            }
            Ok(GcOutcome::NotOwner { epoch }) => {
                self.collector.collecting = false;
                // A check from before this owner's own re-claim says nothing now.
                if epoch == self.owner.epoch && !self.owner.fenced {
                    tracing::warn!(shard = %self.ctx.layout.shard(), epoch, "the manifest names another writer: garbage collection stops and the shard is fenced");
                    self.become_fenced(None);
                }
            }
            Err(error) => {
                // A collection task that died leaves its garbage to the next sweep.
                self.collector.collecting = false;
                tracing::error!(shard = %self.ctx.layout.shard(), %error, "garbage task ended abnormally");
            }
        }
    }
}
