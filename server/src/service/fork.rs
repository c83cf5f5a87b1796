//! Forks: resolving a fork request against its source (offset, sub-offset,
//! content type) and the sources' reference counts, which keep a deleted
//! source readable (soft-deleted) until its last fork goes.

use std::sync::Arc;

use bytes::Bytes;
use strata_manifest::Versioned;
use strata_segments::StreamKey;

use super::error::ServiceError;
use super::limits::FORK_DEPTH_MAX;
use super::media::{is_json, media_type};
use super::model::{CreateSpec, ForkSpec, KeyView};
use super::registry::{Descriptor, ForkOrigin, StreamState};
use super::streams::Streams;
use hex::encode as hex;

pub(super) struct ResolvedFork {
    pub(super) origin: ForkOrigin,
    pub(super) source: Arc<Versioned<Descriptor>>,
    /// A binary sub-offset's slice, the fork's first own record.
    pub(super) prefix: Option<Bytes>,
}

impl Streams {
    pub(super) async fn resolve_fork(
        &self,
        project: &str,
        fork: &ForkSpec,
        spec: &CreateSpec,
        key: &StreamKey,
    ) -> Result<ResolvedFork, ServiceError> {
        let source = match self.live(project, &fork.source).await {
            Ok((_, desc)) => desc,
            Err(ServiceError::Gone) => {
                return Err(ServiceError::Conflict(
                    "the fork source was deleted and is kept only for its forks".into(),
                ))
            }
            Err(e) => return Err(e),
        };
        if let Some(ct) = &spec.content_type {
            if media_type(ct) != media_type(&source.value.content_type) {
                return Err(ServiceError::Conflict(
                    "a fork's content type must be its source's".into(),
                ));
            }
        }
        let levels = self.chain(project, source.clone(), key, true).await?;
        let (tail, _) = self.tail_of(project, &levels[0], key).await?;
        let offset = fork.offset.unwrap_or(tail);
        if offset > tail {
            return Err(ServiceError::BadRequest(
                "Stream-Fork-Offset is beyond the source's tail".into(),
            ));
        }
        let mut base = offset;
        let mut prefix = None;
        if fork.sub_offset > 0 {
            let n = fork.sub_offset;
            let everything = KeyView {
                routing_key: b"",
                max_bytes: usize::MAX,
                max_records: usize::MAX,
            };
            let (records, starts, _) = self
                .read_chain(project, &levels, offset, tail, everything, key)
                .await?;
            let first_batch = records
                .iter()
                .zip(&starts)
                .enumerate()
                .take_while(|(i, (_, start))| *i == 0 || !**start)
                .count() as u64;
            if first_batch == 0 {
                return Err(ServiceError::BadRequest(
                    "Stream-Fork-Sub-Offset needs a record after the fork offset".into(),
                ));
            }
            if is_json(&source.value.content_type) {
                if n > first_batch {
                    return Err(ServiceError::BadRequest(
                        "Stream-Fork-Sub-Offset is past the end of the append".into(),
                    ));
                }
                base = offset + n;
            } else {
                let record = &records[0].payload;
                if n > record.len() as u64 {
                    return Err(ServiceError::BadRequest(
                        "Stream-Fork-Sub-Offset is past the end of the record".into(),
                    ));
                }
                prefix = Some(record.slice(..n as usize));
            }
        }
        Ok(ResolvedFork {
            origin: ForkOrigin {
                source: fork.source.clone(),
                source_incarnation: source.value.incarnation,
                base,
                requested_offset: fork.offset,
                sub_offset: fork.sub_offset,
            },
            source,
            prefix,
        })
    }

    /// Adds `delta` to a source's fork count.
    pub(super) async fn adjust_fork_refs(
        &self,
        project: &str,
        source: &str,
        incarnation: u64,
        delta: i64,
    ) -> Result<Option<Arc<Versioned<Descriptor>>>, ServiceError> {
        let entry = self.registry.entry(project, source);
        let _guard = entry.changes.lock().await;
        let Some(current) = entry.load().await? else {
            return Ok(None);
        };
        if current.value.incarnation != incarnation || current.value.state == StreamState::Deleted {
            return Ok(None);
        }
        let mut next = current.value.clone();
        next.fork_refs = next.fork_refs.saturating_add_signed(delta);
        next.write_token = hex(self.entropy.bytes16());
        Ok(Some(entry.store(Some(&current), next).await?))
    }

    /// A fork went away: the source loses a reference, and if it was soft
    /// deleted and that was the last one, it is deleted too (and so on up).
    pub(super) async fn release_source(
        &self,
        project: &str,
        source: &str,
        incarnation: u64,
    ) -> Result<(), ServiceError> {
        let mut next = Some((source.to_string(), incarnation));
        for _ in 0..FORK_DEPTH_MAX {
            let Some((name, incarnation)) = next.take() else {
                return Ok(());
            };
            let entry = self.registry.entry(project, &name);
            let _guard = entry.changes.lock().await;
            let Some(current) = entry.load().await? else {
                return Ok(());
            };
            if current.value.incarnation != incarnation
                || current.value.state == StreamState::Deleted
            {
                return Ok(());
            }
            let mut updated = current.value.clone();
            updated.fork_refs = updated.fork_refs.saturating_sub(1);
            updated.write_token = hex(self.entropy.bytes16());
            if updated.fork_refs == 0 && updated.state == StreamState::SoftDeleted {
                updated.state = StreamState::Deleted;
                entry.store(Some(&current), updated.clone()).await?;
                self.drop_engine_stream(&updated).await;
                self.notify_deleted(project, &name);
                next = updated
                    .fork
                    .as_ref()
                    .map(|f| (f.source.clone(), f.source_incarnation));
            } else {
                entry.store(Some(&current), updated).await?;
            }
        }
        Ok(())
    }
}
