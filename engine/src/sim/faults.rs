//! A store layer that injects the failures the engine must survive, driven by
//! its own seeded generator: latency, errors before a call reaches the store,
//! ambiguous PUTs (stored, then reported failed), outages, and PUTs that are
//! still "on the wire" when their caller dies (they land later: ghost writes).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use object_store::path::Path;
use object_store::{ObjectStore, PutOptions, PutPayload, PutResult, Result};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::store::{StoreLayer, StoreOp};

/// Probabilities (0.0–1.0) and bounds of injected faults.
#[derive(Debug, Clone, Copy)]
pub struct FaultConfig {
    pub latency_ms_max: u64,
    /// PUT fails before reaching the store.
    pub put_fail: f64,
    /// PUT reaches the store, then its answer is lost (reported as an error).
    pub put_ambiguous: f64,
    pub get_fail: f64,
    pub list_fail: f64,
    /// A call stalls for up to `stall_ms_max` before it proceeds (a slow
    /// request, a GC pause): lets other owners overtake it.
    pub stall: f64,
    pub stall_ms_max: u64,
    /// Every call fails.
    pub outage: bool,
}

impl FaultConfig {
    pub fn none() -> Self {
        FaultConfig {
            latency_ms_max: 0,
            put_fail: 0.0,
            put_ambiguous: 0.0,
            get_fail: 0.0,
            list_fail: 0.0,
            stall: 0.0,
            stall_ms_max: 0,
            outage: false,
        }
    }
}

/// Counts of what was injected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    pub failed_calls: u64,
    pub ambiguous_puts: u64,
    pub puts: u64,
}

#[derive(Debug)]
pub struct Faults {
    rng: Mutex<StdRng>,
    config: Mutex<FaultConfig>,
    stats: Mutex<FaultStats>,
}

impl Faults {
    pub fn new(seed: u64, config: FaultConfig) -> Self {
        Faults {
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            config: Mutex::new(config),
            stats: Mutex::new(FaultStats::default()),
        }
    }

    pub fn set(&self, config: FaultConfig) {
        *self.config.lock() = config;
    }

    pub fn config(&self) -> FaultConfig {
        *self.config.lock()
    }

    pub fn stats(&self) -> FaultStats {
        *self.stats.lock()
    }

    fn latency(&self, config: &FaultConfig) -> Duration {
        let mut rng = self.rng.lock();
        let mut ms = if config.latency_ms_max == 0 {
            0
        } else {
            rng.random_range(0..=config.latency_ms_max)
        };
        if config.stall > 0.0 && config.stall_ms_max > 0 && rng.random_bool(config.stall.min(1.0)) {
            ms += rng.random_range(1..=config.stall_ms_max);
        }
        Duration::from_millis(ms)
    }

    fn roll(&self, p: f64) -> bool {
        p > 0.0 && self.rng.lock().random_bool(p.min(1.0))
    }

    fn injected(&self, what: &str) -> object_store::Error {
        self.stats.lock().failed_calls += 1;
        object_store::Error::Generic {
            store: "SimFaults",
            source: format!("injected fault: {what}").into(),
        }
    }
}

#[async_trait]
impl StoreLayer for Faults {
    async fn before(&self, op: StoreOp, _location: Option<&Path>) -> Result<()> {
        let config = self.config();
        let wait = self.latency(&config);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let p = match op {
            StoreOp::Put => config.put_fail,
            StoreOp::Get | StoreOp::Head => config.get_fail,
            StoreOp::List => config.list_fail,
            StoreOp::Delete | StoreOp::Copy => config.put_fail,
        };
        if config.outage || self.roll(p) {
            return Err(self.injected("call failed"));
        }
        Ok(())
    }

    async fn put_opts(
        &self,
        inner: &Arc<dyn ObjectStore>,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let config = self.config();
        let wire = self.latency(&config);
        let ambiguous = self.roll(config.put_ambiguous);
        self.stats.lock().puts += 1;
        // The write travels on its own: if the caller dies meanwhile, it still lands.
        let inner = inner.clone();
        let location = location.clone();
        let write = tokio::spawn(async move {
            if !wire.is_zero() {
                tokio::time::sleep(wire).await;
            }
            inner.put_opts(&location, payload, opts).await
        });
        let result = write.await.map_err(|e| object_store::Error::Generic {
            store: "SimFaults",
            source: Box::new(e),
        })?;
        if result.is_ok() && ambiguous {
            self.stats.lock().ambiguous_puts += 1;
            return Err(self.injected("PUT stored but its answer was lost"));
        }
        result
    }
}
