//! The simulation driver: one seed, one run of the whole engine over a faulty
//! in-memory store, with invariants checked after every step.
//!
//! The caller runs [`run_seed`] on a current-thread tokio runtime with paused
//! time (see `engine/tests/sim.rs`); every source of nondeterminism — the
//! driver's choices, the store's faults, the engine's randomness and clock — is
//! derived from the seed, so a failing seed replays exactly.
//!
//! Steps: appenders on random streams (through the current owner, or through an
//! older owner that may be fenced), time passing, crashes of the current owner
//! (its in-flight PUTs may still land later), takeovers by a second owner while
//! the first keeps running, and fault modes (calm, flaky, outage).
//!
//! Invariants, checked against the current owner and the store itself:
//! 1. every acknowledged record is readable at its acknowledged offset;
//! 2. offsets are contiguous from 0 and no record appears twice;
//! 3. a record once visible stays visible at the same offset (so nothing was
//!    visible before it was durable) and is present in a read-only walk of the
//!    store's log;
//! 4. what an older (possibly fenced) owner shows is a prefix of the current
//!    owner's view;
//! 5. no offset is acknowledged twice with different records;
//! 6. at the moment any owner acknowledges an append, the newest owner already
//!    shows it: an older owner cannot acknowledge past the newer owner's fence;
//! 7. no object is deleted while the manifest references it (every deletion is
//!    audited against the manifest in the store at that moment).
//!
//! Seeds run with tiny seal thresholds, few index runs and a short GC grace, so
//! seals, full-run merges and deletions interleave with crashes at every step;
//! invariant 3's read-only walk reads the sealed tier from the store too.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use strata_manifest::RetryPolicy;
use strata_segments::{open_page, StreamCipher, StreamEpoch, StreamKey};
use tokio::task::JoinSet;

use super::audit::DeleteAudit;
use super::faults::{FaultConfig, FaultStats, Faults};
use crate::env::{EngineEnv, SeededEntropy, TokioClock};
use crate::error::EngineError;
use crate::ids::{InstanceId, ShardName, StreamRef};
use crate::layout::{ImmutableKind, ShardLayout};
use crate::shard::{inspect_log, AppendRequest, ReadLimits, Shard, ShardConfig, ShardStatus};
use crate::store::Layered;

/// Routing keys the simulation's appends use.
const SIM_ROUTING_KEYS: [&[u8]; 3] = [b"", b"a", b"bb"];

/// Shape of one simulated run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub steps: usize,
    pub streams: usize,
    /// Faults while the run is "flaky".
    pub faults: FaultConfig,
    pub shard: ShardConfig,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            steps: 120,
            streams: 3,
            faults: FaultConfig {
                latency_ms_max: 20,
                put_fail: 0.05,
                put_ambiguous: 0.05,
                get_fail: 0.03,
                list_fail: 0.03,
                stall: 0.02,
                stall_ms_max: 400,
                outage: false,
            },
            shard: ShardConfig {
                pipeline_depth: 3,
                ingest_queue_capacity: 64,
                store_retry: RetryPolicy {
                    attempts: 3,
                    initial_backoff: Duration::from_millis(5),
                    max_backoff: Duration::from_millis(40),
                },
                reopen_backoff_max: Duration::from_millis(200),
                ..ShardConfig::default()
            },
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimReport {
    pub seed: u64,
    pub acked_appends: u64,
    pub failed_appends: u64,
    pub acked_records: u64,
    pub crashes: u64,
    pub takeovers: u64,
    pub checks: u64,
    pub faults: FaultStats,
    /// Objects deleted by garbage collection (all audited).
    pub deletes: u64,
    /// Segment objects in the store at the end.
    pub segments: u64,
    /// Digest of every event in order: equal digests mean identical runs.
    pub trace_digest: [u8; 8],
}

/// A violated invariant, with the one line that reproduces it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("simulation seed {seed} failed at step {step}: {message}\n  reproduce: SIM_SEED={seed} cargo test -p strata-engine --test sim -- --nocapture\n  last events:\n    {}", recent.join("\n    "))]
pub struct SimFailure {
    pub seed: u64,
    pub step: usize,
    pub message: String,
    /// The events just before the failure, oldest first.
    pub recent: Vec<String>,
}

