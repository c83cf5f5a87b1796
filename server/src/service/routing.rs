//! Shard routing: which shard holds a stream, and where that shard is
//! served. A stream's shard is a pure function of its id (the id's first 8
//! bytes, little endian, modulo the shard count fixed by the store's
//! topology), so every server routes a stream to the same shard.
//!
//! Each shard has a slot: owned here (a [`Shard`] handle), owned elsewhere
//! (the owner's URL, as this server's fleet view has it), or unowned (moving,
//! or not yet placed). A single server owns every slot from start to stop. In
//! a fleet the controller (`fleet::controller`) changes slots as placement
//! moves, and the server's own lease bounds how long it may answer from its
//! shards: past it, every slot reads as moving until the lease is renewed, so
//! a server that lost touch with the store never answers with stale data
//! after another took its shards (docs/ARCHITECTURE.md, "The fleet").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;
use strata_engine::{Clock, InstanceId, Shard, ShardName, ShardStatus, StreamRef};

use super::error::ServiceError;
use super::registry::Descriptor;

/// A shard's place in the topology (`s{index}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ShardIndex(pub u32);

impl ShardIndex {
    /// The engine's name of the shard (`s0`, `s1`, …): the one place that
    /// spells it (always valid: `s` and decimal digits).
    pub fn shard_name(self) -> Result<ShardName, strata_engine::InvalidShardName> {
        ShardName::new(&format!("s{}", self.0))
    }
}

/// Another fleet member, as routing needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub instance: InstanceId,
    pub url: String,
    /// This server owned the shard and released it to this owner (which
    /// may not have claimed it yet).
    pub handed_off_here: bool,
}

/// Where a shard is served, as this server knows it.
#[derive(Clone)]
pub enum Slot {
    Owned(Shard),
    Elsewhere(Owner),
    Unowned,
}

/// Where a request for a stream goes.
#[derive(Clone)]
pub enum Location {
    Local(Shard),
    Elsewhere(Owner),
    /// Being claimed, handed off or re-opened; ask again shortly.
    Moving,
    /// This server's lease lapsed (it cannot reach the store): it serves no
    /// shard until a heartbeat lands again.
    Lapsed,
}

/// How [`ShardRouter::renew_lease`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// The lease ran and now runs longer.
    Extended,
    /// The lease had lapsed: it stays lapsed until the shards owned here are
    /// let go and the lease restarts.
    AfterLapse,
}

/// Why a server whose lease lapsed answers nothing from its shards.
pub const LAPSED: &str =
    "this instance cannot reach the store and has stopped serving its shards; retry (another instance takes them over)";

/// The shards of this process, in topology order; see the module header.
pub struct ShardRouter {
    slots: Vec<RwLock<Slot>>,
    /// Until when (on `clock`) this server may answer from its shards; `None`
    /// for a single server (always).
    lease: Option<(AtomicU64, Arc<dyn Clock>)>,
    /// Bumped on every slot change (waiters re-check).
    changes: tokio::sync::watch::Sender<u64>,
}

impl ShardRouter {
    /// A single server's router: every shard owned, for good. Refuses an
    /// empty shard list: every stream must have a shard.
    pub fn new(shards: Vec<Shard>) -> Result<Self, ServiceError> {
        if shards.is_empty() {
            return Err(ServiceError::Internal("no shards to route to".into()));
        }
        Ok(ShardRouter {
            slots: shards
                .into_iter()
                .map(|s| RwLock::new(Slot::Owned(s)))
                .collect(),
            lease: None,
            changes: tokio::sync::watch::Sender::new(0),
        })
    }

    /// A fleet member's router: `count` shards, none owned yet, and no lease
    /// until the first heartbeat is written.
    pub fn fleet(count: u32, clock: Arc<dyn Clock>) -> Result<Self, ServiceError> {
        if count == 0 {
            return Err(ServiceError::Internal("no shards to route to".into()));
        }
        Ok(ShardRouter {
            slots: (0..count).map(|_| RwLock::new(Slot::Unowned)).collect(),
            lease: Some((AtomicU64::new(0), clock)),
            changes: tokio::sync::watch::Sender::new(0),
        })
    }

    pub fn count(&self) -> u32 {
        self.slots.len() as u32
    }

    /// The shard index of stream `id`.
    pub fn index_of(&self, id: &[u8; 16]) -> ShardIndex {
        let mut low = [0u8; 8];
        low.copy_from_slice(&id[..8]);
        let n = u64::from_le_bytes(low);
        ShardIndex((n % self.slots.len() as u64) as u32)
    }

    /// Whether this is a fleet member's router (another member may own a
    /// shard this one still holds a handle of).
    pub fn is_fleet(&self) -> bool {
        self.lease.is_some()
    }

    /// Whether this server's lease covers now.
    pub fn leased(&self) -> bool {
        match &self.lease {
            None => true,
            Some((until, clock)) => clock.now_ms() < until.load(Ordering::Acquire),
        }
    }

