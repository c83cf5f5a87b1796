//! Consumer groups: the state machine of one consumer of one stream
//! (contract: docs/API.md §8b, "Consumer groups").
//!
//! A consumer hands a stream's records out as leases, **at least once** and
//! **first in, first out per routing key**: at most one lease per routing key
//! is live at a time, covering the key's oldest unsettled record; other keys
//! are leased in parallel. A lease ends when it is acknowledged (the record
//! is done), retried (released, visible again after a delay), or when its
//! visibility deadline passes (released at the next pull). Every delivery
//! counts an attempt; a record whose next delivery would exceed
//! `max_attempts` is handed out as *poison* instead, to be dead-lettered and
//! then acknowledged ([`Consumer::dead_lettered`]).
//!
//! The machine is a pure function of its inputs — the records discovered in
//! the stream, the commands, and the time each command carries. It never
//! reads a clock or the store. Every change of state is a
//! [`ConsumerEvent`]: a command decides its events from the state it meets,
//! then applies them, and hands them to the caller. Applying the same events
//! to a new consumer ([`Consumer::apply`]) rebuilds the same state, which is
//! what a log of them (the shard's WAL, once it carries them) needs.
//!
//! Invariants (checked by `debug_assert!` and the model test):
//! * a key has at most one lease, and it covers the key's oldest pending
//!   record;
//! * a record is never delivered again once acknowledged or dead-lettered;
//! * a delivery's attempt count never exceeds `max_attempts`;
//! * at most [`PENDING_MAX`] discovered records wait at once (discovery
//!   pauses beyond), and a settle names at most [`SETTLE_ITEMS_MAX`] tokens.

pub mod durable;
mod event;
#[cfg(test)]
mod model_tests;

use std::collections::{BTreeMap, HashSet, VecDeque};

use durable::{DoneSet, DurableConsumer, HeadState};
pub use event::{ConsumerConfig, ConsumerEvent, RecordRef};

use bytes::Bytes;

/// Discovered, unacknowledged records kept at once.
pub const PENDING_MAX: usize = 100_000;
/// Tokens one settle may name.
pub const SETTLE_ITEMS_MAX: usize = 3_000;

/// What a lease token names: the record, and which delivery of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LeaseRef {
    pub routing_key: Bytes,
    pub position: u64,
    pub lease: u64,
}

impl LeaseRef {
    /// The record this lease is on.
    pub fn record(&self) -> RecordRef {
        RecordRef {
            routing_key: self.routing_key.clone(),
            position: self.position,
        }
    }
}

/// One record handed out under a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub lease: LeaseRef,
    pub attempts: u32,
    pub deadline_ms: u64,
}

/// A record whose attempts are spent: dead-letter it, then call
/// [`Consumer::dead_lettered`] (or [`Consumer::dead_letter_failed`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Poison {
    pub routing_key: Bytes,
    pub position: u64,
    pub attempts: u32,
}

impl Poison {
    /// The record to dead-letter.
    pub fn record(&self) -> RecordRef {
        RecordRef {
            routing_key: self.routing_key.clone(),
            position: self.position,
        }
    }
}

/// What a pull hands out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pulled {
    pub deliveries: Vec<Delivery>,
    pub poison: Vec<Poison>,
}

/// One settle: acknowledgements, retries (with their delays) and extensions
/// (with their new visibility), applied together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settle {
    pub acks: Vec<LeaseRef>,
    pub retries: Vec<(LeaseRef, u64)>,
    pub extends: Vec<(LeaseRef, u64)>,
}

/// What a settle did; tokens that were not live leases count as stale.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settled {
    pub acked: usize,
    pub retried: usize,
    pub extended: usize,
    pub stale: usize,
}

/// Why a settle was refused whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SettleError {
    #[error("a settle names at most {SETTLE_ITEMS_MAX} tokens")]
    TooManyItems,
}

