//! What of a consumer group is durable, how a change to it is written in
//! the shard's WAL (a [`ConsumerChange`] in a consumer entry), and how a
//! stream's consumers are written in an index run (a [`ConsumerTable`]).
//! docs/FORMATS.md, "Consumer changes" and "Consumer tables", is the prose
//! twin of the codecs here.
//!
//! Discovery is never logged. What is durable per consumer is its
//! configuration and generation, which positions are done (every position
//! below `done.floor`, and ranges above it), and the state of each key's
//! oldest record that was ever handed out (attempts, lease, retry time,
//! dead-letter mark). A live [`Consumer`](super::Consumer) is rebuilt from
//! that by [`Consumer::restore`](super::Consumer::restore) and a fresh
//! discovery from `done.floor` that skips done positions: every pending
//! record is found again, each key's oldest first, so each key's head
//! meets its durable state.
//!
//! Invariants: folding a change never fails on its meaning (only a change
//! that does not decode is refused, before it is logged); the done ranges
//! are disjoint, not adjacent, and above the floor; a table holds at most
//! one consumer per name; generations only grow per stream, so a recreated
//! consumer never accepts its predecessor's tokens.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};
use strata_codec::{ReadBytes, ReadError};

use super::event::{ConsumerConfig, ConsumerEvent, RecordRef};

const CHANGE_VERSION: u8 = 1;
const TABLE_VERSION: u8 = 1;
const CHANGE_CONFIGURE: u8 = 1;
const CHANGE_DELETE: u8 = 2;
const CHANGE_RECORDS: u8 = 3;
const OP_DELIVERED: u8 = 1;
const OP_EXPIRED: u8 = 2;
const OP_POISONED: u8 = 3;
const OP_FINISHED: u8 = 4;
const OP_RETRIED: u8 = 5;
const OP_EXTENDED: u8 = 6;
const OP_DEAD_LETTER_FAILED: u8 = 7;
/// Longest routing key a change names.
const ROUTING_KEY_BYTES_MAX: usize = 1024;
/// Largest settings document a configuration carries.
pub const SETTINGS_BYTES_MAX: usize = 16 << 10;
/// Most record events in one change.
pub const CHANGE_EVENTS_MAX: usize = 10_000;
/// Most consumers one stream may have.
pub const CONSUMERS_PER_STREAM_MAX: usize = 100_000;

/// Why bytes are not a consumer change or table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConsumerCodecError {
    #[error("truncated while reading {field}")]
    Truncated { field: &'static str },
    #[error("{field} is invalid: {reason}")]
    Invalid {
        field: &'static str,
        reason: &'static str,
    },
}

impl From<ReadError> for ConsumerCodecError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Truncated { field } => ConsumerCodecError::Truncated { field },
            ReadError::NotUtf8 { field } => ConsumerCodecError::Invalid {
                field,
                reason: "not UTF-8",
            },
        }
    }
}

fn invalid<T>(field: &'static str, reason: &'static str) -> Result<T, ConsumerCodecError> {
    Err(ConsumerCodecError::Invalid { field, reason })
}

/// A consumer's configuration as it is logged: the engine's settings and the
/// caller's document (opaque here, answered back on reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerSetup {
    pub config: ConsumerConfig,
    pub settings: Bytes,
}

/// One logged change to one consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConsumerChange {
    /// Creates the consumer at `generation` (above every generation the
    /// stream has seen).
    Configure {
        generation: u64,
        setup: ConsumerSetup,
    },
    Delete {
        generation: u64,
    },
    /// Record events of the consumer at `generation` (ignored if that is
    /// not the live one), and its done floor after them: every position
    /// below it is done or is no record. `Discovered` events are never
    /// logged.
    Records {
        generation: u64,
        floor: u64,
        events: Vec<ConsumerEvent>,
    },
}

/// A lease as it is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableLease {
    pub id: u64,
    pub deadline_ms: u64,
}

/// The durable state of a key's oldest record once it was handed out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeadState {
    pub position: u64,
    pub attempts: u32,
    pub lease: Option<DurableLease>,
    pub visible_at_ms: u64,
    pub dead_lettering: bool,
}

/// Positions that are done: all below `floor`, and the ranges above it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DoneSet {
    pub floor: u64,
    /// start → end (exclusive); disjoint, not adjacent, starts above `floor`.
    ranges: BTreeMap<u64, u64>,
}

