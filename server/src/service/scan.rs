//! Snapshot scans: every record of a collection, every routing key, up to
//! the durable tail its first page saw (`product::scan_cursor`), each exactly
//! once, in position order (deterministic, and chronological only within a
//! key). A fork's scan walks its sources first, as a read does, and a source
//! contributes only its default key.
//!
//! Invariants: a page never returns a position at or past the snapshot's
//! end, and its cursor moves past every position it returned and no further
//! than the last position it read, so pages tile the snapshot; a page
//! returns at least one record while any is left, so a scan never spins.

use bytes::Bytes;
use strata_engine::ReadLimits;
use strata_segments::StreamKey;

use super::chain::Level;
use super::error::ServiceError;
use super::limits::READ_ROUNDS_MAX;
use super::product::scan_cursor::{ScanCursor, SCAN_TTL_MS};
use super::streams::Streams;

/// Where a scan page starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanFrom {
    /// A new scan: its snapshot is captured now.
    Start,
    Resume(ScanCursor),
}

/// One record of a scan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanItem {
    pub routing_key: Bytes,
    pub payload: Bytes,
}

/// One page of a scan and where the scan stands after it.
#[derive(Debug, Clone)]
pub struct ScanPage {
    pub items: Vec<ScanItem>,
    pub cursor: ScanCursor,
    pub content_type: String,
}

/// A page being filled.
struct PageFill {
    items: Vec<ScanItem>,
    bytes: usize,
    max_bytes: usize,
}

impl PageFill {
    fn full(&self) -> bool {
        !self.items.is_empty() && self.bytes >= self.max_bytes
    }
}

impl Streams {
    /// One page of a scan of `name`, about `max_bytes` of payload (at least
    /// one record while any is left). The caller has checked the cursor's
    /// scope and expiry.
    pub async fn scan(
        &self,
        project: &str,
        name: &str,
        key: &StreamKey,
        from: ScanFrom,
        max_bytes: usize,
    ) -> Result<ScanPage, ServiceError> {
        let (entry, desc) = self.live(project, name).await?;
        let levels = self.chain(project, desc.clone(), key, false).await?;
        let mut cursor = match from {
            ScanFrom::Resume(cursor) => cursor,
            ScanFrom::Start => {
                let (tail, _) = self.tail_of(project, &levels[0], key).await?;
                ScanCursor {
                    end: tail,
                    position: 0,
                    expires_ms: self.now_ms().saturating_add(SCAN_TTL_MS),
                }
            }
        };
        let mut fill = PageFill {
            items: Vec::new(),
            bytes: 0,
            max_bytes: max_bytes.max(1),
        };
        self.scan_levels(project, &levels, &mut cursor, &mut fill, key)
            .await?;
        entry.touch(self.now_ms());
        self.count_read(&desc.value, 1, fill.bytes as u64);
        debug_assert!(cursor.position <= cursor.end);
        Ok(ScanPage {
            items: fill.items,
            cursor,
            content_type: desc.value.content_type.clone(),
        })
    }

    /// Fills `fill` from `cursor.position`, deepest level first, and moves
    /// the cursor past what it read.
    async fn scan_levels(
        &self,
        project: &str,
        levels: &[Level],
        cursor: &mut ScanCursor,
        fill: &mut PageFill,
        key: &StreamKey,
    ) -> Result<(), ServiceError> {
        let mut rounds = 0usize;
        for (depth, level) in levels.iter().enumerate().rev() {
            let end = if depth == 0 {
                cursor.end
            } else {
                level.cap.min(cursor.end)
            };
            // Sources contribute only their default key.
            let routing_key: Option<&[u8]> = if depth == 0 { None } else { Some(b"") };
            while cursor.position < end && !fill.full() && rounds < READ_ROUNDS_MAX {
                rounds += 1;
                let Some(own_from) = cursor.position.checked_sub(level.base) else {
                    return Err(ServiceError::Internal(format!(
                        "scan position {} lies below fork base {}",
                        cursor.position, level.base
                    )));
                };
                let limits = ReadLimits {
                    max_records: (end - cursor.position).min(10_000) as usize,
                    max_bytes: fill.max_bytes.saturating_sub(fill.bytes).max(1),
                };
                let batch = self
                    .read_level(project, level, own_from, limits, key, routing_key)
                    .await?;
                let before = cursor.position;
                for (routing_key, record) in batch.keyed() {
                    let at = level.base + record.offset;
                    if at >= end {
                        break;
                    }
                    fill.bytes += record.payload.len();
                    fill.items.push(ScanItem {
                        routing_key: routing_key.clone(),
                        payload: record.payload.clone(),
                    });
                    cursor.position = at + 1;
                }
                cursor.position = cursor
                    .position
                    .max((level.base + batch.next_offset).min(end));
                if cursor.position == before {
                    // Nothing more is readable below `end` (the collection
                    // was truncated under us?): stop rather than spin.
                    return Err(ServiceError::Internal(format!(
                        "scan made no progress at position {before} of {end}"
                    )));
                }
            }
            if cursor.position < end {
                break;
            }
        }
        Ok(())
    }
}
