//! Unsigned LEB128 varints (at most 10 bytes for a u64).

use bytes::BufMut;

pub fn put(buf: &mut impl BufMut, mut value: u64) {
    while value >= 0x80 {
        buf.put_u8((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    buf.put_u8(value as u8);
}

pub fn len(mut value: u64) -> usize {
    let mut n = 1;
    while value >= 0x80 {
        value >>= 7;
        n += 1;
    }
    n
}

/// Reads one varint from the front of `input`, advancing it. `None` when the
/// input ends early, the value does not fit in a u64, or the encoding is not
/// the shortest one (so every value has exactly one encoding).
pub fn get(input: &mut &[u8]) -> Option<u64> {
    let mut value: u64 = 0;
    for i in 0..10 {
        let (&byte, rest) = input.split_first()?;
        *input = rest;
        let bits = (byte & 0x7f) as u64;
        if i == 9 && bits > 1 {
            return None;
        }
        value |= bits << (7 * i);
        if byte & 0x80 == 0 {
            if byte == 0 && i > 0 {
                return None;
            }
            return Some(value);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(v in any::<u64>()) {
            let mut out = Vec::new();
            put(&mut out, v);
            prop_assert_eq!(out.len(), len(v));
            let mut slice = out.as_slice();
            prop_assert_eq!(get(&mut slice), Some(v));
            prop_assert!(slice.is_empty());
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..16)) {
            let mut slice = data.as_slice();
            let _ = get(&mut slice);
        }
    }

    #[test]
    fn overlong_and_non_minimal_are_rejected() {
        let mut slice: &[u8] = &[0xff; 11];
        assert_eq!(get(&mut slice), None);
        let mut padded: &[u8] = &[0x81, 0x00];
        assert_eq!(get(&mut padded), None);
        let mut zero: &[u8] = &[0x00];
        assert_eq!(get(&mut zero), Some(0));
    }
}
