//! Subscription records and their CAS storage.
//!
//! Owns what is stored of a subscription ([`SubRecord`]: its configuration,
//! links with acknowledged offsets, generation and the wake in flight, with
//! its holder and lease) and [`RecordStore`], which
//! reads and writes the records as CAS JSON objects at
//! `registry/<project>/subscriptions/<id-hash>.json` (`service::names::subscription`).
//!
//! Invariants (docs/ARCHITECTURE.md, "Subscriptions"):
//! * the stored JSON shape of [`SubRecord`] and [`SubConfig`] is a format:
//!   field names and order do not change (the config hash is taken over the
//!   serialised [`SubConfig`], so a reordering would make every repeated PUT
//!   after an upgrade a conflict);
//! * every write is a compare-and-swap against the version last read or
//!   written, tagged with the record's fresh `write_token`; a failed write
//!   re-reads, so the next one compares against what is stored;
//! * everything a coordinator needs to carry a wake on is in the record, so
//!   the server that serves the subscriptions next (after a restart, or
//!   another fleet member) resumes the same wake, with the same tokens.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::service::names;
use futures::TryStreamExt;
use object_store::{ObjectStore, ObjectStoreExt};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use strata_manifest::{CasObject, JsonCodec, JsonLayout, JsonObject, RetryPolicy, Versioned};

use super::error::{OpenError, SubError};
use hex::encode as hex;

/// The format number written into every record.
pub const RECORD_FORMAT: u32 = 1;

/// How a subscription tells its consumer about pending work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// POSTs each wake to a webhook URL.
    Webhook,
    /// Appends each wake to a wake stream; workers claim it.
    PullWake,
}

/// The part of a subscription its creator chose (its hash decides whether a
/// repeated PUT is the same subscription).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubConfig {
    #[serde(rename = "type")]
    pub kind: Kind,
    pub pattern: Option<String>,
    pub streams: BTreeSet<String>,
    pub webhook_url: Option<String>,
    pub wake_stream: Option<String>,
    pub lease_ttl_ms: u64,
    pub description: Option<String>,
}

impl SubConfig {
    /// The configuration's identity: the first 16 bytes of the SHA-256 of its
    /// compact JSON, in hex.
    pub fn hash(&self) -> Result<String, SubError> {
        let canonical = serde_json::to_vec(self)?;
        Ok(hex(&Sha256::digest(&canonical)[..16]))
    }
}

/// One linked stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    /// Linked because the pattern matches it.
    pub glob: bool,
    /// Linked because the creator named it.
    pub explicit: bool,
    /// The acknowledged position (`None`: nothing yet).
    pub acked: Option<u64>,
}

/// What is stored of a subscription.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubRecord {
    pub format: u32,
    pub id: String,
    pub config: SubConfig,
    pub config_hash: String,
    pub created_at: String,
    pub base_url: String,
    pub links: BTreeMap<String, Link>,
    pub generation: u64,
    pub write_token: String,
    /// The wake in flight (absent when idle, and in records written before
    /// wakes were stored).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wake: Option<StoredWake>,
}

/// A wake in flight, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredWake {
    pub id: String,
    /// The linked tails at the wake: what a `done` acknowledges.
    pub snapshot: BTreeMap<String, u64>,
    /// The worker that claimed it (pull-wake).
    pub holder: Option<String>,
    /// When its lease lapses (ms since the Unix epoch, by the clock of the
    /// server that started the lease).
    pub lease_until_ms: u64,
}

impl JsonObject for SubRecord {
    type Error = serde_json::Error;
    const LAYOUT: JsonLayout = JsonLayout::Pretty;

    fn write_token(&self) -> [u8; 16] {
        crate::service::write_token::write_token(&self.write_token)
    }
}

/// The CAS codec of SubRecord objects (the generic JSON codec).
type SubRecordCodec = JsonCodec<SubRecord>;

/// A record as last read from or written to the store.
pub type StoredRecord = Versioned<SubRecord>;

/// The subscription records of every project in the object store.
pub struct RecordStore {
    store: Arc<dyn ObjectStore>,
}

