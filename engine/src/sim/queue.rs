//! The simulated queue: a second consumer group on every stream
//! ([`SIM_QUEUE`]) driven through the real state machine
//! ([`crate::consumer::Consumer`]) the way the server's live consumers
//! drive it: restore from the owner's durable state, discover the stream's
//! records by reading it, decide a pull or a settle, log the decision as one
//! consumer change, and hand out what was decided only once that change is
//! acknowledged. A record whose attempts are spent is dead-lettered as the
//! server does: its mark is logged, the dead letter is appended to
//! [`DLQ_STREAM`] under the producer `__dlq:{consumer}:{record}` (epoch 1,
//! seq 0), and only once that is durable is the source record finished.
//!
//! Each owner decides for one stream at a time (the server's per-consumer
//! lock); owners race each other and fencing decides. Every operation
//! restores from the durable state, so an owner's view is exactly what its
//! shard holds — the state a server rebuilds after any failure.
//!
//! Invariants checked (`queue_model.rs`, and [`World::check_dead_letters`]):
//! * no two leases on one routing key are live at once (a lease is live
//!   from its acknowledged delivery until its deadline or an acknowledged
//!   settle of it);
//! * no record is delivered once it was acknowledged done;
//! * per key, a record is delivered only once every earlier record of the
//!   key handed out before is done;
//! * the dead-letter stream holds every acknowledged dead letter exactly
//!   once, however often owners crashed or raced between a record's mark
//!   and its finish.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use rand::Rng;

use super::model::{is_definite, Model};
use super::queue_model::SIM_QUEUE;
use super::world::{SimFailure, Trace, World};
use crate::consumer::durable::ConsumerChange;
use crate::consumer::{Consumer, ConsumerEvent, Delivery, LeaseRef, Poison, Settle};
use crate::env::Clock;
use crate::error::EngineError;
use crate::ids::StreamRef;
use crate::shard::{AppendRequest, ProducerClaim, ReadLimits, Shard};
use strata_segments::StreamCipher;

/// Where dead letters go: a stream outside the model's slots, so nothing
/// closes or deletes it.
pub(super) const DLQ_STREAM: StreamRef = StreamRef {
    id: [0xd1; 16],
    incarnation: 1,
};
/// Read rounds of one discovery, and records per round.
const DISCOVER_ROUNDS_MAX: usize = 8;
const DISCOVER_RECORDS_MAX: usize = 256;
/// Dead letters one pull appends at most.
const DEAD_LETTERS_PER_PULL_MAX: usize = 4;
/// Read rounds of one dead-letter check.
const DLQ_READ_ROUNDS_MAX: usize = 1_000;
/// The longest one queue operation may take (simulated time).
const OP_TIMEOUT: Duration = Duration::from_secs(3600);

/// What one queue operation does.
#[derive(Debug, Clone)]
enum QueueOp {
    Pull {
        max: usize,
        visibility_ms: u64,
        /// Stop after appending dead letters, before finishing their
        /// sources (the server's crash window between the two steps).
        stop_after_dead_letter: bool,
    },
    Settle(Settle),
}

/// What a queue task needs of the world.
#[derive(Clone)]
struct QueueTask {
    shard: Shard,
    instance: u16,
    index: usize,
    stream: StreamRef,
    cipher: Arc<StreamCipher>,
    clock: Arc<dyn Clock>,
    model: Arc<Mutex<Model>>,
    trace: Arc<Mutex<Trace>>,
}

/// How a logged change ended.
enum Logged {
    Acked,
    Refused,
    Unknown,
}

/// The dead letter of `index`'s record at `position`, and its producer.
fn dead_letter(index: usize, stream: &StreamRef, position: u64) -> (Bytes, String) {
    let name = format!("s{index}i{}p{position}", stream.incarnation);
    (
        Bytes::from(format!("dlq {name}")),
        format!("__dlq:{SIM_QUEUE}:{name}"),
    )
}

impl World {
    /// Starts a few queue operations (pulls, or settles of leases clients
    /// hold), through the newest owner or an older one.
    pub(super) fn spawn_queue_ops(&mut self) {
        let count = self.rng.random_range(1..=4);
        for _ in 0..count {
            let index = self.rng.random_range(0..self.config.streams);
            let Some((shard, instance)) = self.some_owner() else {
                return;
            };
            let (stream, held) = {
                let model = self.model.lock();
                let slot = &model.streams[index];
                if !slot.live || !slot.queue.configured {
                    continue;
                }
                // Clients settle the leases they still hold live.
                let now_ms = self.env.clock.now_ms();
                let held: Vec<LeaseRef> = slot
                    .queue
                    .held
                    .values()
                    .filter(|h| h.deadline_ms > now_ms)
                    .map(|h| h.lease.clone())
                    .collect();
                (slot.stream, held)
            };
            let op = self.queue_op(held);
            let task = QueueTask {
                shard,
                instance,
                index,
                stream,
                cipher: self.cipher.clone(),
                clock: self.env.clock.clone(),
                model: self.model.clone(),
                trace: self.trace.clone(),
            };
            let lock = self.queue_locks.of(instance, index);
            self.tasks.spawn(async move {
                let _serial = lock.lock().await;
                if tokio::time::timeout(OP_TIMEOUT, task.run(op))
                    .await
                    .is_err()
                {
                    task.model.lock().violations.push(format!(
                        "a queue operation on stream {index} never answered"
                    ));
                }
            });
        }
    }

