//! What a repair is asked ([`RepairOptions`]) and what it answers: the
//! report of what it did or would do, what would be lost, and its errors.

use std::time::Duration;

use serde::Serialize;

use crate::admin::verify::RecordRange;
use crate::error::EngineError;

/// How a repair may proceed.
#[derive(Debug, Clone, Copy, Default)]
pub struct RepairOptions {
    /// Proceed even if the shard was written recently (a live owner may hold
    /// it; it is fenced).
    pub force: bool,
    /// Proceed even if records would become unreachable.
    pub accept_loss: bool,
    /// Only report what would be done.
    pub dry_run: bool,
    /// A shard written within this long is presumed to have a live owner.
    pub live_window: Duration,
    /// With `force` (and not `dry_run`), how long to wait after fencing a
    /// live owner before reading the store: a garbage collection batch that
    /// confirmed its ownership just before the fence finishes meanwhile, so
    /// the evidence the repair decides on no longer changes under it.
    pub quiesce: Duration,
}

/// One stream's next offset after the repair.
#[derive(Debug, Clone, Serialize)]
pub struct StreamAfter {
    pub stream_id: String,
    pub incarnation: u64,
    pub status: String,
    pub next_offset: u64,
}

/// What a repair did (or, dry or refused, would do).
#[derive(Debug, Clone, Serialize)]
pub struct RepairReport {
    pub shard: String,
    /// Where the restored manifest came from.
    pub restored_from: RestoreSource,
    /// The version written (`None` when nothing was written).
    pub written_version: Option<u64>,
    /// The epoch of the owner that reopened the shard after the repair.
    pub reopened_epoch: Option<u64>,
    pub quarantined: Vec<String>,
    /// Records present in the store that this repair would leave unreachable.
    pub lost: Vec<RecordRange>,
    /// Acknowledged changes without records (closes, deletes, creations,
    /// producer and `Stream-Seq` state) the current manifest's log holds and
    /// this repair would undo.
    pub lost_changes: Vec<LostChange>,
    /// Records already lost to damage no repair can undo (corrupt or missing
    /// chunks, WAL objects stranded after a missing one), whatever is done.
    pub unrecoverable: Vec<RecordRange>,
    pub streams: Vec<StreamAfter>,
    pub outcome: RepairOutcome,
}

/// An acknowledged change a repair would undo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LostChange {
    /// `None`: a change to any stream.
    pub stream_id: Option<String>,
    pub incarnation: u64,
    pub change: String,
}

/// Where a repair's manifest came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "version")]
pub enum RestoreSource {
    /// A retained manifest version.
    History(u64),
    /// Rebuilt from every index run, segment and WAL object in the store.
    Rebuilt,
    /// Nothing was restored: the current manifest stands.
    Current,
}

/// Whether a repair was carried out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "status", content = "reason")]
pub enum RepairOutcome {
    Done,
    DryRun,
    /// Nothing was written, for this reason.
    Refused(String),
}

#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    #[error("{0}")]
    Engine(#[from] EngineError),
    #[error("manifest version {version} is not retained in the history")]
    VersionNotRetained { version: u64 },
    #[error("no retained manifest version can restore the shard: {reason}")]
    NoUsableVersion { reason: String },
    #[error("the shard is healthy; nothing to recover")]
    Healthy,
    /// The manifest changed (or appeared, or vanished) between the repair's
    /// read and its write: the repair wrote no manifest.
    #[error(
        "the shard's manifest changed while the repair ran (is a server still running?); \
         no manifest was written: stop every server and run the repair again"
    )]
    ManifestChanged,
}
