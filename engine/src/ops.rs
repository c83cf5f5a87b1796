//! Operator views of shards, read-only: list the shards of a store, inspect
//! one, verify one.
//!
//! Nothing here claims, fences or writes: these functions only GET, HEAD and
//! LIST, so they are safe to run against a shard a live owner holds (they see
//! a snapshot that may be slightly behind it). Every problem found is a
//! [`Finding`] naming its object, never a panic; a store that cannot be read
//! at all is an error.
//!
//! Verification checks, in order: the manifest decodes; every index run it
//! lists exists and decodes; every segment it lists exists, and its trailer
//! and table decode; every chunk a run refers to is in the listed segment's
//! table exactly as the run describes it; the WAL after the replay point is a
//! contiguous run of objects that decode and walk (objects listed after a
//! hole are reported: an opener ignores them); each stream's offsets tile
//! across the sealed chunks and the unsealed pages. `deep` also fetches
//! every live chunk and checks it as a read would.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::Serialize;
use strata_manifest::{CasObject, Manifest, ManifestCodec, RetryPolicy};
use strata_segments::segment::{
    decode_chunk, decode_table, decode_trailer, ChunkRef, TRAILER_BYTES,
};

use crate::env::EngineEnv;
use crate::error::EngineError;
use crate::ids::{hex, ShardName};
use crate::layout::{parse_shard_folder, shards_root, ImmutableKind, ObjectId, ShardLayout};
use crate::shard::sealed::{apply_run, decode_sealed, SealedChunk};
use crate::shard::tiers::check as check_chunk;
use crate::shard::{
    inspect_log, inspect_log_at, inspect_log_from, DurableStream, ShardConfig, StreamStatus,
    StreamTable,
};

/// Objects fetched at once by a verification.
const FETCHES_PARALLEL: usize = 16;

/// One shard as `list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ShardSummary {
    pub shard: String,
    /// `None` when the shard has no manifest (or it does not decode).
    pub manifest: Option<ManifestSummary>,
    /// Why the manifest could not be read, if it could not.
    pub manifest_error: Option<String>,
}

/// The headline fields of a manifest.
#[derive(Debug, Clone, Serialize)]
pub struct ManifestSummary {
    pub version: u64,
    pub writer_epoch: u64,
    pub writer_instance: String,
    pub replay_slot: u64,
    pub index_runs: usize,
    pub segments: usize,
    /// Bytes of the runs and segments the manifest lists, as recorded there.
    pub sealed_bytes: u64,
    pub fence_windows: usize,
    pub next_object_id: u64,
}

impl ManifestSummary {
    pub fn of(m: &Manifest) -> Self {
        ManifestSummary {
            version: m.version,
            writer_epoch: m.writer.epoch,
            writer_instance: hex(&m.writer.instance),
            replay_slot: m.replay.slot,
            index_runs: m.index_runs.len(),
            segments: m.segments.len(),
            sealed_bytes: m.index_runs.iter().map(|r| r.bytes).sum::<u64>()
                + m.segments.iter().map(|s| s.bytes).sum::<u64>(),
            fence_windows: m.fence_windows.len(),
            next_object_id: m.next_object_id,
        }
    }
}

/// Every shard under `shards/`, with its manifest's headline.
pub async fn list_shards(store: &Arc<dyn ObjectStore>) -> Result<Vec<ShardSummary>, EngineError> {
    let listing = store
        .list_with_delimiter(Some(&shards_root()))
        .await
        .map_err(|e| EngineError::store(&e))?;
    let mut names: Vec<ShardName> = listing
        .common_prefixes
        .iter()
        .filter_map(parse_shard_folder)
        .collect();
    names.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let layout = ShardLayout::new(name.clone());
        let (manifest, manifest_error) = match load_manifest(store, &layout).await {
            Ok(Some(m)) => (Some(ManifestSummary::of(&m)), None),
            Ok(None) => (None, Some("no manifest".to_string())),
            Err(e) => (None, Some(e.to_string())),
        };
        out.push(ShardSummary {
            shard: name.as_str().to_string(),
            manifest,
            manifest_error,
        });
    }
    Ok(out)
}

