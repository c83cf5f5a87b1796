//! Fork chains: the levels a read of a stream walks (the stream, then its
//! fork sources up to `FORK_DEPTH_MAX`), their durable tail, and the read
//! across them. Positions are shared along a chain: a level's records live
//! at `base..cap`. In a fleet a source may live on a shard another member
//! serves: that level is read from its owner (`sources.rs`).

use std::sync::Arc;

use strata_engine::{ReadLimits, Shard, StreamRef};
use strata_manifest::Versioned;
use strata_segments::{StreamCipher, StreamKey};

use super::error::ServiceError;
use super::limits::{FORK_DEPTH_MAX, READ_ROUNDS_MAX};
use super::model::{KeyView, ReadRecord};
use super::registry::{Descriptor, StreamState};
use super::routing::stream_ref;
use super::sources::{SourceBatch, SourceRead, SOURCE_RECORDS_MAX};
use super::stale::CONFIRM_WAIT_MAX;
use super::streams::Streams;

/// Where a level's records are read.
pub(super) enum Place {
    Local(Shard),
    /// The fleet member at this URL serves the level's shard.
    Remote(String),
}

/// A live stream resolved for one request.
pub(super) struct Level {
    pub(super) stream: StreamRef,
    pub(super) place: Place,
    /// The stream's name and incarnation (a remote read names them).
    pub(super) name: String,
    pub(super) incarnation: u64,
    pub(super) cipher: Arc<StreamCipher>,
    pub(super) base: u64,
    /// Positions at or above this belong to the level above (the fork).
    pub(super) cap: u64,
}

impl Streams {
    /// The levels a read of `desc` walks: the stream, then its fork sources.
    /// Sources may be served by other members; the stream itself only with
    /// `remote_top` (a fork's creation reads its source's chain).
    pub(super) async fn chain(
        &self,
        project: &str,
        desc: Arc<Versioned<Descriptor>>,
        key: &StreamKey,
        remote_top: bool,
    ) -> Result<Vec<Level>, ServiceError> {
        let mut levels: Vec<Level> = Vec::new();
        let mut current = desc;
        let mut cap = u64::MAX;
        for _ in 0..FORK_DEPTH_MAX {
            let stream = stream_ref(&current.value)?;
            let remote_ok = remote_top || !levels.is_empty();
            let place = match self.shards.shard_for(&stream.id) {
                Ok(shard) => Place::Local(shard),
                Err(ServiceError::NotOwner { owner }) if remote_ok => Place::Remote(owner),
                Err(e) => return Err(e),
            };
            let cipher = self.ciphers.cipher_for(&current.value, key)?;
            let base = current.value.fork.as_ref().map_or(0, |f| f.base);
            let origin = current.value.fork.clone();
            levels.push(Level {
                stream,
                place,
                name: current.value.name.clone(),
                incarnation: current.value.incarnation,
                cipher,
                base,
                cap,
            });
            let Some(origin) = origin else {
                return Ok(levels);
            };
            cap = base;
            let source = self
                .incarnation(project, &origin.source, origin.source_incarnation)
                .await?
                .ok_or_else(|| ServiceError::Internal("a fork's source is gone".into()))?;
            current = source;
        }
        Err(ServiceError::Internal("fork chain too deep".into()))
    }

    /// The durable tail position and closed flag of a chain's top level.
    pub(super) async fn tail_of(
        &self,
        project: &str,
        level: &Level,
        key: &StreamKey,
    ) -> Result<(u64, bool), ServiceError> {
        let shard = match &level.place {
            Place::Local(shard) => shard,
            Place::Remote(_) => {
                let limits = ReadLimits {
                    max_records: 0,
                    max_bytes: 1,
                };
                let batch = self
                    .read_level(project, level, 0, limits, key, Some(b""))
                    .await?;
                return Ok((level.base + batch.tail, batch.closed));
            }
        };
        let Some(info) = shard.stream_info(&level.stream) else {
            let until = tokio::time::Instant::now() + CONFIRM_WAIT_MAX;
            let absent = strata_engine::EngineError::StreamNotFound;
            return Err(self.confirmed_rejection(shard, absent, until).await.into());
        };
        Ok((
            level.base + info.tail.next_offset,
            info.tail.status == strata_engine::shard::StreamStatus::Closed,
        ))
    }

