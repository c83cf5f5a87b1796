//! A store layer that audits every deletion and overwrite against the shard's
//! manifest as it stands at that moment: a WAL object at or above the replay
//! point or inside a fence window, or an index run or segment the manifest
//! lists, must never be deleted; only WAL objects below the replay point and
//! inside a fence window may be overwritten (with tombstones). Violations are
//! recorded for the simulation to report.

use std::sync::Arc;

use async_trait::async_trait;
use object_store::path::Path;
use object_store::{ObjectStore, PutMode, PutOptions, PutPayload, PutResult, Result};
use parking_lot::Mutex;
use strata_manifest::{Manifest, ManifestCodec};

use crate::layout::{ImmutableKind, ShardLayout};
use crate::store::{StoreLayer, StoreOp};

#[derive(Debug)]
pub struct DeleteAudit {
    /// The store without faults, to read the manifest from.
    clean: Arc<dyn ObjectStore>,
    layout: ShardLayout,
    violations: Mutex<Vec<String>>,
    deletes: Mutex<u64>,
}

impl DeleteAudit {
    pub fn new(clean: Arc<dyn ObjectStore>, layout: ShardLayout) -> Self {
        DeleteAudit {
            clean,
            layout,
            violations: Mutex::new(Vec::new()),
            deletes: Mutex::new(0),
        }
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
        match cas.load().await {
            Ok(Some(m)) => Ok(m.value),
            Ok(None) => Err(format!("{location} removed while no manifest exists")),
            Err(e) => Err(format!("{location} removed; manifest unreadable: {e}")),
        }
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
