//! Creating streams: a new incarnation's descriptor (CAS on the registry),
//! its engine stream and first records, its catalog entry; a create that
//! meets a live stream confirms the same configuration or conflicts.

use std::sync::Arc;

use bytes::Bytes;
use strata_engine::{AppendRequest, StreamRef};
use strata_manifest::Versioned;
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};

use super::error::ServiceError;
use super::media::{is_json, media_type};
use super::model::{CreateMode, CreateOutcome, CreateSpec, Expiry, StreamsConfig};
use super::registry::{Descriptor, StreamState, DESCRIPTOR_FORMAT};
use super::routing::stream_ref;
use super::streams::Streams;
use crate::ds::json;
use crate::service::product::watch_cap::WaitSigKey;
use hex::encode as hex;

impl Streams {
    pub async fn create(
        &self,
        project: &str,
        name: &str,
        spec: CreateSpec,
        key: &StreamKey,
    ) -> Result<CreateOutcome, ServiceError> {
        let entry = self.registry.entry(project, name);
        let _guard = entry.changes.lock().await;
        let mut current = entry.load().await?;
        let now = self.now_ms();
        if let Some(existing) = current.clone() {
            match existing.value.state {
                StreamState::SoftDeleted => return Err(ServiceError::RetainedForForks),
                StreamState::Live
                    if existing
                        .value
                        .expired_at(now, self.idle_since_ms(&entry, &existing.value)) =>
                {
                    self.retire(project, &entry, &existing).await?;
                    current = entry.load().await?;
                }
                StreamState::Live => return self.confirm(project, &existing, &spec, key).await,
                StreamState::Deleted => {}
            }
        }
        if current
            .as_ref()
            .is_some_and(|c| c.value.state != StreamState::Deleted)
        {
            // Retired into a soft-deleted stream (forks still read it).
            return Err(ServiceError::RetainedForForks);
        }
        let incarnation = current.as_ref().map_or(1, |c| c.value.incarnation + 1);
        self.admit_collection(project).await?;

        // Resolve a fork before anything is written.
        let fork = match &spec.fork {
            Some(fork) => Some(self.resolve_fork(project, fork, &spec, key).await?),
            None => None,
        };
        let content_type = match (&spec.content_type, &fork) {
            (Some(ct), _) => ct.clone(),
            (None, Some(f)) => f.source.value.content_type.clone(),
            (None, None) => self.config.default_content_type.clone(),
        };
        let records = self.records_of(&content_type, &spec.body, true)?;
        let expiry = match (&fork, spec.expiry.ttl_seconds, &spec.expiry.expires_at) {
            (Some(f), None, None) => Expiry {
                ttl_seconds: f.source.value.ttl_seconds,
                expires_at: f
                    .source
                    .value
                    .expires_at
                    .clone()
                    .zip(f.source.value.expires_at_ms),
            },
            _ => spec.expiry.clone(),
        };
        let id = strata_engine::stream_id(project, name);
        let epoch = StreamEpoch(self.entropy.bytes16());
        let cipher = Arc::new(StreamCipher::new(epoch, key.clone()));
        let desc = Descriptor {
            format: DESCRIPTOR_FORMAT,
            project: project.to_string(),
            name: name.to_string(),
            stream_id: hex(id),
            incarnation,
            epoch: hex(epoch.0),
            key_fingerprint: hex(cipher.fingerprint()),
            content_type: content_type.clone(),
            created_ms: now,
            ttl_seconds: expiry.ttl_seconds,
            expires_at: expiry.expires_at.as_ref().map(|(text, _)| text.clone()),
            expires_at_ms: expiry.expires_at.as_ref().map(|(_, ms)| *ms),
            created_closed: spec.closed,
            fork: fork.as_ref().map(|f| f.origin.clone()),
            fork_refs: 0,
            watches: spec.watches.clone(),
            watch_sig_key: (!spec.watches.is_empty())
                .then(|| WaitSigKey::derive(&epoch.0, key.expose()).hex()),
            state: StreamState::Live,
            write_token: hex(self.entropy.bytes16()),
        };
        if let Some(f) = &fork {
            self.adjust_fork_refs(project, &f.origin.source, f.origin.source_incarnation, 1)
                .await?;
        }
        let written = match entry.store(current.as_deref(), desc).await {
            Ok(w) => w,
            Err(e) => {
                if let Some(f) = &fork {
                    let _ = self
                        .release_source(project, &f.origin.source, f.origin.source_incarnation)
                        .await;
                }
                return Err(e.into());
            }
        };
        let stream = StreamRef { id, incarnation };
        let shard = self.shards.shard_for(&id)?;
        shard
            .create_stream_for(stream, &cipher, Self::account_of(project))
            .await?;
        let mut own = Vec::new();
        if let Some(prefix) = fork.as_ref().and_then(|f| f.prefix.clone()) {
            own.push(prefix);
        }
        own.extend(records);
        if !own.is_empty() || spec.closed {
            let mut request = AppendRequest::new(stream, cipher, own);
            request.close = spec.closed;
            shard.append(request).await?;
        }
        entry.touch(now);
        self.schedule_expiry(project, &written.value, now);
        self.list_in_catalog(&written.value).await?;
        let base = written.value.fork.as_ref().map_or(0, |f| f.base);
        let info = shard.stream_info(&stream).ok_or(ServiceError::NotFound)?;
        if info.tail.next_offset > 0 {
            self.notify_appended(project, name);
        }
        Ok(CreateOutcome {
            created: true,
            content_type,
            tail: base + info.tail.next_offset,
            closed: spec.closed,
        })
    }

