//! Wakes: when a subscription wakes, its lease, and the answers to a wake
//! (claim, acknowledge, release).
//!
//! Owns the wake logic of [`Subscriptions`]: an append or a sweep wakes an
//! idle subscription with pending work (`generation` grows, a `wake_id` is
//! minted, the linked tails are snapshotted into the stored record); a lease
//! timer re-wakes an unanswered one; `resume` carries a stored wake on
//! (its lease runs out at the stored deadline; a webhook wake is delivered
//! again, under the same generation and wake id).
//!
//! Invariants: see `service.rs`; in addition, a wake is saved before it is
//! delivered or claimed, so the next coordinator knows every wake a holder
//! may hold a token for.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::answers::{AckAnswer, ClaimAnswer, LinkedTail, StreamState, WakeBody, WakeEvent};
use super::delivery::WakeDelivery;
use super::error::SubError;
use super::paths::glob_match;
use super::requests::{AckEntry, AckRequest, ClaimRequest, WakeRef};
use super::service::{Sub, SubKey, SubState, Subscriptions};
use super::store::{Kind, StoredWake};
use super::tokens::VerifiedToken;
use crate::service::{AppendSpec, StoreDeadline};
use hex::encode as hex;

/// Longest a wake event's append waits for its acknowledgement (it goes on
/// past that; the wait only bounds the background task).
const WAKE_APPEND_WAIT_MAX: Duration = Duration::from_secs(30);

impl Subscriptions {
    /// Linked streams with their tails and whether they are pending (a
    /// stream whose tail cannot be read now is left out).
    async fn linked_tails(&self, sub: &SubKey, st: &SubState) -> Vec<LinkedTail> {
        let paths: Vec<String> = st.record.links.keys().cloned().collect();
        let tails = self.coordination.tails(&sub.project, &paths).await;
        let mut out = Vec::new();
        for (path, link) in &st.record.links {
            let Some(tail) = tails.get(path).copied() else {
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

    /// Called after an append to `name` in `project`: links it where a
    /// pattern matches, and wakes every subscription with pending work.
    pub async fn on_append(self: &Arc<Self>, project: &str, name: String) {
        for sub in self.subs_of(Some(project)).await {
            let mut st = sub.state.lock().await;
            if st.retired {
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
                let _ = self.save(&sub.key, &mut st).await;
            }
            self.maybe_wake(&sub, &mut st).await;
        }
    }

    /// Wakes every idle subscription with pending work (appends may have
    /// gone untold: a member died, or a shard moved).
    pub async fn sweep(self: &Arc<Self>) {
        for sub in self.subs_of(None).await {
            let mut st = sub.state.lock().await;
            if !st.retired {
                self.maybe_wake(&sub, &mut st).await;
            }
        }
    }

    /// Carries a loaded subscription on: its stored wake keeps its lease
    /// (and a webhook wake is delivered again); an idle one wakes if work is
    /// pending.
    pub(super) async fn carry_on(self: &Arc<Self>, sub: &Arc<Sub>, st: &mut SubState) {
        let Some(wake) = st.record.wake.clone() else {
            self.maybe_wake(sub, st).await;
            return;
        };
        let left_ms = wake.lease_until_ms.saturating_sub(self.streams.now_ms());
        self.arm_lease(sub, st, Duration::from_millis(left_ms));
        if st.record.config.kind == Kind::Webhook {
            let tails = self.linked_tails(&sub.key, st).await;
            self.deliver(sub, st, &wake.id, &tails);
        }
    }

    /// Wakes the subscription if it is idle and has pending work; returns
    /// whether it woke. (Boxed: delivery re-wakes, which delivers again.)
    pub(super) fn maybe_wake<'a>(
        self: &'a Arc<Self>,
        sub: &'a Arc<Sub>,
        st: &'a mut SubState,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(self.wake_now(sub, st))
    }

    async fn wake_now(self: &Arc<Self>, sub: &Arc<Sub>, st: &mut SubState) -> bool {
        if st.retired || st.record.wake.is_some() {
            return false;
        }
        let tails = self.linked_tails(&sub.key, st).await;
        if !tails.iter().any(|t| t.pending) {
            return false;
        }
        st.record.generation += 1;
        let generation = st.record.generation;
        let wake_id = format!("w_{}", &hex(self.streams.random_bytes16())[..24]);
        st.record.wake = Some(StoredWake {
            id: wake_id.clone(),
            snapshot: tails.iter().map(|t| (t.path.clone(), t.tail)).collect(),
            holder: None,
            lease_until_ms: self.lease_until_ms(st),
        });
        let _ = self.save(&sub.key, st).await;
        match st.record.config.kind {
            Kind::Webhook => {
                self.start_lease(sub, st);
                self.deliver(sub, st, &wake_id, &tails);
            }
            Kind::PullWake => {
                let trigger = tails
                    .iter()
                    .find(|t| t.pending)
                    .map(|t| t.path.clone())
                    .unwrap_or_default();
                self.append_wake_event(st, &sub.key, &trigger, generation)
                    .await;
            }
        }
        true
    }

    /// Delivers the current (webhook) wake in the background.
    fn deliver(
        self: &Arc<Self>,
        sub: &Arc<Sub>,
        st: &SubState,
        wake_id: &str,
        tails: &[LinkedTail],
    ) {
        let generation = st.record.generation;
        let body = WakeBody {
            callback_token: self.mint_token(&sub.key, generation),
            callback_url: format!(
                "{}/v1/stream/__ds/subscriptions/{}/callback",
                st.record.base_url, sub.key.id
            ),
            generation,
            streams: StreamState::of(tails),
            subscription_id: sub.key.id.clone(),
            wake_id: wake_id.to_string(),
        };
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
                tracing::warn!(subscription = %sub.key.id, error = %e, "encoding a wake failed")
            }
        }
    }

