//! The subscription service: the `Subscriptions` facade.
//!
//! Owns the in-memory state of every project's subscriptions (records, the
//! wake in flight, the lease timers) on the server that serves them, and the
//! operations on it: put, get, delete, linking and unlinking streams (here),
//! claim, acknowledge, release and the wake logic (`wakes.rs`), webhook
//! delivery (`delivery.rs`). It speaks no HTTP: requests arrive parsed
//! ([`super::requests`]), answers leave typed ([`super::answers`]), refusals
//! are [`SubError`] variants.
//!
//! Where they are served: a single server serves them from its start; in a
//! fleet, the owner of shard 0 does (`coordinator.rs`), from the moment it
//! claims shard 0 ([`Subscriptions::resume`]: every record is read again and
//! every wake in flight carried on) until it releases it
//! ([`Subscriptions::suspend`]). In between a request answers `Unavailable`.
//!
//! Invariants (docs/ARCHITECTURE.md, "Subscriptions"):
//! * a subscription's state is changed only under its own lock; the map of
//!   subscriptions is locked only to find, insert or replace them;
//! * a wake grows the generation, and an acknowledgement or release counts
//!   only for the current wake id, generation and token generation (else
//!   `Fenced`);
//! * every lease start grows `lease_epoch`, and a lease timer acts only if
//!   the epoch is still its own, so a lapsed lease never ends a newer wake;
//!   a retired state (deleted, or handed to the next coordinator) acts on
//!   nothing;
//! * time comes from the stream service's injected clock
//!   ([`Streams::now_ms`]) and randomness from its injected entropy
//!   ([`Streams::random_bytes16`]), never from the system directly.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use strata_segments::StreamKey;
use tokio::sync::Mutex;

use super::answers::{
    acked_text, Description, LinkType, LinkedStream, PutAnswer, Signing, SubStatus,
    WebhookDescription,
};
use super::coordinator::{AppendedBatch, AppendedStream, Coordination, CoordinatorAt};
use super::error::{OpenError, SubError};
use super::paths::{glob_match, normalise_path};
use super::requests::{check_id, AddStreamsRequest};
use super::signing::{Jwks, Signer};
use super::store::{Link, RecordStore, StoredRecord, SubConfig, SubRecord, RECORD_FORMAT};
use super::tokens::{TokenKey, VerifiedToken};
use super::webhook::{DeliveryPolicy, WebhookClient};
use crate::service::Streams;
use hex::encode as hex;

/// The label the token key is derived under from the server seed.
const TOKEN_KEY_LABEL: &str = "strata subscription tokens v1";

/// A subscription's identity: its project and id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct SubKey {
    pub project: String,
    pub id: String,
}

pub(super) struct SubState {
    pub record: SubRecord,
    pub stored: Option<StoredRecord>,
    pub status: SubStatus,
    /// Grows with every lease start; a lease timer acts only on its own.
    pub lease_epoch: u64,
    /// The key pull-wake events are appended with (memory only: the server
    /// never stores a stream key; it is learnt again from the next request
    /// that carries one).
    pub wake_key: Option<StreamKey>,
    /// Deleted, or handed to the next coordinator: nothing acts on it.
    pub retired: bool,
}

impl SubState {
    fn loaded(stored: StoredRecord) -> SubState {
        SubState {
            record: stored.value.clone(),
            stored: Some(stored),
            status: SubStatus::Active,
            lease_epoch: 0,
            wake_key: None,
            retired: false,
        }
    }

    /// Whether the wake of `generation` is still the one in flight.
    pub fn is_current(&self, generation: u64) -> bool {
        self.record.generation == generation && self.record.wake.is_some() && !self.retired
    }
}

pub(super) struct Sub {
    pub key: SubKey,
    pub state: Mutex<SubState>,
}

/// The subscriptions this server serves (none while another one does).
#[derive(Default)]
struct Term {
    serving: bool,
    /// Grows with every resume and suspend: a load installs its records
    /// only if no suspend (or newer resume) came while it read them.
    number: u64,
    subs: HashMap<SubKey, Arc<Sub>>,
}

