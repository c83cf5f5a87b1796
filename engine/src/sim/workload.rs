//! What the simulated clients and operators do: plain appends through the
//! newest or an older owner (some with `Stream-Seq`), exactly-once producers
//! that retry ambiguous outcomes across failovers and claim new epochs,
//! seals on demand, closes, deletes and re-creations (new incarnations), and
//! the operator tools (rollback to a retained version; recovery after a
//! corrupted manifest or index run).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::{ObjectStoreExt, PutPayload};
use parking_lot::Mutex;
use rand::Rng;
use sha2::{Digest, Sha256};

use super::model::{is_definite, Model};
use super::queue_model::SIM_QUEUE;
use super::world::{SimFailure, Trace, World};
use crate::admin::repair::{self, RepairOptions, RepairOutcome};
use crate::consumer::durable::{ConsumerChange, ConsumerSetup};
use crate::consumer::{ConsumerConfig, ConsumerEvent, RecordRef};
use crate::error::EngineError;
use crate::ids::{InstanceId, StreamRef};
use crate::layout::{ObjectId, ShardLayout};
use crate::shard::{AppendKind, AppendRequest, ProducerClaim, ReadLimits, Shard};
use strata_segments::StreamCipher;

/// Routing keys the simulation's appends use.
pub(super) const SIM_ROUTING_KEYS: [&[u8]; 3] = [b"", b"a", b"bb"];
/// Attempts of one lifecycle request (create, delete, close) before the run
/// gives up on it.
pub(super) const LIFECYCLE_ATTEMPTS_MAX: usize = 100;
/// Attempts of one producer request before the producer gives up.
const PRODUCER_ATTEMPTS_MAX: usize = 300;
/// The instance id operator tools run as.
const OPERATOR: InstanceId = InstanceId([0xee; 16]);

/// The consumer group every simulated stream has.
pub(super) const SIM_CONSUMER: &str = "sim";

/// A consumer change that finishes `position` (a record of key `c`).
fn sim_consumer_finish(position: u64) -> ConsumerChange {
    ConsumerChange::Records {
        generation: 1,
        floor: 0,
        events: vec![ConsumerEvent::Finished {
            record: RecordRef {
                routing_key: Bytes::from_static(b"c"),
                position,
            },
        }],
    }
}

/// A `Stream-Seq` value: zero-padded, so byte order is numeric order.
fn stream_seq(n: u64) -> Bytes {
    Bytes::from(format!("{n:012}"))
}

/// Whether an append may simply be sent again (a definite refusal of a
/// passing state, or an unknown outcome the sender resolves by retrying).
pub(super) fn retryable(error: &EngineError) -> bool {
    matches!(
        error,
        EngineError::OutcomeUnknown
            | EngineError::Unavailable { .. }
            | EngineError::Fenced
            | EngineError::ShuttingDown
            | EngineError::Overloaded
    )
}

impl World {
    fn payload(&mut self, index: usize, key: usize) -> Bytes {
        self.next_payload += 1;
        Bytes::from(format!("s{index}-k{key}-r{}", self.next_payload))
    }

