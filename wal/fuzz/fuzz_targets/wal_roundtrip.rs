//! Structure-aware: builds a `WalObject` from the fuzzer's bytes, encodes it
//! and decodes it back.
//!
//! Properties: `encode` refuses exactly what docs/FORMATS.md §3.4 says it
//! refuses; `decode(encode(x)) == x`; `decode_header` gives the header; pages
//! of 16 KiB or more are their own payload chunk and are not copied; the
//! encoded length is the sum of the chunks; one flipped bit and one byte
//! fewer are both rejected.
#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strata_wal::{
    decode, decode_header, encode, AppendEntry, CloseEntry, ConsumerEntry, CreateEntry,
    DeleteEntry, ObjectKind, ProducerEntry, StreamRef, StreamSeqEntry, UsageEntry, WalEntry,
    WalHeader, WalObject, WriterId, NO_SLOT,
};

#[derive(Arbitrary, Debug)]
struct Input {
    fence: bool,
    slot: u64,
    prev: Prev,
    epoch: u64,
    instance: [u8; 16],
    write_id: [u8; 16],
    shard: String,
    /// Extra `s` characters after `shard` (reaches the 64-byte limit).
    shard_pad: u8,
    entries: Vec<Entry>,
    /// Which bit of the encoding to flip.
    flip: u32,
}

#[derive(Arbitrary, Debug)]
enum Prev {
    None,
    Before(u8),
    Raw(u64),
}

#[derive(Arbitrary, Debug)]
enum Entry {
    Create {
        stream: ([u8; 16], u64),
        created_ms: u64,
        epoch: [u8; 16],
        key_fingerprint: [u8; 16],
        account: Vec<u8>,
        account_pad: u8,
    },
    Append {
        stream: ([u8; 16], u64),
        first_offset: u64,
        record_count: u64,
        payload_bytes: u64,
        timestamp_ms: u64,
        pages: Vec<Page>,
    },
    Producer {
        stream: ([u8; 16], u64),
        id: String,
        id_pad: u8,
        epoch: u64,
        seq: u64,
        first_offset: u64,
        next_offset: u64,
        digest: [u8; 16],
    },
    StreamSeq {
        stream: ([u8; 16], u64),
        seq: Vec<u8>,
        seq_pad: u8,
    },
    Close {
        stream: ([u8; 16], u64),
        closed_ms: u64,
    },
    Delete {
        stream: ([u8; 16], u64),
    },
    Consumer {
        stream: ([u8; 16], u64),
        name: String,
        name_pad: u8,
        change: Vec<u8>,
    },
    Usage {
        stream: ([u8; 16], u64),
        reads: u64,
        read_bytes: u64,
        last_read_ms: u64,
    },
}

#[derive(Arbitrary, Debug)]
enum Page {
    Small(Vec<u8>),
    /// `16 + kib % 48` KiB of `fill`: at or above the chunk threshold.
    Large {
        fill: u8,
        kib: u8,
    },
}

fn stream((id, incarnation): ([u8; 16], u64)) -> StreamRef {
    StreamRef { id, incarnation }
}

fn padded(s: String, pad: u8) -> String {
    s + &"x".repeat(pad as usize * 2)
}

