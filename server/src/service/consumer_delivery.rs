//! Consumer groups' delivery: pull (with its long-poll), settle, and dead
//! letters. Configuration and the live consumers are `consumers.rs`'s.
//!
//! A pull finds the stream's new records (discovery: a read from the
//! consumer's frontier to the durable tail, never logged), lets the state
//! machine hand out leases, logs what it decided as one consumer change,
//! and answers once that change is durable. A record whose next delivery
//! would exceed `maxAttempts` is *poison*: with no dead-letter stream it is
//! acknowledged and dropped in the same change; with one, the change marks
//! it (durably), the dead-letter record is appended with the producer
//! `__dlq:{consumer}:{messageId}` (epoch 1, seq 0), and only once that is
//! durable is the source record finished. A crash between the steps leaves
//! the mark, and the next owner appends again: the producer makes the
//! second append a duplicate, so the dead letter exists exactly once.
//!
//! Invariants: a lease token names a generation, a lease id and a record;
//! it settles only the live lease it names (anything else is `stale`); a
//! pull waits at most its `waitMs` (≤ 25 s) and answers 200 with what it
//! has; every loop here is bounded (discovery rounds, dead letters per
//! pull, settle items).

use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use strata_engine::consumer::durable::ConsumerChange;
use strata_engine::consumer::{
    Consumer, ConsumerEvent, Delivery, LeaseRef, Poison, RecordRef, Settle, SettleError,
    SETTLE_ITEMS_MAX,
};
use strata_engine::{ProducerClaim, ReadLimits};
use strata_segments::StreamKey;
use tokio::time::Instant;

use super::chain::Level;
use super::consumer_live::{LiveConsumer, LiveKey, LiveState};
use super::consumers::{ConsumerError, ConsumerStream};
use super::deadline::StoreDeadline;
use super::error::ServiceError;
use super::media::is_json;
use super::model::{AppendSpec, DeadLetterStep};
use super::product::consumer_tokens::{LeaseToken, TokenScope};
use super::sources::DeadLetterAppend;
use super::streams::Streams;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Read rounds one discovery makes at most (each up to
/// `DISCOVER_RECORDS_MAX` records).
const DISCOVER_ROUNDS_MAX: usize = 16;
const DISCOVER_RECORDS_MAX: usize = 4_096;
const DISCOVER_BYTES_MAX: usize = 4 << 20;
/// Dead letters one pull appends at most (the rest wait for the next pull).
const DEAD_LETTERS_PER_PULL_MAX: usize = 64;
/// The longest a pull waits, and the longest retry delay or visibility.
pub const PULL_WAIT_MS_MAX: u64 = 25_000;
pub const RETRY_DELAY_MS_DEFAULT: u64 = 1_000;

/// One pull.
pub struct PullRequest<'a> {
    pub project: &'a str,
    pub name: &'a str,
    pub consumer: &'a str,
    pub key: &'a StreamKey,
    /// At most the consumer's `maxBatchRecords` (`None`: that many).
    pub max: Option<usize>,
    pub wait: Duration,
    /// This pull's lease time (`None`: the consumer's visibility).
    pub visibility_ms: Option<u64>,
    /// How long a dead letter's append may take (the append budget).
    pub write_budget: Duration,
}

/// One message a pull hands out.
#[derive(Debug, Clone)]
pub struct PulledMessage {
    pub id: String,
    pub routing_key: Bytes,
    pub attempts: u32,
    pub lease_token: String,
    pub value: Bytes,
}

#[derive(Debug, Clone)]
pub struct PullAnswer {
    pub messages: Vec<PulledMessage>,
    pub backlog: u64,
    /// The stream's content type (how values are rendered).
    pub content_type: String,
}

/// One settle: lease tokens with their delays and visibilities.
pub struct SettleRequest<'a> {
    pub project: &'a str,
    pub name: &'a str,
    pub consumer: &'a str,
    pub key: &'a StreamKey,
    pub acks: Vec<String>,
    pub retries: Vec<(String, u64)>,
    pub extends: Vec<(String, u64)>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SettleAnswer {
    pub acked: usize,
    pub retried: usize,
    pub extended: usize,
    pub dlq: usize,
    pub stale: usize,
    pub backlog: u64,
    pub dlq_blocked: usize,
}

/// Where a pull's dead letters come from and how long each may take.
struct DeadLetterTarget<'a> {
    levels: &'a [Level],
    scope: &'a TokenScope<'a>,
    budget: Duration,
}