async fn load_manifest(
    store: &Arc<dyn ObjectStore>,
    layout: &ShardLayout,
) -> Result<Option<Manifest>, EngineError> {
    CasObject::<ManifestCodec>::new(store.clone(), layout.manifest(), RetryPolicy::default())
        .load()
        .await
        .map(|v| v.map(|v| v.value))
        .map_err(|e| EngineError::corrupt(layout.manifest(), e))
}

/// An object a manifest lists.
#[derive(Debug, Clone, Serialize)]
pub struct ListedObject {
    pub id: u64,
    /// The epoch of the owner that wrote it (the id's high half).
    pub epoch: u64,
    pub bytes: u64,
    pub path: String,
}

/// The WAL as a listing and a walk see it.
#[derive(Debug, Clone, Serialize)]
pub struct WalSummary {
    /// Objects listed, all slots.
    pub objects: usize,
    pub first_slot: Option<u64>,
    pub last_slot: Option<u64>,
    /// The first slot after the replay point that holds no object: where the
    /// next owner's fence goes.
    pub end_slot: u64,
    /// Objects the walk applied, and objects of superseded owners it skipped.
    pub applied: u64,
    pub skipped: u64,
}

/// One stream incarnation as the shard holds it.
#[derive(Debug, Clone, Serialize)]
pub struct StreamSummary {
    pub stream_id: String,
    pub incarnation: u64,
    pub status: String,
    pub next_offset: u64,
    pub payload_bytes: u64,
    pub sealed_chunks: usize,
    pub sealed_bytes: u64,
    /// First offset held in unsealed pages (equal to `next_offset` when none).
    pub unsealed_from: u64,
    pub unsealed_pages: usize,
    pub unsealed_bytes: u64,
    pub producers: usize,
}

impl StreamSummary {
    pub fn of(s: &DurableStream) -> Self {
        StreamSummary {
            stream_id: hex(&s.tail.stream.id),
            incarnation: s.tail.stream.incarnation,
            status: match s.tail.status {
                StreamStatus::Open => "open",
                StreamStatus::Closed => "closed",
                StreamStatus::Deleted => "deleted",
            }
            .to_string(),
            next_offset: s.tail.next_offset,
            payload_bytes: s.tail.payload_bytes,
            sealed_chunks: s.sealed.len(),
            sealed_bytes: s.sealed.iter().map(|c| c.chunk.length).sum(),
            unsealed_from: s.unsealed_from(),
            unsealed_pages: s.pages.len(),
            unsealed_bytes: s.page_bytes,
            producers: s.tail.producers.len(),
        }
    }
}

/// What `inspect` shows of a shard.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    pub shard: String,
    pub manifest: ManifestSummary,
    pub index_runs: Vec<ListedObject>,
    pub segments: Vec<ListedObject>,
    pub fence_windows: Vec<(u64, u64)>,
    pub wal: WalSummary,
    /// Manifest versions retained for `rollback`, oldest first.
    pub retained_versions: Vec<u64>,
    /// Sorted by stream id.
    pub streams: Vec<StreamSummary>,
}

