//! What the simulation knows must hold: per stream slot, its current
//! incarnation, every acknowledged record, every record a check has seen, the
//! `Stream-Seq` values acknowledged appends carried, whether it was closed;
//! and, across all streams, the payloads of appends refused with a definite
//! answer (payloads are unique in a run, so a refused one must never show).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use bytes::Bytes;

use crate::error::EngineError;
use crate::ids::StreamRef;

/// One stream slot.
#[derive(Debug, Clone)]
pub(super) struct StreamModel {
    /// The incarnation appends go to now.
    pub stream: StreamRef,
    /// Created (confirmed) and not deleted since.
    pub live: bool,
    /// The tail a confirmed close answered with.
    pub closed_at: Option<u64>,
    /// Offset → payload of every acknowledged record of this incarnation.
    pub acked: BTreeMap<u64, Bytes>,
    /// Every record of this incarnation a check has seen.
    pub seen: BTreeMap<u64, Bytes>,
    /// First offset → `Stream-Seq` of acknowledged appends that carried one.
    pub seqs: BTreeMap<u64, Bytes>,
    /// The next `Stream-Seq` value to hand out (zero-padded, so bytes order
    /// is numeric order).
    pub next_seq: u64,
    /// The incarnation's consumer group was configured (confirmed).
    pub consumer: bool,
    /// Positions the consumer's acknowledged changes finished…
    pub consumer_done: BTreeSet<u64>,
    /// …and those of changes refused with a definite answer.
    pub consumer_refused: BTreeSet<u64>,
    /// The next position a consumer change finishes.
    pub next_done: u64,
    /// The queue consumer's leases and settles (`queue.rs`).
    pub queue: super::queue_model::QueueModel,
}

impl StreamModel {
    pub fn new(stream: StreamRef) -> Self {
        StreamModel {
            stream,
            live: false,
            closed_at: None,
            acked: BTreeMap::new(),
            seen: BTreeMap::new(),
            seqs: BTreeMap::new(),
            next_seq: 1,
            consumer: false,
            consumer_done: BTreeSet::new(),
            consumer_refused: BTreeSet::new(),
            next_done: 0,
            queue: super::queue_model::QueueModel::default(),
        }
    }

    /// A new incarnation replaces a deleted one: nothing of the old holds.
    pub fn reincarnate(&mut self) {
        let next = StreamRef {
            id: self.stream.id,
            incarnation: self.stream.incarnation + 1,
        };
        let next_seq = self.next_seq;
        *self = StreamModel::new(next);
        self.next_seq = next_seq;
    }
}

/// Counts of what the workload did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkloadStats {
    pub acked_appends: u64,
    pub refused_appends: u64,
    pub unknown_appends: u64,
    pub acked_records: u64,
    pub producer_requests: u64,
    pub producer_duplicates: u64,
    pub stream_seq_appends: u64,
    pub deletes: u64,
    pub closes: u64,
    pub seals: u64,
    pub shutdowns: u64,
    pub rollbacks: u64,
    pub recoveries: u64,
    pub refused_repairs: u64,
    pub power_losses: u64,
    pub consumer_changes: u64,
    pub queue_deliveries: u64,
    pub queue_acks: u64,
    pub dead_letters: u64,
    pub dead_letter_checks: u64,
}

impl WorkloadStats {
    pub fn add(&mut self, o: &WorkloadStats) {
        self.acked_appends += o.acked_appends;
        self.refused_appends += o.refused_appends;
        self.unknown_appends += o.unknown_appends;
        self.acked_records += o.acked_records;
        self.producer_requests += o.producer_requests;
        self.producer_duplicates += o.producer_duplicates;
        self.stream_seq_appends += o.stream_seq_appends;
        self.deletes += o.deletes;
        self.closes += o.closes;
        self.seals += o.seals;
        self.shutdowns += o.shutdowns;
        self.rollbacks += o.rollbacks;
        self.recoveries += o.recoveries;
        self.refused_repairs += o.refused_repairs;
        self.power_losses += o.power_losses;
        self.consumer_changes += o.consumer_changes;
        self.queue_deliveries += o.queue_deliveries;
        self.queue_acks += o.queue_acks;
        self.dead_letters += o.dead_letters;
        self.dead_letter_checks += o.dead_letter_checks;
    }
}

#[derive(Debug, Default)]
pub(super) struct Model {
    pub streams: Vec<StreamModel>,
    /// Payloads of appends refused with a definite answer.
    pub refused: HashSet<Bytes>,
    pub violations: Vec<String>,
    pub stats: WorkloadStats,
    /// Dead letters whose append was acknowledged (`queue.rs`).
    pub dead_letters_acked: BTreeSet<Bytes>,
}