/// What one round of a pull decided, before its values are read.
struct Round {
    deliveries: Vec<Delivery>,
    poison: Vec<Poison>,
    backlog: u64,
    /// The durable tail position the round discovered up to.
    tail: u64,
    next_change_ms: Option<u64>,
    /// The stream's own offset discovery reached (a wait starts there).
    frontier: u64,
}

impl Streams {
    /// The stream a delivery is on (the key checked), its read levels and
    /// its epoch (which tokens are bound to).
    async fn delivery_stream(
        &self,
        project: &str,
        name: &str,
        key: &StreamKey,
    ) -> Result<(ConsumerStream, Vec<Level>, [u8; 16]), ConsumerError> {
        let at = self.consumer_stream(project, name).await?;
        self.ciphers.cipher_for(&at.desc.value, key)?;
        let levels = self.chain(project, at.desc.clone(), key, false).await?;
        let epoch = at
            .desc
            .value
            .epoch_bytes()
            .ok_or_else(|| ServiceError::Internal("a collection without an epoch".into()))?;
        Ok((at, levels, epoch))
    }

    /// Hands out up to `max` messages, waiting up to `wait` for one.
    pub async fn pull(&self, request: PullRequest<'_>) -> Result<PullAnswer, ConsumerError> {
        let (at, levels, epoch) = self
            .delivery_stream(request.project, request.name, request.key)
            .await?;
        let scope = TokenScope {
            project: request.project,
            consumer: request.consumer,
            epoch,
            key: request.key,
        };
        let until = Instant::now() + request.wait;
        loop {
            let (live_key, live) = self.live_consumer(&at, request.consumer)?;
            let max = request
                .max
                .unwrap_or(live.settings.max_batch_records as usize);
            let visibility_ms = request.visibility_ms.unwrap_or(live.settings.visibility_ms);
            let mut round = self
                .pull_round(
                    request.project,
                    &at,
                    &levels,
                    &live_key,
                    &live,
                    max,
                    visibility_ms,
                    request.key,
                )
                .await?;
            if !round.poison.is_empty() {
                let target = DeadLetterTarget {
                    levels: &levels,
                    scope: &scope,
                    budget: request.write_budget,
                };
                self.dead_letter(&at, &target, &live_key, &live, &round.poison)
                    .await?;
                round.backlog = live.state.lock().await.consumer.backlog(round.tail);
            }
            let now = Instant::now();
            if !round.deliveries.is_empty() || now >= until {
                let messages = self
                    .messages(&levels, &scope, &live, round.deliveries, request)
                    .await?;
                return Ok(PullAnswer {
                    messages,
                    backlog: round.backlog,
                    content_type: at.desc.value.content_type.clone(),
                });
            }
            self.wait_for_work(&at, &live, &round, until).await?;
            if at
                .shard
                .consumer_generation(&at.stream, request.consumer)
                .is_none_or(|g| g != live.generation)
            {
                return Err(ConsumerError::Deleted);
            }
        }
    }

    /// Waits until the stream grows past the frontier, a change of the
    /// consumer lands, a lease or retry time comes, or `until`.
    async fn wait_for_work(
        &self,
        at: &ConsumerStream,
        live: &LiveConsumer,
        round: &Round,
        until: Instant,
    ) -> Result<(), ConsumerError> {
        let now_ms = self.now_ms();
        let timer = round
            .next_change_ms
            .map(|at_ms| Instant::now() + Duration::from_millis(at_ms.saturating_sub(now_ms)))
            .map_or(until, |t| t.min(until));
        let timeout = timer.saturating_duration_since(Instant::now());
        let changed = live.changed.notified();
        tokio::select! {
            grown = at.shard.wait_for(&at.stream, round.frontier, timeout) => { grown?; }
            _ = changed => {}
        }
        Ok(())
    }

