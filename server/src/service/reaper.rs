//! Expiry without an access: streams whose TTL or `Expires-At` passes while
//! nobody touches them are retired (and their data then reclaimed by the
//! shard's garbage collection) when their deadline comes, not only on their
//! next request.
//!
//! The reaper is a deadline queue with at most one entry per stream name. A
//! name enters it when this process learns its descriptor has an expiry: at
//! create, on any access, and once at start-up from a listing of the registry
//! (so streams created before a restart are covered). It sleeps until the
//! earliest deadline; no deadline, no wake-up, so an idle server makes no
//! requests. At a deadline its task (`expiry::run`) asks `Streams::expire_if_due`, which retires
//! the stream if it is due or answers its new deadline (a sliding TTL moves
//! with every access), and the name is queued again for that.

use std::collections::{BTreeSet, HashMap};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// Names the queue holds at most; past it, new deadlines are dropped (those
/// streams still expire on their next access) and a warning is logged.
const QUEUE_NAMES_MAX: usize = 1 << 22;
/// Names expired in one wake-up at most (the rest wait for the next turn).
const BATCH_NAMES_MAX: usize = 1024;

type Name = (String, String);

#[derive(Default)]
struct Queue {
    due: BTreeSet<(u64, String, String)>,
    by_name: HashMap<Name, u64>,
}

/// The deadline queue; see the module header.
#[derive(Default)]
pub struct Reaper {
    queue: Mutex<Queue>,
    pub(super) wake: Notify,
}

impl Reaper {
    /// Queues `project/name` for `due_ms`, unless it is queued already (its
    /// queued check then finds the current deadline itself).
    pub fn schedule(&self, due_ms: u64, project: &str, name: &str) {
        let mut q = self.queue.lock();
        let key = (project.to_string(), name.to_string());
        if q.by_name.contains_key(&key) {
            return;
        }
        if q.by_name.len() >= QUEUE_NAMES_MAX {
            tracing::warn!(
                project,
                name,
                "expiry queue full: the stream expires on its next access"
            );
            return;
        }
        let earliest = q.due.first().is_none_or(|(first, _, _)| due_ms < *first);
        q.due.insert((due_ms, key.0.clone(), key.1.clone()));
        q.by_name.insert(key, due_ms);
        drop(q);
        if earliest {
            self.wake.notify_one();
        }
    }

    /// Due names (at most a batch), taken out of the queue.
    pub(super) fn take_due(&self, now_ms: u64) -> Vec<Name> {
        let mut q = self.queue.lock();
        let mut out = Vec::new();
        while out.len() < BATCH_NAMES_MAX {
            match q.due.first() {
                Some((due, _, _)) if *due <= now_ms => {}
                _ => break,
            }
            if let Some((_, project, name)) = q.due.pop_first() {
                let key = (project, name);
                q.by_name.remove(&key);
                out.push(key);
            }
        }
        out
    }

    pub(super) fn earliest_ms(&self) -> Option<u64> {
        self.queue.lock().due.first().map(|(due, _, _)| *due)
    }

    pub fn queued(&self) -> usize {
        self.queue.lock().by_name.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_entry_per_name_in_deadline_order() {
        let r = Reaper::default();
        r.schedule(50, "p", "b");
        r.schedule(10, "p", "a");
        r.schedule(5, "p", "b"); // already queued: ignored
        assert_eq!(r.queued(), 2);
        assert_eq!(r.earliest_ms(), Some(10));
        assert_eq!(r.take_due(9), Vec::<Name>::new());
        assert_eq!(
            r.take_due(50),
            vec![("p".into(), "a".into()), ("p".into(), "b".into())]
        );
        assert_eq!(r.queued(), 0);
        // Once taken, a name can be queued again.
        r.schedule(70, "p", "a");
        assert_eq!(r.earliest_ms(), Some(70));
    }
}
