//! Garbage collection of a shard's objects (docs/ARCHITECTURE.md, "Sealing,
//! the state index and garbage collection").
//!
//! Garbage is what the current manifest no longer references: WAL objects
//! below the replay point, index runs a full seal replaced, and segment objects
//! none of whose chunks is live (their streams were deleted or re-created).
//! It reaches the queue two ways:
//!
//! * a seal that landed hands over what its manifest dropped;
//! * the sweep after every open (between `sweep_delay` and twice that after
//!   it) lists the shard's folders and queues what the manifest does not
//!   reference — WAL objects below the replay point, and runs and segments
//!   named by an *older* epoch (an older owner can no longer get them
//!   referenced: its manifest CAS would fail). This is how garbage survives
//!   crashes without being written down anywhere.
//!
//! Everything waits `gc_grace` before deletion, so a reader that looked at an
//! older manifest (an opener, an operator tool) still finds it; and a segment a
//! read in progress has pinned ([`super::ShardShared::pin_segments`]) waits
//! until the read lets go. Deletion is idempotent (a missing object counts as
//! deleted). An idle shard's queue is empty, so it makes no requests.

use std::collections::{BTreeMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore};
use strata_manifest::{SlotRange, NO_SLOT};
use strata_wal::{WalObject, WriterId};
use tokio::time::Instant;

use super::ctx::ShardCtx;
use super::io::{delete_object, overwrite_object};
use crate::env::CrashPoint;
use crate::error::EngineError;
use crate::layout::{ImmutableKind, ObjectId};
use strata_manifest::Manifest;

/// Objects deleted by one collection task.
pub(crate) const GC_BATCH_OBJECTS_MAX: u64 = 1024;
/// Deletes in flight at once within a task.
const GC_DELETES_PARALLEL: usize = 16;

/// A WAL object in a fence window at most this large is already a tombstone.
const TOMBSTONE_BYTES_MAX: u64 = 1024;

/// Something to delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Garbage {
    /// WAL slots (every one below the replay point, outside fence windows).
    Wal(Range<u64>),
    /// WAL slots below the replay point inside a fence window: overwritten
    /// with a tiny fence object of `epoch`, never deleted.
    Tombstone {
        slots: Range<u64>,
        epoch: u64,
    },
    Run(ObjectId),
    Segment(ObjectId),
}

impl Garbage {
    fn count(&self) -> u64 {
        match self {
            Garbage::Wal(r) | Garbage::Tombstone { slots: r, .. } => r.end.saturating_sub(r.start),
            _ => 1,
        }
    }

    /// The first `n` objects of a range, and the rest.
    fn split(self, n: u64) -> (Garbage, Option<Garbage>) {
        let cut = |r: &Range<u64>| (r.start..r.start + n, r.start + n..r.end);
        match self {
            Garbage::Wal(r) if r.end - r.start > n => {
                let (head, tail) = cut(&r);
                (Garbage::Wal(head), Some(Garbage::Wal(tail)))
            }
            Garbage::Tombstone { slots, epoch } if slots.end - slots.start > n => {
                let (head, tail) = cut(&slots);
                (
                    Garbage::Tombstone { slots: head, epoch },
                    Some(Garbage::Tombstone { slots: tail, epoch }),
                )
            }
            whole => (whole, None),
        }
    }
}

/// What becomes of WAL slots `below` that fell under the replay point:
/// deleted, or tombstoned where a fence window covers them.
pub(crate) fn wal_garbage(below: Range<u64>, windows: &[SlotRange], epoch: u64) -> Vec<Garbage> {
    let mut out = Vec::new();
    let mut at = below.start;
    for w in windows {
        if w.end <= at || w.start >= below.end {
            continue;
        }
        if w.start > at {
            out.push(Garbage::Wal(at..w.start));
        }
        let end = w.end.min(below.end);
        out.push(Garbage::Tombstone {
            slots: at.max(w.start)..end,
            epoch,
        });
        at = end;
    }
    if at < below.end {
        out.push(Garbage::Wal(at..below.end));
    }
    out.retain(|g| g.count() > 0);
    out
}