    /// Discovers, decides and logs one round of a pull.
    #[allow(clippy::too_many_arguments)]
    async fn pull_round(
        &self,
        project: &str,
        at: &ConsumerStream,
        levels: &[Level],
        live_key: &LiveKey,
        live: &LiveConsumer,
        max: usize,
        visibility_ms: u64,
        key: &StreamKey,
    ) -> Result<Round, ConsumerError> {
        let mut state = live.state.lock().await;
        if state.broken {
            self.live_consumers.forget(live_key);
            return Err(
                ServiceError::Unavailable("the consumer is being rebuilt; retry".into()).into(),
            );
        }
        let tail = self
            .discover(project, levels, &mut state.consumer, key)
            .await?;
        let mut events = Vec::new();
        let mut poison = Vec::new();
        if std::mem::take(&mut state.resume_dead_letters) {
            poison = state.consumer.awaiting_dead_letter();
        }
        let now_ms = self.now_ms();
        let pulled = state
            .consumer
            .pull_for(now_ms, max, visibility_ms, &mut events);
        poison.extend(pulled.poison);
        if live.settings.dead_letter_stream.is_none() {
            // No dead-letter stream: poison is acknowledged and dropped.
            for p in poison.drain(..) {
                state.consumer.dead_lettered(&p.record(), &mut events);
            }
        }
        poison.truncate(DEAD_LETTERS_PER_PULL_MAX);
        let round = Round {
            deliveries: pulled.deliveries,
            poison,
            backlog: state.consumer.backlog(tail),
            tail,
            next_change_ms: state.consumer.next_change_ms(now_ms),
            frontier: state
                .consumer
                .discover_from()
                .unwrap_or(tail)
                .saturating_sub(levels[0].base),
        };
        self.commit(at, live_key, live, state, events).await?;
        Ok(round)
    }

    /// Logs `events` (decided under `state`, which is released once they
    /// are queued) and waits until they are durable.
    async fn commit(
        &self,
        at: &ConsumerStream,
        live_key: &LiveKey,
        live: &LiveConsumer,
        mut state: tokio::sync::MutexGuard<'_, LiveState>,
        events: Vec<ConsumerEvent>,
    ) -> Result<(), ConsumerError> {
        let change = ConsumerChange::Records {
            generation: live.generation,
            floor: state.consumer.done_floor(),
            events,
        };
        if change.is_empty() {
            return Ok(());
        }
        let ticket = match at
            .shard
            .start_change_consumer(at.stream, &live_key.name, &change)
        {
            Ok(ticket) => ticket,
            Err(e) => {
                state.broken = true;
                self.live_consumers.forget(live_key);
                return Err(e.into());
            }
        };
        drop(state);
        if let Err(e) = ticket.wait().await {
            live.state.lock().await.broken = true;
            self.live_consumers.forget(live_key);
            return Err(e.into());
        }
        live.changed.notify_waiters();
        Ok(())
    }

    /// Finds records from the consumer's frontier up to the durable tail
    /// (bounded); returns the tail position.
    async fn discover(
        &self,
        project: &str,
        levels: &[Level],
        consumer: &mut Consumer,
        key: &StreamKey,
    ) -> Result<u64, ServiceError> {
        let (tail, _) = self.tail_of(project, &levels[0], key).await?;
        let mut scratch = Vec::new();
        for _ in 0..DISCOVER_ROUNDS_MAX {
            let Some(from) = consumer.discover_from().filter(|f| *f < tail) else {
                break;
            };
            let Some((depth, level)) = level_of(levels, from) else {
                break;
            };
            let end = if depth == 0 {
                tail
            } else {
                level.cap.min(tail)
            };
            let routing_key: Option<&[u8]> = if depth == 0 { None } else { Some(b"") };
            let limits = ReadLimits {
                max_records: ((end - from) as usize).min(DISCOVER_RECORDS_MAX),
                max_bytes: DISCOVER_BYTES_MAX,
            };
            let batch = self
                .read_level(project, level, from - level.base, limits, key, routing_key)
                .await?;
            let records: Vec<(u64, Bytes)> = batch
                .keyed()
                .map(|(k, r)| (level.base + r.offset, k.clone()))
                .filter(|(p, _)| *p < end)
                .collect();
            let scanned_to = (level.base + batch.next_offset).min(end);
            if scanned_to <= from && records.is_empty() {
                break;
            }
            consumer.discover(&records, scanned_to.max(from + 1).min(end), &mut scratch);
            scratch.clear();
        }
        Ok(tail)
    }

