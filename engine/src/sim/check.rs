//! The invariants, checked after every step against the newest owner, the
//! older owners still running, and the store's own log:
//!
//! 1. every acknowledged record of a live stream is readable at its offset;
//! 2. offsets are contiguous from 0 and no record appears twice (producer
//!    retries included: exactly once);
//! 3. a record once visible stays visible at the same offset (so nothing was
//!    visible before it was durable) and is present in a read-only walk of
//!    the store's log;
//! 4. what an older (possibly fenced) owner shows is a prefix of the newest
//!    owner's view;
//! 5. no offset is acknowledged twice with different records;
//! 6. at the moment any owner acknowledges an append, the newest owner
//!    already shows it (checked by the appender as it is answered);
//! 7. no record of an append refused with a definite answer is ever in the
//!    log, nothing follows a close, `Stream-Seq` values increase in log order;
//! 8. no object is deleted while the manifest references it or a read of the
//!    newest owner pins it (the store audit).

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use strata_manifest::RetryPolicy;
use strata_segments::open_page;

use super::workload::SIM_ROUTING_KEYS;
use super::world::{SimFailure, World};
use crate::env::EngineEnv;
use crate::error::EngineError;
use crate::layout::ShardLayout;
use crate::shard::{inspect_log, LogView, ReadLimits, Shard, ShardConfig, ShardStatus};

/// Reads of one stream before a check gives up on reaching its tail.
const READS_PER_STREAM_MAX: usize = 100_000;

/// Records per stream slot as an owner shows them (`None`: the slot is not
/// live in the model, or this owner does not know its incarnation).
type View = Vec<Option<BTreeMap<u64, Bytes>>>;

impl World {
    /// Checks the invariants with the store calm (reads of sealed chunks must
    /// not fail on injected faults), then restores the weather.
    pub(super) async fn check(&mut self) -> Result<(), SimFailure> {
        let weather = self.faults.config();
        self.faults.set(weather.calm());
        let result = self.check_calm().await;
        self.faults.set(weather);
        result
    }

    async fn check_calm(&mut self) -> Result<(), SimFailure> {
        self.checks += 1;
        if self
            .current()
            .is_some_and(|c| c.shard.status() == ShardStatus::Fenced)
        {
            self.reopen_if_fenced_by_a_later_claim().await?;
        }
        let Some(current) = self.current().map(|o| o.shard.clone()) else {
            return Ok(());
        };
        // Reads await (sealed chunks), so appends land meanwhile: what older
        // owners show is read first, what was acknowledged is noted next, and
        // the current owner's view, read last, must hold both.
        let mut old_views = Vec::new();
        for older in &self.owners[..self.owners.len() - 1] {
            match self.visible(&older.shard, true).await {
                Ok(view) => old_views.push((older.instance, view)),
                // A fenced owner's sealed objects may be collected by now.
                Err(_) if older.shard.status() == ShardStatus::Fenced => {}
                Err(ViewError::Superseded) => {}
                Err(ViewError::Failed(m)) => return Err(self.fail(m)),
            }
        }
        let (acked_before, consumers_before): (Vec<BTreeMap<u64, Bytes>>, Vec<_>) = self
            .model
            .lock()
            .streams
            .iter()
            .map(|s| {
                (
                    s.acked.clone(),
                    (s.live && s.consumer).then(|| s.consumer_done.clone()),
                )
            })
            .unzip();
        let visible = match self.visible(&current, false).await {
            Ok(view) => view,
            Err(ViewError::Superseded) => {
                return Err(self.fail("the newest owner answers reads as fenced"))
            }
            Err(ViewError::Failed(m)) => return Err(self.fail(m)),
        };
        let log = self.store_log().await?;
        {
            let mut model = self.model.lock();
            for (index, acked) in consumers_before.iter().enumerate() {
                let (Some(acked), true) = (acked, visible[index].is_some()) else {
                    continue;
                };
                let stream = model.streams[index].stream;
                let done = current.consumer(&stream, super::workload::SIM_CONSUMER);
                model
                    .check_consumer(index, done.as_ref().map(|c| &c.done), acked)
                    .map_err(|m| self.fail(m))?;
            }
            for (index, records) in visible.iter().enumerate() {
                let Some(records) = records else {
                    continue;
                };
                model
                    .check_view(index, records, &acked_before[index])
                    .map_err(|m| {
                        self.fail(format!(
                            "{m}; the owner holds {}",
                            current.describe_stream(&model.streams[index].stream)
                        ))
                    })?;
                let logged = log[index].as_ref();
                for (offset, payload) in records {
                    if logged.and_then(|l| l.get(offset)) != Some(payload) {
                        return Err(self.fail(format!(
                            "stream {index}: visible record at offset {offset} is not in the store's log"
                        )));
                    }
                }
                let seen = &mut model.streams[index].seen;
                seen.extend(records.iter().map(|(o, p)| (*o, p.clone())));
            }
        }
        for (instance, old_view) in old_views {
            for (index, records) in old_view.iter().enumerate() {
                let (Some(records), Some(newest)) = (records, &visible[index]) else {
                    continue;
                };
                for (offset, payload) in records {
                    if newest.get(offset) != Some(payload) {
                        return Err(self.fail(format!(
                            "stream {index}: older owner {instance} shows offset {offset} differently from the current owner"
                        )));
                    }
                }
            }
        }
        self.check_dead_letters(&current).await?;
        self.event(format!(
            "check {:?}",
            visible
                .iter()
                .map(|v| v.as_ref().map_or(0, BTreeMap::len))
                .collect::<Vec<_>>()
        ));
        Ok(())
    }

