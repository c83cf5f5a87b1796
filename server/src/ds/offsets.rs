//! Offsets as the Durable Streams surface shows them: `"%016d_%016d"`, the
//! first part 0 (reserved), the second the record position in the stream's
//! offset space (a fork shares its source's). Fixed width makes lexicographic
//! order numeric order; the characters exclude `, & = ? /` and spaces.
//!
//! `0000000000000000_0000000000000000` is the start of every stream.

use std::fmt;

/// A position between records: offset `n` is before record `n`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Offset(pub u64);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed offset {0:?}")]
pub struct BadOffset(pub String);

impl Offset {
    /// Parses exactly `\d{16}_\d{16}` with a zero first part.
    pub fn parse(text: &str) -> Result<Offset, BadOffset> {
        let bad = || BadOffset(text.to_string());
        let (epoch, position) = text.split_once('_').ok_or_else(bad)?;
        let digits = |s: &str| s.len() == 16 && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(epoch) || !digits(position) || epoch != "0000000000000000" {
            return Err(bad());
        }
        position.parse().map(Offset).map_err(|_| bad())
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016}_{:016}", 0, self.0)
    }
}

/// The `offset` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetParam {
    /// `-1`: the beginning.
    Start,
    /// `now`: the current tail.
    Now,
    At(Offset),
}

impl OffsetParam {
    pub fn parse(text: &str) -> Result<OffsetParam, BadOffset> {
        match text {
            "-1" => Ok(OffsetParam::Start),
            "now" => Ok(OffsetParam::Now),
            other => Offset::parse(other).map(OffsetParam::At),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_order() {
        assert_eq!(Offset(0).to_string(), "0000000000000000_0000000000000000");
        assert_eq!(
            Offset::parse("0000000000000000_0000000000000042"),
            Ok(Offset(42))
        );
        assert!(Offset(9).to_string() < Offset(10).to_string());
        for bad in [
            "",
            "0,1",
            "0 1",
            "a/b",
            "9999999999999999_9999999999999999",
            "0000000000000000_000000000000004",
            "0000000000000000-0000000000000042",
            "-1",
        ] {
            assert!(Offset::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(OffsetParam::parse("-1"), Ok(OffsetParam::Start));
        assert_eq!(OffsetParam::parse("now"), Ok(OffsetParam::Now));
    }
}
