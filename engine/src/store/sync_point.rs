//! Names for the `fsync` calls a local-store write depends on: which write
//! ([`SyncWrite`]) and which of its syncs ([`SyncPoint`]). The local store
//! (`local.rs`) passes them to its fault hooks, and the test-only fault
//! injection (feature `fault-hooks`) arms failures by them; both depend on
//! this file, and it depends on neither (docs/ARCHITECTURE.md).

/// Which kind of write an `fsync` belongs to (for the test fault hooks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncWrite {
    /// A create-only put (`If-None-Match: *`).
    Create,
    /// A compare-and-swap replace (`If-Match`).
    Replace,
}

/// Which `fsync` of a write (for the test fault hooks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SyncPoint {
    /// The new file's data, before it is published under the object's name.
    File,
    /// The directory, after the file was published.
    Dir,
}
