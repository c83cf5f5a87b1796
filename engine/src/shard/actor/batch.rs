//! What the committer stages for the next WAL object: entries (appends with
//! their pages given offsets and nonces but not yet sealed, so encryption
//! runs in the PUT task, off the actor), and the replies that ride on the
//! object, computed at commit and sent only once it is durable.

use std::sync::Arc;

use bytes::Bytes;
use strata_segments::{seal_page, sealed_page_len, PageCipher, PageError, PreparedBody};
use strata_wal::{AppendEntry, WalEntry};
use tokio::sync::oneshot;

use crate::error::EngineError;
use crate::shard::api::{AppendAck, CreateAck};

/// An answer computed when a command was committed, sent once it is durable.
pub(super) enum Reply {
    Append(
        oneshot::Sender<Result<AppendAck, EngineError>>,
        Result<AppendAck, EngineError>,
    ),
    Create(
        oneshot::Sender<Result<CreateAck, EngineError>>,
        Result<CreateAck, EngineError>,
    ),
    Unit(
        oneshot::Sender<Result<(), EngineError>>,
        Result<(), EngineError>,
    ),
}

impl Reply {
    pub(super) fn send(self) {
        // A caller that went away no longer needs the answer.
        let _ = match self {
            Reply::Append(tx, r) => tx.send(r).map_err(drop),
            Reply::Create(tx, r) => tx.send(r).map_err(drop),
            Reply::Unit(tx, r) => tx.send(r).map_err(drop),
        };
    }

    pub(super) fn fail(self, error: EngineError) {
        let _ = match self {
            Reply::Append(tx, _) => tx.send(Err(error)).map_err(drop),
            Reply::Create(tx, _) => tx.send(Err(error)).map_err(drop),
            Reply::Unit(tx, _) => tx.send(Err(error)).map_err(drop),
        };
    }
}

/// A reply waiting on its object, with how many of that object's entries
/// readers must see before it goes: every entry staged ahead of it
/// ([`QueuedReply::AFTER_ALL`] for a reply that joined an object already in
/// flight). The acker sends it as soon as those are published, so the
/// appenders it wakes run while the rest of the object is published.
pub(super) struct QueuedReply {
    pub(super) after_entries: usize,
    pub(super) reply: Reply,
}

impl QueuedReply {
    /// Sent once every entry of its object is visible.
    pub(super) const AFTER_ALL: usize = usize::MAX;
}

/// A page whose offset and nonce are assigned, sealed by the PUT task that
/// writes it (encryption stays off the actor).
pub(super) struct UnsealedPage {
    pub(super) body: PreparedBody,
    pub(super) cipher: Arc<PageCipher>,
    pub(super) first_offset: u64,
    pub(super) nonce: [u8; 12],
}

/// An entry as the committer stages it: appends carry unsealed pages.
pub(super) enum StagedEntry {
    Ready(WalEntry),
    Append {
        /// The entry with its `pages` still empty.
        entry: AppendEntry,
        key_version: u32,
        routing_key: Bytes,
        pages: Vec<UnsealedPage>,
    },
}

impl StagedEntry {
    /// Bytes the entry takes in its WAL object once sealed and encoded.
    pub(super) fn encoded_len(&self) -> usize {
        match self {
            StagedEntry::Ready(entry) => strata_wal::entry_encoded_len(entry),
            StagedEntry::Append {
                routing_key, pages, ..
            } => strata_wal::append_entry_encoded_len(
                pages
                    .iter()
                    .map(|p| sealed_page_len(&p.body, routing_key.len())),
            ),
        }
    }

    /// Seals an append's pages; any other entry is ready as it is.
    pub(super) fn seal(self) -> Result<WalEntry, PageError> {
        match self {
            StagedEntry::Ready(entry) => Ok(entry),
            StagedEntry::Append {
                mut entry,
                key_version,
                routing_key,
                pages,
            } => {
                entry.pages = pages
                    .into_iter()
                    .map(|p| {
                        seal_page(
                            &p.cipher,
                            &p.body,
                            p.first_offset,
                            key_version,
                            &routing_key,
                            p.nonce,
                        )
                    })
                    .collect::<Result<_, _>>()?;
                Ok(WalEntry::Append(entry))
            }
        }
    }
}

/// Entries staged for the next WAL object, and the replies riding on it.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) entries: Vec<StagedEntry>,
    /// In the order they were committed; `after_entries` never decreases.
    pub(super) replies: Vec<QueuedReply>,
    /// Encoded size of `entries` (pages as sealed, every entry's framing).
    pub(super) bytes: usize,
    /// Carries a consumer change: a client's round trip (a pull handing out
    /// leases, a settle) waits on it, and no herd follows its answer, so the
    /// batch goes behind a PUT in flight instead of waiting to fill.
    pub(super) urgent: bool,
}

impl Batch {
    /// Queues `reply` behind every entry staged so far.
    pub(super) fn push_reply(&mut self, reply: Reply) {
        self.replies.push(QueuedReply {
            after_entries: self.entries.len(),
            reply,
        });
    }
}

/// Applies `entries` in order and releases each of `replies` (in their
/// order, `after` never decreasing) as soon as the first `after(reply)`
/// entries are applied, before the next entry is.
pub(super) fn interleave<E, R>(
    entries: impl IntoIterator<Item = E>,
    replies: impl IntoIterator<Item = R>,
    after: impl Fn(&R) -> usize,
    mut apply: impl FnMut(E),
    mut release: impl FnMut(R),
) {
    let mut replies = replies.into_iter().peekable();
    for (applied, entry) in entries.into_iter().enumerate() {
        while let Some(reply) = replies.next_if(|r| after(r) <= applied) {
            release(reply);
        }
        apply(entry);
    }
    replies.for_each(release);
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::interleave;

    #[derive(Debug, PartialEq)]
    enum Step {
        Apply(usize),
        Release(usize),
    }

    proptest! {
        /// Each reply is released after exactly the entries ahead of it and
        /// before the next one; every entry is applied and every reply
        /// released once, in order.
        #[test]
        fn a_reply_goes_right_after_the_entries_ahead_of_it(
            entries in 0usize..12,
            mut marks in proptest::collection::vec(0usize..16, 0..12),
        ) {
            marks.sort_unstable();
            let mut steps = Vec::new();
            let log = std::cell::RefCell::new(&mut steps);
            interleave(
                0..entries,
                marks.iter().copied().enumerate(),
                |(_, mark)| *mark,
                |entry| log.borrow_mut().push(Step::Apply(entry)),
                |(reply, _)| log.borrow_mut().push(Step::Release(reply)),
            );
            let applied: Vec<usize> = steps.iter().filter_map(|s| match s {
                Step::Apply(e) => Some(*e),
                Step::Release(_) => None,
            }).collect();
            prop_assert_eq!(applied, (0..entries).collect::<Vec<_>>());
            let mut released = Vec::new();
            let mut applies_before = 0;
            for step in &steps {
                match step {
                    Step::Apply(_) => applies_before += 1,
                    Step::Release(reply) => {
                        // Not one entry early, not one late (past the last entry
                        // a reply goes at the end).
                        prop_assert_eq!(applies_before, marks[*reply].min(entries));
                        released.push(*reply);
                    }
                }
            }
            prop_assert_eq!(released, (0..marks.len()).collect::<Vec<_>>());
        }
    }
}
