//! A store layer that injects the failures the engine must survive, driven by
//! its own seeded generator:
//!
//! * latency and stalls (a slow request, a GC pause), outages;
//! * PUTs that fail before reaching the store, that land and then answer an
//!   error (ambiguous), that answer an error at once and land later (a
//!   time-out whose request was still on the wire), and that land and answer
//!   "durability unknown" (a local store's failed `fsync`: the object stays
//!   *fragile* until a later PUT in its directory succeeds, and a power loss
//!   undoes it — see [`Faults::power_loss`]);
//! * PUTs still "on the wire" when their caller dies (they land anyway:
//!   ghost writes of crashed owners);
//! * DELETEs that fail, that land and then answer an error, and that answer an
//!   error and land later;
//! * LISTs that fail (per page), that come in pages read at different
//!   moments, and that are stale: they omit objects written in the last
//!   `lag_ms` and still show objects deleted in it (so a GET of a listed
//!   object may find it gone).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{
    ObjectMeta, ObjectStore, ObjectStoreExt, PutOptions, PutPayload, PutResult, Result,
};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use strata_manifest::store::DurabilityUnknown;
use tokio::time::Instant;

use crate::store::{StoreLayer, StoreOp};

/// Probabilities (0.0–1.0) and bounds of injected faults.
#[derive(Debug, Clone, Copy)]
pub struct FaultConfig {
    pub latency_ms_max: u64,
    /// PUT (and DELETE, COPY) fails before reaching the store.
    pub put_fail: f64,
    /// PUT reaches the store, then its answer is lost (reported as an error).
    pub put_ambiguous: f64,
    /// PUT answers an error at once and lands up to `late_ms_max` later.
    pub put_late: f64,
    /// PUT lands and answers "durability unknown"; the object is fragile.
    pub put_fragile: f64,
    pub get_fail: f64,
    /// Each page of a listing fails with this probability.
    pub list_fail: f64,
    /// A listing is stale (see the module header).
    pub list_stale: f64,
    /// Objects per page of a listing (0: one page).
    pub list_page: usize,
    /// How far behind a stale listing is.
    pub lag_ms: u64,
    /// DELETE removes the object, then its answer is lost.
    pub delete_ambiguous: f64,
    /// DELETE answers an error at once and removes the object later.
    pub delete_late: f64,
    pub late_ms_max: u64,
    /// A call stalls for up to `stall_ms_max` before it proceeds: lets other
    /// owners overtake it.
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
            put_late: 0.0,
            put_fragile: 0.0,
            get_fail: 0.0,
            list_fail: 0.0,
            list_stale: 0.0,
            list_page: 0,
            lag_ms: 0,
            delete_ambiguous: 0.0,
            delete_late: 0.0,
            late_ms_max: 0,
            stall: 0.0,
            stall_ms_max: 0,
            outage: false,
        }
    }

    /// Only the latency of `self`: what checks and operator tools run under.
    pub fn calm(&self) -> Self {
        FaultConfig {
            latency_ms_max: self.latency_ms_max,
            ..FaultConfig::none()
        }
    }
}

/// Counts of what was injected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    pub failed_calls: u64,
    pub ambiguous_puts: u64,
    pub late_puts: u64,
    pub fragile_puts: u64,
    pub ambiguous_deletes: u64,
    pub late_deletes: u64,
    pub stale_lists: u64,
    pub paged_lists: u64,
    /// Fragile objects a power loss undid.
    pub undone_by_power_loss: u64,
    pub puts: u64,
}

impl FaultStats {
    pub fn add(&mut self, other: &FaultStats) {
        self.failed_calls += other.failed_calls;
        self.ambiguous_puts += other.ambiguous_puts;
        self.late_puts += other.late_puts;
        self.fragile_puts += other.fragile_puts;
        self.ambiguous_deletes += other.ambiguous_deletes;
        self.late_deletes += other.late_deletes;
        self.stale_lists += other.stale_lists;
        self.paged_lists += other.paged_lists;
        self.undone_by_power_loss += other.undone_by_power_loss;
        self.puts += other.puts;
    }
}

/// What the store did recently, for stale listings and power losses.
#[derive(Debug, Default)]
struct Recent {
    written: HashMap<Path, Instant>,
    deleted: HashMap<Path, (Instant, ObjectMeta)>,
    /// Fragile objects and what a power loss restores (`None`: removal).
    fragile: BTreeMap<Path, Option<Bytes>>,
}

#[derive(Debug)]
struct State {
    rng: Mutex<StdRng>,
    config: Mutex<FaultConfig>,
    stats: Mutex<FaultStats>,
    recent: Mutex<Recent>,
}

/// The fault layer (cheap to clone: listings outlive the call that made them).
#[derive(Debug, Clone)]
pub struct Faults {
    state: Arc<State>,
}

