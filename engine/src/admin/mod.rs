//! # Operator tools
//!
//! Read-only views of shards ([`inspect`]: list and inspect; [`verify`]:
//! verify) and the repairs ([`repair`]: roll back to a retained manifest
//! version, recover a damaged shard). The views only GET, HEAD and LIST, so
//! they are safe to run against a shard a live owner holds (they see a
//! snapshot that may be slightly behind it); a repair is a change of owner
//! like any other and fences a live one. `objects.rs` reads the objects all
//! of them look at (docs/ARCHITECTURE.md).

pub mod inspect;
mod objects;
pub mod repair;
pub mod verify;

pub use inspect::{
    inspect, list_shards, shard_holder, Inspection, ListedObject, ManifestSummary, ShardHolder,
    ShardSummary, StreamSummary, WalSummary,
};
pub use verify::{verify, Finding, FindingKind, Progress, RecordRange, Verification, VerifyCounts};
