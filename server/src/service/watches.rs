//! Watch journals and observation (docs/API.md, "Watches").
//!
//! A collection's watches name JSON fields; each record appended to it has
//! one watch key per watch whose fields it holds (`product::watch_keys`).
//! When an append is acknowledged — its records durable and readable — the
//! service publishes the append's watch keys to the collection's journal,
//! which wakes the observers of those keys. An observer's cursor names a
//! point in one journal *generation*; an observation answers `changed` when
//! one of its key's publications came after that point, `unchanged` when its
//! wait ends without one, and `resync` whenever the journal cannot tell:
//!
//! * the cursor is from another generation: the journal lives in the memory
//!   of the member that serves the collection's shard, one generation per
//!   (collection incarnation, shard claim), so a restart or an ownership
//!   move starts a new one, and appends served elsewhere meanwhile were
//!   never published here;
//! * the cursor is older than what the journal still remembers (it keeps
//!   the last [`JOURNAL_ENTRIES_MAX`] publications and forgets older ones).
//!
//! So an invalidation is never missed and never published before its record
//! is readable: an answer is `changed` or `resync` whenever a change may
//! have happened, and `unchanged` only when the journal saw every
//! publication since the cursor and none was the key's.
//!
//! Bounds: [`JOURNAL_ENTRIES_MAX`] entries per journal, [`JOURNALS_MAX`]
//! journals (the oldest goes first; its cursors then resync), and a
//! configured number of observations waiting at once (default
//! [`OBSERVERS_DEFAULT`]; beyond: refused, retry).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::product::watch_cap::WatchCursor;
use super::product::watch_keys::WatchKey;

/// Publications a journal remembers.
pub const JOURNAL_ENTRIES_MAX: usize = 16_384;
/// Journals kept at once (one per watched collection served here).
pub const JOURNALS_MAX: usize = 4_096;
/// Observations waiting at once on this server, unless configured
/// (`--max-watch-observations`).
pub const OBSERVERS_DEFAULT: usize = 65_536;

/// Which journal: a collection incarnation (its stream epoch) under one
/// claim of its shard (the shard's owner epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct JournalId {
    pub stream_epoch: [u8; 16],
    pub owner_epoch: u64,
}

/// What an observation found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observation {
    Changed(WatchCursor),
    Unchanged(WatchCursor),
    Resync(WatchCursor),
}

#[derive(Default)]
struct JournalState {
    /// Publications so far (the sequence of the last one).
    sequence: u64,
    /// Publications at or below this are forgotten.
    floor: u64,
    /// Each remembered key's last publication.
    changed: HashMap<WatchKey, u64>,
    /// Remembered publications, oldest first.
    order: VecDeque<(u64, WatchKey)>,
    /// Keys someone waits on.
    waiters: HashMap<WatchKey, Arc<Notify>>,
}

impl JournalState {
    fn cursor(&self, generation: [u8; 16]) -> WatchCursor {
        WatchCursor {
            generation,
            sequence: self.sequence,
        }
    }

    /// The answer now, if there is one before waiting.
    fn judge(&self, generation: [u8; 16], key: WatchKey, from: u64) -> Option<Observation> {
        if from < self.floor || from > self.sequence {
            return Some(Observation::Resync(self.cursor(generation)));
        }
        match self.changed.get(&key) {
            Some(at) if *at > from => Some(Observation::Changed(self.cursor(generation))),
            _ => None,
        }
    }
}

/// One generation of one collection's publications.
pub struct Journal {
    generation: [u8; 16],
    state: Mutex<JournalState>,
}

impl Journal {
    fn new(generation: [u8; 16]) -> Journal {
        Journal {
            generation,
            state: Mutex::new(JournalState::default()),
        }
    }

