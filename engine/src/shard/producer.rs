//! Producer state across the layers, converted in this one place.
//!
//! Each layer keeps its own type: the WAL's [`ProducerEntry`] (what an
//! accepted append records), the index run's [`ProducerRecord`] (what a seal
//! keeps) and the engine's [`ProducerState`] (what a stream's tail holds,
//! keyed by producer id). The engine sees both lower crates, so every
//! conversion between them is defined here as `From`, and no other file
//! copies producer fields by hand. Every conversion carries every field the
//! target has: a state replayed from the WAL equals the state loaded from a
//! run (docs/ARCHITECTURE.md, "Sealing, the state index and garbage
//! collection").

use strata_manifest::index_run::ProducerRecord;
use strata_wal::{ProducerEntry, StreamRef};

use super::state::{ProducerClaim, ProducerState};

/// A producer's state under its id: an index run records the two together.
#[derive(Debug, Clone, Copy)]
pub struct NamedProducer<'a> {
    pub id: &'a str,
    pub state: &'a ProducerState,
}

/// A claim the committer accepted, with the offsets its append was given:
/// the WAL entry it stages for the stream.
#[derive(Debug, Clone, Copy)]
pub struct AcceptedClaim<'a> {
    pub stream: StreamRef,
    pub claim: &'a ProducerClaim,
    pub first_offset: u64,
    pub next_offset: u64,
}

impl From<&ProducerEntry> for ProducerState {
    fn from(entry: &ProducerEntry) -> Self {
        ProducerState {
            epoch: entry.epoch,
            seq: entry.seq,
            first_offset: entry.first_offset,
            next_offset: entry.next_offset,
            digest: entry.digest,
        }
    }
}

impl From<&ProducerRecord> for ProducerState {
    fn from(record: &ProducerRecord) -> Self {
        ProducerState {
            epoch: record.epoch,
            seq: record.seq,
            first_offset: record.first_offset,
            next_offset: record.next_offset,
            digest: record.digest,
        }
    }
}

impl From<NamedProducer<'_>> for ProducerRecord {
    fn from(named: NamedProducer<'_>) -> Self {
        let state = named.state;
        ProducerRecord {
            id: named.id.to_string(),
            epoch: state.epoch,
            seq: state.seq,
            first_offset: state.first_offset,
            next_offset: state.next_offset,
            digest: state.digest,
        }
    }
}

impl From<AcceptedClaim<'_>> for ProducerEntry {
    fn from(accepted: AcceptedClaim<'_>) -> Self {
        let claim = accepted.claim;
        ProducerEntry {
            stream: accepted.stream,
            producer_id: claim.id.clone(),
            epoch: claim.epoch,
            seq: claim.seq,
            first_offset: accepted.first_offset,
            next_offset: accepted.next_offset,
            digest: claim.digest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: StreamRef = StreamRef {
        id: [7; 16],
        incarnation: 3,
    };

    fn claim() -> ProducerClaim {
        ProducerClaim {
            id: "producer-1".into(),
            epoch: 4,
            seq: 9,
            digest: [5; 16],
        }
    }

    #[test]
    fn a_state_survives_the_wal_and_the_index_run_alike() {
        let claim = claim();
        let entry = ProducerEntry::from(AcceptedClaim {
            stream: STREAM,
            claim: &claim,
            first_offset: 10,
            next_offset: 12,
        });
        assert_eq!(entry.stream, STREAM);
        assert_eq!(entry.producer_id, claim.id);
        let from_wal = ProducerState::from(&entry);
        assert_eq!(
            from_wal,
            ProducerState {
                epoch: 4,
                seq: 9,
                first_offset: 10,
                next_offset: 12,
                digest: [5; 16],
            }
        );
        let record = ProducerRecord::from(NamedProducer {
            id: &claim.id,
            state: &from_wal,
        });
        assert_eq!(record.id, claim.id);
        assert_eq!(ProducerState::from(&record), from_wal);
    }
}
