//! The SlateDB baseline of `strata bench compare`: the same log (streams of
//! encrypted records, appends acknowledged once durable in the object store)
//! built on SlateDB 0.18 instead of Strata's own engine.
//!
//! * One database per shard (here: one), at `shards/<name>` in the store.
//! * A stream is a key prefix. Each append is one `WriteBatch` holding
//!   * `d ‖ stream id (16 B) ‖ first offset (u64, big-endian)` → the sealed
//!     page of the append's records, one key per page: exactly the bytes Strata
//!     writes (`strata_segments::{prepare_body, seal_page}`: zstd-1 when it
//!     pays, AES-256-GCM-SIV under the stream's page key, a fresh random nonce),
//!     so both engines do the same compression and crypto work;
//!   * `t ‖ stream id` → the stream's next offset (u64, big-endian), the tail
//!     pointer a re-open loads, written atomically with the records.
//! * The append waits for `WriteHandle::await_durable`: SlateDB answers once
//!   the WAL object holding the batch is in the store (its WAL flusher ships
//!   one WAL SST at a time, every `flush_interval`).
//! * Offsets are assigned per stream under a lock held until the batch is in
//!   SlateDB's memtable, so a stream's batches enter the WAL in offset order.
//! * Reads are range scans of `d ‖ stream id`, at `DurabilityLevel::Remote`
//!   (only durable data), opening each page.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ::slatedb::config::{CloseOptions, DurabilityLevel, ScanOptions, Settings};
use ::slatedb::{Db, WriteBatch};
use bytes::Bytes;
use object_store::ObjectStore;
use strata_engine::{Entropy, OsEntropy, StreamRef};
use strata_segments::{
    open_page, plan_pages, prepare_body, seal_page, PreparedBody, Record, StreamCipher,
};
use tokio::sync::Mutex;

use super::error::BenchError;

const DATA_TAG: u8 = b'd';
const TAIL_TAG: u8 = b't';
const STREAM_ID_BYTES: usize = 16;

/// The SlateDB settings the baseline changes; everything else is SlateDB's default.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct SlateTuning {
    /// How often the WAL flusher ships the WAL buffer (one PUT at a time).
    pub flush_interval_ms: u64,
    /// Memtable bytes at which it is frozen and flushed to an L0 SST (with
    /// the WAL flush count, at least 4,096 in 0.18, this bounds what a re-open
    /// replays).
    pub l0_sst_size_bytes: usize,
    /// How often the database reads its manifest back.
    pub manifest_poll_interval_ms: u64,
    /// Bytes one scan fetch reads ahead (SlateDB's default: one block).
    pub scan_read_ahead_bytes: usize,
    /// Block fetches one scan runs at once (SlateDB's default: 1).
    pub scan_fetch_tasks: usize,
}

impl SlateTuning {
    fn settings(&self) -> Settings {
        Settings {
            flush_interval: Some(Duration::from_millis(self.flush_interval_ms)),
            l0_sst_size_bytes: self.l0_sst_size_bytes,
            manifest_poll_interval: Duration::from_millis(self.manifest_poll_interval_ms),
            ..Settings::default()
        }
    }

    fn scan_options(&self) -> ScanOptions {
        ScanOptions {
            durability_filter: DurabilityLevel::Remote,
            read_ahead_bytes: self.scan_read_ahead_bytes,
            max_fetch_tasks: self.scan_fetch_tasks,
            ..ScanOptions::default()
        }
    }
}

/// One stream of the log: its id and the next offset to assign.
struct StreamSlot {
    id: [u8; STREAM_ID_BYTES],
    next_offset: Mutex<u64>,
}

/// Offsets `first..next` given to one append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AppendedRange {
    pub first: u64,
    pub next: u64,
}

/// One page of an append before its offsets are known.
struct PlannedPage {
    /// Index of the page's first record in the append.
    first_record: u64,
    body: PreparedBody,
}

/// What a read of a stream returned.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadTotals {
    pub records: u64,
    pub payload_bytes: u64,
}

impl ReadTotals {
    pub fn add(&mut self, record: &Record) {
        self.records += 1;
        self.payload_bytes += record.payload.len() as u64;
    }
}

/// A shard's log on SlateDB.
pub(crate) struct SlateLog {
    db: Db,
    streams: Vec<StreamSlot>,
    cipher: Arc<StreamCipher>,
    tuning: SlateTuning,
}

fn data_key(stream: &[u8; STREAM_ID_BYTES], offset: u64) -> Bytes {
    let mut key = Vec::with_capacity(1 + STREAM_ID_BYTES + 8);
    key.push(DATA_TAG);
    key.extend_from_slice(stream);
    key.extend_from_slice(&offset.to_be_bytes());
    Bytes::from(key)
}

fn tail_key(stream: &[u8; STREAM_ID_BYTES]) -> Bytes {
    let mut key = Vec::with_capacity(1 + STREAM_ID_BYTES);
    key.push(TAIL_TAG);
    key.extend_from_slice(stream);
    Bytes::from(key)
}

