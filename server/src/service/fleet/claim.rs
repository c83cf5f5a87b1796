//! The claim rule: when a member may claim a shard that placement gives it
//! (docs/ARCHITECTURE.md, "The fleet"). The shard's manifest names its
//! holder (the instance and epoch of the last claim):
//!
//! * none, this member, or a member seen dead — claim;
//! * a member never seen — claim once a lease of our listings passed since we
//!   first met it as the holder (a listing may have missed a member that just
//!   joined);
//! * a live member — claim only once it released that very claim: its hint
//!   names the shard with the same epoch, or two of its heartbeats read after
//!   we first looked show it without the shard. A live holder is never
//!   claimed from on a timer: it may still be answering from the shard.

use std::collections::HashMap;

use strata_engine::admin::ShardHolder;
use strata_engine::InstanceId;

use super::membership::Membership;
use crate::service::routing::ShardIndex;

/// A shard placed here, held by a live member: its holder and claim, and
/// the beat of the holder's first heartbeat read after we saw the claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pending {
    holder: InstanceId,
    epoch: u64,
    beat: Option<u64>,
}

/// What the claim rule remembers between beats.
#[derive(Debug, Default)]
pub(super) struct Claims {
    /// Shards members said they released, with the epoch of the claim they
    /// released (a hint counts only while the manifest names that claim).
    released: HashMap<InstanceId, HashMap<ShardIndex, u64>>,
    pending: HashMap<ShardIndex, Pending>,
    /// Holders (by shard and claim) never seen in a listing, and when we
    /// first met them.
    unseen: HashMap<(ShardIndex, InstanceId, u64), u64>,
}

impl Claims {
    /// A hint: `from` released `shards` (each with its claim's epoch).
    pub(super) fn released(
        &mut self,
        from: InstanceId,
        shards: impl Iterator<Item = (ShardIndex, u64)>,
    ) {
        self.released.entry(from).or_default().extend(shards);
    }

    /// Shard `index` is placed elsewhere: stop waiting for its holder.
    pub(super) fn not_ours(&mut self, index: ShardIndex) {
        self.pending.remove(&index);
    }

    /// Shard `index` is claimed here: forget everything about it.
    pub(super) fn forget(&mut self, index: ShardIndex) {
        self.pending.remove(&index);
        self.unseen.retain(|(shard, _, _), _| *shard != index);
        for shards in self.released.values_mut() {
            shards.remove(&index);
        }
    }

    /// Whether `me` may claim shard `index` now, whose manifest names
    /// `holder`; see the module header. May ask `membership` to read the
    /// holder's heartbeat again.
    pub(super) fn may_claim(
        &mut self,
        membership: &mut Membership,
        me: InstanceId,
        index: ShardIndex,
        holder: Option<ShardHolder>,
        now_ms: u64,
        lease_ms: u64,
    ) -> bool {
        let Some(ShardHolder {
            instance: holder,
            epoch,
        }) = holder.filter(|h| h.instance != me)
        else {
            return true;
        };
        if !membership.renewing(&holder, now_ms) {
            if membership.knows(&holder) {
                return true; // dead by our own observation
            }
            let first = self.unseen.entry((index, holder, epoch)).or_insert(now_ms);
            return now_ms.saturating_sub(*first) >= lease_ms;
        }
        if self.released.get(&holder).and_then(|s| s.get(&index)) == Some(&epoch) {
            return true;
        }
        let seen = membership
            .heartbeat(&holder)
            .map(|(hb, _)| (hb.beat, hb.owns(index.0)));
        membership.reread(&holder);
        let same = |p: &Pending| p.holder == holder && p.epoch == epoch;
        match (self.pending.get(&index).copied(), seen) {
            (Some(p), Some((beat, owns))) if same(&p) => match p.beat {
                // Two beats after the first read that followed our look at
                // the manifest: the holder's `owned` set is current.
                Some(first) => beat >= first + 2 && !owns,
                None => {
                    self.pending.insert(
                        index,
                        Pending {
                            beat: Some(beat),
                            ..p
                        },
                    );
                    false
                }
            },
            (Some(p), None) if same(&p) => false,
            _ => {
                let fresh = Pending {
                    holder,
                    epoch,
                    beat: None,
                };
                self.pending.insert(index, fresh);
                false
            }
        }
    }
}
