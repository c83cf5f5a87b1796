//! The consumer state machine against a plain model: per-key FIFO, one live
//! lease per key, attempt counting, visibility expiry, settle atomicity and
//! dead letters, over random command sequences.

use std::collections::{BTreeSet, HashMap, HashSet};

use bytes::Bytes;
use proptest::prelude::*;

use super::*;

/// The same contract, written the obvious way: the log, a set of settled
/// positions, and maps keyed by position and key.
#[derive(Debug, Default)]
struct Model {
    log: Vec<(u64, Bytes)>,
    done: HashSet<u64>,
    attempts: HashMap<u64, u32>,
    visible_at: HashMap<u64, u64>,
    /// key → (lease id, position, deadline)
    leases: HashMap<Bytes, (u64, u64, u64)>,
    dead_lettering: HashSet<u64>,
    last_lease: u64,
    after_key: Option<Bytes>,
}

impl Model {
    fn head(&self, key: &Bytes) -> Option<u64> {
        self.log
            .iter()
            .filter(|(p, k)| k == key && !self.done.contains(p))
            .map(|(p, _)| *p)
            .min()
    }

    fn keys(&self) -> BTreeSet<Bytes> {
        self.log
            .iter()
            .filter(|(p, _)| !self.done.contains(p))
            .map(|(_, k)| k.clone())
            .collect()
    }

    fn pull(&mut self, config: &ConsumerConfig, now: u64, max: usize) -> Pulled {
        let max = max.min(config.max_batch);
        let mut out = Pulled::default();
        if max == 0 {
            return out;
        }
        self.leases.retain(|_, (_, _, deadline)| *deadline > now);
        let keys: Vec<Bytes> = self.keys().into_iter().collect();
        let start = match &self.after_key {
            Some(after) => keys.iter().position(|k| k > after).unwrap_or(keys.len()),
            None => 0,
        };
        let order: Vec<Bytes> = keys[start..]
            .iter()
            .chain(&keys[..start])
            .cloned()
            .collect();
        for key in order {
            if out.deliveries.len() >= max {
                break;
            }
            let Some(position) = self.head(&key) else {
                continue;
            };
            if self.leases.contains_key(&key)
                || self.dead_lettering.contains(&position)
                || self.visible_at.get(&position).is_some_and(|v| *v > now)
            {
                continue;
            }
            let attempts = self.attempts.entry(position).or_default();
            if *attempts >= config.max_attempts {
                self.dead_lettering.insert(position);
                out.poison.push(Poison {
                    routing_key: key.clone(),
                    position,
                    attempts: *attempts,
                });
                continue;
            }
            *attempts += 1;
            let attempts = *attempts;
            self.last_lease += 1;
            let deadline_ms = now + config.visibility_ms;
            self.leases
                .insert(key.clone(), (self.last_lease, position, deadline_ms));
            out.deliveries.push(Delivery {
                lease: LeaseRef {
                    routing_key: key.clone(),
                    position,
                    lease: self.last_lease,
                },
                attempts,
                deadline_ms,
            });
            self.after_key = Some(key);
        }
        out
    }

    fn live(&self, lease: &LeaseRef, now: u64) -> bool {
        self.leases
            .get(&lease.routing_key)
            .is_some_and(|(id, position, deadline)| {
                *id == lease.lease && *position == lease.position && now < *deadline
            })
    }

    fn settle(&mut self, now: u64, settle: &Settle) -> Settled {
        let mut out = Settled::default();
        let mut taken: HashSet<LeaseRef> = HashSet::new();
        let mut apply: Vec<(LeaseRef, u8, u64)> = Vec::new();
        let items = settle
            .acks
            .iter()
            .map(|l| (l, 0u8, 0u64))
            .chain(settle.retries.iter().map(|(l, d)| (l, 1, *d)))
            .chain(settle.extends.iter().map(|(l, v)| (l, 2, *v)));
        for (lease, kind, value) in items {
            if self.live(lease, now) && taken.insert(lease.clone()) {
                apply.push((lease.clone(), kind, value));
            } else {
                out.stale += 1;
            }
        }
        for (lease, kind, value) in apply {
            match kind {
                0 => {
                    out.acked += 1;
                    self.done.insert(lease.position);
                    self.leases.remove(&lease.routing_key);
                }
                1 => {
                    out.retried += 1;
                    self.leases.remove(&lease.routing_key);
                    self.visible_at.insert(lease.position, now + value);
                }
                _ => {
                    out.extended += 1;
                    if let Some(l) = self.leases.get_mut(&lease.routing_key) {
                        l.2 = now + value;
                    }
                }
            }
        }
        out
    }
}

