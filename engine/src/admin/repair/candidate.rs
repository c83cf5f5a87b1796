//! A manifest a repair may restore ([`Candidate`]): a retained version, or
//! one rebuilt from every index run, segment and WAL object in the store
//! (with the new full index run it needs written first).

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use strata_manifest::index_run::IndexRun;
use strata_manifest::{IndexRunRef, Manifest, ReplayPoint, SegmentRef, WriterIdentity};

use super::evidence::max_epoch_seen;
use super::loss::whole;
use super::report::{LostChange, RestoreSource};
use crate::env::EngineEnv;
use crate::error::EngineError;
use crate::layout::{ImmutableKind, ObjectId, ShardLayout};
use crate::shard::sealed::{apply_run, run_entry};
use crate::shard::{inspect_log_from, LogView, ShardConfig, StreamTable};

/// A manifest a repair may restore, what it recovers, and the index run it
/// needs written first (a rebuilt one).
pub(super) struct Candidate {
    pub(super) source: RestoreSource,
    pub(super) manifest: Manifest,
    pub(super) view: LogView,
    pub(super) lost_records: u64,
    pub(super) new_run: Option<NewRun>,
    /// What the candidate cannot vouch for (a rebuild that skipped runs
    /// that do not decode: the state only they held is gone).
    pub(super) unverified: Vec<LostChange>,
}

pub(super) struct NewRun {
    pub(super) path: Path,
    pub(super) bytes: Bytes,
}

/// Rebuilds the sealed state from every index run in the store (listed or
/// not), newest last, and the replay point from the newest: a manifest that
/// lists one new full run of that state. `Err` says why it cannot be used.
pub(super) async fn rebuilt_candidate(
    env: &EngineEnv,
    layout: &ShardLayout,
    damaged: &mut Vec<Path>,
) -> Result<Result<Candidate, String>, EngineError> {
    let store = &env.store;
    let metas: Vec<_> = store
        .list(Some(&layout.immutable_prefix(ImmutableKind::IndexRun)))
        .try_collect()
        .await
        .map_err(|e| EngineError::store(&e))?;
    let mut runs: Vec<(ObjectId, Path)> = metas
        .into_iter()
        .filter_map(|m| {
            layout
                .parse_object_id(&m.location, ImmutableKind::IndexRun)
                .map(|id| (id, m.location))
        })
        .collect();
    runs.sort_by_key(|(id, _)| *id);
    let mut table = StreamTable::default();
    let mut newest: Option<(ObjectId, u64)> = None;
    let mut undecodable: Vec<Path> = Vec::new();
    for (id, path) in runs {
        let bytes = store
            .get(&path)
            .await
            .map_err(|e| EngineError::store(&e))?
            .bytes()
            .await
            .map_err(|e| EngineError::store(&e))?;
        let run = match strata_manifest::index_run::decode(&bytes) {
            Ok(run) => run,
            Err(_) => {
                undecodable.push(path.clone());
                if !damaged.contains(&path) {
                    damaged.push(path);
                }
                continue;
            }
        };
        if apply_run(&mut table, &run).is_ok() {
            newest = Some((id, run.chain_end));
        }
    }
    let Some((newest_id, chain_end)) = newest else {
        return Ok(Err("no index run in the store decodes".into()));
    };
    // The segments the state refers to, with their sizes.
    let seg_metas: Vec<_> = store
        .list(Some(&layout.immutable_prefix(ImmutableKind::Segment)))
        .try_collect()
        .await
        .map_err(|e| EngineError::store(&e))?;
    let sizes: BTreeMap<ObjectId, u64> = seg_metas
        .iter()
        .filter_map(|m| {
            layout
                .parse_object_id(&m.location, ImmutableKind::Segment)
                .map(|id| (id, m.size))
        })
        .collect();
    let referenced: BTreeSet<ObjectId> = table
        .streams
        .values()
        .flat_map(|s| s.sealed.iter().map(|c| c.segment))
        .collect();
    let mut segments = Vec::new();
    for id in referenced {
        match sizes.get(&id) {
            Some(bytes) => segments.push(SegmentRef {
                id: id.0,
                bytes: *bytes,
            }),
            None => return Ok(Err(format!("{} is missing", layout.segment(id)))),
        }
    }
    let epoch = max_epoch_seen(store, layout, None).await? + 1;
    let run_id = ObjectId::new(epoch, 1);
    let mut ids: Vec<&[u8; 16]> = table.streams.keys().collect();
    ids.sort();
    let run = IndexRun {
        id: run_id.0,
        chain_end,
        entries: ids
            .into_iter()
            .map(|id| {
                let s = &table.streams[id];
                run_entry(&s.tail, &s.sealed, s.consumers.encode())
            })
            .collect(),
    };
    let bytes = strata_manifest::index_run::encode(&run)
        .map_err(|e| EngineError::corrupt("rebuilt index run", e))?;
    let manifest = Manifest {
        version: 1,
        writer: WriterIdentity {
            instance: [0; 16],
            epoch,
            write_id: [0; 16],
        },
        shard: layout.shard().as_str().to_string(),
        replay: ReplayPoint {
            slot: chain_end.checked_add(1).unwrap_or(0),
            epoch_floor: newest_id.epoch(),
            chain_end,
        },
        next_object_id: 2,
        index_runs: vec![IndexRunRef {
            id: run_id.0,
            bytes: bytes.len() as u64,
        }],
        segments,
        fence_windows: Vec::new(),
    };
    let view = match inspect_log_from(
        env.clone(),
        layout.shard().clone(),
        ShardConfig::default(),
        manifest.clone(),
        table,
    )
    .await
    {
        Ok(view) => view,
        Err(e) => return Ok(Err(format!("the rebuilt state does not open: {e}"))),
    };
    if let Err(why) = whole(&view) {
        return Ok(Err(why));
    }
    let unverified = undecodable
        .iter()
        .map(|path| LostChange {
            stream_id: None,
            incarnation: 0,
            change: format!(
                "{path} does not decode: the rebuilt state lacks what only it held (streams, closes, deletes, producer states)"
            ),
        })
        .collect();
    Ok(Ok(Candidate {
        source: RestoreSource::Rebuilt,
        manifest,
        view,
        unverified,
        lost_records: 0,
        new_run: Some(NewRun {
            path: layout.index_run(run_id),
            bytes,
        }),
    }))
}
