//! Structure-aware: a manifest from the fuzzer's bytes is encoded and decoded;
//! its fence windows are also built with `add_window`.
//!
//! Properties: `encode` refuses exactly what docs/FORMATS.md §5.1 says it
//! refuses; `decode(encode(m)) == m`; one flipped bit is rejected;
//! `add_window` keeps windows non-empty, sorted and apart (so the result
//! always encodes) and covers exactly the slots of the windows it was given.
#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strata_manifest::format::{
    add_window, decode, encode, IndexRunRef, Manifest, ReplayPoint, SegmentRef, SlotRange,
    WriterIdentity, NO_SLOT,
};

#[derive(Arbitrary, Debug)]
struct Input {
    version: u64,
    instance: [u8; 16],
    epoch: u64,
    write_id: [u8; 16],
    shard: String,
    shard_pad: u8,
    slot: u64,
    epoch_floor: u64,
    chain_end: Option<u64>,
    next_object_id: u64,
    index_runs: Vec<(u64, u64)>,
    segments: Vec<(u64, u64)>,
    /// Taken as they are, or (when `merge`) added one by one with `add_window`.
    windows: Vec<(u16, u16)>,
    merge: bool,
    probes: Vec<u16>,
    flip: u32,
}

fuzz_target!(|input: Input| {
    let ranges: Vec<SlotRange> = input
        .windows
        .iter()
        .map(|&(start, len)| SlotRange {
            start: u64::from(start),
            end: u64::from(start) + u64::from(len % 64),
        })
        .collect();
    let fence_windows = if input.merge {
        let mut windows = Vec::new();
        for w in &ranges {
            windows = add_window(&windows, *w);
            assert!(windows.iter().all(|w| w.start < w.end));
            assert!(windows.windows(2).all(|p| p[0].end < p[1].start));
        }
        for probe in &input.probes {
            let slot = u64::from(*probe);
            assert_eq!(
                windows.iter().any(|w| w.contains(slot)),
                ranges.iter().any(|w| w.contains(slot)),
                "slot {slot}"
            );
        }
        windows
    } else {
        ranges
    };
    let m = Manifest {
        version: input.version,
        writer: WriterIdentity {
            instance: input.instance,
            epoch: input.epoch,
            write_id: input.write_id,
        },
        shard: input.shard + &"s".repeat(input.shard_pad as usize),
        replay: ReplayPoint {
            slot: input.slot,
            epoch_floor: input.epoch_floor,
            chain_end: input.chain_end.unwrap_or(NO_SLOT),
        },
        next_object_id: input.next_object_id,
        index_runs: input
            .index_runs
            .iter()
            .map(|&(id, bytes)| IndexRunRef { id, bytes })
            .collect(),
        segments: input
            .segments
            .iter()
            .map(|&(id, bytes)| SegmentRef { id, bytes })
            .collect(),
        fence_windows,
    };
    let encodable = !m.shard.is_empty()
        && m.shard.len() <= 64
        && (1..u64::MAX).contains(&m.version)
        && (1..u64::MAX).contains(&m.writer.epoch)
        && (m.replay.chain_end == NO_SLOT || m.replay.chain_end < m.replay.slot)
        && m.fence_windows.iter().all(|w| w.start < w.end)
        && m.fence_windows.windows(2).all(|p| p[0].end < p[1].start);
    let bytes = match encode(&m) {
        Ok(bytes) => {
            assert!(encodable, "encode accepted a manifest the format refuses");
            bytes
        }
        Err(e) => {
            assert!(!encodable, "encode refused a valid manifest: {e}");
            return;
        }
    };
    assert_eq!(
        bytes.len(),
        110 + m.shard.len() + 16 * (m.index_runs.len() + m.segments.len() + m.fence_windows.len())
    );
    assert_eq!(decode(&bytes).as_ref(), Ok(&m));
    let bit = input.flip as usize % (bytes.len() * 8);
    let mut flipped = bytes.to_vec();
    flipped[bit / 8] ^= 1 << (bit % 8);
    assert!(decode(&Bytes::from(flipped)).is_err(), "bit {bit} flipped");
});
