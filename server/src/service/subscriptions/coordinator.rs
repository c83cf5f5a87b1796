//! Subscriptions in a fleet: one coordinator, appends told to it, tails read
//! from their owners.
//!
//! Owns [`Coordination`]: where the subscriptions are served (the owner of
//! shard 0, the *coordinator*; a single server is always its own), the relay
//! that tells the coordinator about appends to streams this member owns, and
//! the lookup of linked streams' tails wherever their shards are. Members
//! talk over [`SubscriptionPeers`] (HTTP, in `http::fleet`); this module
//! speaks no HTTP.
//!
//! Invariants (docs/ARCHITECTURE.md, "Subscriptions"):
//! * the relay holds at most [`RELAY_PENDING_MAX`] stream names; past that
//!   it asks for one sweep (the coordinator re-checks every subscription)
//!   instead, so no append is forgotten and memory stays bounded;
//! * a batch that did not land is kept and sent again (with a bounded
//!   back-off) to whoever is the coordinator by then, so an append is told
//!   at least once while this member lives; what a crash loses, the sweep a
//!   new coordinator, or a member that claims a shard, asks for finds again;
//! * a tail that cannot be read (its owner unreachable, its shard moving)
//!   is left out, never guessed: the link stays pending for a later wake.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::service::routing::{Location, ShardIndex};
use crate::service::{ServiceError, Streams};

/// Tails read across the fleet: those found, and the streams whose tail
/// could not be read now.
#[derive(Debug, Default)]
pub struct TailsRead {
    pub tails: BTreeMap<String, u64>,
    pub unread: Vec<String>,
}

/// The shard whose owner serves the subscriptions.
pub const COORDINATOR_SHARD: ShardIndex = ShardIndex(0);
/// Most appended stream names the relay holds; past it, one sweep.
pub const RELAY_PENDING_MAX: usize = 4_096;
/// Most appended streams in one batch (and most names in one tails request).
pub const BATCH_STREAMS_MAX: usize = 512;
/// The relay's first and longest back-off after a failed batch.
const RELAY_BACKOFF_MIN: Duration = Duration::from_millis(50);
const RELAY_BACKOFF_MAX: Duration = Duration::from_secs(2);

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// One appended stream, as told to the coordinator.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AppendedStream {
    pub project: String,
    pub stream: String,
}

/// What one relay batch tells the coordinator.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppendedBatch {
    pub appends: Vec<AppendedStream>,
    /// Re-check every subscription (the relay overflowed, or a shard moved).
    #[serde(default)]
    pub sweep: bool,
}

/// A request for the tails of streams on the receiver's shards.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TailsRequest {
    pub project: String,
    pub streams: Vec<String>,
}

/// The tails the receiver could read (streams it does not serve are absent).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TailsAnswer {
    pub tails: BTreeMap<String, u64>,
}

/// Why a peer did not answer.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    #[error("{url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("{url} answered {status}")]
    Refused { url: String, status: u16 },
}

/// How members reach each other for subscriptions.
pub trait SubscriptionPeers: Send + Sync {
    /// Tells the coordinator at `url` about appends.
    fn appended(&self, url: &str, batch: AppendedBatch) -> BoxFuture<Result<(), PeerError>>;
    /// Reads tails from the member at `url`.
    fn tails(&self, url: &str, request: TailsRequest) -> BoxFuture<Result<TailsAnswer, PeerError>>;
}

/// Where the subscriptions are served, as this member knows it.
pub enum CoordinatorAt {
    Here,
    Elsewhere(String),
    /// Shard 0 is moving, or this member's lease lapsed: ask again shortly.
    Unknown,
}

/// Appends waiting to be told to the coordinator.
#[derive(Default)]
struct Pending {
    appends: BTreeSet<AppendedStream>,
    sweep: bool,
}

impl Pending {
    fn is_empty(&self) -> bool {
        self.appends.is_empty() && !self.sweep
    }

    /// At most [`BATCH_STREAMS_MAX`] appends (and the sweep, if asked).
    fn take_batch(&mut self) -> AppendedBatch {
        let mut appends = Vec::new();
        while appends.len() < BATCH_STREAMS_MAX {
            let Some(next) = self.appends.pop_first() else {
                break;
            };
            appends.push(next);
        }
        AppendedBatch {
            appends,
            sweep: std::mem::take(&mut self.sweep),
        }
    }

