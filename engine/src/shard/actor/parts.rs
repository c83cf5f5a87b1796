//! The actor's state, grouped by the role that owns it. Every group is
//! written only by the actor task; the roles' code (`commit.rs`, `pump.rs`,
//! `ack.rs`, `recover.rs`, `schedule.rs`) reads across groups but each group
//! says who changes it.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use strata_manifest::{Manifest, Versioned};
use strata_wal::WalObject;
use tokio::sync::{mpsc, oneshot};
use tokio::task::{Id as TaskId, JoinSet};
use tokio::time::Instant;

use super::batch::{Batch, QueuedReply};
use crate::shard::command::Command;
use crate::shard::gc::{GcOutcome, GcQueue};
use crate::shard::io::WalPutOutcome;
use crate::shard::seal::{SealResult, SealState};
use crate::shard::state::Tail;

/// The command queue (drained by `mod.rs`; closed at shutdown).
pub(super) struct Inbox {
    pub(super) rx: mpsc::Receiver<Command>,
    pub(super) receiving: bool,
    pub(super) shutdown_reply: Option<oneshot::Sender<()>>,
}

/// This owner's claim on the shard: changed by a re-open (`recover.rs`), a
/// landed seal (`schedule.rs`) and fencing.
pub(super) struct Ownership {
    pub(super) manifest: Versioned<Manifest>,
    pub(super) epoch: u64,
    pub(super) fenced: bool,
    /// The store's state is unknown to this owner (a seal's manifest write):
    /// re-open from it.
    pub(super) reopen_needed: bool,
}

/// What the committer (`commit.rs`) staged and the pump has not yet issued.
pub(super) struct Staging {
    /// Tails as the committer sees them: durable plus everything staged.
    pub(super) staged: HashMap<[u8; 16], Tail>,
    pub(super) batches: VecDeque<Batch>,
    /// Encoded bytes staged or in flight (released by the acker).
    pub(super) pending_bytes: usize,
}

/// The WAL chain and the PUTs in flight: issued by the pump (`pump.rs`),
/// completed by the acker (`ack.rs`), abandoned by a failure (`recover.rs`).
pub(super) struct WalPipeline {
    pub(super) inflight: VecDeque<InFlight>,
    pub(super) next_issue: u64,
    pub(super) puts: JoinSet<PutDone>,
    pub(super) put_tasks: HashMap<TaskId, u64>,
    pub(super) next_slot: u64,
    /// Slot of the last object issued in this owner's chain (the fence at first).
    pub(super) chain_end: u64,
    pub(super) occupied: BTreeSet<u64>,
    pub(super) last_flush_start: Option<Instant>,
    /// How long this owner's WAL PUTs take, smoothed.
    pub(super) put_latency: PutLatency,
    /// The appenders a PUT just acknowledged, expected back soon.
    pub(super) herd: Option<Herd>,
    pub(super) failed_issue: Option<u64>,
}

/// The sealer's state and its task (`schedule.rs`).
pub(super) struct Sealer {
    pub(super) state: SealState,
    /// At most one seal runs at a time.
    pub(super) tasks: JoinSet<SealResult>,
    /// When the running seal started.
    pub(super) started: Option<Instant>,
}

/// The garbage collector's queue and tasks (`schedule.rs`).
pub(super) struct Collector {
    pub(super) queue: GcQueue,
    /// The open's sweep and at most one collection.
    pub(super) tasks: JoinSet<GcOutcome>,
    pub(super) collecting: bool,
}

/// After a PUT's acknowledgements go out, the appenders they woke usually
/// append again at once: a small batch waits (at most `HERD_WAIT`) for as many
/// replies as that PUT acknowledged, so they share one object instead of
/// splitting over several.
#[derive(Debug, Clone, Copy)]
pub(super) struct Herd {
    pub(super) replies: usize,
    pub(super) until: Instant,
}

pub(super) struct InFlight {
    pub(super) issue: u64,
    pub(super) slot: u64,
    pub(super) started: Instant,
    /// The sealed object, once its PUT task has built it.
    pub(super) object: Option<Arc<WalObject>>,
    pub(super) replies: Vec<QueuedReply>,
    pub(super) bytes: usize,
    pub(super) outcome: Option<WalPutOutcome>,
}

/// An exponentially weighted mean of written WAL PUTs' durations (weight
/// 1/8 per PUT), from issue to answer; unknown before the first.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct PutLatency {
    smoothed: Option<Duration>,
}

impl PutLatency {
    pub(super) fn observe(&mut self, took: Duration) {
        self.smoothed = Some(match self.smoothed {
            None => took,
            Some(mean) => (mean * 7 + took) / 8,
        });
    }

    pub(super) fn estimate(&self) -> Option<Duration> {
        self.smoothed
    }
}

pub(super) struct PutDone {
    pub(super) issue: u64,
    pub(super) object: Option<Arc<WalObject>>,
    pub(super) outcome: WalPutOutcome,
}