impl DoneSet {
    pub fn contains(&self, position: u64) -> bool {
        position < self.floor
            || self
                .ranges
                .range(..=position)
                .next_back()
                .is_some_and(|(_, end)| position < *end)
    }

    /// Ranges above the floor, in order.
    pub fn ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().map(|(s, e)| (*s, *e))
    }

    pub fn insert(&mut self, position: u64) {
        if self.contains(position) {
            return;
        }
        let mut start = position;
        let mut end = position + 1;
        if let Some((s, e)) = self.ranges.range(..position).next_back() {
            if *e == position {
                start = *s;
            }
        }
        if let Some(e) = self.ranges.get(&end).copied() {
            self.ranges.remove(&end);
            end = e;
        }
        self.ranges.insert(start, end);
        if start == self.floor {
            self.ranges.remove(&start);
            self.floor = end;
        }
        debug_assert!(self.ranges.keys().all(|s| *s > self.floor));
    }

    /// Everything below `floor` is done.
    pub fn raise_floor(&mut self, floor: u64) {
        if floor <= self.floor {
            return;
        }
        self.floor = floor;
        let below: Vec<(u64, u64)> = self.ranges.range(..=floor).map(|(s, e)| (*s, *e)).collect();
        for (start, end) in below {
            self.ranges.remove(&start);
            self.floor = self.floor.max(end);
        }
    }

    fn from_parts(floor: u64, ranges: Vec<(u64, u64)>) -> Result<DoneSet, ConsumerCodecError> {
        let mut last = floor;
        for (start, end) in &ranges {
            if *start <= last || end <= start {
                return invalid("done ranges", "must be ordered, apart and above the floor");
            }
            last = *end;
        }
        Ok(DoneSet {
            floor,
            ranges: ranges.into_iter().collect(),
        })
    }
}

/// One consumer's durable state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableConsumer {
    pub generation: u64,
    pub setup: ConsumerSetup,
    pub last_lease: u64,
    /// The key of the last delivery (pulls go round the keys from it).
    pub after_key: Option<Bytes>,
    pub done: DoneSet,
    pub heads: BTreeMap<Bytes, HeadState>,
}

impl DurableConsumer {
    fn new(generation: u64, setup: ConsumerSetup) -> Self {
        DurableConsumer {
            generation,
            setup,
            last_lease: 0,
            after_key: None,
            done: DoneSet::default(),
            heads: BTreeMap::new(),
        }
    }

    /// Folds one record event (a replay out of step changes what it names
    /// and nothing else).
    fn fold(&mut self, event: &ConsumerEvent) {
        match event {
            ConsumerEvent::Discovered { .. } => {}
            ConsumerEvent::Delivered {
                record,
                lease,
                deadline_ms,
            } => {
                let state = head_of(&mut self.heads, record);
                state.attempts = state.attempts.saturating_add(1);
                state.lease = Some(DurableLease {
                    id: *lease,
                    deadline_ms: *deadline_ms,
                });
                self.last_lease = self.last_lease.max(*lease);
                self.after_key = Some(record.routing_key.clone());
            }
            ConsumerEvent::Expired { record } => head_of(&mut self.heads, record).lease = None,
            ConsumerEvent::Poisoned { record } => {
                head_of(&mut self.heads, record).dead_lettering = true;
            }
            ConsumerEvent::Finished { record } => {
                if self
                    .heads
                    .get(&record.routing_key)
                    .is_some_and(|s| s.position == record.position)
                {
                    self.heads.remove(&record.routing_key);
                }
                self.done.insert(record.position);
            }
            ConsumerEvent::Retried {
                record,
                visible_at_ms,
            } => {
                let state = head_of(&mut self.heads, record);
                state.lease = None;
                state.visible_at_ms = *visible_at_ms;
            }
            ConsumerEvent::Extended {
                record,
                deadline_ms,
            } => {
                if let Some(lease) = head_of(&mut self.heads, record).lease.as_mut() {
                    lease.deadline_ms = *deadline_ms;
                }
            }
            ConsumerEvent::DeadLetterFailed { record } => {
                head_of(&mut self.heads, record).dead_lettering = false;
            }
        }
    }
}

/// The durable state of `record`'s key, reset if it was about an older
/// record of the key.
fn head_of<'a>(heads: &'a mut BTreeMap<Bytes, HeadState>, record: &RecordRef) -> &'a mut HeadState {
    let fresh = HeadState {
        position: record.position,
        attempts: 0,
        lease: None,
        visible_at_ms: 0,
        dead_lettering: false,
    };
    let state = heads
        .entry(record.routing_key.clone())
        .or_insert_with(|| fresh.clone());
    if state.position != record.position {
        *state = fresh;
    }
    state
}

