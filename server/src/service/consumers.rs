//! Consumer groups: configuration (create, read, delete) and the live
//! consumers of the streams served here. The delivery operations (pull,
//! settle, dead letters) are `consumer_delivery.rs`'s.
//!
//! Ownership: a consumer's durable state lives in the shard that owns its
//! stream, in the shard's WAL and index runs (`strata_engine::consumer::
//! durable`). What this server keeps in memory (`consumer_live.rs`), a `LiveConsumer` per
//! (stream incarnation, shard owner epoch, consumer name), is derived: the
//! durable state restored, plus the stream's pending records found again
//! by reading it. It is dropped and rebuilt whenever its shard changes
//! hands, the consumer is recreated, or one of its changes fails.
//!
//! Invariants: a change is decided under the live consumer's lock and
//! queued to the shard before the lock is released, so the WAL holds
//! changes in the order they were decided; nothing a change decides is
//! answered before the change is durable; configuration changes of one
//! server are serialized, and a new consumer's generation is above every
//! generation its stream ever gave.

use std::sync::Arc;

use bytes::Bytes;
use strata_engine::consumer::durable::{ConsumerChange, ConsumerSetup};
use strata_engine::consumer::{Consumer, ConsumerConfig};
use strata_engine::{Shard, StreamRef};
use strata_manifest::Versioned;
use strata_segments::StreamKey;

use super::consumer_live::{LiveConsumer, LiveKey, LiveState};
use super::error::ServiceError;
use super::product::consumer_config::ConsumerSettings;
use super::registry::Descriptor;
use super::routing::stream_ref;
use super::streams::Streams;

/// Why a consumer operation was refused, beyond the stream's own errors.
#[derive(Debug, thiserror::Error)]
pub enum ConsumerError {
    #[error("no such consumer")]
    NotFound,
    #[error("the consumer exists with another configuration")]
    ConfigConflict,
    #[error("the consumer's version is {current}")]
    VersionConflict { current: u64 },
    #[error("the consumer was deleted")]
    Deleted,
    #[error("the dead-letter stream does not exist")]
    DeadLetterUnknown,
    #[error("the dead-letter stream is sealed")]
    DeadLetterSealed,
    #[error("the dead-letter stream does not accept this stream's key")]
    DeadLetterKeyMismatch,
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error(transparent)]
    Stream(#[from] ServiceError),
}

impl From<strata_engine::EngineError> for ConsumerError {
    fn from(e: strata_engine::EngineError) -> Self {
        ConsumerError::Stream(e.into())
    }
}

/// A consumer's configuration as answered: its settings and version (the
/// generation, which `Prisma-Consumer-Version` carries).
#[derive(Debug, Clone)]
pub struct ConsumerInfo {
    pub settings: ConsumerSettings,
    pub version: u64,
    /// False when the configuration already existed.
    pub created: bool,
}

/// A consumer operation's stream, resolved.
pub(super) struct ConsumerStream {
    pub(super) desc: Arc<Versioned<Descriptor>>,
    pub(super) stream: StreamRef,
    pub(super) shard: Shard,
}

impl Streams {
    /// The live stream `name` and its shard (here: another member's shard
    /// answers `NotOwner`).
    pub(super) async fn consumer_stream(
        &self,
        project: &str,
        name: &str,
    ) -> Result<ConsumerStream, ServiceError> {
        let (entry, desc) = self.live(project, name).await?;
        let stream = stream_ref(&desc.value)?;
        let shard = self.shards.shard_for(&stream.id)?;
        entry.touch(self.now_ms());
        self.count_read(&desc.value, 0, 0);
        Ok(ConsumerStream {
            desc,
            stream,
            shard,
        })
    }

    /// Creates consumer `consumer` of `name`, or finds it configured the
    /// same way. The key must be the stream's; the dead-letter stream must
    /// exist in the same project, be another stream, be open and take the
    /// same key.
    pub async fn configure_consumer(
        &self,
        project: &str,
        name: &str,
        consumer: &str,
        key: &StreamKey,
        settings: ConsumerSettings,
    ) -> Result<ConsumerInfo, ConsumerError> {
        let at = self.consumer_stream(project, name).await?;
        self.ciphers.cipher_for(&at.desc.value, key)?;
        let _serial = self.live_consumers.config_changes.lock().await;
        if let Some((version, setup)) = at.shard.consumer_setup(&at.stream, consumer) {
            let current = settings_of(&setup.settings)?;
            if current != settings {
                return Err(ConsumerError::ConfigConflict);
            }
            return Ok(ConsumerInfo {
                settings: current,
                version,
                created: false,
            });
        }
        if let Some(dlq) = &settings.dead_letter_stream {
            self.check_dead_letter_target(project, name, dlq, key)
                .await?;
        }
        let generation = at.shard.consumer_generation_max(&at.stream) + 1;
        let change = ConsumerChange::Configure {
            generation,
            setup: setup_of(&settings),
        };
        at.shard
            .change_consumer(at.stream, consumer, &change)
            .await?;
        Ok(ConsumerInfo {
            settings,
            version: generation,
            created: true,
        })
    }

