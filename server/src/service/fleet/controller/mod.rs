//! The fleet controller: one task per fleet member that beats, watches the
//! live set, and claims and releases shards as placement says.
//!
//! Every beat (`heartbeat_ms` apart, give or take a tenth at random; sooner
//! or a little later when a member can be judged dead then: see `run`):
//!
//! 1. LIST `fleet/` and read the heartbeats `membership` asks for.
//! 2. If this member's lease lapsed (its heartbeat writes fail), every owned
//!    shard is stopped.
//! 3. If the listing succeeded, compare each shard's placement owner with
//!    its slot: claim what is ours (at most [`CLAIMS_PER_BEAT_MAX`] a beat)
//!    once its holder — the instance its manifest names — is none, dead, or
//!    has released it (its hint says so, or two of its later beats show it
//!    without the shard: a live holder is never claimed from on a timer, as
//!    it may still answer from the shard); release what is not ours (flush,
//!    stop, then tell the new owner); point the rest at their owners.
//!    A beat with shards to claim PUTs its heartbeat once before the claims
//!    too (releases done, claims not begun), so the claims start on a fresh
//!    lease; if that PUT fails it claims nothing. It reads the holders
//!    meanwhile, and only then LISTs `fleet/` again: a holder is judged by a
//!    listing that started after its claim was read, so a member that
//!    looked dead at the beat's first listing but came back and claimed
//!    since is seen live (its claim followed a heartbeat that landed).
//!    While the claims run, the heartbeat is written every beat (claims on
//!    a slow store can outlast what the lease leaves).
//! 4. PUT this member's heartbeat, whose `owned` set is what it serves now. A
//!    PUT that succeeded renews the member's own lease to *its start* +
//!    `lease_ms` − [`LEASE_MARGIN_MS`]: no other member can judge this one
//!    dead before then (they need a full lease of listings without a change,
//!    and this PUT landed after it started), so answering from owned shards
//!    until then never serves data another owner changed. A PUT that lands
//!    after the lease lapsed renews nothing until every owned shard is let
//!    go: meanwhile the others may have claimed them.
//!
//! Fencing, not this controller, decides ownership: a claim bumps the shard's
//! epoch and fences the previous owner, whose next write fails. The
//! controller only makes that rare and polite. Draining (`drain`) marks the
//! heartbeat `draining` (placement then gives this member nothing while
//! another serves), releases the shards one at a time, each to its new owner
//! who is told at once, and finally deletes the heartbeat.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use parking_lot::Mutex;
use strata_engine::{ClaimRead, Clock, EngineError, InstanceId, Shard};

mod moves;

use super::claim::Claims;
use super::heartbeat::{owned_bitmap, Heartbeat, Load, MemberState, HEARTBEAT_FORMAT};
pub use super::io::{list_heartbeats, read_heartbeat};
use super::membership::{Listed, Member, Membership, OwnWrite, Sighting};
use super::placement::{owner_of, Candidate};
use crate::service::names;
use crate::service::routing::{Owner, Renewal, ShardIndex, ShardRouter, Slot};
use crate::service::Streams;

/// How much earlier than the others could judge it dead a member stops
/// answering from its shards (clock rate differences, scheduling).
pub const LEASE_MARGIN_MS: u64 = 1_000;
/// Longest a shard claim (open and WAL replay) may take before it is given up
/// for this beat.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest a release (flush and stop) may take.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);
/// The shard of a hint that names no released shard (it only asks the
/// receiver to read this member's heartbeat again).
const ANNOUNCE_ONLY: ShardIndex = ShardIndex(u32::MAX);
/// A heartbeat not renewed for this many leases is deleted.
const DEAD_LEASES: u64 = 10;
/// Most dead heartbeats deleted in one beat.
const DELETES_PER_BEAT_MAX: usize = 4;
/// Most shards claimed in one beat (so that the heartbeat after them is not
/// delayed past the lease by a burst of claims).
const CLAIMS_PER_BEAT_MAX: usize = 8;
/// Two beats start at least `heartbeat_ms` / this apart (a beat taken
/// early for a verdict, after a listing that failed, cannot spin).
const BEATS_APART_MIN_DIVISOR: u32 = 4;
/// Regular beats are `heartbeat_ms` apart, give or take a
/// `1 / BEAT_JITTER_DIVISOR`th of it.
const BEAT_JITTER_DIVISOR: u64 = 10;
/// Most holders (manifests) a beat reads before its claims, and how many at
/// once.
const HOLDER_READS_PER_BEAT_MAX: usize = 2 * CLAIMS_PER_BEAT_MAX;
const HOLDER_READS_IN_FLIGHT_MAX: usize = CLAIMS_PER_BEAT_MAX;
/// Most heartbeats read in one beat.
const READS_PER_BEAT_MAX: usize = 64;

