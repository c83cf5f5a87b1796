//! The simulation driver: one seed, one run of the whole engine over a faulty
//! in-memory store, with the invariants checked after every step.
//!
//! The caller runs [`run_seed`] on a current-thread tokio runtime with paused
//! time (see `engine/tests/sim.rs`); every source of nondeterminism — the
//! driver's choices, the store's faults, the crash plan, the engine's
//! randomness and clock — is derived from the seed, so a failing seed replays
//! exactly.
//!
//! Owners are processes: each has an instance id, runs until it crashes (at
//! a step, or at an engine crash point the plan picked), shuts down, or is
//! dropped; a power loss undoes the store's fragile objects and takes every
//! owner down. The workload ([`super::workload`]) drives them; the checks
//! ([`super::check`]) hold the model ([`super::model`]) against the owners'
//! views and the store's own log.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use object_store::memory::InMemory;
use object_store::ObjectStore;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sha2::{Digest, Sha256};
use strata_manifest::RetryPolicy;
use strata_segments::{StreamCipher, StreamEpoch, StreamKey};
use tokio::task::JoinSet;

use super::audit::DeleteAudit;
use super::crash::{CrashPlan, PointCount};
use super::faults::{FaultConfig, FaultStats, Faults};
use super::model::{Model, StreamModel, WorkloadStats};
use super::queue_model::QueueLocks;
use crate::env::{CrashPoint, EngineEnv, SeededEntropy, TokioClock};
use crate::error::EngineError;
use crate::ids::{InstanceId, ShardName, StreamRef};
use crate::layout::{ImmutableKind, ShardLayout};
use crate::shard::{Shard, ShardConfig};
use crate::store::Layered;

/// Shape of one simulated run.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub steps: usize,
    pub streams: usize,
    /// Faults while the run is "flaky".
    pub faults: FaultConfig,
    pub shard: ShardConfig,
    /// Probability of a crash at each crash point an owner reaches.
    pub crash_point_p: f64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            steps: 120,
            streams: 3,
            faults: FaultConfig {
                latency_ms_max: 20,
                put_fail: 0.04,
                put_ambiguous: 0.04,
                put_late: 0.02,
                put_fragile: 0.02,
                get_fail: 0.03,
                list_fail: 0.02,
                list_stale: 0.05,
                list_page: 0,
                lag_ms: 50,
                delete_ambiguous: 0.03,
                delete_late: 0.02,
                late_ms_max: 300,
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
            crash_point_p: 0.02,
        }
    }
}

/// What a run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimReport {
    pub seed: u64,
    pub workload: WorkloadStats,
    /// Crashes the driver chose at a step…
    pub crashes: u64,
    /// …and crashes taken at an engine crash point.
    pub point_crashes: u64,
    pub takeovers: u64,
    pub checks: u64,
    pub faults: FaultStats,
    /// Objects deleted by garbage collection (all audited).
    pub deletes: u64,
    /// Segment objects in the store at the end.
    pub segments: u64,
    /// Per crash point: reached, and crashed there.
    pub coverage: BTreeMap<CrashPoint, PointCount>,
    /// Digest of every event in order: equal digests mean identical runs.
    pub trace_digest: [u8; 8],
}

/// A violated invariant, with the one line that reproduces it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("simulation seed {seed} failed at step {step}: {message}\n  reproduce: SIM_SEED={seed} cargo test -p strata-engine --release --test sim -- --nocapture\n  last events:\n    {}", recent.join("\n    "))]
pub struct SimFailure {
    pub seed: u64,
    pub step: usize,
    pub message: String,
    /// The events just before the failure, oldest first.
    pub recent: Vec<String>,
}

/// Events to keep for a failure report.
const RECENT_EVENTS_MAX: usize = 80;
/// Opens tried before a run gives up.
const OPEN_ATTEMPTS_MAX: usize = 100;

#[derive(Default)]
pub(super) struct Trace {
    digest: Sha256,
    recent: std::collections::VecDeque<String>,
    /// Print every event as it happens (`SIM_TRACE=1`).
    live: bool,
}

impl Trace {
    pub fn event(&mut self, text: &str) {
        if self.live {
            eprintln!("sim: {text}");
        }
        self.digest.update(text.as_bytes());
        self.digest.update([0]);
        if self.recent.len() == RECENT_EVENTS_MAX {
            self.recent.pop_front();
        }
        self.recent.push_back(text.to_string());
    }
}

pub(super) struct Owner {
    pub shard: Shard,
    pub instance: u16,
    pub id: InstanceId,
}

