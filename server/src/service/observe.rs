//! Watches on the request path: the watch keys of an append's records
//! (published once the append is acknowledged), and observations of one
//! watch key under a capability (`watches` keeps the journals).

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use strata_engine::{Entropy, Shard};

use super::error::ServiceError;
use super::media::is_json;
use super::product::watch_cap::{CapabilityScope, CursorBinding, WaitSigKey, WatchCursor};
use super::product::watch_keys::{definition_id, watch_key, WatchKey};
use super::registry::Descriptor;
use super::routing::stream_ref;
use super::streams::Streams;
use super::watches::{JournalId, Observation, WatchJournals};

/// Publishes an acknowledged append's watch keys to the journal of its
/// collection and shard claim.
pub(super) fn publish_keys(
    journals: &WatchJournals,
    entropy: &dyn Entropy,
    desc: &Descriptor,
    shard: &Shard,
    keys: &[WatchKey],
) {
    if keys.is_empty() {
        return;
    }
    let Some(stream_epoch) = desc.epoch_bytes() else {
        return;
    };
    let id = JournalId {
        stream_epoch,
        owner_epoch: shard.last_recovery().epoch,
    };
    journals.journal(id, || entropy.bytes16()).publish(keys);
}

/// One observation request.
pub struct WatchRequest<'a> {
    pub project: &'a str,
    pub name: &'a str,
    pub watch: &'a str,
    pub key: WatchKey,
    pub capability: &'a str,
    /// The cursor text (`None`: from now).
    pub cursor: Option<&'a str>,
    pub wait: Duration,
}

/// How an observation ended.
#[derive(Debug)]
pub enum WatchOutcome {
    /// The answer and the cursor to go on with.
    Answered {
        observation: Observation,
        cursor: String,
    },
    /// The capability does not grant this observation, or there is nothing
    /// to observe (one answer for every case).
    Unauthorized,
    /// The cursor is not one of this watch key's.
    BadCursor,
    /// Too many observations wait already.
    Busy,
}

impl Streams {
    /// The watch keys of `records` (JSON texts) under `desc`'s watches, in
    /// record order (empty when it has none).
    pub(super) fn watch_keys_of(&self, desc: &Descriptor, records: &[Bytes]) -> Vec<WatchKey> {
        if desc.watches.is_empty() || !is_json(&desc.content_type) {
            return Vec::new();
        }
        let Some(epoch) = desc.epoch_bytes() else {
            return Vec::new();
        };
        let ids: Vec<[u8; 16]> = desc
            .watches
            .iter()
            .map(|w| definition_id(&epoch, w))
            .collect();
        let mut keys = Vec::new();
        for record in records {
            let Ok(value) = serde_json::from_slice::<Value>(record) else {
                continue;
            };
            for (def, id) in desc.watches.iter().zip(&ids) {
                keys.extend(watch_key(id, def, &value));
            }
        }
        keys
    }

    /// Publishes an acknowledged append's watch keys.
    pub(super) fn publish_watch_keys(&self, desc: &Descriptor, shard: &Shard, keys: &[WatchKey]) {
        publish_keys(
            &self.watch_journals,
            self.entropy.as_ref(),
            desc,
            shard,
            keys,
        );
    }

    /// Observes one watch key: checks the capability, then waits on the
    /// journal. Every refusal before the cursor is `Unauthorized`.
    pub async fn observe_watch(
        &self,
        request: WatchRequest<'_>,
    ) -> Result<WatchOutcome, ServiceError> {
        let desc = match self.live(request.project, request.name).await {
            Ok((_, desc)) => desc,
            Err(ServiceError::NotFound | ServiceError::Gone | ServiceError::RetainedForForks) => {
                return Ok(WatchOutcome::Unauthorized)
            }
            Err(e) => return Err(e),
        };
        let desc = &desc.value;
        let (Some(epoch), Some(sig)) = (
            desc.epoch_bytes(),
            desc.watch_sig_key.as_deref().and_then(WaitSigKey::from_hex),
        ) else {
            return Ok(WatchOutcome::Unauthorized);
        };
        let scope = CapabilityScope {
            project: request.project,
            collection: request.name,
            epoch: &epoch,
            watch: request.watch,
            key: request.key,
        };
        let known_watch = desc.watches.iter().any(|w| w.name == request.watch);
        let now_s = self.now_ms() / 1000;
        if !(scope.admits(&sig, request.capability, now_s) && known_watch) {
            return Ok(WatchOutcome::Unauthorized);
        }
        let binding = CursorBinding {
            sig: &sig,
            watch: request.watch,
            key: request.key,
        };
        let from: Option<WatchCursor> = match request.cursor {
            None => None,
            Some(text) => match binding.decode(text) {
                Some(cursor) => Some(cursor),
                None => return Ok(WatchOutcome::BadCursor),
            },
        };
        let shard = self.shards.shard_for(&stream_ref(desc)?.id)?;
        let id = JournalId {
            stream_epoch: epoch,
            owner_epoch: shard.last_recovery().epoch,
        };
        let journal = self.watch_journals.journal(id, || self.entropy.bytes16());
        let max = self.config.watch_observations_max;
        let Some(_slot) = self.watch_journals.observer_slot(max) else {
            return Ok(WatchOutcome::Busy);
        };
        let observation = journal.observe(request.key, from, request.wait).await;
        let cursor = match observation {
            Observation::Changed(c) | Observation::Unchanged(c) | Observation::Resync(c) => c,
        };
        Ok(WatchOutcome::Answered {
            observation,
            cursor: binding.encode(&cursor),
        })
    }
}