/// The fleet settings of one member.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    pub advertise_url: String,
    pub heartbeat_ms: u64,
    pub lease_ms: u64,
    pub weight: u32,
    /// How often a known member's heartbeat is read again. Placement needs
    /// only what never changes for an instance (URL, weight) and its state,
    /// whose one change (to draining) the member announces by hints to every
    /// live member; so by default (`u64::MAX`) a heartbeat is read once, and
    /// the steady cost is one PUT and one LIST per beat.
    pub refresh_ms: u64,
}

impl FleetConfig {
    pub fn new(advertise_url: String, heartbeat_ms: u64, lease_ms: u64) -> Self {
        FleetConfig {
            advertise_url,
            heartbeat_ms,
            lease_ms,
            weight: 1,
            refresh_ms: u64::MAX,
        }
    }
}

pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Reads a shard's manifest (who holds it) and opens (claims) it from that
/// read: the engine's `ClaimRead::load` and `Shard::open_from` with this
/// server's environment and settings.
pub trait ShardOpener: Send + Sync {
    fn read(&self, index: ShardIndex) -> BoxFuture<Result<ClaimRead, EngineError>>;
    fn open(&self, index: ShardIndex, read: ClaimRead) -> BoxFuture<Result<Shard, EngineError>>;
}

/// Tells another member to look at the fleet again now (it re-reads this
/// member's heartbeat and claims what it should). Best effort: a lost hint
/// only costs the hand-off grace.
pub trait Peers: Send + Sync {
    /// Tells the member at `url` that `from` released `shards` to it (each
    /// with the epoch of the claim it released).
    fn hint(&self, url: &str, from: InstanceId, shards: Vec<(ShardIndex, u64)>) -> BoxFuture<()>;
}

/// A shard released to another member: which, and the epoch of the claim
/// released.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    pub shard: ShardIndex,
    pub epoch: u64,
}

/// What the controller knows between beats.
struct View {
    membership: Membership,
    state: MemberState,
    beat: u64,
    /// The claim rule's memory (hints, holders waited for).
    claims: Claims,
    store_reachable: bool,
    last_live: Vec<Member>,
    /// Append count at the last beat (for the rate in the load vector).
    appends_at_beat: (u64, u64),
    stopped: bool,
}

/// A fleet member's controller; see the module header.
pub struct Fleet {
    me: InstanceId,
    started_ms: u64,
    config: FleetConfig,
    store: Arc<dyn ObjectStore>,
    clock: Arc<dyn Clock>,
    streams: Arc<Streams>,
    opener: Arc<dyn ShardOpener>,
    peers: Arc<dyn Peers>,
    view: Mutex<View>,
    /// One beat at a time (the loop, hints and the drain share it).
    beating: tokio::sync::Mutex<()>,
}

/// One shard's row in [`Fleet::shard_owners`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardOwner {
    pub shard: ShardIndex,
    pub owner: Option<InstanceId>,
    pub here: bool,
}

impl Fleet {
    pub fn new(
        me: InstanceId,
        config: FleetConfig,
        store: Arc<dyn ObjectStore>,
        streams: Arc<Streams>,
        opener: Arc<dyn ShardOpener>,
        peers: Arc<dyn Peers>,
    ) -> Arc<Fleet> {
        let clock = streams.clock();
        let now_ms = clock.now_ms();
        Arc::new(Fleet {
            me,
            started_ms: now_ms,
            view: Mutex::new(View {
                membership: Membership::new(config.lease_ms, config.refresh_ms),
                state: MemberState::Serving,
                beat: 0,
                claims: Claims::default(),
                store_reachable: true,
                last_live: Vec::new(),
                appends_at_beat: (now_ms, 0),
                stopped: false,
            }),
            config,
            store,
            clock,
            streams,
            opener,
            peers,
            beating: tokio::sync::Mutex::new(()),
        })
    }

