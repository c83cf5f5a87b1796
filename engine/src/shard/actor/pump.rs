//! The flush pump: packs staged batches into WAL objects and issues
//! create-only PUTs, up to `pipeline_depth` in flight, at least
//! `min_flush_gap` apart; behind a PUT in flight only a full, large or
//! urgent (consumer change) batch goes, and a small one waits briefly for the
//! appenders the last acknowledgement woke (the herd). Objects are numbered by issue; slots are
//! their names.

use std::sync::Arc;

use object_store::PutPayload;
use strata_segments::PageError;
use strata_wal::{ObjectKind, WalEntry, WalHeader, WalObject, WriterId};
use tokio::time::Instant;

use super::batch::{Batch, StagedEntry};
use super::parts::{InFlight, PutDone};
use super::Actor;
use crate::shard::io::{put_wal_object, WalPutOutcome};

impl Actor {
    /// When a small batch stops waiting for the herd (`None`: not waiting).
    pub(super) fn herd_deadline(&self) -> Option<Instant> {
        let herd = self.wal.herd?;
        let batch = self.staging.batches.front()?;
        let gathered = self.staging.batches.len() > 1
            || batch.urgent
            || batch.replies.len() >= herd.replies
            || batch.bytes >= self.ctx.config.pipeline_min_bytes;
        (!gathered && herd.until > Instant::now()).then_some(herd.until)
    }

    pub(super) fn gap_deadline(&self) -> Option<Instant> {
        if let Some(herd) = self.herd_deadline() {
            return Some(herd);
        }
        let gap = self.ctx.config.min_flush_gap;
        if gap.is_zero()
            || self.wal.failed_issue.is_some()
            || self.staging.batches.is_empty()
            || self.wal.inflight.len() >= self.ctx.config.pipeline_depth.max(1)
        {
            return None;
        }
        let due = self.wal.last_flush_start? + gap;
        (due > Instant::now()).then_some(due)
    }

    pub(super) fn flush_is_ready(&self) -> bool {
        self.wal.failed_issue.is_none()
            && !self.owner.fenced
            && !self.staging.batches.is_empty()
            && self.wal.inflight.len() < self.ctx.config.pipeline_depth.max(1)
            && self.worth_pipelining()
            && self.gap_deadline().is_none()
    }

    /// With nothing in flight, any staged batch goes; behind a PUT in
    /// flight, only a full one, a large one (see `pipeline_min_bytes`) or an
    /// urgent one (a consumer change: see [`Batch::urgent`]) while the PUT
    /// ahead is young.
    pub(super) fn worth_pipelining(&self) -> bool {
        let Some(front) = self.staging.batches.front() else {
            return false;
        };
        self.wal.inflight.is_empty()
            || self.staging.batches.len() > 1
            || front.bytes >= self.ctx.config.pipeline_min_bytes
            || (front.urgent && self.newest_put_is_young())
    }

    /// The newest PUT in flight has more than a quarter of a typical PUT to
    /// go (or no PUT has been timed yet). Acknowledgements go in issue order,
    /// so past that an urgent batch issued now would be answered at most a
    /// quarter of a PUT sooner; waiting, it shares the next object instead of
    /// adding one (this halved the objects of `strata bench consumers` at
    /// 1,000 and 1,800 messages/s over 25 ms PUTs, for at most 2 ms of
    /// delivery latency at p50). Only a new issue makes it young again, so a batch that
    /// waits needs no timer: the PUTs ahead completing wake it.
    fn newest_put_is_young(&self) -> bool {
        let (Some(newest), Some(typical)) =
            (self.wal.inflight.back(), self.wal.put_latency.estimate())
        else {
            return true;
        };
        newest.started.elapsed() < typical * 3 / 4
    }

    pub(super) fn flush_ready(&mut self) {
        while self.flush_is_ready() {
            let batch = self.staging.batches.pop_front().expect("non-empty");
            self.issue(batch);
        }
    }

    pub(super) fn allocate_slot(&mut self) -> u64 {
        while self.wal.occupied.remove(&self.wal.next_slot) {
            self.wal.next_slot += 1;
        }
        let slot = self.wal.next_slot;
        self.wal.next_slot += 1;
        slot
    }

    pub(super) fn issue(&mut self, batch: Batch) {
        let slot = self.allocate_slot();
        let writer = WriterId {
            instance: self.ctx.instance.0,
            epoch: self.owner.epoch,
            write_id: self.ctx.env.entropy.bytes16(),
        };
        let header = WalHeader {
            kind: ObjectKind::Data,
            slot,
            prev_slot: self.wal.chain_end,
            writer,
            shard: self.ctx.layout.shard().to_string(),
        };
        self.wal.chain_end = slot;
        let issue = self.wal.next_issue;
        self.wal.next_issue += 1;
        let ctx = self.ctx.clone();
        let staged = batch.entries;
        let handle = self.wal.puts.spawn(async move {
            let sealed: Result<Vec<WalEntry>, PageError> =
                staged.into_iter().map(StagedEntry::seal).collect();
            let object = sealed.map(|entries| Arc::new(WalObject { header, entries }));
            let encoded = object
                .as_ref()
                .map_err(|e| e.to_string())
                .and_then(|object| strata_wal::encode(object).map_err(|e| e.to_string()));
            let outcome = match encoded {
                Ok(encoded) => {
                    let payload: PutPayload = encoded.chunks.into_iter().collect();
                    put_wal_object(
                        &ctx.env.store,
                        &ctx.layout.wal(slot),
                        payload,
                        &writer,
                        &ctx.config.store_retry,
                    )
                    .await
                }
                Err(reason) => WalPutOutcome::Failed(object_store::Error::Generic {
                    store: "wal-build",
                    source: reason.into(),
                }),
            };
            PutDone {
                issue,
                object: object.ok(),
                outcome,
            }
        });
        self.wal.put_tasks.insert(handle.id(), issue);
        self.wal.inflight.push_back(InFlight {
            issue,
            slot,
            started: Instant::now(),
            object: None,
            replies: batch.replies,
            bytes: batch.bytes,
            outcome: None,
        });
        self.wal.last_flush_start = Some(Instant::now());
    }
}
