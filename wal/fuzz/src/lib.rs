//! Helpers shared by the WAL fuzz targets and by the seed generator
//! (`examples/seeds.rs`).

use bytes::Bytes;
use strata_wal::{
    encode, AppendEntry, CloseEntry, ConsumerEntry, CreateEntry, DeleteEntry, ObjectKind,
    ProducerEntry, StreamRef, StreamSeqEntry, UsageEntry, WalEntry, WalHeader, WalObject, WriterId,
    NO_SLOT,
};

/// `data` with its last four bytes replaced by the CRC-32C of the others, so
/// that mutated inputs get past the checksum and reach the field checks.
/// `None` when `data` is too short to hold a CRC.
pub fn with_valid_crc(data: &[u8]) -> Option<Vec<u8>> {
    let n = data.len().checked_sub(4)?;
    let mut v = data.to_vec();
    let crc = crc32c::crc32c(&v[..n]);
    v[n..].copy_from_slice(&crc.to_le_bytes());
    Some(v)
}

fn stream(n: u8) -> StreamRef {
    StreamRef {
        id: [n; 16],
        incarnation: u64::from(n) * 3 + 1,
    }
}

fn writer(epoch: u64) -> WriterId {
    WriterId {
        instance: [0xA5; 16],
        epoch,
        write_id: [epoch as u8; 16],
    }
}

/// Real WAL objects, as the engine writes them: a fence, a tombstone-sized
/// fence, and data objects with every entry kind. Names are seed file names.
pub fn seed_objects() -> Vec<(&'static str, Bytes)> {
    let data = |slot: u64, prev_slot: u64, entries: Vec<WalEntry>| WalObject {
        header: WalHeader {
            kind: ObjectKind::Data,
            slot,
            prev_slot,
            writer: writer(2),
            shard: "s0".into(),
        },
        entries,
    };
    let objects = vec![
        (
            "fence",
            WalObject::fence(7, NO_SLOT, writer(2), "s0".into()),
        ),
        (
            "fence-long-name",
            WalObject::fence(12, 3, writer(9), "shard-with-a-longer-name-0123".into()),
        ),
        (
            "create-append",
            data(
                8,
                7,
                vec![
                    WalEntry::Create(CreateEntry {
                        stream: stream(1),
                        created_ms: 1_700_000_000_000,
                        epoch: [0x11; 16],
                        key_fingerprint: [0x22; 16],
                        account: Bytes::from_static(b"project-a"),
                    }),
                    WalEntry::Append(AppendEntry {
                        stream: stream(1),
                        first_offset: 0,
                        record_count: 3,
                        payload_bytes: 12,
                        timestamp_ms: 1_700_000_000_001,
                        pages: vec![
                            Bytes::from_static(b"SP\x01\x02page-bytes-are-opaque-here"),
                            Bytes::from_static(b"second page"),
                        ],
                    }),
                ],
            ),
        ),
        (
            "producer-seq-close",
            data(
                9,
                8,
                vec![
                    WalEntry::Append(AppendEntry {
                        stream: stream(1),
                        first_offset: 3,
                        record_count: 1,
                        payload_bytes: 5,
                        timestamp_ms: 1_700_000_000_002,
                        pages: vec![Bytes::from_static(b"hello")],
                    }),
                    WalEntry::Producer(ProducerEntry {
                        stream: stream(1),
                        producer_id: "producer-1".into(),
                        epoch: 0,
                        seq: 4,
                        first_offset: 3,
                        next_offset: 4,
                        digest: [0x33; 16],
                    }),
                    WalEntry::StreamSeq(StreamSeqEntry {
                        stream: stream(1),
                        seq: Bytes::from_static(b"000042"),
                    }),
                    WalEntry::Close(CloseEntry {
                        stream: stream(1),
                        closed_ms: 1_700_000_000_003,
                    }),
                ],
            ),
        ),
        (
            "delete",
            data(
                10,
                9,
                vec![WalEntry::Delete(DeleteEntry { stream: stream(2) })],
            ),
        ),
        (
            "consumer",
            data(
                12,
                11,
                vec![WalEntry::Consumer(ConsumerEntry {
                    stream: stream(1),
                    name: "workers".into(),
                    change: Bytes::from_static(b"\x01\x02\x01\0\0\0\0\0\0\0"),
                })],
            ),
        ),
        (
            "usage",
            data(
                13,
                12,
                vec![WalEntry::Usage(UsageEntry {
                    stream: stream(1),
                    reads: 7,
                    read_bytes: 70_000,
                    last_read_ms: 1_700_000_000_004,
                })],
            ),
        ),
        ("empty-data", data(11, 10, Vec::new())),
    ];
    objects
        .into_iter()
        .map(|(name, object)| (name, encode(&object).expect("seed encodes").to_bytes()))
        .collect()
}
