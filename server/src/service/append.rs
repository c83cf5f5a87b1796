//! Appends and seals: the request path from a live descriptor to the
//! engine's acknowledgement, bounded by the request's `StoreDeadline`.

use std::sync::Arc;

use strata_engine::{AppendKind, AppendRequest, EngineError};
use strata_segments::StreamKey;

use super::deadline::StoreDeadline;
use super::error::ServiceError;
use super::media::media_type;
use super::model::{AppendOutcome, AppendResult, AppendSpec, TailState};
use super::observe::publish_keys;
use super::registry::{Descriptor, Entry};
use super::routing::stream_ref;
use super::streams::Streams;
use strata_manifest::Versioned;

/// What an append that outlived its request still does once acknowledged.
pub(super) struct Detached {
    pub(super) entry: Arc<Entry>,
    pub(super) desc: Arc<Versioned<Descriptor>>,
    pub(super) shard: strata_engine::Shard,
    pub(super) appended_records: bool,
    pub(super) watch_keys: Vec<super::product::watch_keys::WatchKey>,
}

/// A live stream resolved for appends: its descriptor, the caller's key
/// checked against it, and its tail when it was resolved. A product append
/// checks the tail and the content type before reading the body, then
/// appends to this same incarnation without looking it up again (if it was
/// deleted or re-created meanwhile, the engine answers not found).
pub struct AppendTarget {
    resolved: Resolved,
    /// The tail when resolved.
    pub tail: TailState,
    /// The incarnation's stream epoch (what product cursors are bound to).
    pub epoch: [u8; 16],
}

/// A live descriptor and the cipher of the caller's key for it.
struct Resolved {
    entry: Arc<Entry>,
    desc: Arc<Versioned<Descriptor>>,
    cipher: Arc<strata_segments::StreamCipher>,
}

impl AppendTarget {
    pub fn content_type(&self) -> &str {
        &self.descriptor().content_type
    }

    pub(super) fn descriptor(&self) -> &Descriptor {
        &self.resolved.desc.value
    }
}

impl Streams {
    /// Resolves a live stream for [`Streams::append_to`]: exists, the key is
    /// its key, and its tail (a stream the shard does not know is confirmed
    /// absent first, as for a HEAD).
    pub async fn append_target(
        &self,
        project: &str,
        name: &str,
        key: &StreamKey,
    ) -> Result<AppendTarget, ServiceError> {
        let (entry, desc) = self.live(project, name).await?;
        let cipher = self.ciphers.cipher_for(&desc.value, key)?;
        let epoch = desc
            .value
            .epoch_bytes()
            .ok_or_else(|| ServiceError::Internal("descriptor epoch".into()))?;
        let tail = self.confirmed_tail(&desc.value).await?;
        Ok(AppendTarget {
            resolved: Resolved {
                entry,
                desc,
                cipher,
            },
            tail,
            epoch,
        })
    }

    /// Appends, waiting at most until `deadline`: then the answer is
    /// `OutcomeUnknown` while the append goes on (queued in the engine; its
    /// acknowledgement is still followed by the access time and the
    /// observers' notice, in a task of its own). Only the descriptor lookup
    /// and the engine's answer can wait for the store; neither registers a
    /// timer when it is ready at once.
    pub async fn append(
        &self,
        project: &str,
        name: &str,
        spec: AppendSpec,
        key: &StreamKey,
        deadline: StoreDeadline,
    ) -> Result<AppendOutcome, ServiceError> {
        let (entry, desc) =
            match tokio::time::timeout_at(deadline.at, self.live(project, name)).await {
                Ok(found) => found?,
                Err(_) => return Err(deadline.lookup_timed_out()),
            };
        let cipher = self.ciphers.cipher_for(&desc.value, key)?;
        let resolved = Resolved {
            entry,
            desc,
            cipher,
        };
        self.append_resolved(project, name, resolved, spec, deadline)
            .await
    }

    /// Appends to a stream [`Streams::append_target`] resolved (see
    /// [`Streams::append`]).
    pub async fn append_to(
        &self,
        project: &str,
        name: &str,
        target: AppendTarget,
        spec: AppendSpec,
        deadline: StoreDeadline,
    ) -> Result<AppendOutcome, ServiceError> {
        self.append_resolved(project, name, target.resolved, spec, deadline)
            .await
    }