    pub fn instance(&self) -> InstanceId {
        self.me
    }

    /// How other members and clients reach this one.
    pub fn url(&self) -> &str {
        &self.config.advertise_url
    }

    /// Whether this member is draining (it claims nothing more).
    pub fn draining(&self) -> bool {
        self.view.lock().state == MemberState::Draining
    }

    fn router(&self) -> &ShardRouter {
        self.streams.router()
    }

    /// Beats every `heartbeat_ms` until [`Fleet::drain`] or [`Fleet::stop`],
    /// and sooner when a member could be judged dead before the next beat
    /// (`Membership::next_verdict_ms`): a dead member's shards move up to a
    /// beat earlier, at no cost in a steady fleet. Every beat starts the
    /// interval to the next one again.
    pub async fn run(self: Arc<Self>) {
        let mut next_beat = tokio::time::Instant::now();
        let mut earliest = next_beat;
        loop {
            let wake = self.wake_for_verdict(earliest, next_beat);
            tokio::time::sleep_until(wake).await;
            if self.view.lock().stopped {
                return;
            }
            let started = tokio::time::Instant::now();
            next_beat = started + self.beat_interval();
            earliest = started + self.beats_apart_min();
            self.beat().await;
        }
    }

    /// The time to the next regular beat: `heartbeat_ms`, give or take a
    /// tenth at random, so that members' beats do not stay in step (a
    /// listing that always runs just before another member's heartbeat
    /// write sees each write a beat late) and this member's own writes
    /// land at every fraction of a second ([`StoreClock`] learns the
    /// store's clock from the writes that land just after a whole second).
    ///
    /// [`StoreClock`]: super::store_clock::StoreClock
    fn beat_interval(&self) -> Duration {
        let interval_ms = self.config.heartbeat_ms;
        let spread_ms = interval_ms / BEAT_JITTER_DIVISOR;
        let mut draw = [0u8; 8];
        draw.copy_from_slice(&self.streams.random_bytes16()[..8]);
        let offset_ms = u64::from_le_bytes(draw) % (2 * spread_ms + 1);
        Duration::from_millis(interval_ms - spread_ms + offset_ms)
    }

    fn beats_apart_min(&self) -> Duration {
        Duration::from_millis(self.config.heartbeat_ms / u64::from(BEATS_APART_MIN_DIVISOR))
    }

    /// When to beat next: at `next_beat`, or just after a member live at
    /// the last listing could first be judged dead (its verdict time) — no
    /// earlier than `earliest`, and, when that time falls a little after
    /// `next_beat`, the regular beat waits for it (by less than
    /// [`BEATS_APART_MIN_DIVISOR`]ths of a beat, well inside the lease
    /// margin) instead of running just before it and pushing the verdict
    /// beat back to `earliest` after it.
    fn wake_for_verdict(
        &self,
        earliest: tokio::time::Instant,
        next_beat: tokio::time::Instant,
    ) -> tokio::time::Instant {
        let Some(verdict_ms) = self.view.lock().membership.next_verdict_ms() else {
            return next_beat;
        };
        let now_ms = self.clock.now_ms();
        let verdict = tokio::time::Instant::now()
            + Duration::from_millis(verdict_ms.saturating_sub(now_ms) + 1);
        if verdict < next_beat {
            verdict.max(earliest).min(next_beat)
        } else if verdict < next_beat + self.beats_apart_min() {
            verdict
        } else {
            next_beat
        }
    }

