//! A store layer that audits every deletion and overwrite against the shard's
//! manifest as it stands at that moment: a WAL object at or above the replay
//! point or inside a fence window, or an index run or segment the manifest
//! lists, must never be deleted; only WAL objects below the replay point and
//! inside a fence window may be overwritten (with tombstones); and no segment
//! may be deleted while a read of the newest owner pins it. Violations are
//! recorded for the simulation to report.

use std::sync::Arc;

use async_trait::async_trait;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, PutResult, Result};
use parking_lot::Mutex;
use strata_manifest::{Manifest, ManifestCodec};

use crate::layout::{ImmutableKind, ShardLayout};
use crate::shard::Shard;
use crate::store::{StoreLayer, StoreOp};

pub struct DeleteAudit {
    /// The store without faults, to read the manifest from.
    clean: Arc<dyn ObjectStore>,
    layout: ShardLayout,
    violations: Mutex<Vec<String>>,
    deletes: Mutex<u64>,
    /// The newest owner, whose read pins a deletion must respect.
    newest: Mutex<Option<Shard>>,
}

impl std::fmt::Debug for DeleteAudit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeleteAudit({})", self.layout.shard())
    }
}

impl DeleteAudit {
    pub fn new(clean: Arc<dyn ObjectStore>, layout: ShardLayout) -> Self {
        DeleteAudit {
            clean,
            layout,
            violations: Mutex::new(Vec::new()),
            deletes: Mutex::new(0),
            newest: Mutex::new(None),
        }
    }

    /// The owner whose read pins deletions are checked against from now on.
    pub fn watch_owner(&self, owner: Option<Shard>) {
        *self.newest.lock() = owner;
    }

    pub fn take_violations(&self) -> Vec<String> {
        std::mem::take(&mut self.violations.lock())
    }

    pub fn deletes(&self) -> u64 {
        *self.deletes.lock()
    }

    async fn manifest(&self, location: &Path) -> std::result::Result<Manifest, String> {
        let cas = strata_manifest::CasObject::<ManifestCodec>::new(
            self.clean.clone(),
            self.layout.manifest(),
            strata_manifest::RetryPolicy::default(),
        );
        let problem = match cas.load().await {
            Ok(Some(m)) => return Ok(m.value),
            Ok(None) => format!("{location} removed while no manifest exists"),
            Err(e) => format!("{location} removed; manifest unreadable: {e}"),
        };
        // The manifest was damaged (by the simulation, to exercise repairs)
        // or is being repaired: the newest retained version stands in.
        self.newest_retained().await.ok_or(problem)
    }

    /// The newest retained manifest version that decodes.
    async fn newest_retained(&self) -> Option<Manifest> {
        use futures::StreamExt;
        let mut versions: Vec<u64> = self
            .clean
            .list(Some(&self.layout.manifest_history_prefix()))
            .filter_map(|m| async move { m.ok() })
            .filter_map(|m| async move { self.layout.parse_manifest_history(&m.location) })
            .collect()
            .await;
        versions.sort_unstable_by(|a, b| b.cmp(a));
        for version in versions {
            if let Ok(Some(m)) =
                crate::shard::history::load(&self.clean, &self.layout, version).await
            {
                return Some(m);
            }
        }
        None
    }

    async fn check_overwrite(&self, location: &Path) -> std::result::Result<(), String> {
        let Some(slot) = self.layout.parse_wal_slot(location) else {
            return Ok(());
        };
        let manifest = self.manifest(location).await?;
        if slot >= manifest.replay.slot || !manifest.fence_windows.iter().any(|w| w.contains(slot))
        {
            return Err(format!(
                "WAL slot {slot} overwritten but it is not below the replay point {} inside a fence window {:?}",
                manifest.replay.slot, manifest.fence_windows
            ));
        }
        Ok(())
    }

    async fn check_delete(&self, location: &Path) -> std::result::Result<(), String> {
        let manifest = self.manifest(location).await?;
        if let Some(slot) = self.layout.parse_wal_slot(location) {
            if slot >= manifest.replay.slot {
                return Err(format!(
                    "WAL slot {slot} deleted at or above the replay point {}",
                    manifest.replay.slot
                ));
            }
            if manifest.fence_windows.iter().any(|w| w.contains(slot)) {
                return Err(format!("WAL slot {slot} in a fence window deleted"));
            }
        } else if let Some(id) = self
            .layout
            .parse_object_id(location, ImmutableKind::IndexRun)
        {
            if manifest.index_runs.iter().any(|r| r.id == id.0) {
                return Err(format!(
                    "index run {id:?} deleted while the manifest lists it"
                ));
            }
        } else if let Some(id) = self
            .layout
            .parse_object_id(location, ImmutableKind::Segment)
        {
            if manifest.segments.iter().any(|s| s.id == id.0) {
                return Err(format!(
                    "segment {id:?} deleted while the manifest lists it"
                ));
            }
            let pinned = self
                .newest
                .lock()
                .as_ref()
                .is_some_and(|owner| owner.pins_segment(id));
            if pinned {
                return Err(format!(
                    "segment {id:?} deleted while a read of the newest owner pins it"
                ));
            }
        }
        Ok(())
    }
}

#[async_trait]
impl StoreLayer for DeleteAudit {
    async fn before(&self, op: StoreOp, location: Option<&Path>) -> Result<()> {
        if let (StoreOp::Delete, Some(location)) = (op, location) {
            *self.deletes.lock() += 1;
            if let Err(violation) = self.check_delete(location).await {
                self.violations.lock().push(violation);
            }
        }
        Ok(())
    }

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        if matches!(opts.mode, PutMode::Overwrite) {
            if let Err(violation) = self.check_overwrite(location).await {
                self.violations.lock().push(violation);
            }
        }
        inner.put_opts(location, payload, opts).await
    }
}