#[derive(Debug, Clone)]
enum Command {
    Discover(Vec<u8>),
    Advance(u64),
    Pull(usize),
    /// Indices into the deliveries seen so far, and a stale token's lease id.
    Settle {
        acks: Vec<usize>,
        retries: Vec<(usize, u64)>,
        extends: Vec<(usize, u64)>,
        forged: Option<u64>,
    },
    DeadLettered(usize),
    DeadLetterFailed(usize),
}

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        proptest::collection::vec(0u8..4, 1..6).prop_map(Command::Discover),
        (0u64..250).prop_map(Command::Advance),
        (0usize..5).prop_map(Command::Pull),
        (
            proptest::collection::vec(any::<usize>(), 0..3),
            proptest::collection::vec((any::<usize>(), 0u64..200), 0..2),
            proptest::collection::vec((any::<usize>(), 1u64..300), 0..2),
            proptest::option::of(1u64..50),
        )
            .prop_map(|(acks, retries, extends, forged)| Command::Settle {
                acks,
                retries,
                extends,
                forged,
            }),
        any::<usize>().prop_map(Command::DeadLettered),
        any::<usize>().prop_map(Command::DeadLetterFailed),
    ]
}

fn pick<T: Clone>(items: &[T], index: usize) -> Option<T> {
    (!items.is_empty()).then(|| items[index % items.len()].clone())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn the_consumer_behaves_as_the_model(
        max_attempts in 1u32..4,
        commands in proptest::collection::vec(command(), 1..80),
    ) {
        let config = ConsumerConfig { visibility_ms: 100, max_attempts, max_batch: 3 };
        let mut consumer = Consumer::new(config);
        let mut model = Model::default();
        let mut now = 0u64;
        let mut next_position = 0u64;
        let mut tail = 0u64;
        let mut delivered: Vec<LeaseRef> = Vec::new();
        let mut poison: Vec<Poison> = Vec::new();
        let mut dead_letters: HashSet<u64> = HashSet::new();
        // Every event applied to a second consumer must rebuild the first.
        let mut events: Vec<ConsumerEvent> = Vec::new();
        let mut replica = Consumer::new(config);
        // The durable fold of the logged changes, restored and rediscovered
        // after every command, must rebuild the first too.
        let mut table = durable::ConsumerTable::default();
        let setup = durable::ConsumerSetup { config, settings: Bytes::new() };
        table.fold("w", &durable::ConsumerChange::Configure { generation: 1, setup });
        for command in commands {
            match command {
                Command::Discover(keys) => {
                    let records: Vec<(u64, Bytes)> = keys
                        .iter()
                        .map(|k| {
                            next_position += 1 + u64::from(*k % 2); // positions with gaps
                            (next_position, Bytes::from(vec![b'k', *k]))
                        })
                        .collect();
                    tail = next_position + 1;
                    let taken = consumer.discover(&records, tail, &mut events);
                    prop_assert_eq!(taken, records.len());
                    model.log.extend(records);
                }
                Command::Advance(ms) => now += ms,
                Command::Pull(max) => {
                    let got = consumer.pull(now, max, &mut events);
                    let want = model.pull(&config, now, max);
                    prop_assert_eq!(&got, &want);
                    for d in &got.deliveries {
                        prop_assert!(d.attempts <= max_attempts);
                        prop_assert!(!model.done.contains(&d.lease.position));
                        prop_assert!(!dead_letters.contains(&d.lease.position));
                        delivered.push(d.lease.clone());
                    }
                    let keys: HashSet<&Bytes> = got.deliveries.iter().map(|d| &d.lease.routing_key).collect();
                    prop_assert_eq!(keys.len(), got.deliveries.len(), "one lease per key");
                    poison.extend(got.poison);
                }
                Command::Settle { acks, retries, extends, forged } => {
                    let mut settle = Settle {
                        acks: acks.iter().filter_map(|i| pick(&delivered, *i)).collect(),
                        retries: retries.iter().filter_map(|(i, d)| Some((pick(&delivered, *i)?, *d))).collect(),
                        extends: extends.iter().filter_map(|(i, v)| Some((pick(&delivered, *i)?, *v))).collect(),
                    };
                    if let (Some(lease), Some(forged)) = (pick(&delivered, 0), forged) {
                        // A lease id never given: stale, whatever it names.
                        settle.acks.push(LeaseRef { lease: lease.lease + 1_000_000 + forged, ..lease });
                    }
                    let got = consumer.settle(now, &settle, &mut events).expect("within bounds");
                    let want = model.settle(now, &settle);
                    prop_assert_eq!(got, want);
                    prop_assert_eq!(
                        got.acked + got.retried + got.extended + got.stale,
                        settle.acks.len() + settle.retries.len() + settle.extends.len()
                    );
                }
                Command::DeadLettered(i) => {
                    if let Some(p) = pick(&poison, i) {
                        let applied = consumer.dead_lettered(&p.record(), &mut events);
                        let expected = model.dead_lettering.remove(&p.position)
                            && model.head(&p.routing_key) == Some(p.position);
                        prop_assert_eq!(applied, expected);
                        if applied {
                            prop_assert!(dead_letters.insert(p.position), "dead-lettered once");
                            model.done.insert(p.position);
                            model.leases.remove(&p.routing_key);
                        }
                    }
                }
                Command::DeadLetterFailed(i) => {
                    if let Some(p) = pick(&poison, i) {
                        consumer.dead_letter_failed(&p.record(), &mut events);
                        if model.head(&p.routing_key) == Some(p.position) {
                            model.dead_lettering.remove(&p.position);
                        }
                    }
                }
            }
            let change = durable::ConsumerChange::Records {
                generation: 1,
                floor: consumer.done_floor(),
                events: events.clone(),
            };
            let logged = durable::ConsumerChange::decode(&change.encode()).expect("decodes");
            table.fold("w", &logged);
            for event in events.drain(..) {
                prop_assert_eq!(replica.apply(&event), Ok(()));
            }
            prop_assert_eq!(&replica, &consumer, "the events rebuild the state");
            let mut restored = Consumer::restore(&table.consumers["w"]);
            let mut scratch = Vec::new();
            restored.discover(&model.log, tail, &mut scratch);
            prop_assert_eq!(&restored, &consumer, "the durable state and a rediscovery rebuild it");
            let pending = model.log.iter().filter(|(p, _)| !model.done.contains(p)).count() as u64;
            prop_assert_eq!(consumer.backlog(tail), pending);
        }
    }
}

