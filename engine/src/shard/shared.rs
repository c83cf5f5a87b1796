//! State an open shard's readers share with its actor: each stream's durable
//! cell ([`StreamCell`], written by the acker only after an object is
//! acknowledged, so readers never see staged state), the shard's status, its
//! memory accounting, and the segment pins reads hold against garbage
//! collection (docs/ARCHITECTURE.md, "Reads").

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use tokio::sync::watch;

use super::api::ShardStatus;
use super::recovery::RecoveryReport;
use super::state::DurableStream;
use crate::layout::ObjectId;

/// A stream's durable state, shared between the acker (writer) and readers.
pub(crate) struct StreamCell {
    pub state: RwLock<DurableStream>,
    /// Bumped after every durable change while a waiter watches it (see
    /// [`StreamCell::bump`]); its value is never read.
    pub changed: watch::Sender<u64>,
}

impl StreamCell {
    pub(super) fn new(state: DurableStream) -> Self {
        StreamCell {
            state: RwLock::new(state),
            changed: watch::channel(0).0,
        }
    }

    /// Wakes the stream's waiters, if it has any. With none, nothing is
    /// sent: a bump touches the channel's eight notifier locks, and an
    /// acknowledged object bumps every stream it carries. Safe because a
    /// waiter subscribes before it reads the state (`Shard::wait_for`): one
    /// that subscribes after this check took the state's lock after the
    /// change was written, so it reads the change itself.
    pub(super) fn bump(&self) {
        if self.changed.receiver_count() == 0 {
            return;
        }
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }
}

/// State readers share with the actor.
pub(crate) struct ShardShared {
    pub streams: RwLock<HashMap<[u8; 16], Arc<StreamCell>>>,
    pub status: watch::Sender<ShardStatus>,
    pub memory_page_bytes: std::sync::atomic::AtomicU64,
    /// Page bytes of the appends waiting in the actor's queue (bounded by
    /// `max_pending_bytes`; see `command::QueuedBytes`).
    pub queued_bytes: Arc<std::sync::atomic::AtomicU64>,
    pub last_recovery: parking_lot::Mutex<RecoveryReport>,
    /// Segments reads in progress hold: garbage collection waits for them.
    pub pins: parking_lot::Mutex<HashMap<ObjectId, u32>>,
    pub gc_deleted_objects: std::sync::atomic::AtomicU64,
    /// Operators' counts, written by the actor.
    pub metrics: super::metrics::ShardMetrics,
}

impl ShardShared {
    pub(super) fn cell(&self, id: &[u8; 16]) -> Option<Arc<StreamCell>> {
        self.streams.read().get(id).cloned()
    }

    /// Pins segments until the guard drops. Readers pin while they still hold
    /// the stream's read lock, so a segment the collector finds unpinned is
    /// one no read can reach any more.
    pub fn pin_segments(
        self: &Arc<Self>,
        segments: impl IntoIterator<Item = ObjectId>,
    ) -> SegmentPins {
        let mut ids: Vec<ObjectId> = segments.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut pins = self.pins.lock();
        for id in &ids {
            *pins.entry(*id).or_default() += 1;
        }
        SegmentPins {
            shared: self.clone(),
            ids,
        }
    }

    pub fn is_pinned(&self, id: ObjectId) -> bool {
        self.pins.lock().contains_key(&id)
    }
}

/// Segments pinned by one read.
pub(crate) struct SegmentPins {
    shared: Arc<ShardShared>,
    ids: Vec<ObjectId>,
}

impl Drop for SegmentPins {
    fn drop(&mut self) {
        let mut pins = self.shared.pins.lock();
        for id in &self.ids {
            if let Some(count) = pins.get_mut(id) {
                *count -= 1;
                if *count == 0 {
                    pins.remove(id);
                }
            }
        }
    }
}
