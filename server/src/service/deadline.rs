//! A request's deadline for its work with the store.

use std::time::Duration;

use super::error::ServiceError;

/// When a request's work with the store must be answered, and the budget
/// it was given (`--append-timeout-ms`).
#[derive(Debug, Clone, Copy)]
pub struct StoreDeadline {
    pub at: tokio::time::Instant,
    pub budget: Duration,
}

impl StoreDeadline {
    pub fn after(budget: Duration) -> Self {
        StoreDeadline {
            at: tokio::time::Instant::now() + budget,
            budget,
        }
    }

    /// A write whose answer did not come in time (it may still complete).
    pub fn write_timed_out(&self) -> ServiceError {
        ServiceError::OutcomeUnknown(format!(
            "the store did not answer within {} ms; the write may still complete",
            self.budget.as_millis()
        ))
    }

    /// A lookup that did not come back in time (nothing was written).
    pub fn lookup_timed_out(&self) -> ServiceError {
        ServiceError::Unavailable(format!(
            "the store did not answer within {} ms",
            self.budget.as_millis()
        ))
    }
}
