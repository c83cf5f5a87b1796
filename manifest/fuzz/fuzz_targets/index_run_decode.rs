//! Arbitrary bytes through the index-run decoder, as they are and with a
//! valid CRC.
//!
//! Properties: no panic; a decoded run's entries are strictly sorted by
//! stream id, and its producer ids and `Stream-Seq` values are at most 256
//! bytes (docs/FORMATS.md §12.3); every byte is checked or round-trips, so
//! re-encoding a current-version run gives the input back. An older run
//! (version 1: no consumer tables, no usage; version 2: no usage) re-encodes
//! as the current version; that encoding decodes to the same run.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strata_manifest::index_run::{decode, encode, UsageRecord, FORMAT_VERSION, FORMAT_VERSION_V1};
use strata_manifest_fuzz::with_valid_crc;

fuzz_target!(|data: &[u8]| {
    check(&Bytes::copy_from_slice(data));
    if let Some(fixed) = with_valid_crc(data) {
        check(&Bytes::from(fixed));
    }
});

fn check(bytes: &Bytes) {
    let Ok(run) = decode(bytes) else {
        return;
    };
    assert!(run
        .entries
        .windows(2)
        .all(|w| w[0].stream_id < w[1].stream_id));
    for e in &run.entries {
        assert!(e.tail.stream_seq.as_ref().is_none_or(|s| s.len() <= 256));
        assert!(e.tail.producers.iter().all(|p| p.id.len() <= 256));
        assert_ne!(e.tail.closed_ms, Some(u64::MAX));
        assert_ne!(e.tail.last_append_ms, Some(u64::MAX));
    }
    for e in &run.entries {
        assert!(e.tail.usage.account.len() <= 64);
        assert_ne!(e.tail.usage.last_read_ms, Some(u64::MAX));
    }
    let encoded = encode(&run).expect("a decoded run encodes");
    if bytes[8..10] == FORMAT_VERSION.to_le_bytes() {
        assert_eq!(&encoded, bytes, "re-encoding changed the bytes");
        return;
    }
    // An older version: upgraded, with nothing of what it could not hold.
    assert!(run
        .entries
        .iter()
        .all(|e| e.tail.usage == UsageRecord::default()));
    if bytes[8..10] == FORMAT_VERSION_V1.to_le_bytes() {
        assert!(run.entries.iter().all(|e| e.consumers.is_empty()));
    }
    assert_eq!(
        decode(&encoded).as_ref(),
        Ok(&run),
        "the upgrade changed the run"
    );
}
