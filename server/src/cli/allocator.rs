//! The process's allocator settings, made once at start.
//!
//! glibc's malloc serves large blocks (request bodies, pages, WAL objects,
//! segments: megabytes each) with `mmap` and gives them back on `free`, but
//! only until the first such block is freed: from then on its threshold for
//! `mmap` rises to the largest block freed (up to 32 MiB), large blocks come
//! from its per-thread arenas, and memory freed there stays in the process.
//! The server's budgets (bodies, queues, live frames) bound what it *holds*;
//! with a moving threshold its resident size still grows to the high-water
//! mark of every arena. Fixing the threshold keeps blocks of 128 KiB and
//! more on `mmap`, so the resident size follows what is held (tested by
//! `server/tests/memory.rs`; measured in docs/BENCHMARKS.md).

/// Blocks of at least this many bytes are always mapped and unmapped.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD_BYTES: libc::c_int = 128 << 10;

/// Fixes glibc's `mmap` threshold (elsewhere: nothing to do).
pub(super) fn configure() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only sets a malloc parameter; it is called before
        // any other thread exists.
        let set = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) };
        if set != 1 {
            tracing::warn!("could not fix the allocator's mmap threshold");
        }
    }
}
