//! A deterministic simulation of the fleet's controllers: three to five
//! members over one in-memory store and one simulated clock, driven step by
//! step from a seed. Each member's view of the store can be late (its beats
//! paused), partial (heartbeats missing from its listings), contradictory
//! (members disagree about who is live), or cut off (its heartbeat writes or
//! listings fail); hand-off hints are delayed, reordered or lost; members
//! crash and new ones join. After every step:
//!
//! * **safety** — no shard is served (`Location::Local`) by two members;
//!
//! and once the faults end and every member has beaten for twelve leases
//! (convergence is usually a lease or two; a few seeds need more):
//!
//! * **liveness** — every shard is served by exactly one member, the one
//!   placement names over the live members, and every other member points
//!   at it.
//!
//! Views are only hidden or late for less than a lease (half a lease at
//! most): a listing that misses a live member for a whole lease is
//! indistinguishable from that member's death, which S3's strongly
//! consistent listings rule out. `FLEET_SIM_SEEDS` (default 200) and
//! `FLEET_SIM_SEED` (one seed) choose the seeds.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::{BoxStream, StreamExt};
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectMeta, ObjectStore, PutOptions, PutPayload, PutResult};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata_engine::store::{Layered, StoreLayer, StoreOp};
use strata_engine::{Clock, EngineEnv, InstanceId, SeededEntropy, ShardConfig};
use strata_manifest::RetryPolicy;
use strata_server::service::fleet::controller::BoxFuture;
use strata_server::service::fleet::placement::{owner_of, Candidate};
use strata_server::service::fleet::{EngineOpener, Fleet, FleetConfig, MemberState, Peers};
use strata_server::service::registry::Registry;
use strata_server::service::routing::{Location, ShardIndex, ShardRouter};
use strata_server::service::{Streams, StreamsConfig};

const SHARDS: u32 = 8;
const HEARTBEAT_MS: u64 = 500;
const LEASE_MS: u64 = 2_000;
const STEPS: usize = 300;
/// Leases of fault-free beats after which ownership must have settled.
const SETTLE_LEASES: u64 = 12;

#[derive(Debug)]
struct SimClock(AtomicU64);

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// One member's window on the shared store, with its faults.
#[derive(Debug)]
struct View {
    clock_ms: Arc<AtomicU64>,
    /// Simulated time of each heartbeat's last write (shared by all views):
    /// listings show it as the modification time.
    written_ms: Arc<Mutex<HashMap<Path, u64>>>,
    puts_fail: AtomicBool,
    lists_fail: AtomicBool,
    /// Heartbeats (by path) this member's listings leave out.
    hidden: Mutex<HashSet<Path>>,
    /// The simulated clock, which a slow claim moves on.
    sim_clock: Arc<SimClock>,
    /// One-shot: the next shard write (a claim's) takes this long.
    slow_claim_ms: AtomicU64,
    /// The member's router, to see whether its lease held through that write.
    router: RouterCell,
    lapsed_in_claim: AtomicBool,
    /// One-shot: the next heartbeat PUT waits for a permit here before it
    /// lands (a write that is slow while the others go on).
    held_heartbeat: Mutex<Option<Arc<tokio::sync::Semaphore>>>,
    /// Set while a held heartbeat PUT waits.
    heartbeat_waiting: AtomicBool,
    /// Listings of the stream registry (`registry/`) made through this view.
    registry_listings: AtomicU64,
}

/// A member's router, set once it exists.
#[derive(Default)]
struct RouterCell(std::sync::OnceLock<Arc<ShardRouter>>);

impl std::fmt::Debug for RouterCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RouterCell")
    }
}