/// Garbage waiting for its grace period, oldest deadline first.
#[derive(Debug, Default)]
pub(crate) struct GcQueue {
    due: BTreeMap<(Instant, u64), Garbage>,
    seq: u64,
}

impl GcQueue {
    pub fn push(&mut self, due: Instant, garbage: Garbage) {
        if garbage.count() == 0 {
            return;
        }
        self.seq += 1;
        self.due.insert((due, self.seq), garbage);
    }

    pub fn next_due(&self) -> Option<Instant> {
        self.due.keys().next().map(|(due, _)| *due)
    }

    /// Takes garbage that is due at `now`, at most [`GC_BATCH_OBJECTS_MAX`]
    /// objects (a long WAL range is split; its rest stays queued).
    pub fn take_due(&mut self, now: Instant) -> Vec<Garbage> {
        let mut out = Vec::new();
        let mut budget = GC_BATCH_OBJECTS_MAX;
        while budget > 0 {
            let Some(entry) = self.due.first_entry() else {
                break;
            };
            if entry.key().0 > now {
                break;
            }
            let key = *entry.key();
            let (head, rest) = entry.remove().split(budget);
            budget -= head.count();
            out.push(head);
            if let Some(rest) = rest {
                self.due.insert(key, rest);
            }
        }
        out
    }
}

/// What a background GC task reports to the actor.
pub(crate) enum GcOutcome {
    /// The open's sweep found this garbage.
    Swept(Result<Vec<Garbage>, EngineError>),
    /// A collection ended; these could not be deleted (queued again).
    Collected { failed: Vec<Garbage>, deleted: u64 },
    /// The manifest's writer is no longer this owner at `epoch` (a newer
    /// owner, or an operator's rollback or recovery, replaced it): nothing
    /// was deleted, and this owner must stop.
    NotOwner { epoch: u64 },
}

/// One object's fate.
enum Job {
    Delete(Path),
    Tombstone { slot: u64, epoch: u64 },
}

fn jobs(ctx: &ShardCtx, garbage: &Garbage) -> Vec<Job> {
    match garbage {
        Garbage::Wal(r) => r.clone().map(|s| Job::Delete(ctx.layout.wal(s))).collect(),
        Garbage::Tombstone { slots, epoch } => slots
            .clone()
            .map(|slot| Job::Tombstone {
                slot,
                epoch: *epoch,
            })
            .collect(),
        Garbage::Run(id) => vec![Job::Delete(ctx.layout.index_run(*id))],
        Garbage::Segment(id) => vec![Job::Delete(ctx.layout.segment(*id))],
    }
}

async fn run_job(ctx: &ShardCtx, job: Job) -> Result<(), object_store::Error> {
    let store = &ctx.env.store;
    let retry = &ctx.config.store_retry;
    match job {
        Job::Delete(path) => delete_object(store, &path, retry).await,
        Job::Tombstone { slot, epoch } => {
            let writer = WriterId {
                instance: ctx.instance.0,
                epoch,
                write_id: ctx.env.entropy.bytes16(),
            };
            let fence = WalObject::fence(slot, NO_SLOT, writer, ctx.layout.shard().to_string());
            let bytes = strata_wal::encode(&fence)
                .map_err(|e| object_store::Error::Generic {
                    store: "tombstone",
                    source: e.to_string().into(),
                })?
                .to_bytes();
            overwrite_object(store, &ctx.layout.wal(slot), bytes, retry).await
        }
    }
}

/// Whether the manifest in the store is still this owner's at `epoch`: read
/// before every batch, so an owner that lost the shard without writing
/// anything since (an idle owner, or one an operator's rollback or recovery
/// replaced) deletes nothing the restored manifest may list.
async fn still_owner(ctx: &ShardCtx, epoch: u64) -> Result<bool, EngineError> {
    let current = ctx.manifest.load().await.map_err(|e| EngineError::Store {
        reason: e.to_string(),
    })?;
    Ok(current.is_some_and(|m| {
        m.value.writer.instance == ctx.instance.0 && m.value.writer.epoch == epoch
    }))
}

