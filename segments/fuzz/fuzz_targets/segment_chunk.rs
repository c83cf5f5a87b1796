//! Arbitrary bytes through `decode_chunk` (what a read does with the bytes of
//! a ranged GET), as they are and with a valid CRC.
//!
//! Properties: no panic; a decoded chunk's directory tiles its offsets and
//! its pages area exactly, and each page is the bytes the directory names;
//! encoding the decoded chunk again gives the input with only the fields the
//! decoder does not check cleared (docs/FORMATS.md §11.7); and when its pages
//! are real pages, `build_segment` rebuilds the chunk: the same pages, and the
//! same bytes when the directory is the one the page headers give. The key
//! index (`Chunk::pages_of_key`) answers, for every hash the directory
//! holds, exactly the pages a walk of the directory finds, in order.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strata_segments::segment::{build_segment, decode_chunk, ChunkInput};
use strata_segments_fuzz::{
    canonical_chunk, encode_chunk, with_valid_crc, CHUNK_HEADER_BYTES, DIRECTORY_ENTRY_BYTES,
};

fuzz_target!(|data: &[u8]| {
    check(&Bytes::copy_from_slice(data));
    if let Some(fixed) = with_valid_crc(data) {
        check(&Bytes::from(fixed));
    }
});

fn check(bytes: &Bytes) {
    let Ok(chunk) = decode_chunk(bytes) else {
        return;
    };
    let p = chunk.directory.len();
    assert!(p >= 1);
    assert_eq!(chunk.pages.len(), p);
    let pages_at = CHUNK_HEADER_BYTES + DIRECTORY_ENTRY_BYTES * p;
    let mut offset = chunk.first_offset;
    let mut position = 0usize;
    for (e, page) in chunk.directory.iter().zip(&chunk.pages) {
        assert_eq!(e.first_offset, offset);
        assert!(e.record_count > 0);
        assert_eq!(e.position as usize, position);
        assert_eq!(page.len(), e.length as usize);
        assert_eq!(
            page[..],
            bytes[pages_at + position..pages_at + position + page.len()]
        );
        offset += u64::from(e.record_count);
        position += page.len();
    }
    assert_eq!(
        Some(offset),
        chunk.first_offset.checked_add(chunk.record_count)
    );
    assert_eq!(pages_at + position + 4, bytes.len());
    let mut indexed = 0usize;
    for (i, e) in chunk.directory.iter().enumerate() {
        let of_key = chunk.pages_of_key(e.routing_key_hash);
        assert!(of_key.windows(2).all(|w| w[0] < w[1]));
        assert!(of_key.contains(&(i as u32)));
        if of_key.first() == Some(&(i as u32)) {
            indexed += of_key.len();
        }
    }
    assert_eq!(indexed, p, "every page is indexed once");
    let canonical = canonical_chunk(bytes);
    assert_eq!(encode_chunk(&chunk), canonical);

    let input = ChunkInput {
        stream_id: chunk.stream_id,
        incarnation: chunk.incarnation,
        pages: chunk.pages.clone(),
    };
    if let Ok((segment, refs)) = build_segment(&[input]) {
        let r = &refs[0];
        let rebuilt = segment.slice(r.position as usize..(r.position + r.length) as usize);
        let again = decode_chunk(&rebuilt).expect("a built chunk decodes");
        assert_eq!(again.pages, chunk.pages);
        assert_eq!(again.stream_id, chunk.stream_id);
        assert_eq!(again.incarnation, chunk.incarnation);
        assert_eq!(r.first_offset, again.first_offset);
        assert_eq!(r.end_offset, again.first_offset + again.record_count);
        if again.directory == chunk.directory {
            assert_eq!(rebuilt[..], canonical[..]);
        }
    }
}