#[derive(Default)]
struct Model {
    /// Per stream: offset → payload of every acknowledged record.
    acked: Vec<BTreeMap<u64, Bytes>>,
    /// Per stream: every record a check has seen.
    seen: Vec<BTreeMap<u64, Bytes>>,
    violations: Vec<String>,
    acked_appends: u64,
    failed_appends: u64,
    acked_records: u64,
}

/// Events to keep for a failure report.
const RECENT_EVENTS_MAX: usize = 60;

#[derive(Default)]
struct Trace {
    digest: Sha256,
    recent: std::collections::VecDeque<String>,
}

impl Trace {
    fn event(&mut self, text: &str) {
        self.digest.update(text.as_bytes());
        self.digest.update([0]);
        if self.recent.len() == RECENT_EVENTS_MAX {
            self.recent.pop_front();
        }
        self.recent.push_back(text.to_string());
    }
}

struct Owner {
    shard: Shard,
    instance: u16,
}

struct World {
    seed: u64,
    config: SimConfig,
    rng: StdRng,
    faults: Arc<Faults>,
    audit: Arc<DeleteAudit>,
    clean_store: Arc<dyn ObjectStore>,
    env: EngineEnv,
    shard_name: ShardName,
    streams: Vec<StreamRef>,
    cipher: Arc<StreamCipher>,
    owners: Vec<Owner>,
    /// The newest owner, as appender tasks see it when they get an answer.
    newest: Arc<Mutex<Option<Shard>>>,
    next_instance: u16,
    model: Arc<Mutex<Model>>,
    trace: Arc<Mutex<Trace>>,
    appenders: JoinSet<()>,
    next_payload: u64,
    step: usize,
    crashes: u64,
    takeovers: u64,
    checks: u64,
}

impl SimConfig {
    /// The engine settings a seed runs with: pipeline depth, flush gap, object
    /// cut size and queue size vary with the seed to cover the pump's states.
    pub fn for_seed(&self, seed: u64) -> SimConfig {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xc0f1_6000);
        let mut config = self.clone();
        config.shard.pipeline_depth = rng.random_range(1..=6);
        if rng.random_bool(0.3) {
            config.shard.min_flush_gap = Duration::from_millis(rng.random_range(1..=15));
        }
        if rng.random_bool(0.3) {
            // Tiny objects: batches are cut after every request or two.
            config.shard.max_object_bytes = rng.random_range(64..=512);
        }
        config.shard.ingest_queue_capacity = rng.random_range(4..=64);
        // Seal often, merge often, collect soon.
        config.shard.seal_objects = rng.random_range(1..=12);
        config.shard.seal_bytes = rng.random_range(200..=20_000);
        config.shard.seal_age = Duration::from_millis(rng.random_range(20..=400));
        config.shard.max_index_runs = rng.random_range(1..=4);
        config.shard.gc_grace = Duration::from_millis(rng.random_range(0..=300));
        config
    }
}

/// Runs one seed. Call it on a current-thread runtime with paused time.
pub async fn run_seed(seed: u64, config: &SimConfig) -> Result<SimReport, SimFailure> {
    let config = &config.for_seed(seed);
    let clean_store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let shard_name = ShardName::new("sim").expect("valid");
    let audited = Layered::new(
        clean_store.clone(),
        DeleteAudit::new(clean_store.clone(), ShardLayout::new(shard_name.clone())),
    );
    let audit = audited.layer().clone();
    let faulty = Layered::new(
        Arc::new(audited),
        Faults::new(seed ^ 0x5eed_fa17, FaultConfig::none()),
    );
    let faults = faulty.layer().clone();
    let env = EngineEnv {
        store: Arc::new(faulty),
        clock: Arc::new(TokioClock::new(1_700_000_000_000)),
        entropy: Arc::new(SeededEntropy::new(seed)),
    };
    let streams = (0..config.streams)
        .map(|i| StreamRef {
            id: [i as u8 + 1; 16],
            incarnation: 1,
        })
        .collect();
    let mut world = World {
        seed,
        config: config.clone(),
        rng: StdRng::seed_from_u64(seed),
        faults,
        audit,
        clean_store,
        env,
        shard_name,
        streams,
        cipher: Arc::new(StreamCipher::new(
            StreamEpoch([9; 16]),
            StreamKey::from_bytes([3; 32]),
        )),
        owners: Vec::new(),
        newest: Arc::new(Mutex::new(None)),
        next_instance: 1,
        model: Arc::new(Mutex::new(Model {
            acked: vec![BTreeMap::new(); config.streams],
            seen: vec![BTreeMap::new(); config.streams],
            ..Model::default()
        })),
        trace: Arc::new(Mutex::new(Trace::default())),
        appenders: JoinSet::new(),
        next_payload: 0,
        step: 0,
        crashes: 0,
        takeovers: 0,
        checks: 0,
    };
    world.run().await?;
    let layout = ShardLayout::new(world.shard_name.clone());
    let segments = world
        .clean_store
        .list(Some(&layout.immutable_prefix(ImmutableKind::Segment)))
        .count()
        .await as u64;
    let model = world.model.lock();
    let digest = world.trace.lock().digest.clone().finalize();
    Ok(SimReport {
        seed,
        acked_appends: model.acked_appends,
        failed_appends: model.failed_appends,
        acked_records: model.acked_records,
        crashes: world.crashes,
        takeovers: world.takeovers,
        checks: world.checks,
        faults: world.faults.stats(),
        deletes: world.audit.deletes(),
        segments,
        trace_digest: digest[..8].try_into().expect("8 bytes"),
    })
}

