//! The log-walk rule: which WAL objects, read in slot order from the replay
//! point, belong to the shard's log.
//!
//! The walk keeps an *epoch floor* (the highest writer epoch admitted so far)
//! and the *chain end* (the slot of the last admitted object). Reading slots in
//! order from the manifest's replay point:
//!
//! 1. the first missing slot ends the log (the caller stops there);
//! 2. an object from an epoch below the floor is skipped: it was written by an
//!    owner that a newer fence had already cut off, which therefore never
//!    acknowledged it;
//! 3. a fence at or above the floor is admitted: it starts a new owner's chain;
//! 4. a data object is admitted only if its `prev_slot` is the chain end. One
//!    whose predecessor is not in the log (its own PUT failed, or its slot was
//!    taken by an older owner's late write) was never acknowledged, and neither
//!    was anything that follows it in the same chain, so it is skipped.
//!
//! An owner acknowledges an object only once every object before it in its
//! chain is durable, so every acknowledged object is admitted.

use crate::format::{ObjectKind, WalHeader, NO_SLOT};

/// What to do with the object found at the next slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Part of the log: apply its entries (a fence has none).
    Apply,
    /// Written by a fenced owner after the fence: not part of the log.
    SkipStale,
    /// Follows an object that is not in the log: never acknowledged.
    SkipUnchained,
}

/// State of one walk over a shard's WAL slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogWalk {
    epoch_floor: u64,
    chain_end: u64,
}

impl LogWalk {
    /// Starts a walk after state written by `epoch_floor` whose last object was
    /// at `chain_end` ([`NO_SLOT`] when there was none).
    pub fn new(epoch_floor: u64, chain_end: u64) -> Self {
        LogWalk {
            epoch_floor,
            chain_end,
        }
    }

    /// Decides the object found at the next slot.
    pub fn admit(&mut self, header: &WalHeader) -> Admission {
        if header.writer.epoch < self.epoch_floor {
            return Admission::SkipStale;
        }
        if header.kind == ObjectKind::Data
            && (header.prev_slot != self.chain_end || self.chain_end == NO_SLOT)
        {
            return Admission::SkipUnchained;
        }
        self.epoch_floor = header.writer.epoch;
        self.chain_end = header.slot;
        Admission::Apply
    }

    /// Whether `header` is a tombstone: the fence garbage collection writes
    /// over a collected WAL object inside a fence window (its previous slot
    /// is none). An opener's fence names the chain end it fenced, which is
    /// none only before the shard's first object; so a fence without a
    /// previous slot met after the chain started replaced something, and a
    /// walk that passes it has lost what was there.
    pub fn is_tombstone(&self, header: &WalHeader) -> bool {
        header.kind == ObjectKind::Fence && header.prev_slot == NO_SLOT && self.chain_end != NO_SLOT
    }

    /// The highest epoch admitted so far.
    pub fn epoch_floor(&self) -> u64 {
        self.epoch_floor
    }

    /// The slot of the last admitted object.
    pub fn chain_end(&self) -> u64 {
        self.chain_end
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::WriterId;

    fn object(kind: ObjectKind, slot: u64, prev_slot: u64, epoch: u64) -> WalHeader {
        WalHeader {
            kind,
            slot,
            prev_slot,
            writer: WriterId {
                instance: [0; 16],
                epoch,
                write_id: [0; 16],
            },
            shard: "s".into(),
        }
    }

    fn data(slot: u64, prev: u64, epoch: u64) -> WalHeader {
        object(ObjectKind::Data, slot, prev, epoch)
    }

    fn fence(slot: u64, epoch: u64) -> WalHeader {
        object(ObjectKind::Fence, slot, NO_SLOT, epoch)
    }

    #[test]
    fn older_epochs_after_a_fence_are_skipped() {
        let mut walk = LogWalk::new(0, NO_SLOT);
        assert_eq!(walk.admit(&fence(0, 1)), Admission::Apply);
        assert_eq!(walk.admit(&data(1, 0, 1)), Admission::Apply);
        assert_eq!(walk.admit(&fence(2, 2)), Admission::Apply);
        assert_eq!(walk.admit(&data(3, 1, 1)), Admission::SkipStale);
        assert_eq!(walk.admit(&data(4, 2, 2)), Admission::Apply);
        assert_eq!(walk.epoch_floor(), 2);
        assert_eq!(walk.chain_end(), 4);
    }

    #[test]
    fn data_after_a_missing_predecessor_is_skipped_with_its_successors() {
        let mut walk = LogWalk::new(0, NO_SLOT);
        assert_eq!(walk.admit(&fence(0, 1)), Admission::Apply);
        assert_eq!(walk.admit(&data(1, 0, 1)), Admission::Apply);
        // Slot 2 holds an older owner's late write; ours at 3 followed slot 2.
        assert_eq!(walk.admit(&data(2, 0, 0)), Admission::SkipStale);
        assert_eq!(walk.admit(&data(3, 2, 1)), Admission::SkipUnchained);
        assert_eq!(walk.admit(&data(4, 3, 1)), Admission::SkipUnchained);
        // The next owner's fence resumes the log.
        assert_eq!(walk.admit(&fence(5, 2)), Admission::Apply);
        assert_eq!(walk.admit(&data(6, 5, 2)), Admission::Apply);
    }

    #[test]
    fn data_may_skip_over_known_junk() {
        let mut walk = LogWalk::new(0, NO_SLOT);
        assert_eq!(walk.admit(&fence(0, 2)), Admission::Apply);
        assert_eq!(walk.admit(&data(1, 0, 1)), Admission::SkipStale);
        assert_eq!(walk.admit(&data(2, 0, 2)), Admission::Apply);
    }

    #[test]
    fn the_walk_resumes_from_a_replay_point() {
        let mut walk = LogWalk::new(4, 9);
        assert_eq!(walk.admit(&data(10, 9, 3)), Admission::SkipStale);
        assert_eq!(walk.admit(&data(11, 8, 4)), Admission::SkipUnchained);
        assert_eq!(walk.admit(&data(12, 9, 4)), Admission::Apply);
        let mut fresh = LogWalk::new(0, NO_SLOT);
        assert_eq!(fresh.admit(&data(0, NO_SLOT, 1)), Admission::SkipUnchained);
    }
}
