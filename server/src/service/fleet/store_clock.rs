//! The store's clock as one observer can bound it: when, by the observer's
//! own clock, the store at the latest stamped an object it lists with a
//! modification time.
//!
//! Every sample pairs a stamp `m` (the modification time a listing shows)
//! with a time `t` of the observer's clock by which that version was
//! certainly stamped: the end of the listing that showed it, or the end of
//! this member's own PUT that wrote it (matched by e-tag). So, with `off` the
//! offset from the store's clock to ours and `e` the error of a reported
//! stamp against the instant it stands for (truncation, rounding: any error
//! whose range is at most `res` wide), `m − e + off ≤ t` for every sample,
//! and `B = min(t − m)` bounds `off − e_i` for its sample. An object listed
//! with stamp `m` was then stamped, by our clock, no later than
//! `m + B + res` — whatever way the store rounds, since `B` carries the
//! bias of the sample it came from.
//!
//! A heartbeat PUT starts before the store stamps it, so this bound dates a
//! renewal no earlier than its writer's PUT started: the writer's lease,
//! which runs from that start, lapses before a verdict taken a lease after
//! it (see `membership`). It is often much earlier than the end of the
//! listing that showed the change: a listing taken just before a member's
//! beat shows that beat only a beat later, and the stamp says so.
//!
//! Assumptions, each with its allowance in [`SLACK_MS`]: the store's clock
//! and ours run at the same rate over the samples kept (at most
//! [`SAMPLES_MAX`], none older than [`SAMPLE_AGE_MAX_MS`]: 100 ppm over that
//! is 12 ms); a store of several hosts keeps their clocks within a few
//! milliseconds; a store's resolution is 1 s at the coarsest (S3 lists whole
//! seconds; a local directory, milliseconds). The resolution is inferred:
//! 1 s while every stamp seen is a whole second, else 1 ms.

use std::collections::VecDeque;

/// Most samples kept (the oldest go first).
pub const SAMPLES_MAX: usize = 64;
/// Samples older than this (by the observer's clock) are dropped.
pub const SAMPLE_AGE_MAX_MS: u64 = 120_000;
/// Added to every bound: clock rates, and the clocks of a store's hosts.
pub const SLACK_MS: u64 = 50;
/// The coarsest resolution assumed of a store's stamps.
const WHOLE_SECOND_MS: u64 = 1_000;

/// One stamp and a time of ours by which it was certainly made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Sample {
    observed_ms: u64,
    stamp_ms: u64,
}

impl Sample {
    /// `observed − stamp`: an upper bound on the store-to-us offset (less the
    /// stamp's error).
    fn lead_ms(&self) -> i128 {
        i128::from(self.observed_ms) - i128::from(self.stamp_ms)
    }
}

/// See the module header.
#[derive(Debug, Default)]
pub struct StoreClock {
    samples: VecDeque<Sample>,
    /// Whether every stamp seen so far is a whole second.
    seen_sub_second: bool,
}

impl StoreClock {
    /// Records that an object with stamp `stamp_ms` existed by `observed_ms`
    /// of our clock (a stamp of 0 — none — is ignored).
    pub fn sample(&mut self, observed_ms: u64, stamp_ms: u64) {
        if stamp_ms == 0 {
            return;
        }
        if !stamp_ms.is_multiple_of(WHOLE_SECOND_MS) {
            self.seen_sub_second = true;
        }
        self.samples.push_back(Sample {
            observed_ms,
            stamp_ms,
        });
        while self.samples.len() > SAMPLES_MAX {
            self.samples.pop_front();
        }
        let oldest_ms = observed_ms.saturating_sub(SAMPLE_AGE_MAX_MS);
        self.samples.retain(|s| s.observed_ms >= oldest_ms);
        debug_assert!(self.samples.len() <= SAMPLES_MAX);
    }

    /// The resolution assumed of the store's stamps.
    pub fn resolution_ms(&self) -> u64 {
        if self.seen_sub_second {
            1
        } else {
            WHOLE_SECOND_MS
        }
    }