/// Every consumer of one stream incarnation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerTable {
    /// The highest generation the stream ever gave a consumer.
    pub generation_max: u64,
    pub consumers: BTreeMap<String, DurableConsumer>,
}

impl ConsumerTable {
    pub fn is_empty(&self) -> bool {
        self.generation_max == 0 && self.consumers.is_empty()
    }

    /// Folds one change of consumer `name`.
    pub fn fold(&mut self, name: &str, change: &ConsumerChange) {
        match change {
            ConsumerChange::Configure { generation, setup } => {
                self.generation_max = self.generation_max.max(*generation);
                self.consumers.insert(
                    name.to_string(),
                    DurableConsumer::new(*generation, setup.clone()),
                );
            }
            ConsumerChange::Delete { generation } => {
                if self
                    .consumers
                    .get(name)
                    .is_some_and(|c| c.generation == *generation)
                {
                    self.consumers.remove(name);
                }
            }
            ConsumerChange::Records {
                generation,
                floor,
                events,
            } => {
                if let Some(consumer) = self
                    .consumers
                    .get_mut(name)
                    .filter(|c| c.generation == *generation)
                {
                    for event in events {
                        consumer.fold(event);
                    }
                    consumer.done.raise_floor(*floor);
                    let floor = consumer.done.floor;
                    consumer.heads.retain(|_, h| h.position >= floor);
                }
            }
        }
    }
}

fn put_key(b: &mut BytesMut, key: &[u8]) {
    b.put_u16_le(key.len() as u16);
    b.put_slice(key);
}

fn read_key(b: &mut Bytes) -> Result<Bytes, ConsumerCodecError> {
    let len = b.read_u16("routing key length")? as usize;
    if len > ROUTING_KEY_BYTES_MAX {
        return invalid("routing key", "longer than 1024 bytes");
    }
    Ok(b.read_bytes(len, "routing key")?)
}

fn put_setup(b: &mut BytesMut, setup: &ConsumerSetup) {
    b.put_u64_le(setup.config.visibility_ms);
    b.put_u32_le(setup.config.max_attempts);
    b.put_u32_le(setup.config.max_batch as u32);
    b.put_u32_le(setup.settings.len() as u32);
    b.put_slice(&setup.settings);
}

fn read_setup(b: &mut Bytes) -> Result<ConsumerSetup, ConsumerCodecError> {
    let visibility_ms = b.read_u64("visibility")?;
    let max_attempts = b.read_u32("max attempts")?;
    let max_batch = b.read_u32("max batch")? as usize;
    if max_attempts == 0 || max_batch == 0 {
        return invalid("configuration", "attempts and batch are at least 1");
    }
    let len = b.read_u32("settings length")? as usize;
    if len > SETTINGS_BYTES_MAX {
        return invalid("settings", "longer than 16 KiB");
    }
    Ok(ConsumerSetup {
        config: ConsumerConfig {
            visibility_ms,
            max_attempts,
            max_batch,
        },
        settings: b.read_bytes(len, "settings")?,
    })
}

fn put_record(b: &mut BytesMut, op: u8, record: &RecordRef) {
    b.put_u8(op);
    put_key(b, &record.routing_key);
    b.put_u64_le(record.position);
}

fn put_event(b: &mut BytesMut, event: &ConsumerEvent) {
    match event {
        ConsumerEvent::Discovered { .. } => {}
        ConsumerEvent::Delivered {
            record,
            lease,
            deadline_ms,
        } => {
            put_record(b, OP_DELIVERED, record);
            b.put_u64_le(*lease);
            b.put_u64_le(*deadline_ms);
        }
        ConsumerEvent::Expired { record } => put_record(b, OP_EXPIRED, record),
        ConsumerEvent::Poisoned { record } => put_record(b, OP_POISONED, record),
        ConsumerEvent::Finished { record } => put_record(b, OP_FINISHED, record),
        ConsumerEvent::Retried {
            record,
            visible_at_ms,
        } => {
            put_record(b, OP_RETRIED, record);
            b.put_u64_le(*visible_at_ms);
        }
        ConsumerEvent::Extended {
            record,
            deadline_ms,
        } => {
            put_record(b, OP_EXTENDED, record);
            b.put_u64_le(*deadline_ms);
        }
        ConsumerEvent::DeadLetterFailed { record } => put_record(b, OP_DEAD_LETTER_FAILED, record),
    }
}

