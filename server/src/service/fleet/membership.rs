//! Membership: the live set as one member sees it, from listings of
//! `fleet/` and the heartbeats it read.
//!
//! Liveness is judged by the observer's own clock, so clocks that disagree
//! do not make a member look dead or alive: a heartbeat counts as renewed
//! when a listing shows it changed (another e-tag or modification time), and
//! a member is live while its last renewal was seen less than the lease ago.
//! Only a heartbeat seen for the first time is dated by the store's
//! modification time (so that yesterday's heartbeat of a dead process is not
//! taken for a live one).
//!
//! A heartbeat is read (GET) when it first appears, again when its member
//! asks (a hint: it drains, or handed shards off), and at most once per
//! refresh interval otherwise (by default never: what placement reads of a
//! heartbeat does not change but by a hint). The listing alone keeps
//! liveness, so a steady fleet costs one PUT and one LIST per member and beat.

use std::collections::HashMap;

use strata_engine::InstanceId;

use super::heartbeat::{Heartbeat, MemberState};
use super::placement::Candidate;

/// Most members a view keeps (a listing with more is cut to the first ones).
pub const MEMBERS_MAX: usize = 1024;

/// One heartbeat object as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sighting {
    pub instance: InstanceId,
    pub modified_ms: u64,
    pub e_tag: Option<String>,
    pub size: u64,
}

/// A live member as placement and routing need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub instance: InstanceId,
    pub url: String,
    pub weight: u32,
    pub state: MemberState,
    /// Age of its last renewal, by the observer's clock.
    pub age_ms: u64,
    pub heartbeat: Heartbeat,
}

impl Member {
    pub fn candidate(&self) -> Candidate {
        Candidate {
            instance: self.instance,
            weight: self.weight,
            state: self.state,
        }
    }
}

struct Known {
    sighting: Sighting,
    /// The observer's clock when the heartbeat was last seen to change.
    renewed_ms: u64,
    heartbeat: Option<Heartbeat>,
    /// When the heartbeat was last read (0: never); `None`: read it now.
    read_ms: Option<u64>,
}

/// The live set as one member sees it; see the module header.
pub struct Membership {
    lease_ms: u64,
    refresh_ms: u64,
    known: HashMap<InstanceId, Known>,
}

impl Membership {
    pub fn new(lease_ms: u64, refresh_ms: u64) -> Self {
        Membership {
            lease_ms,
            refresh_ms,
            known: HashMap::new(),
        }
    }

    /// Folds in one complete listing taken at `now_ms`; answers the members
    /// whose heartbeat must be read now. Members missing from the listing
    /// are forgotten (their heartbeat was deleted: they left).
    pub fn observe(&mut self, now_ms: u64, listing: &[Sighting]) -> Vec<InstanceId> {
        let listed: HashMap<InstanceId, &Sighting> = listing
            .iter()
            .take(MEMBERS_MAX)
            .map(|s| (s.instance, s))
            .collect();
        self.known.retain(|id, _| listed.contains_key(id));
        for (id, sighting) in listed {
            match self.known.get_mut(&id) {
                Some(known) => {
                    if known.sighting != *sighting {
                        known.sighting = sighting.clone();
                        known.renewed_ms = now_ms;
                    }
                }
                None => {
                    let age_ms = now_ms.saturating_sub(sighting.modified_ms);
                    self.known.insert(
                        id,
                        Known {
                            sighting: sighting.clone(),
                            renewed_ms: now_ms.saturating_sub(age_ms),
                            heartbeat: None,
                            read_ms: None,
                        },
                    );
                }
            }
        }
        let mut due: Vec<InstanceId> = self
            .known
            .iter()
            .filter(|(_, k)| self.is_live(k, now_ms))
            .filter(|(_, k)| match k.read_ms {
                None => true,
                Some(read_ms) => now_ms.saturating_sub(read_ms) >= self.refresh_ms,
            })
            .map(|(id, _)| *id)
            .collect();
        due.sort_by_key(|id| id.0);
        due
    }

    /// Records a heartbeat read at `now_ms` (`None`: unreadable or invalid;
    /// the member is not placed until a valid one is read).
    pub fn read(&mut self, instance: InstanceId, heartbeat: Option<Heartbeat>, now_ms: u64) {
        if let Some(known) = self.known.get_mut(&instance) {
            known.heartbeat = heartbeat;
            known.read_ms = Some(now_ms);
        }
    }

    /// Heartbeats not renewed for `dead_ms` (by this observer's clock): left
    /// by processes that died, to be deleted (at most `max`, oldest first).
    pub fn long_dead(&self, now_ms: u64, dead_ms: u64, max: usize) -> Vec<InstanceId> {
        let mut dead: Vec<(u64, InstanceId)> = self
            .known
            .iter()
            .filter(|(_, k)| now_ms.saturating_sub(k.renewed_ms) >= dead_ms)
            .map(|(id, k)| (k.renewed_ms, *id))
            .collect();
        dead.sort_by_key(|(renewed_ms, id)| (*renewed_ms, id.0));
        dead.into_iter().take(max).map(|(_, id)| id).collect()
    }

    /// Whether the last listing showed `instance`'s heartbeat.
    pub fn knows(&self, instance: &InstanceId) -> bool {
        self.known.contains_key(instance)
    }

