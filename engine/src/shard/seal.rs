//! The sealer: moves durable unsealed pages into segment objects and records
//! the shard's state in index runs, so that opening a shard costs the manifest,
//! its runs and only the WAL objects since the last seal (docs/ARCHITECTURE.md,
//! "Sealing, the state index and garbage collection").
//!
//! One seal at a time, in four steps, each durable before the next starts:
//!
//! ```text
//! snapshot (actor, synchronous): every dirty stream's tail and unsealed pages,
//!   exactly at the durable watermark (the last acknowledged WAL object)
//! 1. PUT segment   seg/<id>    create-only; one chunk per stream with pages
//! 2. PUT run       index/<id>  create-only; tail + new chunks per dirty stream
//!                  (a *full* run lists every stream with all its chunks and
//!                  replaces every older run: our merge, done from memory)
//! 3. CAS manifest  If-Match    lists the run, the segment, the new replay point
//!                  {last acknowledged slot + 1, our epoch, that slot}
//! 4. swap (actor)  under each stream's write lock the sealed pages leave
//!                  memory and the chunk joins the sealed tier
//! ```
//!
//! Invariants:
//! * The manifest never lists an object that is not durable (steps 1–2 precede 3).
//! * The replay point never passes an unacknowledged object: the snapshot holds
//!   the effects of exactly the WAL objects below it, no more, no less.
//! * A crash or failure between steps leaves only unreferenced objects, which
//!   the next open's sweep collects; the log and the last manifest stay valid.
//! * A fenced sealer changes nothing: its manifest CAS fails (`Conflict`).
//! * Readers see each stream's two tiers swap atomically, so never a hole.
//! * No stream key is needed: pages are copied byte for byte.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use strata_manifest::index_run::{self, IndexRun};
use strata_manifest::store::is_durability_unknown;
use strata_manifest::{
    add_window, CasError, IndexRunRef, Manifest, ReplayPoint, SegmentRef, SlotRange, Versioned,
    WriterIdentity,
};
use strata_segments::segment::{build_segment, ChunkInput};
use strata_wal::StreamRef;
use tokio::sync::oneshot;

use super::chunk::SealedChunk;
use super::ctx::ShardCtx;
use super::gc::{wal_garbage, Garbage};
use super::io::put_immutable;
use super::sealed::run_entry;
use super::state::Tail;
use crate::env::CrashPoint;
use crate::error::EngineError;
use crate::layout::ObjectId;

/// One stream in a seal.
pub(crate) struct SealStream {
    pub tail: Tail,
    /// Its unsealed pages at the snapshot (may be empty: tail changes only).
    pub pages: Vec<Bytes>,
    /// In a full run, the chunks it already had (listed again).
    pub prior: Vec<SealedChunk>,
    /// Its consumer table at the snapshot, encoded.
    pub consumers: Bytes,
}

/// Everything a seal needs, taken by the actor at the durable watermark.
pub(crate) struct SealPlan {
    pub base: Versioned<Manifest>,
    pub write_id: [u8; 16],
    pub replay: ReplayPoint,
    pub segment_id: ObjectId,
    pub run_id: ObjectId,
    pub next_object_id: u64,
    /// The run lists every stream and replaces every older run.
    pub full: bool,
    /// Sorted by stream id, each once.
    pub streams: Vec<SealStream>,
    /// Segments the manifest lists whose chunks all died: dropped by this seal.
    pub dead_segments: Vec<ObjectId>,
    /// This owner's fence window, recorded by its seals.
    pub fence_window: SlotRange,
}

/// A chunk a seal produced for a stream incarnation.
pub(crate) struct NewChunk {
    pub stream: StreamRef,
    pub chunk: SealedChunk,
}

/// A durable seal, for the actor to install.
pub(crate) struct SealDone {
    pub manifest: Versioned<Manifest>,
    pub chunks: Vec<NewChunk>,
    pub segment: Option<ObjectId>,
    /// Objects no longer referenced by the new manifest.
    pub garbage: Vec<Garbage>,
    pub dead_segments: Vec<ObjectId>,
}

