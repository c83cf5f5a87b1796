//! What engine code takes from its environment: the object store, a clock and a
//! source of randomness. Production uses the system clock and the OS CSPRNG; the
//! deterministic simulation uses tokio's paused clock and a seeded generator, so
//! a seed replays a run exactly.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use object_store::ObjectStore;
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

/// The environment an engine runs in.
#[derive(Clone)]
pub struct EngineEnv {
    pub store: Arc<dyn ObjectStore>,
    pub clock: Arc<dyn Clock>,
    pub entropy: Arc<dyn Entropy>,
}

impl EngineEnv {
    /// Real clock and OS randomness over `store`.
    pub fn production(store: Arc<dyn ObjectStore>) -> Self {
        EngineEnv {
            store,
            clock: Arc::new(SystemClock),
            entropy: Arc::new(OsEntropy),
        }
    }
}
