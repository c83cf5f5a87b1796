//! # strata-manifest: the shard manifest and the compare-and-swap it stands on
//!
//! * [`format`]: the byte layout of a shard manifest ([`Manifest`]): the writer
//!   epoch and identity of the owner that wrote it, the WAL replay point, and the
//!   lists of index runs and segment objects that hold the shard's sealed state.
//! * [`store`]: the object-store plumbing every crate above shares.
//!   [`CasObject`] is a generic object updated only by conditional PUTs
//!   (`If-None-Match: *` to create, `If-Match: <etag>` to replace). It knows
//!   nothing about manifests: any value with a [`CasCodec`] works ([`JsonCodec`]
//!   stores any JSON value; the server uses it for stream descriptors). An
//!   ambiguous answer (`AlreadyExists` or `Precondition` after a retried
//!   request, or a transport error) is resolved by reading the object back and
//!   comparing the write token stored in it. Create-only writes of raw bytes
//!   (WAL objects, segments, index runs) and the retry rules live there too.
//! * [`claim`]: taking ownership of a shard by bumping the writer epoch through
//!   the CAS — the first half of fencing (the engine writes the fence object).
//! * [`index_run`]: immutable, sorted runs of the shard's sealed state: each
//!   stream's tail and the segment chunks sealed for it.
//!
//! Invariants: the manifest's `version` grows by exactly one per successful
//! write; `writer_epoch` never decreases; the replay point never moves backwards.

pub mod claim;
pub mod format;
pub mod index_run;
pub mod store;

pub use claim::{claim_shard, ClaimError};
pub use format::{
    add_window, IndexRunRef, Manifest, ManifestCodec, ManifestError, ReplayPoint, SegmentRef,
    SlotRange, WriterIdentity, NO_SLOT,
};
pub use store::{
    CasCodec, CasError, CasObject, CreateError, JsonCodec, JsonLayout, JsonObject, RetryPolicy,
    Versioned,
};
