//! Structure-aware: an index run from the fuzzer's bytes is encoded and
//! decoded.
//!
//! Properties: `encode` refuses exactly what docs/FORMATS.md §12.3 says it
//! refuses (entries not strictly sorted by stream id, a producer id or
//! `Stream-Seq` over 256 bytes, an account over 64); `decode(encode(run))` is
//! the run, with a closed, last-append or last-read time of exactly
//! `u64::MAX` read back as none; one
//! flipped bit is rejected.
#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strata_manifest::index_run::{
    decode, encode, IndexRun, ProducerRecord, RunEntry, TailRecord, TailStatus, UsageRecord,
};

#[derive(Arbitrary, Debug)]
struct Input {
    id: u64,
    chain_end: u64,
    entries: Vec<Entry>,
    /// Sort the entries by stream id (and drop repeats) first.
    sort: bool,
    flip: u32,
}

#[derive(Arbitrary, Debug)]
struct Entry {
    stream_id: [u8; 16],
    incarnation: u64,
    status: u8,
    next_offset: u64,
    payload_bytes: u64,
    created_ms: u64,
    closed_ms: Option<u64>,
    last_append_ms: Option<u64>,
    epoch: [u8; 16],
    key_fingerprint: [u8; 16],
    stream_seq: Option<(Vec<u8>, u8)>,
    producers: Vec<Producer>,
    chunks: Vec<Vec<u8>>,
    consumers: Vec<u8>,
    account: Vec<u8>,
    account_pad: u8,
    reads: u64,
    read_bytes: u64,
    last_read_ms: Option<u64>,
}

#[derive(Arbitrary, Debug)]
struct Producer {
    id: String,
    id_pad: u8,
    epoch: u64,
    seq: u64,
    first_offset: u64,
    next_offset: u64,
    digest: [u8; 16],
}

fuzz_target!(|input: Input| {
    let mut entries: Vec<RunEntry> = input
        .entries
        .into_iter()
        .map(|e| RunEntry {
            stream_id: e.stream_id,
            incarnation: e.incarnation,
            tail: TailRecord {
                status: match e.status % 3 {
                    0 => TailStatus::Open,
                    1 => TailStatus::Closed,
                    _ => TailStatus::Deleted,
                },
                next_offset: e.next_offset,
                payload_bytes: e.payload_bytes,
                created_ms: e.created_ms,
                closed_ms: e.closed_ms,
                last_append_ms: e.last_append_ms,
                epoch: e.epoch,
                key_fingerprint: e.key_fingerprint,
                stream_seq: e.stream_seq.map(|(mut seq, pad)| {
                    seq.resize(seq.len() + pad as usize * 2, b'0');
                    Bytes::from(seq)
                }),
                producers: e
                    .producers
                    .into_iter()
                    .map(|p| ProducerRecord {
                        id: p.id + &"p".repeat(p.id_pad as usize * 2),
                        epoch: p.epoch,
                        seq: p.seq,
                        first_offset: p.first_offset,
                        next_offset: p.next_offset,
                        digest: p.digest,
                    })
                    .collect(),
                usage: UsageRecord {
                    account: {
                        let mut account = e.account;
                        account.resize(account.len() + e.account_pad as usize / 2, b'a');
                        Bytes::from(account)
                    },
                    reads: e.reads,
                    read_bytes: e.read_bytes,
                    last_read_ms: e.last_read_ms,
                },
            },
            chunks: e.chunks.into_iter().map(Bytes::from).collect(),
            consumers: Bytes::from(e.consumers),
        })
        .collect();
    if input.sort {
        entries.sort_by_key(|e| e.stream_id);
        entries.dedup_by_key(|e| e.stream_id);
    }
    let run = IndexRun {
        id: input.id,
        chain_end: input.chain_end,
        entries,
    };
    let encodable = run
        .entries
        .windows(2)
        .all(|w| w[0].stream_id < w[1].stream_id)
        && run.entries.iter().all(|e| {
            e.tail.stream_seq.as_ref().is_none_or(|s| s.len() <= 256)
                && e.tail.producers.iter().all(|p| p.id.len() <= 256)
                && e.tail.usage.account.len() <= 64
        });
    let bytes = match encode(&run) {
        Ok(bytes) => {
            assert!(encodable, "encode accepted a run the format refuses");
            bytes
        }
        Err(e) => {
            assert!(!encodable, "encode refused a valid run: {e}");
            return;
        }
    };
    let mut expected = run.clone();
    for e in &mut expected.entries {
        e.tail.closed_ms = e.tail.closed_ms.filter(|v| *v != u64::MAX);
        e.tail.last_append_ms = e.tail.last_append_ms.filter(|v| *v != u64::MAX);
        e.tail.usage.last_read_ms = e.tail.usage.last_read_ms.filter(|v| *v != u64::MAX);
    }
    assert_eq!(decode(&bytes).as_ref(), Ok(&expected));
    let bit = input.flip as usize % (bytes.len() * 8);
    let mut flipped = bytes.to_vec();
    flipped[bit / 8] ^= 1 << (bit % 8);
    assert!(decode(&Bytes::from(flipped)).is_err(), "bit {bit} flipped");
});
