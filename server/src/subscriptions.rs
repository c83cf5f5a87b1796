//! Subscriptions: the reserved `__ds` API of the Durable Streams surface.
//!
//! A subscription links streams (explicitly, or by a glob `pattern` over stream
//! names: `*` one segment, `**` any number) and remembers, per stream, the
//! offset its consumer has acknowledged. When a linked stream has records past
//! that offset the subscription *wakes*: its `generation` grows, a `wake_id` is
//! minted and the linked tails are snapshotted. A webhook subscription POSTs the
//! wake to its URL, signed with the server's Ed25519 key (published at
//! `__ds/jwks.json`); a pull-wake subscription appends a wake event to its wake
//! stream, and workers `claim` it. Acknowledgements (`callback` / `ack`) and
//! `release` carry a token scoped to (subscription, generation) and the current
//! `wake_id`/`generation`: anything stale is refused as `FENCED`. A lease bounds
//! how long a wake may stay unanswered before it is re-issued.
//!
//! Subscription configuration, links, acknowledged offsets and generation are
//! stored as CAS JSON objects (`registry/<project>/subscriptions/<id-hash>.json`)
//! and reloaded at start-up; wakes in flight and leases live in memory (a
//! restart re-wakes whatever is pending). Tokens are HMAC-SHA256 under a key
//! kept in memory. Webhook URLs must be `https` to a public address; plain-HTTP
//! loopback URLs are allowed only when the server is started with
//! `--allow-loopback-webhooks` (development and the conformance suite).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

/// Longest a wake event's append waits for its acknowledgement (it goes on
/// past that; the wait only bounds the background task).
const WAKE_APPEND_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(30);

use crate::service::names;
use base64::Engine as _;
use bytes::Bytes;
use ed25519_dalek::{Signer as _, SigningKey};
use futures::TryStreamExt;
use hmac::{Hmac, Mac};
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use strata_manifest::{CasCodec, CasObject, RetryPolicy, Versioned};
use strata_segments::StreamKey;
use tokio::sync::Mutex;

use crate::ds::offsets::Offset;
use crate::service::{AppendSpec, StreamObserver, Streams, DEFAULT_PROJECT};
use hex::encode as hex;

const B64URL: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;
const LEASE_MS_DEFAULT: u64 = 30_000;
const LEASE_MS_MIN: u64 = 1_000;
const LEASE_MS_MAX: u64 = 600_000;
const TOKEN_LIFETIME_S: u64 = 3_600;
const RETRY_DELAY_MS_MAX: u64 = 60_000;
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// Most streams one subscription may name explicitly.
const EXPLICIT_STREAMS_MAX: usize = 10_000;

/// An error of the `__ds` API: status, upper-case code, and extra fields.
#[derive(Debug)]
pub struct SubError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    pub extra: Vec<(&'static str, Value)>,
}

