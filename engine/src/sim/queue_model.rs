//! What the queue workload (`queue.rs`) keeps between operations: the
//! model of each incarnation's queue, which checks every acknowledged
//! delivery and settle against what clients were handed (the invariants
//! `queue.rs` lists), and the per-owner locks that serialize an owner's
//! decisions for one stream.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::consumer::{ConsumerEvent, Delivery, LeaseRef};

/// The consumer group the queue workload drives.
pub(super) const SIM_QUEUE: &str = "sim-q";

/// A lease a client holds: handed out after its delivery was acknowledged.
#[derive(Debug, Clone)]
pub(super) struct HeldLease {
    pub lease: LeaseRef,
    pub deadline_ms: u64,
}

/// What the model knows of one incarnation's queue.
#[derive(Debug, Clone, Default)]
pub(super) struct QueueModel {
    /// The incarnation's queue consumer was configured (confirmed).
    pub configured: bool,
    /// Routing key → the lease a client holds on it.
    pub held: BTreeMap<Bytes, HeldLease>,
    /// Routing key → positions handed out under acknowledged deliveries.
    pub delivered: BTreeMap<Bytes, BTreeSet<u64>>,
    /// Positions acknowledged done (acknowledged or dead-lettered)…
    pub done: BTreeSet<u64>,
    /// …and those a change of unknown outcome may have finished.
    pub maybe_done: BTreeSet<u64>,
}

impl QueueModel {
    /// A delivery decided at `now_ms` was acknowledged: the client holds it.
    pub(super) fn delivered(
        &mut self,
        index: usize,
        d: &Delivery,
        now_ms: u64,
    ) -> Result<(), String> {
        let (key, position) = (&d.lease.routing_key, d.lease.position);
        if let Some(h) = self.held.get(key).filter(|h| h.deadline_ms > now_ms) {
            return Err(format!(
                "stream {index}: key {key:?} has two live leases: position {} until {} and position {position} from {now_ms}",
                h.lease.position, h.deadline_ms
            ));
        }
        if self.done.contains(&position) {
            return Err(format!(
                "stream {index}: position {position} was delivered after it was acknowledged done"
            ));
        }
        let delivered = self.delivered.entry(key.clone()).or_default();
        let open = |q: &&u64| !self.done.contains(q) && !self.maybe_done.contains(q);
        if let Some(earlier) = delivered.range(..position).find(open) {
            return Err(format!(
                "stream {index}: key {key:?} delivered position {position} before earlier position {earlier} was done"
            ));
        }
        delivered.insert(position);
        self.held.insert(
            key.clone(),
            HeldLease {
                lease: d.lease.clone(),
                deadline_ms: d.deadline_ms,
            },
        );
        Ok(())
    }

    /// An acknowledged change's events: what they end or extend (an expired
    /// lease simply stays held past its deadline).
    pub(super) fn settled(&mut self, events: &[ConsumerEvent]) {
        for event in events {
            match event {
                ConsumerEvent::Finished { record } => {
                    self.done.insert(record.position);
                    self.end_lease(&record.routing_key, record.position);
                }
                ConsumerEvent::Retried { record, .. } => {
                    self.end_lease(&record.routing_key, record.position);
                }
                ConsumerEvent::Extended {
                    record,
                    deadline_ms,
                } => {
                    if let Some(h) = self.held.get_mut(&record.routing_key) {
                        h.deadline_ms = *deadline_ms;
                    }
                }
                _ => {}
            }
        }
    }

    /// A change of unknown outcome: it may have ended what it names.
    pub(super) fn maybe_settled(&mut self, events: &[ConsumerEvent]) {
        for event in events {
            match event {
                ConsumerEvent::Finished { record } => {
                    self.maybe_done.insert(record.position);
                    self.end_lease(&record.routing_key, record.position);
                }
                ConsumerEvent::Retried { record, .. } => {
                    self.end_lease(&record.routing_key, record.position);
                }
                _ => {}
            }
        }
    }

    fn end_lease(&mut self, key: &Bytes, position: u64) {
        if self
            .held
            .get(key)
            .is_some_and(|h| h.lease.position == position)
        {
            self.held.remove(key);
        }
    }
}

/// One lock per (owner, stream slot): an owner decides for a stream's queue
/// one operation at a time, as the server's live consumer does.
#[derive(Default)]
pub(super) struct QueueLocks {
    locks: Mutex<HashMap<QueueLockKey, Arc<tokio::sync::Mutex<()>>>>,
}

/// An owner (its instance number) and a stream slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct QueueLockKey {
    instance: u16,
    slot: usize,
}

impl QueueLocks {
    pub(super) fn of(&self, instance: u16, index: usize) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .entry(QueueLockKey {
                instance,
                slot: index,
            })
            .or_default()
            .clone()
    }
}