pub(super) struct World {
    pub seed: u64,
    pub config: SimConfig,
    pub rng: StdRng,
    pub faults: Faults,
    pub audit: Arc<DeleteAudit>,
    pub plan: Arc<CrashPlan>,
    pub clean_store: Arc<dyn ObjectStore>,
    pub env: EngineEnv,
    pub shard_name: ShardName,
    pub cipher: Arc<StreamCipher>,
    pub owners: Vec<Owner>,
    /// The newest owner, as appender tasks see it when they get an answer.
    pub newest: Arc<Mutex<Option<Shard>>>,
    pub next_instance: u16,
    pub model: Arc<Mutex<Model>>,
    pub trace: Arc<Mutex<Trace>>,
    /// Appenders, producers and seals in the background.
    pub tasks: JoinSet<()>,
    /// Serializes each owner's queue operations per stream.
    pub queue_locks: QueueLocks,
    pub next_payload: u64,
    pub step: usize,
    pub crashes: u64,
    pub point_crashes: u64,
    pub takeovers: u64,
    pub checks: u64,
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
        if rng.random_bool(0.2) {
            config.shard.max_object_entries = rng.random_range(1..=6);
        }
        config.shard.ingest_queue_capacity = rng.random_range(4..=64);
        // Seal often, merge often, collect soon.
        config.shard.seal_objects = rng.random_range(1..=12);
        config.shard.seal_bytes = rng.random_range(200..=20_000);
        config.shard.seal_age = Duration::from_millis(rng.random_range(20..=400));
        config.shard.max_index_runs = rng.random_range(1..=4);
        config.shard.gc_grace = Duration::from_millis(rng.random_range(0..=300));
        // No draw of its own: the seeds of earlier failures still replay.
        config.shard.sweep_delay = config.shard.gc_grace;
        if rng.random_bool(0.4) {
            config.faults.list_page = rng.random_range(1..=4);
        }
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
    let faults = faulty.layer().as_ref().clone();
    let plan = Arc::new(CrashPlan::new(seed ^ 0xc4a5_4000, config.crash_point_p));
    let env = EngineEnv {
        store: Arc::new(faulty),
        clock: Arc::new(TokioClock::new(1_700_000_000_000)),
        entropy: Arc::new(SeededEntropy::new(seed)),
        crash_points: Some(plan.clone()),
    };
    let streams = (0..config.streams)
        .map(|i| {
            StreamModel::new(StreamRef {
                id: [i as u8 + 1; 16],
                incarnation: 1,
            })
        })
        .collect();
    let mut world = World {
        seed,
        config: config.clone(),
        rng: StdRng::seed_from_u64(seed),
        faults,
        audit,
        plan,
        clean_store,
        env,
        shard_name,
        cipher: Arc::new(StreamCipher::new(
            StreamEpoch([9; 16]),
            StreamKey::from_bytes([3; 32]),
        )),
        owners: Vec::new(),
        newest: Arc::new(Mutex::new(None)),
        next_instance: 1,
        model: Arc::new(Mutex::new(Model {
            streams,
            ..Model::default()
        })),
        trace: Arc::new(Mutex::new(Trace {
            live: std::env::var_os("SIM_TRACE").is_some(),
            ..Trace::default()
        })),
        tasks: JoinSet::new(),
        queue_locks: QueueLocks::default(),
        next_payload: 0,
        step: 0,
        crashes: 0,
        point_crashes: 0,
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
    let workload = world.model.lock().stats;
    let digest = world.trace.lock().digest.clone().finalize();
    Ok(SimReport {
        seed,
        workload,
        crashes: world.crashes,
        point_crashes: world.point_crashes,
        takeovers: world.takeovers,
        checks: world.checks,
        faults: world.faults.stats(),
        deletes: world.audit.deletes(),
        segments,
        coverage: world.plan.coverage(),
        trace_digest: digest[..8].try_into().expect("8 bytes"),
    })
}

impl World {
    pub fn fail(&self, message: impl Into<String>) -> SimFailure {
        SimFailure {
            seed: self.seed,
            step: self.step,
            message: message.into(),
            recent: self.trace.lock().recent.iter().cloned().collect(),
        }
    }

    pub fn event(&self, text: String) {
        self.trace.lock().event(&text);
    }