    /// Asks for `instance`'s heartbeat to be read on the next listing.
    pub fn reread(&mut self, instance: &InstanceId) {
        if let Some(known) = self.known.get_mut(instance) {
            known.read_ms = None;
        }
    }

    fn is_live(&self, known: &Known, now_ms: u64) -> bool {
        now_ms.saturating_sub(known.renewed_ms) < self.lease_ms
    }

    /// The live members with a valid heartbeat, by instance id.
    pub fn live(&self, now_ms: u64) -> Vec<Member> {
        let mut live: Vec<Member> = self
            .known
            .iter()
            .filter(|(_, k)| self.is_live(k, now_ms))
            .filter_map(|(id, k)| {
                let hb = k.heartbeat.as_ref()?;
                Some(Member {
                    instance: *id,
                    url: hb.url.clone(),
                    weight: hb.weight,
                    state: hb.state,
                    age_ms: now_ms.saturating_sub(k.renewed_ms),
                    heartbeat: hb.clone(),
                })
            })
            .collect();
        live.sort_by_key(|m| m.instance.0);
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::fleet::heartbeat::{Load, HEARTBEAT_FORMAT};

    fn sighting(byte: u8, modified_ms: u64, tag: &str) -> Sighting {
        Sighting {
            instance: InstanceId([byte; 16]),
            modified_ms,
            e_tag: Some(tag.into()),
            size: 100,
        }
    }

    fn heartbeat(byte: u8) -> Heartbeat {
        Heartbeat {
            format: HEARTBEAT_FORMAT,
            instance: InstanceId([byte; 16]).to_string(),
            url: format!("http://127.0.0.1:{}", 9000 + u16::from(byte)),
            started_ms: 0,
            beat: 1,
            written_ms: 0,
            state: MemberState::Serving,
            weight: 1,
            load: Load::default(),
        }
    }

    /// A member stays live while its heartbeat keeps changing, however far
    /// its writer's clock (and the store's) is from the observer's, and is
    /// dead one lease after the last change the observer saw.
    #[test]
    fn liveness_follows_changes_seen_not_the_writers_clock() {
        let mut m = Membership::new(6_000, 10_000);
        let a = InstanceId([1; 16]);
        // The store's clock is 3 s ahead of ours: first sight dates it now.
        assert_eq!(m.observe(10_000, &[sighting(1, 13_000, "e1")]), vec![a]);
        m.read(a, Some(heartbeat(1)), 10_000);
        assert_eq!(m.live(10_000).len(), 1);
        // Changes keep it live long after the first sighting…
        m.observe(14_000, &[sighting(1, 17_000, "e2")]);
        assert_eq!(m.live(19_999).len(), 1);
        // …and an unchanged listing does not renew it.
        m.observe(19_000, &[sighting(1, 17_000, "e2")]);
        assert_eq!(m.live(19_999).len(), 1);
        assert!(
            m.live(20_000).is_empty(),
            "one lease after the last change seen"
        );
    }

    #[test]
    fn an_old_heartbeat_seen_first_is_dead() {
        let mut m = Membership::new(6_000, 10_000);
        assert!(m.observe(100_000, &[sighting(1, 1_000, "e1")]).is_empty());
        assert!(m.live(100_000).is_empty());
        // Once it changes again, it is alive.
        let due = m.observe(101_000, &[sighting(1, 101_000, "e2")]);
        assert_eq!(due, vec![InstanceId([1; 16])]);
    }

    #[test]
    fn heartbeats_are_read_once_per_refresh_or_when_asked() {
        let mut m = Membership::new(6_000, 10_000);
        let a = InstanceId([1; 16]);
        assert_eq!(m.observe(0, &[sighting(1, 0, "e1")]), vec![a]);
        m.read(a, Some(heartbeat(1)), 0);
        assert!(m.observe(2_000, &[sighting(1, 2_000, "e2")]).is_empty());
        m.reread(&a);
        assert_eq!(m.observe(4_000, &[sighting(1, 4_000, "e3")]), vec![a]);
        m.read(a, Some(heartbeat(1)), 4_000);
        assert_eq!(m.observe(14_000, &[sighting(1, 14_000, "e4")]), vec![a]);
    }

    #[test]
    fn long_dead_heartbeats_are_found_oldest_first() {
        let mut m = Membership::new(6_000, u64::MAX);
        m.observe(
            100_000,
            &[
                sighting(1, 10_000, "e"),
                sighting(2, 20_000, "e"),
                sighting(3, 99_000, "e"),
            ],
        );
        assert_eq!(
            m.long_dead(100_000, 60_000, 8),
            vec![InstanceId([1; 16]), InstanceId([2; 16])]
        );
        assert_eq!(m.long_dead(100_000, 60_000, 1), vec![InstanceId([1; 16])]);
    }

    #[test]
    fn a_deleted_heartbeat_leaves_and_an_unreadable_one_is_not_placed() {
        let mut m = Membership::new(6_000, 10_000);
        let (a, b) = (InstanceId([1; 16]), InstanceId([2; 16]));
        m.observe(0, &[sighting(1, 0, "e1"), sighting(2, 0, "e1")]);
        m.read(a, Some(heartbeat(1)), 0);
        m.read(b, None, 0);
        assert_eq!(m.live(0).len(), 1, "b's heartbeat did not decode");
        m.observe(1_000, &[sighting(2, 1_000, "e2")]);
        assert!(m.live(1_000).is_empty(), "a's heartbeat is gone: a left");
    }
}