/// An event that does not fit the state it is applied to (it names another
/// record than the key's oldest): the log and the state disagree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a consumer event names position {position}, not the key's oldest pending record")]
pub struct EventMismatch {
    pub position: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lease {
    id: u64,
    deadline_ms: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct KeyState {
    /// Discovered records not yet settled, oldest first.
    pending: VecDeque<u64>,
    /// Deliveries of the oldest pending record so far.
    head_attempts: u32,
    /// The oldest pending record is not handed out before this.
    visible_at_ms: u64,
    lease: Option<Lease>,
    /// The oldest pending record was handed out as poison and waits for
    /// its dead letter.
    dead_lettering: bool,
}

impl KeyState {
    fn head(&self) -> Option<u64> {
        self.pending.front().copied()
    }

    /// Ends the head record (acknowledged or dead-lettered).
    fn finish_head(&mut self) {
        self.pending.pop_front();
        self.head_attempts = 0;
        self.visible_at_ms = 0;
        self.lease = None;
        self.dead_lettering = false;
    }
}

/// One consumer's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Consumer {
    config: ConsumerConfig,
    /// Positions below this were assigned to their keys.
    discovered: u64,
    keys: BTreeMap<Bytes, KeyState>,
    pending_total: usize,
    /// The last lease id given.
    last_lease: u64,
    /// Pulls start after this key (round robin over keys).
    after_key: Option<Bytes>,
    /// After a restore: positions already done that discovery skips, and
    /// the durable state of keys' oldest records not yet found again. Both
    /// empty once discovery passed them.
    skip: DoneSet,
    restored: BTreeMap<Bytes, HeadState>,
}

impl Consumer {
    pub fn new(config: ConsumerConfig) -> Consumer {
        assert!(config.max_attempts >= 1 && config.max_batch >= 1);
        Consumer {
            config,
            discovered: 0,
            keys: BTreeMap::new(),
            pending_total: 0,
            last_lease: 0,
            after_key: None,
            skip: DoneSet::default(),
            restored: BTreeMap::new(),
        }
    }

    /// A consumer rebuilt from its durable state. Discovery then starts at
    /// the done floor, skips what is done, and gives each key's oldest
    /// record its durable state when it finds it again.
    pub fn restore(durable: &DurableConsumer) -> Consumer {
        let mut consumer = Consumer::new(durable.setup.config);
        consumer.discovered = durable.done.floor;
        consumer.last_lease = durable.last_lease;
        consumer.after_key = durable.after_key.clone();
        consumer.skip = durable.done.clone();
        consumer.restored = durable.heads.clone();
        consumer.prune_restore_state();
        consumer
    }

    /// Every position below this is done (or is no record): the lowest
    /// pending record, or the discovery frontier.
    pub fn done_floor(&self) -> u64 {
        self.keys
            .values()
            .filter_map(KeyState::head)
            .min()
            .unwrap_or(self.discovered)
            .min(self.discovered)
    }

    /// Drops restore state that discovery has passed.
    fn prune_restore_state(&mut self) {
        let discovered = self.discovered;
        self.restored.retain(|_, h| h.position >= discovered);
        if self.skip.ranges().all(|(_, end)| end <= discovered) {
            self.skip = DoneSet::default();
        }
    }

    pub fn config(&self) -> ConsumerConfig {
        self.config
    }

    /// Where discovery continues, if there is room for more records.
    pub fn discover_from(&self) -> Option<u64> {
        (self.pending_total < PENDING_MAX).then_some(self.discovered)
    }

    /// Takes records `(position, routing key)` found in the stream from
    /// [`Consumer::discover_from`] on, in position order; `scanned_to` is
    /// where the scan that found them ended (records below it that are not
    /// listed do not exist). Stops when [`PENDING_MAX`] records wait and
    /// returns how many it took; discovery then resumes after the last one.
    pub fn discover(
        &mut self,
        records: &[(u64, Bytes)],
        scanned_to: u64,
        events: &mut Vec<ConsumerEvent>,
    ) -> usize {
        let room = PENDING_MAX.saturating_sub(self.pending_total);
        let mut fresh: Vec<(u64, Bytes)> = records
            .iter()
            .filter(|(position, _)| *position >= self.discovered && !self.skip.contains(*position))
            .cloned()
            .collect();
        let all_taken = fresh.len() <= room;
        fresh.truncate(room);
        let scanned_to = match (all_taken, fresh.last()) {
            (true, _) => scanned_to,
            (false, Some((last, _))) => last + 1,
            (false, None) => self.discovered,
        };
        let taken = fresh.len();
        if fresh.is_empty() && scanned_to <= self.discovered {
            return 0;
        }
        self.emit(
            ConsumerEvent::Discovered {
                records: fresh,
                scanned_to,
            },
            events,
        );
        taken
    }

    /// Records not yet settled, given the stream's tail.
    pub fn backlog(&self, tail: u64) -> u64 {
        self.pending_total as u64 + tail.saturating_sub(self.discovered)
    }

    /// Hands out up to `max` (at most `max_batch`) leases at `now_ms`, one
    /// per routing key, keys in turn; releases expired leases first.
    pub fn pull(&mut self, now_ms: u64, max: usize, events: &mut Vec<ConsumerEvent>) -> Pulled {
        self.pull_for(now_ms, max, self.config.visibility_ms, events)
    }