/// The manifest, its objects, the WAL and every stream's state, as an owner
/// opening the shard now would recover them (without claiming anything).
pub async fn inspect(env: &EngineEnv, shard: &ShardName) -> Result<Inspection, EngineError> {
    let layout = ShardLayout::new(shard.clone());
    let manifest = load_manifest(&env.store, &layout)
        .await?
        .ok_or_else(|| EngineError::corrupt(layout.manifest(), "the shard has no manifest"))?;
    let view = inspect_log(env.clone(), shard.clone(), ShardConfig::default()).await?;
    let slots = list_wal_slots(&env.store, &layout).await?;
    let history: Vec<_> = env
        .store
        .list(Some(&layout.manifest_history_prefix()))
        .try_collect()
        .await
        .map_err(|e| EngineError::store(&e))?;
    let mut retained_versions: Vec<u64> = history
        .iter()
        .filter_map(|m| layout.parse_manifest_history(&m.location))
        .collect();
    retained_versions.sort_unstable();
    let mut streams: Vec<StreamSummary> = view
        .streams
        .streams
        .values()
        .map(StreamSummary::of)
        .collect();
    streams.sort_by(|a, b| a.stream_id.cmp(&b.stream_id));
    let listed = |kind: ImmutableKind, id: u64, bytes: u64| ListedObject {
        id,
        epoch: ObjectId(id).epoch(),
        bytes,
        path: layout.immutable(kind, ObjectId(id)).to_string(),
    };
    Ok(Inspection {
        shard: shard.as_str().to_string(),
        manifest: ManifestSummary::of(&manifest),
        index_runs: manifest
            .index_runs
            .iter()
            .map(|r| listed(ImmutableKind::IndexRun, r.id, r.bytes))
            .collect(),
        segments: manifest
            .segments
            .iter()
            .map(|s| listed(ImmutableKind::Segment, s.id, s.bytes))
            .collect(),
        fence_windows: manifest
            .fence_windows
            .iter()
            .map(|w| (w.start, w.end))
            .collect(),
        wal: WalSummary {
            objects: slots.len(),
            first_slot: slots.first().copied(),
            last_slot: slots.last().copied(),
            end_slot: view.end_slot,
            applied: view.objects_applied,
            skipped: view.stale_objects_skipped,
        },
        retained_versions,
        streams,
    })
}

async fn list_wal_slots(
    store: &Arc<dyn ObjectStore>,
    layout: &ShardLayout,
) -> Result<BTreeSet<u64>, EngineError> {
    let metas: Vec<_> = store
        .list(Some(&layout.wal_prefix()))
        .try_collect()
        .await
        .map_err(|e| EngineError::store(&e))?;
    Ok(metas
        .iter()
        .filter_map(|m| layout.parse_wal_slot(&m.location))
        .collect())
}

/// The kinds of damage `verify` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    ManifestMissing,
    ManifestCorrupt,
    IndexRunMissing,
    IndexRunCorrupt,
    SegmentMissing,
    SegmentCorrupt,
    /// A run refers to a chunk its segment's table does not hold as described,
    /// or to a segment the manifest does not list.
    ChunkReferenceMismatch,
    /// A chunk's bytes fail validation (deep verification).
    ChunkCorrupt,
    /// WAL objects after a missing slot past the replay point: an opener
    /// ignores them.
    WalGap,
    WalObjectCorrupt,
    /// The walk refused the log (or its runs) as a whole.
    LogUnreadable,
    /// A stream's offsets do not tile across its sealed chunks and pages.
    StreamOffsets,
}

/// One problem, naming the object it is about.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub object: String,
    pub detail: String,
    /// The records the damage makes unreachable, where they are known.
    pub records: Vec<RecordRange>,
}

/// Records `from..to` of one stream incarnation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RecordRange {
    pub stream_id: String,
    pub incarnation: u64,
    pub from: u64,
    pub to: u64,
}

/// How much a verification looked at.
#[derive(Debug, Clone, Default, Serialize)]
pub struct VerifyCounts {
    pub index_runs: usize,
    pub segments: usize,
    pub chunk_references: usize,
    pub wal_objects: usize,
    pub streams: usize,
    /// Chunks fetched and checked (deep only).
    pub chunks_read: usize,
}

/// The outcome of `verify`: healthy when `findings` is empty.
#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    pub shard: String,
    pub deep: bool,
    pub counts: VerifyCounts,
    pub findings: Vec<Finding>,
}

impl Verification {
    pub fn healthy(&self) -> bool {
        self.findings.is_empty()
    }
}

