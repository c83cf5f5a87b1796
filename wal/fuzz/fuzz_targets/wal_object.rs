//! Arbitrary bytes through the WAL object decoder (`decode`, `decode_header`),
//! as they are and with their CRC made valid so that mutations reach the
//! field checks.
//!
//! Properties: no panic; `decode_header` agrees with `decode` (same header,
//! or the same error when the header fails); a decoded object obeys the
//! format's rules; and since the decoder checks every byte (reserved byte
//! included) and every length exactly, re-encoding a decoded object gives the
//! same bytes, except a Create entry of the layout before accounts, which is
//! written back in the current one and reads back the same.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use strata_wal::{decode, decode_header, encode, ObjectKind, WalEntry, NO_SLOT};
use strata_wal_fuzz::with_valid_crc;

fuzz_target!(|data: &[u8]| {
    check(&Bytes::copy_from_slice(data));
    if let Some(fixed) = with_valid_crc(data) {
        check(&Bytes::from(fixed));
    }
});

fn check(bytes: &Bytes) {
    let header = decode_header(bytes);
    match decode(bytes) {
        Ok(object) => {
            assert_eq!(header.as_ref(), Ok(&object.header));
            let h = &object.header;
            assert!(!h.shard.is_empty() && h.shard.len() <= 64);
            assert!(h.prev_slot == NO_SLOT || h.prev_slot < h.slot);
            if h.kind == ObjectKind::Fence {
                assert!(object.entries.is_empty());
            }
            for entry in &object.entries {
                match entry {
                    WalEntry::Append(a) => {
                        assert!(a.first_offset.checked_add(a.record_count).is_some())
                    }
                    WalEntry::Producer(p) => assert!(p.producer_id.len() <= 256),
                    WalEntry::StreamSeq(s) => assert!(s.seq.len() <= 256),
                    WalEntry::Consumer(c) => {
                        assert!(!c.name.is_empty() && c.name.len() <= 128);
                        assert!(c.change.len() <= strata_wal::CONSUMER_CHANGE_BYTES_MAX);
                    }
                    _ => {}
                }
            }
            let encoded = encode(&object).expect("a decoded object re-encodes");
            let encoded_bytes = encoded.to_bytes();
            if &encoded_bytes != bytes {
                // The one layout that re-encodes differently: a Create entry
                // written before accounts (its body ends after the key
                // fingerprint) is written back with an empty account (two
                // bytes more), and reads back the same.
                let without_account = object
                    .entries
                    .iter()
                    .filter(|e| matches!(e, WalEntry::Create(c) if c.account.is_empty()))
                    .count();
                let grown = encoded_bytes.len().checked_sub(bytes.len());
                assert!(
                    grown.is_some_and(|g| g > 0 && g % 2 == 0 && g / 2 <= without_account),
                    "re-encoding changed the bytes"
                );
                let again = decode(&encoded_bytes).expect("a re-encoded object decodes");
                assert_eq!(again, object, "an older Create layout reads back the same");
            }
            assert_eq!(encoded.len, encoded_bytes.len());
        }
        Err(e) => {
            if let Err(header_error) = &header {
                assert_eq!(&e, header_error);
            }
        }
    }
}
