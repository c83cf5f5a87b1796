//! Usage: what each collection and project holds and does, kept in the
//! shards so that it survives restarts and ownership moves (docs/API.md §13).
//!
//! Appends need nothing here: a stream's tail already counts its records and
//! appended bytes, and its sealed chunks and unsealed pages are its stored
//! bytes; every stream is created counted for its project (the engine's
//! account). Reads are the one thing the log would not know: they are
//! tallied in memory per stream (`read_tally`) and written to the
//! stream's shard as Usage entries by a flush every `--usage-flush-ms`
//! (default 60 s) — in the next WAL object, so a flush costs at most one
//! PUT per shard per interval, none while appends are flowing anyway.
//!
//! Invariants:
//! * the tally is bounded (`read_tally::TALLY_STREAMS_MAX` streams): past it, a flush
//!   is due at once;
//! * what a flush could not write (the shard moved, the store failed) is
//!   dropped, and so is what a crash takes: read counts lose at most one
//!   interval, and the durable time of the last read is at most one
//!   interval old, which the idle clock allows for ([`Streams::idle_since_ms`]).

use std::collections::HashMap;
use std::sync::Weak;
use std::time::Duration;

use bytes::Bytes;
use strata_engine::AccountUsage;
use strata_wal::UsageEntry;

use super::error::ServiceError;
use super::registry::{Descriptor, Entry};
use super::routing::stream_ref;
use super::streams::Streams;

/// Usage entries per engine call (one batch of one WAL object).
const FLUSH_BATCH_MAX: usize = 4_096;
pub use super::limits::USAGE_FLUSH_INTERVAL_DEFAULT as FLUSH_INTERVAL_DEFAULT;

/// One server's share of a project's usage, as fleet members send it to
/// each other (the shards each serves).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageShare {
    pub collections: u64,
    pub records: u64,
    pub appended_bytes: u64,
    pub stored_bytes: u64,
    pub reads: u64,
    pub read_bytes: u64,
}

impl UsageShare {
    pub fn add(&mut self, other: &UsageShare) {
        self.collections += other.collections;
        self.records += other.records;
        self.appended_bytes += other.appended_bytes;
        self.stored_bytes += other.stored_bytes;
        self.reads += other.reads;
        self.read_bytes += other.read_bytes;
    }
}

impl From<AccountUsage> for UsageShare {
    fn from(u: AccountUsage) -> Self {
        UsageShare {
            collections: u.streams,
            records: u.records,
            appended_bytes: u.appended_bytes,
            stored_bytes: u.stored_bytes,
            reads: u.reads,
            read_bytes: u.read_bytes,
        }
    }
}

/// A peer's question: a project's share on the shards it serves.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct UsageQuestion {
    pub project: String,
}

/// A collection's usage (docs/API.md §13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CollectionUsage {
    pub records: u64,
    pub appended_bytes: u64,
    pub stored_bytes: u64,
    /// Reads written to the shard, plus those tallied here since.
    pub reads: u64,
    pub read_bytes: u64,
    pub created_ms: u64,
    /// The idle clock's last access (writes, reads as of the last flush).
    pub last_access_ms: u64,
}

impl Streams {
    /// The engine's account of a project's streams.
    pub(super) fn account_of(project: &str) -> Bytes {
        Bytes::copy_from_slice(project.as_bytes())
    }

    /// Counts a read of a stream (see `ReadTally::record`).
    pub(super) fn count_read(&self, desc: &Descriptor, reads: u64, bytes: u64) {
        if let Ok(stream) = stream_ref(desc) {
            self.read_tally.record(stream, reads, bytes, self.now_ms());
        }
    }

    /// When `desc`'s stream was last used: the later of this process's own
    /// record (`entry`) and the shard's durable one (writes exactly; reads
    /// as of the last flush, so one flush interval is added to them, so that
    /// a restart never makes a stream expire early). When the shard is not
    /// served here, or knows no access, the process's start stands in.
    pub(super) fn idle_since_ms(&self, entry: &Entry, desc: &Descriptor) -> u64 {
        entry.last_access_ms().max(self.durable_access_ms(desc))
    }

