//! The refusal log: one structured line per class of refused request
//! (surface, status, error code), at most every [`REFUSAL_LOG_INTERVAL`],
//! counting the refusals since the class's last line. Refusals are the
//! answers a client is asked to retry or to send differently for reasons of
//! load or time: 408, 413, 429 and 503. A flood of them costs a counter
//! increment each, not a log line each.
//!
//! Invariant: the table holds at most one entry per class, and classes come
//! from closed sets (surfaces, statuses, `&'static` codes), so it stays small.

use std::collections::HashMap;
use std::time::Duration;

use http::StatusCode;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::metrics::Surface;

/// Shortest time between two lines of one class.
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// A class of refused requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Class {
    surface: &'static str,
    status: u16,
    code: &'static str,
}

#[derive(Debug)]
struct Tally {
    /// Refusals not yet in a line.
    unlogged: u64,
    logged_at: Instant,
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct RefusalLog {
    classes: Mutex<HashMap<Class, Tally>>,
}

/// Whether an answer of `status` is a refusal the log counts.
pub fn is_refusal(status: StatusCode) -> bool {
    matches!(status.as_u16(), 408 | 413 | 429 | 503)
}

impl RefusalLog {
    /// Counts a refusal of `surface` with `status` and `code` at `now`, and
    /// writes its class's line if the last was at least
    /// [`REFUSAL_LOG_INTERVAL`] before.
    pub fn note(&self, surface: Surface, status: StatusCode, code: &'static str, now: Instant) {
        if !is_refusal(status) {
            return;
        }
        let class = Class {
            surface: surface.label(),
            status: status.as_u16(),
            code,
        };
        let due = {
            let mut classes = self.classes.lock();
            match classes.get_mut(&class) {
                None => {
                    classes.insert(
                        class,
                        Tally {
                            unlogged: 0,
                            logged_at: now,
                        },
                    );
                    Some(1)
                }
                Some(tally) => {
                    tally.unlogged += 1;
                    if now.duration_since(tally.logged_at) >= REFUSAL_LOG_INTERVAL {
                        tally.logged_at = now;
                        Some(std::mem::take(&mut tally.unlogged))
                    } else {
                        None
                    }
                }
            }
        };
        if let Some(refused) = due {
            tracing::warn!(
                surface = class.surface,
                status = class.status,
                code = class.code,
                refused,
                every_s = REFUSAL_LOG_INTERVAL.as_secs(),
                "requests refused"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first refusal of a class writes a line; the next within the
    /// interval only count; the first after it writes their count.
    #[test]
    fn a_class_logs_at_most_once_per_interval_with_its_count() {
        let log = RefusalLog::default();
        let start = Instant::now();
        let too_many = StatusCode::TOO_MANY_REQUESTS;
        let class = Class {
            surface: "raw",
            status: 429,
            code: "overloaded",
        };
        log.note(Surface::Raw, too_many, "overloaded", start);
        for _ in 0..5 {
            log.note(Surface::Raw, too_many, "overloaded", start);
        }
        assert_eq!(log.classes.lock()[&class].unlogged, 5);
        let later = start + REFUSAL_LOG_INTERVAL;
        log.note(Surface::Raw, too_many, "overloaded", later);
        assert_eq!(log.classes.lock()[&class].unlogged, 0);
        log.note(Surface::Raw, too_many, "overloaded", later);
        assert_eq!(log.classes.lock()[&class].unlogged, 1);
        // Other answers are not refusals; other classes have their own tally.
        log.note(Surface::Raw, StatusCode::NOT_FOUND, "not_found", later);
        log.note(Surface::Product, too_many, "rate_limited", later);
        assert_eq!(log.classes.lock().len(), 2);
    }
}