    /// An existing live stream met by a create: the same configuration is
    /// confirmed (200), another one conflicts (409).
    pub(super) async fn confirm(
        &self,
        project: &str,
        existing: &Arc<Versioned<Descriptor>>,
        spec: &CreateSpec,
        key: &StreamKey,
    ) -> Result<CreateOutcome, ServiceError> {
        let d = &existing.value;
        let same = match spec.mode {
            CreateMode::Raw => Self::same_protocol_config(d, spec, &self.config),
            CreateMode::Product => Self::same_product_config(d, spec),
        };
        if !same {
            return Err(ServiceError::Conflict(
                "a stream with another configuration exists at this name".into(),
            ));
        }
        // A retry also repairs a catalog entry lost between the two writes.
        self.list_in_catalog(d).await?;
        self.repair_engine_stream(d, spec, key).await?;
        let levels = self.chain(project, existing.clone(), key, false).await?;
        let (tail, closed) = self.tail_of(project, &levels[0], key).await?;
        Ok(CreateOutcome {
            created: false,
            content_type: d.content_type.clone(),
            tail,
            closed,
        })
    }

    /// A create whose descriptor landed but whose engine stream did not (the
    /// server stopped, or lost the shard to another fleet member, between the
    /// two writes) is finished by its retry: the incarnation is created in
    /// the engine (idempotent for the same key), with the create's own
    /// records and close. Forks are left as they are.
    async fn repair_engine_stream(
        &self,
        d: &Descriptor,
        spec: &CreateSpec,
        key: &StreamKey,
    ) -> Result<(), ServiceError> {
        let stream = stream_ref(d)?;
        let shard = self.shards.shard_for(&stream.id)?;
        if d.fork.is_some() || shard.stream_info(&stream).is_some() {
            return Ok(());
        }
        tracing::warn!(name = %d.name, "a create met its descriptor without its records' stream; finishing the create");
        let cipher = self.ciphers.cipher_for(d, key)?;
        shard
            .create_stream_for(stream, &cipher, Self::account_of(&d.project))
            .await?;
        let records = self.records_of(&d.content_type, &spec.body, true)?;
        if !records.is_empty() || spec.closed {
            let mut request = AppendRequest::new(stream, cipher, records);
            request.close = spec.closed;
            shard.append(request).await?;
        }
        Ok(())
    }

    /// A raw create against an existing stream compares only protocol fields.
    pub(super) fn same_protocol_config(
        d: &Descriptor,
        spec: &CreateSpec,
        config: &StreamsConfig,
    ) -> bool {
        let content_type_same = match &spec.content_type {
            Some(ct) => media_type(ct) == media_type(&d.content_type),
            None => {
                spec.fork.is_some()
                    || media_type(&d.content_type) == media_type(&config.default_content_type)
            }
        };
        let fork_same = match (&spec.fork, &d.fork) {
            (None, None) => true,
            (Some(want), Some(have)) => {
                want.source == have.source
                    && want.sub_offset == have.sub_offset
                    && (want.offset.is_none() || want.offset == have.requested_offset)
            }
            _ => false,
        };
        let expiry_same = if spec.fork.is_some()
            && spec.expiry.ttl_seconds.is_none()
            && spec.expiry.expires_at.is_none()
        {
            true
        } else {
            spec.expiry.ttl_seconds == d.ttl_seconds
                && spec.expiry.expires_at.as_ref().map(|(t, _)| t) == d.expires_at.as_ref()
        };
        content_type_same && fork_same && expiry_same && spec.closed == d.created_closed
    }

    /// A product create compares the normalized configuration: media type,
    /// idle seconds or expiry instant, open state, and watches.
    pub(super) fn same_product_config(d: &Descriptor, spec: &CreateSpec) -> bool {
        let media_same = spec
            .content_type
            .as_deref()
            .is_some_and(|ct| media_type(ct) == media_type(&d.content_type));
        media_same
            && spec.expiry.ttl_seconds == d.ttl_seconds
            && spec.expiry.expires_at.as_ref().map(|(_, ms)| *ms) == d.expires_at_ms
            && spec.closed == d.created_closed
            && spec.watches == d.watches
    }

    pub(super) fn records_of(
        &self,
        content_type: &str,
        body: &Bytes,
        allow_empty_array: bool,
    ) -> Result<Vec<Bytes>, ServiceError> {
        let records = if body.is_empty() {
            Vec::new()
        } else if is_json(content_type) {
            let records = json::records_from_body(body)
                .map_err(|e| ServiceError::BadRequest(e.to_string()))?;
            if records.is_empty() && !allow_empty_array {
                return Err(ServiceError::BadRequest(
                    "an empty JSON array appends nothing".into(),
                ));
            }
            records
        } else {
            vec![body.clone()]
        };
        self.check_record_sizes(&records)?;
        Ok(records)
    }

    /// Refuses a record over `max_record_bytes`.
    pub fn check_record_sizes(&self, records: &[Bytes]) -> Result<(), ServiceError> {
        if records
            .iter()
            .any(|r| r.len() > self.config.max_record_bytes)
        {
            return Err(ServiceError::TooLarge {
                what: "a record",
                limit: self.config.max_record_bytes as u64,
            });
        }
        Ok(())
    }
}