    async fn check_dead_letter_target(
        &self,
        project: &str,
        source: &str,
        target: &str,
        key: &StreamKey,
    ) -> Result<(), ConsumerError> {
        if target == source {
            return Err(ConsumerError::InvalidConfig(
                "the dead-letter stream must be another collection".into(),
            ));
        }
        let (_, desc) = match self.live(project, target).await {
            Ok(found) => found,
            Err(ServiceError::NotFound | ServiceError::Gone | ServiceError::RetainedForForks) => {
                return Err(ConsumerError::DeadLetterUnknown)
            }
            Err(e) => return Err(e.into()),
        };
        match self.ciphers.cipher_for(&desc.value, key) {
            Ok(_) => {}
            Err(ServiceError::WrongKey) => return Err(ConsumerError::DeadLetterKeyMismatch),
            Err(e) => return Err(e.into()),
        }
        if self.dead_letter_closed(&desc.value)? {
            return Err(ConsumerError::DeadLetterSealed);
        }
        Ok(())
    }

    /// Whether a stream is closed, from its shard here (a stream another
    /// member serves counts as open: its append will tell).
    pub(super) fn dead_letter_closed(&self, desc: &Descriptor) -> Result<bool, ServiceError> {
        let stream = stream_ref(desc)?;
        let closed = match self.shards.shard_for(&stream.id) {
            Ok(shard) => shard
                .stream_info(&stream)
                .is_some_and(|info| info.tail.status == strata_engine::shard::StreamStatus::Closed),
            Err(_) => false,
        };
        Ok(closed)
    }

    /// Consumer `consumer`'s configuration and version.
    pub async fn consumer_info(
        &self,
        project: &str,
        name: &str,
        consumer: &str,
    ) -> Result<ConsumerInfo, ConsumerError> {
        let at = self.consumer_stream(project, name).await?;
        let (version, setup) = at
            .shard
            .consumer_setup(&at.stream, consumer)
            .ok_or(ConsumerError::NotFound)?;
        Ok(ConsumerInfo {
            settings: settings_of(&setup.settings)?,
            version,
            created: false,
        })
    }

    /// Deletes consumer `consumer` if its version is `version`.
    pub async fn delete_consumer(
        &self,
        project: &str,
        name: &str,
        consumer: &str,
        version: u64,
    ) -> Result<(), ConsumerError> {
        let at = self.consumer_stream(project, name).await?;
        let _serial = self.live_consumers.config_changes.lock().await;
        let current = at
            .shard
            .consumer_generation(&at.stream, consumer)
            .ok_or(ConsumerError::NotFound)?;
        if current != version {
            return Err(ConsumerError::VersionConflict { current });
        }
        let change = ConsumerChange::Delete {
            generation: current,
        };
        at.shard
            .change_consumer(at.stream, consumer, &change)
            .await?;
        self.live_consumers.wake(&at.stream, consumer);
        Ok(())
    }

    /// The live consumer `consumer` of the stream at `at`, rebuilt from its
    /// durable state if this server has none (or a stale one).
    pub(super) fn live_consumer(
        &self,
        at: &ConsumerStream,
        consumer: &str,
    ) -> Result<(LiveKey, Arc<LiveConsumer>), ConsumerError> {
        let key = LiveKey {
            stream: at.stream,
            owner_epoch: at.shard.last_recovery().epoch,
            name: consumer.to_string(),
        };
        let generation = at
            .shard
            .consumer_generation(&at.stream, consumer)
            .ok_or(ConsumerError::NotFound)?;
        if let Some(live) = self.live_consumers.get(&key) {
            if live.generation == generation {
                return Ok((key, live));
            }
            self.live_consumers.forget(&key);
        }
        let durable = at
            .shard
            .consumer(&at.stream, consumer)
            .ok_or(ConsumerError::NotFound)?;
        let restored = Consumer::restore(&durable);
        let resume_dead_letters = durable.heads.values().any(|h| h.dead_lettering);
        let live = Arc::new(LiveConsumer {
            generation: durable.generation,
            settings: settings_of(&durable.setup.settings)?,
            state: tokio::sync::Mutex::new(LiveState {
                consumer: restored,
                broken: false,
                resume_dead_letters,
            }),
            changed: tokio::sync::Notify::new(),
        });
        Ok((key.clone(), self.live_consumers.insert(key, live)))
    }
}

fn setup_of(settings: &ConsumerSettings) -> ConsumerSetup {
    ConsumerSetup {
        config: ConsumerConfig {
            visibility_ms: settings.visibility_ms,
            max_attempts: settings.max_attempts,
            max_batch: settings.max_batch_records as usize,
        },
        settings: Bytes::from(settings.to_json().to_string()),
    }
}

/// The settings a configure change logged (its own normal form).
fn settings_of(logged: &Bytes) -> Result<ConsumerSettings, ServiceError> {
    ConsumerSettings::parse(logged)
        .map_err(|e| ServiceError::Internal(format!("a logged consumer configuration: {}", e.0)))
}
