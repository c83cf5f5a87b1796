//! The start-up pass over the registry: expiries of streams created before
//! this process are queued, and each project's catalog is reconciled with its
//! live descriptors (a listing waits for it, bounded).

use std::collections::HashMap;

use super::error::ServiceError;
use super::limits::STARTUP_SCAN_WAIT_MAX;
use super::model::StartupScan;
use super::registry::Descriptor;
use super::routing::ShardIndex;
use super::streams::Streams;

impl Streams {
    /// The start-up pass over the registry (a background task, once): queues
    /// the expiry of every stream that has one (streams created before this
    /// process), and reconciles each project's catalog with its descriptors.
    pub async fn startup_scan(&self) -> Result<StartupScan, ServiceError> {
        let result = self.scan_registry().await;
        self.startup_scanned.send_replace(true);
        result
    }

    /// Queues the expiry of every stream of the shards `claimed` that has
    /// one: a fleet member calls it after a beat's claims (streams created
    /// on other members since its start are unknown to its reaper). One
    /// listing of the registry for all of them, however many shards the
    /// beat claimed (a survivor inheriting a dead member's shards must not
    /// list and read every descriptor once per shard while its claims and
    /// their first appends wait on the same store); answers how many were
    /// queued.
    pub async fn schedule_shard_expiries(
        &self,
        claimed: &[ShardIndex],
    ) -> Result<usize, ServiceError> {
        if claimed.is_empty() {
            return Ok(0);
        }
        let scan = self.registry.scan().await?;
        let mut queued = 0;
        for desc in &scan.live {
            let Some(id) = desc.stream_id_bytes() else {
                continue;
            };
            if claimed.contains(&self.shards.index_of(&id)) && desc.expiry_deadline_ms(0).is_some()
            {
                self.schedule_expiry(&desc.project, desc, self.durable_access_ms(desc));
                queued += 1;
            }
        }
        Ok(queued)
    }

    /// Marks the start-up scan as pending (before the server accepts
    /// requests), so that no listing answers from a catalog it may repair.
    pub fn begin_startup_scan(&self) {
        self.startup_scanned.send_replace(false);
    }

    pub(super) async fn scan_registry(&self) -> Result<StartupScan, ServiceError> {
        let scan = self.registry.scan().await?;
        let mut report = StartupScan::default();
        for desc in &scan.live {
            if desc.expiry_deadline_ms(0).is_some() {
                self.schedule_expiry(&desc.project, desc, self.durable_access_ms(desc));
                report.expiring += 1;
            }
        }
        let mut projects = scan.catalog_projects.clone();
        projects.extend(scan.live.iter().map(|d| d.project.clone()));
        for project in &projects {
            let live: Vec<&Descriptor> =
                scan.live.iter().filter(|d| &d.project == project).collect();
            let (added, removed) = self.reconcile_catalog(project, &live).await?;
            report.catalog_added += added;
            report.catalog_removed += removed;
        }
        Ok(report)
    }

    /// Makes `project`'s catalog list exactly its live streams: entries lost
    /// between a descriptor write and its catalog write are added, entries of
    /// retired streams removed. Each fix re-reads the name's descriptor under
    /// its lock, so a create or delete running meanwhile is never undone.
    pub(super) async fn reconcile_catalog(
        &self,
        project: &str,
        live: &[&Descriptor],
    ) -> Result<(usize, usize), ServiceError> {
        let listed = self
            .catalog
            .all(project)
            .await
            .map_err(|e| ServiceError::Unavailable(format!("reading the catalog: {e}")))?;
        let live_by_name: HashMap<&str, u64> = live
            .iter()
            .map(|d| (d.name.as_str(), d.incarnation))
            .collect();
        let listed_by_name: HashMap<&str, u64> = listed
            .iter()
            .map(|e| (e.name.as_str(), e.incarnation))
            .collect();
        let mut suspects: Vec<&str> = live_by_name
            .iter()
            .filter(|(name, inc)| listed_by_name.get(*name) != Some(*inc))
            .map(|(name, _)| *name)
            .collect();
        suspects.extend(
            listed_by_name
                .keys()
                .filter(|name| !live_by_name.contains_key(*name)),
        );
        let (mut added, mut removed) = (0, 0);
        for name in suspects {
            let entry = self.registry.entry(project, name);
            let _guard = entry.changes.lock().await;
            match entry.load().await? {
                Some(current) if current.value.is_live() => {
                    self.list_in_catalog(&current.value).await?;
                    added += 1;
                }
                _ => {
                    if let Some(incarnation) = listed_by_name.get(name) {
                        self.catalog
                            .remove(project, name, *incarnation)
                            .await
                            .map_err(|e| {
                                ServiceError::Unavailable(format!("updating the catalog: {e}"))
                            })?;
                        removed += 1;
                    }
                }
            }
        }
        Ok((added, removed))
    }

    /// Waits until the start-up scan ended, at most `STARTUP_SCAN_WAIT_MAX`:
    /// a listing waits for it, so that a restarted server does not list what
    /// the scan is about to repair. After a start, the catalog is trusted
    /// once the scan repaired it; a scan slower than this bound is answered
    /// from the catalog as it is.
    pub async fn startup_scanned(&self) {
        let mut scanned = self.startup_scanned.subscribe();
        let _ = tokio::time::timeout(STARTUP_SCAN_WAIT_MAX, scanned.wait_for(|done| *done)).await;
    }
}