/// Progress of a long verification step, for a progress bar.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub step: &'static str,
    pub done: u64,
    pub total: u64,
}

/// Verifies a shard; see the module header for what is checked.
pub async fn verify(
    env: &EngineEnv,
    shard: &ShardName,
    deep: bool,
    progress: &(dyn Fn(Progress) + Send + Sync),
) -> Result<Verification, EngineError> {
    let store = &env.store;
    let layout = ShardLayout::new(shard.clone());
    let mut findings = Vec::new();
    let mut counts = VerifyCounts::default();
    let finding = |kind, object: &dyn std::fmt::Display, detail: String| Finding {
        kind,
        object: object.to_string(),
        detail,
        records: Vec::new(),
    };

    let manifest = match load_manifest(store, &layout).await {
        Ok(Some(m)) => Some(m),
        Ok(None) => {
            findings.push(finding(
                FindingKind::ManifestMissing,
                &layout.manifest(),
                "the shard has no manifest".into(),
            ));
            None
        }
        Err(e) => {
            findings.push(finding(
                FindingKind::ManifestCorrupt,
                &layout.manifest(),
                e.to_string(),
            ));
            None
        }
    };

    // Index runs: each must exist and decode; collect their chunk references.
    let mut referenced: Vec<(String, SealedChunk)> = Vec::new();
    // The sealed state the runs give, applied in the manifest's order (as an
    // opener would), so the walk below need not fetch them again; `None` once
    // a run is missing or damaged.
    let mut sealed_state = Some(StreamTable::default());
    if let Some(m) = &manifest {
        let runs: Vec<Path> = m
            .index_runs
            .iter()
            .map(|r| layout.index_run(ObjectId(r.id)))
            .collect();
        counts.index_runs = runs.len();
        let fetched: Vec<(Path, Result<Option<Bytes>, EngineError>)> = futures::stream::iter(runs)
            .map(|path| async move {
                let got = get_whole(store, &path).await;
                (path, got)
            })
            .buffered(FETCHES_PARALLEL)
            .collect()
            .await;
        for (path, got) in fetched {
            let bytes = match got? {
                Some(b) => b,
                None => {
                    sealed_state = None;
                    findings.push(finding(
                        FindingKind::IndexRunMissing,
                        &path,
                        "listed by the manifest but missing".into(),
                    ));
                    continue;
                }
            };
            let run = match strata_manifest::index_run::decode(&bytes) {
                Ok(run) => run,
                Err(e) => {
                    sealed_state = None;
                    findings.push(finding(FindingKind::IndexRunCorrupt, &path, e.to_string()));
                    continue;
                }
            };
            if let Some(table) = sealed_state.as_mut() {
                if let Err(why) = apply_run(table, &run) {
                    sealed_state = None;
                    findings.push(finding(FindingKind::IndexRunCorrupt, &path, why));
                }
            }
            for entry in &run.entries {
                for chunk in &entry.chunks {
                    match decode_sealed(chunk) {
                        Ok(sealed) => referenced.push((path.to_string(), sealed)),
                        Err(e) => findings.push(finding(FindingKind::IndexRunCorrupt, &path, e)),
                    }
                }
            }
        }
    }
    counts.chunk_references = referenced.len();

    // Segments: trailer and table of each listed one.
    let mut tables: HashMap<ObjectId, Vec<ChunkRef>> = HashMap::new();
    if let Some(m) = &manifest {
        counts.segments = m.segments.len();
        let ids: Vec<ObjectId> = m.segments.iter().map(|s| ObjectId(s.id)).collect();
        let total = ids.len() as u64;
        let mut done = 0;
        let mut loads = futures::stream::iter(ids)
            .map(|id| {
                let path = layout.segment(id);
                async move { (id, path.clone(), segment_table(store, &path, None).await) }
            })
            .buffer_unordered(FETCHES_PARALLEL);
        while let Some((id, path, table)) = loads.next().await {
            done += 1;
            progress(Progress {
                step: "segment tables",
                done,
                total,
            });
            match table? {
                SegmentTable::Missing => findings.push(finding(
                    FindingKind::SegmentMissing,
                    &path,
                    "listed by the manifest but missing".into(),
                )),
                SegmentTable::Corrupt(why) => {
                    findings.push(finding(FindingKind::SegmentCorrupt, &path, why))
                }
                SegmentTable::Table(refs) => {
                    tables.insert(id, refs);
                }
            }
        }
        let listed: BTreeSet<u64> = m.segments.iter().map(|s| s.id).collect();
        for (run, sealed) in &referenced {
            let path = layout.segment(sealed.segment);
            if !listed.contains(&sealed.segment.0) {
                findings.push(finding(
                    FindingKind::ChunkReferenceMismatch,
                    run,
                    format!("refers to {path}, which the manifest does not list"),
                ));
            } else if let Some(table) = tables.get(&sealed.segment) {
                if !table.iter().any(|c| c == sealed.chunk.as_ref()) {
                    findings.push(finding(
                        FindingKind::ChunkReferenceMismatch,
                        run,
                        format!(
                            "its chunk at {} (offsets {}..{}) is not in {path}'s table",
                            sealed.chunk.position,
                            sealed.chunk.first_offset,
                            sealed.chunk.end_offset
                        ),
                    ));
                }
            }
        }
    }

    // The WAL after the replay point: contiguous, decodable.
    let replay = manifest.as_ref().map_or(0, |m| m.replay.slot);
    let slots = list_wal_slots(store, &layout).await?;
    let mut end = replay;
    while slots.contains(&end) {
        end += 1;
    }
    let stranded: Vec<u64> = slots.range(end..).copied().collect();
    if let (Some(first), Some(last)) = (stranded.first(), stranded.last()) {
        let mut gap = finding(
            FindingKind::WalGap,
            &layout.wal(end),
            format!(
                "missing; {} object(s) after it (slots {first}..={last}) are ignored by an opener",
                stranded.len()
            ),
        );
        gap.records = stranded_records(store, &layout, &stranded).await?;
        findings.push(gap);
    }
    let walked: Vec<u64> = (replay..end).collect();
    counts.wal_objects = walked.len();
    let total = walked.len() as u64;
    let mut done = 0;
    let mut gets = futures::stream::iter(walked)
        .map(|slot| {
            let path = layout.wal(slot);
            async move { (path.clone(), get_whole(store, &path).await) }
        })
        .buffer_unordered(FETCHES_PARALLEL);
    while let Some((path, got)) = gets.next().await {
        done += 1;
        progress(Progress {
            step: "WAL objects",
            done,
            total,
        });
        match got? {
            None => findings.push(finding(
                FindingKind::WalGap,
                &path,
                "listed but gone while verifying".into(),
            )),
            Some(bytes) => {
                if let Err(e) = strata_wal::decode(&bytes) {
                    findings.push(finding(FindingKind::WalObjectCorrupt, &path, e.to_string()));
                }
            }
        }
    }
    drop(gets);

    // The streams an opener would recover, tier by tier.
    if let Some(m) = &manifest {
        let config = ShardConfig::default();
        let view = match sealed_state {
            Some(table) => {
                inspect_log_from(env.clone(), shard.clone(), config, m.clone(), table).await
            }
            None => inspect_log_at(env.clone(), shard.clone(), config, Some(m.clone())).await,
        };
        match view {
            Ok(view) => {
                counts.streams = view.streams.streams.len();
                let mut ids: Vec<&[u8; 16]> = view.streams.streams.keys().collect();
                ids.sort();
                for id in ids {
                    let stream = &view.streams.streams[id];
                    if let Err(why) = check_stream_offsets(stream) {
                        findings.push(finding(
                            FindingKind::StreamOffsets,
                            &format!(
                                "stream {} incarnation {}",
                                hex(id),
                                stream.tail.stream.incarnation
                            ),
                            why,
                        ));
                    }
                }
                if deep {
                    deep_check(
                        store,
                        &layout,
                        &view.streams.streams,
                        &mut counts,
                        &mut findings,
                        progress,
                    )
                    .await?;
                }
            }
            Err(e) => {
                // Already reported piecewise above when the cause is a run or
                // WAL object; this names what an opener would refuse.
                if !findings.iter().any(|f| {
                    matches!(
                        f.kind,
                        FindingKind::IndexRunMissing
                            | FindingKind::IndexRunCorrupt
                            | FindingKind::WalObjectCorrupt
                            | FindingKind::ManifestCorrupt
                    )
                }) {
                    findings.push(finding(
                        FindingKind::LogUnreadable,
                        &layout.root(),
                        e.to_string(),
                    ));
                }
            }
        }
    }
    Ok(Verification {
        shard: shard.as_str().to_string(),
        deep,
        counts,
        findings,
    })
}