/// The folder an object is in (everything before its last `/`).
fn folder(path: &Path) -> &str {
    let text = path.as_ref();
    text.rsplit_once('/').map_or("", |(dir, _)| dir)
}

impl State {
    fn config(&self) -> FaultConfig {
        *self.config.lock()
    }

    fn roll(&self, p: f64) -> bool {
        p > 0.0 && self.rng.lock().random_bool(p.min(1.0))
    }

    fn wait(&self, config: &FaultConfig) -> Duration {
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

    fn late(&self, config: &FaultConfig) -> Duration {
        Duration::from_millis(self.rng.lock().random_range(1..=config.late_ms_max.max(1)))
    }

    fn injected(&self, what: &str) -> object_store::Error {
        self.stats.lock().failed_calls += 1;
        object_store::Error::Generic {
            store: "SimFaults",
            source: format!("injected fault: {what}").into(),
        }
    }

    /// A PUT landed: it is no longer deleted, and (unless fragile itself) it
    /// makes the fragile objects of its folder durable, as a directory
    /// `fsync` would.
    fn landed(&self, path: &Path, fragile_before: Option<Option<Bytes>>) {
        let mut recent = self.recent.lock();
        recent.written.insert(path.clone(), Instant::now());
        recent.deleted.remove(path);
        match fragile_before {
            Some(previous) => {
                recent.fragile.entry(path.clone()).or_insert(previous);
            }
            None => {
                let dir = folder(path).to_string();
                recent.fragile.retain(|p, _| folder(p) != dir);
            }
        }
    }

    fn removed(&self, path: &Path, meta: Option<ObjectMeta>) {
        let mut recent = self.recent.lock();
        recent.written.remove(path);
        if let Some(meta) = meta {
            recent.deleted.insert(path.clone(), (Instant::now(), meta));
        }
    }
}

impl Faults {
    pub fn new(seed: u64, config: FaultConfig) -> Self {
        Faults {
            state: Arc::new(State {
                rng: Mutex::new(StdRng::seed_from_u64(seed)),
                config: Mutex::new(config),
                stats: Mutex::new(FaultStats::default()),
                recent: Mutex::new(Recent::default()),
            }),
        }
    }

    pub fn set(&self, config: FaultConfig) {
        *self.state.config.lock() = config;
    }

    pub fn config(&self) -> FaultConfig {
        self.state.config()
    }

    pub fn stats(&self) -> FaultStats {
        *self.state.stats.lock()
    }

    /// Fragile objects right now.
    pub fn fragile(&self) -> usize {
        self.state.recent.lock().fragile.len()
    }

    /// A power loss of the machine the store's disk is on: every fragile
    /// object is undone in `clean` (the store below every layer): removed, or
    /// restored to what it replaced. Returns how many.
    pub async fn power_loss(&self, clean: &Arc<dyn ObjectStore>) -> Result<u64> {
        let fragile = std::mem::take(&mut self.state.recent.lock().fragile);
        let undone = fragile.len() as u64;
        for (path, previous) in fragile {
            match previous {
                Some(bytes) => clean.put(&path, PutPayload::from(bytes)).await.map(drop)?,
                None => match clean.delete(&path).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                    Err(e) => return Err(e),
                },
            }
        }
        self.state.stats.lock().undone_by_power_loss += undone;
        Ok(undone)
    }
}

