//! The log-walk rule: which WAL objects, read in slot order from the replay
//! point, belong to the shard's log.
//!
//! The walk keeps an *epoch floor*: the highest writer epoch admitted so far
//! (initially the epoch recorded with the manifest's replay point). An object
//! whose epoch is at least the floor is admitted and raises the floor; an object
//! from a lower epoch is skipped. The caller ends the walk at the first missing
//! slot. Why this is safe is stated in the crate overview: a lower-epoch object
//! after a higher-epoch one lies after the newer owner's fence, and its writer
//! could not have acknowledged it.

use crate::format::WalHeader;

/// What to do with the object found at the next slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Part of the log: apply its entries (a fence has none).
    Apply,
    /// Written by a fenced owner after the fence: not part of the log.
    SkipStale,
}

/// State of one walk over a shard's WAL slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogWalk {
    epoch_floor: u64,
}

impl LogWalk {
    /// Starts a walk whose first slot follows state written by `epoch_floor`.
    pub fn new(epoch_floor: u64) -> Self {
        LogWalk { epoch_floor }
    }

    /// Decides the object found at the next slot.
    pub fn admit(&mut self, header: &WalHeader) -> Admission {
        if header.writer.epoch < self.epoch_floor {
            return Admission::SkipStale;
        }
        self.epoch_floor = header.writer.epoch;
        Admission::Apply
    }

    /// The highest epoch admitted so far.
    pub fn epoch_floor(&self) -> u64 {
        self.epoch_floor
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::{ObjectKind, WriterId};

    fn header(epoch: u64) -> WalHeader {
        WalHeader {
            kind: ObjectKind::Data,
            slot: 0,
            writer: WriterId {
                instance: [0; 16],
                epoch,
                write_id: [0; 16],
            },
            shard: "s".into(),
        }
    }

    #[test]
    fn older_epochs_after_newer_are_skipped() {
        let mut walk = LogWalk::new(1);
        assert_eq!(walk.admit(&header(1)), Admission::Apply);
        assert_eq!(walk.admit(&header(2)), Admission::Apply);
        assert_eq!(walk.admit(&header(1)), Admission::SkipStale);
        assert_eq!(walk.admit(&header(2)), Admission::Apply);
        assert_eq!(walk.admit(&header(5)), Admission::Apply);
        assert_eq!(walk.epoch_floor(), 5);
    }

    #[test]
    fn floor_from_replay_point_skips_leftovers() {
        let mut walk = LogWalk::new(4);
        assert_eq!(walk.admit(&header(3)), Admission::SkipStale);
        assert_eq!(walk.admit(&header(4)), Admission::Apply);
    }
}
