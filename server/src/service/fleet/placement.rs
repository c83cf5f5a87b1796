//! Placement: which fleet member owns each shard, derived (never stored)
//! from the live set by weighted rendezvous hashing.
//!
//! Every member with weight `w` takes part as `w` virtual members; a shard's
//! owner is the member whose virtual member scores highest for it, the score
//! being 64 bits of SHA-256 over (domain, instance, virtual index, shard). The
//! function uses integers only, so every instance, on any machine, computes
//! the same owner from the same members. Properties (tested below):
//!
//! * the answer depends on the set of members, not on their order;
//! * when a member leaves, only its own shards move; when one joins, shards
//!   move only to it;
//! * a member's expected share is proportional to its weight;
//! * draining members own nothing while any member is serving (and everything
//!   between them when none is, so that a fleet that drains entirely still
//!   answers until its last member stops).

use sha2::{Digest, Sha256};
use strata_engine::InstanceId;

use super::heartbeat::{MemberState, WEIGHT_MAX};

/// What placement needs of a live member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub instance: InstanceId,
    pub weight: u32,
    pub state: MemberState,
}

/// The owner of shard `shard` among `members` (`None` when there is no
/// member, or every member has weight 0).
pub fn owner_of(shard: u32, members: &[Candidate]) -> Option<InstanceId> {
    let any_serving = members
        .iter()
        .any(|m| m.state == MemberState::Serving && m.weight > 0);
    members
        .iter()
        .filter(|m| !any_serving || m.state == MemberState::Serving)
        .filter_map(|m| score(shard, m).map(|s| (s, m.instance.0)))
        .max()
        .map(|(_, id)| InstanceId(id))
}

/// A member's best score for `shard` over its virtual members (`None` for
/// weight 0). Ties (64-bit collisions) fall to the higher instance id.
fn score(shard: u32, member: &Candidate) -> Option<u64> {
    (0..member.weight.min(WEIGHT_MAX))
        .map(|virtual_index| {
            let mut h = Sha256::new();
            h.update(b"strata/fleet/placement/v1\0");
            h.update(member.instance.0);
            h.update(virtual_index.to_le_bytes());
            h.update(shard.to_le_bytes());
            let digest = h.finalize();
            let mut first = [0u8; 8];
            first.copy_from_slice(&digest[..8]);
            u64::from_le_bytes(first)
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn member(byte: u8, weight: u32) -> Candidate {
        Candidate {
            instance: InstanceId([byte; 16]),
            weight,
            state: MemberState::Serving,
        }
    }

    fn members() -> impl Strategy<Value = Vec<Candidate>> {
        proptest::collection::btree_map(any::<u8>(), 1u32..4, 1..8).prop_map(|m| {
            m.into_iter()
                .map(|(byte, weight)| member(byte, weight))
                .collect()
        })
    }

    proptest! {
        #[test]
        fn the_order_of_members_does_not_matter(ms in members(), shard in 0u32..4096) {
            let mut reversed = ms.clone();
            reversed.reverse();
            prop_assert_eq!(owner_of(shard, &ms), owner_of(shard, &reversed));
            prop_assert!(owner_of(shard, &ms).is_some());
        }

        #[test]
        fn a_leaving_member_moves_only_its_own_shards(ms in members(), leaver in any::<prop::sample::Index>()) {
            let gone = leaver.index(ms.len());
            let rest: Vec<Candidate> = ms.iter().enumerate().filter(|(i, _)| *i != gone).map(|(_, m)| m.clone()).collect();
            for shard in 0..256 {
                let before = owner_of(shard, &ms).unwrap();
                if before != ms[gone].instance {
                    prop_assert_eq!(owner_of(shard, &rest), Some(before));
                }
            }
        }

        #[test]
        fn a_draining_member_owns_nothing_while_another_serves(ms in members(), drainer in any::<prop::sample::Index>()) {
            let mut ms = ms;
            let d = drainer.index(ms.len());
            ms[d].state = MemberState::Draining;
            for shard in 0..256 {
                let owner = owner_of(shard, &ms).unwrap();
                if ms.len() > 1 {
                    prop_assert_ne!(owner, ms[d].instance);
                } else {
                    prop_assert_eq!(owner, ms[d].instance);
                }
            }
        }
    }

    /// Shares follow weights: over 12,000 shards, a weight-2 member owns
    /// about half, and each weight-1 member about a quarter (±3 points).
    #[test]
    fn shares_follow_weights() {
        let ms = vec![member(1, 2), member(2, 1), member(3, 1)];
        let shards = 12_000u32;
        let mut owned = [0u32; 3];
        for shard in 0..shards {
            let owner = owner_of(shard, &ms).unwrap();
            let i = ms.iter().position(|m| m.instance == owner).unwrap();
            owned[i] += 1;
        }
        let share = |i: usize| f64::from(owned[i]) / f64::from(shards);
        assert!((share(0) - 0.5).abs() < 0.03, "{owned:?}");
        assert!((share(1) - 0.25).abs() < 0.03, "{owned:?}");
        assert!((share(2) - 0.25).abs() < 0.03, "{owned:?}");
    }

    /// The test vector of docs/FORMATS.md §14, read from the document.
    #[test]
    fn the_documented_test_vector_holds() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/FORMATS.md"))
                .expect("docs/FORMATS.md");
        let section = doc.split("## 14. Fleet heartbeats").nth(1).expect("§14");
        let a = member(0x11, 1);
        let b = member(0x22, 2);
        let mut rows = 0;
        for line in section.lines() {
            let cells: Vec<&str> = line
                .split('|')
                .map(|c| c.trim().trim_matches('`'))
                .collect();
            let Some(shard) = cells.get(1).and_then(|c| c.parse::<u32>().ok()) else {
                continue;
            };
            assert_eq!(
                format!("{:016x}", score(shard, &a).unwrap()),
                cells[2],
                "shard {shard}"
            );
            assert_eq!(
                format!("{:016x}", score(shard, &b).unwrap()),
                cells[3],
                "shard {shard}"
            );
            let owner = owner_of(shard, &[a.clone(), b.clone()]).unwrap();
            let expected = if cells[4] == "A" {
                a.instance
            } else {
                b.instance
            };
            assert_eq!(owner, expected, "shard {shard}");
            rows += 1;
        }
        assert_eq!(rows, 4);
    }

    #[test]
    fn no_member_no_owner() {
        assert_eq!(owner_of(0, &[]), None);
        assert_eq!(owner_of(0, &[member(1, 0)]), None);
    }
}