/// Deletes (or tombstones) a batch of garbage, once the manifest confirms
/// that this owner (at `epoch`) still holds the shard.
pub(crate) async fn collect(ctx: Arc<ShardCtx>, batch: Vec<Garbage>, epoch: u64) -> GcOutcome {
    match still_owner(&ctx, epoch).await {
        Ok(true) => {}
        Ok(false) => return GcOutcome::NotOwner { epoch },
        Err(error) => {
            tracing::warn!(shard = %ctx.layout.shard(), %error, "garbage collection could not confirm ownership; retrying later");
            return GcOutcome::Collected {
                failed: batch,
                deleted: 0,
            };
        }
    }
    let mut work: Vec<(usize, Job)> = batch
        .iter()
        .enumerate()
        .flat_map(|(i, g)| jobs(&ctx, g).into_iter().map(move |j| (i, j)))
        .collect();
    // Two halves, so a simulated crash can stop a batch half done.
    let second = work.split_off(work.len() / 2);
    let mut results = run_jobs(&ctx, work).await;
    if !second.is_empty() && !results.is_empty() {
        ctx.env.reach(CrashPoint::GcMidBatch, &ctx.instance).await;
    }
    results.extend(run_jobs(&ctx, second).await);
    let failed_items: HashSet<usize> = results.iter().filter(|r| !r.1).map(|r| r.0).collect();
    let deleted = results.iter().filter(|r| r.1).count() as u64;
    // A WAL range with one failure is queued again whole (deletes are idempotent).
    let failed = batch
        .into_iter()
        .enumerate()
        .filter(|(i, _)| failed_items.contains(i))
        .map(|(_, g)| g)
        .collect();
    GcOutcome::Collected { failed, deleted }
}

/// Runs jobs, at most [`GC_DELETES_PARALLEL`] at once; whether each of
/// them (by its garbage item's index) succeeded.
async fn run_jobs(ctx: &ShardCtx, work: Vec<(usize, Job)>) -> Vec<(usize, bool)> {
    futures::stream::iter(work)
        .map(|(i, job)| async move {
            let ok = match run_job(ctx, job).await {
                Ok(()) => true,
                Err(error) => {
                    tracing::warn!(%error, "garbage collection could not remove an object");
                    false
                }
            };
            (i, ok)
        })
        .buffer_unordered(GC_DELETES_PARALLEL)
        .collect()
        .await
}

/// How long the sweep of the open at `epoch` waits: `sweep_delay`, plus up
/// to as much again, spread by shard and epoch (no draw of randomness, so a
/// simulation's seeds replay): the shards a member claims together (a
/// failover, a rejoin) do not list their folders all at once.
pub(crate) fn sweep_delay(ctx: &ShardCtx, epoch: u64) -> std::time::Duration {
    use std::hash::{Hash, Hasher};
    const SPREAD_STEPS: u64 = 1024;
    let base = ctx.config.sweep_delay;
    let mut hasher = std::hash::DefaultHasher::new();
    (ctx.layout.shard().as_str(), epoch).hash(&mut hasher);
    let step = hasher.finish() % SPREAD_STEPS;
    base + base.mul_f64(step as f64 / SPREAD_STEPS as f64)
}

/// Lists the shard's folders and returns what `manifest` (claimed at `epoch`)
/// does not reference and nobody can reference again.
pub(crate) async fn sweep(ctx: Arc<ShardCtx>, manifest: Manifest, epoch: u64) -> GcOutcome {
    GcOutcome::Swept(sweep_inner(&ctx, &manifest, epoch).await)
}

