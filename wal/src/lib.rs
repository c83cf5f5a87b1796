//! # strata-wal: the write-ahead-log object format and the log-walk rule
//!
//! A shard's WAL is a sequence of *slots* `0, 1, 2, …`; slot `n` is the object
//! `shards/<shard>/wal/<n:020>` (names are built by the engine's layout module,
//! not here). Every slot is written at most once, create-only (`If-None-Match`),
//! by the owner that holds the shard's current writer epoch.
//!
//! This crate owns two things and nothing else:
//!
//! * [`format`]: the byte layout of one WAL object ([`WalObject`]): a header naming
//!   the shard, the slot, the writer (instance, epoch, write id) and the kind
//!   (data or fence), a list of [`WalEntry`] values, and a CRC-32C trailer. The
//!   decoder validates magic, version, lengths and CRC before it trusts a byte.
//!   Page bytes inside append entries are opaque here (the `segments` crate owns
//!   the page format).
//! * [`walk`]: the rule that decides which slots belong to the log during replay
//!   ([`LogWalk`]): slots are read in order until the first missing one; objects
//!   from an epoch older than one already admitted are skipped (junk of a fenced
//!   owner), and data objects are admitted only if they continue the chain of
//!   `prev_slot` links that starts at their owner's fence.
//!
//! Invariants the engine builds on (see `docs/FORMATS.md`, "WAL objects"):
//!
//! 1. An owner writes its fence object before any data object of its epoch, at a
//!    slot after every object it replayed; each of its data objects names the
//!    slot of the object before it in its chain.
//! 2. An owner acknowledges a data object only when every earlier object of its
//!    chain is durable, so an acknowledged object is always chained.
//! 3. Therefore an object of epoch `e` found after an object of epoch `e' > e`,
//!    or a data object whose predecessor is not in the log, was never
//!    acknowledged, and skipping it loses nothing.

pub mod entry;
pub mod format;
pub mod walk;

pub use format::{
    append_entry_encoded_len, decode, decode_header, encode, entry_encoded_len, header_encoded_len,
    AppendEntry, CloseEntry, ConsumerEntry, CreateEntry, DeleteEntry, EncodedObject, ObjectKind,
    ProducerEntry, StreamRef, StreamSeqEntry, UsageEntry, WalEntry, WalError, WalHeader, WalObject,
    WriterId, ACCOUNT_BYTES_MAX, CONSUMER_CHANGE_BYTES_MAX, CONSUMER_NAME_BYTES_MAX, ENTRIES_MAX,
    FORMAT_VERSION, MAGIC, NO_SLOT, OBJECT_BYTES_MAX, OBJECT_TRAILER_BYTES, PRODUCER_ID_BYTES_MAX,
    STREAM_SEQ_BYTES_MAX,
};
pub use walk::{Admission, LogWalk};