impl std::ops::Deref for RouterCell {
    type Target = std::sync::OnceLock<Arc<ShardRouter>>;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

fn is_heartbeat(path: &Path) -> bool {
    path.as_ref().starts_with("fleet/")
}

fn injected() -> object_store::Error {
    object_store::Error::Generic {
        store: "simulation",
        source: "injected fault".into(),
    }
}

#[async_trait]
impl StoreLayer for View {
    async fn before(&self, op: StoreOp, location: Option<&Path>) -> object_store::Result<()> {
        let heartbeat = location.is_some_and(is_heartbeat);
        match op {
            StoreOp::Put if heartbeat && self.puts_fail.load(Ordering::SeqCst) => Err(injected()),
            StoreOp::List if heartbeat && self.lists_fail.load(Ordering::SeqCst) => Err(injected()),
            StoreOp::Put if !heartbeat => {
                let slow_ms = self.slow_claim_ms.swap(0, Ordering::SeqCst);
                if slow_ms > 0 {
                    let now = self.sim_clock.0.fetch_add(slow_ms, Ordering::SeqCst) + slow_ms;
                    self.clock_ms.store(now, Ordering::SeqCst);
                    let leased = self.router.get().is_some_and(|r| r.leased());
                    self.lapsed_in_claim.store(!leased, Ordering::SeqCst);
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        if is_heartbeat(location) {
            let held = self.held_heartbeat.lock().take();
            if let Some(gate) = held {
                self.heartbeat_waiting.store(true, Ordering::SeqCst);
                let _permit = gate.acquire().await;
                self.heartbeat_waiting.store(false, Ordering::SeqCst);
            }
        }
        let written = inner.put_opts(location, payload, opts).await?;
        if is_heartbeat(location) {
            let now = self.clock_ms.load(Ordering::SeqCst);
            self.written_ms.lock().insert(location.clone(), now);
        }
        Ok(written)
    }

    fn list(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
        offset: Option<&Path>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        if prefix.is_some_and(|p| p.as_ref().starts_with("registry")) {
            self.registry_listings.fetch_add(1, Ordering::SeqCst);
        }
        let listing = strata_engine::store::inner_listing(inner, prefix, offset);
        let hidden = self.hidden.lock().clone();
        let written = self.written_ms.lock().clone();
        listing
            .filter(move |meta| {
                let keep = meta
                    .as_ref()
                    .map_or(true, |m| !hidden.contains(&m.location));
                std::future::ready(keep)
            })
            .map(move |meta| {
                meta.map(|mut m| {
                    if let Some(ms) = written.get(&m.location) {
                        m.last_modified =
                            chrono::DateTime::from_timestamp_millis(*ms as i64).unwrap_or_default();
                    }
                    m
                })
            })
            .boxed()
    }
}

/// Hints wait in a queue; the driver delivers, delays or drops them.
type Hint = (String, InstanceId, Vec<(ShardIndex, u64)>);

#[derive(Default)]
struct Mailbox(Mutex<VecDeque<Hint>>);

struct SimPeers(Arc<Mailbox>);

impl Peers for SimPeers {
    fn hint(&self, url: &str, from: InstanceId, shards: Vec<(ShardIndex, u64)>) -> BoxFuture<()> {
        self.0 .0.lock().push_back((url.to_string(), from, shards));
        Box::pin(async {})
    }
}

struct Member {
    id: InstanceId,
    url: String,
    fleet: Arc<Fleet>,
    streams: Arc<Streams>,
    view: Arc<Layered<View>>,
    alive: bool,
    /// Beats are skipped until this simulated time (a late process).
    paused_until_ms: u64,
    /// A beat whose heartbeat write is held while the others go on.
    slow_beat: Option<SlowBeat>,
}

/// A beat in flight whose heartbeat write lands at `lands_at_ms`.
struct SlowBeat {
    task: tokio::task::JoinHandle<()>,
    gate: Arc<tokio::sync::Semaphore>,
    lands_at_ms: u64,
}

/// Beat and lease of the simulated members.
#[derive(Debug, Clone, Copy)]
struct Timing {
    heartbeat_ms: u64,
    lease_ms: u64,
}

impl Timing {
    /// Short beats and leases, as the fleet's process tests use.
    const TEST: Timing = Timing {
        heartbeat_ms: HEARTBEAT_MS,
        lease_ms: LEASE_MS,
    };
    /// `strata serve --fleet`'s defaults.
    const DEFAULT: Timing = Timing {
        heartbeat_ms: 2_000,
        lease_ms: 6_000,
    };
}

struct World {
    timing: Timing,
    clock: Arc<SimClock>,
    store: Arc<dyn ObjectStore>,
    written_ms: Arc<Mutex<HashMap<Path, u64>>>,
    mailbox: Arc<Mailbox>,
    members: Vec<Member>,
    /// When each member's injected faults end (cleared by the driver).
    faults_until_ms: Vec<u64>,
    /// No new fault for a member before this time.
    calm_until_ms: Vec<u64>,
}

impl World {
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    async fn join(&mut self, n: usize) {
        let id = InstanceId([n as u8 + 1; 16]);
        let url = format!("http://member-{n}");
        let view = Arc::new(Layered::new(
            self.store.clone(),
            View {
                clock_ms: Arc::new(AtomicU64::new(0)),
                written_ms: self.written_ms.clone(),
                puts_fail: AtomicBool::new(false),
                lists_fail: AtomicBool::new(false),
                hidden: Mutex::new(HashSet::new()),
                sim_clock: self.clock.clone(),
                slow_claim_ms: AtomicU64::new(0),
                router: RouterCell::default(),
                lapsed_in_claim: AtomicBool::new(false),
                held_heartbeat: Mutex::new(None),
                heartbeat_waiting: AtomicBool::new(false),
                registry_listings: AtomicU64::new(0),
            },
        ));
        // The view reads the simulated clock through a shared counter.
        let clock_ms = view.layer().clock_ms.clone();
        clock_ms.store(self.now_ms(), Ordering::SeqCst);
        let store: Arc<dyn ObjectStore> = view.clone();
        let clock: Arc<dyn Clock> = self.clock.clone();
        let registry = Registry::new(store.clone(), RetryPolicy::default(), self.now_ms());
        let router = Arc::new(ShardRouter::fleet(SHARDS, clock.clone()).unwrap());
        let _ = view.layer().router.set(router.clone());
        let streams = Arc::new(Streams::with_router(
            registry,
            router,
            clock,
            Arc::new(SeededEntropy::new(n as u64)),
            StreamsConfig::default(),
        ));
        let config = ShardConfig {
            chunk_cache: None,
            ..ShardConfig::default()
        };
        let fleet = Fleet::new(
            id,
            FleetConfig::new(url.clone(), self.timing.heartbeat_ms, self.timing.lease_ms),
            store.clone(),
            streams.clone(),
            Arc::new(EngineOpener {
                env: EngineEnv::production(store),
                instance: id,
                config,
            }),
            Arc::new(SimPeers(self.mailbox.clone())),
        );
        self.members.push(Member {
            id,
            url,
            fleet,
            streams,
            view,
            alive: true,
            paused_until_ms: 0,
            slow_beat: None,
        });
        self.faults_until_ms.push(0);
        self.calm_until_ms.push(0);
    }

    fn advance(&mut self, ms: u64) {
        let now = self.clock.0.fetch_add(ms, Ordering::SeqCst) + ms;
        for m in &self.members {
            m.view.layer().clock_ms.store(now, Ordering::SeqCst);
        }
    }

    async fn beat(&self, i: usize) {
        let m = &self.members[i];
        if m.alive && m.slow_beat.is_none() && self.now_ms() >= m.paused_until_ms {
            m.fleet.beat().await;
        }
    }

    /// Starts a beat of member `i` whose heartbeat write waits until
    /// `lands_at_ms` (a PUT is bounded by half a lease, so that is the most
    /// it may wait); its other beats and hints wait too.
    async fn start_slow_beat(&mut self, i: usize, lands_at_ms: u64) {
        let m = &mut self.members[i];
        if !m.alive || m.slow_beat.is_some() {
            return;
        }
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let layer = m.view.layer();
        *layer.held_heartbeat.lock() = Some(gate.clone());
        let fleet = m.fleet.clone();
        let task = tokio::spawn(async move { fleet.beat().await });
        // Until the write waits at the gate (or the beat wrote none).
        for _ in 0..100_000 {
            if layer.heartbeat_waiting.load(Ordering::SeqCst) || task.is_finished() {
                break;
            }
            tokio::task::yield_now().await;
        }
        layer.held_heartbeat.lock().take();
        m.slow_beat = Some(SlowBeat {
            task,
            gate,
            lands_at_ms,
        });
    }

    /// Lets the held heartbeat writes due by now (all: `everything`) land,
    /// and waits for their beats.
    async fn land_slow_beats(&mut self, everything: bool) {
        let now = self.now_ms();
        for m in &mut self.members {
            let due = m
                .slow_beat
                .as_ref()
                .is_some_and(|b| everything || now >= b.lands_at_ms);
            if let Some(beat) = m.slow_beat.take_if(|_| due) {
                beat.gate.add_permits(1);
                beat.task.await.expect("a slow beat");
            }
        }
    }

    async fn deliver(&mut self, index: usize) {
        let busy = |m: &Member| m.slow_beat.is_some();
        let to_busy = self
            .mailbox
            .0
            .lock()
            .get(index)
            .is_some_and(|(url, _, _)| self.members.iter().any(|m| &m.url == url && busy(m)));
        if to_busy {
            return;
        }
        let Some((url, from, shards)) = self.mailbox.0.lock().remove(index) else {
            return;
        };
        if let Some(m) = self.members.iter().find(|m| m.url == url && m.alive) {
            m.fleet.hinted(from, shards).await;
        }
    }

    fn crash(&mut self, i: usize) {
        let m = &mut self.members[i];
        m.alive = false;
        for (_, shard) in m.streams.router().owned() {
            shard.crash();
        }
    }

    fn clear_faults(&mut self, i: usize) {
        let layer = self.members[i].view.layer();
        layer.puts_fail.store(false, Ordering::SeqCst);
        layer.lists_fail.store(false, Ordering::SeqCst);
        layer.hidden.lock().clear();
        self.members[i].paused_until_ms = 0;
    }

    /// Safety: no shard is served by two members at once.
    fn check_safety(&self, seed: u64, step: usize) {
        for shard in 0..SHARDS {
            let serving: Vec<usize> = self
                .members
                .iter()
                .enumerate()
                .filter(|(_, m)| m.alive)
                .filter(|(_, m)| {
                    matches!(
                        m.streams.router().locate_index(ShardIndex(shard)),
                        Location::Local(_)
                    )
                })
                .map(|(i, _)| i)
                .collect();
            if serving.len() > 1 {
                for (i, m) in self.members.iter().enumerate() {
                    let live: Vec<String> = m
                        .fleet
                        .members()
                        .iter()
                        .map(|x| format!("{}@{}ms", &x.instance.to_string()[..2], x.age_ms))
                        .collect();
                    eprintln!(
                        "member {i} ({}) alive {} leased {} sees {live:?} written {:?}",
                        &m.id.to_string()[..2],
                        m.alive,
                        m.streams.router().leased(),
                        self.written_ms
                            .lock()
                            .get(&strata_server::service::names::fleet_heartbeat(&m.id))
                    );
                }
            }
            assert!(
                serving.len() <= 1,
                "seed {seed}, step {step}: shard {shard} served by members {serving:?}"
            );
        }
    }

    /// Liveness: each shard served by its placement owner alone, and the
    /// others point at it.
    fn check_settled(&self, seed: u64) {
        let candidates: Vec<Candidate> = self
            .members
            .iter()
            .filter(|m| m.alive)
            .map(|m| Candidate {
                instance: m.id,
                weight: 1,
                state: MemberState::Serving,
            })
            .collect();
        for shard in 0..SHARDS {
            let owner = owner_of(shard, &candidates).expect("a live member");
            for m in self.members.iter().filter(|m| m.alive) {
                let location = m.streams.router().locate_index(ShardIndex(shard));
                let ok = match &location {
                    Location::Local(_) => m.id == owner,
                    Location::Elsewhere(o) => o.instance == owner && m.id != owner,
                    Location::Moving | Location::Lapsed => false,
                };
                assert!(
                    ok,
                    "seed {seed}: shard {shard} not settled on member {:?}",
                    m.id
                );
            }
        }
    }
}

async fn simulate(seed: u64) {
    let trace = std::env::var("FLEET_SIM_TRACE").is_ok();
    let mut rng = StdRng::seed_from_u64(seed);
    let written_ms = Arc::new(Mutex::new(HashMap::new()));
    // Odd seeds run at the defaults, where the margin is a sixth of the
    // lease (the test timing's is half).
    let timing = if seed % 2 == 1 {
        Timing::DEFAULT
    } else {
        Timing::TEST
    };
    let mut world = World {
        timing,
        clock: Arc::new(SimClock(AtomicU64::new(1_800_000_000_000))),
        store: Arc::new(InMemory::new()),
        written_ms,
        mailbox: Arc::default(),
        members: Vec::new(),
        faults_until_ms: Vec::new(),
        calm_until_ms: Vec::new(),
    };
    let first = rng.random_range(2..=3);
    for n in 0..first {
        world.join(n).await;
    }
    for step in 0..STEPS {
        world.advance(rng.random_range(0..=timing.heartbeat_ms / 2));
        world.land_slow_beats(false).await;
        world.check_safety(seed, step);
        let n = world.members.len();
        let i = rng.random_range(0..n);
        let now = world.now_ms();
        // Faults end on time (a view is never wrong for a lease or more).
        for j in 0..n {
            if world.faults_until_ms[j] != 0 && now >= world.faults_until_ms[j] {
                world.clear_faults(j);
                // A lease without faults before the next one: a view is
                // never wrong for a lease or more in a row.
                world.calm_until_ms[j] = now + timing.lease_ms;
                world.faults_until_ms[j] = 0;
            }
        }
        let roll = rng.random_range(0..100);
        if trace {
            eprintln!("step {step} t={} member {i} roll {roll}", now % 1_000_000);
        }
        match roll {
            0..=54 => world.beat(i).await,
            55..=69 => {
                let queued = world.mailbox.0.lock().len();
                if queued > 0 {
                    let pick = rng.random_range(0..queued);
                    if rng.random_range(0..5) == 0 {
                        world.mailbox.0.lock().remove(pick); // lost
                    } else {
                        world.deliver(pick).await;
                    }
                }
            }
            70..=89 if world.faults_until_ms[i] == 0 && now >= world.calm_until_ms[i] => {
                let until = now + rng.random_range(100..=timing.lease_ms / 2);
                world.faults_until_ms[i] = until;
                let layer = world.members[i].view.layer();
                match rng.random_range(0..5) {
                    4 => world.start_slow_beat(i, until).await,
                    0 => layer.puts_fail.store(true, Ordering::SeqCst),
                    1 => layer.lists_fail.store(true, Ordering::SeqCst),
                    2 => {
                        let other = rng.random_range(0..n);
                        let path = strata_server::service::names::fleet_heartbeat(
                            &world.members[other].id,
                        );
                        layer.hidden.lock().insert(path);
                    }
                    _ => world.members[i].paused_until_ms = until,
                }
            }
            90..=94
                if world.members.iter().filter(|m| m.alive).count() > 2
                    && world.members[i].slow_beat.is_none() =>
            {
                world.crash(i)
            }
            95..=99 if n < 5 => world.join(n).await,
            _ => world.beat(i).await,
        }
        world.check_safety(seed, step);
    }
    // The faults end; every member beats for a few leases; hints arrive.
    world.land_slow_beats(true).await;
    for j in 0..world.members.len() {
        world.clear_faults(j);
    }
    for _ in 0..(SETTLE_LEASES * timing.lease_ms / timing.heartbeat_ms) {
        world.advance(timing.heartbeat_ms);
        for j in 0..world.members.len() {
            world.beat(j).await;
            world.check_safety(seed, STEPS);
        }
        while !world.mailbox.0.lock().is_empty() {
            world.deliver(0).await;
        }
    }
    world.check_settled(seed);
}

#[tokio::test]
async fn fleet_views_that_are_late_partial_and_contradictory_never_serve_a_shard_twice() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            std::env::var("RUST_LOG").unwrap_or_else(|_| "off".into()),
        ))
        .with_test_writer()
        .try_init();
    let seeds: Vec<u64> = match std::env::var("FLEET_SIM_SEED") {
        Ok(seed) => vec![seed.parse().expect("FLEET_SIM_SEED is a number")],
        Err(_) => {
            let count = std::env::var("FLEET_SIM_SEEDS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(200u64);
            (0..count).collect()
        }
    };
    for seed in seeds {
        simulate(seed).await;
    }
}

/// Two members, fault-free, beaten until ownership settled.
async fn settled_pair() -> World {
    settled_pair_with(Timing::TEST).await
}

/// [`settled_pair`] with other beats and leases.
async fn settled_pair_with(timing: Timing) -> World {
    let mut world = World {
        timing,
        clock: Arc::new(SimClock(AtomicU64::new(1_800_000_000_000))),
        store: Arc::new(object_store::memory::InMemory::new()),
        written_ms: Arc::new(Mutex::new(HashMap::new())),
        mailbox: Arc::new(Mailbox::default()),
        members: Vec::new(),
        faults_until_ms: Vec::new(),
        calm_until_ms: Vec::new(),
    };
    world.join(0).await;
    world.join(1).await;
    for _ in 0..(SETTLE_LEASES * timing.lease_ms / timing.heartbeat_ms) {
        world.advance(timing.heartbeat_ms);
        world.beat(0).await;
        world.beat(1).await;
        while !world.mailbox.0.lock().is_empty() {
            world.deliver(0).await;
        }
    }
    world.check_settled(0);
    world
}

/// A survivor's claims take time on a slow store; the member's own lease
/// must not lapse meanwhile (a lapse stops every shard it serves: clients
/// see "cannot reach the store"). The beat that claims renews the lease
/// before its claims.
#[tokio::test]
async fn a_member_stays_leased_through_a_slow_claim() {
    let mut world = settled_pair().await;
    assert!(!world.members[1].streams.router().owned().is_empty());
    world.crash(0);
    // Member 1 beats until it claims member 0's shards; the first shard
    // write of a claim takes most of a lease's margin.
    let slow_ms = LEASE_MS / 2 - HEARTBEAT_MS / 2;
    for _ in 0..(4 * LEASE_MS / HEARTBEAT_MS) {
        world.members[1]
            .view
            .layer()
            .slow_claim_ms
            .store(slow_ms, Ordering::SeqCst);
        world.advance(HEARTBEAT_MS);
        world.beat(1).await;
        let layer = world.members[1].view.layer();
        assert!(
            !layer.lapsed_in_claim.load(Ordering::SeqCst),
            "member 1's lease lapsed while it claimed a shard"
        );
        if world.members[1].streams.router().owned().len() == SHARDS as usize {
            return;
        }
    }
    panic!("member 1 never claimed member 0's shards");
}

/// A member whose heartbeats do not land lets its shards go when its lease
/// lapses, and claims none while it cannot write one: a claim it could not
/// serve would only fence the member that took the shards over.
#[tokio::test]
async fn a_member_that_cannot_write_its_heartbeat_claims_nothing() {
    let mut world = settled_pair().await;
    assert!(!world.members[0].streams.router().owned().is_empty());
    world.members[0]
        .view
        .layer()
        .puts_fail
        .store(true, Ordering::SeqCst);
    let mut lapsed = false;
    for step in 0..(4 * LEASE_MS / HEARTBEAT_MS) {
        world.advance(HEARTBEAT_MS);
        world.beat(0).await;
        world.beat(1).await;
        world.check_safety(0, step as usize);
        let router = world.members[0].streams.router();
        if !router.leased() {
            lapsed = true;
            assert!(
                router.owned().is_empty(),
                "step {step}: member 0 owns shards with its lease lapsed"
            );
        }
    }
    assert!(lapsed, "member 0's lease never lapsed");
    assert_eq!(
        world.members[1].streams.router().owned().len(),
        SHARDS as usize,
        "member 1 took every shard over"
    );
}

/// A member whose lease lapsed while one of its heartbeat writes was slow
/// must not serve its old shards when that write lands: meanwhile the
/// others judged it dead and claimed them (fencing its handles, which do not
/// know it until they write). The default beat and lease, where a lease
/// renewed from a write that started just before the lapse outlives the
/// others' verdict. The member's earlier heartbeat write failed at once.
#[tokio::test]
async fn a_lease_renewed_after_a_lapse_serves_no_shard_claimed_meanwhile() {
    let timing = Timing::DEFAULT;
    let mut world = settled_pair_with(timing).await;
    assert!(!world.members[1].streams.router().owned().is_empty());
    // Member 1's next heartbeat fails at once, the one after is slow.
    world.members[1]
        .view
        .layer()
        .puts_fail
        .store(true, Ordering::SeqCst);
    world.advance(timing.heartbeat_ms);
    world.beat(0).await;
    world.beat(1).await;
    let view = world.members[1].view.clone();
    let layer = view.layer();
    layer.puts_fail.store(false, Ordering::SeqCst);
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *layer.held_heartbeat.lock() = Some(gate.clone());
    world.advance(timing.heartbeat_ms);
    world.beat(0).await;
    assert!(world.members[1].streams.router().leased());
    let fleet = world.members[1].fleet.clone();
    let slow_beat = tokio::spawn(async move { fleet.beat().await });
    for _ in 0..10_000 {
        if layer.heartbeat_waiting.load(Ordering::SeqCst) {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(layer.heartbeat_waiting.load(Ordering::SeqCst));
    // Member 0 judges member 1 dead and claims everything.
    let mut claimed = false;
    for _ in 0..(2 * timing.lease_ms / HEARTBEAT_MS) {
        world.advance(HEARTBEAT_MS);
        world.beat(0).await;
        if world.members[0].streams.router().owned().len() == SHARDS as usize {
            claimed = true;
            break;
        }
    }
    assert!(claimed, "member 0 never claimed member 1's shards");
    // The slow heartbeat lands.
    gate.add_permits(1);
    slow_beat.await.expect("the slow beat");
    world.check_safety(0, 0);
}

/// A survivor that inherits several shards in one beat reads the registry
/// once for their expiries, not once per shard: on a loaded store those
/// reads (a listing and a GET per descriptor, each time) queued in front of
/// the claims and of the first appends to the claimed streams.
#[tokio::test]
async fn a_beat_that_claims_several_shards_lists_the_registry_once() {
    let mut world = settled_pair().await;
    let inherited = world.members[0].streams.router().owned().len();
    assert!(inherited >= 2, "member 0 serves {inherited} shards");
    world.crash(0);
    // The expiry scans run in the background: let those of the settling
    // claims finish (the runtime has one thread; an in-memory store never
    // waits).
    settle_background().await;
    let view = world.members[1].view.clone();
    let layer = view.layer();
    let before = layer.registry_listings.load(Ordering::SeqCst);
    let mut claiming_beats = 0;
    for _ in 0..(4 * LEASE_MS / HEARTBEAT_MS) {
        let owned = world.members[1].streams.router().owned().len();
        world.advance(HEARTBEAT_MS);
        world.beat(1).await;
        if world.members[1].streams.router().owned().len() > owned {
            claiming_beats += 1;
        }
        if world.members[1].streams.router().owned().len() == SHARDS as usize {
            break;
        }
    }
    assert_eq!(
        world.members[1].streams.router().owned().len(),
        SHARDS as usize,
        "member 1 claimed member 0's shards"
    );
    settle_background().await;
    let listings = layer.registry_listings.load(Ordering::SeqCst) - before;
    assert!(claiming_beats >= 1);
    assert_eq!(
        listings, claiming_beats,
        "{listings} registry listings for {inherited} shards claimed in {claiming_beats} beats"
    );
}

/// Lets the tasks spawned so far run to their end (the test runtime has one
/// thread and an in-memory store never waits, so they need only turns).
async fn settle_background() {
    for _ in 0..10_000 {
        tokio::task::yield_now().await;
    }
}
