//! Helpers shared by the manifest and index-run fuzz targets and by the seed
//! generator (`examples/seeds.rs`).

use bytes::Bytes;
use strata_manifest::format::{
    encode, IndexRunRef, Manifest, ReplayPoint, SegmentRef, SlotRange, WriterIdentity,
};
use strata_manifest::index_run::{
    self, IndexRun, ProducerRecord, RunEntry, TailRecord, TailStatus, UsageRecord,
};

/// `data` with its last four bytes replaced by the CRC-32C of the others.
pub fn with_valid_crc(data: &[u8]) -> Option<Vec<u8>> {
    let n = data.len().checked_sub(4)?;
    let mut v = data.to_vec();
    let crc = crc32c::crc32c(&v[..n]);
    v[n..].copy_from_slice(&crc.to_le_bytes());
    Some(v)
}

/// Real manifests: the initial one, and one after a few seals and claims.
pub fn seed_manifests() -> Vec<(&'static str, Bytes)> {
    let initial = Manifest::initial("s0".into(), [1; 16], [2; 16]);
    let mut sealed = initial.successor(WriterIdentity {
        instance: [3; 16],
        epoch: 4,
        write_id: [5; 16],
    });
    sealed.version = 17;
    sealed.replay = ReplayPoint {
        slot: 120,
        epoch_floor: 4,
        chain_end: 119,
    };
    sealed.next_object_id = 9;
    sealed.index_runs = vec![
        IndexRunRef {
            id: (4 << 32) | 5,
            bytes: 2_048,
        },
        IndexRunRef {
            id: (4 << 32) | 7,
            bytes: 512,
        },
    ];
    sealed.segments = vec![SegmentRef {
        id: (4 << 32) | 6,
        bytes: 1 << 20,
    }];
    sealed.fence_windows = vec![
        SlotRange { start: 0, end: 3 },
        SlotRange { start: 40, end: 44 },
    ];
    let mut long_name = sealed.clone();
    long_name.shard = "a-shard-name-of-exactly-sixty-four-bytes-0123456789-abcdefghijkl".into();
    long_name.replay.chain_end = u64::MAX;
    vec![
        ("initial", encode(&initial).unwrap()),
        ("sealed", encode(&sealed).unwrap()),
        ("long-name", encode(&long_name).unwrap()),
    ]
}

fn tail(status: TailStatus) -> TailRecord {
    TailRecord {
        status,
        next_offset: 30,
        payload_bytes: 4_096,
        created_ms: 1_700_000_000_000,
        closed_ms: (status == TailStatus::Closed).then_some(1_700_000_000_500),
        last_append_ms: Some(1_700_000_000_400),
        epoch: [0x11; 16],
        key_fingerprint: [0x22; 16],
        stream_seq: Some(Bytes::from_static(b"000030")),
        producers: vec![ProducerRecord {
            id: "producer-1".into(),
            epoch: 2,
            seq: 9,
            first_offset: 20,
            next_offset: 30,
            digest: [0x33; 16],
        }],
        usage: UsageRecord {
            account: Bytes::from_static(b"project-a"),
            reads: 5,
            read_bytes: 20_480,
            last_read_ms: Some(1_700_000_000_600),
        },
    }
}

/// Real index runs: empty, and one of three streams (open, closed, deleted)
/// with chunk references.
pub fn seed_runs() -> Vec<(&'static str, Bytes)> {
    let empty = IndexRun {
        id: (3 << 32) | 1,
        chain_end: 10,
        entries: Vec::new(),
    };
    // Chunk bytes are opaque to the run format; the engine writes a segment
    // id and a chunk reference (docs/FORMATS.md §12.2). These are shaped so.
    let chunk = |seed: u8| {
        let mut v = ((3u64 << 32) | 2).to_le_bytes().to_vec();
        v.extend_from_slice(&[seed; 16]);
        v.extend_from_slice(&[0; 48]);
        v.extend_from_slice(&[0, 1, 0, 0, 0]);
        v.extend_from_slice(&[seed; 8]);
        v.extend_from_slice(&[0; 4]);
        Bytes::from(v)
    };
    let full = IndexRun {
        id: (3 << 32) | 3,
        chain_end: 99,
        entries: vec![
            RunEntry {
                stream_id: [1; 16],
                incarnation: 1,
                tail: tail(TailStatus::Open),
                chunks: vec![chunk(1), chunk(2)],
                consumers: Bytes::from_static(b"consumers"),
            },
            RunEntry {
                stream_id: [2; 16],
                incarnation: 5,
                tail: tail(TailStatus::Closed),
                chunks: vec![chunk(3)],
                consumers: Bytes::new(),
            },
            RunEntry {
                stream_id: [3; 16],
                incarnation: 2,
                tail: TailRecord {
                    stream_seq: None,
                    producers: Vec::new(),
                    closed_ms: None,
                    last_append_ms: None,
                    ..tail(TailStatus::Deleted)
                },
                chunks: Vec::new(),
                consumers: Bytes::new(),
            },
        ],
    };
    let mut one = full.clone();
    one.entries.truncate(1);
    one.entries[0].tail.usage = UsageRecord::default();
    let v2 = as_version(&one, index_run::FORMAT_VERSION_V2);
    one.entries[0].consumers = Bytes::new();
    vec![
        ("empty", index_run::encode(&empty).unwrap()),
        ("three-streams", index_run::encode(&full).unwrap()),
        ("one-stream-v2", v2),
        (
            "one-stream-v1",
            as_version(&one, index_run::FORMAT_VERSION_V1),
        ),
    ]
}

/// A one-entry run with no usage in an older layout: the current bytes
/// without the entry's usage block (version 2), and without its (last)
/// consumers length too (version 1, which needs an empty consumer table),
/// with the version and a fresh CRC.
fn as_version(run: &IndexRun, version: u16) -> Bytes {
    assert!(run.entries.len() == 1 && run.entries[0].tail.usage == UsageRecord::default());
    let current = index_run::encode(run).unwrap();
    let mut usage = vec![0u8; 2 + 8 + 8];
    usage.extend_from_slice(&u64::MAX.to_le_bytes());
    let at = current
        .windows(usage.len())
        .position(|w| w == usage.as_slice())
        .expect("the empty usage block");
    let mut old = Vec::from(&current[..at]);
    old.extend_from_slice(&current[at + usage.len()..current.len() - 4]);
    if version == index_run::FORMAT_VERSION_V1 {
        assert!(run.entries[0].consumers.is_empty());
        old.truncate(old.len() - 4);
    }
    old[8..10].copy_from_slice(&version.to_le_bytes());
    let crc = crc32c::crc32c(&old);
    old.extend_from_slice(&crc.to_le_bytes());
    Bytes::from(old)
}
