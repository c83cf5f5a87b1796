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
//! following what is held; the gains above were measured with it.

/// mimalloc's `mi_option_purge_delay` (its `mi_option_e` in mimalloc.h, v3):
/// milliseconds before freed memory is returned to the system.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
/// Return freed memory at once.
const PURGE_DELAY_MS: std::ffi::c_long = 0;

/// Sets mimalloc's purge delay (harmless in a process allocating with another
/// allocator: it only sets an option of an unused one).
pub(super) fn configure() {
    // SAFETY: mi_option_set only stores an option value; any thread may call it.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
}

#[cfg(test)]
mod tests {
    use super::*;

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
