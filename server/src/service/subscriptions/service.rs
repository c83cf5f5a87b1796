//! The subscription service: the `Subscriptions` facade.
//!
//! Owns the in-memory state of every subscription (its record, the wake in
//! flight, the lease) and the operations on it: put, get, delete, linking and
//! unlinking streams, claim, acknowledge, release, and the wake logic that
//! `on_append` and lapsed leases drive. It speaks no HTTP: requests arrive
//! parsed ([`super::requests`]), answers leave typed ([`super::answers`]),
//! refusals are [`SubError`] variants.
//!
//! Invariants (docs/ARCHITECTURE.md, "Subscriptions"):
//! * a subscription's state is changed only under its own lock; the map of
//!   subscriptions is locked only to find or insert one;
//! * a wake grows the generation, and an acknowledgement or release counts
//!   only for the current wake id, generation and token generation (else
//!   `Fenced`);
//! * every lease start grows `lease_epoch`, and a lease timer acts only if
//!   the epoch is still its own, so a lapsed lease never ends a newer wake;
//! * time comes from the stream service's injected clock
//!   ([`Streams::now_ms`]) and randomness from its injected entropy
//!   ([`Streams::random_bytes16`]), never from the system directly.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::ObjectStore;
use strata_segments::StreamKey;
use tokio::sync::Mutex;
use tracing::Instrument;

use super::answers::{
    acked_text, AckAnswer, ClaimAnswer, Description, LinkType, LinkedStream, LinkedTail, PutAnswer,
    Signing, StreamState, SubStatus, WakeBody, WakeEvent, WebhookDescription,
};
use super::error::{OpenError, SubError};
use super::paths::{glob_match, normalise_path};
use super::requests::{check_id, AckEntry, AckRequest, AddStreamsRequest, ClaimRequest, WakeRef};
use super::signing::{Jwks, Signer};
use super::store::{Kind, Link, RecordStore, StoredRecord, SubConfig, SubRecord, RECORD_FORMAT};
use super::tokens::{TokenKey, VerifiedToken};
use super::webhook::{Attempt, DeliveryEnd, DeliveryPolicy, DeliveryTarget, Flow, WebhookClient};
use crate::service::{AppendSpec, StoreDeadline, Streams, DEFAULT_PROJECT};
use hex::encode as hex;

/// Longest a wake event's append waits for its acknowledgement (it goes on
/// past that; the wait only bounds the background task).
const WAKE_APPEND_WAIT_MAX: Duration = Duration::from_secs(30);

/// A wake in flight.
struct Wake {
    id: String,
    /// The linked tails at the wake: what a `done` acknowledges.
    snapshot: BTreeMap<String, u64>,
    /// The worker that claimed it (pull-wake).
    holder: Option<String>,
}

struct SubState {
    record: SubRecord,
    stored: Option<StoredRecord>,
    status: SubStatus,
    wake: Option<Wake>,
    /// Grows with every lease start; a lease timer acts only on its own.
    lease_epoch: u64,
    /// The key pull-wake events are appended with (memory only).
    wake_key: Option<StreamKey>,
    deleted: bool,
}

impl SubState {
    fn loaded(stored: StoredRecord) -> SubState {
        SubState {
            record: stored.value.clone(),
            stored: Some(stored),
            status: SubStatus::Active,
            wake: None,
            lease_epoch: 0,
            wake_key: None,
            deleted: false,
        }
    }

    /// Whether the wake of `generation` is still the one in flight.
    fn is_current(&self, generation: u64) -> bool {
        self.record.generation == generation && self.wake.is_some() && !self.deleted
    }
}

struct Sub {
    id: String,
    state: Mutex<SubState>,
}

/// The subscriptions of the default project.
pub struct Subscriptions {
    streams: Arc<Streams>,
    records: RecordStore,
    signer: Signer,
    tokens: TokenKey,
    subs: parking_lot::Mutex<HashMap<String, Arc<Sub>>>,
    webhooks: WebhookClient,
}

