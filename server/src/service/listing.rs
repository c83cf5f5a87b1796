//! Listing: the catalog entries a stream's create and retirement write, and
//! the pages of a project's live streams read from catalog buckets.

use super::catalog::{CatalogCursor, CatalogEntry, CatalogPage};
use super::error::ServiceError;
use super::registry::Descriptor;
use super::streams::Streams;

impl Streams {
    pub(super) async fn list_in_catalog(&self, desc: &Descriptor) -> Result<(), ServiceError> {
        let entry = CatalogEntry {
            name: desc.name.clone(),
            content_type: desc.content_type.clone(),
            created_ms: desc.created_ms,
            incarnation: desc.incarnation,
        };
        self.catalog
            .add(&desc.project, entry)
            .await
            .map_err(|e| ServiceError::Unavailable(format!("updating the catalog: {e}")))
    }

    /// Best effort: a failure leaves an entry that the name's next create
    /// replaces (the stream itself is already retired).
    pub(super) async fn unlist_from_catalog(&self, desc: &Descriptor) {
        if let Err(e) = self
            .catalog
            .remove(&desc.project, &desc.name, desc.incarnation)
            .await
        {
            tracing::warn!(name = %desc.name, error = %e, "removing a catalog entry failed");
        }
    }

    /// A page of the project's live streams (bucket GETs, never one
    /// descriptor per stream). Listings wait for [`Streams::startup_scanned`]
    /// first.
    pub async fn catalog_page(
        &self,
        project: &str,
        from: Option<&CatalogCursor>,
        limit: usize,
    ) -> Result<CatalogPage, ServiceError> {
        self.catalog
            .page(project, from, limit)
            .await
            .map_err(|e| ServiceError::Unavailable(format!("reading the catalog: {e}")))
    }

    /// Refuses a new collection of `project` when it has as many as its
    /// limit allows (counted from its catalog: one GET per bucket, only when
    /// a limit is set). Creates on several servers at once may each see
    /// the count before the others' entries: the limit can be passed by at
    /// most the number of creates in flight.
    pub(super) async fn admit_collection(&self, project: &str) -> Result<(), ServiceError> {
        if self.admission.limits_of(project).collections.is_none() {
            return Ok(());
        }
        let existing = self
            .catalog
            .all(project)
            .await
            .map_err(|e| ServiceError::Unavailable(format!("reading the catalog: {e}")))?;
        self.admission
            .admit_collection(project, existing.len() as u64)
            .map_err(ServiceError::Limited)
    }

    /// Names of the live streams of a project.
    pub async fn live_names(&self, project: &str) -> Result<Vec<String>, ServiceError> {
        Ok(self.registry.names(project).await?)
    }
}