    /// A pull, or (when clients hold leases) a settle of some of them.
    fn queue_op(&mut self, held: Vec<LeaseRef>) -> QueueOp {
        if held.is_empty() || self.rng.random_bool(0.4) {
            return QueueOp::Pull {
                max: self.rng.random_range(1..=4),
                visibility_ms: self.rng.random_range(20..=2_000),
                stop_after_dead_letter: self.rng.random_bool(0.3),
            };
        }
        let mut settle = Settle::default();
        for lease in held {
            match self.rng.random_range(0..10u32) {
                0..=5 => settle.acks.push(lease),
                6..=7 => settle.retries.push((lease, self.rng.random_range(0..=200))),
                8 => settle
                    .extends
                    .push((lease, self.rng.random_range(20..=400))),
                _ => {}
            }
        }
        QueueOp::Settle(settle)
    }

    /// Creates the dead-letter stream (confirmed).
    pub(super) async fn create_dead_letter_stream(&mut self) -> Result<(), SimFailure> {
        for _ in 0..super::workload::LIFECYCLE_ATTEMPTS_MAX {
            self.apply_planned_crashes().await?;
            let Some((shard, id)) = self.current().map(|o| (o.shard.clone(), o.id)) else {
                continue;
            };
            match self
                .on_owner(id, shard.create_stream(DLQ_STREAM, &self.cipher))
                .await
            {
                Some(Ok(_)) => {
                    self.event("created the dead-letter stream".into());
                    return Ok(());
                }
                Some(Err(EngineError::Fenced)) => self.reopen_fenced().await?,
                Some(Err(e)) if super::workload::retryable(&e) => {
                    self.event(format!("create the dead-letter stream: {e}"))
                }
                Some(Err(e)) => return Err(self.fail(format!("dead-letter stream: {e}"))),
                None => {}
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Err(self.fail("could not create the dead-letter stream"))
    }

    /// The newest owner's dead-letter stream holds every acknowledged dead
    /// letter, and none twice. A read that fails skips the check.
    pub(super) async fn check_dead_letters(&self, current: &Shard) -> Result<(), SimFailure> {
        let acked = self.model.lock().dead_letters_acked.clone();
        let mut seen: BTreeMap<Bytes, u64> = BTreeMap::new();
        let mut from = 0;
        for _ in 0..DLQ_READ_ROUNDS_MAX {
            let limits = ReadLimits {
                max_records: 1_000,
                max_bytes: 1 << 20,
            };
            let Ok(batch) = current
                .read(&DLQ_STREAM, from, limits, &self.cipher, None)
                .await
            else {
                return Ok(());
            };
            for record in &batch.records {
                if let Some(first) = seen.insert(record.payload.clone(), record.offset) {
                    return Err(self.fail(format!(
                        "dead letter {:?} is in the dead-letter stream twice (offsets {first} and {})",
                        record.payload, record.offset
                    )));
                }
            }
            if batch.up_to_date() || batch.next_offset <= from {
                break;
            }
            from = batch.next_offset;
        }
        if let Some(lost) = acked.iter().find(|d| !seen.contains_key(*d)) {
            return Err(self.fail(format!("acknowledged dead letter {lost:?} is lost")));
        }
        self.model.lock().stats.dead_letter_checks += 1;
        Ok(())
    }
}

impl QueueTask {
    async fn run(&self, op: QueueOp) {
        let Some(durable) = self.shard.consumer(&self.stream, SIM_QUEUE) else {
            return;
        };
        let mut consumer = Consumer::restore(&durable);
        let mut events = Vec::new();
        if self.discover(&mut consumer, &mut events).await.is_err() {
            return;
        }
        let now_ms = self.clock.now_ms();
        match op {
            QueueOp::Pull {
                max,
                visibility_ms,
                stop_after_dead_letter,
            } => {
                let mut poison = consumer.awaiting_dead_letter();
                let pulled = consumer.pull_for(now_ms, max, visibility_ms, &mut events);
                poison.extend(pulled.poison);
                poison.truncate(DEAD_LETTERS_PER_PULL_MAX);
                match self.log(&consumer, durable.generation, &events).await {
                    Logged::Acked => {}
                    _ => return,
                }
                if !self.handed_out(&events, &pulled.deliveries, now_ms) {
                    return;
                }
                for p in poison {
                    self.dead_letter(
                        &mut consumer,
                        durable.generation,
                        &p,
                        stop_after_dead_letter,
                    )
                    .await;
                }
            }
            QueueOp::Settle(settle) => {
                let Ok(_) = consumer.settle(now_ms, &settle, &mut events) else {
                    return;
                };
                let outcome = self.log(&consumer, durable.generation, &events).await;
                self.note(&events, outcome);
            }
        }
    }

    /// Finds the stream's durable records from the consumer's frontier on.
    async fn discover(
        &self,
        consumer: &mut Consumer,
        events: &mut Vec<ConsumerEvent>,
    ) -> Result<(), EngineError> {
        for _ in 0..DISCOVER_ROUNDS_MAX {
            let Some(from) = consumer.discover_from() else {
                break;
            };
            let limits = ReadLimits {
                max_records: DISCOVER_RECORDS_MAX,
                max_bytes: 1 << 20,
            };
            let batch = self
                .shard
                .read(&self.stream, from, limits, &self.cipher, None)
                .await?;
            let end = batch.tail;
            let records: Vec<(u64, Bytes)> = batch
                .keyed()
                .filter(|(_, r)| r.offset < end)
                .map(|(k, r)| (r.offset, k.clone()))
                .collect();
            let scanned_to = batch.next_offset.min(end);
            if scanned_to <= from && records.is_empty() {
                break;
            }
            consumer.discover(&records, scanned_to.max(from + 1).min(end), events);
            if scanned_to >= end {
                break;
            }
        }
        Ok(())
    }

    /// Logs `events` as one consumer change and waits for its answer.
    async fn log(&self, consumer: &Consumer, generation: u64, events: &[ConsumerEvent]) -> Logged {
        let change = ConsumerChange::Records {
            generation,
            floor: consumer.done_floor(),
            events: events.to_vec(),
        };
        if change.is_empty() {
            return Logged::Acked;
        }
        match self
            .shard
            .change_consumer(self.stream, SIM_QUEUE, &change)
            .await
        {
            Ok(()) => Logged::Acked,
            Err(e) if is_definite(&e) => Logged::Refused,
            Err(_) => Logged::Unknown,
        }
    }

    /// Notes an acknowledged pull: what its events ended, and the leases
    /// clients now hold. False if the stream's incarnation is gone.
    fn handed_out(&self, events: &[ConsumerEvent], deliveries: &[Delivery], now_ms: u64) -> bool {
        let mut model = self.model.lock();
        model.stats.queue_deliveries += deliveries.len() as u64;
        let Some(slot) = model.slot(&self.stream) else {
            return false;
        };
        // Deliveries first: an `Expired` event must not end a lease the
        // model still holds live.
        for d in deliveries {
            if let Err(m) = model.streams[slot].queue.delivered(self.index, d, now_ms) {
                model.violations.push(m);
            }
        }
        model.streams[slot].queue.settled(events);
        true
    }

    /// Notes what a settle's change did, by its outcome.
    fn note(&self, events: &[ConsumerEvent], outcome: Logged) {
        let mut model = self.model.lock();
        let Some(slot) = model.slot(&self.stream) else {
            return;
        };
        match outcome {
            Logged::Acked => {
                model.streams[slot].queue.settled(events);
                let acks = events
                    .iter()
                    .filter(|e| matches!(e, ConsumerEvent::Finished { .. }))
                    .count();
                model.stats.queue_acks += acks as u64;
            }
            Logged::Unknown => model.streams[slot].queue.maybe_settled(events),
            Logged::Refused => {}
        }
    }

    /// Appends `poison`'s dead letter (once, by its producer), then
    /// finishes the source record.
    async fn dead_letter(
        &self,
        consumer: &mut Consumer,
        generation: u64,
        poison: &Poison,
        stop_after_append: bool,
    ) {
        let (payload, producer) = dead_letter(self.index, &self.stream, poison.position);
        let mut request =
            AppendRequest::new(DLQ_STREAM, self.cipher.clone(), vec![payload.clone()]);
        request.producer = Some(ProducerClaim {
            id: producer,
            epoch: 1,
            seq: 0,
            digest: super::workload::digest(std::slice::from_ref(&payload)),
        });
        if self.shard.append(request).await.is_err() {
            return;
        }
        {
            let mut model = self.model.lock();
            model.dead_letters_acked.insert(payload.clone());
            model.stats.dead_letters += 1;
        }
        self.trace.lock().event(&format!(
            "dead letter {} s{} {}",
            self.instance, self.index, poison.position
        ));
        if stop_after_append {
            return;
        }
        let mut events = Vec::new();
        if !consumer.dead_lettered(&poison.record(), &mut events) {
            return;
        }
        let outcome = self.log(consumer, generation, &events).await;
        self.note(&events, outcome);
    }
}
