//! Claiming and releasing shards: the claim step of a beat (a heartbeat,
//! the holders, a second listing, the claim rule; see the parent module's
//! header), a claim itself (`Shard::open`), a hand-off and letting every
//! shard go.

use std::future::Future;

use futures::StreamExt;
use strata_engine::admin::ShardHolder;
use strata_engine::ClaimRead;

use super::{
    stop_shard, Fleet, View, CLAIMS_PER_BEAT_MAX, CLAIM_TIMEOUT, HOLDER_READS_IN_FLIGHT_MAX,
    HOLDER_READS_PER_BEAT_MAX,
};
use crate::service::routing::{Owner, ShardIndex, Slot};
use crate::service::ShardMove;

impl Fleet {
    /// The shards to claim this beat, of `candidates` (placed here, not
    /// served here). First a heartbeat (this beat's releases are done, so
    /// its `owned` set is what this member serves) that renews the lease: on
    /// a slow store claims take seconds, and a lease renewed only after them
    /// would lapse meanwhile and stop every shard this member serves. A
    /// member whose heartbeat does not land claims nothing (it could not
    /// serve what it claimed, and would only fence the owner). While it is
    /// written the holders are read (at most [`HOLDER_READS_PER_BEAT_MAX`]);
    /// then the members are listed again, then the claim rule (at most
    /// [`CLAIMS_PER_BEAT_MAX`]): see the module header.
    pub(super) async fn claims_after_keep_alive(
        &self,
        candidates: Vec<ShardIndex>,
    ) -> Vec<(ShardIndex, ClaimRead)> {
        if candidates.is_empty() {
            return Vec::new();
        }
        let started_ms = self.clock.now_ms();
        // The holders are read while the heartbeat is written (a read
        // changes nothing; only the claims must wait for the lease).
        let holders = futures::stream::iter(candidates.into_iter().take(HOLDER_READS_PER_BEAT_MAX))
            .map(|index| async move { (index, self.read_holder(index).await) })
            .buffered(HOLDER_READS_IN_FLIGHT_MAX)
            .filter_map(|(index, read)| async move { read.map(|r| (index, r)) })
            .collect::<Vec<(ShardIndex, ClaimRead)>>();
        let (wrote, holders) = futures::join!(self.write_heartbeat(), holders);
        if !wrote {
            return Vec::new();
        }
        self.renew_lease(started_ms).await;
        if holders.is_empty() || !self.refresh_membership().await {
            return Vec::new();
        }
        let mut to_claim = Vec::new();
        for (index, read) in holders {
            if to_claim.len() >= CLAIMS_PER_BEAT_MAX {
                break;
            }
            if self.may_claim(index, read.holder()) {
                to_claim.push((index, read));
            }
        }
        to_claim
    }

