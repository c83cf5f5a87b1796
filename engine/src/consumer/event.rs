//! The values a consumer's state and its log share: its settings, the
//! record an event names, and the events themselves (`mod.rs` decides
//! them, `durable.rs` logs and folds them).

use bytes::Bytes;

/// A consumer's settings (validated by the caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerConfig {
    pub visibility_ms: u64,
    pub max_attempts: u32,
    pub max_batch: usize,
}

/// A record of a key, as events name it: an event about a key's oldest
/// record names that record, so a log replayed out of step is caught.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRef {
    pub routing_key: Bytes,
    pub position: u64,
}

/// One change of a consumer's state, as a log would carry it. Every event
/// but `Discovered` is about a key's oldest pending record, which it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerEvent {
    /// Records found in the stream (all of them taken), and where the scan
    /// that found them ended.
    Discovered {
        records: Vec<(u64, Bytes)>,
        scanned_to: u64,
    },
    /// A lease's deadline passed: the record is free again.
    Expired {
        record: RecordRef,
    },
    Delivered {
        record: RecordRef,
        lease: u64,
        deadline_ms: u64,
    },
    /// The record spent its attempts and awaits its dead letter.
    Poisoned {
        record: RecordRef,
    },
    /// The record is done (acknowledged or dead-lettered).
    Finished {
        record: RecordRef,
    },
    Retried {
        record: RecordRef,
        visible_at_ms: u64,
    },
    Extended {
        record: RecordRef,
        deadline_ms: u64,
    },
    DeadLetterFailed {
        record: RecordRef,
    },
}
