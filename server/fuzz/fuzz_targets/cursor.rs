//! `next_cursor`, the `Stream-Cursor` a live read answers with, for any clock,
//! any client `cursor=` value (the query gives any `u64`) and any random draw.
//!
//! Properties: no panic (no overflow); the answer is never before the current
//! interval; without a cursor at or past the current interval it is the
//! current interval; with one it moves past the client's cursor (by 1 to 180
//! intervals) unless the cursor is at the very end of the `u64` range.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use strata_server::ds::cursor::next_cursor;

const CURSOR_EPOCH_MS: u64 = 1_728_432_000_000;

#[derive(Arbitrary, Debug)]
struct Input {
    now_ms: u64,
    client: Option<u64>,
    random: u64,
}

fuzz_target!(|input: Input| {
    let current = input.now_ms.saturating_sub(CURSOR_EPOCH_MS) / 20_000;
    let next = next_cursor(input.now_ms, input.client, input.random);
    assert!(next >= current);
    match input.client {
        Some(c) if c >= current => {
            assert!(next > c || c > u64::MAX - 180, "{c} -> {next}");
            assert!(next <= c.saturating_add(180));
        }
        _ => assert_eq!(next, current),
    }
});