#[test]
fn discovery_pauses_at_the_pending_bound_and_resumes_after_the_last_record_taken() {
    let mut consumer = Consumer::new(ConsumerConfig {
        visibility_ms: 1_000,
        max_attempts: 3,
        max_batch: 10,
    });
    let records: Vec<(u64, Bytes)> = (0..PENDING_MAX as u64 + 5)
        .map(|p| (p, Bytes::from_static(b"k")))
        .collect();
    let mut events = Vec::new();
    let taken = consumer.discover(&records, records.len() as u64, &mut events);
    assert_eq!(taken, PENDING_MAX);
    assert_eq!(consumer.discover_from(), None);
    let lease = consumer.pull(0, 1, &mut events).deliveries[0].lease.clone();
    let settle = Settle {
        acks: vec![lease],
        ..Settle::default()
    };
    assert_eq!(consumer.settle(1, &settle, &mut events).unwrap().acked, 1);
    assert_eq!(consumer.discover_from(), Some(PENDING_MAX as u64));
}

#[test]
fn a_settle_beyond_its_bound_is_refused_whole() {
    let mut consumer = Consumer::new(ConsumerConfig {
        visibility_ms: 1_000,
        max_attempts: 3,
        max_batch: 10,
    });
    let mut events = Vec::new();
    consumer.discover(&[(0, Bytes::from_static(b"k"))], 1, &mut events);
    let lease = consumer.pull(0, 1, &mut events).deliveries[0].lease.clone();
    let settle = Settle {
        acks: vec![lease; SETTLE_ITEMS_MAX + 1],
        ..Settle::default()
    };
    let before = events.len();
    assert_eq!(
        consumer.settle(1, &settle, &mut events),
        Err(SettleError::TooManyItems)
    );
    assert_eq!(events.len(), before, "no events");
    assert_eq!(consumer.backlog(1), 1, "nothing applied");
}

#[test]
fn an_event_for_another_record_than_the_keys_oldest_changes_nothing() {
    let mut consumer = Consumer::new(ConsumerConfig {
        visibility_ms: 1_000,
        max_attempts: 3,
        max_batch: 10,
    });
    let key = Bytes::from_static(b"k");
    let mut events = Vec::new();
    consumer.discover(&[(4, key.clone()), (9, key.clone())], 10, &mut events);
    let before = consumer.clone();
    let later = ConsumerEvent::Finished {
        record: RecordRef {
            routing_key: key.clone(),
            position: 9,
        },
    };
    assert_eq!(consumer.apply(&later), Err(EventMismatch { position: 9 }));
    let unknown = ConsumerEvent::Poisoned {
        record: RecordRef {
            routing_key: Bytes::from_static(b"other"),
            position: 4,
        },
    };
    assert!(consumer.apply(&unknown).is_err());
    assert_eq!(consumer, before);
}
