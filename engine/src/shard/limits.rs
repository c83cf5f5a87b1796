//! The WAL format's limits, checked at the engine's entry point.
//!
//! `Shard::start_append` (behind `Shard::append`) refuses, with
//! `EngineError::TooLarge` and before anything is queued, every request the
//! WAL encoder would refuse inside a PUT task, where the refusal would fail
//! the whole group commit the request shares. Each limit of `strata_wal` and
//! where it holds:
//!
//! * `PRODUCER_ID_BYTES_MAX`, `STREAM_SEQ_BYTES_MAX`: [`check_wal_limits`].
//! * `OBJECT_BYTES_MAX`: an append's encoded entry is held within
//!   [`APPEND_ENTRY_BYTES_MAX`] (checked once its pages are built); the
//!   committer cuts objects within the format's limit beside the header.
//! * `ENTRIES_MAX`: one request stages at most four entries, and the
//!   committer cuts objects at `max_object_entries`, clamped to the limit.
//! * `SHARD_NAME_BYTES_MAX`: a [`crate::ids::ShardName`] cannot be longer, so
//!   no header the shard writes is.
//!
//! (docs/ARCHITECTURE.md, "Write path and durability".)

use super::api::AppendRequest;
use crate::error::EngineError;

/// The largest append entry a WAL object can carry beside its header, the
/// request's producer, `Stream-Seq` and close entries, and a shard name of
/// the longest length.
pub(super) const APPEND_ENTRY_BYTES_MAX: usize = strata_wal::OBJECT_BYTES_MAX - (64 << 10);

/// Checks the request against every WAL format limit that is not a page's
/// (those `prepare_body` checks), so nothing is refused first by the encoder
/// inside a PUT task, where it would fail the whole group commit.
pub(super) fn check_wal_limits(request: &AppendRequest) -> Result<(), EngineError> {
    if let Some(claim) = &request.producer {
        if claim.id.len() > strata_wal::PRODUCER_ID_BYTES_MAX {
            return Err(EngineError::TooLarge {
                what: "producer id",
                size: claim.id.len() as u64,
                limit: strata_wal::PRODUCER_ID_BYTES_MAX as u64,
            });
        }
    }
    if let Some(seq) = &request.stream_seq {
        if seq.len() > strata_wal::STREAM_SEQ_BYTES_MAX {
            return Err(EngineError::TooLarge {
                what: "Stream-Seq",
                size: seq.len() as u64,
                limit: strata_wal::STREAM_SEQ_BYTES_MAX as u64,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use object_store::memory::InMemory;
    use object_store::ObjectStore;
    use rand::{RngCore, SeedableRng};
    use strata_segments::{StreamCipher, StreamEpoch, StreamKey};
    use strata_wal::{CloseEntry, ProducerEntry, StreamSeqEntry, WalEntry};

    use super::*;
    use crate::env::EngineEnv;
    use crate::ids::{InstanceId, ShardName, StreamRef};
    use crate::shard::{ShardConfig, ShardStatus};

    const STREAM: StreamRef = StreamRef {
        id: [9; 16],
        incarnation: 1,
    };

    /// The margin `APPEND_ENTRY_BYTES_MAX` leaves holds the header of the
    /// longest shard name, the trailer, and the request's largest producer,
    /// `Stream-Seq` and close entries.
    #[test]
    fn the_largest_request_fits_one_wal_object() {
        let producer = WalEntry::Producer(ProducerEntry {
            stream: STREAM,
            producer_id: "p".repeat(strata_wal::PRODUCER_ID_BYTES_MAX),
            epoch: u64::MAX,
            seq: u64::MAX,
            first_offset: u64::MAX,
            next_offset: u64::MAX,
            digest: [0xff; 16],
        });
        let seq = WalEntry::StreamSeq(StreamSeqEntry {
            stream: STREAM,
            seq: Bytes::from(vec![b'9'; strata_wal::STREAM_SEQ_BYTES_MAX]),
        });
        let close = WalEntry::Close(CloseEntry {
            stream: STREAM,
            closed_ms: u64::MAX,
        });
        let beside = strata_wal::header_encoded_len(strata_wal::format::SHARD_NAME_BYTES_MAX)
            + strata_wal::OBJECT_TRAILER_BYTES
            + [producer, seq, close]
                .iter()
                .map(strata_wal::entry_encoded_len)
                .sum::<usize>();
        assert!(APPEND_ENTRY_BYTES_MAX + beside <= strata_wal::OBJECT_BYTES_MAX);
    }

    /// An append whose entry the WAL cannot hold (only possible with
    /// `max_append_bytes` raised past the format's object limit) is refused
    /// by `append` itself, before it is queued: the shard stays active and
    /// later appends go through.
    #[tokio::test]
    async fn an_append_over_the_wal_object_limit_is_refused_before_it_is_queued() {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let config = ShardConfig {
            max_append_bytes: 2 * strata_wal::OBJECT_BYTES_MAX,
            ..ShardConfig::default()
        };
        let shard = crate::shard::Shard::open(
            EngineEnv::production(store),
            ShardName::new("limits").expect("a valid name"),
            InstanceId([1; 16]),
            config,
        )
        .await
        .expect("opens");
        let cipher = Arc::new(StreamCipher::new(
            StreamEpoch([5; 16]),
            StreamKey::from_bytes([2; 32]),
        ));
        shard.create_stream(STREAM, &cipher).await.expect("created");
        // Incompressible records, a little more than one object can hold.
        let record_bytes = 4 << 20;
        let count = strata_wal::OBJECT_BYTES_MAX / record_bytes + 1;
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let records: Vec<Bytes> = (0..count)
            .map(|_| {
                let mut record = vec![0u8; record_bytes];
                rng.fill_bytes(&mut record);
                Bytes::from(record)
            })
            .collect();
        let refused = shard.start_append(AppendRequest::new(STREAM, cipher.clone(), records));
        assert!(
            matches!(
                refused,
                Err(EngineError::TooLarge {
                    what: "append (as encoded in the WAL)",
                    ..
                })
            ),
            "{:?}",
            refused.as_ref().err()
        );
        assert_eq!(shard.status(), ShardStatus::Active);
        let ack = shard
            .append(AppendRequest::new(
                STREAM,
                cipher,
                vec![Bytes::from_static(b"small")],
            ))
            .await
            .expect("a later append goes through");
        assert_eq!(ack.first_offset, 0);
        shard.shutdown().await;
    }
}
