//! What engine code takes from its environment: the object store, a clock and a
//! source of randomness. Production uses the system clock and the OS CSPRNG; the
//! deterministic simulation uses tokio's paused clock and a seeded generator, so
//! a seed replays a run exactly.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use object_store::ObjectStore;

use crate::ids::InstanceId;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

/// Wall-clock milliseconds since the Unix epoch (record timestamps, ages).
pub trait Clock: Send + Sync + 'static {
    fn now_ms(&self) -> u64;
}

/// The system's real-time clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    // The one reader of the wall clock (clippy.toml bans it elsewhere).
    #[allow(clippy::disallowed_methods)]
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }
}

/// A clock that follows tokio's (possibly paused) time from a fixed start.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    start_ms: u64,
    start: tokio::time::Instant,
}

impl TokioClock {
    pub fn new(start_ms: u64) -> Self {
        TokioClock {
            start_ms,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        self.start_ms + self.start.elapsed().as_millis() as u64
    }
}

/// Random bytes: nonces, write ids, instance ids.
pub trait Entropy: Send + Sync + 'static {
    fn fill(&self, out: &mut [u8]);

    fn bytes16(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        self.fill(&mut out);
        out
    }

    fn bytes12(&self) -> [u8; 12] {
        let mut out = [0u8; 12];
        self.fill(&mut out);
        out
    }
}

/// The thread-local CSPRNG seeded from the OS.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsEntropy;

impl Entropy for OsEntropy {
    // The one reader of the OS's entropy (clippy.toml bans it elsewhere).
    #[allow(clippy::disallowed_methods)]
    fn fill(&self, out: &mut [u8]) {
        rand::rng().fill_bytes(out);
    }
}

/// A seeded generator (simulation and tests only: predictable by design).
#[derive(Debug)]
pub struct SeededEntropy(Mutex<StdRng>);

impl SeededEntropy {
    pub fn new(seed: u64) -> Self {
        SeededEntropy(Mutex::new(StdRng::seed_from_u64(seed)))
    }
}

impl Entropy for SeededEntropy {
    fn fill(&self, out: &mut [u8]) {
        self.0.lock().fill_bytes(out);
    }
}

/// A named place in the engine where a process may die with effects half
/// done. The simulation aims crashes at these points (see [`CrashPoints`]);
/// production never stops at one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CrashPoint {
    /// A seal's segment is in the store; its index run is not.
    SealAfterSegment,
    /// A seal's index run is in the store; no manifest lists it.
    SealAfterRun,
    /// A seal's manifest landed; the owner has not swapped its tiers.
    SealAfterManifest,
    /// Part of a garbage collection batch is deleted, the rest is not.
    GcMidBatch,
    /// An opener's claim (epoch bump) landed; it has not walked the WAL.
    OpenAfterClaim,
    /// An opener walked part of the WAL.
    OpenMidWalk,
    /// An opener walked the WAL; its fence is not down.
    OpenBeforeFence,
}

impl CrashPoint {
    pub const ALL: [CrashPoint; 7] = [
        CrashPoint::SealAfterSegment,
        CrashPoint::SealAfterRun,
        CrashPoint::SealAfterManifest,
        CrashPoint::GcMidBatch,
        CrashPoint::OpenAfterClaim,
        CrashPoint::OpenMidWalk,
        CrashPoint::OpenBeforeFence,
    ];

    pub fn name(self) -> &'static str {
        match self {
            CrashPoint::SealAfterSegment => "seal: after the segment PUT",
            CrashPoint::SealAfterRun => "seal: after the run PUT",
            CrashPoint::SealAfterManifest => "seal: after the manifest CAS, before the swap",
            CrashPoint::GcMidBatch => "gc: in the middle of a batch",
            CrashPoint::OpenAfterClaim => "open: between claim and walk",
            CrashPoint::OpenMidWalk => "open: during the WAL walk",
            CrashPoint::OpenBeforeFence => "open: between walk and fence",
        }
    }
}

/// Decides whether the process of `instance` dies at a crash point. When it
/// answers `true`, the engine task that reached the point never continues
/// (it waits forever); the caller of [`CrashPoints`] is expected to stop the
/// whole process (every task of that owner) soon after.
pub trait CrashPoints: Send + Sync + 'static {
    fn crash_here(&self, point: CrashPoint, instance: &InstanceId) -> bool;
}

/// The environment an engine runs in.
#[derive(Clone)]
pub struct EngineEnv {
    pub store: Arc<dyn ObjectStore>,
    pub clock: Arc<dyn Clock>,
    pub entropy: Arc<dyn Entropy>,
    /// Where the simulation may stop a process (`None`: never).
    pub crash_points: Option<Arc<dyn CrashPoints>>,
}

impl EngineEnv {
    /// Real clock and OS randomness over `store`.
    pub fn production(store: Arc<dyn ObjectStore>) -> Self {
        EngineEnv {
            store,
            clock: Arc::new(SystemClock),
            entropy: Arc::new(OsEntropy),
            crash_points: None,
        }
    }

    /// Passes crash point `point` for `instance`: returns at once unless
    /// the simulation stops the process here.
    pub(crate) async fn reach(&self, point: CrashPoint, instance: &InstanceId) {
        if let Some(points) = &self.crash_points {
            if points.crash_here(point, instance) {
                std::future::pending::<()>().await;
            }
        }
    }
}
