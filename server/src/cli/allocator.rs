//! The process's allocator settings, made once at start.
//!
//! The `strata` binary allocates with mimalloc (its `#[global_allocator]` is
//! in `main.rs`). Against glibc's malloc, measured alternating in one
//! session: +14–25% requests/s on product appends at 1,024 connections,
//! +3–6% on raw appends at 1,024, 0–8% at 64 (docs/BENCHMARKS.md, issue 19).
//!
//! The server's budgets (bodies, queues, live frames) bound what it *holds*;
//! the allocator decides what it *keeps*. By default mimalloc (v3) returns
//! freed pages to the system a second after they empty, and in the memory
//! floods (`server/tests/memory.rs`) freed multi-megabyte buffers piled up
//! past the test's bound in that second. Purging at once keeps the resident size
//! following what is held; the gains above were measured with it. An
//! operator who sets `MIMALLOC_PURGE_DELAY` (milliseconds) keeps their value:
//! on the engine benchmark 0, 10 and 1,000 ms gave the same throughput and
//! p99 (docs/BENCHMARKS.md), at 20k against 85k page faults.

/// mimalloc's `mi_option_purge_delay` (its `mi_option_e` in mimalloc.h, v3):
/// milliseconds before freed memory is returned to the system.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// Return freed memory at once.
const PURGE_DELAY_MS: std::ffi::c_long = 0;

/// The environment variable through which mimalloc reads the same option:
/// when an operator sets it, their value stands.
const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";

/// Sets mimalloc's purge delay unless `MIMALLOC_PURGE_DELAY` is set (harmless
/// in a process allocating with another allocator: it only sets an option of
/// an unused one).
pub(super) fn configure() {
    let Some(delay_ms) = purge_delay_to_set(std::env::var_os(PURGE_DELAY_ENV).is_some()) else {
        return;
    };
    // SAFETY: mi_option_set only stores an option value; any thread may call it.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, delay_ms) };
}

/// The purge delay to set: ours, unless the operator set mimalloc's own.
fn purge_delay_to_set(operator_set: bool) -> Option<std::ffi::c_long> {
    (!operator_set).then_some(PURGE_DELAY_MS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operators_purge_delay_stands() {
        assert_eq!(purge_delay_to_set(true), None);
        assert_eq!(purge_delay_to_set(false), Some(PURGE_DELAY_MS));
    }

    #[test]
    fn the_option_set_is_the_purge_delay() {
        // SAFETY: mi_option_get/set only read and store an option value.
        let default = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        // purge_delay's default in mimalloc v3 is 1,000 ms (options.c):
        // reading it at this index before it is set shows the index names
        // that option.
        assert_eq!(default, 1000);
        configure();
        let set = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(set, PURGE_DELAY_MS);
    }
}