    async fn append_resolved(
        &self,
        project: &str,
        name: &str,
        resolved: Resolved,
        spec: AppendSpec,
        deadline: StoreDeadline,
    ) -> Result<AppendOutcome, ServiceError> {
        let Resolved {
            entry,
            desc,
            cipher,
        } = resolved;
        let stream = stream_ref(&desc.value)?;
        let shard = self.shards.shard_for(&stream.id)?;
        let base = desc.value.fork.as_ref().map_or(0, |f| f.base);
        let records = if let Some(records) = spec.records {
            self.check_record_sizes(&records)?;
            records
        } else if spec.body.is_empty() {
            Vec::new()
        } else {
            let matches = spec
                .content_type
                .as_deref()
                .is_some_and(|ct| media_type(ct) == media_type(&desc.value.content_type));
            if !matches {
                // A closed stream answers as closed first.
                if let Some(info) = shard.stream_info(&stream) {
                    if info.tail.status == strata_engine::shard::StreamStatus::Closed {
                        return Err(ServiceError::Closed {
                            tail: base + info.tail.next_offset,
                        });
                    }
                }
                return Err(ServiceError::ContentTypeMismatch);
            }
            self.records_of(&desc.value.content_type, &spec.body, false)?
        };
        let appended_records = !records.is_empty();
        let watch_keys = self.watch_keys_of(&desc.value, &records);
        let mut request = AppendRequest::new(stream, cipher, records);
        request.routing_key = spec.routing_key;
        request.producer = spec.producer;
        request.stream_seq = spec.stream_seq;
        request.close = spec.close;
        let mut ticket = shard.start_append(request)?;
        let answer = match tokio::time::timeout_at(deadline.at, &mut ticket).await {
            Ok(answer) => answer,
            Err(_) => {
                let detached = Detached {
                    entry,
                    desc: desc.clone(),
                    shard: shard.clone(),
                    appended_records,
                    watch_keys,
                };
                self.finish_detached(ticket, detached, project, name);
                return Err(deadline.write_timed_out());
            }
        };
        let answer = self.confirmed(&shard, answer, deadline.at).await;
        let ack = answer.map_err(|e| match e {
            EngineError::StreamClosed { next_offset } => ServiceError::Closed {
                tail: base + next_offset,
            },
            other => other.into(),
        })?;
        entry.touch(self.now_ms());
        if appended_records && ack.kind == AppendKind::Appended {
            self.publish_watch_keys(&desc.value, &shard, &watch_keys);
            self.notify_appended(project, name);
        }
        let result = match ack.kind {
            AppendKind::Appended => AppendResult::Appended,
            AppendKind::Duplicate(mut state) => {
                // Positions, like every offset this service answers.
                state.first_offset += base;
                state.next_offset += base;
                AppendResult::Duplicate(state)
            }
            AppendKind::AlreadyClosed => AppendResult::AlreadyClosed,
        };
        Ok(AppendOutcome {
            result,
            tail: base + ack.next_offset,
            closed: ack.closed,
        })
    }

    /// Seals (closes) a stream without its key: idempotent, durable and
    /// monotonic; the raw view shows it as `Stream-Closed`.
    pub async fn seal(&self, project: &str, name: &str) -> Result<AppendOutcome, ServiceError> {
        let (entry, desc) = self.live(project, name).await?;
        let stream = stream_ref(&desc.value)?;
        let base = desc.value.fork.as_ref().map_or(0, |f| f.base);
        let ack = self
            .shards
            .shard_for(&stream.id)?
            .close_stream_without_key(stream)
            .await?;
        entry.touch(self.now_ms());
        Ok(AppendOutcome {
            result: match ack.kind {
                AppendKind::AlreadyClosed => AppendResult::AlreadyClosed,
                _ => AppendResult::Appended,
            },
            tail: base + ack.next_offset,
            closed: ack.closed,
        })
    }

    /// The rest of an append whose request stopped waiting at its deadline:
    /// once the engine answers, what an acknowledgement is followed by.
    pub(super) fn finish_detached(
        &self,
        ticket: strata_engine::AppendTicket,
        detached: Detached,
        project: &str,
        name: &str,
    ) {
        let clock = self.clock.clone();
        let observer = self.observer.get().cloned();
        let journals = self.watch_journals.clone();
        let entropy = self.entropy.clone();
        let (project, name) = (project.to_string(), name.to_string());
        tokio::spawn(async move {
            if let Ok(ack) = ticket.await {
                detached.entry.touch(clock.now_ms());
                if detached.appended_records && ack.kind == AppendKind::Appended {
                    publish_keys(
                        &journals,
                        entropy.as_ref(),
                        &detached.desc.value,
                        &detached.shard,
                        &detached.watch_keys,
                    );
                    if let Some(observer) = observer {
                        observer.appended(&project, &name);
                    }
                }
            }
        });
    }
}
