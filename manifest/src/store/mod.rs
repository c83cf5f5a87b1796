//! Object-store plumbing shared by every crate above this one
//! (docs/ARCHITECTURE.md): the only stateful tier is the
//! object store, and every write to it is conditional (compare-and-swap) or
//! create-only. This module owns how those writes are made and how their
//! ambiguous answers are settled; it knows nothing about what the objects hold.
//!
//! * [`cas`]: [`CasObject`], one object changed only by conditional PUTs, and
//!   the [`CasCodec`] a value needs to be stored in it;
//! * [`json`]: [`JsonCodec`], the `CasCodec` of any JSON value ([`JsonObject`]);
//! * [`create`]: create-only writes of raw bytes, read back on `AlreadyExists`
//!   ([`create_only`], [`create_immutable`]);
//! * [`retry`]: the retry rules ([`RetryPolicy`], [`is_transient`],
//!   [`is_durability_unknown`]) and retried reads ([`with_retries`],
//!   [`get_object`]).
//!
//! Invariants: a retry always resends the same bytes; an answer that leaves the
//! outcome open is settled by reading the object back, except a write of
//! unknown durability ([`DurabilityUnknown`]), which fails at once.

pub mod cas;
pub mod create;
pub mod json;
pub mod retry;

pub use cas::{CasCodec, CasError, CasObject, Versioned};
pub use create::{create_immutable, create_only, CreateError, CreateOnly, Taken};
pub use json::{JsonCodec, JsonLayout, JsonObject};
pub use retry::{
    get_object, is_durability_unknown, is_transient, with_retries, DurabilityUnknown, RetryPolicy,
};
