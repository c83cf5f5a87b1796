//! The values of the shard's public API: an append request, the answers to
//! appends and creates, a stream's durable tail and the shard's lifecycle.
//! Plain data: this file depends on nothing of the shard but the stream
//! state's types.

use std::sync::Arc;

use bytes::Bytes;
use strata_segments::StreamCipher;

use super::state::{ProducerClaim, ProducerState, Tail};
use crate::ids::StreamRef;

/// An append: records of one routing key, optionally with producer and
/// `Stream-Seq` checks, optionally closing the stream.
#[derive(Clone)]
pub struct AppendRequest {
    pub stream: StreamRef,
    pub cipher: Arc<StreamCipher>,
    pub routing_key: Bytes,
    pub key_version: u32,
    pub records: Vec<Bytes>,
    /// Defaults to the engine clock.
    pub timestamp_ms: Option<u64>,
    pub producer: Option<ProducerClaim>,
    pub stream_seq: Option<Bytes>,
    /// Close the stream after these records (atomically).
    pub close: bool,
}

impl AppendRequest {
    /// A plain append of `records` on the default routing key.
    pub fn new(stream: StreamRef, cipher: Arc<StreamCipher>, records: Vec<Bytes>) -> Self {
        AppendRequest {
            stream,
            cipher,
            routing_key: Bytes::new(),
            key_version: 0,
            records,
            timestamp_ms: None,
            producer: None,
            stream_seq: None,
            close: false,
        }
    }
}

/// How an append was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendKind {
    /// New records (or a close) were made durable.
    Appended,
    /// A producer retry of an already durable append; nothing was written.
    Duplicate(ProducerState),
    /// A close-only request on a stream that was already closed.
    AlreadyClosed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendAck {
    pub kind: AppendKind,
    /// First offset of this request's records (equal to `next_offset` when none).
    pub first_offset: u64,
    /// The stream's tail after this request.
    pub next_offset: u64,
    pub closed: bool,
}

/// How a create was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateAck {
    Created,
    AlreadyExists,
}

/// A stream's durable tail, as readers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamInfo {
    pub tail: Tail,
    pub page_bytes: u64,
    /// Bytes the stream holds in the store: its sealed chunks and its
    /// unsealed pages (compressed, encrypted).
    pub stored_bytes: u64,
}

/// What the live streams counted for one account hold and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AccountUsage {
    pub streams: u64,
    /// Records ever appended (the streams' tails).
    pub records: u64,
    /// Payload bytes ever appended.
    pub appended_bytes: u64,
    /// Bytes held in the store (see [`StreamInfo::stored_bytes`]).
    pub stored_bytes: u64,
    /// Reads and the payload bytes they returned, as logged so far.
    pub reads: u64,
    pub read_bytes: u64,
}

impl AccountUsage {
    /// Adds `other`'s figures (across shards).
    pub fn add(&mut self, other: &AccountUsage) {
        self.streams += other.streams;
        self.records += other.records;
        self.appended_bytes += other.appended_bytes;
        self.stored_bytes += other.stored_bytes;
        self.reads += other.reads;
        self.read_bytes += other.read_bytes;
    }
}

/// Lifecycle of an open shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardStatus {
    Active,
    /// Re-opening after a store failure; appends are refused meanwhile.
    Recovering,
    /// A newer owner holds the shard.
    Fenced,
    Stopped,
}