/// A stream's sealed chunks must tile from its first offset up to its
/// unsealed pages, which must tile up to its next offset.
pub(crate) fn check_stream_offsets(stream: &DurableStream) -> Result<(), String> {
    // A deleted incarnation keeps its tail but no data; a live one holds
    // every record from offset 0 (nothing is trimmed).
    if stream.tail.status == StreamStatus::Deleted {
        return Ok(());
    }
    let mut at: Option<u64> = Some(0);
    for chunk in &stream.sealed {
        if let Some(expected) = at {
            if chunk.first_offset() != expected {
                return Err(format!(
                    "sealed chunk starts at {} but the previous one ends at {expected}",
                    chunk.first_offset()
                ));
            }
        }
        at = Some(chunk.end_offset());
    }
    for page in &stream.pages {
        if let Some(expected) = at {
            if page.first_offset != expected {
                return Err(format!(
                    "unsealed page starts at {} but the data before it ends at {expected}",
                    page.first_offset
                ));
            }
        }
        at = Some(page.end_offset());
    }
    match at {
        Some(end) if end != stream.tail.next_offset => Err(format!(
            "the data ends at offset {end} but the stream's next offset is {}",
            stream.tail.next_offset
        )),
        _ => Ok(()),
    }
}

async fn deep_check(
    store: &Arc<dyn ObjectStore>,
    layout: &ShardLayout,
    streams: &HashMap<[u8; 16], DurableStream>,
    counts: &mut VerifyCounts,
    findings: &mut Vec<Finding>,
    progress: &(dyn Fn(Progress) + Send + Sync),
) -> Result<(), EngineError> {
    let chunks: Vec<SealedChunk> = streams
        .values()
        .flat_map(|s| s.sealed.iter().cloned())
        .collect();
    let total = chunks.len() as u64;
    let mut done = 0;
    let mut reads = futures::stream::iter(chunks)
        .map(|sealed| async move {
            let path = layout.segment(sealed.segment);
            let r = &sealed.chunk;
            let got = store
                .get_range(&path, r.position..r.position + r.length)
                .await;
            (sealed, path, got)
        })
        .buffer_unordered(FETCHES_PARALLEL);
    while let Some((sealed, path, got)) = reads.next().await {
        done += 1;
        counts.chunks_read += 1;
        progress(Progress {
            step: "chunks",
            done,
            total,
        });
        let object = format!("{path} (chunk at {})", sealed.chunk.position);
        let bytes = match got {
            Ok(b) => b,
            Err(object_store::Error::NotFound { .. }) => {
                findings.push(Finding {
                    kind: FindingKind::SegmentMissing,
                    object,
                    detail: "a stream's chunk is in a segment that is missing".into(),
                    records: vec![chunk_records(&sealed)],
                });
                continue;
            }
            Err(e) => return Err(EngineError::store(&e)),
        };
        // The same validation a read applies.
        if let Err(detail) = check_chunk(&sealed, decode_chunk(&bytes)) {
            findings.push(Finding {
                kind: FindingKind::ChunkCorrupt,
                object,
                detail,
                records: vec![chunk_records(&sealed)],
            });
        }
    }
    Ok(())
}

