//! Crashes aimed at the engine's crash points ([`CrashPoint`]): the plan
//! decides, with its own seeded generator, whether the owner that reached a
//! point dies there, counts every point reached and every crash taken (the
//! coverage table of the report), and tells the world which owners died so it
//! stops all their tasks.

use std::collections::{BTreeMap, HashSet};

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use crate::env::{CrashPoint, CrashPoints};
use crate::ids::InstanceId;

/// How often each crash point was reached and how often a crash was taken
/// there.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PointCount {
    pub reached: u64,
    pub crashed: u64,
}

/// Per crash point, its counts.
pub type Coverage = BTreeMap<CrashPoint, PointCount>;

#[derive(Debug)]
struct Plan {
    rng: StdRng,
    /// Probability of a crash at a point reached by a crashable owner.
    p: f64,
    enabled: bool,
    /// Owners the plan may stop (the simulation's processes).
    crashable: HashSet<[u8; 16]>,
    coverage: Coverage,
    /// Owners stopped at a point and not yet taken down by the world.
    dead: Vec<([u8; 16], CrashPoint)>,
    /// Every owner ever stopped at a point.
    stopped: HashSet<[u8; 16]>,
}

#[derive(Debug)]
pub struct CrashPlan {
    plan: Mutex<Plan>,
    /// Bumped on every crash taken.
    crashes: watch::Sender<u64>,
}

impl CrashPlan {
    pub fn new(seed: u64, p: f64) -> Self {
        CrashPlan {
            plan: Mutex::new(Plan {
                rng: StdRng::seed_from_u64(seed),
                p,
                enabled: true,
                crashable: HashSet::new(),
                coverage: Coverage::new(),
                dead: Vec::new(),
                stopped: HashSet::new(),
            }),
            crashes: watch::Sender::new(0),
        }
    }

    /// Lets the plan stop `instance` from now on.
    pub fn add_owner(&self, instance: &InstanceId) {
        self.plan.lock().crashable.insert(instance.0);
    }

    pub fn set_enabled(&self, enabled: bool) {
        self.plan.lock().enabled = enabled;
    }

    /// Owners stopped at a crash point since the last call, with the point.
    pub fn take_dead(&self) -> Vec<(InstanceId, CrashPoint)> {
        std::mem::take(&mut self.plan.lock().dead)
            .into_iter()
            .map(|(id, point)| (InstanceId(id), point))
            .collect()
    }

    /// Forgets that `instance` died (its open was abandoned there already).
    pub fn forget(&self, instance: &InstanceId) {
        self.plan.lock().dead.retain(|(id, _)| *id != instance.0);
    }

    pub fn coverage(&self) -> Coverage {
        self.plan.lock().coverage.clone()
    }

    fn is_dead(&self, instance: &InstanceId) -> bool {
        self.plan.lock().stopped.contains(&instance.0)
    }

    /// Returns once `instance` has been stopped at a crash point (pending
    /// forever otherwise): raced against an open, it drops the open there.
    pub async fn died(&self, instance: InstanceId) {
        let mut changes = self.crashes.subscribe();
        loop {
            if self.is_dead(&instance) {
                return;
            }
            if changes.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }
}

impl CrashPoints for CrashPlan {
    fn crash_here(&self, point: CrashPoint, instance: &InstanceId) -> bool {
        let mut plan = self.plan.lock();
        plan.coverage.entry(point).or_default().reached += 1;
        if !plan.enabled || !plan.crashable.contains(&instance.0) {
            return false;
        }
        let p = plan.p;
        if !plan.rng.random_bool(p.clamp(0.0, 1.0)) {
            return false;
        }
        plan.coverage.entry(point).or_default().crashed += 1;
        plan.dead.push((instance.0, point));
        plan.stopped.insert(instance.0);
        drop(plan);
        self.crashes.send_modify(|n| *n += 1);
        true
    }
}