/// `ms` since the Unix epoch as RFC 3339 with milliseconds (`…Z`).
fn rfc3339_ms(ms: u64) -> String {
    i64::try_from(ms)
        .ok()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl Subscriptions {
    /// Loads (or creates) the signing key and every stored subscription.
    pub async fn open(
        streams: Arc<Streams>,
        store: Arc<dyn ObjectStore>,
        allow_loopback_webhooks: bool,
    ) -> Result<Arc<Subscriptions>, OpenError> {
        let policy = DeliveryPolicy::default();
        Self::open_with_policy(streams, store, allow_loopback_webhooks, policy).await
    }

    /// [`Subscriptions::open`] with webhooks delivered under `policy`.
    pub(crate) async fn open_with_policy(
        streams: Arc<Streams>,
        store: Arc<dyn ObjectStore>,
        allow_loopback_webhooks: bool,
        policy: DeliveryPolicy,
    ) -> Result<Arc<Subscriptions>, OpenError> {
        let signer = Signer::load(&store, || streams.random_bytes16()).await?;
        let mut token_key = [0u8; 32];
        token_key[..16].copy_from_slice(&streams.random_bytes16());
        token_key[16..].copy_from_slice(&streams.random_bytes16());
        let webhooks = WebhookClient::new(allow_loopback_webhooks, policy)
            .map_err(OpenError::WebhookClient)?;
        let records = RecordStore::new(store);
        let mut subs = HashMap::new();
        for stored in records.load_all().await? {
            let id = stored.value.id.clone();
            let sub = Arc::new(Sub {
                id: id.clone(),
                state: Mutex::new(SubState::loaded(stored)),
            });
            subs.insert(id, sub);
        }
        Ok(Arc::new(Subscriptions {
            streams,
            records,
            signer,
            tokens: TokenKey::new(&token_key)?,
            subs: parking_lot::Mutex::new(subs),
            webhooks,
        }))
    }

    /// Writes the record after a change (best effort after the first write:
    /// a failed save leaves the in-memory state authoritative until restart).
    async fn save(&self, id: &str, st: &mut SubState) -> Result<(), SubError> {
        st.record.write_token = hex(self.streams.random_bytes16());
        self.records.save(id, &st.record, &mut st.stored).await
    }

    fn get_sub(&self, id: &str) -> Result<Arc<Sub>, SubError> {
        self.subs.lock().get(id).cloned().ok_or(SubError::NotFound)
    }

    /// The JWKS document receivers verify webhook signatures with.
    pub fn jwks(&self) -> Jwks {
        self.signer.jwks()
    }

    /// Checks a bearer token for subscription `id` against the clock.
    pub fn verify_token(&self, id: &str, token: Option<&str>) -> Result<VerifiedToken, SubError> {
        self.tokens.check(id, token, self.streams.now_ms())
    }

    fn mint_token(&self, id: &str, generation: u64) -> String {
        self.tokens.mint(
            id,
            generation,
            self.streams.now_ms(),
            self.streams.random_bytes16(),
        )
    }

    fn jwks_url(base: &str) -> String {
        format!("{base}/v1/stream/__ds/jwks.json")
    }

    // ------------------------------------------------------------- CRUD

    /// PUT: creates, or confirms an identical existing subscription.
    pub async fn put(
        self: &Arc<Self>,
        id: &str,
        config: SubConfig,
        base_url: &str,
        key: Option<StreamKey>,
    ) -> Result<PutAnswer, SubError> {
        check_id(id)?;
        let hash = config.hash()?;
        if let Ok(existing) = self.get_sub(id) {
            let st = existing.state.lock().await;
            if !st.deleted {
                if st.record.config_hash == hash {
                    return Ok(PutAnswer {
                        created: false,
                        subscription: self.describe(&st.record, st.status),
                    });
                }
                return Err(SubError::AlreadyExists);
            }
        }
        if let Some(url) = &config.webhook_url {
            self.webhooks.validate_url(url)?;
        }
        // Explicit streams start at their current tail, and so does every
        // existing stream the pattern matches: nothing already there is pending.
        let mut links = BTreeMap::new();
        for path in &config.streams {
            let tail = self.tail(path).await.unwrap_or(0);
            links.insert(
                path.clone(),
                Link {
                    glob: false,
                    explicit: true,
                    acked: Some(tail),
                },
            );
        }
        if let Some(pattern) = &config.pattern {
            let names = self
                .streams
                .live_names(DEFAULT_PROJECT)
                .await
                .map_err(|e| SubError::Unavailable(e.to_string()))?;
            for name in names {
                if glob_match(pattern, &name) {
                    if let Some(tail) = self.tail(&name).await {
                        let link = links.entry(name).or_insert(Link {
                            acked: Some(tail),
                            ..Link::default()
                        });
                        link.glob = true;
                    }
                }
            }
        }
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
        };
        let mut state = SubState {
            record,
            stored: None,
            status: SubStatus::Active,
            wake: None,
            lease_epoch: 0,
            wake_key: key,
            deleted: false,
        };
        // A subscription deleted earlier under this id may still be stored.
        state.stored = self.records.load(id).await;
        self.save(id, &mut state).await?;
        let subscription = self.describe(&state.record, state.status);
        let sub = Arc::new(Sub {
            id: id.to_string(),
            state: Mutex::new(state),
        });
        self.subs.lock().insert(id.to_string(), sub);
        Ok(PutAnswer {
            created: true,
            subscription,
        })
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

    pub async fn get(&self, id: &str) -> Result<Description, SubError> {
        let sub = self.get_sub(id)?;
        let st = sub.state.lock().await;
        if st.deleted {
            return Err(SubError::NotFound);
        }
        Ok(self.describe(&st.record, st.status))
    }

    /// Deletes the subscription (deleting a missing one is not an error).
    pub async fn delete(&self, id: &str) -> Result<(), SubError> {
        let Some(sub) = self.subs.lock().remove(id) else {
            return Ok(());
        };
        let mut st = sub.state.lock().await;
        st.deleted = true;
        st.wake = None;
        st.lease_epoch += 1;
        self.records.delete(id).await;
        Ok(())
    }

    /// Links explicit streams, each from its current tail.
    pub async fn add_streams(
        self: &Arc<Self>,
        id: &str,
        request: AddStreamsRequest,
    ) -> Result<(), SubError> {
        let sub = self.get_sub(id)?;
        let mut st = sub.state.lock().await;
        for path in request.streams {
            let tail = self.tail(&path).await.unwrap_or(0);
            let link = st.record.links.entry(path.clone()).or_insert(Link {
                acked: Some(tail),
                ..Link::default()
            });
            link.explicit = true;
            st.record.config.streams.insert(path);
        }
        self.save(id, &mut st).await
    }

    /// Unlinks an explicit stream (a stream the pattern matches stays linked).
    pub async fn remove_stream(&self, id: &str, path: &str) -> Result<(), SubError> {
        let path = normalise_path(path);
        let sub = self.get_sub(id)?;
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
        self.save(id, &mut st).await
    }

    // ----------------------------------------------------------- wakes

    async fn tail(&self, path: &str) -> Option<u64> {
        self.streams
            .head(DEFAULT_PROJECT, path)
            .await
            .ok()
            .map(|m| m.tail)
    }

    /// Linked streams with their tails and whether they are pending.
    async fn linked_tails(&self, st: &SubState) -> Vec<LinkedTail> {
        let mut out = Vec::new();
        for (path, link) in &st.record.links {
            let Some(tail) = self.tail(path).await else {
                continue;
            };
            let pending = link.acked.map_or(tail > 0, |a| tail > a);
            out.push(LinkedTail {
                path: path.clone(),
                link: link.clone(),
                tail,
                pending,
            });
        }
        out
    }

    /// Called after an append to `name`: links it where a pattern matches, and
    /// wakes every subscription with pending work.
    pub async fn on_append(self: &Arc<Self>, name: String) {
        let subs: Vec<Arc<Sub>> = self.subs.lock().values().cloned().collect();
        for sub in subs {
            let mut st = sub.state.lock().await;
            if st.deleted {
                continue;
            }
            let matches = st
                .record
                .config
                .pattern
                .as_deref()
                .is_some_and(|p| glob_match(p, &name));
            let mut changed = false;
            if matches {
                let link = st.record.links.entry(name.clone()).or_default();
                if !link.glob {
                    link.glob = true;
                    changed = true;
                }
            }
            if !st.record.links.contains_key(&name) {
                continue;
            }
            if changed {
                let _ = self.save(&sub.id, &mut st).await;
            }
            self.maybe_wake(&sub, &mut st).await;
        }
    }

    /// Wakes the subscription if it is idle and has pending work; returns
    /// whether it woke. (Boxed: delivery re-wakes, which delivers again.)
    fn maybe_wake<'a>(
        self: &'a Arc<Self>,
        sub: &'a Arc<Sub>,
        st: &'a mut SubState,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(self.wake_now(sub, st))
    }

    async fn wake_now(self: &Arc<Self>, sub: &Arc<Sub>, st: &mut SubState) -> bool {
        if st.deleted || st.wake.is_some() {
            return false;
        }
        let tails = self.linked_tails(st).await;
        if !tails.iter().any(|t| t.pending) {
            return false;
        }
        st.record.generation += 1;
        let generation = st.record.generation;
        let wake_id = format!("w_{}", &hex(self.streams.random_bytes16())[..24]);
        let snapshot: BTreeMap<String, u64> =
            tails.iter().map(|t| (t.path.clone(), t.tail)).collect();
        st.wake = Some(Wake {
            id: wake_id.clone(),
            snapshot,
            holder: None,
        });
        let _ = self.save(&sub.id, st).await;
        match st.record.config.kind {
            Kind::Webhook => {
                let body = WakeBody {
                    callback_token: self.mint_token(&sub.id, generation),
                    callback_url: format!(
                        "{}/v1/stream/__ds/subscriptions/{}/callback",
                        st.record.base_url, sub.id
                    ),
                    generation,
                    streams: StreamState::of(&tails),
                    subscription_id: sub.id.clone(),
                    wake_id,
                };
                self.start_lease(sub, st);
                match serde_json::to_string(&body) {
                    Ok(body) => {
                        let delivery = WakeDelivery {
                            subs: self.clone(),
                            sub: sub.clone(),
                            generation,
                        };
                        tokio::spawn(async move { delivery.run(body).await });
                    }
                    // The lease lapses and re-wakes.
                    Err(e) => {
                        tracing::warn!(subscription = %sub.id, error = %e, "encoding a wake failed")
                    }
                }
            }
            Kind::PullWake => {
                let trigger = tails
                    .iter()
                    .find(|t| t.pending)
                    .map(|t| t.path.clone())
                    .unwrap_or_default();
                self.append_wake_event(st, &sub.id, &trigger, generation)
                    .await;
            }
        }
        true
    }

    async fn append_wake_event(&self, st: &SubState, id: &str, stream: &str, generation: u64) {
        let (Some(wake_stream), Some(key)) = (&st.record.config.wake_stream, &st.wake_key) else {
            return;
        };
        let event = WakeEvent {
            generation,
            stream: stream.to_string(),
            subscription_id: id.to_string(),
            ts: self.streams.now_ms(),
            kind: "wake",
        };
        let body = match serde_json::to_vec(&event) {
            Ok(body) => Bytes::from(body),
            Err(e) => {
                tracing::warn!(subscription = id, error = %e, "encoding a wake event failed");
                return;
            }
        };
        let spec = AppendSpec {
            routing_key: Bytes::new(),
            content_type: Some("application/json".into()),
            body,
            records: None,
            producer: None,
            stream_seq: None,
            close: false,
        };
        if let Err(e) = self
            .streams
            .append(
                DEFAULT_PROJECT,
                wake_stream,
                spec,
                key,
                StoreDeadline::after(WAKE_APPEND_WAIT_MAX),
            )
            .await
        {
            tracing::warn!(subscription = id, error = %e, "appending a wake event failed");
        }
    }

    fn start_lease(self: &Arc<Self>, sub: &Arc<Sub>, st: &mut SubState) {
        st.lease_epoch += 1;
        let epoch = st.lease_epoch;
        let ttl = Duration::from_millis(st.record.config.lease_ttl_ms);
        let me = self.clone();
        let sub = sub.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ttl).await;
            let mut st = sub.state.lock().await;
            if st.lease_epoch != epoch || st.wake.is_none() || st.deleted {
                return;
            }
            // Unanswered: the wake lapses and, if work is pending, comes again.
            st.wake = None;
            me.maybe_wake(&sub, &mut st).await;
        });
    }

    /// Moves every linked stream's acknowledged offset up to the wake's
    /// snapshot and ends the wake.
    fn ack_snapshot(st: &mut SubState) {
        if let Some(wake) = st.wake.take() {
            for (path, tail) in wake.snapshot {
                if let Some(link) = st.record.links.get_mut(&path) {
                    link.acked = Some(link.acked.map_or(tail, |a| a.max(tail)));
                }
            }
        }
        st.lease_epoch += 1;
    }

    // ------------------------------------------------------ answers

    /// `callback` (webhooks) and `ack` (pull-wake): fenced acknowledgements.
    pub async fn acknowledge(
        self: &Arc<Self>,
        token: &VerifiedToken,
        request: AckRequest,
    ) -> Result<AckAnswer, SubError> {
        let id = token.subscription();
        let sub = self.get_sub(id)?;
        let mut st = sub.state.lock().await;
        Self::fence(&st, token, &request.wake)?;
        let mut acks = Vec::new();
        for entry in request.acks {
            let (path, offset) = match entry {
                AckEntry::Ack { stream, offset } => (stream, offset),
                AckEntry::NoStream => return Err(SubError::AckWithoutStream),
                AckEntry::BadOffset { .. } => return Err(SubError::AckOffsetInvalid),
            };
            let acked = st
                .record
                .links
                .get(&path)
                .ok_or_else(|| SubError::NotLinked {
                    stream: path.clone(),
                })?
                .acked;
            let tail = self.tail(&path).await.unwrap_or(0);
            if acked.is_some_and(|a| offset < a) || offset > tail {
                return Err(SubError::AckOutOfRange { stream: path });
            }
            acks.push((path, offset));
        }
        for (path, offset) in acks {
            if let Some(link) = st.record.links.get_mut(&path) {
                link.acked = Some(offset);
            }
        }
        let next_wake = if request.done {
            st.wake = None;
            st.lease_epoch += 1;
            let _ = self.save(id, &mut st).await;
            self.maybe_wake(&sub, &mut st).await
        } else {
            let _ = self.save(id, &mut st).await;
            self.start_lease(&sub, &mut st);
            false
        };
        Ok(AckAnswer {
            next_wake,
            ok: true,
        })
    }

    fn fence(st: &SubState, token: &VerifiedToken, wake: &WakeRef) -> Result<(), SubError> {
        let current = st.wake.as_ref().map(|w| w.id.as_str());
        if st.deleted
            || token.generation() != st.record.generation
            || wake.generation != Some(st.record.generation)
            || wake.wake_id.is_none()
            || wake.wake_id.as_deref() != current
        {
            return Err(SubError::Fenced);
        }
        Ok(())
    }

    /// A worker claims the pending wake of a pull-wake subscription.
    pub async fn claim(
        self: &Arc<Self>,
        id: &str,
        request: ClaimRequest,
    ) -> Result<ClaimAnswer, SubError> {
        let sub = self.get_sub(id)?;
        let mut st = sub.state.lock().await;
        if st.record.config.kind != Kind::PullWake {
            return Err(SubError::NotPullWake);
        }
        if let Some(holder) = st.wake.as_ref().and_then(|w| w.holder.clone()) {
            return Err(SubError::AlreadyClaimed {
                holder,
                generation: st.record.generation,
            });
        }
        let tails = self.linked_tails(&st).await;
        if !tails.iter().any(|t| t.pending) {
            return Err(SubError::NoPendingWork);
        }
        if st.wake.is_none() {
            self.maybe_wake(&sub, &mut st).await;
        }
        let generation = st.record.generation;
        let token = self.mint_token(id, generation);
        let wake = st.wake.as_mut().ok_or(SubError::NoPendingWork)?;
        wake.holder = Some(request.worker);
        let wake_id = wake.id.clone();
        self.start_lease(&sub, &mut st);
        Ok(ClaimAnswer {
            generation,
            lease_ttl_ms: st.record.config.lease_ttl_ms,
            streams: StreamState::of(&tails),
            token,
            wake_id,
        })
    }

    /// Gives the current wake up (it comes again if work is pending).
    pub async fn release(
        self: &Arc<Self>,
        token: &VerifiedToken,
        wake: WakeRef,
    ) -> Result<(), SubError> {
        let sub = self.get_sub(token.subscription())?;
        let mut st = sub.state.lock().await;
        Self::fence(&st, token, &wake)?;
        st.wake = None;
        st.lease_epoch += 1;
        self.maybe_wake(&sub, &mut st).await;
        Ok(())
    }
}