fn chunk_records(sealed: &SealedChunk) -> RecordRange {
    RecordRange {
        stream_id: hex(&sealed.chunk.stream_id),
        incarnation: sealed.chunk.incarnation,
        from: sealed.chunk.first_offset,
        to: sealed.chunk.end_offset,
    }
}

/// The records appended by the WAL objects after a gap, per stream
/// incarnation (merged into one range each): an opener never reaches them.
async fn stranded_records(
    store: &Arc<dyn ObjectStore>,
    layout: &ShardLayout,
    slots: &[u64],
) -> Result<Vec<RecordRange>, EngineError> {
    let mut ranges: BTreeMap<([u8; 16], u64), (u64, u64)> = BTreeMap::new();
    for slot in slots {
        let Some(bytes) = get_whole(store, &layout.wal(*slot)).await? else {
            continue;
        };
        let Ok(object) = strata_wal::decode(&bytes) else {
            continue;
        };
        for entry in &object.entries {
            if let strata_wal::WalEntry::Append(a) = entry {
                let end = a.first_offset + a.record_count;
                let range = ranges
                    .entry((a.stream.id, a.stream.incarnation))
                    .or_insert((a.first_offset, end));
                range.0 = range.0.min(a.first_offset);
                range.1 = range.1.max(end);
            }
        }
    }
    Ok(ranges
        .into_iter()
        .filter(|(_, (from, to))| from < to)
        .map(|((id, incarnation), (from, to))| RecordRange {
            stream_id: hex(&id),
            incarnation,
            from,
            to,
        })
        .collect())
}