fn read_event(b: &mut Bytes) -> Result<ConsumerEvent, ConsumerCodecError> {
    let op = b.read_u8("event op")?;
    let record = RecordRef {
        routing_key: read_key(b)?,
        position: b.read_u64("position")?,
    };
    Ok(match op {
        OP_DELIVERED => ConsumerEvent::Delivered {
            record,
            lease: b.read_u64("lease")?,
            deadline_ms: b.read_u64("deadline")?,
        },
        OP_EXPIRED => ConsumerEvent::Expired { record },
        OP_POISONED => ConsumerEvent::Poisoned { record },
        OP_FINISHED => ConsumerEvent::Finished { record },
        OP_RETRIED => ConsumerEvent::Retried {
            record,
            visible_at_ms: b.read_u64("visible at")?,
        },
        OP_EXTENDED => ConsumerEvent::Extended {
            record,
            deadline_ms: b.read_u64("deadline")?,
        },
        OP_DEAD_LETTER_FAILED => ConsumerEvent::DeadLetterFailed { record },
        _ => return invalid("event op", "unknown"),
    })
}

impl ConsumerChange {
    /// Whether a `Records` change has nothing to log.
    pub fn is_empty(&self) -> bool {
        match self {
            ConsumerChange::Records { events, .. } => events
                .iter()
                .all(|e| matches!(e, ConsumerEvent::Discovered { .. })),
            _ => false,
        }
    }

    pub fn encode(&self) -> Bytes {
        let mut b = BytesMut::new();
        b.put_u8(CHANGE_VERSION);
        match self {
            ConsumerChange::Configure { generation, setup } => {
                b.put_u8(CHANGE_CONFIGURE);
                b.put_u64_le(*generation);
                put_setup(&mut b, setup);
            }
            ConsumerChange::Delete { generation } => {
                b.put_u8(CHANGE_DELETE);
                b.put_u64_le(*generation);
            }
            ConsumerChange::Records {
                generation,
                floor,
                events,
            } => {
                b.put_u8(CHANGE_RECORDS);
                b.put_u64_le(*generation);
                b.put_u64_le(*floor);
                let logged: Vec<&ConsumerEvent> = events
                    .iter()
                    .filter(|e| !matches!(e, ConsumerEvent::Discovered { .. }))
                    .collect();
                b.put_u32_le(logged.len() as u32);
                for event in logged {
                    put_event(&mut b, event);
                }
            }
        }
        b.freeze()
    }

    pub fn decode(bytes: &Bytes) -> Result<ConsumerChange, ConsumerCodecError> {
        let mut b = bytes.clone();
        if b.read_u8("version")? != CHANGE_VERSION {
            return invalid("version", "unsupported");
        }
        let kind = b.read_u8("kind")?;
        let generation = b.read_u64("generation")?;
        let change = match kind {
            CHANGE_CONFIGURE => ConsumerChange::Configure {
                generation,
                setup: read_setup(&mut b)?,
            },
            CHANGE_DELETE => ConsumerChange::Delete { generation },
            CHANGE_RECORDS => {
                let floor = b.read_u64("floor")?;
                let count = b.read_u32("event count")? as usize;
                if count > CHANGE_EVENTS_MAX {
                    return invalid("event count", "more than 10,000");
                }
                let mut events = Vec::with_capacity(count.min(b.len() / 11));
                for _ in 0..count {
                    events.push(read_event(&mut b)?);
                }
                ConsumerChange::Records {
                    generation,
                    floor,
                    events,
                }
            }
            _ => return invalid("kind", "unknown"),
        };
        if !b.is_empty() {
            return invalid("change", "trailing bytes");
        }
        Ok(change)
    }
}

const NO_LEASE: u64 = 0;