    pub(super) fn spawn_appenders(&mut self) {
        let count = self.rng.random_range(1..=8);
        for _ in 0..count {
            let index = self.rng.random_range(0..self.config.streams);
            let records = self.rng.random_range(1..=4);
            let key = self.rng.random_range(0..SIM_ROUTING_KEYS.len());
            let via_old = self.owners.len() > 1 && self.rng.random_bool(0.2);
            let with_seq = self.rng.random_bool(0.15);
            let Some(owner) = (if via_old {
                self.owners
                    .get(self.rng.random_range(0..self.owners.len() - 1))
            } else {
                self.owners.last()
            }) else {
                return;
            };
            let (shard, instance) = (owner.shard.clone(), owner.instance);
            let payloads: Vec<Bytes> = (0..records).map(|_| self.payload(index, key)).collect();
            let (stream, seq) = {
                let mut model = self.model.lock();
                let slot = &mut model.streams[index];
                let seq = with_seq.then(|| {
                    slot.next_seq += 1;
                    stream_seq(slot.next_seq)
                });
                (slot.stream, seq)
            };
            let mut request = AppendRequest::new(stream, self.cipher.clone(), payloads.clone());
            request.routing_key = Bytes::from_static(SIM_ROUTING_KEYS[key]);
            request.stream_seq = seq.clone();
            let probe = Probe {
                model: self.model.clone(),
                trace: self.trace.clone(),
                newest: self.newest.clone(),
                cipher: self.cipher.clone(),
            };
            self.tasks.spawn(async move {
                let answer =
                    tokio::time::timeout(Duration::from_secs(3600), shard.append(request)).await;
                match answer {
                    Err(_) => probe
                        .model
                        .lock()
                        .violations
                        .push(format!("an append to stream {index} never answered")),
                    Ok(Ok(ack)) => {
                        probe
                            .shown_by_newest(index, &stream, ack.first_offset, &payloads, instance)
                            .await;
                        probe.trace.lock().event(&format!(
                            "ack {instance} s{index} {}..{}",
                            ack.first_offset, ack.next_offset
                        ));
                        let mut model = probe.model.lock();
                        if seq.is_some() {
                            model.stats.stream_seq_appends += 1;
                        }
                        model.record_ack(
                            &stream,
                            ack.first_offset,
                            ack.next_offset,
                            &payloads,
                            seq.as_ref(),
                        );
                    }
                    Ok(Err(e)) => {
                        probe
                            .trace
                            .lock()
                            .event(&format!("err {instance} s{index} {e}"));
                        probe.model.lock().record_refusal(&payloads, &e);
                    }
                }
            });
        }
    }

    /// A producer: a few requests in order, each retried with the same
    /// (epoch, sequence) until it gets a definite answer; sometimes it claims
    /// a new epoch (starting again at sequence 0), as after a restart.
    pub(super) fn spawn_producer(&mut self) {
        let index = self.rng.random_range(0..self.config.streams);
        let stream = self.model.lock().streams[index].stream;
        let id = format!("p{}", self.next_payload);
        let plan: Vec<(bool, usize, Vec<Bytes>)> = (0..self.rng.random_range(1..=6))
            .map(|j| {
                let bump = j > 0 && self.rng.random_bool(0.15);
                let records = self.rng.random_range(1..=3);
                let key = self.rng.random_range(0..SIM_ROUTING_KEYS.len());
                let payloads = (0..records).map(|_| self.payload(index, key)).collect();
                (bump, key, payloads)
            })
            .collect();
        let probe = Probe {
            model: self.model.clone(),
            trace: self.trace.clone(),
            newest: self.newest.clone(),
            cipher: self.cipher.clone(),
        };
        self.tasks.spawn(async move {
            let (mut epoch, mut seq) = (0u64, 0u64);
            for (bump, key, payloads) in plan {
                if bump {
                    epoch += 1;
                    seq = 0;
                }
                let claim = ProducerClaim {
                    id: id.clone(),
                    epoch,
                    seq,
                    digest: digest(&payloads),
                };
                if !probe.produce(index, stream, key, claim, &payloads).await {
                    return;
                }
                seq += 1;
            }
        });
    }

    pub(super) fn spawn_seal(&mut self) {
        let Some(owner) = self.owners.last() else {
            return;
        };
        let shard = owner.shard.clone();
        self.model.lock().stats.seals += 1;
        self.event(format!("seal_now {}", owner.instance));
        self.tasks.spawn(async move {
            let _ = shard.seal_now().await;
        });
    }