/// One webhook wake being delivered (the delivery loop's view of it).
struct WakeDelivery {
    subs: Arc<Subscriptions>,
    sub: Arc<Sub>,
    generation: u64,
}

impl WakeDelivery {
    async fn run(self, body: String) {
        let span = tracing::debug_span!("webhook", subscription = %self.sub.id, generation = self.generation);
        match self
            .subs
            .webhooks
            .deliver(&self, &body)
            .instrument(span)
            .await
        {
            DeliveryEnd::GaveUp { attempts } => tracing::info!(
                subscription = %self.sub.id,
                attempts,
                "webhook delivery gave up; the wake's lease will re-wake"
            ),
            DeliveryEnd::Stopped { .. } => {}
        }
    }
}

impl DeliveryTarget for WakeDelivery {
    async fn url(&self) -> Option<String> {
        let st = self.sub.state.lock().await;
        if !st.is_current(self.generation) {
            return None;
        }
        st.record.config.webhook_url.clone()
    }

    fn signature(&self, body: &str) -> String {
        let t = self.subs.streams.now_ms() / 1000;
        self.subs.signer.signature_header(t, body)
    }

    async fn settle(&self, attempt: Attempt) -> Flow {
        let mut st = self.sub.state.lock().await;
        if !st.is_current(self.generation) {
            return Flow::Stop;
        }
        match attempt {
            Attempt::Done => {
                st.status = SubStatus::Active;
                Subscriptions::ack_snapshot(&mut st);
                let _ = self.subs.save(&self.sub.id, &mut st).await;
                self.subs.maybe_wake(&self.sub, &mut st).await;
                Flow::Stop
            }
            Attempt::Accepted => {
                st.status = SubStatus::Active;
                Flow::Stop
            }
            Attempt::Failed => {
                st.status = SubStatus::Failed;
                Flow::Retry
            }
        }
    }

    fn random_u64(&self) -> u64 {
        let bytes = self.subs.streams.random_bytes16();
        let mut low = [0u8; 8];
        low.copy_from_slice(&bytes[..8]);
        u64::from_le_bytes(low)
    }
}

#[cfg(test)]
#[path = "service_tests.rs"]
mod tests;
