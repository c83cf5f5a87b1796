//! The acker: PUTs complete in any order; the contiguous prefix of issued
//! objects whose PUTs succeeded is acknowledged, in issue order, and only
//! then are its entries applied to the durable state readers see and its
//! requests answered. A fenced PUT fences the owner; a failed one stops the
//! pump (`recover.rs` settles it).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use strata_wal::{WalEntry, WalObject};
use tokio::task::Id as TaskId;
use tokio::time::Instant;

use super::batch::{interleave, QueuedReply};
use super::parts::{Herd, PutDone};
use super::Actor;
use crate::shard::io::WalPutOutcome;
use crate::shard::metrics::ShardMetrics;
use crate::shard::shared::StreamCell;
use crate::shard::state::apply_entry;

/// Longest a small batch waits for the appenders a PUT just acknowledged.
const HERD_WAIT: Duration = Duration::from_millis(1);

/// Records the appends of `object` carry.
fn records_in(object: &WalObject) -> u64 {
    object
        .entries
        .iter()
        .map(|entry| match entry {
            WalEntry::Append(append) => append.record_count,
            _ => 0,
        })
        .sum()
}

impl Actor {
    pub(super) fn on_put_joined(
        &mut self,
        joined: Result<(TaskId, PutDone), tokio::task::JoinError>,
    ) {
        let done = match joined {
            Ok((id, done)) => {
                self.wal.put_tasks.remove(&id);
                done
            }
            Err(e) => {
                // A task of objects already failed and forgotten: nothing to do.
                let Some(issue) = self.wal.put_tasks.remove(&e.id()) else {
                    return;
                };
                PutDone {
                    issue,
                    object: None,
                    outcome: WalPutOutcome::Failed(object_store::Error::Generic {
                        store: "wal-put-task",
                        source: Box::new(e),
                    }),
                }
            }
        };
        let Some(front) = self.wal.inflight.front() else {
            return;
        };
        let Some(index) = done.issue.checked_sub(front.issue) else {
            return;
        };
        let Some(entry) = self.wal.inflight.get_mut(index as usize) else {
            return;
        };
        let metrics = &self.shared.metrics;
        match &done.outcome {
            WalPutOutcome::Written => {
                let took = entry.started.elapsed();
                self.wal.put_latency.observe(took);
                metrics.wal_put_latency.observe(took);
                ShardMetrics::add(&metrics.wal_puts, 1);
                ShardMetrics::add(&metrics.wal_put_bytes, entry.bytes as u64);
                if let Some(object) = &done.object {
                    ShardMetrics::add(&metrics.wal_records, records_in(object));
                }
            }
            WalPutOutcome::Fenced {
                epoch,
                after_unknown,
            } => {
                ShardMetrics::add(&metrics.wal_put_failures, 1);
                tracing::warn!(shard = %self.ctx.layout.shard(), newer_epoch = epoch, after_unknown, "fenced by a newer owner");
                // After an attempt that may have landed, the newer owner may
                // hold this object (and the ones issued with it) in its log.
                let at = (!after_unknown).then_some(done.issue);
                self.become_fenced(at);
                return;
            }
            WalPutOutcome::Collision { epoch } => {
                ShardMetrics::add(&metrics.wal_put_failures, 1);
                tracing::warn!(shard = %self.ctx.layout.shard(), other_epoch = epoch, "WAL slot taken by an older writer's object");
                self.wal.failed_issue = Some(
                    self.wal
                        .failed_issue
                        .map_or(done.issue, |f| f.min(done.issue)),
                );
            }
            WalPutOutcome::Failed(error) => {
                ShardMetrics::add(&metrics.wal_put_failures, 1);
                tracing::warn!(shard = %self.ctx.layout.shard(), %error, "WAL put failed");
                self.wal.failed_issue = Some(
                    self.wal
                        .failed_issue
                        .map_or(done.issue, |f| f.min(done.issue)),
                );
            }
        }
        entry.outcome = Some(done.outcome);
        entry.object = done.object;
        self.acknowledge_prefix();
    }

    pub(super) fn acknowledge_prefix(&mut self) {
        while matches!(
            self.wal.inflight.front().and_then(|f| f.outcome.as_ref()),
            Some(WalPutOutcome::Written)
        ) {
            let done = self.wal.inflight.pop_front().expect("front exists");
            self.staging.pending_bytes -= done.bytes;
            self.sealer.state.durable_chain_end = done.slot;
            self.sealer.state.objects_unsealed += 1;
            let replies = done.replies.len();
            match &done.object {
                Some(object) => self.publish(object, done.replies),
                None => done.replies.into_iter().for_each(|q| q.reply.send()),
            }
            self.wal.herd = Some(Herd {
                replies,
                until: Instant::now() + HERD_WAIT,
            });
        }
    }

    /// Makes an acknowledged object's entries visible to readers and sends
    /// each of its replies as soon as the entries staged ahead of it are
    /// (read-your-writes holds for every answer; the woken appenders run on
    /// another worker while the rest is published). Readers waiting on a
    /// stream are woken once, at the end.
    pub(super) fn publish(&mut self, object: &WalObject, replies: Vec<QueuedReply>) {
        let mut touched: Vec<Arc<StreamCell>> = Vec::with_capacity(object.entries.len());
        let now = Instant::now();
        interleave(
            &object.entries,
            replies,
            |queued| queued.after_entries,
            |entry| self.publish_entry(entry, now, &mut touched),
            |queued| queued.reply.send(),
        );
        // One wake-up per stream however many of its entries the object
        // holds (sorting keeps this O(n log n) for objects of many streams).
        touched.sort_unstable_by_key(|cell| Arc::as_ptr(cell) as usize);
        touched.dedup_by(|a, b| Arc::ptr_eq(a, b));
        for cell in touched {
            cell.bump();
        }
    }

    /// Applies one acknowledged entry to the durable state readers see;
    /// `touched` collects the streams whose waiting readers must be woken.
    fn publish_entry(
        &mut self,
        entry: &WalEntry,
        now: Instant,
        touched: &mut Vec<Arc<StreamCell>>,
    ) {
        let id = crate::shard::state::entry_stream(entry).id;
        self.sealer.state.mark_dirty(id, now);
        let existing = self.shared.cell(&id);
        let result = match &existing {
            Some(cell) => {
                let mut state = cell.state.write();
                let before = state.page_bytes;
                // A delete or a new incarnation drops the sealed chunks.
                let sealed_before = matches!(entry, WalEntry::Delete(_) | WalEntry::Create(_))
                    .then(|| state.sealed.clone());
                let result = apply_entry(Some(&mut state), entry).map(|fresh| {
                    if let Some(fresh) = fresh {
                        *state = fresh;
                    }
                });
                if let Some(old) = sealed_before {
                    if state.sealed.is_empty() {
                        self.sealer.state.release(&old);
                    }
                }
                self.account_memory(before, state.page_bytes);
                result
            }
            None => match apply_entry(None, entry) {
                Ok(Some(fresh)) => {
                    let cell = Arc::new(StreamCell::new(fresh));
                    self.shared.streams.write().insert(id, cell.clone());
                    touched.push(cell);
                    Ok(())
                }
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            },
        };
        if let Err(e) = result {
            tracing::error!(error = %e, "acknowledged entry does not apply to durable state");
        }
        if let Some(cell) = existing {
            touched.push(cell);
        }
    }

    pub(super) fn account_memory(&self, before: u64, after: u64) {
        if after >= before {
            self.shared
                .memory_page_bytes
                .fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.shared
                .memory_page_bytes
                .fetch_sub(before - after, Ordering::Relaxed);
        }
    }
}
