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
    pub(super) replies: Vec<Reply>,
    /// Encoded size of `entries` (pages as sealed, every entry's framing).
    pub(super) bytes: usize,
    /// Carries a consumer change: a client's round trip (a pull handing out
    /// leases, a settle) waits on it, and no herd follows its answer, so the
    /// batch goes behind a PUT in flight instead of waiting to fill.
    pub(super) urgent: bool,
}