    /// Logs a few consumer changes: each finishes the next position of its
    /// stream's consumer group (through the newest owner or an older one).
    pub(super) fn spawn_consumer_changes(&mut self) {
        let count = self.rng.random_range(1..=4);
        for _ in 0..count {
            let index = self.rng.random_range(0..self.config.streams);
            let Some((shard, instance)) = self.some_owner() else {
                return;
            };
            let (stream, position) = {
                let mut model = self.model.lock();
                let slot = &mut model.streams[index];
                if !slot.consumer {
                    continue;
                }
                slot.next_done += 1;
                (slot.stream, slot.next_done)
            };
            let change = sim_consumer_finish(position);
            let (model, trace) = (self.model.clone(), self.trace.clone());
            self.tasks.spawn(async move {
                let answer = tokio::time::timeout(
                    Duration::from_secs(3600),
                    shard.change_consumer(stream, SIM_CONSUMER, &change),
                )
                .await;
                let mut model = model.lock();
                model.stats.consumer_changes += 1;
                let Some(slot) = model.slot(&stream) else {
                    return;
                };
                match answer {
                    Err(_) => model.violations.push(format!(
                        "a consumer change of stream {index} never answered"
                    )),
                    Ok(Ok(())) => {
                        trace
                            .lock()
                            .event(&format!("consumer ack {instance} s{index} {position}"));
                        model.streams[slot].consumer_done.insert(position);
                    }
                    Ok(Err(e)) if is_definite(&e) => {
                        model.streams[slot].consumer_refused.insert(position);
                    }
                    Ok(Err(_)) => {}
                }
            });
        }
    }

    /// Configures stream slot `index`'s consumer groups: the one whose
    /// changes are logged directly, and the queue (each confirmed, or given
    /// up: then the slot has none).
    async fn configure_consumers(&mut self, index: usize) -> Result<(), SimFailure> {
        if self.configure_consumer(index, SIM_CONSUMER).await? {
            self.model.lock().streams[index].consumer = true;
        }
        if self.configure_consumer(index, SIM_QUEUE).await? {
            self.model.lock().streams[index].queue.configured = true;
        }
        Ok(())
    }

