//! The service's requests and answers: plain values both surfaces build and
//! render.

use bytes::Bytes;
use strata_engine::{ProducerClaim, ProducerState};

use super::product::config::WatchDef;

/// How a stream expires.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Expiry {
    pub ttl_seconds: Option<u64>,
    /// As given, and its instant.
    pub expires_at: Option<(String, u64)>,
}

/// A fork request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForkSpec {
    pub source: String,
    pub offset: Option<u64>,
    pub sub_offset: u64,
}

/// Which surface creates: an existing stream is compared by that surface's
/// configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    /// Protocol fields only (content type, expiry, closed, fork).
    Raw,
    /// The normalized product configuration (media type, expiry instant or
    /// idle seconds, open state, watches); the fork origin is not part of it.
    Product,
}

/// A create request.
#[derive(Debug, Clone)]
pub struct CreateSpec {
    pub mode: CreateMode,
    /// Watch definitions (product creates only; sorted by name).
    pub watches: Vec<WatchDef>,
    /// `None`: the default (or, for a fork, the source's).
    pub content_type: Option<String>,
    pub expiry: Expiry,
    pub closed: bool,
    pub body: Bytes,
    pub fork: Option<ForkSpec>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOutcome {
    pub created: bool,
    pub content_type: String,
    pub tail: u64,
    pub closed: bool,
}

/// An append request.
#[derive(Debug, Clone)]
pub struct AppendSpec {
    /// Records of this routing key (`""`: the default key, the raw view).
    pub routing_key: Bytes,
    pub content_type: Option<String>,
    pub body: Bytes,
    /// Records the caller built and checked itself (the product routes); the
    /// body is then not parsed.
    pub records: Option<Vec<Bytes>>,
    pub producer: Option<ProducerClaim>,
    pub stream_seq: Option<Bytes>,
    pub close: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendResult {
    Appended,
    Duplicate(ProducerState),
    AlreadyClosed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendOutcome {
    pub result: AppendResult,
    pub tail: u64,
    pub closed: bool,
}

/// Where a live stream ends, as its shard knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailState {
    /// The next record's position (offsets of a fork continue its base).
    pub position: u64,
    pub closed: bool,
}

/// A stream's metadata (HEAD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamMeta {
    pub name: String,
    pub content_type: String,
    pub created_ms: u64,
    /// Hex of the incarnation's stream epoch.
    pub epoch: String,
    pub watches: Vec<WatchDef>,
    pub tail: u64,
    pub closed: bool,
    pub ttl_seconds: Option<u64>,
    pub expires_at: Option<String>,
    pub incarnation: u64,
}

/// One record read back.
#[derive(Debug, Clone)]
pub struct ReadRecord {
    pub payload: Bytes,
}

#[derive(Debug, Clone)]
pub struct ReadOutcome {
    pub records: Vec<ReadRecord>,
    pub from: u64,
    pub next: u64,
    pub tail: u64,
    pub closed: bool,
    pub content_type: String,
    pub incarnation: u64,
}

impl ReadOutcome {
    pub fn up_to_date(&self) -> bool {
        self.next >= self.tail
    }

    /// Closed and read to the end: nothing more will ever come.
    pub fn at_end(&self) -> bool {
        self.closed && self.up_to_date()
    }
}

/// Which routing key a read views, and how much it returns.
#[derive(Debug, Clone, Copy)]
pub struct KeyView<'a> {
    pub routing_key: &'a [u8],
    pub max_bytes: usize,
    /// Records a read returns at most (at least 1).
    pub max_records: usize,
}

/// Where a read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    Start,
    Tail,
    Position(u64),
}

/// What the start-up pass over the registry did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StartupScan {
    /// Streams whose expiry was queued.
    pub expiring: usize,
    /// Catalog entries added (lost between a create's two writes).
    pub catalog_added: usize,
    /// Catalog entries removed (left by a retirement's two writes).
    pub catalog_removed: usize,
}

/// Told about changes, for subscriptions.
pub trait StreamObserver: Send + Sync {
    fn appended(&self, project: &str, name: &str);
    fn deleted(&self, project: &str, name: &str);
    /// This server claimed or released a shard (fleet members only).
    fn shard_moved(&self, _index: super::routing::ShardIndex, _move: ShardMove) {}
}

/// Which way a shard moved, as the server it moved to or from sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardMove {
    Claimed,
    Released,
}

/// Tunables of the service.
#[derive(Debug, Clone)]
pub struct StreamsConfig {
    pub max_record_bytes: usize,
    /// Bytes of payload a catch-up read returns at most (one record may exceed it).
    pub read_chunk_bytes: usize,
    pub default_content_type: String,
    /// Watch observations waiting at once (beyond: refused, retry later).
    pub watch_observations_max: usize,
    /// Tests only: abort the process (as kill -9 would stop it) at this
    /// step of a dead letter.
    pub crash_at: Option<DeadLetterStep>,
    /// How often tallied reads are written to their shards (`usage`).
    pub usage_flush_interval: std::time::Duration,
}

/// The steps of a dead letter a crash test stops at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterStep {
    /// The poison mark is durable; the dead letter is not appended.
    AfterMark,
    /// The dead letter is durable; the source record is not finished.
    AfterAppend,
}

impl std::str::FromStr for DeadLetterStep {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "dead-letter-after-mark" => Ok(DeadLetterStep::AfterMark),
            "dead-letter-after-append" => Ok(DeadLetterStep::AfterAppend),
            other => Err(format!("unknown crash point {other:?}")),
        }
    }
}

impl Default for StreamsConfig {
    fn default() -> Self {
        StreamsConfig {
            max_record_bytes: 32 << 20,
            read_chunk_bytes: super::limits::RAW_READ_BYTES,
            default_content_type: "application/octet-stream".into(),
            watch_observations_max: super::watches::OBSERVERS_DEFAULT,
            crash_at: None,
            usage_flush_interval: super::limits::USAGE_FLUSH_INTERVAL_DEFAULT,
        }
    }
}