    async fn run(&mut self) -> Result<(), SimFailure> {
        self.open_owner().await?;
        self.create_dead_letter_stream().await?;
        for index in 0..self.config.streams {
            self.create_stream(index).await?;
        }
        self.faults.set(self.config.faults);
        for step in 0..self.config.steps {
            self.step = step;
            self.take_step().await?;
            self.apply_planned_crashes().await?;
            self.check().await?;
            self.take_violations()?;
        }
        // Calm down, stop aiming crashes, let every task answer, and check;
        // then crash and check again.
        self.faults.set(self.config.faults.calm());
        self.plan.set_enabled(false);
        self.step = self.config.steps;
        self.apply_planned_crashes().await?;
        self.join_tasks().await?;
        self.check().await?;
        self.crash_and_reopen().await?;
        self.check().await?;
        self.take_violations()
    }

    async fn take_step(&mut self) -> Result<(), SimFailure> {
        match self.rng.random_range(0..100u32) {
            0..=31 => self.spawn_appenders(),
            32..=37 => self.spawn_producer(),
            38..=57 => self.pass_time().await,
            58..=61 => self.crash_and_reopen().await?,
            62..=63 => self.takeover().await?,
            64..=65 => self.racing_takeover().await?,
            66..=69 => self.change_weather(),
            70..=72 => self.drop_an_old_owner(),
            73..=75 => self.spawn_seal(),
            76..=77 => self.shutdown_and_reopen().await?,
            78..=80 => self.close_a_stream().await?,
            81..=84 => self.delete_and_recreate().await?,
            85..=86 => self.operator_rollback().await?,
            87..=88 => self.operator_recover().await?,
            89..=90 => self.spawn_consumer_changes(),
            91..=94 => self.spawn_queue_ops(),
            _ => self.pass_time().await,
        }
        Ok(())
    }