    /// Extends this server's lease to `until_ms` (never shortens it) while
    /// the lease still runs. A lease that already lapsed stays lapsed
    /// ([`Renewal::AfterLapse`]): once it lapsed, other members may have
    /// judged this one dead and claimed its shards, so its handles may be
    /// fenced without knowing it; the caller lets them all go, then
    /// [`ShardRouter::restart_lease`].
    pub fn renew_lease(&self, until_ms: u64) -> Renewal {
        let Some((until, clock)) = &self.lease else {
            return Renewal::Extended;
        };
        let now_ms = clock.now_ms();
        let renewed = until.fetch_update(Ordering::AcqRel, Ordering::Acquire, |current| {
            (now_ms < current).then_some(current.max(until_ms))
        });
        self.changes.send_modify(|n| *n += 1);
        match renewed {
            Ok(_) => Renewal::Extended,
            Err(_) => Renewal::AfterLapse,
        }
    }

    /// Starts a new lease after a lapse, once no shard is owned here (a
    /// lapsed member serves again only from shards it claims afresh).
    pub fn restart_lease(&self, until_ms: u64) {
        assert!(
            self.owned().is_empty(),
            "a lease restarts only with nothing owned"
        );
        if let Some((until, _)) = &self.lease {
            until.fetch_max(until_ms, Ordering::AcqRel);
        }
        self.changes.send_modify(|n| *n += 1);
    }

    /// Where shard `index` is served.
    pub fn locate_index(&self, index: ShardIndex) -> Location {
        if !self.leased() {
            return Location::Lapsed;
        }
        match &*self.slots[index.0 as usize].read() {
            Slot::Owned(shard) => match shard.status() {
                ShardStatus::Fenced | ShardStatus::Stopped => Location::Moving,
                ShardStatus::Active | ShardStatus::Recovering => Location::Local(shard.clone()),
            },
            Slot::Elsewhere(owner) => Location::Elsewhere(owner.clone()),
            Slot::Unowned => Location::Moving,
        }
    }

    /// Where stream `id` is served.
    pub fn locate(&self, id: &[u8; 16]) -> Location {
        self.locate_index(self.index_of(id))
    }

    /// The local shard of stream `id`, or why there is none here.
    pub fn shard_for(&self, id: &[u8; 16]) -> Result<Shard, ServiceError> {
        match self.locate(id) {
            Location::Local(shard) => Ok(shard),
            Location::Elsewhere(owner) => Err(ServiceError::NotOwner { owner: owner.url }),
            Location::Moving => Err(ServiceError::Moving),
            Location::Lapsed => Err(ServiceError::Unavailable(LAPSED.into())),
        }
    }

    /// Waits (at most `wait`) until shard `index` is no longer moving,
    /// or, with `want_local`, until it is served here.
    pub async fn settled(
        &self,
        index: ShardIndex,
        want_local: bool,
        wait: std::time::Duration,
    ) -> Location {
        let mut changes = self.changes.subscribe();
        let settled = |l: &Location| match l {
            Location::Local(_) => true,
            Location::Elsewhere(_) => !want_local,
            Location::Lapsed => true,
            Location::Moving => false,
        };
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let location = self.locate_index(index);
            if settled(&location) {
                return location;
            }
            // A lapsed lease is renewed by the next beat (which also bumps
            // `changes`); a slot changes only by `place`.
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .map_or(true, |r| r.is_err())
            {
                return self.locate_index(index);
            }
        }
    }

    /// Waits (at most `wait`) until shard `index` is served somewhere other
    /// than by `from` (a member that stopped answering): here, or by another
    /// member. Answers where it is then.
    pub async fn moved_from(
        &self,
        index: ShardIndex,
        from: InstanceId,
        wait: std::time::Duration,
    ) -> Location {
        let mut changes = self.changes.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let location = self.locate_index(index);
            let moved = match &location {
                Location::Local(_) => true,
                Location::Elsewhere(owner) => owner.instance != from,
                Location::Moving | Location::Lapsed => false,
            };
            if moved {
                return location;
            }
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .map_or(true, |r| r.is_err())
            {
                return self.locate_index(index);
            }
        }
    }

    /// The slot of shard `index`.
    pub fn slot(&self, index: ShardIndex) -> Slot {
        self.slots[index.0 as usize].read().clone()
    }

    /// Sets the slot of shard `index`; answers the previous one.
    pub fn place(&self, index: ShardIndex, slot: Slot) -> Slot {
        let previous = std::mem::replace(&mut *self.slots[index.0 as usize].write(), slot);
        self.changes.send_modify(|n| *n += 1);
        previous
    }

    /// The shards served here now.
    pub fn owned(&self) -> Vec<(ShardIndex, Shard)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, slot)| match &*slot.read() {
                Slot::Owned(shard) => Some((ShardIndex(i as u32), shard.clone())),
                _ => None,
            })
            .collect()
    }
}

/// The engine's name of a descriptor's stream incarnation.
pub fn stream_ref(desc: &Descriptor) -> Result<StreamRef, ServiceError> {
    let id = desc
        .stream_id_bytes()
        .ok_or_else(|| ServiceError::Internal("descriptor stream id".into()))?;
    Ok(StreamRef {
        id,
        incarnation: desc.incarnation,
    })
}
