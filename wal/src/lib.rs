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
//!   ([`LogWalk`]). Objects are admitted in slot order while writer epochs do not
//!   decrease; an object from an older epoch than one already admitted is the junk
//!   of a fenced owner and is skipped; the first missing slot ends the log.
//!
//! Invariants the engine builds on (see `docs/FORMATS.md`, "WAL objects"):
//!
//! 1. An owner writes its fence object before any data object of its epoch, at a
//!    slot after every object it replayed.
//! 2. An owner acknowledges a data object only when every earlier object it issued
//!    is durable, so an acknowledged object never follows a hole.
//! 3. Therefore an object of epoch `e` found after an object of epoch `e' > e` was
//!    never acknowledged, and skipping it loses nothing.

pub mod format;
pub mod walk;

pub use format::{
    decode, decode_header, encode, AppendEntry, CloseEntry, CreateEntry, DeleteEntry,
    EncodedObject, ObjectKind, ProducerEntry, StreamRef, StreamSeqEntry, WalEntry, WalError,
    WalHeader, WalObject, WriterId, FORMAT_VERSION, MAGIC, MAX_OBJECT_BYTES,
};
pub use walk::{Admission, LogWalk};
