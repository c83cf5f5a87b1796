//! The service layer: what both HTTP surfaces do, without HTTP (no status
//! codes, no headers, no request bodies; see docs/ARCHITECTURE.md). One module
//! per concern:
//!
//! * `streams` — the [`Streams`] type and the lookup every operation starts
//!   with; its operations one per file: `create`, `append`, `read`, `fork` and
//!   `chain` (fork chains and reads across them), `retire` (delete), `expiry`
//!   and `reaper` (TTL and `Expires-At`), `listing` (the catalog's entries and
//!   pages), `scan` (snapshot scans of a collection), `startup` (the
//!   start-up scan and the catalog's repair);
//! * `routing` (stream → shard → where it is served), `fleet` (membership,
//!   placement and the controller that claims and releases shards), `sources`
//!   (fork sources another fleet member serves), `cipher` (the cipher cache
//!   and key check);
//! * `registry` (descriptors, CAS), `catalog` (listing buckets, CAS),
//!   `topology` (the shard count), `names` (every server object's name);
//! * `product` — the product surface's configuration and cursors;
//! * `model`, `error`, `deadline`, `media`, `limits` — the values the
//!   operations take and answer;
//! * `admission` — per-project limits (rates, live readers, collections,
//!   stored bytes) and the state they are judged on; `usage` — what each
//!   collection and project holds and does (reads tallied, then logged).

pub mod admission;
pub mod catalog;
pub mod fleet;
pub mod names;
pub mod product;
pub mod registry;
pub mod subscriptions;
pub mod tenancy;
pub mod topology;
pub mod write_token;

mod append;
mod chain;
mod cipher;
mod consumer_delivery;
mod consumer_live;
pub mod consumers;
mod create;
mod deadline;
mod error;
mod expiry;
mod fork;
mod limits;
mod listing;
mod media;
mod model;
mod observe;
mod read;
mod read_tally;
mod reaper;
mod retire;
pub mod routing;
mod scan;
pub mod sources;
mod stale;
mod startup;
mod streams;
pub mod usage;
pub mod watches;

pub use consumer_delivery::{
    PullAnswer, PullRequest, PulledMessage, SettleAnswer, SettleRequest, PULL_WAIT_MS_MAX,
    RETRY_DELAY_MS_DEFAULT,
};
pub use consumers::{ConsumerError, ConsumerInfo};
pub use deadline::StoreDeadline;
pub use error::ServiceError;
pub use expiry::run as run_reaper;
pub use limits::{DEFAULT_PROJECT, RAW_READ_BYTES};
pub use media::{is_json, media_type};
pub use model::{
    AppendOutcome, AppendResult, AppendSpec, CreateMode, CreateOutcome, CreateSpec, DeadLetterStep,
    Expiry, ForkSpec, KeyView, ReadFrom, ReadOutcome, ReadRecord, ShardMove, StartupScan,
    StreamMeta, StreamObserver, StreamsConfig,
};
pub use observe::{WatchOutcome, WatchRequest};
pub use reaper::Reaper;
pub use scan::{ScanFrom, ScanItem, ScanPage};
pub use streams::Streams;
pub use watches::Observation;
