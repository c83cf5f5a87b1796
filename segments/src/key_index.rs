//! An in-memory index of one decoded chunk's pages by routing-key hash, so a
//! read of one routing key visits only that key's pages instead of walking the
//! whole directory (a chunk of a collection with 1,000 interleaved keys holds
//! thousands of pages, of which a key owns a few).
//!
//! Not a storage format: it is derived from a chunk's directory, on
//! the first keyed read of a decoded chunk, and lives as long as that decoded
//! chunk. Invariants: every page's directory index appears once in `pages`;
//! the span of a hash covers exactly the indices of the pages with that hash,
//! ascending (so a key's pages come in offset order).

use std::collections::HashMap;

/// A hash table's bytes beside its slots: a group of trailing control bytes
/// and alignment.
const TABLE_FIXED_BYTES: usize = 64;

/// Where one routing-key hash's page indices sit in [`KeyIndex::pages`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PageSpan {
    start: u32,
    len: u32,
}

/// A chunk's page indices grouped by routing-key hash. One hash-table probe
/// per lookup: a keyed read looks up every chunk of its stream, and binary
/// searches over thousands of hashes per chunk cost a cache miss per step.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyIndex {
    spans: HashMap<u64, PageSpan>,
    /// Directory indices, grouped by hash, ascending within a group.
    pages: Vec<u32>,
}

impl KeyIndex {
    /// Indexes a chunk's directory, given as its pages' routing-key hashes in
    /// directory order. A chunk lists at most 2^24 pages (`CHUNK_PAGES_MAX`),
    /// so every index fits a `u32`.
    pub fn build(hashes: impl IntoIterator<Item = u64>) -> Self {
        let mut pairs: Vec<(u64, u32)> = hashes.into_iter().zip(0u32..).collect();
        // The indices are distinct, so an unstable sort is deterministic.
        pairs.sort_unstable();
        let mut spans: HashMap<u64, PageSpan> = HashMap::new();
        for (position, (hash, _)) in (0u32..).zip(&pairs) {
            spans
                .entry(*hash)
                .and_modify(|span| span.len += 1)
                .or_insert(PageSpan {
                    start: position,
                    len: 1,
                });
        }
        let mut pages: Vec<u32> = pairs.into_iter().map(|(_, index)| index).collect();
        // The collect reuses the pairs' buffer, four times what the indices need.
        pages.shrink_to_fit();
        KeyIndex { spans, pages }
    }

    /// Heap bytes the index of a chunk of `pages` pages takes at most: a
    /// `u32` per page, and per distinct hash (at most one a page) a table
    /// slot of its key, its span and a control byte. The table grows by
    /// doubling and stays at most 7/8 full, so it holds under 2.3 slots per
    /// entry: 3 are counted, plus the table's fixed part.
    pub const fn bytes_max(pages: usize) -> usize {
        const SLOT: usize = size_of::<(u64, PageSpan)>() + 1;
        TABLE_FIXED_BYTES + pages * (size_of::<u32>() + 3 * SLOT)
    }

    /// The directory indices of the pages whose routing-key hash is `hash`,
    /// ascending (empty if none).
    pub fn pages_of(&self, hash: u64) -> &[u32] {
        match self.spans.get(&hash) {
            Some(span) => {
                let start = span.start as usize;
                &self.pages[start..start + span.len as usize]
            }
            None => &[],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// For every hash, the index answers exactly the directory positions
        /// a full walk of the directory would take, in the same order.
        #[test]
        fn pages_of_matches_a_directory_walk(
            hashes in proptest::collection::vec(0u64..8, 0..200),
            probe in 0u64..10,
        ) {
            let index = KeyIndex::build(hashes.iter().copied());
            // Every page is in exactly one hash's span.
            let indexed: usize = (0u64..8).map(|h| index.pages_of(h).len()).sum();
            prop_assert_eq!(indexed, hashes.len());
            let walked: Vec<u32> = (0u32..)
                .zip(&hashes)
                .filter(|(_, h)| **h == probe)
                .map(|(i, _)| i)
                .collect();
            prop_assert_eq!(index.pages_of(probe), walked.as_slice());
        }
    }

    /// `bytes_max` bounds what an index holds, whatever the number of
    /// distinct hashes (every page its own hash is the largest table).
    #[test]
    fn bytes_max_bounds_the_index() {
        for pages in [0usize, 1, 2, 3, 7, 8, 9, 14, 15, 100, 1_000, 4_097, 100_000] {
            let index =
                KeyIndex::build((0..pages as u64).map(|h| h.wrapping_mul(0x9E37_79B9_7F4A_7C15)));
            // hashbrown's buckets: a power of two of which it fills at most
            // 7/8; each a slot and a control byte, plus a group of 16.
            let buckets = (index.spans.capacity() * 8).div_ceil(7).next_power_of_two();
            let table = buckets * (size_of::<(u64, PageSpan)>() + 1) + 16;
            let held = table + index.pages.capacity() * size_of::<u32>();
            assert!(
                held <= KeyIndex::bytes_max(pages),
                "{pages} pages: {held} bytes held, {} counted",
                KeyIndex::bytes_max(pages)
            );
        }
    }

    #[test]
    fn extreme_hashes_are_found() {
        let index = KeyIndex::build([u64::MAX, 0, u64::MAX, 7]);
        assert_eq!(index.pages_of(u64::MAX), &[0, 2]);
        assert_eq!(index.pages_of(0), &[1]);
        assert_eq!(index.pages_of(7), &[3]);
        assert!(index.pages_of(1).is_empty());
        assert!(KeyIndex::build([]).pages_of(0).is_empty());
    }
}