    /// The newest owner is fenced: legitimate only if a later claim landed
    /// (an opener whose claim succeeded and which then failed, a racing
    /// takeover, an operator's repair). A fleet would open the shard again;
    /// so does the simulation.
    async fn reopen_if_fenced_by_a_later_claim(&mut self) -> Result<(), SimFailure> {
        let epoch = self.current().map_or(0, |c| c.shard.last_recovery().epoch);
        let cas = strata_manifest::CasObject::<strata_manifest::ManifestCodec>::new(
            self.clean_store.clone(),
            ShardLayout::new(self.shard_name.clone()).manifest(),
            RetryPolicy::default(),
        );
        let claimed = cas
            .load()
            .await
            .ok()
            .flatten()
            .map_or(0, |m| m.value.writer.epoch);
        if claimed <= epoch {
            return Err(self.fail(format!(
                "the newest owner (epoch {epoch}) is fenced but the manifest's epoch is {claimed}"
            )));
        }
        self.event(format!(
            "newest owner fenced by a later claim (epoch {claimed})"
        ));
        self.open_owner().await
    }

    /// Every live stream as `shard` shows it. An older owner may not know a
    /// stream's newest incarnation yet (`None` then).
    async fn visible(&self, shard: &Shard, older: bool) -> Result<View, ViewError> {
        let slots: Vec<_> = self
            .model
            .lock()
            .streams
            .iter()
            .map(|s| (s.stream, s.live))
            .collect();
        let mut out = Vec::with_capacity(slots.len());
        for (index, (stream, live)) in slots.into_iter().enumerate() {
            if !live {
                out.push(None);
                continue;
            }
            let records = match self.read_view(shard, index, &stream, None).await {
                Ok(records) => records,
                Err(Missing) if older => {
                    out.push(None);
                    continue;
                }
                Err(ReadError::Superseded) => return Err(ViewError::Superseded),
                Err(Missing) => {
                    return Err(ViewError::Failed(format!(
                        "stream {index}: the newest owner does not have it"
                    )))
                }
                Err(ReadError::Failed(m)) => return Err(ViewError::Failed(m)),
            };
            let mut map = BTreeMap::new();
            for (offset, payload) in records {
                if offset != map.len() as u64 {
                    return Err(ViewError::Failed(format!(
                        "stream {index}: record at offset {offset} where {} was expected (hole or reorder)",
                        map.len()
                    )));
                }
                map.insert(offset, payload);
            }
            let unique: HashSet<&Bytes> = map.values().collect();
            if unique.len() != map.len() {
                return Err(ViewError::Failed(format!(
                    "stream {index}: a record appears twice"
                )));
            }
            self.check_key_views(shard, index, &stream, &map).await?;
            out.push(Some(map));
        }
        Ok(out)
    }

    /// Reads a stream (of one routing key, if given) to its tail, in pages
    /// of `read_limits`: every page must make progress.
    async fn read_view(
        &self,
        shard: &Shard,
        index: usize,
        stream: &crate::ids::StreamRef,
        routing_key: Option<&[u8]>,
    ) -> Result<Vec<(u64, Bytes)>, ReadError> {
        let mut out = Vec::new();
        let mut from = 0;
        for _ in 0..READS_PER_STREAM_MAX {
            let batch = match shard
                .read(stream, from, self.read_limits(), &self.cipher, routing_key)
                .await
            {
                Ok(batch) => batch,
                Err(EngineError::StreamNotFound | EngineError::StaleIncarnation) => {
                    return Err(ReadError::Missing)
                }
                Err(EngineError::Fenced) => return Err(ReadError::Superseded),
                Err(e) => {
                    return Err(ReadError::Failed(format!(
                        "read of stream {index} from {from} failed: {e}"
                    )))
                }
            };
            if batch.next_offset <= from && batch.records.is_empty() && !batch.up_to_date() {
                return Err(ReadError::Failed(format!(
                    "stream {index}: a read from {from} made no progress"
                )));
            }
            out.extend(batch.records.iter().map(|r| (r.offset, r.payload.clone())));
            from = batch.next_offset;
            if batch.up_to_date() {
                return Ok(out);
            }
        }
        Err(ReadError::Failed(format!(
            "stream {index}: reads never caught up (stuck at {from})"
        )))
    }

