//! Reads: metadata (HEAD), reads of one routing key across a fork chain, and
//! waits for new records (long-poll and SSE).

use std::time::Duration;

use strata_engine::WaitOutcome;
use strata_segments::StreamKey;

use super::error::ServiceError;
use super::model::{KeyView, ReadFrom, ReadOutcome, StreamMeta, TailState};
use super::registry::Descriptor;
use super::routing::stream_ref;
use super::stale::CONFIRM_WAIT_MAX;
use super::streams::Streams;

impl Streams {
    pub async fn head(&self, project: &str, name: &str) -> Result<StreamMeta, ServiceError> {
        let (_, desc) = self.live(project, name).await?;
        self.confirmed_meta(&desc.value).await
    }

    /// A live stream's metadata and epoch, after checking `key` against it
    /// (one lookup: exists, then the key): what a product write or read
    /// needs before it starts, and what its cursors are bound to.
    pub async fn keyed_meta(
        &self,
        project: &str,
        name: &str,
        key: &StreamKey,
    ) -> Result<(StreamMeta, [u8; 16]), ServiceError> {
        let target = self.append_target(project, name, key).await?;
        let meta = Self::meta_with(target.descriptor(), target.tail);
        Ok((meta, target.epoch))
    }

    /// A stream's metadata, with a stream the shard does not know confirmed
    /// absent first (see [`Streams::confirmed_tail`]).
    async fn confirmed_meta(&self, desc: &Descriptor) -> Result<StreamMeta, ServiceError> {
        let tail = self.confirmed_tail(desc).await?;
        Ok(Self::meta_with(desc, tail))
    }

    /// [`Streams::shard_tail`], with a stream the shard does not know confirmed
    /// absent first (`service::stale`): a handle fenced without knowing it
    /// has not seen streams created since.
    pub(super) async fn confirmed_tail(
        &self,
        desc: &Descriptor,
    ) -> Result<TailState, ServiceError> {
        match self.shard_tail(desc) {
            Err(ServiceError::NotFound) if self.shards.is_fleet() => {
                let shard = self.shards.shard_for(&stream_ref(desc)?.id)?;
                let until = tokio::time::Instant::now() + CONFIRM_WAIT_MAX;
                let absent = strata_engine::EngineError::StreamNotFound;
                Err(self.confirmed_rejection(&shard, absent, until).await.into())
            }
            other => other,
        }
    }

    /// A live stream's tail as its shard knows it (read in place).
    pub(super) fn shard_tail(&self, desc: &Descriptor) -> Result<TailState, ServiceError> {
        let stream = stream_ref(desc)?;
        let (next_offset, status) = self
            .shards
            .shard_for(&stream.id)?
            .with_tail(&stream, |tail| (tail.next_offset, tail.status))
            .ok_or(ServiceError::NotFound)?;
        let base = desc.fork.as_ref().map_or(0, |f| f.base);
        Ok(TailState {
            position: base + next_offset,
            closed: status == strata_engine::shard::StreamStatus::Closed,
        })
    }

    fn meta_with(desc: &Descriptor, tail: TailState) -> StreamMeta {
        StreamMeta {
            name: desc.name.clone(),
            content_type: desc.content_type.clone(),
            created_ms: desc.created_ms,
            epoch: desc.epoch.clone(),
            watches: desc.watches.clone(),
            tail: tail.position,
            closed: tail.closed,
            ttl_seconds: desc.ttl_seconds,
            expires_at: desc.expires_at.clone(),
            incarnation: desc.incarnation,
        }
    }

    /// Reads the default routing key from a position (renews the sliding TTL
    /// of this stream only): the raw route's view.
    pub async fn read(
        &self,
        project: &str,
        name: &str,
        from: ReadFrom,
        key: &StreamKey,
    ) -> Result<ReadOutcome, ServiceError> {
        let view = KeyView {
            routing_key: b"",
            max_bytes: self.config.read_chunk_bytes,
            max_records: usize::MAX,
        };
        self.read_key(project, name, from, key, view).await
    }

    /// Reads one routing key's records from a position, up to about
    /// `view.max_bytes` of payload (at least one record when there is one).
    pub async fn read_key(
        &self,
        project: &str,
        name: &str,
        from: ReadFrom,
        key: &StreamKey,
        view: KeyView<'_>,
    ) -> Result<ReadOutcome, ServiceError> {
        let (entry, desc) = self.live(project, name).await?;
        let levels = self.chain(project, desc.clone(), key, false).await?;
        let (tail, closed) = self.tail_of(project, &levels[0], key).await?;
        let from = match from {
            ReadFrom::Start => 0,
            ReadFrom::Tail => tail,
            ReadFrom::Position(p) if p > tail => {
                return Err(ServiceError::BadRequest(
                    "offset is beyond the stream's tail".into(),
                ))
            }
            ReadFrom::Position(p) => p,
        };
        let (records, _, next) = self
            .read_chain(project, &levels, from, tail, view, key)
            .await?;
        entry.touch(self.now_ms());
        let bytes: usize = records.iter().map(|r| r.payload.len()).sum();
        self.count_read(&desc.value, 1, bytes as u64);
        Ok(ReadOutcome {
            records,
            from,
            next: next.max(from),
            tail,
            closed,
            content_type: desc.value.content_type.clone(),
            incarnation: desc.value.incarnation,
        })
    }

    /// Waits until the stream has records at or past `position`, is closed, or
    /// `timeout` passes. Only the stream's own appends wake it (never its
    /// source's).
    pub async fn wait(
        &self,
        project: &str,
        name: &str,
        position: u64,
        timeout: Duration,
    ) -> Result<WaitOutcome, ServiceError> {
        let (entry, desc) = self.live(project, name).await?;
        let stream = stream_ref(&desc.value)?;
        let base = desc.value.fork.as_ref().map_or(0, |f| f.base);
        let shard = self.shards.shard_for(&stream.id)?;
        let own = position.saturating_sub(base);
        let outcome = shard.wait_for(&stream, own, timeout).await?;
        entry.touch(self.now_ms());
        self.count_read(&desc.value, 0, 0);
        Ok(match outcome {
            WaitOutcome::Ready { tail, closed } => WaitOutcome::Ready {
                tail: base + tail,
                closed,
            },
            WaitOutcome::TimedOut { tail } => WaitOutcome::TimedOut { tail: base + tail },
        })
    }
}