    pub fn take_violations(&self) -> Result<(), SimFailure> {
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

    pub fn current(&self) -> Option<&Owner> {
        self.owners.last()
    }

    /// The newest owner or, one time in five when there are several, an
    /// older one (possibly fenced): its shard and instance number.
    pub fn some_owner(&mut self) -> Option<(Shard, u16)> {
        let via_old = self.owners.len() > 1 && self.rng.random_bool(0.2);
        let owner = if via_old {
            self.owners
                .get(self.rng.random_range(0..self.owners.len() - 1))
        } else {
            self.owners.last()
        }?;
        Some((owner.shard.clone(), owner.instance))
    }

    fn set_newest(&self, shard: Option<Shard>) {
        self.audit.watch_owner(shard.clone());
        *self.newest.lock() = shard;
    }

    /// Stops every task of the owners the plan stopped at a crash point; if
    /// the newest was one of them, opens another.
    pub async fn apply_planned_crashes(&mut self) -> Result<(), SimFailure> {
        let mut reopen = false;
        for (id, point) in self.plan.take_dead() {
            let Some(position) = self.owners.iter().position(|o| o.id == id) else {
                continue;
            };
            let owner = self.owners.remove(position);
            self.event(format!(
                "crash {} at crash point {}",
                owner.instance,
                point.name()
            ));
            owner.shard.crash();
            self.point_crashes += 1;
            if position == self.owners.len() {
                self.set_newest(None);
                reopen = true;
            }
        }
        if reopen || self.owners.is_empty() {
            self.open_owner().await?;
        }
        Ok(())
    }

    fn next_owner_id(&mut self) -> (u16, InstanceId) {
        let instance = self.next_instance;
        self.next_instance += 1;
        let mut id = [0u8; 16];
        id[..2].copy_from_slice(&instance.to_le_bytes());
        let id = InstanceId(id);
        self.plan.add_owner(&id);
        (instance, id)
    }

    /// Opens the shard as a new process (an open that dies at a crash point
    /// is abandoned there, and the next attempt is a new process).
    pub async fn open_owner(&mut self) -> Result<(), SimFailure> {
        if self.faults.config().outage {
            self.faults.set(self.config.faults);
        }
        for attempt in 0..OPEN_ATTEMPTS_MAX {
            let (instance, id) = self.next_owner_id();
            let opening = Shard::open(
                self.env.clone(),
                self.shard_name.clone(),
                id,
                self.config.shard.clone(),
            );
            let opened = tokio::select! {
                opened = opening => Some(opened),
                _ = self.plan.died(id) => None,
            };
            match opened {
                Some(Ok(shard)) => {
                    let report = shard.last_recovery();
                    self.event(format!("open {instance} epoch {}", report.epoch));
                    self.set_newest(Some(shard.clone()));
                    self.owners.push(Owner {
                        shard,
                        instance,
                        id,
                    });
                    return Ok(());
                }
                Some(Err(
                    e @ (EngineError::Corrupt { .. } | EngineError::ManifestMissing { .. }),
                )) => return Err(self.fail(format!("open found damage: {e}"))),
                Some(Err(e)) => {
                    self.event(format!("open {instance} attempt {attempt} failed: {e}"));
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                None => {
                    self.point_crashes += 1;
                    self.event(format!("open {instance} crashed at a crash point"));
                    self.plan.forget(&id);
                }
            }
        }
        Err(self.fail("could not open the shard in 100 attempts"))
    }

    /// Runs `work` against the owner `id`, unless that owner dies at a crash
    /// point first (then `None`).
    pub async fn on_owner<T>(
        &self,
        id: InstanceId,
        work: impl std::future::Future<Output = T>,
    ) -> Option<T> {
        tokio::select! {
            done = work => Some(done),
            _ = self.plan.died(id) => None,
        }
    }

    pub async fn pass_time(&mut self) {
        let ms = self.rng.random_range(1..=40);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        self.reap_finished();
    }

    fn reap_finished(&mut self) {
        while self.tasks.try_join_next().is_some() {}
    }

    async fn join_tasks(&mut self) -> Result<(), SimFailure> {
        while let Some(joined) = self.tasks.join_next().await {
            if let Err(e) = joined {
                return Err(self.fail(format!("background task failed: {e}")));
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
            1..=3 => self.config.faults.calm(),
            _ => self.config.faults,
        };
        self.event(format!("weather {mode}"));
        self.faults.set(config);
    }

    /// The newest owner's process dies; sometimes the machine loses power
    /// with it (more often when the store holds fragile objects): every
    /// owner dies and the fragile objects are undone.
    pub async fn crash_and_reopen(&mut self) -> Result<(), SimFailure> {
        if let Some(owner) = self.owners.pop() {
            self.event(format!("crash {}", owner.instance));
            self.set_newest(None);
            owner.shard.crash();
            self.crashes += 1;
        }
        let fragile = self.faults.fragile();
        if self.rng.random_bool(if fragile > 0 { 0.6 } else { 0.1 }) {
            for owner in self.owners.drain(..) {
                owner.shard.crash();
            }
            let undone = self
                .faults
                .power_loss(&self.clean_store)
                .await
                .map_err(|e| self.fail(format!("power loss could not be applied: {e}")))?;
            self.model.lock().stats.power_losses += 1;
            self.event(format!("power loss: {undone} fragile objects undone"));
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
        let contenders = [self.next_owner_id(), self.next_owner_id()];
        let open = |id: InstanceId| {
            let opening = Shard::open(
                self.env.clone(),
                self.shard_name.clone(),
                id,
                self.config.shard.clone(),
            );
            let plan = self.plan.clone();
            async move {
                tokio::select! {
                    opened = opening => Some(opened),
                    _ = plan.died(id) => None,
                }
            }
        };
        let (a, b) = tokio::join!(open(contenders[0].1), open(contenders[1].1));
        let mut opened: Vec<(u64, Owner)> = Vec::new();
        for ((instance, id), result) in contenders.into_iter().zip([a, b]) {
            match result {
                Some(Ok(shard)) => {
                    let epoch = shard.last_recovery().epoch;
                    self.event(format!("race open {instance} epoch {epoch}"));
                    opened.push((
                        epoch,
                        Owner {
                            shard,
                            instance,
                            id,
                        },
                    ));
                }
                Some(Err(
                    e @ (EngineError::Corrupt { .. } | EngineError::ManifestMissing { .. }),
                )) => return Err(self.fail(format!("racing open found damage: {e}"))),
                Some(Err(e)) => self.event(format!("race open {instance} failed: {e}")),
                None => {
                    self.point_crashes += 1;
                    self.event(format!("race open {instance} crashed at a crash point"));
                    self.plan.forget(&id);
                }
            }
        }
        opened.sort_by_key(|(epoch, _)| *epoch);
        let survivors = opened.len();
        for (_, owner) in opened {
            self.set_newest(Some(owner.shard.clone()));
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

    /// The newest owner shuts down gracefully (flush, final seal), and a new
    /// process opens the shard.
    async fn shutdown_and_reopen(&mut self) -> Result<(), SimFailure> {
        let Some(owner) = self.owners.pop() else {
            return self.open_owner().await;
        };
        self.set_newest(None);
        self.event(format!("shutdown {}", owner.instance));
        let done = self.on_owner(owner.id, owner.shard.shutdown()).await;
        if done.is_none() {
            self.point_crashes += 1;
            self.event(format!(
                "shutdown {} crashed at a crash point",
                owner.instance
            ));
            self.plan.forget(&owner.id);
        }
        owner.shard.crash();
        self.model.lock().stats.shutdowns += 1;
        self.open_owner().await
    }
}