impl RecordStore {
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        RecordStore { store }
    }

    fn cas(&self, project: &str, id: &str) -> CasObject<SubRecordCodec> {
        CasObject::new(
            self.store.clone(),
            names::subscription(project, id),
            RetryPolicy::default(),
        )
    }

    /// Every readable stored record of every project, with its project (an
    /// unreadable one is logged and skipped): one LIST of the projects, and
    /// one per project.
    pub async fn load_all(&self) -> Result<Vec<(String, StoredRecord)>, OpenError> {
        let listed = self
            .store
            .list_with_delimiter(Some(&names::registry_prefix()))
            .await
            .map_err(|e| OpenError::Listing(e.to_string()))?;
        let mut out = Vec::new();
        for prefix in listed.common_prefixes {
            let Some(project) = prefix.filename() else {
                continue;
            };
            for stored in self.load_project(project).await? {
                out.push((project.to_string(), stored));
            }
        }
        Ok(out)
    }

    async fn load_project(&self, project: &str) -> Result<Vec<StoredRecord>, OpenError> {
        let prefix = names::subscriptions_prefix(project);
        let metas: Vec<_> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|e| OpenError::Listing(e.to_string()))?;
        let mut out = Vec::new();
        for meta in metas {
            let cas = CasObject::<SubRecordCodec>::new(
                self.store.clone(),
                meta.location.clone(),
                RetryPolicy::default(),
            );
            match cas.load().await {
                Ok(Some(stored)) => out.push(stored),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(object = %meta.location, error = %e, "skipping an unreadable subscription")
                }
            }
        }
        Ok(out)
    }

    /// The stored record of `id`, if one is there and readable.
    pub async fn load(&self, project: &str, id: &str) -> Option<StoredRecord> {
        self.cas(project, id).load().await.ok().flatten()
    }

    /// Writes `record` over `stored` (or creates it when `stored` is `None`);
    /// on success `stored` is the new version, on failure what the store now
    /// holds.
    pub async fn save(
        &self,
        project: &str,
        record: &SubRecord,
        stored: &mut Option<StoredRecord>,
    ) -> Result<(), SubError> {
        let id = record.id.as_str();
        let cas = self.cas(project, id);
        let written = match stored.as_ref() {
            Some(current) => cas.replace(current, record.clone()).await,
            None => cas.create(record.clone()).await,
        };
        match written {
            Ok(w) => {
                *stored = Some(w);
                Ok(())
            }
            Err(e) => {
                tracing::warn!(subscription = id, error = %e, "saving the subscription failed");
                // Re-read so the next save compares against what is stored.
                *stored = cas.load().await.ok().flatten();
                Err(SubError::StoreFailed)
            }
        }
    }

    /// Deletes the stored record of `id` (a missing one is not an error; a
    /// failure is logged: the record is gone from memory either way).
    pub async fn delete(&self, project: &str, id: &str) {
        if let Err(e) = self.store.delete(&names::subscription(project, id)).await {
            if !matches!(e, object_store::Error::NotFound { .. }) {
                tracing::warn!(subscription = id, error = %e, "deleting the stored subscription failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SubConfig {
        SubConfig {
            kind: Kind::PullWake,
            pattern: Some("events/*".into()),
            streams: ["a".to_string()].into_iter().collect(),
            webhook_url: None,
            wake_stream: Some("wakes".into()),
            lease_ttl_ms: 30_000,
            description: None,
        }
    }

    /// The hash is over the stored field order: a change here would turn
    /// every repeated PUT of an existing subscription into a conflict.
    #[test]
    fn the_config_hash_is_over_its_stored_shape() {
        let json = serde_json::to_string(&config()).unwrap();
        assert_eq!(
            json,
            r#"{"type":"pull-wake","pattern":"events/*","streams":["a"],"webhook_url":null,"wake_stream":"wakes","lease_ttl_ms":30000,"description":null}"#
        );
        let expected = hex(&Sha256::digest(json.as_bytes())[..16]);
        assert_eq!(config().hash().unwrap(), expected);
    }

    #[tokio::test]
    async fn records_round_trip_through_the_store() {
        let store = RecordStore::new(Arc::new(object_store::memory::InMemory::new()));
        let mut record = SubRecord {
            format: RECORD_FORMAT,
            id: "s1".into(),
            config: config(),
            config_hash: config().hash().unwrap(),
            created_at: "1970-01-01T00:00:00.000Z".into(),
            base_url: "http://localhost".into(),
            links: BTreeMap::new(),
            generation: 0,
            write_token: hex([1; 16]),
            wake: None,
        };
        let mut stored = None;
        store.save("p", &record, &mut stored).await.unwrap();
        record.generation = 1;
        record.write_token = hex([2; 16]);
        store.save("p", &record, &mut stored).await.unwrap();
        // A stale version is refused, and the re-read version is kept.
        let mut stale = store.load("p", "s1").await;
        record.generation = 2;
        record.write_token = hex([3; 16]);
        store.save("p", &record, &mut stored).await.unwrap();
        record.write_token = hex([4; 16]);
        assert!(matches!(
            store.save("p", &record, &mut stale).await,
            Err(SubError::StoreFailed)
        ));
        assert_eq!(stale.map(|s| s.value.generation), Some(2));
        record.wake = Some(StoredWake {
            id: "w_1".into(),
            snapshot: [("a".to_string(), 7)].into_iter().collect(),
            holder: Some("worker".into()),
            lease_until_ms: 99,
        });
        record.write_token = hex([5; 16]);
        store.save("p", &record, &mut stored).await.unwrap();
        let mut other = record.clone();
        other.id = "s2".into();
        store.save("q", &other, &mut None).await.unwrap();
        let mut all = store.load_all().await.unwrap();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].0, "p");
        assert_eq!(all[0].1.value, record);
        assert_eq!((all[1].0.as_str(), all[1].1.value.id.as_str()), ("q", "s2"));
        store.delete("p", "s1").await;
        assert!(store.load("p", "s1").await.is_none());
    }
}