    /// The messages of a pull's deliveries, with their values.
    async fn messages(
        &self,
        levels: &[Level],
        scope: &TokenScope<'_>,
        live: &LiveConsumer,
        deliveries: Vec<Delivery>,
        request: PullRequest<'_>,
    ) -> Result<Vec<PulledMessage>, ConsumerError> {
        let mut out = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            let lease = &delivery.lease;
            let value = self
                .record_value(request.project, levels, request.key, &lease.record())
                .await?;
            let token = LeaseToken {
                generation: live.generation,
                lease: lease.lease,
                deadline_ms: delivery.deadline_ms,
                position: lease.position,
                routing_key: lease.routing_key.clone(),
            };
            out.push(PulledMessage {
                id: scope.message_id(live.generation, &lease.routing_key, lease.position),
                routing_key: lease.routing_key.clone(),
                attempts: delivery.attempts,
                lease_token: scope.lease_token(&token),
                value,
            });
        }
        Ok(out)
    }

    /// The payload of one record, read from the level that holds it.
    async fn record_value(
        &self,
        project: &str,
        levels: &[Level],
        key: &StreamKey,
        record: &RecordRef,
    ) -> Result<Bytes, ServiceError> {
        let (depth, level) = level_of(levels, record.position)
            .ok_or_else(|| ServiceError::Internal("a consumer record below every level".into()))?;
        let routing_key: &[u8] = if depth == 0 { &record.routing_key } else { b"" };
        let own = record.position - level.base;
        let limits = ReadLimits {
            max_records: 1,
            max_bytes: 1,
        };
        let batch = self
            .read_level(project, level, own, limits, key, Some(routing_key))
            .await?;
        batch
            .records
            .first()
            .filter(|r| r.offset == own)
            .map(|r| r.payload.clone())
            .ok_or_else(|| {
                ServiceError::Internal(format!(
                    "consumer record at position {} is not readable",
                    record.position
                ))
            })
    }

    /// Appends each poison record to the dead-letter stream, then finishes
    /// it (or releases its mark if the append failed).
    async fn dead_letter(
        &self,
        at: &ConsumerStream,
        to: &DeadLetterTarget<'_>,
        live_key: &LiveKey,
        live: &LiveConsumer,
        poison: &[Poison],
    ) -> Result<(), ConsumerError> {
        let Some(target) = live.settings.dead_letter_stream.clone() else {
            return Ok(());
        };
        self.crash_test_point(DeadLetterStep::AfterMark);
        let mut outcomes: Vec<(RecordRef, bool)> = Vec::with_capacity(poison.len());
        for p in poison {
            let appended = self
                .append_dead_letter(at, to, live.generation, &target, p)
                .await;
            if let Err(e) = &appended {
                tracing::warn!(consumer = %live_key.name, error = %e, "dead letter not appended; retried at a later pull");
            }
            outcomes.push((p.record(), appended.is_ok()));
        }
        if outcomes.iter().any(|(_, appended)| *appended) {
            self.crash_test_point(DeadLetterStep::AfterAppend);
        }
        let mut state = live.state.lock().await;
        let mut events = Vec::new();
        for (record, appended) in &outcomes {
            if *appended {
                state.consumer.dead_lettered(record, &mut events);
            } else {
                state.consumer.dead_letter_failed(record, &mut events);
            }
        }
        self.commit(at, live_key, live, state, events).await
    }

    /// Aborts the process here if a crash test asked for it.
    fn crash_test_point(&self, step: DeadLetterStep) {
        if self.config.crash_at == Some(step) {
            tracing::error!(?step, "test crash point reached: aborting");
            std::process::abort();
        }
    }

    async fn append_dead_letter(
        &self,
        at: &ConsumerStream,
        to: &DeadLetterTarget<'_>,
        generation: u64,
        target: &str,
        poison: &Poison,
    ) -> Result<(), ServiceError> {
        let (scope, levels) = (to.scope, to.levels);
        let record = poison.record();
        let value = self
            .record_value(scope.project, levels, scope.key, &record)
            .await?;
        let message_id = scope.message_id(generation, &record.routing_key, record.position);
        let rendered = if is_json(&at.desc.value.content_type) {
            serde_json::from_slice::<Value>(&value).unwrap_or(Value::Null)
        } else {
            Value::String(B64.encode(&value))
        };
        let payload = json!({
            "sourceStream": at.desc.value.name,
            "consumer": scope.consumer,
            "messageId": message_id,
            "routingKey": String::from_utf8_lossy(&record.routing_key),
            "attempts": poison.attempts,
            "value": rendered,
        })
        .to_string();
        let digest = Sha256::digest(payload.as_bytes());
        let request = DeadLetterAppend {
            project: scope.project.to_string(),
            name: target.to_string(),
            routing_key: B64.encode(&record.routing_key),
            payload,
            producer_id: format!("__dlq:{}:{message_id}", scope.consumer),
            digest: hex::encode(&digest[..16]),
        };
        match self
            .append_dead_letter_here(&request, scope.key, StoreDeadline::after(to.budget))
            .await
        {
            Err(ServiceError::NotOwner { owner }) => {
                let peers = self.dead_letter_peers.get().ok_or_else(|| {
                    ServiceError::Unavailable("the dead-letter stream is served elsewhere".into())
                })?;
                peers.append(&owner, request, scope.key).await
            }
            other => other,
        }
    }

    /// Appends a dead letter to a stream this member serves (a duplicate
    /// of an earlier append of it counts as done).
    pub async fn append_dead_letter_here(
        &self,
        request: &DeadLetterAppend,
        key: &StreamKey,
        deadline: StoreDeadline,
    ) -> Result<(), ServiceError> {
        let (routing_key, digest) = request
            .parts()
            .ok_or_else(|| ServiceError::BadRequest("a malformed dead letter".into()))?;
        if !request.producer_id.starts_with("__dlq:") {
            return Err(ServiceError::BadRequest(
                "not a dead letter's producer".into(),
            ));
        }
        let spec = AppendSpec {
            routing_key,
            content_type: None,
            body: Bytes::new(),
            records: Some(vec![Bytes::from(request.payload.clone())]),
            producer: Some(ProducerClaim {
                id: request.producer_id.clone(),
                epoch: 1,
                seq: 0,
                digest,
            }),
            stream_seq: None,
            close: false,
        };
        self.append(&request.project, &request.name, spec, key, deadline)
            .await?;
        Ok(())
    }

    /// Settles leases as one change.
    pub async fn settle(&self, request: SettleRequest<'_>) -> Result<SettleAnswer, ConsumerError> {
        let items = request.acks.len() + request.retries.len() + request.extends.len();
        if items > SETTLE_ITEMS_MAX {
            return Err(ConsumerError::Invalid(format!(
                "a settle names at most {SETTLE_ITEMS_MAX} tokens"
            )));
        }
        let (at, levels, epoch) = self
            .delivery_stream(request.project, request.name, request.key)
            .await?;
        let scope = TokenScope {
            project: request.project,
            consumer: request.consumer,
            epoch,
            key: request.key,
        };
        let (live_key, live) = self.live_consumer(&at, request.consumer)?;
        let open = |text: &str| {
            scope
                .open_lease_token(text)
                .filter(|t| t.generation == live.generation)
                .map(|t| LeaseRef {
                    routing_key: t.routing_key,
                    position: t.position,
                    lease: t.lease,
                })
        };
        let settle = Settle {
            acks: request.acks.iter().filter_map(|t| open(t)).collect(),
            retries: request
                .retries
                .iter()
                .filter_map(|(t, d)| Some((open(t)?, *d)))
                .collect(),
            extends: request
                .extends
                .iter()
                .filter_map(|(t, v)| Some((open(t)?, *v)))
                .collect(),
        };
        let unreadable = items - settle.acks.len() - settle.retries.len() - settle.extends.len();
        let (tail, _) = self
            .tail_of(request.project, &levels[0], request.key)
            .await?;
        let mut state = live.state.lock().await;
        if state.broken {
            self.live_consumers.forget(&live_key);
            return Err(
                ServiceError::Unavailable("the consumer is being rebuilt; retry".into()).into(),
            );
        }
        let mut events = Vec::new();
        let done = state
            .consumer
            .settle(self.now_ms(), &settle, &mut events)
            .map_err(|SettleError::TooManyItems| {
                ConsumerError::Invalid(format!("a settle names at most {SETTLE_ITEMS_MAX} tokens"))
            })?;
        let answer = SettleAnswer {
            acked: done.acked,
            retried: done.retried,
            extended: done.extended,
            dlq: 0,
            stale: done.stale + unreadable,
            backlog: state.consumer.backlog(tail),
            dlq_blocked: state.consumer.dead_letters_waiting(),
        };
        self.commit(&at, &live_key, &live, state, events).await?;
        Ok(answer)
    }
}

/// The level holding `position` (deepest first) and its depth.
fn level_of(levels: &[Level], position: u64) -> Option<(usize, &Level)> {
    levels
        .iter()
        .enumerate()
        .find(|(_, l)| l.base <= position && position < l.cap)
}
