//! A whole segment object, read the way a reader without index runs would:
//! `decode_trailer` on the last 32 bytes, `decode_table` on the range it
//! names, `decode_chunk` on each range the table names. Each pass runs twice:
//! on the bytes as they are, and with every part's CRC made valid on the way
//! (so that mutations reach the field checks of all three decoders).
//!
//! Properties: no panic; the trailer and the table re-encode to their bytes
//! (but for the trailer's reserved word and the anchors' reserved words,
//! which are written as 0 and not checked).
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strata_segments::segment::{
    decode_chunk, decode_table, decode_trailer, SEGMENT_BYTES_MAX, SEGMENT_VERSION, TRAILER_BYTES,
    TRAILER_MAGIC,
};
use strata_segments_fuzz::{encode_table, with_valid_crc, zero_words};

fuzz_target!(|data: &[u8]| {
    check(data, false);
    check(data, true);
});

fn fix(v: &mut [u8], range: std::ops::Range<usize>, fix_crc: bool) {
    if fix_crc {
        if let Some(fixed) = with_valid_crc(&v[range.clone()]) {
            v[range].copy_from_slice(&fixed);
        }
    }
}

fn check(data: &[u8], fix_crc: bool) {
    let mut v = data.to_vec();
    let Some(trailer_at) = v.len().checked_sub(TRAILER_BYTES) else {
        return;
    };
    let len = v.len();
    fix(&mut v, trailer_at..len, fix_crc);
    let Ok(trailer) = decode_trailer(&v[trailer_at..]) else {
        return;
    };
    let end = trailer.table_position + trailer.table_length;
    assert!(end <= SEGMENT_BYTES_MAX);
    let mut rebuilt = Vec::new();
    rebuilt.extend_from_slice(&trailer.table_position.to_le_bytes());
    rebuilt.extend_from_slice(&trailer.table_length.to_le_bytes());
    rebuilt.extend_from_slice(&TRAILER_MAGIC);
    rebuilt.extend_from_slice(&SEGMENT_VERSION.to_le_bytes());
    assert_eq!(rebuilt[..], v[trailer_at..trailer_at + 26]);

    if end > trailer_at as u64 {
        return;
    }
    let table_range = trailer.table_position as usize..end as usize;
    fix(&mut v, table_range.clone(), fix_crc);
    let table = Bytes::copy_from_slice(&v[table_range]);
    let Ok(refs) = decode_table(&table) else {
        return;
    };
    let (encoded, reserved) = encode_table(&refs);
    assert_eq!(
        Some(encoded),
        with_valid_crc(&zero_words(&table, &reserved))
    );

    for r in &refs {
        let end = r.position + r.length;
        if end > trailer_at as u64 {
            continue;
        }
        let range = r.position as usize..end as usize;
        fix(&mut v, range.clone(), fix_crc);
        if let Ok(chunk) = decode_chunk(&Bytes::copy_from_slice(&v[range])) {
            // What a read compares before it trusts a chunk (§11.9); a
            // mismatch is a corruption error there, not a decoder matter.
            let _matches = chunk.stream_id == r.stream_id
                && chunk.incarnation == r.incarnation
                && chunk.first_offset == r.first_offset
                && chunk.first_offset.checked_add(chunk.record_count) == Some(r.end_offset);
        }
    }
}
