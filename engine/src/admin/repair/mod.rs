//! Operator repairs: roll a shard back to a retained manifest version, or
//! recover a shard whose manifest or index runs are damaged, from the
//! retained versions (`shard::history`).
//!
//! A repair is a change of owner like any other: it writes the chosen
//! manifest as a new version (with a higher epoch, by compare-and-swap on
//! the object in the store, or create-only when there is none), then opens
//! the shard normally, which claims it again, walks the WAL, places a fence
//! at the first free slot, and seals on shutdown. A previous owner still
//! running is therefore fenced: its next manifest write fails the
//! compare-and-swap and its next WAL write meets the fence.
//!
//! Before writing anything, a repair compares, stream by stream, what the
//! chosen version recovers with what is physically present (the current
//! manifest's state when it is readable, and the offsets every segment's
//! table holds): records that would become unreachable are reported, and
//! the repair refuses unless the operator accepts the loss. Objects that
//! fail validation are copied under `quarantine/` before anything is
//! written; damaged index runs are removed from their place once the new
//! manifest is in, and a damaged manifest is replaced in place (by
//! compare-and-swap on the e-tag of the bytes kept), never deleted.
//!
//! Files: `report.rs` (options, report, errors), `evidence.rs` (what the
//! store holds), `fence.rs` (fencing a live owner first), `candidate.rs`
//! (what may be restored), `loss.rs` (what a candidate would lose),
//! `restore.rs` (carrying it out), `rollback.rs` and `recover.rs` (the two
//! repairs).

mod candidate;
mod evidence;
mod fence;
mod loss;
mod recover;
mod report;
mod restore;
mod rollback;

pub use recover::recover;
pub use report::{
    LostChange, RepairError, RepairOptions, RepairOutcome, RepairReport, RestoreSource, StreamAfter,
};
pub use rollback::rollback;