    /// A hint from member `from` that it released `shards`: read its
    /// heartbeat again and beat now (answered once this member has claimed
    /// what it should). A hint from a member the last listing did not show is
    /// ignored (hints cost a beat; only members may ask for one).
    pub async fn hinted(&self, from: InstanceId, shards: Vec<(ShardIndex, u64)>) {
        {
            let mut view = self.view.lock();
            if !view.membership.knows(&from) {
                return;
            }
            view.membership.reread(&from);
            let count = self.router().count();
            view.claims
                .released(from, shards.into_iter().filter(|(i, _)| i.0 < count));
        }
        self.beat().await;
    }

    /// One beat; see the module header.
    pub async fn beat(&self) {
        let hints = self.beat_releasing(usize::MAX).await;
        // Hints go out in the background: a receiver answers after its own
        // claims, and this member's next beat must not wait for that.
        let (peers, me) = (self.peers.clone(), self.me);
        tokio::spawn(async move { deliver_hints(&*peers, me, hints).await });
    }

    /// One beat that releases at most `releases_max` shards; answers the
    /// members to hint (sent by the caller, outside the beat, so that two
    /// members handing shards to each other never wait on each other).
    async fn beat_releasing(&self, releases_max: usize) -> Vec<(Released, Owner)> {
        let _one = self.beating.lock().await;
        if self.view.lock().stopped {
            return Vec::new();
        }
        let listed = self.refresh_membership().await;
        if !self.router().leased() && !self.router().owned().is_empty() {
            self.release_all("this instance's lease lapsed (store unreachable)")
                .await;
        }
        let hints = if listed {
            self.place(releases_max).await
        } else {
            Vec::new()
        };
        // The heartbeat goes out after the beat's claims and releases, so its
        // `owned` set is what this member serves (the claim rule of the others
        // reads it).
        let started_ms = self.clock.now_ms();
        let wrote = self.write_heartbeat().await;
        tracing::debug!(
            started_ms,
            ended_ms = self.clock.now_ms(),
            wrote,
            "fleet: heartbeat written"
        );
        if wrote {
            self.renew_lease(started_ms).await;
        }
        self.note_reachability(wrote && listed);
        hints
    }

    /// Renews the lease from a heartbeat write that started at
    /// `put_started_ms`. If the lease lapsed before the write landed, the
    /// others may have judged this member dead meanwhile and claimed its
    /// shards (a handle learns it is fenced only when it writes): every
    /// shard owned here is let go before the new lease starts.
    async fn renew_lease(&self, put_started_ms: u64) {
        let until_ms = put_started_ms + self.config.lease_ms.saturating_sub(LEASE_MARGIN_MS);
        if self.router().renew_lease(until_ms) == Renewal::AfterLapse {
            self.release_all("this instance's lease lapsed before its heartbeat landed")
                .await;
            self.router().restart_lease(until_ms);
        }
    }

    async fn send_hints(&self, hints: Vec<(Released, Owner)>) {
        deliver_hints(&*self.peers, self.me, hints).await;
    }

    fn note_reachability(&self, reachable: bool) {
        let mut view = self.view.lock();
        if view.store_reachable != reachable {
            if reachable {
                tracing::info!("fleet: the store is reachable again; claiming shards");
            } else {
                tracing::warn!(
                    "fleet: cannot reach the store; not claiming shards until it answers"
                );
            }
            view.store_reachable = reachable;
        }
    }

    /// The heartbeat to write now: the next beat, with this beat's load.
    fn heartbeat(&self) -> Heartbeat {
        let now_ms = self.clock.now_ms();
        let owned = self.router().owned();
        let queue_depth = owned.iter().map(|(_, s)| s.queued() as u64).sum();
        let appends = self.streams.appends_acknowledged();
        let mut view = self.view.lock();
        view.beat += 1;
        let (then_ms, then_appends) = view.appends_at_beat;
        let elapsed_ms = now_ms.saturating_sub(then_ms).max(1);
        let append_rate = appends.saturating_sub(then_appends) * 1000 / elapsed_ms;
        view.appends_at_beat = (now_ms, appends);
        let load = Load {
            shards_owned: owned.len() as u32,
            append_rate,
            queue_depth,
        };
        self.heartbeat_of(&view, now_ms, load, &owned)
    }