/// What a segment's trailer and table say.
pub(crate) enum SegmentTable {
    Missing,
    Corrupt(String),
    Table(Vec<ChunkRef>),
}

/// Reads a segment's trailer and table (two ranged GETs, after a HEAD unless
/// the caller knows the object's size from a listing).
pub(crate) async fn segment_table(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
    known_size: Option<u64>,
) -> Result<SegmentTable, EngineError> {
    let size = match known_size {
        Some(size) => size,
        None => match store.head(path).await {
            Ok(m) => m.size,
            Err(object_store::Error::NotFound { .. }) => return Ok(SegmentTable::Missing),
            Err(e) => return Err(EngineError::store(&e)),
        },
    };
    if size < TRAILER_BYTES as u64 {
        return Ok(SegmentTable::Corrupt(format!(
            "{} bytes: shorter than a trailer",
            size
        )));
    }
    let trailer_bytes = store
        .get_range(path, size - TRAILER_BYTES as u64..size)
        .await
        .map_err(|e| EngineError::store(&e))?;
    let trailer = match decode_trailer(&trailer_bytes) {
        Ok(t) => t,
        Err(e) => return Ok(SegmentTable::Corrupt(e.to_string())),
    };
    let table_end = trailer.table_position.saturating_add(trailer.table_length);
    if table_end > size - TRAILER_BYTES as u64 {
        return Ok(SegmentTable::Corrupt(format!(
            "the trailer places the table at {}..{table_end}, past the object's {} bytes",
            trailer.table_position, size
        )));
    }
    let table_bytes = store
        .get_range(path, trailer.table_position..table_end)
        .await
        .map_err(|e| EngineError::store(&e))?;
    Ok(match decode_table(&table_bytes) {
        Ok(refs) => SegmentTable::Table(refs),
        Err(e) => SegmentTable::Corrupt(e.to_string()),
    })
}

async fn get_whole(
    store: &Arc<dyn ObjectStore>,
    path: &Path,
) -> Result<Option<Bytes>, EngineError> {
    match store.get(path).await {
        Ok(r) => r
            .bytes()
            .await
            .map(Some)
            .map_err(|e| EngineError::store(&e)),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(EngineError::store(&e)),
    }
}
