//! # strata-codec: the one bounds-checked byte reader of Strata's decoders
//!
//! The WAL, manifest, index-run and segment decoders (crates `strata-wal`,
//! `strata-manifest`, `strata-segments`) all read little-endian fields from a
//! [`Bytes`] buffer after validating its frame (magic, version, CRC). This crate
//! owns that field reading and nothing else: [`ReadBytes`], implemented for
//! [`Bytes`], reads one named field at a time and answers a [`ReadError`] naming
//! the field instead of panicking when the buffer is too short. Each decoder maps
//! `ReadError` into its own error enum (same variants and messages as before the
//! reader was shared). The byte layouts themselves live with their decoders and
//! in `docs/FORMATS.md`; see `docs/ARCHITECTURE.md` for where this crate sits
//! (below `wal`, `segments` and `manifest`, with no Strata dependency).
//!
//! Invariants:
//!
//! * every integer is little-endian (the only byte order of Strata's formats);
//! * a read that fails consumes nothing: the buffer is left as it was, so the
//!   error names the first field that did not fit;
//! * slices ([`ReadBytes::read_bytes`], [`ReadBytes::read_prefixed_u32`]) are
//!   zero-copy views of the input, never copies;
//! * count checks ([`ReadBytes::ensure_items`]) saturate instead of overflowing,
//!   so a lying count can never make a decoder allocate more than the input
//!   could hold.

use bytes::{Buf, Bytes};

/// Why a field could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    /// Fewer bytes remain than the field needs.
    #[error("truncated while reading {field}")]
    Truncated { field: &'static str },
    /// A text field's bytes are not UTF-8.
    #[error("field {field} is not UTF-8")]
    NotUtf8 { field: &'static str },
}

impl ReadError {
    /// The field the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            ReadError::Truncated { field } | ReadError::NotUtf8 { field } => field,
        }
    }
}