    /// This member's heartbeat as `view` has it, written at `written_ms`.
    fn heartbeat_of(
        &self,
        view: &View,
        written_ms: u64,
        load: Load,
        owned: &[(ShardIndex, Shard)],
    ) -> Heartbeat {
        Heartbeat {
            format: HEARTBEAT_FORMAT,
            instance: self.me.to_string(),
            url: self.config.advertise_url.clone(),
            started_ms: self.started_ms,
            beat: view.beat,
            written_ms,
            state: view.state,
            weight: self.config.weight,
            load,
            owned: owned_bitmap(owned.iter().map(|(index, _)| index.0)),
        }
    }

    async fn write_heartbeat(&self) -> bool {
        let payload = PutPayload::from_bytes(self.heartbeat().encode());
        let path = names::fleet_heartbeat(&self.me);
        let bound = Duration::from_millis(self.config.lease_ms / 2);
        let written = match tokio::time::timeout(bound, self.store.put(&path, payload)).await {
            Ok(Ok(result)) => Some(result.e_tag),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "fleet: heartbeat write failed");
                None
            }
            Err(_) => {
                tracing::warn!(
                    bound_ms = bound.as_millis() as u64,
                    "fleet: heartbeat write timed out"
                );
                None
            }
        };
        let ended_ms = self.clock.now_ms();
        let wrote = written.is_some();
        let own = written.flatten().map(|e_tag| OwnWrite { e_tag, ended_ms });
        self.view.lock().membership.wrote_own(own);
        wrote
    }

    /// Lists `fleet/` and reads the heartbeats due; false when the listing
    /// failed (the view is then left as it was).
    async fn refresh_membership(&self) -> bool {
        let bound = Duration::from_millis(self.config.lease_ms / 2);
        let started_ms = self.clock.now_ms();
        let listing = match tokio::time::timeout(bound, list_heartbeats(&self.store)).await {
            Ok(Ok(listing)) => listing,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "fleet: listing the members failed");
                return false;
            }
            Err(_) => {
                tracing::warn!("fleet: listing the members timed out");
                return false;
            }
        };
        let (own, others): (Vec<Sighting>, Vec<Sighting>) =
            listing.into_iter().partition(|s| s.instance == self.me);
        let at = Listed {
            started_ms,
            ended_ms: self.clock.now_ms(),
        };
        tracing::debug!(
            started_ms = at.started_ms,
            ended_ms = at.ended_ms,
            members = others.len(),
            "fleet: listed the members"
        );
        let due = {
            let mut view = self.view.lock();
            if let Some(own) = own.first() {
                view.membership.saw_own(own);
            }
            view.membership.observe(at, &others)
        };
        self.delete_long_dead().await;
        for instance in due.into_iter().take(READS_PER_BEAT_MAX) {
            let heartbeat = match tokio::time::timeout(
                bound,
                read_heartbeat(&self.store, &instance),
            )
            .await
            {
                Ok(Ok(hb)) => hb,
                Ok(Err(e)) => {
                    tracing::warn!(%instance, error = %e, "fleet: a member's heartbeat is unreadable");
                    None
                }
                Err(_) => continue,
            };
            self.view
                .lock()
                .membership
                .read(instance, heartbeat, self.clock.now_ms());
        }
        true
    }

    /// Deletes heartbeats dead for [`DEAD_LEASES`] leases (left by processes
    /// that were killed), a few per beat, so that listings stay short. A
    /// member paused that long writes its heartbeat again on its next beat
    /// and is seen as new.
    async fn delete_long_dead(&self) {
        let dead_ms = self.config.lease_ms.saturating_mul(DEAD_LEASES);
        let dead = self.view.lock().membership.long_dead(
            self.clock.now_ms(),
            dead_ms,
            DELETES_PER_BEAT_MAX,
        );
        for instance in dead {
            let path = names::fleet_heartbeat(&instance);
            match self.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                    tracing::info!(%instance, "fleet: deleted the heartbeat of a member dead for {DEAD_LEASES} leases");
                }
                Err(e) => {
                    tracing::debug!(%instance, error = %e, "fleet: deleting a dead heartbeat failed")
                }
            }
        }
    }

    /// The live set as placement sees it: the others this member knows, and
    /// itself.
    fn live(&self) -> Vec<Member> {
        let now_ms = self.clock.now_ms();
        let heartbeat = self.heartbeat_preview();
        let mut view = self.view.lock();
        let mut live = view.membership.live(now_ms);
        live.push(Member {
            instance: self.me,
            url: self.config.advertise_url.clone(),
            weight: self.config.weight,
            state: view.state,
            age_ms: 0,
            heartbeat,
        });
        live.sort_by_key(|m| m.instance.0);
        log_live_changes(&view.last_live, &live);
        view.last_live = live.clone();
        live
    }

    fn heartbeat_preview(&self) -> Heartbeat {
        let owned = self.router().owned();
        let view = self.view.lock();
        self.heartbeat_of(&view, self.clock.now_ms(), Load::default(), &owned)
    }

    /// Claims, releases (at most `releases_max`) and points every shard as
    /// placement says; answers the new owners of released shards.
    async fn place(&self, releases_max: usize) -> Vec<(Released, Owner)> {
        let mut hints = Vec::new();
        let live = self.live();
        let candidates: Vec<Candidate> = live.iter().map(Member::candidate).collect();
        let mut wanted: Vec<ShardIndex> = Vec::new();
        let url_of: HashMap<InstanceId, String> =
            live.iter().map(|m| (m.instance, m.url.clone())).collect();
        for shard in 0..self.router().count() {
            let index = ShardIndex(shard);
            let owner = owner_of(shard, &candidates);
            match owner {
                Some(owner) if owner == self.me => {
                    if self.wants_claim(index) {
                        wanted.push(index);
                    }
                }
                Some(owner) => {
                    self.view.lock().claims.not_ours(index);
                    let to = Owner {
                        instance: owner,
                        url: url_of.get(&owner).cloned().unwrap_or_default(),
                        handed_off_here: false,
                    };
                    let owned_here = matches!(self.router().slot(index), Slot::Owned(_));
                    if owned_here && hints.len() >= releases_max {
                        continue;
                    }
                    if let Some(epoch) = self.release_to(index, to.clone()).await {
                        hints.push((
                            Released {
                                shard: index,
                                epoch,
                            },
                            to,
                        ));
                    }
                }
                None => {
                    if !matches!(self.router().slot(index), Slot::Owned(_) | Slot::Unowned) {
                        self.router().place(index, Slot::Unowned);
                    }
                }
            }
        }

        let to_claim = self.claims_after_keep_alive(wanted).await;
        // Claims run side by side: a survivor that inherits several shards
        // does not make the last one wait for all the others.
        let claims =
            futures::future::join_all(to_claim.into_iter().map(|(index, read)| async move {
                self.claim(index, read).await.then_some(index)
            }));
        let claimed = self
            .keeping_alive(claims)
            .await
            .into_iter()
            .flatten()
            .collect();
        self.schedule_expiries(claimed);
        hints
    }

    /// Marks this member draining and hands its shards off one at a time:
    /// each is flushed and stopped, then its new owner is told and claims it
    /// before the next one goes. With no other serving member, the shards
    /// stay until [`Fleet::stop`] (which flushes them). Bounded: at most one
    /// beat per shard, plus one.
    pub async fn drain(&self) {
        self.view.lock().state = MemberState::Draining;
        tracing::info!("fleet: draining: handing shards off");
        // The heartbeat says draining; every live member is told to read it
        // (they stop placing shards here), then the shards go one at a time.
        let announce = self.beat_releasing(0).await;
        let others: Vec<(Released, Owner)> = self
            .members()
            .into_iter()
            .filter(|m| m.instance != self.me)
            .map(|m| {
                let owner = Owner {
                    instance: m.instance,
                    url: m.url,
                    handed_off_here: false,
                };
                (
                    Released {
                        shard: ANNOUNCE_ONLY,
                        epoch: 0,
                    },
                    owner,
                )
            })
            .collect();
        self.send_hints(announce.into_iter().chain(others).collect())
            .await;
        for _ in 0..=self.router().count() {
            let hints = self.beat_releasing(1).await;
            if hints.is_empty() {
                break;
            }
            self.send_hints(hints).await;
        }
        let remaining = self.router().owned().len();
        if remaining > 0 {
            tracing::info!(
                remaining,
                "fleet: no serving member took the remaining shards; they stop with this instance"
            );
        }
    }

    /// Stops beating, stops the shards still owned and deletes the heartbeat
    /// (the others see the departure on their next listing).
    pub async fn stop(&self) {
        let _one = self.beating.lock().await;
        self.view.lock().stopped = true;
        for (index, shard) in self.router().owned() {
            self.router().place(index, Slot::Unowned);
            stop_shard(index, &shard).await;
        }
        let path = names::fleet_heartbeat(&self.me);
        if let Err(e) = self.store.delete(&path).await {
            tracing::warn!(error = %e, "fleet: deleting the heartbeat failed; it expires after the lease");
        }
    }

    /// The live set as the last placement saw it.
    pub fn members(&self) -> Vec<Member> {
        self.view.lock().last_live.clone()
    }

    /// The time between two regular beats (before their jitter).
    pub fn heartbeat_interval(&self) -> Duration {
        Duration::from_millis(self.config.heartbeat_ms)
    }

    /// The member the last placement's view would give shard `index` to if
    /// the members `gone` had left it (`None`: nobody else). When an owner
    /// does not answer, a request goes there: that member claims the shard
    /// as soon as its own listings find the owner dead, which may be before
    /// this member's do.
    pub fn owner_without(&self, index: ShardIndex, gone: &[InstanceId]) -> Option<Owner> {
        let members = self.members();
        let candidates: Vec<Candidate> = members
            .iter()
            .filter(|m| !gone.contains(&m.instance))
            .map(Member::candidate)
            .collect();
        let owner = owner_of(index.0, &candidates)?;
        let member = members.iter().find(|m| m.instance == owner)?;
        Some(Owner {
            instance: owner,
            url: member.url.clone(),
            handed_off_here: false,
        })
    }

    /// Each shard's owner by the last placement.
    pub fn shard_owners(&self) -> Vec<ShardOwner> {
        let candidates: Vec<Candidate> = self.members().iter().map(Member::candidate).collect();
        (0..self.router().count())
            .map(|shard| {
                let owner = owner_of(shard, &candidates);
                ShardOwner {
                    shard: ShardIndex(shard),
                    owner,
                    here: matches!(self.router().slot(ShardIndex(shard)), Slot::Owned(_)),
                }
            })
            .collect()
    }
}

