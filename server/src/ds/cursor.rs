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
        Some(c) if c >= current => c + 1 + random % JUMP_INTERVALS_MAX,
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
}
