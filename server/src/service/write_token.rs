//! CAS write tokens and ids as the registry's JSON objects spell them:
//! lower-case hex (the `hex` crate), decoded to fixed-size arrays.

/// Exactly `2 * N` hex digits as `N` bytes.
pub fn decode<const N: usize>(text: &str) -> Option<[u8; N]> {
    let mut out = [0u8; N];
    hex::decode_to_slice(text, &mut out).ok()?;
    Some(out)
}

/// A CAS write token stored as hex (all zeros when it is not 32 hex digits:
/// then it matches no write of ours, which is what an unknown token means).
pub fn write_token(text: &str) -> [u8; 16] {
    decode(text).unwrap_or([0; 16])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_refusals() {
        let bytes = [0u8, 1, 0xab, 0xff];
        assert_eq!(hex::encode(bytes), "0001abff");
        assert_eq!(decode::<4>("0001abff"), Some(bytes));
        assert_eq!(decode::<4>("0001ABFF"), Some(bytes));
        for bad in ["", "0001abf", "0001abfff0", "zz01abff", "é001abff"] {
            assert_eq!(decode::<4>(bad), None, "{bad}");
        }
        assert_eq!(write_token("nonsense"), [0; 16]);
    }
}