impl SubError {
    fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        SubError {
            status,
            code,
            message: message.into(),
            extra: Vec::new(),
        }
    }

    fn invalid(message: impl Into<String>) -> Self {
        SubError::new(400, "INVALID_REQUEST", message)
    }

    fn not_found() -> Self {
        SubError::new(404, "SUBSCRIPTION_NOT_FOUND", "no such subscription")
    }

    fn fenced() -> Self {
        SubError::new(409, "FENCED", "the wake is no longer current")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Webhook,
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
    fn hash(&self) -> String {
        let canonical = serde_json::to_vec(self).expect("serialisable");
        hex(&Sha256::digest(&canonical)[..16])
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Link {
    pub glob: bool,
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
}

struct SubRecordCodec;

impl CasCodec for SubRecordCodec {
    type Value = SubRecord;
    type Error = serde_json::Error;

    fn encode(value: &SubRecord) -> Result<Bytes, serde_json::Error> {
        serde_json::to_vec_pretty(value).map(Bytes::from)
    }

    fn decode(bytes: &Bytes) -> Result<SubRecord, serde_json::Error> {
        serde_json::from_slice(bytes)
    }

    fn write_token(value: &SubRecord) -> [u8; 16] {
        crate::service::write_token::write_token(&value.write_token)
    }
}

/// A wake in flight.
struct Wake {
    id: String,
    snapshot: BTreeMap<String, u64>,
    holder: Option<String>,
}

struct SubState {
    record: SubRecord,
    stored: Option<Versioned<SubRecord>>,
    status: &'static str,
    wake: Option<Wake>,
    /// Grows with every lease start; a lease timer acts only on its own.
    lease_epoch: u64,
    /// The key pull-wake events are appended with (memory only).
    wake_key: Option<StreamKey>,
    deleted: bool,
}

struct Sub {
    id: String,
    state: Mutex<SubState>,
}

/// The server's webhook signing key.
struct Signer {
    key: SigningKey,
    kid: String,
    x: String,
}

#[derive(Serialize, Deserialize)]
struct StoredSigningKey {
    seed: String,
}

#[derive(Serialize, Deserialize)]
struct TokenClaims {
    sub: String,
    generation: u64,
    exp: u64,
    jti: String,
}

pub struct Subscriptions {
    streams: Arc<Streams>,
    store: Arc<dyn ObjectStore>,
    signer: Signer,
    token_key: [u8; 32],
    subs: parking_lot::Mutex<HashMap<String, Arc<Sub>>>,
    http: reqwest::Client,
    allow_loopback_webhooks: bool,
}

/// Glob match over `/`-separated segments: `*` one segment, `**` any number.
pub fn glob_match(pattern: &str, path: &str) -> bool {
    fn go(p: &[&str], s: &[&str]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some((&"**", rest)) => (0..=s.len()).any(|i| go(rest, &s[i..])),
            Some((first, rest)) => match s.split_first() {
                Some((seg, tail)) => (*first == "*" || first == seg) && go(rest, tail),
                None => false,
            },
        }
    }
    let p: Vec<&str> = pattern.trim_matches('/').split('/').collect();
    let s: Vec<&str> = path.trim_matches('/').split('/').collect();
    go(&p, &s)
}

fn normalise_path(path: &str) -> String {
    path.trim_matches('/').to_string()
}

impl Subscriptions {
    /// Loads (or creates) the signing key and every stored subscription.
    pub async fn open(
        streams: Arc<Streams>,
        store: Arc<dyn ObjectStore>,
        allow_loopback_webhooks: bool,
    ) -> Result<Arc<Subscriptions>, String> {
        let signer = load_signer(&store, &streams).await?;
        let mut token_key = [0u8; 32];
        token_key[..16].copy_from_slice(&streams.random_bytes16());
        token_key[16..].copy_from_slice(&streams.random_bytes16());
        let http = reqwest::Client::builder()
            .timeout(WEBHOOK_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("webhook client: {e}"))?;
        let subs = Arc::new(Subscriptions {
            streams,
            store,
            signer,
            token_key,
            subs: parking_lot::Mutex::new(HashMap::new()),
            http,
            allow_loopback_webhooks,
        });
        subs.load_all().await?;
        Ok(subs)
    }

    async fn load_all(self: &Arc<Self>) -> Result<(), String> {
        let prefix =
            object_store::path::Path::from(format!("registry/{DEFAULT_PROJECT}/subscriptions"));
        let metas: Vec<_> = self
            .store
            .list(Some(&prefix))
            .try_collect()
            .await
            .map_err(|e| format!("listing subscriptions: {e}"))?;
        for meta in metas {
            let cas = CasObject::<SubRecordCodec>::new(
                self.store.clone(),
                meta.location.clone(),
                RetryPolicy::default(),
            );
            match cas.load().await {
                Ok(Some(stored)) => {
                    let id = stored.value.id.clone();
                    let sub = Arc::new(Sub {
                        id: id.clone(),
                        state: Mutex::new(SubState {
                            record: stored.value.clone(),
                            stored: Some(stored),
                            status: "active",
                            wake: None,
                            lease_epoch: 0,
                            wake_key: None,
                            deleted: false,
                        }),
                    });
                    self.subs.lock().insert(id, sub);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(object = %meta.location, error = %e, "skipping an unreadable subscription")
                }
            }
        }
        Ok(())
    }

    fn cas(&self, id: &str) -> CasObject<SubRecordCodec> {
        CasObject::new(
            self.store.clone(),
            names::subscription(DEFAULT_PROJECT, id),
            RetryPolicy::default(),
        )
    }

    /// Writes the record after a change (best effort after the first write:
    /// a failed save leaves the in-memory state authoritative until restart).
    async fn save(&self, id: &str, st: &mut SubState) -> Result<(), SubError> {
        st.record.write_token = hex(&self.streams.random_bytes16());
        let cas = self.cas(id);
        let written = match &st.stored {
            Some(current) => cas.replace(current, st.record.clone()).await,
            None => cas.create(st.record.clone()).await,
        };
        match written {
            Ok(w) => {
                st.stored = Some(w);
                Ok(())
            }
            Err(e) => {
                tracing::warn!(subscription = id, error = %e, "saving the subscription failed");
                // Re-read so the next save compares against what is stored.
                st.stored = cas.load().await.ok().flatten();
                Err(SubError::new(
                    503,
                    "UNAVAILABLE",
                    "could not save the subscription; retry",
                ))
            }
        }
    }

    fn get_sub(&self, id: &str) -> Result<Arc<Sub>, SubError> {
        self.subs
            .lock()
            .get(id)
            .cloned()
            .ok_or_else(SubError::not_found)
    }

    pub fn jwks(&self) -> Value {
        json!({"keys": [{
            "kty": "OKP",
            "crv": "Ed25519",
            "x": self.signer.x,
            "kid": self.signer.kid,
            "use": "sig",
            "alg": "EdDSA",
        }]})
    }

    fn jwks_url(base: &str) -> String {
        format!("{base}/v1/stream/__ds/jwks.json")
    }

    fn validate_webhook_url(&self, text: &str) -> Result<(), SubError> {
        let rejected = |why: &str| {
            SubError::new(
                400,
                "WEBHOOK_URL_REJECTED",
                format!("webhook URL rejected: {why}"),
            )
        };
        let url = url::Url::parse(text).map_err(|_| rejected("not a URL"))?;
        let host = url.host().ok_or_else(|| rejected("no host"))?;
        let loopback = match &host {
            url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
            url::Host::Ipv4(ip) => ip.is_loopback(),
            url::Host::Ipv6(_) => false,
        };
        match url.scheme() {
            "http" if loopback && self.allow_loopback_webhooks => return Ok(()),
            "http" => {
                return Err(rejected(
                    "plain http is only allowed to loopback in development",
                ))
            }
            "https" => {}
            _ => return Err(rejected("use https")),
        }
        match host {
            url::Host::Ipv6(_) => Err(rejected("IPv6 literals are not allowed")),
            url::Host::Ipv4(ip) if !is_public(ip) => Err(rejected("private address")),
            url::Host::Domain(d) if d.eq_ignore_ascii_case("localhost") => {
                Err(rejected("localhost"))
            }
            _ => Ok(()),
        }
    }

    // ------------------------------------------------------------- CRUD

    /// PUT: creates, or confirms an identical existing subscription.
    pub async fn put(
        self: &Arc<Self>,
        id: &str,
        body: &[u8],
        base_url: &str,
        key: Option<StreamKey>,
    ) -> Result<(bool, Value), SubError> {
        if id.is_empty() || id.len() > 256 || id.contains('/') {
            return Err(SubError::invalid(
                "subscription id: 1 to 256 characters, no '/'",
            ));
        }
        let config = self.parse_config(body)?;
        let hash = config.hash();
        if let Ok(existing) = self.get_sub(id) {
            let st = existing.state.lock().await;
            if !st.deleted {
                if st.record.config_hash == hash {
                    return Ok((false, self.describe(&st.record, st.status)));
                }
                return Err(SubError::new(
                    409,
                    "SUBSCRIPTION_ALREADY_EXISTS",
                    "a subscription with another configuration has this id",
                ));
            }
        }
        if let Some(url) = &config.webhook_url {
            self.validate_webhook_url(url)?;
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
                .map_err(|e| SubError::new(503, "UNAVAILABLE", e.to_string()))?;
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
            format: 1,
            id: id.to_string(),
            config,
            config_hash: hash,
            created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            base_url: base_url.to_string(),
            links,
            generation: 0,
            write_token: String::new(),
        };
        let mut state = SubState {
            record,
            stored: None,
            status: "active",
            wake: None,
            lease_epoch: 0,
            wake_key: key,
            deleted: false,
        };
        // A subscription deleted earlier under this id may still be stored.
        state.stored = self.cas(id).load().await.ok().flatten();
        self.save(id, &mut state).await?;
        let value = self.describe(&state.record, state.status);
        let sub = Arc::new(Sub {
            id: id.to_string(),
            state: Mutex::new(state),
        });
        self.subs.lock().insert(id.to_string(), sub);
        Ok((true, value))
    }

    fn parse_config(&self, body: &[u8]) -> Result<SubConfig, SubError> {
        let v: Value =
            serde_json::from_slice(body).map_err(|e| SubError::invalid(e.to_string()))?;
        let kind = match v.get("type").and_then(Value::as_str) {
            Some("webhook") => Kind::Webhook,
            Some("pull-wake") => Kind::PullWake,
            _ => {
                return Err(SubError::invalid(
                    "type must be \"webhook\" or \"pull-wake\"",
                ))
            }
        };
        let pattern = v
            .get("pattern")
            .and_then(Value::as_str)
            .map(normalise_path)
            .filter(|p| !p.is_empty());
        let mut streams = BTreeSet::new();
        if let Some(list) = v.get("streams") {
            let list = list
                .as_array()
                .ok_or_else(|| SubError::invalid("streams must be an array of paths"))?;
            for s in list {
                let path = s
                    .as_str()
                    .map(normalise_path)
                    .filter(|p| !p.is_empty())
                    .ok_or_else(|| SubError::invalid("streams must be non-empty strings"))?;
                streams.insert(path);
            }
        }
        if streams.len() > EXPLICIT_STREAMS_MAX {
            return Err(SubError::invalid("too many streams"));
        }
        if pattern.is_none() && streams.is_empty() {
            return Err(SubError::invalid("give a pattern or streams"));
        }
        let webhook_url = v
            .get("webhook")
            .and_then(|w| w.get("url"))
            .and_then(Value::as_str)
            .map(str::to_string);
        let wake_stream = v
            .get("wake_stream")
            .and_then(Value::as_str)
            .map(normalise_path);
        match kind {
            Kind::Webhook if webhook_url.is_none() => {
                return Err(SubError::invalid(
                    "a webhook subscription needs webhook.url",
                ))
            }
            Kind::PullWake if wake_stream.is_none() => {
                return Err(SubError::invalid(
                    "a pull-wake subscription needs wake_stream",
                ))
            }
            _ => {}
        }
        let lease_ttl_ms = match v.get("lease_ttl_ms") {
            None | Some(Value::Null) => LEASE_MS_DEFAULT,
            Some(n) => n
                .as_u64()
                .filter(|n| (LEASE_MS_MIN..=LEASE_MS_MAX).contains(n))
                .ok_or_else(|| SubError::invalid("lease_ttl_ms must be 1000 to 600000"))?,
        };
        let description = v
            .get("description")
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(SubConfig {
            kind,
            pattern,
            streams,
            webhook_url,
            wake_stream,
            lease_ttl_ms,
            description,
        })
    }

    fn describe(&self, record: &SubRecord, status: &str) -> Value {
        let streams: Vec<Value> = record
            .links
            .iter()
            .map(|(path, link)| {
                json!({
                    "path": path,
                    "link_type": if link.explicit { "explicit" } else { "glob" },
                    "acked_offset": acked_text(link.acked),
                })
            })
            .collect();
        let webhook = record.config.webhook_url.as_ref().map(|url| {
            json!({
                "url": url,
                "signing": {
                    "alg": "ed25519",
                    "kid": self.signer.kid,
                    "jwks_url": Self::jwks_url(&record.base_url),
                },
            })
        });
        json!({
            "id": record.id,
            "subscription_id": record.id,
            "type": record.config.kind,
            "pattern": record.config.pattern,
            "streams": streams,
            "webhook": webhook,
            "wake_stream": record.config.wake_stream,
            "lease_ttl_ms": record.config.lease_ttl_ms,
            "created_at": record.created_at,
            "status": status,
            "description": record.config.description,
        })
    }

    pub async fn get(&self, id: &str) -> Result<Value, SubError> {
        let sub = self.get_sub(id)?;
        let st = sub.state.lock().await;
        if st.deleted {
            return Err(SubError::not_found());
        }
        Ok(self.describe(&st.record, st.status))
    }

    pub async fn delete(&self, id: &str) -> Result<(), SubError> {
        let Some(sub) = self.subs.lock().remove(id) else {
            return Ok(());
        };
        let mut st = sub.state.lock().await;
        st.deleted = true;
        st.wake = None;
        st.lease_epoch += 1;
        if let Err(e) = self
            .store
            .delete(&names::subscription(DEFAULT_PROJECT, id))
            .await
        {
            if !matches!(e, object_store::Error::NotFound { .. }) {
                tracing::warn!(subscription = id, error = %e, "deleting the stored subscription failed");
            }
        }
        Ok(())
    }

    pub async fn add_streams(self: &Arc<Self>, id: &str, body: &[u8]) -> Result<(), SubError> {
        let v: Value =
            serde_json::from_slice(body).map_err(|e| SubError::invalid(e.to_string()))?;
        let paths: Vec<String> = v
            .get("streams")
            .and_then(Value::as_array)
            .ok_or_else(|| SubError::invalid("body must be {\"streams\": [paths]}"))?
            .iter()
            .map(|s| {
                s.as_str()
                    .map(normalise_path)
                    .filter(|p| !p.is_empty())
                    .ok_or_else(|| SubError::invalid("streams must be non-empty strings"))
            })
            .collect::<Result<_, _>>()?;
        let sub = self.get_sub(id)?;
        let mut st = sub.state.lock().await;
        for path in paths {
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
    async fn linked_tails(&self, st: &SubState) -> Vec<(String, Link, u64, bool)> {
        let mut out = Vec::new();
        for (path, link) in &st.record.links {
            let Some(tail) = self.tail(path).await else {
                continue;
            };
            let pending = link.acked.map_or(tail > 0, |a| tail > a);
            out.push((path.clone(), link.clone(), tail, pending));
        }
        out
    }

    fn mint_token(&self, id: &str, generation: u64) -> String {
        let claims = TokenClaims {
            sub: format!("subscription:{id}"),
            generation,
            exp: chrono::Utc::now().timestamp().max(0) as u64 + TOKEN_LIFETIME_S,
            jti: hex(&self.streams.random_bytes16()),
        };
        let payload = B64URL.encode(serde_json::to_vec(&claims).expect("serialisable"));
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.token_key).expect("any key length");
        mac.update(payload.as_bytes());
        format!("{payload}.{}", B64URL.encode(mac.finalize().into_bytes()))
    }

    fn check_token(&self, id: &str, token: Option<&str>) -> Result<u64, SubError> {
        let invalid = || SubError::new(401, "TOKEN_INVALID", "missing or invalid token");
        let token = token.ok_or_else(invalid)?;
        let (payload, signature) = token.split_once('.').ok_or_else(invalid)?;
        let signature = B64URL.decode(signature).map_err(|_| invalid())?;
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.token_key).expect("any key length");
        mac.update(payload.as_bytes());
        mac.verify_slice(&signature).map_err(|_| invalid())?;
        let claims: TokenClaims = B64URL
            .decode(payload)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(invalid)?;
        if claims.sub != format!("subscription:{id}") {
            return Err(invalid());
        }
        if claims.exp < chrono::Utc::now().timestamp().max(0) as u64 {
            return Err(SubError::new(401, "TOKEN_EXPIRED", "the token has expired"));
        }
        Ok(claims.generation)
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
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + 'a>> {
        Box::pin(self.wake_now(sub, st))
    }

    async fn wake_now(self: &Arc<Self>, sub: &Arc<Sub>, st: &mut SubState) -> bool {
        if st.deleted || st.wake.is_some() {
            return false;
        }
        let tails = self.linked_tails(st).await;
        if !tails.iter().any(|(_, _, _, pending)| *pending) {
            return false;
        }
        st.record.generation += 1;
        let generation = st.record.generation;
        let wake_id = format!("w_{}", &hex(&self.streams.random_bytes16())[..24]);
        let snapshot: BTreeMap<String, u64> =
            tails.iter().map(|(p, _, t, _)| (p.clone(), *t)).collect();
        st.wake = Some(Wake {
            id: wake_id.clone(),
            snapshot,
            holder: None,
        });
        let _ = self.save(&sub.id, st).await;
        match st.record.config.kind {
            Kind::Webhook => {
                let token = self.mint_token(&sub.id, generation);
                let body = json!({
                    "subscription_id": sub.id,
                    "wake_id": wake_id,
                    "generation": generation,
                    "streams": streams_json(&tails),
                    "callback_url": format!("{}/v1/stream/__ds/subscriptions/{}/callback", st.record.base_url, sub.id),
                    "callback_token": token,
                });
                self.start_lease(sub, st);
                let me = self.clone();
                let sub = sub.clone();
                tokio::spawn(async move { me.deliver(sub, generation, body.to_string()).await });
            }
            Kind::PullWake => {
                let trigger = tails
                    .iter()
                    .find(|(_, _, _, pending)| *pending)
                    .map(|(p, _, _, _)| p.clone())
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
        let event = json!({
            "type": "wake",
            "subscription_id": id,
            "stream": stream,
            "generation": generation,
            "ts": self.streams.now_ms(),
        });
        let spec = AppendSpec {
            routing_key: Bytes::new(),
            content_type: Some("application/json".into()),
            body: Bytes::from(event.to_string()),
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
                crate::service::StoreDeadline::after(WAKE_APPEND_WAIT_MAX),
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

    async fn deliver(self: Arc<Self>, sub: Arc<Sub>, generation: u64, body: String) {
        let mut attempt: u32 = 0;
        loop {
            let url = {
                let st = sub.state.lock().await;
                let current =
                    st.record.generation == generation && st.wake.is_some() && !st.deleted;
                match (&st.record.config.webhook_url, current) {
                    (Some(url), true) => url.clone(),
                    _ => return,
                }
            };
            let t = chrono::Utc::now().timestamp();
            let signature = self.signer.key.sign(format!("{t}.{body}").as_bytes());
            let header = format!(
                "t={t},kid={},ed25519={}",
                self.signer.kid,
                B64URL.encode(signature.to_bytes())
            );
            let answer = self
                .http
                .post(&url)
                .header("content-type", "application/json")
                .header("webhook-signature", header)
                .body(body.clone())
                .send()
                .await;
            let done = match answer {
                Ok(response) if response.status().is_success() => {
                    let reply: Value = response
                        .bytes()
                        .await
                        .ok()
                        .and_then(|b| serde_json::from_slice(&b).ok())
                        .unwrap_or(Value::Null);
                    Some(reply.get("done").and_then(Value::as_bool) == Some(true))
                }
                Ok(response) => {
                    tracing::debug!(subscription = %sub.id, status = %response.status(), "webhook answered with an error");
                    None
                }
                Err(e) => {
                    tracing::debug!(subscription = %sub.id, error = %e, "webhook delivery failed");
                    None
                }
            };
            let mut st = sub.state.lock().await;
            if st.record.generation != generation || st.wake.is_none() || st.deleted {
                return;
            }
            match done {
                Some(true) => {
                    st.status = "active";
                    if let Some(wake) = st.wake.take() {
                        for (path, tail) in wake.snapshot {
                            if let Some(link) = st.record.links.get_mut(&path) {
                                link.acked = Some(link.acked.map_or(tail, |a| a.max(tail)));
                            }
                        }
                    }
                    st.lease_epoch += 1;
                    let _ = self.save(&sub.id, &mut st).await;
                    self.maybe_wake(&sub, &mut st).await;
                    return;
                }
                Some(false) => {
                    st.status = "active";
                    return;
                }
                None => {
                    st.status = "failed";
                    drop(st);
                    attempt += 1;
                    let base = (1000u64 << (attempt - 1).min(6)).min(RETRY_DELAY_MS_MAX);
                    let jitter = u64::from_le_bytes(
                        self.streams.random_bytes16()[..8].try_into().expect("8"),
                    ) % (base / 5 + 1);
                    tokio::time::sleep(Duration::from_millis(base - base / 10 + jitter)).await;
                }
            }
        }
    }

    // ------------------------------------------------------ answers

    /// `callback` (webhooks) and `ack` (pull-wake): fenced acknowledgements.
    pub async fn acknowledge(
        self: &Arc<Self>,
        id: &str,
        token: Option<&str>,
        body: &[u8],
    ) -> Result<Value, SubError> {
        let token_generation = self.check_token(id, token)?;
        let v: Value =
            serde_json::from_slice(body).map_err(|e| SubError::invalid(e.to_string()))?;
        let sub = self.get_sub(id)?;
        let mut st = sub.state.lock().await;
        Self::fence(&st, token_generation, &v)?;
        let mut acks = Vec::new();
        for ack in v
            .get("acks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let path = ack
                .get("stream")
                .or_else(|| ack.get("path"))
                .and_then(Value::as_str)
                .map(normalise_path)
                .ok_or_else(|| SubError::invalid("each ack names a stream"))?;
            let offset = ack
                .get("offset")
                .and_then(Value::as_str)
                .and_then(|o| Offset::parse(o).ok())
                .ok_or_else(|| SubError::new(409, "INVALID_OFFSET", "ack offset is not valid"))?;
            let link = st.record.links.get(&path).ok_or_else(|| {
                SubError::new(409, "INVALID_OFFSET", format!("{path} is not linked"))
            })?;
            let tail = self.tail(&path).await.unwrap_or(0);
            if link.acked.is_some_and(|a| offset.0 < a) || offset.0 > tail {
                return Err(SubError::new(
                    409,
                    "INVALID_OFFSET",
                    format!("ack for {path} must lie between its acknowledged offset and its tail"),
                ));
            }
            acks.push((path, offset.0));
        }
        for (path, offset) in acks {
            if let Some(link) = st.record.links.get_mut(&path) {
                link.acked = Some(offset);
            }
        }
        let done = v.get("done").and_then(Value::as_bool) == Some(true);
        let next_wake = if done {
            st.wake = None;
            st.lease_epoch += 1;
            let _ = self.save(id, &mut st).await;
            self.maybe_wake(&sub, &mut st).await
        } else {
            let _ = self.save(id, &mut st).await;
            self.start_lease(&sub, &mut st);
            false
        };
        Ok(json!({"ok": true, "next_wake": next_wake}))
    }

    fn fence(st: &SubState, token_generation: u64, body: &Value) -> Result<(), SubError> {
        let generation = body.get("generation").and_then(Value::as_u64);
        let wake_id = body.get("wake_id").and_then(Value::as_str);
        let current = st.wake.as_ref().map(|w| w.id.as_str());
        if st.deleted
            || token_generation != st.record.generation
            || generation != Some(st.record.generation)
            || wake_id.is_none()
            || wake_id != current
        {
            return Err(SubError::fenced());
        }
        Ok(())
    }

    pub async fn claim(self: &Arc<Self>, id: &str, body: &[u8]) -> Result<Value, SubError> {
        let v: Value =
            serde_json::from_slice(body).map_err(|e| SubError::invalid(e.to_string()))?;
        let worker = v
            .get("worker")
            .and_then(Value::as_str)
            .filter(|w| !w.is_empty())
            .ok_or_else(|| SubError::invalid("worker must be a non-empty string"))?
            .to_string();
        let sub = self.get_sub(id)?;
        let mut st = sub.state.lock().await;
        if st.record.config.kind != Kind::PullWake {
            return Err(SubError::invalid(
                "only pull-wake subscriptions are claimed",
            ));
        }
        if let Some(holder) = st.wake.as_ref().and_then(|w| w.holder.clone()) {
            let mut e = SubError::new(409, "ALREADY_CLAIMED", "another worker holds the wake");
            e.extra.push(("current_holder", json!(holder)));
            e.extra.push(("generation", json!(st.record.generation)));
            return Err(e);
        }
        let tails = self.linked_tails(&st).await;
        if !tails.iter().any(|(_, _, _, pending)| *pending) {
            return Err(SubError::new(409, "NO_PENDING_WORK", "nothing is pending"));
        }
        if st.wake.is_none() {
            self.maybe_wake(&sub, &mut st).await;
        }
        let generation = st.record.generation;
        let token = self.mint_token(id, generation);
        let wake = st
            .wake
            .as_mut()
            .ok_or_else(|| SubError::new(409, "NO_PENDING_WORK", "nothing is pending"))?;
        wake.holder = Some(worker);
        let wake_id = wake.id.clone();
        self.start_lease(&sub, &mut st);
        Ok(json!({
            "wake_id": wake_id,
            "generation": generation,
            "token": token,
            "streams": streams_json(&tails),
            "lease_ttl_ms": st.record.config.lease_ttl_ms,
        }))
    }

    pub async fn release(
        self: &Arc<Self>,
        id: &str,
        token: Option<&str>,
        body: &[u8],
    ) -> Result<(), SubError> {
        let token_generation = self.check_token(id, token)?;
        let v: Value =
            serde_json::from_slice(body).map_err(|e| SubError::invalid(e.to_string()))?;
        let sub = self.get_sub(id)?;
        let mut st = sub.state.lock().await;
        Self::fence(&st, token_generation, &v)?;
        st.wake = None;
        st.lease_epoch += 1;
        self.maybe_wake(&sub, &mut st).await;
        Ok(())
    }
}

fn acked_text(acked: Option<u64>) -> String {
    acked.map_or_else(|| "-1".to_string(), |a| Offset(a).to_string())
}

fn streams_json(tails: &[(String, Link, u64, bool)]) -> Vec<Value> {
    tails
        .iter()
        .map(|(path, link, tail, pending)| {
            json!({
                "path": path,
                "link_type": if link.explicit { "explicit" } else { "glob" },
                "acked_offset": acked_text(link.acked),
                "tail_offset": Offset(*tail).to_string(),
                "has_pending": pending,
            })
        })
        .collect()
}

fn is_public(ip: Ipv4Addr) -> bool {
    !(ip.is_private()
        || ip.is_loopback()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.octets()[0] == 0
        || ip.is_documentation())
}

/// Loads the server's signing key, creating it (create-only) on first start.
async fn load_signer(store: &Arc<dyn ObjectStore>, streams: &Streams) -> Result<Signer, String> {
    let path = names::webhook_signing_key();
    let seed = match store.get(&path).await {
        Ok(found) => {
            let bytes = found.bytes().await.map_err(|e| e.to_string())?;
            let stored: StoredSigningKey =
                serde_json::from_slice(&bytes).map_err(|e| format!("{path}: {e}"))?;
            decode_seed(&stored.seed).ok_or_else(|| format!("{path}: bad seed"))?
        }
        Err(object_store::Error::NotFound { .. }) => {
            let mut seed = [0u8; 32];
            seed[..16].copy_from_slice(&streams.random_bytes16());
            seed[16..].copy_from_slice(&streams.random_bytes16());
            let stored =
                serde_json::to_vec(&StoredSigningKey { seed: hex(&seed) }).expect("serialisable");
            let create = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            match store
                .put_opts(&path, PutPayload::from(stored), create)
                .await
            {
                Ok(_) => seed,
                // Another server created it first: use theirs.
                Err(object_store::Error::AlreadyExists { .. }) => {
                    return Box::pin(load_signer(store, streams)).await
                }
                Err(e) => return Err(format!("{path}: {e}")),
            }
        }
        Err(e) => return Err(format!("{path}: {e}")),
    };
    let key = SigningKey::from_bytes(&seed);
    let x = B64URL.encode(key.verifying_key().to_bytes());
    // RFC 7638 thumbprint: the required members, lexicographic order.
    let thumbprint = Sha256::digest(format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#));
    Ok(Signer {
        key,
        kid: format!("ds_{}", B64URL.encode(thumbprint)),
        x,
    })
}

fn decode_seed(text: &str) -> Option<[u8; 32]> {
    let mut out = [0u8; 32];
    if text.len() != 64 {
        return None;
    }
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Subscriptions watch the stream service.
pub struct SubscriptionObserver(pub std::sync::Weak<Subscriptions>);

impl StreamObserver for SubscriptionObserver {
    fn appended(&self, project: &str, name: &str) {
        if project != DEFAULT_PROJECT {
            return;
        }
        if let Some(subs) = self.0.upgrade() {
            let name = name.to_string();
            tokio::spawn(async move { subs.on_append(name).await });
        }
    }

    fn deleted(&self, _project: &str, _name: &str) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_match("events/*", "events/a"));
        assert!(!glob_match("events/*", "events/a/b"));
        assert!(glob_match("events/**", "events/a/b"));
        assert!(glob_match("events/**", "events"));
        assert!(!glob_match("events/*", "other/a"));
        assert!(glob_match("*", "x"));
    }

    #[test]
    fn public_addresses() {
        assert!(!is_public(Ipv4Addr::new(10, 0, 0, 1)));
        assert!(!is_public(Ipv4Addr::new(127, 0, 0, 1)));
        assert!(!is_public(Ipv4Addr::new(169, 254, 1, 1)));
        assert!(!is_public(Ipv4Addr::new(192, 168, 1, 1)));
        assert!(is_public(Ipv4Addr::new(8, 8, 8, 8)));
    }
}