    /// Configures consumer `name` of stream slot `index`: whether that was
    /// confirmed.
    async fn configure_consumer(&mut self, index: usize, name: &str) -> Result<bool, SimFailure> {
        let stream = self.model.lock().streams[index].stream;
        let configure = ConsumerChange::Configure {
            generation: 1,
            setup: ConsumerSetup {
                config: ConsumerConfig {
                    visibility_ms: 1_000,
                    max_attempts: if name == SIM_QUEUE { 2 } else { 3 },
                    max_batch: 10,
                },
                settings: Bytes::new(),
            },
        };
        for _ in 0..LIFECYCLE_ATTEMPTS_MAX {
            self.apply_planned_crashes().await?;
            let Some((shard, id)) = self.current().map(|o| (o.shard.clone(), o.id)) else {
                continue;
            };
            let changing = shard.change_consumer(stream, name, &configure);
            match self.on_owner(id, changing).await {
                Some(Ok(())) => {
                    self.event(format!("configured consumer {name} of s{index}"));
                    return Ok(true);
                }
                Some(Err(EngineError::Fenced)) => self.reopen_fenced().await?,
                Some(Err(e)) if retryable(&e) => self.event(format!("configure s{index}: {e}")),
                Some(Err(e)) => return Err(self.fail(format!("consumer of stream {index}: {e}"))),
                None => {}
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.event(format!("configure {name} of s{index} given up"));
        Ok(false)
    }

    /// Creates stream slot `index`'s current incarnation (confirmed).
    pub(super) async fn create_stream(&mut self, index: usize) -> Result<(), SimFailure> {
        let stream = self.model.lock().streams[index].stream;
        for _ in 0..LIFECYCLE_ATTEMPTS_MAX {
            self.apply_planned_crashes().await?;
            let Some((shard, id)) = self.current().map(|o| (o.shard.clone(), o.id)) else {
                continue;
            };
            match self
                .on_owner(id, shard.create_stream(stream, &self.cipher))
                .await
            {
                Some(Ok(_)) => {
                    self.model.lock().streams[index].live = true;
                    self.event(format!(
                        "created s{index} incarnation {}",
                        stream.incarnation
                    ));
                    return self.configure_consumers(index).await;
                }
                // The owner lost the shard: a fleet opens it again.
                Some(Err(EngineError::Fenced)) => self.reopen_fenced().await?,
                Some(Err(e)) if retryable(&e) => self.event(format!("create s{index}: {e}")),
                Some(Err(e)) => return Err(self.fail(format!("create of stream {index}: {e}"))),
                None => {}
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Err(self.fail(format!("could not create stream {index}")))
    }

    /// Closes a live, open stream (confirmed, or given up after its attempts).
    pub(super) async fn close_a_stream(&mut self) -> Result<(), SimFailure> {
        let index = self.rng.random_range(0..self.config.streams);
        let (stream, live, closed) = {
            let model = self.model.lock();
            let slot = &model.streams[index];
            (slot.stream, slot.live, slot.closed_at.is_some())
        };
        if !live || closed {
            return Ok(());
        }
        for _ in 0..LIFECYCLE_ATTEMPTS_MAX {
            self.apply_planned_crashes().await?;
            let Some((shard, id)) = self.current().map(|o| (o.shard.clone(), o.id)) else {
                continue;
            };
            let closing = shard.close_stream(stream, self.cipher.clone());
            match self.on_owner(id, closing).await {
                Some(Ok(ack)) => {
                    let mut model = self.model.lock();
                    model.stats.closes += 1;
                    model.streams[index].closed_at = Some(ack.next_offset);
                    drop(model);
                    self.event(format!("closed s{index} at {}", ack.next_offset));
                    return Ok(());
                }
                // The owner lost the shard: a fleet opens it again.
                Some(Err(EngineError::Fenced)) => self.reopen_fenced().await?,
                Some(Err(e)) if retryable(&e) => self.event(format!("close s{index}: {e}")),
                Some(Err(e)) => return Err(self.fail(format!("close of stream {index}: {e}"))),
                None => {}
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.event(format!("close s{index} given up"));
        Ok(())
    }

    /// Deletes a live stream (until the engine confirms it is gone), then
    /// creates its next incarnation.
    pub(super) async fn delete_and_recreate(&mut self) -> Result<(), SimFailure> {
        let index = self.rng.random_range(0..self.config.streams);
        let (stream, live) = {
            let model = self.model.lock();
            (model.streams[index].stream, model.streams[index].live)
        };
        if !live {
            return Ok(());
        }
        let mut deleted = false;
        for _ in 0..LIFECYCLE_ATTEMPTS_MAX {
            self.apply_planned_crashes().await?;
            let Some((shard, id)) = self.current().map(|o| (o.shard.clone(), o.id)) else {
                continue;
            };
            match self.on_owner(id, shard.delete_stream(stream)).await {
                // Gone: this attempt, or an earlier one whose answer was lost.
                Some(Ok(())) | Some(Err(EngineError::StreamNotFound)) => {
                    deleted = true;
                    break;
                }
                // The owner lost the shard: a fleet opens it again.
                Some(Err(EngineError::Fenced)) => self.reopen_fenced().await?,
                Some(Err(e)) if retryable(&e) => self.event(format!("delete s{index}: {e}")),
                Some(Err(e)) => return Err(self.fail(format!("delete of stream {index}: {e}"))),
                None => {}
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if !deleted {
            self.event(format!("delete s{index} given up"));
            return Ok(());
        }
        {
            let mut model = self.model.lock();
            model.stats.deletes += 1;
            model.streams[index].reincarnate();
        }
        self.event(format!(
            "deleted s{index} incarnation {}",
            stream.incarnation
        ));
        self.create_stream(index).await
    }

    /// The newest owner answered fenced: open a new one (as a fleet would).
    pub(super) async fn reopen_fenced(&mut self) -> Result<(), SimFailure> {
        if let Some(owner) = self.owners.last() {
            self.event(format!(
                "owner {} is fenced; opening another",
                owner.instance
            ));
        }
        self.open_owner().await
    }

    /// Rolls the shard back to a recent retained version with the operator
    /// tool (which fences every owner); a new owner opens after it.
    pub(super) async fn operator_rollback(&mut self) -> Result<(), SimFailure> {
        let current = match self.manifest_version().await {
            Some(v) => v,
            None => return Ok(()),
        };
        let back = self.rng.random_range(1..=3);
        let Some(version) = current.checked_sub(back).filter(|v| *v > 0) else {
            return Ok(());
        };
        let weather = self.faults.config();
        self.faults.set(weather.calm());
        let result =
            repair::rollback(&self.env, &self.shard_name, version, OPERATOR, options()).await;
        self.faults.set(weather);
        match result {
            Ok(report) if report.outcome == RepairOutcome::Done => {
                self.event(format!(
                    "rollback report: from {:?}, written {:?}, lost {:?}, changes {:?}, streams {:?}",
                    report.restored_from, report.written_version, report.lost, report.lost_changes, report.streams
                ));
                self.model.lock().stats.rollbacks += 1;
                self.event(format!("rollback to version {version}: done"));
                self.open_owner().await
            }
            Ok(report) => {
                self.model.lock().stats.refused_repairs += 1;
                self.event(format!(
                    "rollback to version {version}: {:?}",
                    report.outcome
                ));
                Ok(())
            }
            Err(e) => {
                self.model.lock().stats.refused_repairs += 1;
                self.event(format!("rollback to version {version}: {e}"));
                Ok(())
            }
        }
    }

    /// Damages the manifest or the newest index run it lists, then runs the
    /// operator's recovery. If the recovery cannot proceed without loss, the
    /// original bytes are put back (as an operator would from a backup).
    pub(super) async fn operator_recover(&mut self) -> Result<(), SimFailure> {
        let layout = ShardLayout::new(self.shard_name.clone());
        let manifest = match self.manifest_value().await {
            Some(m) => m,
            None => return Ok(()),
        };
        let target = match manifest.index_runs.last() {
            Some(run) if self.rng.random_bool(0.5) => layout.index_run(ObjectId(run.id)),
            _ => layout.manifest(),
        };
        let Ok(original) = self.clean_store.get(&target).await else {
            return Ok(());
        };
        let Ok(original) = original.bytes().await else {
            return Ok(());
        };
        let garbage = Bytes::from_static(b"garbage\n");
        self.put_clean(&target, garbage.clone()).await?;
        self.event(format!("damaged {target}"));
        let weather = self.faults.config();
        self.faults.set(weather.calm());
        let result = repair::recover(&self.env, &self.shard_name, OPERATOR, options()).await;
        self.faults.set(weather);
        if let Ok(report) = &result {
            self.event(format!(
                "recover report: from {:?}, written {:?}, lost {:?}, changes {:?}",
                report.restored_from, report.written_version, report.lost, report.lost_changes
            ));
        }
        if matches!(&result, Ok(report) if report.outcome == RepairOutcome::Done) {
            self.model.lock().stats.recoveries += 1;
            self.event(format!("recover after damage to {target}: done"));
            return self.open_owner().await;
        }
        self.model.lock().stats.refused_repairs += 1;
        self.event(format!(
            "recover after damage to {target}: {:?}",
            result.map(|r| r.outcome)
        ));
        let still_damaged = match self.clean_store.get(&target).await {
            Ok(got) => got.bytes().await.is_ok_and(|b| b == garbage),
            Err(_) => false,
        };
        if still_damaged {
            self.put_clean(&target, original).await?;
            self.event(format!("restored {target} from a backup"));
        }
        Ok(())
    }

    async fn put_clean(
        &self,
        path: &object_store::path::Path,
        bytes: Bytes,
    ) -> Result<(), SimFailure> {
        self.clean_store
            .put(path, PutPayload::from(bytes))
            .await
            .map(drop)
            .map_err(|e| self.fail(format!("writing {path} to the clean store: {e}")))
    }

    async fn manifest_value(&self) -> Option<strata_manifest::Manifest> {
        strata_manifest::CasObject::<strata_manifest::ManifestCodec>::new(
            self.clean_store.clone(),
            ShardLayout::new(self.shard_name.clone()).manifest(),
            strata_manifest::RetryPolicy::default(),
        )
        .load()
        .await
        .ok()
        .flatten()
        .map(|m| m.value)
    }

    pub(super) async fn manifest_version(&self) -> Option<u64> {
        self.manifest_value().await.map(|m| m.version)
    }
}

/// Repairs as the simulation's operator runs them: a live owner is fenced,
/// nothing acknowledged may be lost.
fn options() -> RepairOptions {
    RepairOptions {
        force: true,
        accept_loss: false,
        dry_run: false,
        live_window: Duration::from_secs(60),
        // Longer than any collection batch of the simulation takes.
        quiesce: Duration::from_secs(5),
    }
}

pub(super) fn digest(payloads: &[Bytes]) -> [u8; 16] {
    let mut h = Sha256::new();
    for p in payloads {
        h.update((p.len() as u64).to_le_bytes());
        h.update(p);
    }
    h.finalize()[..16].try_into().expect("16 bytes")
}

/// What a background client task shares with the world.
struct Probe {
    model: Arc<Mutex<Model>>,
    trace: Arc<Mutex<Trace>>,
    newest: Arc<Mutex<Option<Shard>>>,
    cipher: Arc<StreamCipher>,
}

impl Probe {
    /// At the moment an owner acknowledges an append, the newest owner must
    /// show it: an older owner cannot acknowledge past a newer one's fence.
    async fn shown_by_newest(
        &self,
        index: usize,
        stream: &StreamRef,
        first_offset: u64,
        payloads: &[Bytes],
        instance: u16,
    ) {
        let newest = self.newest.lock().clone();
        let Some(newest) = newest else {
            return;
        };
        let limits = ReadLimits {
            max_records: payloads.len(),
            max_bytes: usize::MAX,
        };
        let shown = newest
            .read(stream, first_offset, limits, &self.cipher, None)
            .await;
        // A sealed chunk's GET may meet an injected fault, and the stream may
        // have been deleted since: no verdict then.
        let shown: Vec<Bytes> = match shown {
            Ok(batch) => batch.records.into_iter().map(|r| r.payload).collect(),
            Err(_) => return,
        };
        if shown != payloads {
            self.model.lock().violations.push(format!(
                "stream {index}: owner {instance} acknowledged {first_offset}.. but the newest owner shows {shown:?} there"
            ));
        }
    }

    /// Sends one producer request until it is answered for certain; false
    /// when the producer must stop (its stream is gone or closed, or it
    /// gave up).
    async fn produce(
        &self,
        index: usize,
        stream: StreamRef,
        key: usize,
        claim: ProducerClaim,
        payloads: &[Bytes],
    ) -> bool {
        let mut maybe_landed = false;
        for _ in 0..PRODUCER_ATTEMPTS_MAX {
            let shard = self.newest.lock().clone();
            let Some(shard) = shard else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let mut request = AppendRequest::new(stream, self.cipher.clone(), payloads.to_vec());
            request.producer = Some(claim.clone());
            request.routing_key = Bytes::from_static(SIM_ROUTING_KEYS[key]);
            self.model.lock().stats.producer_requests += 1;
            let answer =
                tokio::time::timeout(Duration::from_secs(3600), shard.append(request)).await;
            let tag = format!("{} e{} s{}", claim.id, claim.epoch, claim.seq);
            match answer {
                Err(_) => {
                    self.model
                        .lock()
                        .violations
                        .push(format!("producer {tag} never answered"));
                    return false;
                }
                Ok(Ok(ack)) => {
                    let (first, next) = match &ack.kind {
                        AppendKind::Appended => (ack.first_offset, ack.next_offset),
                        AppendKind::Duplicate(state) => (state.first_offset, state.next_offset),
                        AppendKind::AlreadyClosed => {
                            self.model.lock().violations.push(format!(
                                "producer {tag}: an append with records answered AlreadyClosed"
                            ));
                            return false;
                        }
                    };
                    self.trace.lock().event(&format!(
                        "producer {tag} s{index} {first}..{next} {:?}",
                        ack.kind
                    ));
                    let mut model = self.model.lock();
                    if matches!(ack.kind, AppendKind::Duplicate(_)) {
                        model.stats.producer_duplicates += 1;
                    }
                    model.record_ack(&stream, first, next, payloads, None);
                    return true;
                }
                Ok(Err(e)) if retryable(&e) => {
                    maybe_landed |= !is_definite(&e);
                    self.trace
                        .lock()
                        .event(&format!("producer {tag}: {e}; retrying"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                Ok(Err(
                    e @ (EngineError::StreamNotFound
                    | EngineError::StaleIncarnation
                    | EngineError::StreamClosed { .. }),
                )) => {
                    // Only a request no attempt of which may have landed is
                    // certainly not in the log.
                    if !maybe_landed {
                        self.model.lock().record_refusal(payloads, &e);
                    }
                    return false;
                }
                Ok(Err(e)) => {
                    self.model
                        .lock()
                        .violations
                        .push(format!("producer {tag}: {e}"));
                    return false;
                }
            }
        }
        false
    }
}