fn corrupt(what: &str) -> BenchError {
    BenchError::Verify(format!("SlateDB baseline: {what}"))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl SlateLog {
    /// Opens the shard's database (a new writer fences any earlier one and
    /// replays its WAL), then loads every stream's tail pointer.
    pub async fn open(
        store: Arc<dyn ObjectStore>,
        shard: &str,
        streams: &[StreamRef],
        cipher: Arc<StreamCipher>,
        tuning: &SlateTuning,
    ) -> Result<Self, BenchError> {
        let db = Db::builder(format!("shards/{shard}"), store)
            .with_settings(tuning.settings())
            .build()
            .await?;
        let mut log = SlateLog {
            db,
            streams: streams
                .iter()
                .map(|s| StreamSlot {
                    id: s.id,
                    next_offset: Mutex::new(0),
                })
                .collect(),
            cipher,
            tuning: tuning.clone(),
        };
        log.load_tails().await?;
        Ok(log)
    }

    /// Reads every tail pointer (one scan of the `t` prefix).
    async fn load_tails(&mut self) -> Result<(), BenchError> {
        let mut tails = std::collections::HashMap::new();
        let mut scan = self
            .db
            .scan_with_options(
                [TAIL_TAG].as_slice()..[TAIL_TAG + 1].as_slice(),
                &self.tuning.scan_options(),
            )
            .await?;
        while let Some(entry) = scan.next().await? {
            let id: [u8; STREAM_ID_BYTES] = entry.key[1..]
                .try_into()
                .map_err(|_| corrupt("tail key length"))?;
            let next: [u8; 8] = entry.value[..]
                .try_into()
                .map_err(|_| corrupt("tail value length"))?;
            tails.insert(id, u64::from_be_bytes(next));
        }
        for slot in &mut self.streams {
            *slot.next_offset.get_mut() = tails.get(&slot.id).copied().unwrap_or(0);
        }
        Ok(())
    }

    /// Appends `records` to stream number `stream` (modulo the stream count)
    /// and answers once they are durable.
    pub async fn append(
        &self,
        stream: usize,
        records: &[Bytes],
    ) -> Result<AppendedRange, BenchError> {
        let slot = &self.streams[stream % self.streams.len()];
        let timestamp_ms = now_ms();
        let page_cipher = self.cipher.page_cipher(b"", 0);
        let mut pages = Vec::new();
        for (i, range) in plan_pages(records.iter().map(Bytes::len))
            .into_iter()
            .enumerate()
        {
            let mut body = prepare_body(&records[range.clone()], timestamp_ms)?;
            body.append_start = i == 0;
            pages.push(PlannedPage {
                first_record: range.start as u64,
                body,
            });
        }
        let count = records.len() as u64;
        let mut next_offset = slot.next_offset.lock().await;
        let appended = AppendedRange {
            first: *next_offset,
            next: *next_offset + count,
        };
        let mut batch = WriteBatch::new();
        for page in &pages {
            let first = appended.first + page.first_record;
            let sealed = seal_page(&page_cipher, &page.body, first, 0, b"", OsEntropy.bytes12())?;
            batch.put_bytes(data_key(&slot.id, first), sealed);
        }
        batch.put_bytes(
            tail_key(&slot.id),
            Bytes::copy_from_slice(&appended.next.to_be_bytes()),
        );
        let handle = self.db.write(batch).await?;
        *next_offset = appended.next;
        drop(next_offset);
        handle.await_durable().await?;
        Ok(appended)
    }

    /// Every durable record of stream number `stream`, in offset order, each
    /// handed to `each`.
    pub async fn read_all(
        &self,
        stream: usize,
        mut each: impl FnMut(Record),
    ) -> Result<ReadTotals, BenchError> {
        let slot = &self.streams[stream % self.streams.len()];
        let page_cipher = self.cipher.page_cipher(b"", 0);
        let mut totals = ReadTotals::default();
        let mut scan = self
            .db
            .scan_with_options(
                data_key(&slot.id, 0)..data_key(&slot.id, u64::MAX),
                &self.tuning.scan_options(),
            )
            .await?;
        while let Some(entry) = scan.next().await? {
            let page = open_page(&page_cipher, &entry.value)?;
            for record in page.records {
                totals.add(&record);
                each(record);
            }
        }
        Ok(totals)
    }

    /// Records in all streams, by their tails.
    pub async fn records_total(&self) -> u64 {
        let mut total = 0;
        for slot in &self.streams {
            total += *slot.next_offset.lock().await;
        }
        total
    }

    /// A clean close: flushes the memtable to an L0 SST.
    pub async fn close(&self) -> Result<(), BenchError> {
        Ok(self.db.close().await?)
    }

    /// Stops without a final flush, as a crash after the last acknowledgement
    /// would (everything acknowledged is already in WAL objects).
    pub async fn crash(&self) -> Result<(), BenchError> {
        Ok(self
            .db
            .close_with_options(CloseOptions::default().with_flush_type(None))
            .await?)
    }
}
