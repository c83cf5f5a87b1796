//! Structure-aware: records from the fuzzer are planned into pages
//! (`plan_pages`), prepared (`prepare_body`), sealed (`seal_page`) at
//! contiguous offsets, and opened again.
//!
//! Properties: the plan covers the records in order, in pages of at most 4096
//! records and, with more than one record, at most 64 KiB of body, so
//! `prepare_body` accepts every planned page; compression is used only at
//! 256 bytes of body or more and only when it shrinks the body; the header
//! says what was sealed; `open_page` gives back exactly the records, at their
//! offsets, with the append-start mark on the first record only.
#![no_main]

use arbitrary::Arbitrary;
use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strata_segments::{open_page, parse_header, plan_pages, prepare_body, seal_page};
use strata_segments_fuzz::{cipher, noise};

#[derive(Arbitrary, Debug)]
struct Input {
    records: Vec<Rec>,
    first_offset: u64,
    timestamp_ms: u64,
    routing_key: Vec<u8>,
    key_version: u32,
}

#[derive(Arbitrary, Debug)]
enum Rec {
    Bytes(Vec<u8>),
    /// `len` copies of `byte` (compresses well).
    Repeat {
        byte: u8,
        len: u16,
    },
    /// `len × 4` bytes that do not compress: pages of one large record.
    Noise {
        seed: u64,
        len: u16,
    },
    /// `count` records of `len` bytes: pages cut by the record count.
    Many {
        count: u16,
        len: u8,
    },
}

fuzz_target!(|input: Input| {
    let mut records: Vec<Bytes> = Vec::new();
    for r in input.records {
        match r {
            Rec::Bytes(b) => records.push(Bytes::from(b)),
            Rec::Repeat { byte, len } => records.push(Bytes::from(vec![byte; len as usize])),
            Rec::Noise { seed, len } => records.push(Bytes::from(noise(len as usize * 4, seed))),
            Rec::Many { count, len } => {
                let one = Bytes::from(vec![len; len as usize]);
                records.extend(std::iter::repeat_n(one, count as usize % 10_000));
            }
        }
        // Enough to cut pages by count (4096) and by body (64 KiB) several
        // times over, and no more: every byte is compressed and sealed.
        if records.len() > 10_000 || records.iter().map(Bytes::len).sum::<usize>() > 512 << 10 {
            break;
        }
    }
    let plan = plan_pages(records.iter().map(Bytes::len));
    let mut next = 0;
    for range in &plan {
        assert_eq!(range.start, next);
        assert!(!range.is_empty() && range.len() <= 4096);
        next = range.end;
    }
    assert_eq!(next, records.len());

    let rk_ok = input.routing_key.len() <= 1024;
    let mut offset = input.first_offset;
    for (i, range) in plan.into_iter().enumerate() {
        let page_records = &records[range];
        let mut body =
            prepare_body(page_records, input.timestamp_ms).expect("a planned page is a valid page");
        body.append_start = i == 0;
        let serialized: usize = page_records
            .iter()
            .map(|r| r.len() + varint_len(r.len()) + 1)
            .sum();
        assert_eq!(body.body_len as usize, serialized);
        assert_eq!(body.record_count as usize, page_records.len());
        if body.compressed {
            assert!(serialized >= 256 && body.content.len() < serialized);
        } else {
            assert_eq!(body.content.len(), serialized);
        }
        let sealed = seal_page(
            cipher(),
            &body,
            offset,
            input.key_version,
            &input.routing_key,
            [i as u8; 12],
        );
        let fits = offset.checked_add(page_records.len() as u64).is_some();
        let page = match sealed {
            Ok(page) => {
                assert!(rk_ok && fits);
                page
            }
            Err(_) => {
                assert!(!(rk_ok && fits), "seal_page refused a valid page");
                return;
            }
        };
        let header = parse_header(&page).expect("a sealed page parses");
        assert_eq!(header.first_offset, offset);
        assert_eq!(header.key_version, input.key_version);
        assert_eq!(header.timestamp_ms, input.timestamp_ms);
        assert_eq!(header.routing_key, input.routing_key);
        assert_eq!(header.append_start, i == 0);
        let opened = open_page(cipher(), &page).expect("a sealed page opens");
        assert_eq!(opened.records.len(), page_records.len());
        for (j, (record, payload)) in opened.records.iter().zip(page_records).enumerate() {
            assert_eq!(&record.payload, payload);
            assert_eq!(record.offset, offset + j as u64);
            assert_eq!(record.timestamp_ms, input.timestamp_ms);
            assert_eq!(record.append_start, i == 0 && j == 0);
        }
        offset = header.end_offset();
    }
});

fn varint_len(mut v: usize) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}