    fn put_back(&mut self, batch: AppendedBatch) {
        self.sweep |= batch.sweep;
        for append in batch.appends {
            self.add(append);
        }
    }

    fn add(&mut self, append: AppendedStream) {
        if self.appends.len() >= RELAY_PENDING_MAX {
            self.appends.clear();
            self.sweep = true;
            return;
        }
        self.appends.insert(append);
    }
}

/// See the module header.
pub struct Coordination {
    streams: Arc<Streams>,
    /// Whether shard 0's owner is the coordinator (a fleet); without it, this
    /// server is.
    fleet: bool,
    peers: OnceLock<Arc<dyn SubscriptionPeers>>,
    pending: parking_lot::Mutex<Pending>,
    queued: tokio::sync::Notify,
    relaying: std::sync::atomic::AtomicBool,
}

impl Coordination {
    pub fn new(streams: Arc<Streams>, fleet: bool) -> Coordination {
        Coordination {
            streams,
            fleet,
            peers: OnceLock::new(),
            pending: parking_lot::Mutex::new(Pending::default()),
            queued: tokio::sync::Notify::new(),
            relaying: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether the subscriptions wait for shard 0 before serving.
    pub fn is_fleet(&self) -> bool {
        self.fleet
    }

    pub fn set_peers(&self, peers: Arc<dyn SubscriptionPeers>) {
        let _ = self.peers.set(peers);
    }

    /// Where the subscriptions are served.
    pub fn locate(&self) -> CoordinatorAt {
        if !self.fleet {
            return CoordinatorAt::Here;
        }
        match self.streams.router().locate_index(COORDINATOR_SHARD) {
            Location::Local(_) => CoordinatorAt::Here,
            Location::Elsewhere(owner) => CoordinatorAt::Elsewhere(owner.url),
            Location::Moving | Location::Lapsed => CoordinatorAt::Unknown,
        }
    }

    /// Whether this member holds shard 0 (owned, whatever its lease says
    /// right now: a member claims shards in a beat before that beat renews
    /// its lease).
    pub fn holds_coordinator_shard(&self) -> bool {
        !self.fleet
            || matches!(
                self.streams.router().slot(COORDINATOR_SHARD),
                crate::service::routing::Slot::Owned(_)
            )
    }

    /// Queues an append for the coordinator; answers whether the relay task
    /// is to be started (the first time only).
    pub fn queue(&self, append: Option<AppendedStream>) -> bool {
        {
            let mut pending = self.pending.lock();
            match append {
                Some(append) => pending.add(append),
                None => pending.sweep = true,
            }
        }
        self.queued.notify_one();
        !self
            .relaying
            .swap(true, std::sync::atomic::Ordering::AcqRel)
    }

    /// The next batch to tell, once there is one.
    pub async fn next_batch(&self) -> AppendedBatch {
        loop {
            let notified = self.queued.notified();
            {
                let mut pending = self.pending.lock();
                if !pending.is_empty() {
                    return pending.take_batch();
                }
            }
            notified.await;
        }
    }

    /// Sends `batch` to the coordinator at `url`; on failure keeps it for
    /// the next try and waits out `backoff` (which grows, bounded).
    pub async fn send(&self, url: &str, batch: AppendedBatch, backoff: &mut Duration) {
        let result = match self.peers.get() {
            Some(peers) => peers.appended(url, batch.clone()).await,
            None => Err(PeerError::Unreachable {
                url: url.to_string(),
                reason: "no peer client".into(),
            }),
        };
        match result {
            Ok(()) => *backoff = RELAY_BACKOFF_MIN,
            Err(e) => {
                tracing::debug!(error = %e, "subscriptions: telling the coordinator failed; trying again");
                self.pending.lock().put_back(batch);
                self.wait(backoff).await;
            }
        }
    }

    /// Puts `batch` back (nobody to tell yet) and waits out `backoff`.
    pub async fn hold(&self, batch: AppendedBatch, backoff: &mut Duration) {
        self.pending.lock().put_back(batch);
        self.wait(backoff).await;
    }

    async fn wait(&self, backoff: &mut Duration) {
        tokio::time::sleep(*backoff).await;
        *backoff = (*backoff * 2).min(RELAY_BACKOFF_MAX);
    }

    pub fn backoff_start() -> Duration {
        RELAY_BACKOFF_MIN
    }

    /// The tails of `paths` in `project`, wherever their shards are served
    /// (see the module header for what is left out).
    pub async fn tails(&self, project: &str, paths: &[String]) -> BTreeMap<String, u64> {
        self.read_tails(project, paths).await.tails
    }

    /// [`Coordination::tails`], and which of `paths` could not be read now
    /// (the shard is moving, or its owner did not answer) rather than found
    /// absent.
    pub async fn read_tails(&self, project: &str, paths: &[String]) -> TailsRead {
        let mut out = TailsRead::default();
        let mut remote: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for path in paths {
            let id = strata_engine::stream_id(project, path);
            match self.streams.router().locate(&id) {
                Location::Local(_) => match self.streams.head(project, path).await {
                    Ok(meta) => {
                        out.tails.insert(path.clone(), meta.tail);
                    }
                    Err(ServiceError::NotFound) => {}
                    Err(_) => out.unread.push(path.clone()),
                },
                Location::Elsewhere(owner) => {
                    remote.entry(owner.url).or_default().push(path.clone())
                }
                Location::Moving | Location::Lapsed => out.unread.push(path.clone()),
            }
        }
        let Some(peers) = self.peers.get() else {
            out.unread.extend(remote.into_values().flatten());
            return out;
        };
        for (url, streams) in remote {
            for chunk in streams.chunks(BATCH_STREAMS_MAX) {
                let request = TailsRequest {
                    project: project.to_string(),
                    streams: chunk.to_vec(),
                };
                match peers.tails(&url, request).await {
                    Ok(answer) => {
                        // A stream the member left out it does not serve (yet):
                        // its shard is moving, not its stream gone.
                        for name in chunk {
                            match answer.tails.get(name) {
                                Some(tail) => {
                                    out.tails.insert(name.clone(), *tail);
                                }
                                None => out.unread.push(name.clone()),
                            }
                        }
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "subscriptions: reading tails from a member failed");
                        out.unread.extend_from_slice(chunk);
                    }
                }
            }
        }
        out
    }

    /// The tails of those of `request`'s streams this member serves (for a
    /// peer's tails request).
    pub async fn local_tails(&self, request: TailsRequest) -> TailsAnswer {
        let mut tails = BTreeMap::new();
        for path in request.streams.iter().take(BATCH_STREAMS_MAX) {
            let id = strata_engine::stream_id(&request.project, path);
            if let Location::Local(_) = self.streams.router().locate(&id) {
                if let Ok(meta) = self.streams.head(&request.project, path).await {
                    tails.insert(path.clone(), meta.tail);
                }
            }
        }
        TailsAnswer { tails }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn append(i: usize) -> AppendedStream {
        AppendedStream {
            project: "p".into(),
            stream: format!("s{i}"),
        }
    }

    #[test]
    fn pending_appends_are_bounded_and_overflow_into_a_sweep() {
        let mut pending = Pending::default();
        for i in 0..RELAY_PENDING_MAX {
            pending.add(append(i));
        }
        assert!(!pending.sweep);
        assert_eq!(pending.appends.len(), RELAY_PENDING_MAX);
        pending.add(append(RELAY_PENDING_MAX));
        assert!(pending.sweep);
        assert!(pending.appends.is_empty());
        let batch = pending.take_batch();
        assert!(batch.sweep && batch.appends.is_empty());
        assert!(pending.is_empty());
    }

    #[test]
    fn batches_are_bounded_and_a_failed_one_comes_back() {
        let mut pending = Pending::default();
        for i in 0..BATCH_STREAMS_MAX + 3 {
            pending.add(append(i));
            pending.add(append(i));
        }
        let first = pending.take_batch();
        assert_eq!(first.appends.len(), BATCH_STREAMS_MAX);
        assert_eq!(pending.appends.len(), 3);
        pending.put_back(first.clone());
        assert_eq!(pending.appends.len(), BATCH_STREAMS_MAX + 3);
        let again = pending.take_batch();
        assert_eq!(again, first);
    }
}
