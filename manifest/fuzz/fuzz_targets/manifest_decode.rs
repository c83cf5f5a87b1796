//! Arbitrary bytes through the manifest decoder, as they are and with a
//! valid CRC.
//!
//! Properties: no panic; a decoded manifest obeys docs/FORMATS.md §5.1
//! (name of 1 to 64 bytes, version and epoch at least 1, chain end before the
//! replay slot, fence windows non-empty, sorted and apart); every byte is
//! checked or round-trips, so re-encoding gives the input back.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strata_manifest::format::{decode, encode, NO_SLOT};
use strata_manifest_fuzz::with_valid_crc;

fuzz_target!(|data: &[u8]| {
    check(&Bytes::copy_from_slice(data));
    if let Some(fixed) = with_valid_crc(data) {
        check(&Bytes::from(fixed));
    }
});

fn check(bytes: &Bytes) {
    let Ok(m) = decode(bytes) else {
        return;
    };
    assert!(!m.shard.is_empty() && m.shard.len() <= 64);
    assert!(m.version >= 1 && m.writer.epoch >= 1);
    assert!(m.replay.chain_end == NO_SLOT || m.replay.chain_end < m.replay.slot);
    assert!(m.fence_windows.iter().all(|w| w.start < w.end));
    assert!(m.fence_windows.windows(2).all(|p| p[0].end < p[1].start));
    assert_eq!(
        encode(&m).as_ref(),
        Ok(bytes),
        "re-encoding changed the bytes"
    );
}