fuzz_target!(|input: Input| {
    let shard = input.shard + &"s".repeat(input.shard_pad as usize);
    let prev_slot = match input.prev {
        Prev::None => NO_SLOT,
        Prev::Before(d) => input.slot.wrapping_sub(1 + d as u64),
        Prev::Raw(p) => p,
    };
    let entries: Vec<WalEntry> = input
        .entries
        .into_iter()
        .map(|e| match e {
            Entry::Create {
                stream: s,
                created_ms,
                epoch,
                key_fingerprint,
                mut account,
                account_pad,
            } => {
                // Over-long accounts (past 64 bytes) must be refused.
                account.resize(account.len() + account_pad as usize / 2, b'a');
                WalEntry::Create(CreateEntry {
                    stream: stream(s),
                    created_ms,
                    epoch,
                    key_fingerprint,
                    account: Bytes::from(account),
                })
            }
            Entry::Append {
                stream: s,
                first_offset,
                record_count,
                payload_bytes,
                timestamp_ms,
                pages,
            } => WalEntry::Append(AppendEntry {
                stream: stream(s),
                first_offset,
                record_count,
                payload_bytes,
                timestamp_ms,
                pages: pages
                    .into_iter()
                    .map(|p| match p {
                        Page::Small(b) => Bytes::from(b),
                        Page::Large { fill, kib } => {
                            Bytes::from(vec![fill; (16 + kib as usize % 48) << 10])
                        }
                    })
                    .collect(),
            }),
            Entry::Producer {
                stream: s,
                id,
                id_pad,
                epoch,
                seq,
                first_offset,
                next_offset,
                digest,
            } => WalEntry::Producer(ProducerEntry {
                stream: stream(s),
                producer_id: padded(id, id_pad),
                epoch,
                seq,
                first_offset,
                next_offset,
                digest,
            }),
            Entry::StreamSeq {
                stream: s,
                mut seq,
                seq_pad,
            } => {
                seq.resize(seq.len() + seq_pad as usize * 2, b'7');
                WalEntry::StreamSeq(StreamSeqEntry {
                    stream: stream(s),
                    seq: Bytes::from(seq),
                })
            }
            Entry::Close {
                stream: s,
                closed_ms,
            } => WalEntry::Close(CloseEntry {
                stream: stream(s),
                closed_ms,
            }),
            Entry::Delete { stream: s } => WalEntry::Delete(DeleteEntry { stream: stream(s) }),
            Entry::Consumer {
                stream: s,
                name,
                name_pad,
                change,
            } => WalEntry::Consumer(ConsumerEntry {
                stream: stream(s),
                // Over-long names (past 128 bytes) must be refused by the encoder.
                name: padded(name, name_pad),
                change: Bytes::from(change),
            }),
            Entry::Usage {
                stream: s,
                reads,
                read_bytes,
                last_read_ms,
            } => WalEntry::Usage(UsageEntry {
                stream: stream(s),
                reads,
                read_bytes,
                last_read_ms,
            }),
        })
        .collect();
    let object = WalObject {
        header: WalHeader {
            kind: if input.fence {
                ObjectKind::Fence
            } else {
                ObjectKind::Data
            },
            slot: input.slot,
            prev_slot,
            writer: WriterId {
                instance: input.instance,
                epoch: input.epoch,
                write_id: input.write_id,
            },
            shard,
        },
        entries,
    };

    // What docs/FORMATS.md §3.4 says the encoder refuses (sizes here stay far
    // below the 256 MiB and 2^20-entry limits).
    let h = &object.header;
    let encodable = !h.shard.is_empty()
        && h.shard.len() <= 64
        && (h.prev_slot == NO_SLOT || h.prev_slot < h.slot)
        && (h.kind == ObjectKind::Data || object.entries.is_empty())
        && object.entries.iter().all(|e| match e {
            WalEntry::Append(a) => a.first_offset.checked_add(a.record_count).is_some(),
            WalEntry::Producer(p) => p.producer_id.len() <= 256,
            WalEntry::StreamSeq(s) => s.seq.len() <= 256,
            WalEntry::Consumer(c) => !c.name.is_empty() && c.name.len() <= 128,
            WalEntry::Create(c) => c.account.len() <= 64,
            _ => true,
        });
    let encoded = match encode(&object) {
        Ok(encoded) => {
            assert!(encodable, "encode accepted an object the format refuses");
            encoded
        }
        Err(e) => {
            assert!(!encodable, "encode refused a valid object: {e}");
            return;
        }
    };
    assert_eq!(
        encoded.len,
        encoded.chunks.iter().map(Bytes::len).sum::<usize>()
    );
    for entry in &object.entries {
        if let WalEntry::Append(a) = entry {
            for page in a.pages.iter().filter(|p| p.len() >= 16 << 10) {
                assert!(
                    encoded
                        .chunks
                        .iter()
                        .any(|c| c.as_ptr() == page.as_ptr() && c.len() == page.len()),
                    "a large page was copied instead of being its own chunk"
                );
            }
        }
    }
    let bytes = encoded.to_bytes();
    assert_eq!(bytes.len(), encoded.len);
    assert_eq!(decode(&bytes).as_ref(), Ok(&object));
    assert_eq!(decode_header(&bytes).as_ref(), Ok(&object.header));

    // CRC-32C detects every single-bit error; a short object never decodes.
    let bit = input.flip as usize % (bytes.len() * 8);
    let mut flipped = bytes.to_vec();
    flipped[bit / 8] ^= 1 << (bit % 8);
    assert!(decode(&Bytes::from(flipped)).is_err(), "bit {bit} flipped");
    assert!(decode(&bytes.slice(..bytes.len() - 1)).is_err());
});
