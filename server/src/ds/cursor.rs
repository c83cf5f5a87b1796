//! `Stream-Cursor`: a decimal interval number that CDNs use to collapse
//! long-polls. It counts 20-second intervals since 2024-10-09T00:00:00Z; when a
//! client echoes a cursor at or past the current interval, the answer jumps
//! ahead by a random number of intervals so that the next URL differs (no two
//! consecutive long-polls of one client share a cache key).

/// 2024-10-09T00:00:00Z in ms since the Unix epoch.
const CURSOR_EPOCH_MS: u64 = 1_728_432_000_000;
const INTERVAL_MS: u64 = 20_000;
/// Most intervals a jump may add (one hour).
const JUMP_INTERVALS_MAX: u64 = 180;

/// The cursor to answer with at `now_ms`, given the client's `cursor=` value.
pub fn next_cursor(now_ms: u64, client: Option<u64>, random: u64) -> u64 {
    let current = now_ms.saturating_sub(CURSOR_EPOCH_MS) / INTERVAL_MS;
    match client {
        // A client may echo any u64: saturate rather than overflow.
        Some(c) if c >= current => c.saturating_add(1 + random % JUMP_INTERVALS_MAX),
        _ => current,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn echoed_cursors_always_move_forward() {
        let now = CURSOR_EPOCH_MS + 45 * INTERVAL_MS + 7;
        assert_eq!(next_cursor(now, None, 3), 45);
        assert_eq!(next_cursor(now, Some(10), 3), 45);
        for random in [0, 1, 179, 180, u64::MAX] {
            assert!(next_cursor(now, Some(45), random) > 45);
            assert!(next_cursor(now, Some(500), random) > 500);
        }
    }

    /// Found by the `cursor` fuzz target (input `now_ms`
    /// 18446490194385901834, `client` u64::MAX, `random` 0): `cursor=` is any
    /// u64 a client sends, and `u64::MAX` overflowed the jump (a panic in
    /// debug builds, a wrap to a cursor far in the past in release builds).
    #[test]
    fn a_cursor_at_the_end_of_u64_saturates() {
        let now = 18_446_490_194_385_901_834;
        for random in [0, 1, 179, u64::MAX] {
            assert_eq!(next_cursor(now, Some(u64::MAX), random), u64::MAX);
            assert_eq!(next_cursor(now, Some(u64::MAX - 1), random), u64::MAX);
            let near = u64::MAX - 200;
            assert!(next_cursor(now, Some(near), random) > near);
        }
    }
}