impl ConsumerTable {
    /// The table as an index run carries it (empty bytes: an empty table).
    pub fn encode(&self) -> Bytes {
        if self.is_empty() {
            return Bytes::new();
        }
        let mut b = BytesMut::new();
        b.put_u8(TABLE_VERSION);
        b.put_u64_le(self.generation_max);
        b.put_u32_le(self.consumers.len() as u32);
        for (name, c) in &self.consumers {
            put_key(&mut b, name.as_bytes());
            b.put_u64_le(c.generation);
            put_setup(&mut b, &c.setup);
            b.put_u64_le(c.last_lease);
            match &c.after_key {
                Some(key) => {
                    b.put_u8(1);
                    put_key(&mut b, key);
                }
                None => b.put_u8(0),
            }
            b.put_u64_le(c.done.floor);
            b.put_u32_le(c.done.ranges.len() as u32);
            for (start, end) in c.done.ranges() {
                b.put_u64_le(start);
                b.put_u64_le(end);
            }
            b.put_u32_le(c.heads.len() as u32);
            for (key, h) in &c.heads {
                put_key(&mut b, key);
                b.put_u64_le(h.position);
                b.put_u32_le(h.attempts);
                let (id, deadline) = h.lease.map_or((NO_LEASE, 0), |l| (l.id, l.deadline_ms));
                b.put_u64_le(id);
                b.put_u64_le(deadline);
                b.put_u64_le(h.visible_at_ms);
                b.put_u8(u8::from(h.dead_lettering));
            }
        }
        b.freeze()
    }