    /// Records one acknowledged append's keys and wakes their observers.
    pub fn publish(&self, keys: &[WatchKey]) {
        let mut wake = Vec::new();
        {
            let mut state = self.state.lock();
            for key in keys {
                state.sequence += 1;
                let at = state.sequence;
                state.changed.insert(*key, at);
                state.order.push_back((at, *key));
                if let Some(notify) = state.waiters.get(key) {
                    wake.push(notify.clone());
                }
            }
            while state.order.len() > JOURNAL_ENTRIES_MAX {
                let Some((at, key)) = state.order.pop_front() else {
                    break;
                };
                if state.changed.get(&key) == Some(&at) {
                    state.changed.remove(&key);
                }
                state.floor = at;
            }
            debug_assert!(state.order.len() <= JOURNAL_ENTRIES_MAX);
        }
        for notify in wake {
            notify.notify_waiters();
        }
    }

    /// Waits up to `wait` for a publication of `key` after `from` (`None`:
    /// after now).
    pub async fn observe(
        &self,
        key: WatchKey,
        from: Option<WatchCursor>,
        wait: Duration,
    ) -> Observation {
        let from = {
            let state = self.state.lock();
            match from {
                None => state.sequence,
                Some(c) if c.generation != self.generation => {
                    return Observation::Resync(state.cursor(self.generation))
                }
                Some(c) => c.sequence,
            }
        };
        let deadline = tokio::time::Instant::now() + wait;
        let waiter = Waiter::register(self, key);
        loop {
            let notified = waiter.notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            {
                let state = self.state.lock();
                if let Some(answer) = state.judge(self.generation, key, from) {
                    return answer;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let state = self.state.lock();
                return state
                    .judge(self.generation, key, from)
                    .unwrap_or(Observation::Unchanged(state.cursor(self.generation)));
            }
        }
    }
}

/// An observer's registration; dropping it (the answer, or the client gone)
/// removes the key's entry once nobody else waits on it.
struct Waiter<'a> {
    journal: &'a Journal,
    key: WatchKey,
    notify: Arc<Notify>,
}

impl<'a> Waiter<'a> {
    fn register(journal: &'a Journal, key: WatchKey) -> Waiter<'a> {
        let notify = journal
            .state
            .lock()
            .waiters
            .entry(key)
            .or_insert_with(|| Arc::new(Notify::new()))
            .clone();
        Waiter {
            journal,
            key,
            notify,
        }
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        let mut state = self.journal.state.lock();
        // The map's reference and ours: nobody else waits.
        if state
            .waiters
            .get(&self.key)
            .is_some_and(|n| Arc::strong_count(n) == 2)
        {
            state.waiters.remove(&self.key);
        }
    }
}

/// Every journal of this server, and the count of waiting observations.
#[derive(Default)]
pub struct WatchJournals {
    journals: Mutex<JournalTable>,
    observers: AtomicUsize,
}

#[derive(Default)]
struct JournalTable {
    by_id: HashMap<JournalId, Arc<Journal>>,
    /// Creation order, for eviction.
    order: VecDeque<JournalId>,
}

/// A place among the waiting observations (released on drop).
pub struct ObserverSlot<'a>(&'a AtomicUsize);

impl Drop for ObserverSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl WatchJournals {
    /// The journal `id`, created with `generation` if there is none (an
    /// older claim's journal of the same incarnation is dropped).
    pub fn journal(&self, id: JournalId, generation: impl FnOnce() -> [u8; 16]) -> Arc<Journal> {
        let mut table = self.journals.lock();
        if let Some(journal) = table.by_id.get(&id) {
            return journal.clone();
        }
        let stale: Vec<JournalId> = table
            .order
            .iter()
            .filter(|other| other.stream_epoch == id.stream_epoch)
            .copied()
            .collect();
        for old in stale {
            table.by_id.remove(&old);
        }
        table
            .order
            .retain(|other| other.stream_epoch != id.stream_epoch);
        while table.order.len() >= JOURNALS_MAX {
            if let Some(oldest) = table.order.pop_front() {
                table.by_id.remove(&oldest);
            }
        }
        let journal = Arc::new(Journal::new(generation()));
        table.by_id.insert(id, journal.clone());
        table.order.push_back(id);
        debug_assert_eq!(table.by_id.len(), table.order.len());
        journal
    }

