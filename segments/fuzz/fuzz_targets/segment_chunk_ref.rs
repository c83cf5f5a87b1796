//! Arbitrary bytes through `decode_chunk_ref`, the decoder of one chunk
//! reference, shared by segment tables and index runs.
//!
//! Properties: no panic; a decoded reference obeys docs/FORMATS.md §11.5
//! (end above first offset, range inside 4 GiB, exact summaries strictly
//! increasing, bloom filters a positive multiple of 64 bits); an exact summary
//! contains each of its hashes; re-encoding gives the bytes the decoder read,
//! except the anchors' reserved words (written as 0, not checked), and those
//! bytes decode to the same reference.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strata_segments::segment::{decode_chunk_ref, RoutingSummary, SEGMENT_BYTES_MAX};
use strata_segments_fuzz::{encode_ref, zero_words};

fuzz_target!(|data: &[u8]| {
    let input = Bytes::copy_from_slice(data);
    let mut rest = input.clone();
    let Ok(r) = decode_chunk_ref(&mut rest, "fuzz") else {
        return;
    };
    let used = input.len() - rest.len();
    assert!(r.end_offset > r.first_offset);
    assert!(r
        .position
        .checked_add(r.length)
        .is_some_and(|e| e <= SEGMENT_BYTES_MAX));
    match &r.summary {
        RoutingSummary::Exact(hashes) => {
            assert!(hashes.windows(2).all(|w| w[0] < w[1]));
            assert!(hashes.iter().all(|h| r.summary.may_contain(*h)));
        }
        RoutingSummary::Bloom { bits } => assert!(!bits.is_empty()),
    }
    let (encoded, reserved) = encode_ref(&r);
    assert_eq!(encoded, zero_words(&input[..used], &reserved));
    let mut again = Bytes::from(encoded);
    assert_eq!(decode_chunk_ref(&mut again, "again"), Ok(r));
    assert!(again.is_empty());
});