    pub fn decode(bytes: &Bytes) -> Result<ConsumerTable, ConsumerCodecError> {
        if bytes.is_empty() {
            return Ok(ConsumerTable::default());
        }
        let mut b = bytes.clone();
        if b.read_u8("version")? != TABLE_VERSION {
            return invalid("version", "unsupported");
        }
        let generation_max = b.read_u64("generation max")?;
        let count = b.read_u32("consumer count")? as usize;
        if count > CONSUMERS_PER_STREAM_MAX {
            return invalid("consumer count", "more than 100,000");
        }
        let mut consumers = BTreeMap::new();
        for _ in 0..count {
            let name = String::from_utf8(read_key(&mut b)?.to_vec())
                .or(invalid("consumer name", "not UTF-8"))?;
            let generation = b.read_u64("generation")?;
            if generation == 0 || generation > generation_max {
                return invalid("generation", "zero or above the table's highest");
            }
            let setup = read_setup(&mut b)?;
            let last_lease = b.read_u64("last lease")?;
            let after_key = match b.read_u8("after key flag")? {
                0 => None,
                1 => Some(read_key(&mut b)?),
                _ => return invalid("after key flag", "not 0 or 1"),
            };
            let floor = b.read_u64("done floor")?;
            let ranges_len = b.read_u32("done range count")? as usize;
            b.ensure_items(ranges_len, 16, "done ranges")?;
            let ranges = (0..ranges_len)
                .map(|_| Ok((b.read_u64("range start")?, b.read_u64("range end")?)))
                .collect::<Result<Vec<_>, ConsumerCodecError>>()?;
            let done = DoneSet::from_parts(floor, ranges)?;
            let heads_len = b.read_u32("head count")? as usize;
            b.ensure_items(heads_len, 2 + 8 + 4 + 8 * 3 + 1, "heads")?;
            let mut heads = BTreeMap::new();
            for _ in 0..heads_len {
                let key = read_key(&mut b)?;
                let position = b.read_u64("head position")?;
                let attempts = b.read_u32("head attempts")?;
                let id = b.read_u64("lease id")?;
                let deadline_ms = b.read_u64("lease deadline")?;
                let visible_at_ms = b.read_u64("visible at")?;
                let dead_lettering = match b.read_u8("dead-letter mark")? {
                    0 => false,
                    1 => true,
                    _ => return invalid("dead-letter mark", "not 0 or 1"),
                };
                let lease = (id != NO_LEASE).then_some(DurableLease { id, deadline_ms });
                let head = HeadState {
                    position,
                    attempts,
                    lease,
                    visible_at_ms,
                    dead_lettering,
                };
                if heads.insert(key, head).is_some() {
                    return invalid("heads", "a key twice");
                }
            }
            let consumer = DurableConsumer {
                generation,
                setup,
                last_lease,
                after_key,
                done,
                heads,
            };
            if consumers.insert(name, consumer).is_some() {
                return invalid("consumers", "a name twice");
            }
        }
        if !b.is_empty() {
            return invalid("table", "trailing bytes");
        }
        Ok(ConsumerTable {
            generation_max,
            consumers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn setup() -> ConsumerSetup {
        ConsumerSetup {
            config: ConsumerConfig {
                visibility_ms: 30_000,
                max_attempts: 5,
                max_batch: 10,
            },
            settings: Bytes::from_static(br#"{"maxAttempts":5}"#),
        }
    }

    fn record(key: &'static [u8], position: u64) -> RecordRef {
        RecordRef {
            routing_key: Bytes::from_static(key),
            position,
        }
    }

    #[test]
    fn done_sets_merge_ranges_and_raise_the_floor() {
        let mut done = DoneSet::default();
        for p in [3, 5, 4, 9] {
            done.insert(p);
        }
        assert_eq!(done.ranges().collect::<Vec<_>>(), vec![(3, 6), (9, 10)]);
        assert!(!done.contains(0) && done.contains(4) && !done.contains(6));
        for p in [1, 0, 2] {
            done.insert(p);
        }
        assert_eq!(done.floor, 6);
        assert_eq!(done.ranges().collect::<Vec<_>>(), vec![(9, 10)]);
        done.insert(2);
        assert_eq!(done.floor, 6);
    }

    #[test]
    fn changes_and_tables_round_trip_and_fold() {
        let mut table = ConsumerTable::default();
        let changes = vec![
            ConsumerChange::Configure {
                generation: 1,
                setup: setup(),
            },
            ConsumerChange::Records {
                generation: 1,
                floor: 0,
                events: vec![
                    ConsumerEvent::Delivered {
                        record: record(b"a", 0),
                        lease: 1,
                        deadline_ms: 100,
                    },
                    ConsumerEvent::Delivered {
                        record: record(b"b", 1),
                        lease: 2,
                        deadline_ms: 100,
                    },
                    ConsumerEvent::Finished {
                        record: record(b"b", 1),
                    },
                    ConsumerEvent::Retried {
                        record: record(b"a", 0),
                        visible_at_ms: 50,
                    },
                    ConsumerEvent::Poisoned {
                        record: record(b"c", 7),
                    },
                ],
            },
            // A change of another generation is ignored.
            ConsumerChange::Records {
                generation: 9,
                floor: 5,
                events: vec![ConsumerEvent::Finished {
                    record: record(b"a", 0),
                }],
            },
        ];
        for change in &changes {
            let decoded = ConsumerChange::decode(&change.encode()).unwrap();
            assert_eq!(&decoded, change);
            table.fold("workers", &decoded);
        }
        let c = &table.consumers["workers"];
        assert_eq!(c.last_lease, 2);
        assert!(c.done.contains(1) && !c.done.contains(0));
        assert_eq!(c.heads[&Bytes::from_static(b"a")].attempts, 1);
        assert_eq!(c.heads[&Bytes::from_static(b"a")].visible_at_ms, 50);
        assert!(c.heads[&Bytes::from_static(b"c")].dead_lettering);
        assert_eq!(ConsumerTable::decode(&table.encode()).unwrap(), table);
        table.fold("workers", &ConsumerChange::Delete { generation: 1 });
        assert!(table.consumers.is_empty());
        assert_eq!(table.generation_max, 1, "generations are never reused");
        assert_eq!(ConsumerTable::decode(&table.encode()).unwrap(), table);
        assert_eq!(
            ConsumerTable::decode(&Bytes::new()).unwrap(),
            ConsumerTable::default()
        );
    }

    #[test]
    fn truncations_and_flips_are_errors_or_other_values_never_panics() {
        let mut table = ConsumerTable::default();
        table.fold(
            "w",
            &ConsumerChange::Configure {
                generation: 1,
                setup: setup(),
            },
        );
        let bytes = table.encode();
        for len in 1..bytes.len() {
            assert!(ConsumerTable::decode(&bytes.slice(..len)).is_err());
        }
        let change = ConsumerChange::Configure {
            generation: 3,
            setup: setup(),
        }
        .encode();
        for len in 0..change.len() {
            assert!(ConsumerChange::decode(&change.slice(..len)).is_err());
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let bytes = Bytes::from(data);
            let _ = ConsumerChange::decode(&bytes);
            let _ = ConsumerTable::decode(&bytes);
        }

        #[test]
        fn done_sets_match_a_plain_set(positions in proptest::collection::vec(0u64..64, 0..100)) {
            let mut done = DoneSet::default();
            let mut model = std::collections::BTreeSet::new();
            for p in positions {
                done.insert(p);
                model.insert(p);
                for q in 0..66 {
                    prop_assert_eq!(done.contains(q), model.contains(&q));
                }
                let rebuilt = DoneSet::from_parts(done.floor, done.ranges().collect()).unwrap();
                prop_assert_eq!(&rebuilt, &done);
            }
        }
    }
}