    /// A place for one more waiting observation, if fewer than `max` wait.
    pub fn observer_slot(&self, max: usize) -> Option<ObserverSlot<'_>> {
        let before = self.observers.fetch_add(1, Ordering::AcqRel);
        let slot = ObserverSlot(&self.observers);
        (before < max).then_some(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEN: [u8; 16] = [1; 16];

    fn cursor(sequence: u64) -> Option<WatchCursor> {
        Some(WatchCursor {
            generation: GEN,
            sequence,
        })
    }

    #[tokio::test]
    async fn an_observer_sees_its_keys_publications_only() {
        let journal = Journal::new(GEN);
        let (a, b) = (WatchKey(1), WatchKey(2));
        journal.publish(&[a]);
        let short = Duration::from_millis(1);
        assert_eq!(
            journal.observe(a, cursor(0), short).await,
            Observation::Changed(cursor(1).unwrap())
        );
        assert_eq!(
            journal.observe(a, cursor(1), short).await,
            Observation::Unchanged(cursor(1).unwrap())
        );
        journal.publish(&[b]);
        assert_eq!(
            journal.observe(a, cursor(1), short).await,
            Observation::Unchanged(cursor(2).unwrap()),
            "another key's publication"
        );
        // Another generation, or a sequence the journal never reached.
        let foreign = Some(WatchCursor {
            generation: [2; 16],
            sequence: 0,
        });
        assert!(matches!(
            journal.observe(a, foreign, short).await,
            Observation::Resync(_)
        ));
        assert!(matches!(
            journal.observe(a, cursor(99), short).await,
            Observation::Resync(_)
        ));
        assert!(
            journal.state.lock().waiters.is_empty(),
            "waiters cleaned up"
        );
    }

    #[tokio::test]
    async fn a_waiting_observer_wakes_on_publication() {
        let journal = Arc::new(Journal::new(GEN));
        let key = WatchKey(7);
        let waiting = {
            let journal = journal.clone();
            tokio::spawn(async move { journal.observe(key, None, Duration::from_secs(20)).await })
        };
        // Once the observer waits, publish another key and then its own.
        while !journal.state.lock().waiters.contains_key(&key) {
            tokio::task::yield_now().await;
        }
        journal.publish(&[WatchKey(8)]);
        journal.publish(&[key]);
        assert_eq!(
            waiting.await.unwrap(),
            Observation::Changed(cursor(2).unwrap())
        );
    }

    /// Forgotten publications make old cursors resync, never `unchanged`.
    #[tokio::test]
    async fn a_cursor_older_than_the_journal_remembers_resyncs() {
        let journal = Journal::new(GEN);
        let watched = WatchKey(u64::MAX);
        journal.publish(&[watched]);
        for n in 0..JOURNAL_ENTRIES_MAX as u64 {
            journal.publish(&[WatchKey(n)]);
        }
        let short = Duration::from_millis(1);
        assert!(matches!(
            journal.observe(watched, cursor(0), short).await,
            Observation::Resync(_)
        ));
        let state = journal.state.lock();
        assert!(state.order.len() <= JOURNAL_ENTRIES_MAX);
        assert!(!state.changed.contains_key(&watched), "forgotten");
    }

    #[test]
    fn journals_are_per_claim_and_bounded() {
        let journals = WatchJournals::default();
        let id = JournalId {
            stream_epoch: [1; 16],
            owner_epoch: 1,
        };
        let first = journals.journal(id, || [1; 16]);
        assert!(Arc::ptr_eq(&first, &journals.journal(id, || [2; 16])));
        let claimed_again = JournalId {
            owner_epoch: 2,
            ..id
        };
        let second = journals.journal(claimed_again, || [3; 16]);
        assert_eq!(second.generation, [3; 16]);
        assert_eq!(
            journals.journals.lock().by_id.len(),
            1,
            "the old claim's is gone"
        );
        for n in 0..JOURNALS_MAX as u64 + 10 {
            let mut stream_epoch = [0; 16];
            stream_epoch[..8].copy_from_slice(&n.to_le_bytes());
            stream_epoch[15] = 9;
            journals.journal(
                JournalId {
                    stream_epoch,
                    owner_epoch: 1,
                },
                || [0; 16],
            );
        }
        assert_eq!(journals.journals.lock().by_id.len(), JOURNALS_MAX);
    }
}
