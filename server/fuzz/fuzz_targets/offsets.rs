//! Offset strings (`Offset::parse`, `OffsetParam::parse`) and their printing.
//!
//! Input: 8 bytes taken as a `u64` position and 8 more as a second one, then
//! the rest as text.
//!
//! Properties: no panic; a parsed offset prints back to exactly the text it
//! was parsed from (one text per offset); every position below 10^16 prints
//! as `0000000000000000_` and 16 digits that parse back to it, and string
//! order is numeric order; positions of 10^16 and above do not fit the
//! 16-digit form, so their text does not parse.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strata_server::ds::offsets::{Offset, OffsetParam};

const LIMIT: u64 = 10_000_000_000_000_000;

fuzz_target!(|data: &[u8]| {
    if data.len() < 16 {
        return;
    }
    let a = u64::from_le_bytes(data[..8].try_into().unwrap());
    let b = u64::from_le_bytes(data[8..16].try_into().unwrap());
    for n in [a, b, a % LIMIT, b % LIMIT] {
        let text = Offset(n).to_string();
        if n < LIMIT {
            assert_eq!(text.len(), 33);
            assert_eq!(Offset::parse(&text), Ok(Offset(n)));
            assert_eq!(OffsetParam::parse(&text), Ok(OffsetParam::At(Offset(n))));
        } else {
            assert!(Offset::parse(&text).is_err());
        }
    }
    let (a, b) = (a % LIMIT, b % LIMIT);
    assert_eq!(Offset(a).to_string().cmp(&Offset(b).to_string()), a.cmp(&b));

    if let Ok(text) = std::str::from_utf8(&data[16..]) {
        if let Ok(offset) = Offset::parse(text) {
            assert_eq!(offset.to_string(), text);
            assert!(offset.0 < LIMIT);
        }
        match OffsetParam::parse(text) {
            Ok(OffsetParam::Start) => assert_eq!(text, "-1"),
            Ok(OffsetParam::Now) => assert_eq!(text, "now"),
            Ok(OffsetParam::At(offset)) => assert_eq!(offset.to_string(), text),
            Err(_) => assert!(Offset::parse(text).is_err()),
        }
    }
});