async fn sweep_inner(
    ctx: &ShardCtx,
    manifest: &Manifest,
    epoch: u64,
) -> Result<Vec<Garbage>, EngineError> {
    let mut garbage = Vec::new();
    let below = manifest.replay.slot;
    let windows = &manifest.fence_windows;
    let mut slots: Vec<u64> = list(ctx, &ctx.layout.wal_prefix())
        .await?
        .iter()
        .filter_map(|meta| {
            let slot = ctx.layout.parse_wal_slot(&meta.location)?;
            let in_window = windows.iter().any(|w| w.contains(slot));
            // Window slots stay; only ones not yet tombstoned need work.
            (slot < below && (!in_window || meta.size > TOMBSTONE_BYTES_MAX)).then_some(slot)
        })
        .collect();
    slots.sort_unstable();
    for slot in slots {
        let g = wal_garbage(slot..slot + 1, windows, epoch);
        match (garbage.last_mut(), g.into_iter().next()) {
            (Some(Garbage::Wal(r)), Some(Garbage::Wal(n))) if r.end == n.start => r.end = n.end,
            (
                Some(Garbage::Tombstone { slots: r, .. }),
                Some(Garbage::Tombstone { slots: n, .. }),
            ) if r.end == n.start => r.end = n.end,
            (_, Some(next)) => garbage.push(next),
            (_, None) => {}
        }
    }
    let epoch_bits = epoch & 0xffff_ffff;
    for kind in [ImmutableKind::IndexRun, ImmutableKind::Segment] {
        let referenced: HashSet<u64> = match kind {
            ImmutableKind::IndexRun => manifest.index_runs.iter().map(|r| r.id).collect(),
            ImmutableKind::Segment => manifest.segments.iter().map(|s| s.id).collect(),
        };
        for meta in list(ctx, &ctx.layout.immutable_prefix(kind)).await? {
            let Some(id) = ctx.layout.parse_object_id(&meta.location, kind) else {
                continue;
            };
            if referenced.contains(&id.0) || id.epoch() >= epoch_bits {
                continue;
            }
            garbage.push(match kind {
                ImmutableKind::IndexRun => Garbage::Run(id),
                ImmutableKind::Segment => Garbage::Segment(id),
            });
        }
    }
    Ok(garbage)
}

async fn list(ctx: &ShardCtx, prefix: &Path) -> Result<Vec<ObjectMeta>, EngineError> {
    let store: &dyn ObjectStore = ctx.env.store.as_ref();
    let mut out = Vec::new();
    let mut listing = store.list(Some(prefix));
    while let Some(meta) = listing.next().await {
        out.push(meta.map_err(|e| EngineError::store(&e))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn window_slots_are_tombstoned_not_deleted() {
        let w = |start, end| SlotRange { start, end };
        let t = |slots| Garbage::Tombstone { slots, epoch: 4 };
        assert_eq!(
            wal_garbage(0..20, &[w(2, 5), w(9, 10), w(30, 40)], 4),
            vec![
                Garbage::Wal(0..2),
                t(2..5),
                Garbage::Wal(5..9),
                t(9..10),
                Garbage::Wal(10..20)
            ]
        );
        assert_eq!(wal_garbage(3..4, &[w(2, 5)], 4), vec![t(3..4)]);
        assert_eq!(wal_garbage(6..6, &[w(2, 5)], 4), vec![]);
    }

    #[test]
    fn queue_takes_only_due_garbage_in_bounded_batches() {
        let mut q = GcQueue::default();
        let t0 = Instant::now();
        q.push(t0, Garbage::Wal(0..3000));
        q.push(t0 + Duration::from_secs(5), Garbage::Run(ObjectId(9)));
        q.push(t0, Garbage::Wal(7..7));
        let first = q.take_due(t0);
        assert_eq!(first, vec![Garbage::Wal(0..GC_BATCH_OBJECTS_MAX)]);
        let second = q.take_due(t0);
        assert_eq!(
            second,
            vec![Garbage::Wal(GC_BATCH_OBJECTS_MAX..2 * GC_BATCH_OBJECTS_MAX)]
        );
        let third = q.take_due(t0);
        assert_eq!(third, vec![Garbage::Wal(2 * GC_BATCH_OBJECTS_MAX..3000)]);
        assert!(q.take_due(t0).is_empty(), "the run is not due yet");
        assert_eq!(q.next_due(), Some(t0 + Duration::from_secs(5)));
        assert_eq!(
            q.take_due(t0 + Duration::from_secs(5)),
            vec![Garbage::Run(ObjectId(9))]
        );
        assert_eq!(q.next_due(), None);
    }
}
