//! Arbitrary bytes as a page: `parse_header`, then `open_page` under the fixed
//! fuzz key (real pages in the seed corpus open; mutated ones must fail
//! cleanly).
//!
//! Properties: no panic; an accepted header obeys every rule of
//! docs/FORMATS.md §6.6; every header byte is a field, so the header rebuilt
//! from the parsed fields is the input's header byte for byte; `open_page`
//! fails with `parse_header`'s error when that fails, and otherwise opens to
//! the same header and records that match it.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strata_segments::{open_page, parse_header};
use strata_segments_fuzz::{check_records, cipher, serialize_records, TAG_BYTES};

fuzz_target!(|data: &[u8]| {
    let page = Bytes::copy_from_slice(data);
    let parsed = parse_header(&page);
    if let Ok(h) = &parsed {
        let count = h.record_count as usize;
        let body_len = h.body_len as usize;
        assert_eq!(h.header_len, 46 + h.routing_key.len());
        assert!(h.routing_key.len() <= 1024);
        assert!((1..=4096).contains(&count));
        assert!(h.first_offset.checked_add(count as u64).is_some());
        assert!(body_len <= 64 << 20);
        assert!(count == 1 || body_len <= 64 << 10);
        assert!(body_len >= 2 * count);
        let content = page.len() - h.header_len - TAG_BYTES;
        if h.compressed {
            assert!(content > 0 && content < body_len);
        } else {
            assert_eq!(content, body_len);
        }
        let mut rebuilt = b"SP\x01".to_vec();
        rebuilt.push(h.compressed as u8 | (h.append_start as u8) << 1);
        rebuilt.extend_from_slice(&h.first_offset.to_le_bytes());
        rebuilt.extend_from_slice(&h.record_count.to_le_bytes());
        rebuilt.extend_from_slice(&h.timestamp_ms.to_le_bytes());
        rebuilt.extend_from_slice(&h.key_version.to_le_bytes());
        rebuilt.extend_from_slice(&h.body_len.to_le_bytes());
        rebuilt.extend_from_slice(&(h.routing_key.len() as u16).to_le_bytes());
        rebuilt.extend_from_slice(&h.routing_key);
        rebuilt.extend_from_slice(&h.nonce);
        assert_eq!(rebuilt[..], page[..h.header_len]);
    }
    match open_page(cipher(), &page) {
        Ok(opened) => {
            assert_eq!(Ok(&opened.header), parsed.as_ref());
            check_records(&opened.records, &opened.header);
            let body = serialize_records(&opened.records, opened.header.timestamp_ms);
            assert_eq!(body.len(), opened.header.body_len as usize);
        }
        Err(e) => {
            if let Err(header_error) = &parsed {
                assert_eq!(&e, header_error);
            }
        }
    }
});