    /// [`Consumer::pull`] with leases of `visibility_ms` instead of the
    /// configured visibility.
    pub fn pull_for(
        &mut self,
        now_ms: u64,
        max: usize,
        visibility_ms: u64,
        events: &mut Vec<ConsumerEvent>,
    ) -> Pulled {
        let max = max.min(self.config.max_batch);
        let mut out = Pulled::default();
        if max == 0 {
            return out;
        }
        let expired: Vec<RecordRef> = self
            .keys
            .iter()
            .filter(|(_, s)| s.lease.is_some_and(|l| l.deadline_ms <= now_ms))
            .filter_map(|(k, s)| {
                Some(RecordRef {
                    routing_key: k.clone(),
                    position: s.head()?,
                })
            })
            .collect();
        for record in expired {
            self.emit(ConsumerEvent::Expired { record }, events);
        }
        let order: Vec<Bytes> = match &self.after_key {
            Some(after) => self
                .keys
                .range::<Bytes, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
                .chain(self.keys.range::<Bytes, _>(..=after))
                .map(|(k, _)| k.clone())
                .collect(),
            None => self.keys.keys().cloned().collect(),
        };
        for routing_key in order {
            if out.deliveries.len() >= max {
                break;
            }
            let Some(state) = self.keys.get(&routing_key) else {
                continue;
            };
            let Some(position) = state.head() else {
                continue;
            };
            if state.lease.is_some() || state.dead_lettering || state.visible_at_ms > now_ms {
                continue;
            }
            if state.head_attempts >= self.config.max_attempts {
                out.poison.push(Poison {
                    routing_key: routing_key.clone(),
                    position,
                    attempts: state.head_attempts,
                });
                let record = RecordRef {
                    routing_key,
                    position,
                };
                self.emit(ConsumerEvent::Poisoned { record }, events);
                continue;
            }
            let attempts = state.head_attempts + 1;
            let lease = self.last_lease + 1;
            let deadline_ms = now_ms.saturating_add(visibility_ms);
            debug_assert!(attempts <= self.config.max_attempts);
            out.deliveries.push(Delivery {
                lease: LeaseRef {
                    routing_key: routing_key.clone(),
                    position,
                    lease,
                },
                attempts,
                deadline_ms,
            });
            self.emit(
                ConsumerEvent::Delivered {
                    record: RecordRef {
                        routing_key,
                        position,
                    },
                    lease,
                    deadline_ms,
                },
                events,
            );
        }
        out
    }

    /// The earliest time after `now_ms` at which a pull could hand out
    /// something it cannot now (a lease expires, a retry becomes visible).
    pub fn next_change_ms(&self, now_ms: u64) -> Option<u64> {
        self.keys
            .values()
            .filter(|s| s.head().is_some() && !s.dead_lettering)
            .filter_map(|s| match s.lease {
                Some(lease) => Some(lease.deadline_ms),
                None => (s.visible_at_ms > now_ms).then_some(s.visible_at_ms),
            })
            .min()
    }

    /// How many keys wait for a dead letter.
    pub fn dead_letters_waiting(&self) -> usize {
        self.keys.values().filter(|s| s.dead_lettering).count()
    }

    /// Records handed out as poison and still waiting for their dead
    /// letter (a restored consumer resumes them).
    pub fn awaiting_dead_letter(&self) -> Vec<Poison> {
        self.keys
            .iter()
            .filter(|(_, s)| s.dead_lettering)
            .filter_map(|(k, s)| {
                Some(Poison {
                    routing_key: k.clone(),
                    position: s.head()?,
                    attempts: s.head_attempts,
                })
            })
            .collect()
    }

    /// Whether `lease` is live at `now_ms`.
    fn is_live(&self, lease: &LeaseRef, now_ms: u64) -> bool {
        self.keys.get(&lease.routing_key).is_some_and(|state| {
            state.head() == Some(lease.position)
                && state
                    .lease
                    .is_some_and(|l| l.id == lease.lease && now_ms < l.deadline_ms)
        })
    }