/// Sends the hints of one beat, one request per receiving member.
/// Logs the members that became live, and those no longer live (judged
/// dead, or gone), between two views.
fn log_live_changes(before: &[Member], after: &[Member]) {
    let is_in = |set: &[Member], m: &Member| set.iter().any(|x| x.instance == m.instance);
    for m in after.iter().filter(|m| !is_in(before, m)) {
        tracing::info!(instance = %m.instance, url = %m.url, "fleet: member live");
    }
    for m in before.iter().filter(|m| !is_in(after, m)) {
        tracing::info!(instance = %m.instance, url = %m.url, "fleet: member no longer live");
    }
}

async fn deliver_hints(peers: &dyn Peers, me: InstanceId, hints: Vec<(Released, Owner)>) {
    let mut by_owner: HashMap<InstanceId, (String, Vec<(ShardIndex, u64)>)> = HashMap::new();
    for (shard, owner) in hints {
        let shards = &mut by_owner
            .entry(owner.instance)
            .or_insert_with(|| (owner.url.clone(), Vec::new()))
            .1;
        if shard.shard != ANNOUNCE_ONLY {
            shards.push((shard.shard, shard.epoch));
        }
    }
    for (_, (url, shards)) in by_owner {
        peers.hint(&url, me, shards).await;
    }
}

async fn stop_shard(index: ShardIndex, shard: &Shard) {
    if tokio::time::timeout(RELEASE_TIMEOUT, shard.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            shard = index.0,
            "fleet: stopping a shard timed out; abandoning it (its next owner fences it)"
        );
        shard.crash();
    }
}
