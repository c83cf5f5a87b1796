//! Structure-aware: a sequence of WAL objects (fences and data objects with
//! fuzzer-chosen slots, `prev_slot` links and epochs) is encoded, read back
//! with `decode_header`, and walked with `LogWalk` from a fuzzer-chosen
//! replay point.
//!
//! Properties (docs/FORMATS.md §4.1): an object below the epoch floor is
//! `SkipStale`; a fence at or above it is admitted; a data object is admitted
//! exactly when its `prev_slot` is the chain end and the chain end is not
//! `NO_SLOT`; an admitted object sets the floor to its epoch and the chain end
//! to its slot; a skipped one changes neither; the floor never goes down.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use strata_wal::{
    decode_header, encode, Admission, LogWalk, ObjectKind, WalObject, WriterId, NO_SLOT,
};

#[derive(Arbitrary, Debug)]
struct Input {
    floor: u8,
    chain_end: Option<u8>,
    objects: Vec<Object>,
}

#[derive(Arbitrary, Debug)]
struct Object {
    fence: bool,
    /// Slots skipped before this object (a hole would end a real walk; the
    /// rule itself does not care).
    gap: u8,
    prev: Prev,
    /// Epoch relative to the current floor.
    epoch_delta: i8,
}

#[derive(Arbitrary, Debug)]
enum Prev {
    ChainEnd,
    Previous,
    None,
    Back(u8),
}

fuzz_target!(|input: Input| {
    let chain_end = input.chain_end.map_or(NO_SLOT, u64::from);
    let mut walk = LogWalk::new(u64::from(input.floor), chain_end);
    let mut slot = chain_end.wrapping_add(1);
    let mut previous = NO_SLOT;
    for o in input.objects {
        slot = slot.saturating_add(o.gap as u64);
        let floor = walk.epoch_floor();
        let end = walk.chain_end();
        let epoch = floor.saturating_add_signed(o.epoch_delta as i64);
        let prev_slot = match o.prev {
            Prev::ChainEnd => end,
            Prev::Previous => previous,
            Prev::None => NO_SLOT,
            Prev::Back(k) => slot.saturating_sub(1 + k as u64),
        };
        let writer = WriterId {
            instance: [1; 16],
            epoch,
            write_id: [2; 16],
        };
        let mut object = WalObject::fence(slot, prev_slot, writer, "s0".into());
        if !o.fence {
            object.header.kind = ObjectKind::Data;
        }
        // The encoder refuses a prev_slot at or after the slot; so would the
        // decoder, and the engine would fail the open as corrupt.
        let Ok(encoded) = encode(&object) else {
            assert!(prev_slot != NO_SLOT && prev_slot >= slot);
            continue;
        };
        let header = decode_header(&encoded.to_bytes()).expect("an encoded header decodes");
        assert_eq!(header, object.header);
        let admission = walk.admit(&header);
        let expected = if epoch < floor {
            Admission::SkipStale
        } else if o.fence || (prev_slot == end && end != NO_SLOT) {
            Admission::Apply
        } else {
            Admission::SkipUnchained
        };
        assert_eq!(
            admission, expected,
            "{header:?} at floor {floor}, end {end}"
        );
        if admission == Admission::Apply {
            assert_eq!((walk.epoch_floor(), walk.chain_end()), (epoch, slot));
        } else {
            assert_eq!((walk.epoch_floor(), walk.chain_end()), (floor, end));
        }
        assert!(walk.epoch_floor() >= floor);
        previous = slot;
        slot = slot.saturating_add(1);
    }
});