/// Named-field, bounds-checked reads from the front of a buffer.
pub trait ReadBytes {
    /// One byte.
    fn read_u8(&mut self, field: &'static str) -> Result<u8, ReadError>;
    /// A little-endian `u16`.
    fn read_u16(&mut self, field: &'static str) -> Result<u16, ReadError>;
    /// A little-endian `u32`.
    fn read_u32(&mut self, field: &'static str) -> Result<u32, ReadError>;
    /// A little-endian `u64`.
    fn read_u64(&mut self, field: &'static str) -> Result<u64, ReadError>;
    /// A fixed-size byte array (ids, digests, fingerprints).
    fn read_array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], ReadError>;
    /// The next `len` bytes, zero-copy.
    fn read_bytes(&mut self, len: usize, field: &'static str) -> Result<Bytes, ReadError>;
    /// The next `len` bytes as a UTF-8 string.
    fn read_utf8(&mut self, len: usize, field: &'static str) -> Result<String, ReadError>;
    /// A `u32` length (`length_field`) followed by that many bytes (`field`),
    /// zero-copy. Consumes nothing if either does not fit.
    fn read_prefixed_u32(
        &mut self,
        length_field: &'static str,
        field: &'static str,
    ) -> Result<Bytes, ReadError>;
    /// Checks that at least `len` bytes remain, consuming nothing.
    fn ensure_remaining(&self, len: usize, field: &'static str) -> Result<(), ReadError>;
    /// Checks that `count` items of at least `item_bytes` each could fit in what
    /// remains (saturating), consuming nothing: the guard before a decoder sizes
    /// a `Vec` from a count it read.
    fn ensure_items(
        &self,
        count: usize,
        item_bytes: usize,
        field: &'static str,
    ) -> Result<(), ReadError>;
}

impl ReadBytes for Bytes {
    fn read_u8(&mut self, field: &'static str) -> Result<u8, ReadError> {
        self.try_get_u8()
            .map_err(|_| ReadError::Truncated { field })
    }

    fn read_u16(&mut self, field: &'static str) -> Result<u16, ReadError> {
        self.try_get_u16_le()
            .map_err(|_| ReadError::Truncated { field })
    }

    fn read_u32(&mut self, field: &'static str) -> Result<u32, ReadError> {
        self.try_get_u32_le()
            .map_err(|_| ReadError::Truncated { field })
    }

    fn read_u64(&mut self, field: &'static str) -> Result<u64, ReadError> {
        self.try_get_u64_le()
            .map_err(|_| ReadError::Truncated { field })
    }

    fn read_array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], ReadError> {
        let mut out = [0u8; N];
        self.try_copy_to_slice(&mut out)
            .map_err(|_| ReadError::Truncated { field })?;
        Ok(out)
    }

    fn read_bytes(&mut self, len: usize, field: &'static str) -> Result<Bytes, ReadError> {
        self.ensure_remaining(len, field)?;
        Ok(self.split_to(len))
    }

    fn read_utf8(&mut self, len: usize, field: &'static str) -> Result<String, ReadError> {
        self.ensure_remaining(len, field)?;
        let text = std::str::from_utf8(&self[..len])
            .map_err(|_| ReadError::NotUtf8 { field })?
            .to_owned();
        self.advance(len);
        Ok(text)
    }

    fn read_prefixed_u32(
        &mut self,
        length_field: &'static str,
        field: &'static str,
    ) -> Result<Bytes, ReadError> {
        let mut rest = self.clone();
        let len = rest.read_u32(length_field)? as usize;
        let body = rest.read_bytes(len, field)?;
        *self = rest;
        Ok(body)
    }

    fn ensure_remaining(&self, len: usize, field: &'static str) -> Result<(), ReadError> {
        if len > self.len() {
            return Err(ReadError::Truncated { field });
        }
        Ok(())
    }

    fn ensure_items(
        &self,
        count: usize,
        item_bytes: usize,
        field: &'static str,
    ) -> Result<(), ReadError> {
        self.ensure_remaining(count.saturating_mul(item_bytes), field)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn reads_little_endian_fields_in_order() {
        let mut b = Bytes::from_static(&[
            7, 0x34, 0x12, 0x78, 0x56, 0x34, 0x12, 1, 0, 0, 0, 0, 0, 0, 0x80, 9, 9,
        ]);
        assert_eq!(b.read_u8("a"), Ok(7));
        assert_eq!(b.read_u16("b"), Ok(0x1234));
        assert_eq!(b.read_u32("c"), Ok(0x1234_5678));
        assert_eq!(b.read_u64("d"), Ok(0x8000_0000_0000_0001));
        assert_eq!(b.read_array::<2>("e"), Ok([9, 9]));
        assert!(b.is_empty());
        assert_eq!(b.read_u8("f"), Err(ReadError::Truncated { field: "f" }));
    }

    #[test]
    fn a_failed_read_consumes_nothing() {
        let mut b = Bytes::from_static(&[1, 2, 3]);
        assert_eq!(b.read_u32("x"), Err(ReadError::Truncated { field: "x" }));
        assert_eq!(b.read_u64("x"), Err(ReadError::Truncated { field: "x" }));
        assert_eq!(
            b.read_array::<4>("x"),
            Err(ReadError::Truncated { field: "x" })
        );
        assert_eq!(
            b.read_bytes(4, "x"),
            Err(ReadError::Truncated { field: "x" })
        );
        assert_eq!(b.len(), 3);
        assert_eq!(b.read_u16("y"), Ok(0x0201));
    }

    #[test]
    fn prefixed_slices_name_the_part_that_did_not_fit() {
        let mut short_length = Bytes::from_static(&[1, 0]);
        assert_eq!(
            short_length.read_prefixed_u32("len", "body"),
            Err(ReadError::Truncated { field: "len" })
        );
        let mut short_body = Bytes::from_static(&[3, 0, 0, 0, 1, 2]);
        assert_eq!(
            short_body.read_prefixed_u32("len", "body"),
            Err(ReadError::Truncated { field: "body" })
        );
        assert_eq!(short_body.len(), 6, "nothing consumed");
        let mut ok = Bytes::from_static(&[2, 0, 0, 0, 1, 2, 3]);
        assert_eq!(
            ok.read_prefixed_u32("len", "body"),
            Ok(Bytes::from_static(&[1, 2]))
        );
        assert_eq!(ok, Bytes::from_static(&[3]));
    }

    #[test]
    fn text_must_be_utf8_and_fit() {
        let mut b = Bytes::from_static(b"abc\xff");
        assert_eq!(
            b.read_utf8(5, "name"),
            Err(ReadError::Truncated { field: "name" })
        );
        assert_eq!(b.read_utf8(3, "name").as_deref(), Ok("abc"));
        assert_eq!(
            b.read_utf8(1, "name"),
            Err(ReadError::NotUtf8 { field: "name" })
        );
        assert_eq!(b.len(), 1, "nothing consumed");
        assert_eq!(ReadError::NotUtf8 { field: "name" }.field(), "name");
    }

    #[test]
    fn item_counts_saturate() {
        let b = Bytes::from_static(&[0; 32]);
        assert_eq!(b.ensure_items(2, 16, "refs"), Ok(()));
        assert_eq!(
            b.ensure_items(3, 16, "refs"),
            Err(ReadError::Truncated { field: "refs" })
        );
        assert_eq!(
            b.ensure_items(usize::MAX, 16, "refs"),
            Err(ReadError::Truncated { field: "refs" })
        );
        assert_eq!(b.ensure_remaining(32, "all"), Ok(()));
    }

    proptest! {
        #[test]
        fn integers_round_trip(a in any::<u8>(), b in any::<u16>(), c in any::<u32>(), d in any::<u64>()) {
            let mut v = vec![a];
            v.extend_from_slice(&b.to_le_bytes());
            v.extend_from_slice(&c.to_le_bytes());
            v.extend_from_slice(&d.to_le_bytes());
            let mut buf = Bytes::from(v);
            prop_assert_eq!(buf.read_u8("a"), Ok(a));
            prop_assert_eq!(buf.read_u16("b"), Ok(b));
            prop_assert_eq!(buf.read_u32("c"), Ok(c));
            prop_assert_eq!(buf.read_u64("d"), Ok(d));
            prop_assert!(buf.is_empty());
        }

        #[test]
        fn reads_never_panic_and_account_for_every_byte(
            data in proptest::collection::vec(any::<u8>(), 0..64),
            ops in proptest::collection::vec(0u8..7, 0..32),
            len in 0usize..16,
        ) {
            let mut buf = Bytes::from(data);
            for op in ops {
                let before = buf.len();
                let used = match op {
                    0 => buf.read_u8("f").map(|_| 1),
                    1 => buf.read_u16("f").map(|_| 2),
                    2 => buf.read_u32("f").map(|_| 4),
                    3 => buf.read_u64("f").map(|_| 8),
                    4 => buf.read_array::<16>("f").map(|_| 16),
                    5 => buf.read_bytes(len, "f").map(|s| s.len()),
                    _ => buf.read_prefixed_u32("l", "f").map(|s| 4 + s.len()),
                };
                match used {
                    Ok(n) => prop_assert_eq!(buf.len() + n, before),
                    Err(_) => prop_assert_eq!(buf.len(), before),
                }
            }
        }
    }
}