    /// The latest time, by our clock, at which an object listed with stamp
    /// `stamp_ms` was stamped (`None`: no samples to bound the offset by).
    pub fn stamped_by_ms(&self, stamp_ms: u64) -> Option<u64> {
        if stamp_ms == 0 {
            return None;
        }
        let lead_ms = self.samples.iter().map(Sample::lead_ms).min()?;
        let bound = i128::from(stamp_ms)
            + lead_ms
            + i128::from(self.resolution_ms())
            + i128::from(SLACK_MS);
        Some(bound.clamp(0, i128::from(u64::MAX)) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn no_samples_no_bound() {
        let clock = StoreClock::default();
        assert_eq!(clock.stamped_by_ms(5_000), None);
    }

    /// A store that lists whole seconds, a second behind our clock: the
    /// bound follows the tightest sample.
    #[test]
    fn the_tightest_sample_bounds_the_offset() {
        let mut clock = StoreClock::default();
        // Stamped at our 10_950 (store 9_950, listed as 9_000), seen at 11_000.
        clock.sample(11_000, 9_000);
        // Stamped at our 12_020 (store 11_020, listed as 11_000), seen at 12_040.
        clock.sample(12_040, 11_000);
        assert_eq!(clock.resolution_ms(), 1_000);
        // Lead 1_040: a stamp listed as 20_000 was made by 20_000 + 1_040 +
        // 1_000 + slack of ours.
        assert_eq!(clock.stamped_by_ms(20_000), Some(22_040 + SLACK_MS));
    }

    #[test]
    fn a_sub_second_stamp_means_millisecond_resolution() {
        let mut clock = StoreClock::default();
        clock.sample(1_010, 1_000);
        assert_eq!(clock.resolution_ms(), 1_000);
        clock.sample(2_013, 2_003);
        assert_eq!(clock.resolution_ms(), 1);
        assert_eq!(clock.stamped_by_ms(5_000), Some(5_011 + SLACK_MS));
    }

    #[test]
    fn old_samples_are_dropped() {
        let mut clock = StoreClock::default();
        clock.sample(1_000, 1_000); // lead 0
        clock.sample(
            1_000 + SAMPLE_AGE_MAX_MS + 1,
            1_000 + SAMPLE_AGE_MAX_MS - 499,
        ); // lead 500
        assert_eq!(
            clock.stamped_by_ms(200_000),
            Some(200_000 + 500 + 1 + SLACK_MS)
        );
        for i in 0..(SAMPLES_MAX as u64 + 10) {
            clock.sample(200_000 + i, 200_000 + i - 7);
        }
        assert!(clock.samples.len() <= SAMPLES_MAX);
    }

    proptest! {
        /// Whatever the offset between the clocks and however the store
        /// rounds its stamps to whole seconds (down, to nearest, up), an
        /// object's true stamping time, by our clock, is never after the
        /// bound: the property a verdict of death rests on.
        #[test]
        fn the_bound_is_never_before_the_true_stamp(
            offset_ms in -100_000i64..100_000,
            rounding in 0u8..3,
            events in proptest::collection::vec((0u64..600_000, 0u64..3_000), 1..40),
            target_ms in 0u64..600_000,
        ) {
            // Our clock = store clock + offset; true stamps in store time.
            let report = |store_ms: u64| -> u64 {
                let down = store_ms / 1_000 * 1_000;
                match rounding {
                    0 => down,
                    1 => (store_ms + 500) / 1_000 * 1_000,
                    _ => if store_ms.is_multiple_of(1_000) { store_ms } else { down + 1_000 },
                }
            };
            let base = 200_000u64;
            let ours = |store_ms: u64| (store_ms as i64 + offset_ms) as u64;
            let mut clock = StoreClock::default();
            let mut sorted = events.clone();
            sorted.sort();
            for (at, lag) in sorted {
                let store_ms = base + at;
                clock.sample(ours(store_ms) + lag, report(store_ms));
            }
            let store_ms = base + target_ms;
            let bound = clock.stamped_by_ms(report(store_ms)).expect("sampled");
            prop_assert!(bound >= ours(store_ms), "bound {bound} before {}", ours(store_ms));
        }
    }
}
