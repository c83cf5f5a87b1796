//! Durable Streams protocol pieces that are not HTTP plumbing: offsets, JSON
//! records, and the live-read cursor.

pub mod cursor;
pub mod json;
pub mod offsets;
