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
//!
//! Transparent huge pages are off for the process. mimalloc asks for them on
//! its arenas, and with purging at once each page it touches again after a
//! purge is a fresh 2 MiB page the kernel must zero: in a profile of the
//! engine benchmark at 1,024 appenders, `clear_page_erms` was a fifth of the
//! process's CPU, some of it inside the shard's actor, and the ack latency's
//! p99 was 3–5 ms higher than with huge pages off (docs/BENCHMARKS.md, issue
//! 19). An operator who sets `MIMALLOC_ALLOW_THP` keeps their value.

/// mimalloc's `mi_option_purge_delay` (its `mi_option_e` in mimalloc.h, v3):
/// milliseconds before freed memory is returned to the system.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// Return freed memory at once.
const PURGE_DELAY_MS: std::ffi::c_long = 0;

/// The environment variable through which mimalloc reads the same option:
/// when an operator sets it, their value stands.
const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";

/// mimalloc's `mi_option_allow_thp` (its `mi_option_e`, v3): whether it may
/// ask for transparent huge pages.
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// The environment variable through which mimalloc reads that option.
const ALLOW_THP_ENV: &str = "MIMALLOC_ALLOW_THP";

/// Sets mimalloc's purge delay unless `MIMALLOC_PURGE_DELAY` is set, and
/// turns transparent huge pages off unless `MIMALLOC_ALLOW_THP` is set
/// (harmless in a process allocating with another allocator: it only sets
/// options of an unused one, and no huge pages is the kernel's own default
/// outside `madvise`d ranges).
pub(super) fn configure() {
    if let Some(delay_ms) = purge_delay_to_set(std::env::var_os(PURGE_DELAY_ENV).is_some()) {
        // SAFETY: mi_option_set only stores an option value; any thread may call it.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, delay_ms) };
    }
    if std::env::var_os(ALLOW_THP_ENV).is_none() {
        disable_huge_pages();
    }
}

/// mimalloc read its options before `main`, so the option alone stops only
/// its later requests: `PR_SET_THP_DISABLE` turns huge pages off for every
/// mapping of the process, those made before too. Best effort: a kernel
/// without the call leaves things as they were.
fn disable_huge_pages() {
    // SAFETY: as above.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0) };
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE takes a flag and changes only this
    // process's memory policy; it reads no memory of ours.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
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

    /// One test, since both read mimalloc's process-wide options before
    /// `configure` sets them.
    #[test]
    fn configure_sets_the_purge_delay_and_turns_huge_pages_off() {
        // SAFETY: mi_option_get/set only read and store an option value.
        let (delay, thp) = unsafe {
            (
                libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY),
                libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP),
            )
        };
        // The defaults in mimalloc v3 (options.c): purge_delay 1,000 ms,
        // allow_thp 1. Reading them at these indices before they are set
        // shows the indices name those options.
        assert_eq!(delay, 1000);
        assert_eq!(thp, 1);
        configure();
        let (delay, thp) = unsafe {
            (
                libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY),
                libmimalloc_sys::mi_option_get(MI_OPTION_ALLOW_THP),
            )
        };
        assert_eq!(delay, PURGE_DELAY_MS);
        assert_eq!(thp, 0);
        #[cfg(target_os = "linux")]
        // SAFETY: PR_GET_THP_DISABLE only reads this process's flag.
        assert_eq!(
            unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) },
            1
        );
    }
}