    /// Every routing key's filtered read shows exactly that key's records (its
    /// payloads name the key) at the offsets the unfiltered read showed them.
    async fn check_key_views(
        &self,
        shard: &Shard,
        index: usize,
        stream: &crate::ids::StreamRef,
        all: &BTreeMap<u64, Bytes>,
    ) -> Result<(), ViewError> {
        for (key, routing_key) in SIM_ROUTING_KEYS.iter().enumerate() {
            let marker = format!("-k{key}-");
            let expected: BTreeMap<u64, Bytes> = all
                .iter()
                .filter(|(_, p)| p.windows(marker.len()).any(|w| w == marker.as_bytes()))
                .map(|(o, p)| (*o, p.clone()))
                .collect();
            let mut seen: BTreeMap<u64, Bytes> = match self
                .read_view(shard, index, stream, Some(routing_key))
                .await
            {
                Ok(records) => records.into_iter().collect(),
                Err(ReadError::Missing) => {
                    return Err(ViewError::Failed(format!(
                        "stream {index} vanished between two reads"
                    )))
                }
                Err(ReadError::Superseded) => return Err(ViewError::Superseded),
                Err(ReadError::Failed(m)) => return Err(ViewError::Failed(m)),
            };
            // Records appended after the unfiltered read may show; compare
            // only up to what that read saw.
            let horizon = all.len() as u64;
            seen.retain(|o, _| *o < horizon);
            if seen != expected {
                return Err(ViewError::Failed(format!(
                    "stream {index} key {key}: the keyed read shows {} records, the key has {}",
                    seen.len(),
                    expected.len()
                )));
            }
        }
        Ok(())
    }

    /// Small reads in some seeds, so reads cross the sealed/unsealed boundary.
    fn read_limits(&self) -> ReadLimits {
        if self.seed.is_multiple_of(3) {
            ReadLimits {
                max_records: 3,
                max_bytes: 64,
            }
        } else {
            ReadLimits::default()
        }
    }

    /// Every live stream's records as the store's own log holds them: a
    /// read-only walk without faults, sealed chunks read from the store.
    async fn store_log(&self) -> Result<Vec<Option<BTreeMap<u64, Bytes>>>, SimFailure> {
        let clean_env = EngineEnv {
            store: self.clean_store.clone(),
            crash_points: None,
            ..self.env.clone()
        };
        let view = inspect_log(clean_env, self.shard_name.clone(), ShardConfig::default())
            .await
            .map_err(|e| self.fail(format!("read-only walk of the log failed: {e}")))?;
        let streams: Vec<_> = self.model.lock().streams.iter().map(|s| s.stream).collect();
        let mut out = Vec::with_capacity(streams.len());
        for (index, stream) in streams.iter().enumerate() {
            let logged = self
                .logged_records(&view, index, stream)
                .await
                .map_err(|m| self.fail(m))?;
            out.push(logged);
        }
        Ok(out)
    }

    /// A stream's records in the log: sealed chunks then unsealed pages.
    async fn logged_records(
        &self,
        view: &LogView,
        index: usize,
        stream: &crate::ids::StreamRef,
    ) -> Result<Option<BTreeMap<u64, Bytes>>, String> {
        let Some(durable) = view.streams.streams.get(&stream.id) else {
            return Ok(None);
        };
        if durable.tail.stream != *stream {
            return Ok(None);
        }
        let layout = ShardLayout::new(self.shard_name.clone());
        let mut pages: Vec<Bytes> = Vec::new();
        for sealed in &durable.sealed {
            let r = &sealed.chunk;
            let path = layout.segment(sealed.segment);
            let bytes = object_store::ObjectStoreExt::get_range(
                self.clean_store.as_ref(),
                &path,
                r.position..r.position + r.length,
            )
            .await
            .map_err(|e| format!("stream {index}: sealed chunk in {path} unreadable: {e}"))?;
            let chunk = strata_segments::segment::decode_chunk(&bytes)
                .map_err(|e| format!("stream {index}: sealed chunk in {path}: {e}"))?;
            pages.extend(chunk.pages);
        }
        pages.extend(durable.pages.iter().map(|p| p.bytes.clone()));
        let mut out = BTreeMap::new();
        for page in &pages {
            let header = strata_segments::parse_header(page).map_err(|e| e.to_string())?;
            let cipher = self
                .cipher
                .page_cipher(&header.routing_key, header.key_version);
            let opened = open_page(&cipher, page).map_err(|e| e.to_string())?;
            for record in opened.records {
                out.insert(record.offset, record.payload);
            }
        }
        Ok(Some(out))
    }
}

/// Why an owner's view could not be taken.
enum ViewError {
    /// The owner found it no longer owns the shard.
    Superseded,
    Failed(String),
}

/// Why a stream could not be read to its tail.
enum ReadError {
    /// The owner does not have this incarnation.
    Missing,
    /// The owner found it no longer owns the shard.
    Superseded,
    Failed(String),
}

use ReadError::Missing;
