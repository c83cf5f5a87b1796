//! Verifying a shard ([`verify`]), read-only; every problem found is a
//! [`Finding`] naming its object, never a panic.
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
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::Serialize;
use strata_segments::segment::{decode_chunk, ChunkRef};

use crate::admin::objects::{
    get_whole, list_wal_slots, load_manifest, segment_table, SegmentTable,
};
use crate::env::EngineEnv;
use crate::error::EngineError;
use crate::ids::ShardName;
use crate::layout::{ObjectId, ShardLayout};
use crate::shard::sealed::{apply_run, decode_sealed, SealedChunk};
use crate::shard::tiers::check as check_chunk;
use crate::shard::{
    inspect_log_at, inspect_log_from, DurableStream, ShardConfig, StreamStatus, StreamTable,
};
use hex::encode as hex;

/// Objects fetched at once by a verification.
const FETCHES_PARALLEL: usize = 16;

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
            stream_id: hex(id),
            incarnation,
            from,
            to,
        })
        .collect())
}