impl World {
    fn fail(&self, message: impl Into<String>) -> SimFailure {
        SimFailure {
            seed: self.seed,
            step: self.step,
            message: message.into(),
            recent: self.trace.lock().recent.iter().cloned().collect(),
        }
    }

    fn event(&self, text: String) {
        self.trace.lock().event(&text);
    }

    async fn run(&mut self) -> Result<(), SimFailure> {
        self.open_owner().await?;
        for i in 0..self.streams.len() {
            self.create_stream(i).await?;
        }
        self.faults.set(self.config.faults);
        for step in 0..self.config.steps {
            self.step = step;
            let roll: u32 = self.rng.random_range(0..100);
            match roll {
                0..=44 => self.spawn_appenders(),
                45..=69 => self.pass_time().await,
                70..=79 => self.check().await?,
                80..=84 => self.crash_and_reopen().await?,
                85..=86 => self.takeover().await?,
                87..=88 => self.racing_takeover().await?,
                89..=92 => self.change_weather(),
                _ => self.drop_an_old_owner(),
            }
            self.take_violations()?;
        }
        // Calm down, let every append answer, and check; then crash and check again.
        self.faults.set(FaultConfig {
            latency_ms_max: self.config.faults.latency_ms_max,
            ..FaultConfig::none()
        });
        self.step = self.config.steps;
        self.join_appenders().await?;
        self.check().await?;
        self.crash_and_reopen().await?;
        self.check().await?;
        self.take_violations()
    }

    fn take_violations(&self) -> Result<(), SimFailure> {
        let audited = self.audit.take_violations();
        if let Some(v) = audited.first() {
            return Err(self.fail(v.clone()));
        }
        let model = self.model.lock();
        match model.violations.first() {
            Some(v) => Err(self.fail(v.clone())),
            None => Ok(()),
        }
    }

    fn current(&self) -> Option<&Shard> {
        self.owners.last().map(|o| &o.shard)
    }