    /// Applies a settle as one change: every token is judged against the
    /// state before it (a token named twice counts once, then as stale).
    pub fn settle<'a>(
        &mut self,
        now_ms: u64,
        settle: &'a Settle,
        events: &mut Vec<ConsumerEvent>,
    ) -> Result<Settled, SettleError> {
        let items = settle.acks.len() + settle.retries.len() + settle.extends.len();
        if items > SETTLE_ITEMS_MAX {
            return Err(SettleError::TooManyItems);
        }
        let mut seen: HashSet<&LeaseRef> = HashSet::new();
        let mut take = |lease: &'a LeaseRef, consumer: &Consumer| -> bool {
            consumer.is_live(lease, now_ms) && seen.insert(lease)
        };
        let mut decided: Vec<ConsumerEvent> = Vec::new();
        let mut done = Settled::default();
        for lease in &settle.acks {
            if take(lease, self) {
                done.acked += 1;
                decided.push(ConsumerEvent::Finished {
                    record: lease.record(),
                });
            }
        }
        for (lease, delay_ms) in &settle.retries {
            if take(lease, self) {
                done.retried += 1;
                decided.push(ConsumerEvent::Retried {
                    record: lease.record(),
                    visible_at_ms: now_ms.saturating_add(*delay_ms),
                });
            }
        }
        for (lease, visibility_ms) in &settle.extends {
            if take(lease, self) {
                done.extended += 1;
                decided.push(ConsumerEvent::Extended {
                    record: lease.record(),
                    deadline_ms: now_ms.saturating_add(*visibility_ms),
                });
            }
        }
        done.stale = items - done.acked - done.retried - done.extended;
        for event in decided {
            self.emit(event, events);
        }
        Ok(done)
    }

    /// Whether `record` is its key's oldest record, handed out as poison.
    fn is_poison(&self, record: &RecordRef) -> bool {
        self.keys
            .get(&record.routing_key)
            .is_some_and(|s| s.dead_lettering && s.head() == Some(record.position))
    }

    /// The poison `record` is dead-lettered (durably): it is done. False if
    /// it was not its key's poison record.
    pub fn dead_lettered(&mut self, record: &RecordRef, events: &mut Vec<ConsumerEvent>) -> bool {
        let poisoned = self.is_poison(record);
        if poisoned {
            let record = record.clone();
            self.emit(ConsumerEvent::Finished { record }, events);
        }
        poisoned
    }

    /// Dead-lettering `record` failed: the next pull hands it out as poison
    /// again.
    pub fn dead_letter_failed(&mut self, record: &RecordRef, events: &mut Vec<ConsumerEvent>) {
        if self.is_poison(record) {
            let record = record.clone();
            self.emit(ConsumerEvent::DeadLetterFailed { record }, events);
        }
    }

    fn emit(&mut self, event: ConsumerEvent, events: &mut Vec<ConsumerEvent>) {
        let applied = self.apply(&event);
        debug_assert!(applied.is_ok(), "a command's own event fits: {applied:?}");
        events.push(event);
    }

    /// The state of `record`'s key if `record` is its oldest pending one.
    fn head_state(&mut self, record: &RecordRef) -> Result<&mut KeyState, EventMismatch> {
        self.keys
            .get_mut(&record.routing_key)
            .filter(|s| s.head() == Some(record.position))
            .ok_or(EventMismatch {
                position: record.position,
            })
    }

    /// Applies one event (a command's, or one read back from a log); an
    /// event that names another record than its key's oldest changes
    /// nothing and is refused.
    pub fn apply(&mut self, event: &ConsumerEvent) -> Result<(), EventMismatch> {
        match event {
            ConsumerEvent::Discovered {
                records,
                scanned_to,
            } => {
                for (position, routing_key) in records {
                    let state = self.keys.entry(routing_key.clone()).or_default();
                    if state.pending.is_empty() {
                        if let Some(head) = self
                            .restored
                            .remove(routing_key)
                            .filter(|h| h.position == *position)
                        {
                            state.head_attempts = head.attempts;
                            state.visible_at_ms = head.visible_at_ms;
                            state.dead_lettering = head.dead_lettering;
                            state.lease = head.lease.map(|l| Lease {
                                id: l.id,
                                deadline_ms: l.deadline_ms,
                            });
                        }
                    }
                    state.pending.push_back(*position);
                    self.pending_total += 1;
                    self.discovered = self.discovered.max(position + 1);
                }
                self.discovered = self.discovered.max(*scanned_to);
                self.prune_restore_state();
            }
            ConsumerEvent::Expired { record } => self.head_state(record)?.lease = None,
            ConsumerEvent::Delivered {
                record,
                lease,
                deadline_ms,
            } => {
                let state = self.head_state(record)?;
                state.head_attempts += 1;
                state.lease = Some(Lease {
                    id: *lease,
                    deadline_ms: *deadline_ms,
                });
                self.last_lease = self.last_lease.max(*lease);
                self.after_key = Some(record.routing_key.clone());
            }
            ConsumerEvent::Poisoned { record } => self.head_state(record)?.dead_lettering = true,
            ConsumerEvent::Finished { record } => {
                let state = self.head_state(record)?;
                state.finish_head();
                let empty = state.pending.is_empty();
                self.pending_total -= 1;
                if empty {
                    self.keys.remove(&record.routing_key);
                }
            }
            ConsumerEvent::Retried {
                record,
                visible_at_ms,
            } => {
                let state = self.head_state(record)?;
                state.lease = None;
                state.visible_at_ms = *visible_at_ms;
            }
            ConsumerEvent::Extended {
                record,
                deadline_ms,
            } => {
                if let Some(lease) = self.head_state(record)?.lease.as_mut() {
                    lease.deadline_ms = *deadline_ms;
                }
            }
            ConsumerEvent::DeadLetterFailed { record } => {
                self.head_state(record)?.dead_lettering = false;
            }
        }
        debug_assert_eq!(
            self.keys.values().map(|s| s.pending.len()).sum::<usize>(),
            self.pending_total
        );
        Ok(())
    }
}