#[async_trait]
impl StoreLayer for Faults {
    async fn before(&self, op: StoreOp, _location: Option<&Path>) -> Result<()> {
        let state = &self.state;
        let config = state.config();
        let wait = state.wait(&config);
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        let p = match op {
            StoreOp::Put | StoreOp::Delete | StoreOp::Copy => config.put_fail,
            StoreOp::Get | StoreOp::Head => config.get_fail,
            // Listings fail per page (see `list`).
            StoreOp::List => 0.0,
        };
        if config.outage || state.roll(p) {
            return Err(state.injected("call failed"));
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
        let state = self.state.clone();
        let config = state.config();
        let wire = state.wait(&config);
        let late = state.roll(config.put_late);
        let ambiguous = !late && state.roll(config.put_ambiguous);
        let fragile = !late && !ambiguous && state.roll(config.put_fragile);
        state.stats.lock().puts += 1;
        let fragile_before = if fragile {
            let previous = match inner.get(location).await {
                Ok(got) => got.bytes().await.ok(),
                Err(_) => None,
            };
            Some(previous)
        } else {
            None
        };
        // The write travels on its own: if the caller dies meanwhile, it still lands.
        let inner = inner.clone();
        let path = location.clone();
        let landing = state.clone();
        let wire = if late {
            wire + state.late(&config)
        } else {
            wire
        };
        let write = tokio::spawn(async move {
            if !wire.is_zero() {
                tokio::time::sleep(wire).await;
            }
            let result = inner.put_opts(&path, payload, opts).await;
            if result.is_ok() {
                landing.landed(&path, fragile_before);
            }
            result
        });
        if late {
            state.stats.lock().late_puts += 1;
            return Err(state.injected("PUT timed out (it lands later)"));
        }
        let result = write.await.map_err(|e| object_store::Error::Generic {
            store: "SimFaults",
            source: Box::new(e),
        })?;
        if result.is_ok() && ambiguous {
            state.stats.lock().ambiguous_puts += 1;
            return Err(state.injected("PUT stored but its answer was lost"));
        }
        if result.is_ok() && fragile {
            state.stats.lock().fragile_puts += 1;
            return Err(DurabilityUnknown {
                path: location.to_string(),
                reason: "injected fault: fsync failed after publishing".into(),
            }
            .into_store_error("SimFaults"));
        }
        result
    }

    async fn delete(&self, inner: &Arc<dyn ObjectStore>, location: &Path) -> Result<()> {
        let state = self.state.clone();
        let config = state.config();
        let meta = inner.head(location).await.ok();
        if state.roll(config.delete_late) {
            state.stats.lock().late_deletes += 1;
            let wait = state.late(&config);
            let (inner, path, landing) = (inner.clone(), location.clone(), state.clone());
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                if inner.delete(&path).await.is_ok() {
                    landing.removed(&path, meta);
                }
            });
            return Err(state.injected("DELETE timed out (it lands later)"));
        }
        inner.delete(location).await?;
        state.removed(location, meta);
        if state.roll(config.delete_ambiguous) {
            state.stats.lock().ambiguous_deletes += 1;
            return Err(state.injected("DELETE done but its answer was lost"));
        }
        Ok(())
    }

    fn list(
        &self,
        inner: &Arc<dyn ObjectStore>,
        prefix: Option<&Path>,
        offset: Option<&Path>,
    ) -> BoxStream<'static, Result<ObjectMeta>> {
        let state = self.state.clone();
        let config = state.config();
        let stale = state.roll(config.list_stale);
        let paged = config.list_page > 0;
        {
            let mut stats = state.stats.lock();
            stats.stale_lists += u64::from(stale);
            stats.paged_lists += u64::from(paged);
        }
        let pages = Pager {
            inner: inner.clone(),
            state,
            prefix: prefix.cloned(),
            start_after: offset.cloned(),
            after: offset.cloned(),
            page: if paged { config.list_page } else { usize::MAX },
            stale,
            lag: Duration::from_millis(config.lag_ms),
            done: false,
        };
        futures::stream::unfold(pages, |mut pages| async move {
            let page = pages.next_page().await;
            page.map(|items| (futures::stream::iter(items), pages))
        })
        .flatten()
        .boxed()
    }
}

/// A listing read page by page, each page at the moment it is asked for.
struct Pager {
    inner: Arc<dyn ObjectStore>,
    state: Arc<State>,
    prefix: Option<Path>,
    /// The listing's own offset (ghosts of deleted objects respect it too).
    start_after: Option<Path>,
    /// Where the next page starts.
    after: Option<Path>,
    page: usize,
    stale: bool,
    lag: Duration,
    done: bool,
}

impl Pager {
    async fn next_page(&mut self) -> Option<Vec<Result<ObjectMeta>>> {
        if self.done {
            return None;
        }
        let config = self.state.config();
        if config.outage || self.state.roll(config.list_fail) {
            self.done = true;
            return Some(vec![Err(self.state.injected("LIST page failed"))]);
        }
        let listing = match &self.after {
            Some(after) => self.inner.list_with_offset(self.prefix.as_ref(), after),
            None => self.inner.list(self.prefix.as_ref()),
        };
        let mut metas: Vec<ObjectMeta> = match listing.try_collect().await {
            Ok(metas) => metas,
            Err(e) => {
                self.done = true;
                return Some(vec![Err(e)]);
            }
        };
        metas.sort_by(|a, b| a.location.cmp(&b.location));
        metas.truncate(self.page);
        self.done = metas.len() < self.page;
        self.after = metas.last().map(|m| m.location.clone());
        if self.stale {
            let now = Instant::now();
            let recent = self.state.recent.lock();
            metas.retain(|m| {
                recent
                    .written
                    .get(&m.location)
                    .is_none_or(|at| now.duration_since(*at) > self.lag)
            });
            if self.done {
                // Deleted objects a stale listing still shows, after the rest.
                let mut ghosts: Vec<ObjectMeta> = recent
                    .deleted
                    .iter()
                    .filter(|(path, (at, _))| {
                        now.duration_since(*at) <= self.lag
                            && self.prefix.as_ref().is_none_or(|p| path.prefix_matches(p))
                            && self.start_after.as_ref().is_none_or(|o| *path > o)
                    })
                    .map(|(_, (_, meta))| meta.clone())
                    .collect();
                ghosts.sort_by(|a, b| a.location.cmp(&b.location));
                metas.extend(ghosts);
            }
        }
        Some(metas.into_iter().map(Ok).collect())
    }
}