    async fn open_owner(&mut self) -> Result<(), SimFailure> {
        if self.faults.config().outage {
            self.faults.set(self.config.faults);
        }
        let instance = self.next_instance;
        self.next_instance += 1;
        let mut id = [0u8; 16];
        id[..2].copy_from_slice(&instance.to_le_bytes());
        for attempt in 0..100 {
            match Shard::open(
                self.env.clone(),
                self.shard_name.clone(),
                InstanceId(id),
                self.config.shard.clone(),
            )
            .await
            {
                Ok(shard) => {
                    let report = shard.last_recovery();
                    self.event(format!("open {instance} epoch {}", report.epoch));
                    *self.newest.lock() = Some(shard.clone());
                    self.owners.push(Owner { shard, instance });
                    return Ok(());
                }
                Err(e @ EngineError::Corrupt { .. }) => {
                    return Err(self.fail(format!("open found damage: {e}")))
                }
                Err(e) => {
                    self.event(format!("open {instance} attempt {attempt} failed: {e}"));
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
            }
        }
        Err(self.fail("could not open the shard in 100 attempts"))
    }

    async fn create_stream(&mut self, index: usize) -> Result<(), SimFailure> {
        let stream = self.streams[index];
        for _ in 0..100 {
            let Some(shard) = self.current() else {
                break;
            };
            match shard.create_stream(stream, &self.cipher).await {
                Ok(_) => return Ok(()),
                Err(e) => {
                    self.event(format!("create {index} failed: {e}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
        Err(self.fail(format!("could not create stream {index}")))
    }

    fn spawn_appenders(&mut self) {
        let count = self.rng.random_range(1..=8);
        for _ in 0..count {
            let index = self.rng.random_range(0..self.streams.len());
            let records = self.rng.random_range(1..=4);
            let key = self.rng.random_range(0..SIM_ROUTING_KEYS.len());
            let via_old = self.owners.len() > 1 && self.rng.random_bool(0.2);
            let owner = if via_old {
                &self.owners[self.rng.random_range(0..self.owners.len() - 1)]
            } else {
                self.owners.last().expect("an owner is always open")
            };
            let shard = owner.shard.clone();
            let payloads: Vec<Bytes> = (0..records)
                .map(|_| {
                    self.next_payload += 1;
                    Bytes::from(format!("s{index}-k{key}-r{}", self.next_payload))
                })
                .collect();
            let mut request =
                AppendRequest::new(self.streams[index], self.cipher.clone(), payloads.clone());
            request.routing_key = Bytes::from_static(SIM_ROUTING_KEYS[key]);
            let model = self.model.clone();
            let trace = self.trace.clone();
            let instance = owner.instance;
            let newest = self.newest.clone();
            let stream = self.streams[index];
            let cipher = self.cipher.clone();
            self.appenders.spawn(async move {
                let answer =
                    tokio::time::timeout(Duration::from_secs(3600), shard.append(request)).await;
                if let Ok(Ok(ack)) = &answer {
                    let newest = newest.lock().clone();
                    if let Some(newest) = newest {
                        let shown = newest
                            .read(
                                &stream,
                                ack.first_offset,
                                ReadLimits {
                                    max_records: payloads.len(),
                                    max_bytes: usize::MAX,
                                },
                                &cipher,
                                None,
                            )
                            .await;
                        // A sealed chunk's GET may meet an injected fault: no verdict then.
                        let unknown = matches!(shown, Err(EngineError::Store { .. }));
                        let shown: Vec<Bytes> = shown
                            .map(|b| b.records.into_iter().map(|r| r.payload).collect())
                            .unwrap_or_default();
                        if !unknown && shown != payloads {
                            model.lock().violations.push(format!(
                                "stream {index}: owner {instance} acknowledged {}..{} but the newest owner shows {shown:?} there",
                                ack.first_offset, ack.next_offset
                            ));
                        }
                    }
                }
                let mut model = model.lock();
                match answer {
                    Err(_) => model
                        .violations
                        .push(format!("an append to stream {index} never answered")),
                    Ok(Ok(ack)) => {
                        trace.lock().event(&format!(
                            "ack {instance} s{index} {}..{}",
                            ack.first_offset, ack.next_offset
                        ));
                        model.record_ack(index, ack.first_offset, ack.next_offset, &payloads);
                    }
                    Ok(Err(e)) => {
                        trace.lock().event(&format!("err {instance} s{index} {e}"));
                        model.failed_appends += 1;
                    }
                }
            });
        }
    }

    async fn pass_time(&mut self) {
        let ms = self.rng.random_range(1..=40);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.reap_finished();
    }

    fn reap_finished(&mut self) {
        while self.appenders.try_join_next().is_some() {}
    }

    async fn join_appenders(&mut self) -> Result<(), SimFailure> {
        while let Some(joined) = self.appenders.join_next().await {
            if let Err(e) = joined {
                return Err(self.fail(format!("appender task failed: {e}")));
            }
        }
        Ok(())
    }

    fn change_weather(&mut self) {
        let mode = self.rng.random_range(0..10);
        let config = match mode {
            0 => FaultConfig {
                outage: true,
                ..self.config.faults
            },
            1..=3 => FaultConfig {
                latency_ms_max: self.config.faults.latency_ms_max,
                ..FaultConfig::none()
            },
            _ => self.config.faults,
        };
        self.event(format!("weather {mode}"));
        self.faults.set(config);
    }

    async fn crash_and_reopen(&mut self) -> Result<(), SimFailure> {
        if let Some(owner) = self.owners.pop() {
            self.event(format!("crash {}", owner.instance));
            *self.newest.lock() = None;
            owner.shard.crash();
            self.crashes += 1;
        }
        self.open_owner().await
    }

    async fn takeover(&mut self) -> Result<(), SimFailure> {
        self.takeovers += 1;
        self.event("takeover".into());
        self.open_owner().await
    }

    /// Two new owners open at once: their claims, walks and fences interleave.
    /// Either may lose (it is fenced by the other); the newest survivor serves.
    async fn racing_takeover(&mut self) -> Result<(), SimFailure> {
        self.takeovers += 1;
        if self.faults.config().outage {
            self.faults.set(self.config.faults);
        }
        let mut contenders = Vec::new();
        for _ in 0..2 {
            let instance = self.next_instance;
            self.next_instance += 1;
            let mut id = [0u8; 16];
            id[..2].copy_from_slice(&instance.to_le_bytes());
            contenders.push((instance, id));
        }
        let open = |id: [u8; 16]| {
            Shard::open(
                self.env.clone(),
                self.shard_name.clone(),
                InstanceId(id),
                self.config.shard.clone(),
            )
        };
        let (a, b) = tokio::join!(open(contenders[0].1), open(contenders[1].1));
        let mut opened: Vec<(u64, Owner)> = Vec::new();
        for ((instance, _), result) in contenders.into_iter().zip([a, b]) {
            match result {
                Ok(shard) => {
                    let epoch = shard.last_recovery().epoch;
                    self.event(format!("race open {instance} epoch {epoch}"));
                    opened.push((epoch, Owner { shard, instance }));
                }
                Err(e @ EngineError::Corrupt { .. }) => {
                    return Err(self.fail(format!("racing open found damage: {e}")))
                }
                Err(e) => self.event(format!("race open {instance} failed: {e}")),
            }
        }
        opened.sort_by_key(|(epoch, _)| *epoch);
        let survivors = opened.len();
        for (_, owner) in opened {
            *self.newest.lock() = Some(owner.shard.clone());
            self.owners.push(owner);
        }
        // Both lost (to each other or to store faults) after fencing the old
        // owner: a fleet would try again, so open one the plain way.
        if survivors == 0 {
            self.open_owner().await?;
        }
        Ok(())
    }

    fn drop_an_old_owner(&mut self) {
        if self.owners.len() > 1 {
            let index = self.rng.random_range(0..self.owners.len() - 1);
            let owner = self.owners.remove(index);
            self.event(format!("drop {}", owner.instance));
            owner.shard.crash();
        }
    }

    /// All records of every stream as `shard` shows them.
    async fn visible(&self, shard: &Shard) -> Result<Vec<BTreeMap<u64, Bytes>>, String> {
        let mut out = Vec::new();
        for index in 0..self.streams.len() {
            let mut records = BTreeMap::new();
            for (offset, payload) in self.read_view(shard, index, None).await? {
                if offset != records.len() as u64 {
                    return Err(format!(
                        "stream {index}: record at offset {offset} where {} was expected (hole or reorder)",
                        records.len()
                    ));
                }
                records.insert(offset, payload);
            }
            let unique: HashSet<&Bytes> = records.values().collect();
            if unique.len() != records.len() {
                return Err(format!("stream {index}: a record appears twice"));
            }
            self.check_key_views(shard, index, &records).await?;
            out.push(records);
        }
        Ok(out)
    }

    /// Reads stream `index` (of one routing key, if given) to its tail, in
    /// pages of `read_limits`: every page must make progress.
    async fn read_view(
        &self,
        shard: &Shard,
        index: usize,
        routing_key: Option<&[u8]>,
    ) -> Result<Vec<(u64, Bytes)>, String> {
        let stream = &self.streams[index];
        let mut out = Vec::new();
        let mut from = 0;
        for _ in 0..100_000 {
            let batch = shard
                .read(stream, from, self.read_limits(), &self.cipher, routing_key)
                .await
                .map_err(|e| format!("read of stream {index} from {from} failed: {e}"))?;
            if batch.next_offset <= from && batch.records.is_empty() && !batch.up_to_date() {
                return Err(format!(
                    "stream {index}: a read from {from} made no progress"
                ));
            }
            out.extend(batch.records.iter().map(|r| (r.offset, r.payload.clone())));
            from = batch.next_offset;
            if batch.up_to_date() {
                return Ok(out);
            }
        }
        Err(format!(
            "stream {index}: reads never caught up (stuck at {from})"
        ))
    }

    /// Every routing key's filtered read shows exactly that key's records (its
    /// payloads name the key) at the offsets the unfiltered read showed them.
    async fn check_key_views(
        &self,
        shard: &Shard,
        index: usize,
        all: &BTreeMap<u64, Bytes>,
    ) -> Result<(), String> {
        for (key, routing_key) in SIM_ROUTING_KEYS.iter().enumerate() {
            let marker = format!("-k{key}-");
            let expected: BTreeMap<u64, Bytes> = all
                .iter()
                .filter(|(_, p)| p.windows(marker.len()).any(|w| w == marker.as_bytes()))
                .map(|(o, p)| (*o, p.clone()))
                .collect();
            let mut seen: BTreeMap<u64, Bytes> = self
                .read_view(shard, index, Some(routing_key))
                .await?
                .into_iter()
                .collect();
            // Records appended after the unfiltered read may show; compare
            // only up to what that read saw.
            let horizon = all.len() as u64;
            seen.retain(|o, _| *o < horizon);
            if seen != expected {
                return Err(format!(
                    "stream {index} key {key}: the keyed read shows {} records, the key has {}",
                    seen.len(),
                    expected.len()
                ));
            }
        }
        Ok(())
    }

    /// Small reads in some seeds, so reads cross the sealed/unsealed boundary.
    fn read_limits(&self) -> ReadLimits {
        if self.seed.is_multiple_of(3) {
            ReadLimits {
                max_records: 3,
                max_bytes: 64,
            }
        } else {
            ReadLimits::default()
        }
    }

    /// Checks the invariants with the store calm (reads of sealed chunks must
    /// not fail on injected faults), then restores the weather.
    async fn check(&mut self) -> Result<(), SimFailure> {
        let weather = self.faults.config();
        self.faults.set(FaultConfig {
            latency_ms_max: weather.latency_ms_max,
            ..FaultConfig::none()
        });
        let result = self.check_calm().await;
        self.faults.set(weather);
        result
    }

    async fn check_calm(&mut self) -> Result<(), SimFailure> {
        self.checks += 1;
        if self
            .current()
            .is_some_and(|c| c.status() == ShardStatus::Fenced)
        {
            // Legitimate only if a later claim landed: an opener whose claim
            // succeeded and which then failed (racing takeovers do that)
            // fences the newest owner at its next manifest write. A fleet
            // would open the shard again; so does the simulation.
            let epoch = self.current().map_or(0, |c| c.last_recovery().epoch);
            let cas = strata_manifest::CasObject::<strata_manifest::ManifestCodec>::new(
                self.clean_store.clone(),
                ShardLayout::new(self.shard_name.clone()).manifest(),
                RetryPolicy::default(),
            );
            let claimed = cas
                .load()
                .await
                .ok()
                .flatten()
                .map_or(0, |m| m.value.writer.epoch);
            if claimed <= epoch {
                return Err(self.fail(format!(
                    "the newest owner (epoch {epoch}) is fenced but the manifest's epoch is {claimed}"
                )));
            }
            self.event(format!(
                "newest owner fenced by a later claim (epoch {claimed})"
            ));
            self.open_owner().await?;
        }
        let Some(current) = self.current() else {
            return Ok(());
        };
        // Reads await (sealed chunks), so appends land meanwhile: what older
        // owners show is read first, what was acknowledged is noted next, and
        // the current owner's view, read last, must hold both.
        let mut old_views = Vec::new();
        for older in &self.owners[..self.owners.len() - 1] {
            match self.visible(&older.shard).await {
                Ok(view) => old_views.push((older.instance, view)),
                // A fenced owner's sealed objects may be collected by now.
                Err(_) if older.shard.status() == ShardStatus::Fenced => {}
                Err(m) => return Err(self.fail(m)),
            }
        }
        let acked_before = self.model.lock().acked.clone();
        let visible = self.visible(current).await.map_err(|m| self.fail(m))?;
        // The store's own log, walked read-only without faults.
        let clean_env = EngineEnv {
            store: self.clean_store.clone(),
            ..self.env.clone()
        };
        let view = inspect_log(clean_env, self.shard_name.clone(), ShardConfig::default())
            .await
            .map_err(|e| self.fail(format!("read-only walk of the log failed: {e}")))?;
        let mut logged_streams = Vec::with_capacity(visible.len());
        for index in 0..visible.len() {
            let logged = self
                .logged_records(&view, index)
                .await
                .map_err(|m| self.fail(m))?;
            logged_streams.push(logged);
        }
        {
            let mut model = self.model.lock();
            for (index, records) in visible.iter().enumerate() {
                for (offset, payload) in &acked_before[index] {
                    if records.get(offset) != Some(payload) {
                        return Err(self.fail(format!(
                            "stream {index}: acknowledged record {payload:?} at offset {offset} is not readable (found {:?}); the owner holds {}",
                            records.get(offset),
                            current.describe_stream(&self.streams[index])
                        )));
                    }
                }
                for (offset, payload) in &model.seen[index] {
                    if records.get(offset) != Some(payload) {
                        return Err(self.fail(format!(
                            "stream {index}: record {payload:?} seen at offset {offset} is gone (found {:?}): it was visible before it was durable",
                            records.get(offset)
                        )));
                    }
                }
                let logged = &logged_streams[index];
                for (offset, payload) in records {
                    if logged.get(offset) != Some(payload) {
                        return Err(self.fail(format!(
                            "stream {index}: visible record at offset {offset} is not in the store's log"
                        )));
                    }
                }
                model.seen[index].extend(records.iter().map(|(o, p)| (*o, p.clone())));
            }
        }
        for (instance, old_view) in old_views {
            for (index, records) in old_view.iter().enumerate() {
                for (offset, payload) in records {
                    if visible[index].get(offset) != Some(payload) {
                        return Err(self.fail(format!(
                            "stream {index}: older owner {instance} shows offset {offset} differently from the current owner"
                        )));
                    }
                }
            }
        }
        self.event(format!(
            "check {:?}",
            visible.iter().map(BTreeMap::len).collect::<Vec<_>>()
        ));
        Ok(())
    }

    /// A stream's records as the store holds them: sealed chunks (read from
    /// the store) then the unsealed pages of the WAL.
    async fn logged_records(
        &self,
        view: &crate::shard::LogView,
        index: usize,
    ) -> Result<BTreeMap<u64, Bytes>, String> {
        let stream = &self.streams[index];
        let mut out = BTreeMap::new();
        let Some(durable) = view.streams.streams.get(&stream.id) else {
            return Ok(out);
        };
        let layout = ShardLayout::new(self.shard_name.clone());
        let mut pages: Vec<Bytes> = Vec::new();
        for sealed in &durable.sealed {
            let r = &sealed.chunk;
            let path = layout.segment(sealed.segment);
            let bytes = object_store::ObjectStoreExt::get_range(
                self.clean_store.as_ref(),
                &path,
                r.position..r.position + r.length,
            )
            .await
            .map_err(|e| format!("stream {index}: sealed chunk in {path} unreadable: {e}"))?;
            let chunk = strata_segments::segment::decode_chunk(&bytes)
                .map_err(|e| format!("stream {index}: sealed chunk in {path}: {e}"))?;
            pages.extend(chunk.pages);
        }
        pages.extend(durable.pages.iter().map(|p| p.bytes.clone()));
        for page in &pages {
            let page = &page;
            let header = strata_segments::parse_header(page).map_err(|e| e.to_string())?;
            let cipher = self
                .cipher
                .page_cipher(&header.routing_key, header.key_version);
            let opened = open_page(&cipher, page).map_err(|e| e.to_string())?;
            for record in opened.records {
                out.insert(record.offset, record.payload);
            }
        }
        Ok(out)
    }
}

impl Model {
    fn record_ack(&mut self, index: usize, first: u64, next: u64, payloads: &[Bytes]) {
        self.acked_appends += 1;
        self.acked_records += payloads.len() as u64;
        if next - first != payloads.len() as u64 {
            self.violations.push(format!(
                "stream {index}: ack {first}..{next} for {} records",
                payloads.len()
            ));
        }
        for (i, payload) in payloads.iter().enumerate() {
            let offset = first + i as u64;
            if let Some(previous) = self.acked[index].insert(offset, payload.clone()) {
                if previous != *payload {
                    self.violations.push(format!(
                        "stream {index}: offset {offset} acknowledged for {previous:?} and for {payload:?}"
                    ));
                }
            }
        }
    }
}