    /// One read of `level` from its own offset `from`, here or at its owner:
    /// of `routing_key`'s records, or of every key's (`None`, here only).
    pub(super) async fn read_level(
        &self,
        project: &str,
        level: &Level,
        from: u64,
        limits: ReadLimits,
        key: &StreamKey,
        routing_key: Option<&[u8]>,
    ) -> Result<strata_engine::ReadBatch, ServiceError> {
        match &level.place {
            Place::Local(shard) => {
                let read = shard
                    .read(&level.stream, from, limits, &level.cipher, routing_key)
                    .await;
                let until = tokio::time::Instant::now() + CONFIRM_WAIT_MAX;
                Ok(self.confirmed(shard, read, until).await?)
            }
            Place::Remote(_) if routing_key != Some(b"") => Err(ServiceError::Internal(
                "another member's level is read by its default key only".into(),
            )),
            Place::Remote(url) => {
                let reads = self.source_reads.get().ok_or_else(|| {
                    ServiceError::Unavailable(
                        "the fork's source is served by another instance".into(),
                    )
                })?;
                let request = SourceRead {
                    project: project.to_string(),
                    name: level.name.clone(),
                    incarnation: level.incarnation,
                    from,
                    max_records: limits.max_records,
                    max_bytes: limits.max_bytes,
                };
                reads.read(url, request, key).await
            }
        }
    }

    /// Reads records of `routing_key` from `from` across the chain (deepest
    /// source first). A fork inherits only its source's default key, so the
    /// source levels are read for `""` alone. The returned position moves past
    /// every record the read passed over, matching or not.
    pub(super) async fn read_chain(
        &self,
        project: &str,
        levels: &[Level],
        from: u64,
        tail: u64,
        view: KeyView<'_>,
        key: &StreamKey,
    ) -> Result<(Vec<ReadRecord>, Vec<bool>, u64), ServiceError> {
        let KeyView {
            routing_key,
            max_bytes,
            max_records,
        } = view;
        let max_records = max_records.max(1);
        let mut out = Vec::new();
        let mut starts = Vec::new();
        let mut position = from;
        let mut bytes = 0usize;
        let mut rounds = 0usize;
        for (depth, level) in levels.iter().enumerate().rev() {
            let end = if depth == 0 { tail } else { level.cap };
            if position >= end {
                continue;
            }
            if depth > 0 && !routing_key.is_empty() {
                // Sources contribute only their default key.
                position = end;
                continue;
            }
            if position < level.base {
                return Err(ServiceError::Internal(format!(
                    "position {position} lies below fork base {} with nothing to read it from",
                    level.base
                )));
            }
            // Each round either returns records or moves `position` forward;
            // a read that finds none of its key's records in READ_ROUNDS_MAX
            // rounds answers an empty page whose position has moved on.
            while position < end
                && (out.is_empty() || (bytes < max_bytes && out.len() < max_records))
            {
                if rounds >= READ_ROUNDS_MAX {
                    break;
                }
                rounds += 1;
                let limits = ReadLimits {
                    max_records: ((end - position).min(10_000) as usize)
                        .min(max_records - out.len()),
                    max_bytes: max_bytes.saturating_sub(bytes).max(1),
                };
                let batch = self
                    .read_level(
                        project,
                        level,
                        position - level.base,
                        limits,
                        key,
                        Some(routing_key),
                    )
                    .await?;
                let before = position;
                let mut capped = false;
                for record in batch.records {
                    let at = level.base + record.offset;
                    if at >= end || out.len() >= max_records {
                        capped = true;
                        break;
                    }
                    bytes += record.payload.len();
                    starts.push(record.append_start);
                    out.push(ReadRecord {
                        payload: record.payload,
                    });
                    position = at + 1;
                }
                if !capped {
                    position = position.max((level.base + batch.next_offset).min(end));
                }
                if position == before {
                    break;
                }
            }
            // Stopped early (page full, rounds spent): the rest waits.
            if position < end {
                break;
            }
        }
        Ok((out, starts, position))
    }

    /// The descriptor of `name` if it is still `incarnation` and not deleted
    /// (a source kept only for its forks is).
    async fn incarnation(
        &self,
        project: &str,
        name: &str,
        incarnation: u64,
    ) -> Result<Option<Arc<Versioned<Descriptor>>>, ServiceError> {
        Ok(self
            .registry
            .entry(project, name)
            .load()
            .await?
            .filter(|d| {
                d.value.incarnation == incarnation && d.value.state != StreamState::Deleted
            }))
    }

    /// A fork source's records from its shard here (a peer's source read).
    pub async fn read_source(
        &self,
        request: &SourceRead,
        key: &StreamKey,
    ) -> Result<SourceBatch, ServiceError> {
        let desc = self
            .incarnation(&request.project, &request.name, request.incarnation)
            .await?
            .ok_or(ServiceError::NotFound)?;
        let stream = stream_ref(&desc.value)?;
        let shard = self.shards.shard_for(&stream.id)?;
        let cipher = self.ciphers.cipher_for(&desc.value, key)?;
        let limits = ReadLimits {
            max_records: request.max_records.min(SOURCE_RECORDS_MAX),
            max_bytes: request.max_bytes.max(1),
        };
        let batch = shard
            .read(&stream, request.from, limits, &cipher, Some(b""))
            .await?;
        Ok(SourceBatch::of(batch))
    }
}
