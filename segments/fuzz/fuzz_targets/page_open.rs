//! A *clear page* (clear header, plaintext content, 16 bytes for the tag) is
//! sealed under the fixed fuzz key whatever its header says, and opened with
//! `open_page`: authentication always passes, so the fuzzer drives the
//! decompression and the body parser behind it with any header `parse_header`
//! accepts and any content, compressed or not.
//!
//! Properties: no panic; no `Authentication` error; `Decompress` exactly when
//! the content is not a zstd frame of exactly the declared body length
//! (checked against the zstd crate directly); the body parser agrees with an
//! independent parser written from docs/FORMATS.md §6.2; the opened records
//! serialize back to the body byte for byte (every body has one encoding).
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_segments::{open_page, parse_header, PageError};
use strata_segments_fuzz::{
    check_records, cipher, reference_parse_body, seal_clear_page, serialize_records, TAG_BYTES,
};

fuzz_target!(|data: &[u8]| {
    let Some(page) = seal_clear_page(data) else {
        return;
    };
    let header = parse_header(&page).expect("sealing keeps the header");
    let body_len = header.body_len as usize;
    let content = &data[header.header_len..data.len() - TAG_BYTES];
    let body = if header.compressed {
        zstd::bulk::decompress(content, body_len)
            .ok()
            .filter(|b| b.len() == body_len)
    } else {
        Some(content.to_vec())
    };
    let reference = body
        .as_ref()
        .map(|b| reference_parse_body(b, header.record_count as usize, header.timestamp_ms));
    match open_page(cipher(), &page) {
        Ok(opened) => {
            assert_eq!(opened.header, header);
            check_records(&opened.records, &header);
            let body = body.expect("opened a page whose content does not decompress");
            assert_eq!(
                serialize_records(&opened.records, header.timestamp_ms),
                body
            );
            let reference = reference
                .flatten()
                .expect("the reference parser refuses the body");
            let records: Vec<(u64, Vec<u8>)> = opened
                .records
                .iter()
                .map(|r| (r.timestamp_ms, r.payload.to_vec()))
                .collect();
            assert_eq!(records, reference);
        }
        Err(PageError::Decompress) => assert!(body.is_none(), "zstd decompresses it"),
        Err(PageError::Body { reason }) => {
            assert!(body.is_some());
            assert_eq!(
                reference,
                Some(None),
                "the reference parser accepts: {reason}"
            );
        }
        Err(e) => panic!("a sealed clear page failed to open: {e}"),
    }
});
