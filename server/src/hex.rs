//! Lower-case hexadecimal, as the JSON objects of the registry spell ids,
//! epochs, fingerprints and CAS write tokens.

/// `bytes` as lower-case hex.
pub fn encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Exactly `2 * N` hex digits as `N` bytes.
pub fn decode<const N: usize>(text: &str) -> Option<[u8; N]> {
    if text.len() != 2 * N {
        return None;
    }
    let digits = text.as_bytes();
    let mut out = [0u8; N];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = (nibble(digits[2 * i])? << 4) | nibble(digits[2 * i + 1])?;
    }
    Some(out)
}

fn nibble(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
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
        assert_eq!(encode(&bytes), "0001abff");
        assert_eq!(decode::<4>("0001abff"), Some(bytes));
        assert_eq!(decode::<4>("0001ABFF"), Some(bytes));
        for bad in ["", "0001abf", "0001abfff0", "zz01abff", "é001abff"] {
            assert_eq!(decode::<4>(bad), None, "{bad}");
        }
        assert_eq!(write_token("nonsense"), [0; 16]);
    }
}