/// Why a seal did not land.
pub(crate) enum SealFailure {
    /// A newer owner holds the manifest.
    Fenced,
    /// The store failed (or the seal could not be built); retried later.
    Failed(EngineError),
    /// The manifest write may or may not have landed and the manifest could
    /// not be read back: the owner must re-open from the store.
    Unknown(EngineError),
}

/// Read-backs of the manifest after an ambiguous seal write.
const RESOLVE_ATTEMPTS_MAX: u32 = 20;

/// Settles an ambiguous manifest write by reading the manifest back: our write
/// id means it landed; the manifest we replaced means it did not; another
/// write of this same owner (an earlier seal's write that landed after it
/// was given up) means the owner's picture of the store is stale; anything
/// else means a newer owner wrote.
async fn resolve(
    ctx: &ShardCtx,
    base: &Versioned<Manifest>,
    write_id: [u8; 16],
) -> Result<Versioned<Manifest>, SealFailure> {
    let mut last_error = None;
    for attempt in 0..RESOLVE_ATTEMPTS_MAX {
        match ctx.manifest.load().await {
            Ok(Some(current)) if current.value.writer.write_id == write_id => return Ok(current),
            Ok(Some(current)) if current.value.writer.write_id == base.value.writer.write_id => {
                return Err(SealFailure::Failed(EngineError::Store {
                    reason: "the seal's manifest write did not land".into(),
                }))
            }
            Ok(current) => return Err(other_writer(&base.value, current.as_ref())),
            Err(e) => last_error = Some(e.to_string()),
        }
        let wait = ctx
            .config
            .store_retry
            .backoff(attempt)
            .min(ctx.config.reopen_backoff_max);
        tokio::time::sleep(wait).await;
    }
    Err(SealFailure::Unknown(EngineError::Store {
        reason: last_error.unwrap_or_default(),
    }))
}

/// The verdict on a manifest that is neither the one a seal replaced nor its
/// own write. Written by this same owner (instance and epoch) it is an
/// earlier write of ours that landed after we gave it up: not a newer owner,
/// so never `Fenced`; the owner re-opens from the store (which re-claims and
/// finds out for sure). Anyone else's is a newer owner's.
fn other_writer(base: &Manifest, current: Option<&Versioned<Manifest>>) -> SealFailure {
    match current {
        Some(c)
            if c.value.writer.instance == base.writer.instance
                && c.value.writer.epoch == base.writer.epoch =>
        {
            SealFailure::Unknown(EngineError::Store {
                reason: format!(
                    "the manifest holds version {}, an earlier write of this owner that landed late",
                    c.value.version
                ),
            })
        }
        _ => SealFailure::Fenced,
    }
}

/// A seal's manifest CAS met another version: read it to tell a newer
/// owner from a late write of our own. An unreadable manifest leaves the
/// outcome to a re-open.
async fn conflict_verdict(ctx: &ShardCtx, base: &Versioned<Manifest>) -> SealFailure {
    match ctx.manifest.load().await {
        Ok(current) => other_writer(&base.value, current.as_ref()),
        Err(e) => SealFailure::Unknown(EngineError::Store {
            reason: e.to_string(),
        }),
    }
}

pub(crate) type SealResult = Result<SealDone, SealFailure>;

