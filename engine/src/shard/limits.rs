//! The WAL format's limits, checked at the engine's entry point.
//!
//! `Shard::start_append` (behind `Shard::append`) refuses, with
//! `EngineError::TooLarge` and before anything is queued, every request the
//! WAL encoder would refuse inside a PUT task, where the refusal would fail
//! the whole group commit the request shares. Each limit of `strata_wal` and
//! where it holds:
//!
//! * `MAX_PRODUCER_ID_BYTES`, `MAX_STREAM_SEQ_BYTES`: [`check_wal_limits`].
//! * `MAX_OBJECT_BYTES`: an append's encoded entry is held within
//!   [`APPEND_ENTRY_BYTES_MAX`] (checked once its pages are built); the
//!   committer cuts objects within the format's limit beside the header.
//! * `MAX_ENTRIES`: one request stages at most four entries, and the
//!   committer cuts objects at `max_object_entries`, clamped to the limit.
//! * `MAX_SHARD_NAME_BYTES`: a [`crate::ids::ShardName`] cannot be longer, so
//!   no header the shard writes is.
//!
//! (docs/ARCHITECTURE.md, "Write path and durability".)

use super::api::AppendRequest;
use crate::error::EngineError;

/// The largest append entry a WAL object can carry beside its header, the
/// request's producer, `Stream-Seq` and close entries, and a shard name of
/// the longest length.
pub(super) const APPEND_ENTRY_BYTES_MAX: usize = strata_wal::MAX_OBJECT_BYTES - (64 << 10);

/// Checks the request against every WAL format limit that is not a page's
/// (those `prepare_body` checks), so nothing is refused first by the encoder
/// inside a PUT task, where it would fail the whole group commit.
pub(super) fn check_wal_limits(request: &AppendRequest) -> Result<(), EngineError> {
    if let Some(claim) = &request.producer {
        if claim.id.len() > strata_wal::MAX_PRODUCER_ID_BYTES {
            return Err(EngineError::TooLarge {
                what: "producer id",
                size: claim.id.len() as u64,
                limit: strata_wal::MAX_PRODUCER_ID_BYTES as u64,
            });
        }
    }
    if let Some(seq) = &request.stream_seq {
        if seq.len() > strata_wal::MAX_STREAM_SEQ_BYTES {
            return Err(EngineError::TooLarge {
                what: "Stream-Seq",
                size: seq.len() as u64,
                limit: strata_wal::MAX_STREAM_SEQ_BYTES as u64,
            });
        }
    }
    Ok(())
}
