//! A page body from the fuzzer, sealed with the real `seal_page` and opened
//! with `open_page`. Input: record count `u16`, flags `u8` (bit 0 compress
//! the body with zstd, bit 1 append start, bit 2 declare one byte more, bit 3
//! one byte less), timestamp `u64`, then the body bytes.
//!
//! Properties: `parse_header` accepts the sealed page exactly when the rules
//! of docs/FORMATS.md §6.6 hold; it opens exactly when the declared length is
//! the body's and an independent parser (§6.2) accepts the body, with the
//! same records; opened records serialize back to the body.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strata_segments::{open_page, parse_header, seal_page, PageError, PreparedBody};
use strata_segments_fuzz::{check_records, cipher, reference_parse_body, serialize_records};

const FIRST_OFFSET: u64 = 1_000;

fuzz_target!(|data: &[u8]| {
    if data.len() < 11 {
        return;
    }
    let count = u16::from_le_bytes([data[0], data[1]]) as u32;
    let flags = data[2];
    let timestamp_ms = u64::from_le_bytes(data[3..11].try_into().unwrap());
    let body = &data[11..];
    let compress = flags & 1 != 0;
    let mut declared = body.len() as u32;
    if flags & 4 != 0 {
        declared += 1;
    }
    if flags & 8 != 0 {
        declared = declared.saturating_sub(1);
    }
    let content = if compress {
        zstd::bulk::compress(body, 1).expect("zstd compresses")
    } else {
        body.to_vec()
    };
    let prepared = PreparedBody {
        content: Bytes::from(content),
        body_len: declared,
        compressed: compress,
        record_count: count,
        payload_bytes: 0,
        timestamp_ms,
        append_start: flags & 2 != 0,
    };
    let page = seal_page(cipher(), &prepared, FIRST_OFFSET, 0, b"rk", [9; 12])
        .expect("a short routing key and a small offset seal");

    let n = count as usize;
    let d = declared as usize;
    let c = prepared.content.len();
    let header_ok = (1..=4096).contains(&n)
        && d <= 64 << 20
        && (n == 1 || d <= 64 << 10)
        && d >= 2 * n
        && if compress { c > 0 && c < d } else { c == d };
    let header = match parse_header(&page) {
        Ok(header) => {
            assert!(header_ok, "parse_header accepted a header the rules refuse");
            header
        }
        Err(e) => {
            assert!(!header_ok, "parse_header refused a valid header: {e}");
            return;
        }
    };
    let reference = reference_parse_body(body, n, timestamp_ms);
    match open_page(cipher(), &page) {
        Ok(opened) => {
            assert_eq!(d, body.len());
            check_records(&opened.records, &header);
            assert_eq!(serialize_records(&opened.records, timestamp_ms), body);
            let records: Vec<(u64, Vec<u8>)> = opened
                .records
                .iter()
                .map(|r| (r.timestamp_ms, r.payload.to_vec()))
                .collect();
            assert_eq!(Some(records), reference);
        }
        Err(PageError::Decompress) => assert!(compress && d != body.len()),
        Err(PageError::Body { reason }) => {
            assert!(d == body.len() || !compress);
            if d == body.len() {
                assert_eq!(reference, None, "the reference parser accepts: {reason}");
            }
        }
        Err(e) => panic!("a sealed page failed to open: {e}"),
    }
});
