//! Writes the seed corpora of the page and segment fuzz targets
//! (`corpus/<target>/`) from the real encoders. Run by `scripts/fuzz seeds`;
//! the seeds are committed.

use std::fs;
use std::path::Path;

use bytes::{Bytes, BytesMut};
use strata_segments::segment::{
    build_segment, encode_chunk_ref, Anchor, ChunkInput, ChunkRef, RoutingSummary,
};
use strata_segments_fuzz::{clear_page, noise, page, serialize_body};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let write = |target: &str, name: &str, bytes: &[u8]| {
        let dir = root.join(target);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(name), bytes).unwrap();
    };
    let compressible = vec![b'a'; 600];
    let large = noise(3000, 7);
    // (name, records, first offset, routing key, append start)
    type PageSeed<'a> = (&'a str, Vec<&'a [u8]>, u64, &'a [u8], bool);
    let pages: [PageSeed; 5] = [
        ("one-record", vec![b"hello"], 0, b"", true),
        (
            "three-records",
            vec![b"a", b"", b"ccc"],
            40,
            b"user-42",
            false,
        ),
        ("compressed", vec![&compressible, b"x"], 7, b"rk", true),
        ("incompressible", vec![&large], 1 << 40, b"", false),
        ("empty-payload", vec![b""], 3, b"k", false),
    ];
    for (name, records, first, key, start) in &pages {
        write(
            "page_header",
            name,
            &page(records, *first, 1_700_000_000_000, key, *start),
        );
        write(
            "page_open",
            name,
            &clear_page(records, *first, 1_700_000_000_000, key, *start),
        );
        let body = serialize_body(records.iter().map(|r| (*r, 0)), 0);
        let mut seed = (records.len() as u16).to_le_bytes().to_vec();
        seed.push(u8::from(*start) << 1);
        seed.extend_from_slice(&1_700_000_000_000u64.to_le_bytes());
        seed.extend_from_slice(&body);
        write("page_body", name, &seed);
        let mut compressed = seed.clone();
        compressed[2] |= 1;
        write("page_body", &format!("{name}-zstd"), &compressed);
    }

    // Segments: two streams with a few pages; one stream with 40 routing keys
    // (a bloom summary); the empty segment.
    let small = [
        ChunkInput {
            stream_id: [1; 16],
            incarnation: 4,
            pages: vec![
                page(&[b"a", b"b"], 10, 5, b"k1", true),
                page(&[b"c"], 12, 6, b"k2", false),
            ],
        },
        ChunkInput {
            stream_id: [2; 16],
            incarnation: 1,
            pages: vec![page(&[&compressible], 0, 5, b"", true)],
        },
    ];
    let bloom = [ChunkInput {
        stream_id: [3; 16],
        incarnation: 9,
        pages: (0..40u64)
            .map(|i| {
                page(
                    &[b"r"],
                    100 + i,
                    5,
                    format!("key-{i}").as_bytes(),
                    i % 3 == 0,
                )
            })
            .collect(),
    }];
    for (name, inputs) in [
        ("small", &small[..]),
        ("bloom", &bloom[..]),
        ("empty", &[][..]),
    ] {
        let (segment, refs) = build_segment(inputs).unwrap();
        write("segment_object", name, &segment);
        for (i, r) in refs.iter().enumerate() {
            let chunk = &segment[r.position as usize..(r.position + r.length) as usize];
            write("segment_chunk", &format!("{name}-{i}"), chunk);
            write("segment_chunk_ref", &format!("{name}-{i}"), &encoded_ref(r));
        }
    }
    // A reference with anchors (its chunk would be over 256 KiB).
    let anchored = ChunkRef {
        stream_id: [4; 16],
        incarnation: 2,
        first_offset: 0,
        end_offset: 30,
        position: 0,
        length: 800_000,
        summary: RoutingSummary::from_hashes(vec![1, 2, 3]),
        anchors: vec![
            Anchor {
                offset: 10,
                position: 262_500,
            },
            Anchor {
                offset: 20,
                position: 525_000,
            },
        ],
    };
    write("segment_chunk_ref", "anchors", &encoded_ref(&anchored));

    for (i, seed) in fixed_bytes().iter().enumerate() {
        write("page_roundtrip", &format!("bytes-{i}"), seed);
        write("segment_build", &format!("bytes-{i}"), seed);
    }
}

fn encoded_ref(r: &ChunkRef) -> Bytes {
    let mut b = BytesMut::new();
    encode_chunk_ref(&mut b, r);
    b.freeze()
}

/// Deterministic pseudo-random byte strings of a few lengths.
fn fixed_bytes() -> Vec<Vec<u8>> {
    [16usize, 64, 256, 1024]
        .iter()
        .map(|&len| noise(len, len as u64))
        .collect()
}