/// Runs steps 1–3 of a seal.
pub(crate) async fn run(ctx: Arc<ShardCtx>, plan: SealPlan) -> SealResult {
    let SealPlan {
        base,
        write_id,
        replay,
        segment_id,
        run_id,
        next_object_id,
        full,
        streams,
        dead_segments,
        fence_window,
    } = plan;
    let failed = SealFailure::Failed;
    let store = &ctx.env.store;
    let retry = &ctx.config.store_retry;
    let epoch = base.value.writer.epoch;

    // 1. The segment: one chunk per stream that has unsealed pages.
    let inputs: Vec<ChunkInput> = streams
        .iter()
        .filter(|s| !s.pages.is_empty())
        .map(|s| ChunkInput {
            stream_id: s.tail.stream.id,
            incarnation: s.tail.stream.incarnation,
            pages: s.pages.clone(),
        })
        .collect();
    let mut new_chunks: Vec<NewChunk> = Vec::with_capacity(inputs.len());
    let mut segment_ref = None;
    if !inputs.is_empty() {
        let (bytes, refs) = match build_segment(&inputs) {
            Ok(built) => built,
            Err(e) => return Err(failed(EngineError::corrupt("segment build", e))),
        };
        let path = ctx.layout.segment(segment_id);
        let length = bytes.len() as u64;
        if let Err(e) = put_immutable(store, &path, bytes, retry).await {
            return Err(failed(EngineError::store(&e)));
        }
        ctx.env
            .reach(CrashPoint::SealAfterSegment, &ctx.instance)
            .await;
        segment_ref = Some(SegmentRef {
            id: segment_id.0,
            bytes: length,
        });
        for (input, chunk) in inputs.iter().zip(refs) {
            new_chunks.push(NewChunk {
                stream: StreamRef {
                    id: input.stream_id,
                    incarnation: input.incarnation,
                },
                chunk: SealedChunk {
                    segment: segment_id,
                    chunk: Arc::new(chunk),
                },
            });
        }
    }

    // 2. The index run.
    let mut chunk_of = new_chunks.iter().peekable();
    let entries = streams
        .iter()
        .map(|s| {
            let mut chunks = s.prior.clone();
            if chunk_of
                .peek()
                .is_some_and(|c| c.stream.id == s.tail.stream.id)
            {
                chunks.push(chunk_of.next().expect("peeked").chunk.clone());
            }
            run_entry(&s.tail, &chunks, s.consumers.clone())
        })
        .collect();
    let run = IndexRun {
        id: run_id.0,
        chain_end: replay.chain_end,
        entries,
    };
    let encoded = match index_run::encode(&run) {
        Ok(bytes) => bytes,
        Err(e) => return Err(failed(EngineError::corrupt("index run encode", e))),
    };
    let run_ref = IndexRunRef {
        id: run_id.0,
        bytes: encoded.len() as u64,
    };
    let run_path = ctx.layout.index_run(run_id);
    if let Err(e) = put_immutable(store, &run_path, encoded, retry).await {
        return Err(failed(EngineError::store(&e)));
    }
    ctx.env.reach(CrashPoint::SealAfterRun, &ctx.instance).await;

    // 3. The manifest.
    let old = &base.value;
    let dead: HashSet<u64> = dead_segments.iter().map(|s| s.0).collect();
    let mut next = old.successor(WriterIdentity {
        write_id,
        ..old.writer
    });
    next.replay = replay;
    next.next_object_id = next_object_id;
    next.index_runs = if full {
        vec![run_ref]
    } else {
        old.index_runs.iter().copied().chain([run_ref]).collect()
    };
    next.fence_windows = add_window(&old.fence_windows, fence_window);
    next.segments = old
        .segments
        .iter()
        .filter(|s| !dead.contains(&s.id))
        .copied()
        .chain(segment_ref)
        .collect();
    let manifest = match ctx.manifest.replace(&base, next).await {
        Ok(m) => m,
        Err(CasError::Conflict { .. }) => return Err(conflict_verdict(&ctx, &base).await),
        // Landed, but perhaps not durably: a read-back cannot settle it.
        Err(CasError::Store { source, .. }) if is_durability_unknown(&source) => {
            return Err(SealFailure::Unknown(EngineError::store(&source)))
        }
        Err(e) => {
            tracing::warn!(shard = %ctx.layout.shard(), error = %e, "manifest write of a seal failed; reading it back");
            resolve(&ctx, &base, write_id).await?
        }
    };
    ctx.env
        .reach(CrashPoint::SealAfterManifest, &ctx.instance)
        .await;
    super::history::record(&ctx, &manifest).await;

    let mut garbage = wal_garbage(
        old.replay.slot..replay.slot,
        &manifest.value.fence_windows,
        epoch,
    );
    if full {
        garbage.extend(old.index_runs.iter().map(|r| Garbage::Run(ObjectId(r.id))));
    }
    garbage.extend(dead_segments.iter().map(|s| Garbage::Segment(*s)));
    Ok(SealDone {
        manifest,
        chunks: new_chunks,
        segment: segment_ref.map(|s| ObjectId(s.id)),
        garbage,
        dead_segments,
    })
}