/// Whether an error says for certain that the request changed nothing.
/// Only `OutcomeUnknown` leaves it open: every other refusal is given before
/// anything is staged, or for objects that cannot be in anyone's log.
pub(super) fn is_definite(error: &EngineError) -> bool {
    !matches!(error, EngineError::OutcomeUnknown)
}

impl Model {
    pub fn slot(&self, stream: &StreamRef) -> Option<usize> {
        self.streams.iter().position(|s| s.stream == *stream)
    }

    /// An append to `stream` was acknowledged with records at `first..next`.
    pub fn record_ack(
        &mut self,
        stream: &StreamRef,
        first: u64,
        next: u64,
        payloads: &[Bytes],
        seq: Option<&Bytes>,
    ) {
        self.stats.acked_appends += 1;
        self.stats.acked_records += payloads.len() as u64;
        // An older incarnation's records are gone with it.
        let Some(index) = self.slot(stream) else {
            return;
        };
        if next - first != payloads.len() as u64 {
            self.violations.push(format!(
                "stream {index}: ack {first}..{next} for {} records",
                payloads.len()
            ));
        }
        let model = &mut self.streams[index];
        if let Some(tail) = model.closed_at {
            if next > tail {
                self.violations.push(format!(
                    "stream {index}: records {first}..{next} acknowledged past the close at {tail}"
                ));
            }
        }
        if let Some(seq) = seq {
            model.seqs.insert(first, seq.clone());
        }
        let mut clashes = Vec::new();
        for (i, payload) in payloads.iter().enumerate() {
            let offset = first + i as u64;
            if let Some(previous) = model.acked.insert(offset, payload.clone()) {
                if previous != *payload {
                    clashes.push(format!(
                        "stream {index}: offset {offset} acknowledged for {previous:?} and for {payload:?}"
                    ));
                }
            }
        }
        self.violations.extend(clashes);
    }

    /// An append was answered with `error`.
    pub fn record_refusal(&mut self, payloads: &[Bytes], error: &EngineError) {
        if is_definite(error) {
            self.stats.refused_appends += 1;
            self.refused.extend(payloads.iter().cloned());
        } else {
            self.stats.unknown_appends += 1;
        }
    }

    /// Checks the durable consumer state the newest owner holds for stream
    /// `index` against the changes acknowledged before it was read.
    pub fn check_consumer(
        &self,
        index: usize,
        done: Option<&crate::consumer::durable::DoneSet>,
        acked: &BTreeSet<u64>,
    ) -> Result<(), String> {
        let model = &self.streams[index];
        let Some(done) = done else {
            return Err(format!(
                "stream {index}: its confirmed consumer group is gone"
            ));
        };
        if let Some(lost) = acked.iter().find(|p| !done.contains(**p)) {
            return Err(format!(
                "stream {index}: an acknowledged consumer change (position {lost} done) is lost"
            ));
        }
        if let Some(refused) = model.consumer_refused.iter().find(|p| done.contains(**p)) {
            return Err(format!(
                "stream {index}: a consumer change refused with a definite answer (position {refused}) is in the state"
            ));
        }
        Ok(())
    }

    /// Checks what an owner shows of stream `index` (offset → payload, read
    /// to its tail) against the model. `current` is the newest owner: its
    /// view must hold every acknowledged and every seen record.
    pub fn check_view(
        &self,
        index: usize,
        records: &BTreeMap<u64, Bytes>,
        acked: &BTreeMap<u64, Bytes>,
    ) -> Result<(), String> {
        let model = &self.streams[index];
        for (offset, payload) in acked {
            if records.get(offset) != Some(payload) {
                return Err(format!(
                    "stream {index}: acknowledged record {payload:?} at offset {offset} is not readable (found {:?})",
                    records.get(offset)
                ));
            }
        }
        for (offset, payload) in &model.seen {
            if records.get(offset) != Some(payload) {
                return Err(format!(
                    "stream {index}: record {payload:?} seen at offset {offset} is gone (found {:?}): it was visible before it was durable",
                    records.get(offset)
                ));
            }
        }
        if let Some((offset, payload)) = records.iter().find(|(_, p)| self.refused.contains(*p)) {
            return Err(format!(
                "stream {index}: record {payload:?} at offset {offset} was refused with a definite answer, yet it is in the log"
            ));
        }
        if let Some(tail) = model.closed_at {
            if let Some((offset, _)) = records.range(tail..).next() {
                return Err(format!(
                    "stream {index}: a record at offset {offset} follows the close at {tail}"
                ));
            }
        }
        let mut last: Option<&Bytes> = None;
        for (offset, seq) in &model.seqs {
            if records.contains_key(offset) {
                if last.is_some_and(|l| l >= seq) {
                    return Err(format!(
                        "stream {index}: Stream-Seq {seq:?} at offset {offset} does not increase"
                    ));
                }
                last = Some(seq);
            }
        }
        Ok(())
    }
}