    async fn append_wake_event(&self, st: &SubState, sub: &SubKey, stream: &str, generation: u64) {
        let (Some(wake_stream), Some(key)) = (&st.record.config.wake_stream, &st.wake_key) else {
            return;
        };
        let event = WakeEvent {
            generation,
            stream: stream.to_string(),
            subscription_id: sub.id.clone(),
            ts: self.streams.now_ms(),
            kind: "wake",
        };
        let body = match serde_json::to_vec(&event) {
            Ok(body) => Bytes::from(body),
            Err(e) => {
                tracing::warn!(subscription = %sub.id, error = %e, "encoding a wake event failed");
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
                &sub.project,
                wake_stream,
                spec,
                key,
                StoreDeadline::after(WAKE_APPEND_WAIT_MAX),
            )
            .await
        {
            tracing::warn!(subscription = %sub.id, error = %e, "appending a wake event failed");
        }
    }

    fn lease_until_ms(&self, st: &SubState) -> u64 {
        self.streams
            .now_ms()
            .saturating_add(st.record.config.lease_ttl_ms)
    }

    /// Starts a full lease on the current wake (its deadline is saved by
    /// the caller's next save).
    fn start_lease(self: &Arc<Self>, sub: &Arc<Sub>, st: &mut SubState) {
        let until = self.lease_until_ms(st);
        if let Some(wake) = st.record.wake.as_mut() {
            wake.lease_until_ms = until;
        }
        let ttl = Duration::from_millis(st.record.config.lease_ttl_ms);
        self.arm_lease(sub, st, ttl);
    }

    /// A timer that ends the current wake after `ttl` unless a newer lease,
    /// an answer or a retirement came first.
    fn arm_lease(self: &Arc<Self>, sub: &Arc<Sub>, st: &mut SubState, ttl: Duration) {
        st.lease_epoch += 1;
        let epoch = st.lease_epoch;
        let me = self.clone();
        let sub = sub.clone();
        tokio::spawn(async move {
            tokio::time::sleep(ttl).await;
            let mut st = sub.state.lock().await;
            if st.lease_epoch != epoch || st.record.wake.is_none() || st.retired {
                return;
            }
            // Unanswered: the wake lapses and, if work is pending, comes again.
            st.record.wake = None;
            let _ = me.save(&sub.key, &mut st).await;
            me.maybe_wake(&sub, &mut st).await;
        });
    }

    /// Moves every linked stream's acknowledged offset up to the wake's
    /// snapshot and ends the wake.
    pub(super) fn ack_snapshot(st: &mut SubState) {
        if let Some(wake) = st.record.wake.take() {
            for (path, tail) in wake.snapshot {
                if let Some(link) = st.record.links.get_mut(&path) {
                    link.acked = Some(link.acked.map_or(tail, |a| a.max(tail)));
                }
            }
        }
        st.lease_epoch += 1;
    }

    /// `callback` (webhooks) and `ack` (pull-wake): fenced acknowledgements.
    pub async fn acknowledge(
        self: &Arc<Self>,
        token: &VerifiedToken,
        request: AckRequest,
    ) -> Result<AckAnswer, SubError> {
        let sub = self.get_sub(token.project(), token.subscription()).await?;
        let mut st = sub.state.lock().await;
        Self::fence(&st, token, &request.wake)?;
        let mut acks = Vec::new();
        let paths: Vec<String> = request
            .acks
            .iter()
            .filter_map(|entry| match entry {
                AckEntry::Ack { stream, .. } => Some(stream.clone()),
                _ => None,
            })
            .collect();
        let read = self.coordination.read_tails(token.project(), &paths).await;
        if let Some(path) = read.unread.first() {
            // Not known, not zero: the stream's shard is moving (its owner
            // died, say). Retryable; nothing was applied.
            return Err(SubError::Unavailable(format!(
                "the tail of {path} cannot be read now; retry"
            )));
        }
        let tails = read.tails;
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
            let tail = tails.get(&path).copied().unwrap_or(0);
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
            st.record.wake = None;
            st.lease_epoch += 1;
            let _ = self.save(&sub.key, &mut st).await;
            self.maybe_wake(&sub, &mut st).await
        } else {
            self.start_lease(&sub, &mut st);
            let _ = self.save(&sub.key, &mut st).await;
            false
        };
        Ok(AckAnswer {
            next_wake,
            ok: true,
        })
    }