/// Back-off after a failed seal: 0.5 s doubling to 16 s.
const SEAL_BACKOFF_INITIAL_MS: u64 = 500;
const SEAL_BACKOFF_MAX_MS: u64 = 16_000;

/// What the actor is sealing right now (restored into the dirty set if the
/// seal fails).
pub(crate) struct InSeal {
    pub dirty: HashSet<[u8; 16]>,
    pub dirty_since: Option<tokio::time::Instant>,
    pub objects: u64,
}

/// The sealer's bookkeeping, owned by the actor.
#[derive(Default)]
pub(crate) struct SealState {
    /// Streams changed by acknowledged objects since the last seal snapshot.
    pub dirty: HashSet<[u8; 16]>,
    /// When the oldest of those changes became durable.
    pub dirty_since: Option<tokio::time::Instant>,
    /// Acknowledged data objects not yet covered by a seal.
    pub objects_unsealed: u64,
    /// Slot of the last acknowledged object of our chain (the fence at first).
    pub durable_chain_end: u64,
    pub in_seal: Option<InSeal>,
    pub failures: u32,
    pub retry_at: Option<tokio::time::Instant>,
    /// The next id to name a segment or run with (never reused within an epoch).
    pub next_object_id: u64,
    /// Live chunks per segment the manifest lists.
    pub live_chunks: std::collections::HashMap<ObjectId, u32>,
    /// Listed segments with no live chunk: the next seal drops them.
    pub dead: std::collections::BTreeSet<ObjectId>,
    /// The shutdown seal was started (it is tried once).
    pub final_started: bool,
    /// This owner's fence window (recorded in the manifest by every seal).
    pub fence_window: SlotRange,
    /// `Shard::seal_now` callers waiting for the next seal to start…
    pub waiting: Vec<oneshot::Sender<Result<(), EngineError>>>,
    /// …and for the running one to end.
    pub sealing_waiters: Vec<oneshot::Sender<Result<(), EngineError>>>,
}

impl SealState {
    pub fn mark_dirty(&mut self, id: [u8; 16], now: tokio::time::Instant) {
        self.dirty.insert(id);
        self.dirty_since.get_or_insert(now);
    }

    /// Chunks that stopped being live (their stream was deleted or replaced).
    pub fn release(&mut self, chunks: &[SealedChunk]) {
        for chunk in chunks {
            if let Some(count) = self.live_chunks.get_mut(&chunk.segment) {
                *count = count.saturating_sub(1);
                if *count == 0 {
                    self.live_chunks.remove(&chunk.segment);
                    self.dead.insert(chunk.segment);
                }
            }
        }
    }

    pub fn adopt(&mut self, chunk: &SealedChunk) {
        *self.live_chunks.entry(chunk.segment).or_default() += 1;
    }

    /// Takes the dirty set for a seal.
    pub fn begin(&mut self) -> HashSet<[u8; 16]> {
        let dirty = std::mem::take(&mut self.dirty);
        self.in_seal = Some(InSeal {
            dirty: dirty.clone(),
            dirty_since: self.dirty_since.take(),
            objects: self.objects_unsealed,
        });
        dirty
    }

    pub fn succeeded(&mut self) {
        if let Some(done) = self.in_seal.take() {
            self.objects_unsealed -= done.objects.min(self.objects_unsealed);
        }
        self.failures = 0;
        self.retry_at = None;
        for waiter in self.sealing_waiters.drain(..) {
            let _ = waiter.send(Ok(()));
        }
    }

    /// Puts the sealed set back and backs off.
    pub fn failed(&mut self, now: tokio::time::Instant, error: EngineError) {
        for waiter in self.sealing_waiters.drain(..) {
            let _ = waiter.send(Err(error.clone()));
        }
        if let Some(undone) = self.in_seal.take() {
            self.dirty.extend(undone.dirty);
            self.dirty_since = match (self.dirty_since, undone.dirty_since) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        let backoff_ms = SEAL_BACKOFF_INITIAL_MS
            .saturating_mul(1u64 << self.failures.min(16))
            .min(SEAL_BACKOFF_MAX_MS);
        self.failures = self.failures.saturating_add(1);
        self.retry_at = Some(now + std::time::Duration::from_millis(backoff_ms));
    }
}