    /// The shard's record of `desc`'s last use (see [`Streams::idle_since_ms`]).
    pub(super) fn durable_access_ms(&self, desc: &Descriptor) -> u64 {
        let slack_ms = self.config.usage_flush_interval.as_millis() as u64;
        let durable = stream_ref(desc).ok().and_then(|stream| {
            let shard = self.shards.shard_for(&stream.id).ok()?;
            shard.with_tail(&stream, |tail| {
                let reads = tail
                    .usage
                    .last_read_ms
                    .map(|ms| ms.saturating_add(slack_ms));
                let writes = [Some(tail.created_ms), tail.last_append_ms, tail.closed_ms];
                writes.into_iter().chain([reads]).flatten().max()
            })?
        });
        durable.unwrap_or_else(|| self.registry.started_ms())
    }

    /// A live collection's usage.
    pub async fn collection_usage(
        &self,
        project: &str,
        name: &str,
    ) -> Result<CollectionUsage, ServiceError> {
        let (entry, desc) = self.live(project, name).await?;
        let stream = stream_ref(&desc.value)?;
        let info = self
            .shards
            .shard_for(&stream.id)?
            .stream_info(&stream)
            .ok_or(ServiceError::NotFound)?;
        let pending = self
            .read_tally
            .pending
            .lock()
            .get(&stream)
            .copied()
            .unwrap_or_default();
        Ok(CollectionUsage {
            records: info.tail.next_offset,
            appended_bytes: info.tail.payload_bytes,
            stored_bytes: info.stored_bytes,
            reads: info.tail.usage.reads + pending.reads,
            read_bytes: info.tail.usage.read_bytes + pending.read_bytes,
            created_ms: info.tail.created_ms,
            last_access_ms: self.idle_since_ms(&entry, &desc.value),
        })
    }

    /// The usage of `project`'s streams on the shards served here (a fleet
    /// member's share; the HTTP layer adds the other members').
    pub fn local_project_usage(&self, project: &str) -> UsageShare {
        let account = Self::account_of(project);
        let mut total = AccountUsage::default();
        for (_, shard) in self.shards.owned() {
            total.add(&shard.usage_of(&account));
        }
        let mut share = UsageShare::from(total);
        // Reads tallied here and not yet written.
        for (stream, p) in self.read_tally.pending.lock().iter() {
            if let Ok(shard) = self.shards.shard_for(&stream.id) {
                let counted = shard
                    .stream_info(stream)
                    .is_some_and(|info| info.tail.usage.account == account);
                if counted {
                    share.reads += p.reads;
                    share.read_bytes += p.read_bytes;
                }
            }
        }
        share
    }

    /// Writes the tallied reads to their shards (see the module's notes).
    pub async fn flush_usage(&self) {
        let pending = self.read_tally.take();
        if pending.is_empty() {
            return;
        }
        let mut by_shard: HashMap<String, (strata_engine::Shard, Vec<UsageEntry>)> = HashMap::new();
        for (stream, p) in pending {
            let Ok(shard) = self.shards.shard_for(&stream.id) else {
                continue;
            };
            let entries = &mut by_shard
                .entry(shard.name().as_str().to_string())
                .or_insert_with(|| (shard.clone(), Vec::new()))
                .1;
            entries.push(UsageEntry {
                stream,
                reads: p.reads,
                read_bytes: p.read_bytes,
                last_read_ms: p.last_read_ms,
            });
        }
        for (name, (shard, entries)) in by_shard {
            for batch in entries.chunks(FLUSH_BATCH_MAX) {
                if let Err(e) = shard.record_usage(batch.to_vec()).await {
                    tracing::debug!(shard = %name, error = %e, streams = batch.len(), "usage not written; these reads stay uncounted");
                }
            }
        }
    }
}

/// Flushes the tallied reads of `streams` every `interval` (or at once when
/// the tally is full), until the service is dropped.
pub async fn run_flusher(streams: Weak<Streams>, interval: Duration) {
    loop {
        let Some(strong) = streams.upgrade() else {
            return;
        };
        strong.flush_usage().await;
        let tally = strong.read_tally.clone();
        // Not held while waiting: the flusher must not keep the service alive.
        drop(strong);
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = tally.wake.notified() => {}
        }
    }
}
