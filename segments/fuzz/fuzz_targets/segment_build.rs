//! Structure-aware: chunks of real pages (fuzzer-chosen records, routing keys,
//! offsets, sizes, and at most one gap between pages) go through
//! `build_segment`, and the segment is read back through its trailer, table
//! and chunks.
//!
//! Properties: `build_segment` refuses exactly the chunks whose pages do not
//! tile; the trailer, the table and every chunk decode; the table equals the
//! references `build_segment` returned; chunks lie back to back from 0, the
//! table right after them, the trailer last; each chunk holds its pages byte
//! for byte, with a directory taken from their headers; each summary is exact
//! (sorted, distinct) up to 32 keys and a bloom filter of ⌈10n/64⌉·64 bits
//! beyond, and never excludes a key of the chunk; anchors are exactly the
//! pages the 256 KiB spacing rule picks (docs/FORMATS.md §11.3, §11.4).
#![no_main]

use std::collections::BTreeSet;

use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strata_segments::segment::{
    build_segment, decode_chunk, decode_table, decode_trailer, routing_key_hash, Anchor,
    ChunkInput, RoutingSummary, ANCHOR_SPACING_BYTES, TRAILER_BYTES,
};
use strata_segments::{parse_header, prepare_body, seal_page};
use strata_segments_fuzz::{cipher, noise, CHUNK_HEADER_BYTES, DIRECTORY_ENTRY_BYTES};

#[derive(Arbitrary, Debug)]
struct Input {
    chunks: Vec<ChunkSpec>,
}

#[derive(Arbitrary, Debug)]
struct ChunkSpec {
    stream_id: [u8; 16],
    incarnation: u64,
    first_offset: u32,
    pages: Vec<PageSpec>,
    /// The pages are repeated `1 + copies % 8` times, each copy with routing
    /// keys of its own and no large pages: more than 32 keys (a bloom
    /// summary) from a short input.
    copies: u8,
    /// `(page, offsets)`: skip `1 + offsets` offsets before that page (not
    /// the first), which breaks the tiling.
    gap: Option<(u8, u8)>,
}

#[derive(Arbitrary, Debug)]
struct PageSpec {
    /// Routing key `k<key>-<copy>`.
    key: u16,
    records: u8,
    payload: Vec<u8>,
    /// From 250 on: one record of `(big − 249) × 64` KiB of incompressible
    /// payload instead (reaches anchors).
    big: u8,
    append_start: bool,
}

fuzz_target!(|input: Input| {
    let mut inputs = Vec::new();
    let mut tiles = true;
    for (c, spec) in input.chunks.into_iter().take(4).enumerate() {
        let mut offset = u64::from(spec.first_offset);
        let mut pages = Vec::new();
        let copies = 1 + spec.copies as usize % 8;
        let specs = (0..copies).flat_map(|copy| spec.pages.iter().map(move |page| (copy, page)));
        for (p, (copy, page)) in specs.take(80).enumerate() {
            if let Some((at, skip)) = spec.gap {
                if p > 0 && p == at as usize {
                    tiles = false;
                    offset += 1 + u64::from(skip);
                }
            }
            // A page of several records holds at most 64 KiB of body.
            let records = if page.big >= 250 && copy == 0 {
                let len = (page.big as usize - 249) << 16;
                vec![Bytes::from(noise(len, (c * 100 + p) as u64))]
            } else {
                vec![Bytes::copy_from_slice(&page.payload); 1 + page.records as usize % 8]
            };
            let mut body = prepare_body(&records, 7).expect("records fit a page");
            body.append_start = page.append_start;
            let key = format!("k{}-{copy}", page.key);
            let sealed = seal_page(cipher(), &body, offset, 0, key.as_bytes(), [p as u8; 12])
                .expect("seals");
            offset += records.len() as u64;
            pages.push(sealed);
        }
        tiles &= !pages.is_empty();
        inputs.push(ChunkInput {
            stream_id: spec.stream_id,
            incarnation: spec.incarnation,
            pages,
        });
    }
    let (segment, refs) = match build_segment(&inputs) {
        Ok(built) => {
            assert!(tiles, "build_segment accepted pages that do not tile");
            built
        }
        Err(e) => {
            assert!(!tiles, "build_segment refused valid chunks: {e}");
            return;
        }
    };

    let trailer_at = segment.len() - TRAILER_BYTES;
    let trailer = decode_trailer(&segment[trailer_at..]).expect("the trailer decodes");
    assert_eq!(
        trailer.table_position + trailer.table_length,
        trailer_at as u64
    );
    let table = segment.slice(trailer.table_position as usize..trailer_at);
    assert_eq!(decode_table(&table).as_ref(), Ok(&refs));
    assert_eq!(refs.len(), inputs.len());

    let mut position = 0u64;
    for (r, input) in refs.iter().zip(&inputs) {
        assert_eq!(r.position, position);
        position += r.length;
        let chunk = decode_chunk(&segment.slice(r.position as usize..position as usize))
            .expect("a built chunk decodes");
        assert_eq!(chunk.stream_id, input.stream_id);
        assert_eq!(
            (r.stream_id, r.incarnation),
            (input.stream_id, input.incarnation)
        );
        assert_eq!(chunk.incarnation, input.incarnation);
        assert_eq!(chunk.pages, input.pages);
        assert_eq!(r.first_offset, chunk.first_offset);
        assert_eq!(r.end_offset, chunk.first_offset + chunk.record_count);

        let mut hashes = BTreeSet::new();
        for (e, page) in chunk.directory.iter().zip(&chunk.pages) {
            let header = parse_header(page).expect("a sealed page parses");
            assert_eq!(e.first_offset, header.first_offset);
            assert_eq!(e.record_count, header.record_count);
            assert_eq!(e.append_start, header.append_start);
            assert_eq!(e.routing_key_hash, routing_key_hash(&header.routing_key));
            hashes.insert(e.routing_key_hash);
        }
        assert!(hashes.iter().all(|h| r.summary.may_contain(*h)));
        match &r.summary {
            RoutingSummary::Exact(listed) => {
                assert!(hashes.len() <= 32);
                assert!(listed.iter().copied().eq(hashes.iter().copied()));
            }
            RoutingSummary::Bloom { bits } => {
                assert!(hashes.len() > 32);
                assert_eq!(bits.len() * 64, (hashes.len() * 10).next_multiple_of(64));
            }
        }

        let pages_start = (CHUNK_HEADER_BYTES + DIRECTORY_ENTRY_BYTES * chunk.pages.len()) as u32;
        let mut expected = Vec::new();
        let mut last = 0usize;
        for e in &chunk.directory {
            let at = e.position as usize;
            if at >= last + ANCHOR_SPACING_BYTES {
                expected.push(Anchor {
                    offset: e.first_offset,
                    position: pages_start + e.position,
                });
                last = at;
            }
        }
        assert_eq!(r.anchors, expected);
    }
    assert_eq!(position, trailer.table_position);
});
