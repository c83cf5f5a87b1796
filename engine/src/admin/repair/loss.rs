//! What a candidate manifest would lose, compared with the evidence: records
//! present in the store it leaves unreachable, and acknowledged changes
//! without records (closes, deletes, creations, producer and `Stream-Seq`
//! state) it would undo. A candidate's state must tile ([`whole`]).

use std::collections::BTreeMap;

use super::evidence::{Evidence, Incarnation};
use super::report::{LostChange, StreamAfter};
use crate::admin::inspect::StreamSummary;
use crate::admin::verify::{check_stream_offsets, RecordRange};
use crate::shard::{LogView, StreamStatus, StreamTable};
use hex::encode as hex;

/// Whether every live stream of `view` holds each of its records exactly
/// once, from offset 0 to its tail (sealed chunks, then unsealed pages).
pub(super) fn whole(view: &LogView) -> Result<(), String> {
    for s in view.streams.streams.values() {
        check_stream_offsets(s)
            .map_err(|why| format!("stream {}: {why}", hex(s.tail.stream.id)))?;
    }
    Ok(())
}

/// Streams' next offsets as a view recovers them, sorted by stream id.
pub(super) fn streams_after(table: &StreamTable) -> Vec<StreamAfter> {
    let mut out: Vec<StreamAfter> = table
        .streams
        .values()
        .map(|s| {
            let summary = StreamSummary::of(s);
            StreamAfter {
                stream_id: summary.stream_id,
                incarnation: summary.incarnation,
                status: summary.status,
                next_offset: summary.next_offset,
            }
        })
        .collect();
    out.sort_by(|a, b| a.stream_id.cmp(&b.stream_id));
    out
}

/// Stranded WAL records start, for a reader, where the recovered stream ends:
/// the missing object's records are lost too.
pub(super) fn from_recovered(ranges: Vec<RecordRange>, table: &StreamTable) -> Vec<RecordRange> {
    ranges
        .into_iter()
        .map(|mut r| {
            if let Some(s) = table.streams.values().find(|s| {
                hex(s.tail.stream.id) == r.stream_id && s.tail.stream.incarnation == r.incarnation
            }) {
                r.from = r.from.min(s.tail.next_offset);
            }
            r
        })
        .collect()
}

/// What choosing a candidate that recovers `table` loses: records, plus one
/// per undone change (when the current manifest's log can be read).
pub(super) fn loss_count(view: &LogView, evidence: &Evidence) -> u64 {
    let records: u64 = lost_ranges(&view.streams, &evidence.physical)
        .iter()
        .map(|l| l.to - l.from)
        .sum();
    records + changes_lost(view, evidence).len() as u64
}

/// The changes a candidate recovering `view` would undo: compared with
/// the current manifest's log when it can be read; and, whatever else is
/// known, the WAL objects the candidate's walk cannot reach (a gap before
/// them: what they held, garbage collected or damaged, is beyond its reach).
pub(super) fn changes_lost(view: &LogView, evidence: &Evidence) -> Vec<LostChange> {
    let mut out = match &evidence.current_view {
        Some(Ok(current)) => lost_changes(&view.streams, &current.streams),
        _ => Vec::new(),
    };
    if view.tombstones_walked > 0 {
        out.push(LostChange {
            stream_id: None,
            incarnation: 0,
            change: format!(
                "the restored log passes {} WAL objects garbage collection replaced with tombstones: the closes, deletes and producer states they held cannot be verified",
                view.tombstones_walked
            ),
        });
    }
    if let Some(floor) = evidence.replay_floor.filter(|f| view.end_slot < *f) {
        out.push(LostChange {
            stream_id: None,
            incarnation: 0,
            change: format!(
                "the restored log ends at WAL slot {} below the replay point {floor} the shard had reached: the WAL objects in between were collected, and the closes, deletes and producer states sealed from them cannot be verified",
                view.end_slot
            ),
        });
    } else if let Some(wal) = evidence.wal {
        if wal.end > view.end_slot {
            out.push(LostChange {
                stream_id: None,
                incarnation: 0,
                change: format!(
                    "the restored log ends at WAL slot {} but the store holds WAL objects up to slot {}: the closes, deletes and producer states sealed from the objects in between cannot be verified",
                    view.end_slot,
                    wal.end - 1
                ),
            });
        }
    }
    out
}

/// The acknowledged changes `current` (what the current manifest and its log
/// recover) holds that `candidate` does not: a newer incarnation's creation,
/// a delete, a close, a producer's progress, a `Stream-Seq`. Records are
/// compared separately ([`lost_ranges`]).
pub(super) fn lost_changes(candidate: &StreamTable, current: &StreamTable) -> Vec<LostChange> {
    let mut out = Vec::new();
    let mut ids: Vec<&[u8; 16]> = current.streams.keys().collect();
    ids.sort();
    for id in ids {
        let now = &current.streams[id].tail;
        let change = |what: String| LostChange {
            stream_id: Some(hex(id)),
            incarnation: now.stream.incarnation,
            change: what,
        };
        let Some(then) = candidate.streams.get(id).map(|s| &s.tail) else {
            out.push(change("its creation would be undone".into()));
            continue;
        };
        if then.stream.incarnation < now.stream.incarnation {
            out.push(change(format!(
                "incarnation {} would replace it",
                then.stream.incarnation
            )));
            continue;
        }
        if then.stream.incarnation > now.stream.incarnation {
            continue;
        }
        match (now.status, then.status) {
            (StreamStatus::Deleted, StreamStatus::Deleted) => continue,
            (StreamStatus::Deleted, _) => {
                out.push(change("its delete would be undone".into()));
                continue;
            }
            (StreamStatus::Closed, StreamStatus::Open) => {
                out.push(change("its close would be undone".into()))
            }
            _ => {}
        }
        for (producer, state) in &now.producers {
            let behind = then
                .producers
                .get(producer)
                .is_none_or(|t| (t.epoch, t.seq) < (state.epoch, state.seq));
            if behind {
                out.push(change(format!(
                    "producer {producer:?} would go back from epoch {} sequence {}",
                    state.epoch, state.seq
                )));
            }
        }
        if now.stream_seq.is_some() && then.stream_seq < now.stream_seq {
            out.push(change("its last Stream-Seq would be undone".into()));
        }
    }
    out
}

/// Records physically present beyond what `table` recovers.
pub(super) fn lost_ranges(
    table: &StreamTable,
    physical: &BTreeMap<Incarnation, u64>,
) -> Vec<RecordRange> {
    let mut out = Vec::new();
    for ((id, incarnation), end) in physical {
        let recovered = table
            .streams
            .get(id)
            .filter(|s| s.tail.stream.incarnation == *incarnation)
            .map_or(0, |s| s.tail.next_offset);
        // A newer incarnation recovered means this one was replaced.
        let replaced = table
            .streams
            .get(id)
            .is_some_and(|s| s.tail.stream.incarnation > *incarnation);
        if recovered < *end && !replaced {
            out.push(RecordRange {
                stream_id: hex(id),
                incarnation: *incarnation,
                from: recovered,
                to: *end,
            });
        }
    }
    out
}