    fn fence(st: &SubState, token: &VerifiedToken, wake: &WakeRef) -> Result<(), SubError> {
        let current = st.record.wake.as_ref().map(|w| w.id.as_str());
        if st.retired
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
        project: &str,
        id: &str,
        request: ClaimRequest,
    ) -> Result<ClaimAnswer, SubError> {
        let sub = self.get_sub(project, id).await?;
        let mut st = sub.state.lock().await;
        if st.record.config.kind != Kind::PullWake {
            return Err(SubError::NotPullWake);
        }
        if let Some(holder) = st.record.wake.as_ref().and_then(|w| w.holder.clone()) {
            return Err(SubError::AlreadyClaimed {
                holder,
                generation: st.record.generation,
            });
        }
        let tails = self.linked_tails(&sub.key, &st).await;
        if !tails.iter().any(|t| t.pending) {
            return Err(SubError::NoPendingWork);
        }
        if st.record.wake.is_none() {
            self.maybe_wake(&sub, &mut st).await;
        }
        let generation = st.record.generation;
        let token = self.mint_token(&sub.key, generation);
        let wake = st.record.wake.as_mut().ok_or(SubError::NoPendingWork)?;
        wake.holder = Some(request.worker);
        let wake_id = wake.id.clone();
        self.start_lease(&sub, &mut st);
        if let Err(e) = self.save(&sub.key, &mut st).await {
            // Unclaimed again: the holder is told to retry, and nobody holds
            // a token the stored record does not know of.
            if let Some(wake) = st.record.wake.as_mut() {
                wake.holder = None;
            }
            return Err(e);
        }
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
        let sub = self.get_sub(token.project(), token.subscription()).await?;
        let mut st = sub.state.lock().await;
        Self::fence(&st, token, &wake)?;
        st.record.wake = None;
        st.lease_epoch += 1;
        let _ = self.save(&sub.key, &mut st).await;
        self.maybe_wake(&sub, &mut st).await;
        Ok(())
    }
}