/// Every project's subscriptions; see the module header.
pub struct Subscriptions {
    pub(super) streams: Arc<Streams>,
    pub(super) records: RecordStore,
    pub(super) signer: Signer,
    pub(super) tokens: TokenKey,
    term: tokio::sync::RwLock<Term>,
    pub(super) webhooks: WebhookClient,
    pub(super) coordination: Coordination,
    /// Subscriptions served here, plus creations under way: an append
    /// looks at nothing else when both are none (the common case).
    served: std::sync::atomic::AtomicUsize,
    creating: std::sync::atomic::AtomicUsize,
}

/// `ms` since the Unix epoch as RFC 3339 with milliseconds (`…Z`).
pub(super) fn rfc3339_ms(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl Subscriptions {
    /// Opens the service with the store's signing key; a single server
    /// (`fleet` false) loads every subscription now, a fleet member when it
    /// claims shard 0.
    pub async fn open(
        streams: Arc<Streams>,
        signer: Signer,
        allow_loopback_webhooks: bool,
        fleet: bool,
    ) -> Result<Arc<Subscriptions>, OpenError> {
        let policy = DeliveryPolicy::default();
        Self::open_with_policy(streams, signer, allow_loopback_webhooks, fleet, policy).await
    }

    /// [`Subscriptions::open`] with webhooks delivered under `policy`.
    pub(crate) async fn open_with_policy(
        streams: Arc<Streams>,
        signer: Signer,
        allow_loopback_webhooks: bool,
        fleet: bool,
        policy: DeliveryPolicy,
    ) -> Result<Arc<Subscriptions>, OpenError> {
        let tokens = TokenKey::new(&signer.derive(TOKEN_KEY_LABEL))?;
        let webhooks = WebhookClient::new(allow_loopback_webhooks, policy)
            .map_err(OpenError::WebhookClient)?;
        let subs = Arc::new(Subscriptions {
            records: RecordStore::new(streams.store()),
            coordination: Coordination::new(streams.clone(), fleet),
            streams,
            signer,
            tokens,
            term: tokio::sync::RwLock::new(Term::default()),
            webhooks,
            served: Default::default(),
            creating: Default::default(),
        });
        if !fleet {
            subs.resume().await?;
        }
        Ok(subs)
    }

    /// Starts serving: reads every project's records again (another server
    /// may have changed them) and carries every wake in flight on.
    pub async fn resume(self: &Arc<Self>) -> Result<(), OpenError> {
        let number = {
            let mut term = self.term.write().await;
            term.number += 1;
            term.number
        };
        let loaded = self.records.load_all().await?;
        let mut subs = HashMap::new();
        for (project, stored) in loaded {
            let key = SubKey {
                project,
                id: stored.value.id.clone(),
            };
            let sub = Arc::new(Sub {
                key: key.clone(),
                state: Mutex::new(SubState::loaded(stored)),
            });
            subs.insert(key, sub);
        }
        let carried: Vec<Arc<Sub>> = subs.values().cloned().collect();
        let old = {
            let mut term = self.term.write().await;
            if term.number != number || !self.coordination.holds_coordinator_shard() {
                // Suspended (shard 0 left) while the records were read.
                drop(term);
                Self::retire_all(subs).await;
                return Ok(());
            }
            term.serving = true;
            self.served.store(subs.len(), Ordering::SeqCst);
            std::mem::replace(&mut term.subs, subs)
        };
        Self::retire_all(old).await;
        tracing::info!(
            subscriptions = carried.len(),
            "subscriptions: serving them here"
        );
        for sub in carried {
            let mut st = sub.state.lock().await;
            self.carry_on(&sub, &mut st).await;
        }
        Ok(())
    }

    /// Stops serving (another server serves the subscriptions now).
    pub async fn suspend(&self) {
        let old = {
            let mut term = self.term.write().await;
            term.number += 1;
            term.serving = false;
            self.served.store(0, Ordering::SeqCst);
            std::mem::take(&mut term.subs)
        };
        if !old.is_empty() {
            tracing::info!(
                subscriptions = old.len(),
                "subscriptions: served elsewhere now"
            );
        }
        Self::retire_all(old).await;
    }

    async fn retire_all(subs: HashMap<SubKey, Arc<Sub>>) {
        for sub in subs.into_values() {
            let mut st = sub.state.lock().await;
            st.retired = true;
            st.lease_epoch += 1;
        }
    }

    /// Writes the record after a change (best effort after the first write:
    /// a failed save leaves the in-memory state authoritative until the
    /// subscriptions are loaded again).
    pub(super) async fn save(&self, sub: &SubKey, st: &mut SubState) -> Result<(), SubError> {
        st.record.write_token = hex(self.streams.random_bytes16());
        self.records
            .save(&sub.project, &st.record, &mut st.stored)
            .await
    }

    pub(super) async fn get_sub(&self, project: &str, id: &str) -> Result<Arc<Sub>, SubError> {
        let term = self.term.read().await;
        if !term.serving {
            return Err(SubError::Unavailable(
                "the subscriptions are moving to another server; retry".into(),
            ));
        }
        let key = SubKey {
            project: project.to_string(),
            id: id.to_string(),
        };
        term.subs.get(&key).cloned().ok_or(SubError::NotFound)
    }

    /// Every subscription of `project` (`None`: of every project).
    pub(super) async fn subs_of(&self, project: Option<&str>) -> Vec<Arc<Sub>> {
        let term = self.term.read().await;
        term.subs
            .values()
            .filter(|sub| project.is_none_or(|p| sub.key.project == p))
            .cloned()
            .collect()
    }

    /// The JWKS document receivers verify webhook signatures with.
    pub fn jwks(&self) -> Jwks {
        self.signer.jwks()
    }

    /// Checks a bearer token for subscription `id` against the clock (the
    /// token names its project).
    pub fn verify_token(&self, id: &str, token: Option<&str>) -> Result<VerifiedToken, SubError> {
        self.tokens.check(id, token, self.streams.now_ms())
    }

    pub(super) fn mint_token(&self, sub: &SubKey, generation: u64) -> String {
        self.tokens.mint(
            &sub.project,
            &sub.id,
            generation,
            self.streams.now_ms(),
            self.streams.random_bytes16(),
        )
    }

    fn jwks_url(base: &str) -> String {
        format!("{base}/v1/stream/__ds/jwks.json")
    }

    // ------------------------------------------------------ the fleet

    /// Called after an append to `name` in `project` on this server: the
    /// subscriptions hear of it here, or the relay tells their server.
    pub fn appended(self: &Arc<Self>, project: &str, name: &str) {
        let append = || AppendedStream {
            project: project.to_string(),
            stream: name.to_string(),
        };
        match self.coordination.locate() {
            CoordinatorAt::Here if self.nothing_to_tell() => {}
            CoordinatorAt::Here => self.apply(AppendedBatch {
                appends: vec![append()],
                sweep: false,
            }),
            CoordinatorAt::Elsewhere(_) | CoordinatorAt::Unknown => self.relay(Some(append())),
        }
    }

    /// Whether no subscription is served here or being created (an append
    /// then wakes nothing).
    fn nothing_to_tell(&self) -> bool {
        self.served.load(Ordering::SeqCst) == 0 && self.creating.load(Ordering::SeqCst) == 0
    }

    /// Asks the subscriptions' server to re-check every subscription (this
    /// member claimed a shard: appends to it may not have been told).
    pub fn ask_sweep(self: &Arc<Self>) {
        match self.coordination.locate() {
            CoordinatorAt::Here => self.apply(AppendedBatch {
                appends: Vec::new(),
                sweep: true,
            }),
            CoordinatorAt::Elsewhere(_) | CoordinatorAt::Unknown => self.relay(None),
        }
    }

    /// Acts on `batch` here, in the background: the sweep first, then each
    /// append.
    fn apply(self: &Arc<Self>, batch: AppendedBatch) {
        let me = self.clone();
        tokio::spawn(async move {
            if batch.sweep {
                me.sweep().await;
            }
            for append in batch.appends {
                me.on_append(&append.project, append.stream).await;
            }
        });
    }

    fn relay(self: &Arc<Self>, append: Option<AppendedStream>) {
        if self.coordination.queue(append) {
            tokio::spawn(relay_loop(self.clone()));
        }
    }

    /// A batch told by another member (this server is the coordinator).
    pub fn told(self: &Arc<Self>, batch: AppendedBatch) -> Result<(), SubError> {
        if !matches!(self.coordination.locate(), CoordinatorAt::Here) {
            return Err(SubError::Unavailable(
                "the subscriptions are served by another member".into(),
            ));
        }
        self.apply(batch);
        Ok(())
    }

    /// The tails a peer asked for, of the streams this member serves.
    pub async fn local_tails(
        &self,
        request: super::coordinator::TailsRequest,
    ) -> super::coordinator::TailsAnswer {
        self.coordination.local_tails(request).await
    }

    pub fn set_peers(&self, peers: Arc<dyn super::coordinator::SubscriptionPeers>) {
        self.coordination.set_peers(peers);
    }

    /// Whether the subscriptions follow shard 0 (a fleet).
    pub fn is_fleet(&self) -> bool {
        self.coordination.is_fleet()
    }

    // ------------------------------------------------------------- CRUD

    /// PUT: creates, or confirms an identical existing subscription (and
    /// learns the request's stream key for its wake events).
    pub async fn put(
        self: &Arc<Self>,
        project: &str,
        id: &str,
        config: SubConfig,
        base_url: &str,
        key: Option<StreamKey>,
    ) -> Result<PutAnswer, SubError> {
        // Counted from before the initial tails are read, so that no append
        // between that read and the insertion goes untold.
        self.creating.fetch_add(1, Ordering::SeqCst);
        let answer = self.put_counted(project, id, config, base_url, key).await;
        self.creating.fetch_sub(1, Ordering::SeqCst);
        answer
    }

    async fn put_counted(
        self: &Arc<Self>,
        project: &str,
        id: &str,
        config: SubConfig,
        base_url: &str,
        key: Option<StreamKey>,
    ) -> Result<PutAnswer, SubError> {
        check_id(id)?;
        let hash = config.hash()?;
        match self.get_sub(project, id).await {
            Ok(existing) => {
                let mut st = existing.state.lock().await;
                if !st.retired {
                    if st.record.config_hash != hash {
                        return Err(SubError::AlreadyExists);
                    }
                    if key.is_some() {
                        st.wake_key = key;
                    }
                    return Ok(PutAnswer {
                        created: false,
                        subscription: self.describe(&st.record, st.status),
                    });
                }
            }
            Err(SubError::NotFound) => {}
            Err(e) => return Err(e),
        }
        if let Some(url) = &config.webhook_url {
            self.webhooks.validate_url(url)?;
        }
        let links = self.initial_links(project, &config).await?;
        let record = SubRecord {
            format: RECORD_FORMAT,
            id: id.to_string(),
            config,
            config_hash: hash,
            created_at: rfc3339_ms(self.streams.now_ms()),
            base_url: base_url.to_string(),
            links,
            generation: 0,
            write_token: String::new(),
            wake: None,
        };
        let mut state = SubState {
            record,
            stored: None,
            status: SubStatus::Active,
            lease_epoch: 0,
            wake_key: key,
            retired: false,
        };
        let sub_key = SubKey {
            project: project.to_string(),
            id: id.to_string(),
        };
        // A subscription deleted earlier under this id may still be stored.
        state.stored = self.records.load(project, id).await;
        self.save(&sub_key, &mut state).await?;
        let subscription = self.describe(&state.record, state.status);
        let sub = Arc::new(Sub {
            key: sub_key.clone(),
            state: Mutex::new(state),
        });
        let mut term = self.term.write().await;
        if !term.serving {
            return Err(SubError::Unavailable(
                "the subscriptions moved to another server while this one was created; retry"
                    .into(),
            ));
        }
        term.subs.insert(sub_key, sub);
        self.served.store(term.subs.len(), Ordering::SeqCst);
        Ok(PutAnswer {
            created: true,
            subscription,
        })
    }

    /// Explicit streams start at their current tail, and so does every
    /// existing stream the pattern matches: nothing already there is pending.
    async fn initial_links(
        &self,
        project: &str,
        config: &SubConfig,
    ) -> Result<BTreeMap<String, Link>, SubError> {
        let explicit: Vec<String> = config.streams.iter().cloned().collect();
        let mut matched = Vec::new();
        if let Some(pattern) = &config.pattern {
            let names = self
                .streams
                .live_names(project)
                .await
                .map_err(|e| SubError::Unavailable(e.to_string()))?;
            matched = names
                .into_iter()
                .filter(|name| glob_match(pattern, name))
                .collect();
        }
        let all: Vec<String> = explicit.iter().chain(&matched).cloned().collect();
        let tails = self.coordination.tails(project, &all).await;
        let mut links = BTreeMap::new();
        for path in explicit {
            let acked = Some(tails.get(&path).copied().unwrap_or(0));
            links.insert(
                path,
                Link {
                    glob: false,
                    explicit: true,
                    acked,
                },
            );
        }
        for name in matched {
            if let Some(tail) = tails.get(&name).copied() {
                let link = links.entry(name).or_insert(Link {
                    acked: Some(tail),
                    ..Link::default()
                });
                link.glob = true;
            }
        }
        Ok(links)
    }

    fn describe(&self, record: &SubRecord, status: SubStatus) -> Description {
        let streams = record
            .links
            .iter()
            .map(|(path, link)| LinkedStream {
                acked_offset: acked_text(link.acked),
                link_type: LinkType::of(link),
                path: path.clone(),
            })
            .collect();
        let webhook = record
            .config
            .webhook_url
            .as_ref()
            .map(|url| WebhookDescription {
                signing: Signing {
                    alg: "ed25519",
                    jwks_url: Self::jwks_url(&record.base_url),
                    kid: self.signer.kid().to_string(),
                },
                url: url.clone(),
            });
        Description {
            created_at: record.created_at.clone(),
            description: record.config.description.clone(),
            id: record.id.clone(),
            lease_ttl_ms: record.config.lease_ttl_ms,
            pattern: record.config.pattern.clone(),
            status,
            streams,
            subscription_id: record.id.clone(),
            kind: record.config.kind,
            wake_stream: record.config.wake_stream.clone(),
            webhook,
        }
    }

    pub async fn get(&self, project: &str, id: &str) -> Result<Description, SubError> {
        let sub = self.get_sub(project, id).await?;
        let st = sub.state.lock().await;
        if st.retired {
            return Err(SubError::NotFound);
        }
        Ok(self.describe(&st.record, st.status))
    }

    /// Deletes the subscription (deleting a missing one is not an error).
    pub async fn delete(&self, project: &str, id: &str) -> Result<(), SubError> {
        let sub = match self.get_sub(project, id).await {
            Ok(sub) => sub,
            Err(SubError::NotFound) => return Ok(()),
            Err(e) => return Err(e),
        };
        {
            let mut term = self.term.write().await;
            term.subs.remove(&sub.key);
            self.served.store(term.subs.len(), Ordering::SeqCst);
        }
        let mut st = sub.state.lock().await;
        st.retired = true;
        st.record.wake = None;
        st.lease_epoch += 1;
        self.records.delete(project, id).await;
        Ok(())
    }

    /// Links explicit streams, each from its current tail.
    pub async fn add_streams(
        self: &Arc<Self>,
        project: &str,
        id: &str,
        request: AddStreamsRequest,
    ) -> Result<(), SubError> {
        let sub = self.get_sub(project, id).await?;
        let mut st = sub.state.lock().await;
        let tails = self.coordination.tails(project, &request.streams).await;
        for path in request.streams {
            let tail = tails.get(&path).copied().unwrap_or(0);
            let link = st.record.links.entry(path.clone()).or_insert(Link {
                acked: Some(tail),
                ..Link::default()
            });
            link.explicit = true;
            st.record.config.streams.insert(path);
        }
        self.save(&sub.key, &mut st).await
    }

    /// Unlinks an explicit stream (a stream the pattern matches stays linked).
    pub async fn remove_stream(&self, project: &str, id: &str, path: &str) -> Result<(), SubError> {
        let path = normalise_path(path);
        let sub = self.get_sub(project, id).await?;
        let mut st = sub.state.lock().await;
        st.record.config.streams.remove(&path);
        let drop_link = match st.record.links.get_mut(&path) {
            Some(link) => {
                link.explicit = false;
                !link.glob
            }
            None => false,
        };
        if drop_link {
            st.record.links.remove(&path);
        }
        self.save(&sub.key, &mut st).await
    }
}

/// Tells the coordinator, batch by batch, about appends queued here, for as
/// long as the process lives (bounded: see `coordinator.rs`).
async fn relay_loop(me: Arc<Subscriptions>) {
    let mut backoff = Coordination::backoff_start();
    loop {
        let batch = me.coordination.next_batch().await;
        match me.coordination.locate() {
            CoordinatorAt::Here => me.apply(batch),
            CoordinatorAt::Elsewhere(url) => me.coordination.send(&url, batch, &mut backoff).await,
            CoordinatorAt::Unknown => me.coordination.hold(batch, &mut backoff).await,
        }
    }
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;