    /// Runs `work` (a beat's claims) and, every `heartbeat_ms` while it
    /// lasts, writes the heartbeat to renew the lease: claims on a slow
    /// store can take longer than the lease leaves after the beat's first
    /// write, and a lease that lapsed meanwhile lets go of every shard
    /// served here. A write still in flight when `work` ends is waited for
    /// (never dropped: it could land after the beat's last heartbeat and
    /// leave an older `owned` set in the store).
    pub(super) async fn keeping_alive<F: Future>(&self, work: F) -> F::Output {
        let interval = self.heartbeat_interval();
        let mut work = std::pin::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                () = tokio::time::sleep(interval) => {}
            }
            let keep_alive = async {
                let started_ms = self.clock.now_ms();
                if self.write_heartbeat().await {
                    self.renew_lease(started_ms).await;
                }
            };
            let mut keep_alive = std::pin::pin!(keep_alive);
            tokio::select! {
                out = &mut work => {
                    keep_alive.await;
                    return out;
                }
                () = &mut keep_alive => {}
            }
        }
    }

    /// Whether shard `index` (placed here) is a candidate for a claim: not
    /// served here (an owned shard that stopped, fenced, is one again).
    pub(super) fn wants_claim(&self, index: ShardIndex) -> bool {
        if let Slot::Owned(shard) = self.router().slot(index) {
            if matches!(
                shard.status(),
                strata_engine::ShardStatus::Active | strata_engine::ShardStatus::Recovering
            ) {
                return false;
            }
            tracing::warn!(shard = index.0, status = ?shard.status(), "fleet: an owned shard stopped (fenced?); claiming it again");
            self.router().place(index, Slot::Unowned);
        }
        true
    }

    /// Shard `index`'s manifest, read for its holder and for the claim
    /// (one GET; `None`: the manifest is unreadable, so not this beat). A
    /// claim made from it fails as fenced if another write replaced it since.
    async fn read_holder(&self, index: ShardIndex) -> Option<ClaimRead> {
        match self.opener.read(index).await {
            Ok(read) => Some(read),
            Err(e) => {
                tracing::warn!(shard = index.0, error = %e, "fleet: reading the shard's manifest failed; not claiming it this beat");
                None
            }
        }
    }

    /// The claim rule (`claim`) for shard `index`, whose manifest named
    /// `holder` before this beat's last listing.
    fn may_claim(&self, index: ShardIndex, holder: Option<ShardHolder>) -> bool {
        let now_ms = self.clock.now_ms();
        let mut view = self.view.lock();
        let View {
            membership, claims, ..
        } = &mut *view;
        claims.may_claim(
            membership,
            self.me,
            index,
            holder,
            now_ms,
            self.config.lease_ms,
        )
    }

    /// Claims shard `index` from the manifest `read` saw (opens it and
    /// serves it here); answers whether it is served here now.
    pub(super) async fn claim(&self, index: ShardIndex, read: ClaimRead) -> bool {
        self.router().place(index, Slot::Unowned);
        match tokio::time::timeout(CLAIM_TIMEOUT, self.opener.open(index, read)).await {
            Ok(Ok(shard)) => {
                let report = shard.last_recovery();
                self.streams.forget_shard(index);
                self.router().place(index, Slot::Owned(shard));
                self.streams.shard_moved(index, ShardMove::Claimed);
                let mut view = self.view.lock();
                view.claims.forget(index);
                drop(view);
                tracing::info!(
                    shard = index.0,
                    epoch = report.epoch,
                    wal_objects = report.wal_objects_applied,
                    streams = report.streams,
                    "fleet: shard claimed"
                );
                true
            }
            Ok(Err(e)) => {
                tracing::warn!(shard = index.0, error = %e, "fleet: claiming a shard failed; trying again next beat");
                false
            }
            Err(_) => {
                tracing::warn!(
                    shard = index.0,
                    "fleet: claiming a shard timed out; trying again next beat"
                );
                false
            }
        }
    }

    /// Queues the expiries of the streams of the shards a beat `claimed`, in
    /// the background: one registry scan for all of them.
    pub(super) fn schedule_expiries(&self, claimed: Vec<ShardIndex>) {
        if claimed.is_empty() {
            return;
        }
        let streams = self.streams.clone();
        tokio::spawn(async move {
            if let Err(e) = streams.schedule_shard_expiries(&claimed).await {
                tracing::warn!(shards = ?claimed, error = %e, "fleet: could not load the claimed shards' expiry deadlines; their streams expire on access");
            }
        });
    }

    /// Points shard `index` at `to`; if it was owned here, flushes and stops
    /// it first and answers true (the new owner is to be told).
    pub(super) async fn release_to(&self, index: ShardIndex, to: Owner) -> Option<u64> {
        let current = self.router().slot(index);
        let instance = to.instance;
        match current {
            Slot::Elsewhere(current)
                if current.instance == to.instance && current.url == to.url =>
            {
                return None;
            }
            Slot::Owned(_) => {}
            Slot::Elsewhere(_) | Slot::Unowned => {
                self.router().place(index, Slot::Elsewhere(to));
                return None;
            }
        }
        // Reads tallied for its streams go with the shard (while it is
        // still served here).
        self.streams.flush_usage().await;
        let handed = Owner {
            handed_off_here: true,
            ..to
        };
        let previous = self.router().place(index, Slot::Elsewhere(handed));
        match previous {
            Slot::Owned(shard) => {
                self.streams.shard_moved(index, ShardMove::Released);
                let epoch = shard.last_recovery().epoch;
                stop_shard(index, &shard).await;
                tracing::info!(shard = index.0, to = %instance, "fleet: shard handed off");
                Some(epoch)
            }
            _ => None,
        }
    }

    pub(super) async fn release_all(&self, why: &str) {
        for (index, shard) in self.router().owned() {
            self.router().place(index, Slot::Unowned);
            self.streams.shard_moved(index, ShardMove::Released);
            tracing::warn!(shard = index.0, why, "fleet: shard released");
            stop_shard(index, &shard).await;
        }
    }
}
