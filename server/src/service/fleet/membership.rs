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
//! A verdict rests on listings alone: a change is dated by the end of the
//! listing that showed it (it may have landed just before), and liveness is
//! judged as of the start of the last listing, whatever the time asked
//! about (a renewal that landed after that start, during the listing or
//! during a slow step after it, is unseen, not absent). So a member judged
//! dead had written no heartbeat for a lease before that start: its own
//! lease, renewed from a write's start minus a margin, lapsed before it.
//!
//! A listing shows a change up to a beat after it landed (a listing taken
//! just before a member's beat shows that beat only at the next one), so a
//! change is dated earlier when the store's stamp allows: by [`StoreClock`],
//! the latest time of ours at which the store stamped that version, which is
//! after its writer's PUT started. Its samples are the stamps every listing
//! shows (stamped before the listing ended) and this member's own heartbeat
//! (stamped before its PUT returned, matched by e-tag).
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
use super::store_clock::StoreClock;

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
    /// Since when listings have not shown it (`None`: the last one did).
    absent_since_ms: Option<u64>,
}

/// Whether a member is live at `now_ms`. Shown by the listings: its last
/// renewal is younger than the lease. Missing from them: it was live when
/// it went missing, and has been missing for less than a lease (a listing
/// may be partial; a member that believes itself live must not lose its
/// shards before its own lease ends, and this observer cannot tell whether
/// it renewed meanwhile).
fn alive(known: &Known, now_ms: u64, lease_ms: u64) -> bool {
    match known.absent_since_ms {
        None => now_ms.saturating_sub(known.renewed_ms) < lease_ms,
        Some(absent_ms) => {
            absent_ms.saturating_sub(known.renewed_ms) < lease_ms
                && now_ms.saturating_sub(absent_ms) < lease_ms
        }
    }
}

/// An e-tag without the quotes some stores put around it.
fn unquoted(e_tag: &str) -> &str {
    e_tag.trim_matches('"')
}

/// When one listing of `fleet/` was taken, by the observer's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Listed {
    /// Before the LIST was sent: a heartbeat written before this shows.
    pub started_ms: u64,
    /// After its last page arrived: a heartbeat it shows was written before.
    pub ended_ms: u64,
}

impl Listed {
    /// A listing that took no time.
    pub fn at(ms: u64) -> Listed {
        Listed {
            started_ms: ms,
            ended_ms: ms,
        }
    }
}

/// This member's last heartbeat PUT that succeeded: the version it wrote
/// and when the PUT returned (the store stamped it before).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnWrite {
    pub e_tag: String,
    pub ended_ms: u64,
}

/// The live set as one member sees it; see the module header.
pub struct Membership {
    lease_ms: u64,
    refresh_ms: u64,
    known: HashMap<InstanceId, Known>,
    /// The last listing folded in (`None`: never).
    listed: Option<Listed>,
    store_clock: StoreClock,
    own_write: Option<OwnWrite>,
}

impl Membership {
    pub fn new(lease_ms: u64, refresh_ms: u64) -> Self {
        Membership {
            lease_ms,
            refresh_ms,
            known: HashMap::new(),
            listed: None,
            store_clock: StoreClock::default(),
            own_write: None,
        }
    }

    /// This member's heartbeat PUT returned (`Some`: it succeeded, with the
    /// e-tag it wrote; `None`: it failed or timed out, and may still land
    /// later, so no listing is paired with the PUT before it).
    pub fn wrote_own(&mut self, write: Option<OwnWrite>) {
        self.own_write = write;
    }

    /// A listing showed this member's own heartbeat: if it is the version
    /// the last PUT wrote, its stamp was made before that PUT returned.
    pub fn saw_own(&mut self, sighting: &Sighting) {
        let Some(write) = &self.own_write else {
            return;
        };
        if sighting.e_tag.as_deref().map(unquoted) == Some(unquoted(&write.e_tag)) {
            self.store_clock
                .sample(write.ended_ms, sighting.modified_ms);
        }
    }

    /// When, at the latest, a change a listing that ended at `listed_ms`
    /// showed with `sighting`'s stamp was written.
    fn renewal_ms(&self, sighting: &Sighting, listed_ms: u64) -> u64 {
        self.store_clock
            .stamped_by_ms(sighting.modified_ms)
            .map_or(listed_ms, |stamped_ms| stamped_ms.min(listed_ms))
    }

    /// The time liveness is judged at when asked at `now_ms`: no later than
    /// the start of the last listing.
    fn judged_ms(&self, now_ms: u64) -> u64 {
        self.listed
            .map_or(now_ms, |listed| now_ms.min(listed.started_ms))
    }

    /// Folds in one listing taken `at`; answers the members whose
    /// heartbeat must be read now. A member missing from the listing is not
    /// taken for gone at once (see [`alive`]): it stays live for a lease of
    /// absence, then is forgotten.
    pub fn observe(&mut self, at: Listed, listing: &[Sighting]) -> Vec<InstanceId> {
        let now_ms = at.ended_ms;
        // After a gap in our own listings (this process stalled, or its
        // listings failed), what we saw before says nothing about who renewed
        // meanwhile: every known member counts as renewed now, so that no one
        // is judged dead on our absence (it costs a later verdict, never a
        // wrong one).
        // Only members that were live at our previous listing: one already
        // dead then stays dead (our own pause does not revive it).
        if let Some(then) = self
            .listed
            .map(|listed| listed.ended_ms)
            .filter(|then| now_ms.saturating_sub(*then) >= self.lease_ms / 2)
        {
            let lease_ms = self.lease_ms;
            for known in self.known.values_mut() {
                if !alive(known, then, lease_ms) {
                    continue;
                }
                known.renewed_ms = known.renewed_ms.max(now_ms);
                if known.absent_since_ms.is_some() {
                    known.absent_since_ms = Some(now_ms);
                }
            }
        }
        self.listed = Some(at);
        let judged_ms = self.judged_ms(now_ms);
        let listed: HashMap<InstanceId, &Sighting> = listing
            .iter()
            .take(MEMBERS_MAX)
            .map(|s| (s.instance, s))
            .collect();
        for (id, known) in self.known.iter_mut() {
            if !listed.contains_key(id) && known.absent_since_ms.is_none() {
                known.absent_since_ms = Some(now_ms);
            }
        }
        let lease_ms = self.lease_ms;
        self.known
            .retain(|id, k| listed.contains_key(id) || alive(k, judged_ms, lease_ms));
        // Only a new or changed sighting says anything about the store's
        // clock: an unchanged one only grows older, and would push useful
        // samples out of the bounded set.
        for (id, sighting) in &listed {
            if self.known.get(id).is_none_or(|k| k.sighting != **sighting) {
                self.store_clock.sample(now_ms, sighting.modified_ms);
            }
        }
        for (id, sighting) in listed {
            let renewal_ms = self.renewal_ms(sighting, now_ms);
            match self.known.get_mut(&id) {
                Some(known) => {
                    known.absent_since_ms = None;
                    if known.sighting != *sighting {
                        known.sighting = sighting.clone();
                        known.renewed_ms = known.renewed_ms.max(renewal_ms);
                        tracing::debug!(
                            instance = %id,
                            listed_ms = now_ms,
                            renewed_ms = known.renewed_ms,
                            modified_ms = sighting.modified_ms,
                            "fleet: renewal seen"
                        );
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
                            absent_since_ms: None,
                        },
                    );
                }
            }
        }
        let mut due: Vec<InstanceId> = self
            .known
            .iter()
            .filter(|(_, k)| self.is_live(k, judged_ms))
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

    /// Heartbeats listed but not renewed for `dead_ms` (by this observer's
    /// clock): left
    /// by processes that died, to be deleted (at most `max`, oldest first).
    pub fn long_dead(&self, now_ms: u64, dead_ms: u64, max: usize) -> Vec<InstanceId> {
        let mut dead: Vec<(u64, InstanceId)> = self
            .known
            .iter()
            .filter(|(_, k)| {
                k.absent_since_ms.is_none() && now_ms.saturating_sub(k.renewed_ms) >= dead_ms
            })
            .map(|(id, k)| (k.renewed_ms, *id))
            .collect();
        dead.sort_by_key(|(renewed_ms, id)| (*renewed_ms, id.0));
        dead.into_iter().take(max).map(|(_, id)| id).collect()
    }

    /// Whether `instance`'s heartbeat was renewed less than a lease before
    /// the time judged at (by this observer's clock; see the module header),
    /// whether or not its content could be read.
    pub fn renewing(&self, instance: &InstanceId, now_ms: u64) -> bool {
        let judged_ms = self.judged_ms(now_ms);
        self.known
            .get(instance)
            .is_some_and(|k| self.is_live(k, judged_ms))
    }

    /// `instance`'s last heartbeat read, and when it was read.
    pub fn heartbeat(&self, instance: &InstanceId) -> Option<(&Heartbeat, u64)> {
        let known = self.known.get(instance)?;
        Some((known.heartbeat.as_ref()?, known.read_ms?))
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

    /// The earliest time from which a listing could judge dead a member
    /// the last listing showed live (its last renewal seen plus the lease;
    /// it may be past already), if any: a listing then, rather than at the
    /// next beat, finds a dead member up to a beat sooner. In a steady fleet
    /// every renewal is seen each beat, so this lies more than a beat ahead.
    pub fn next_verdict_ms(&self) -> Option<u64> {
        let judged_ms = self.listed?.started_ms;
        self.known
            .values()
            .filter(|k| k.absent_since_ms.is_none() && self.is_live(k, judged_ms))
            .map(|k| k.renewed_ms.saturating_add(self.lease_ms))
            .min()
    }

    fn is_live(&self, known: &Known, now_ms: u64) -> bool {
        alive(known, now_ms, self.lease_ms)
    }

    /// The live members with a valid heartbeat, by instance id, judged as
    /// [`Membership::renewing`] does.
    pub fn live(&self, now_ms: u64) -> Vec<Member> {
        let judged_ms = self.judged_ms(now_ms);
        let mut live: Vec<Member> = self
            .known
            .iter()
            .filter(|(_, k)| self.is_live(k, judged_ms))
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
            owned: String::new(),
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
        assert_eq!(
            m.observe(Listed::at(10_000), &[sighting(1, 13_000, "e1")]),
            vec![a]
        );
        m.read(a, Some(heartbeat(1)), 10_000);
        assert_eq!(m.live(10_000).len(), 1);
        // Changes keep it live long after the first sighting…
        m.observe(Listed::at(14_000), &[sighting(1, 17_000, "e2")]);
        assert_eq!(m.live(19_999).len(), 1);
        // …and unchanged listings (every 2 s) do not renew it.
        for at in [16_000, 18_000, 19_000] {
            m.observe(Listed::at(at), &[sighting(1, 17_000, "e2")]);
        }
        assert_eq!(m.live(19_999).len(), 1);
        assert_eq!(m.live(20_000).len(), 1, "judged at the last listing");
        m.observe(Listed::at(20_000), &[sighting(1, 17_000, "e2")]);
        assert!(
            m.live(20_000).is_empty(),
            "one lease after the last change seen"
        );
    }

    /// Our own heartbeat PUT returned at 1_060 and is listed with the whole
    /// second 1_000: one store-clock sample, 60 ms ahead.
    fn sample_own_write(m: &mut Membership) {
        m.wrote_own(Some(OwnWrite {
            e_tag: "\"own1\"".into(),
            ended_ms: 1_060,
        }));
        m.saw_own(&Sighting {
            instance: InstanceId([9; 16]),
            modified_ms: 1_000,
            e_tag: Some("own1".into()),
            size: 100,
        });
    }

    /// A listing that runs just before a member's beat shows each of its
    /// writes a beat late; the store's stamp dates the change earlier — never
    /// before the write started — and the verdict comes that much sooner.
    #[test]
    fn a_change_is_dated_by_its_stamp_when_the_store_clock_is_known() {
        let mut m = Membership::new(6_000, u64::MAX);
        let a = InstanceId([1; 16]);
        // The store lists whole seconds and runs with our clock. Our own
        // PUT returned at 1_060; the store stamped it at 1_040 (listed 1_000).
        sample_own_write(&mut m);
        m.observe(Listed::at(1_900), &[sighting(1, 0, "a0")]);
        m.read(a, Some(heartbeat(1)), 1_900);
        // a's PUT started at 2_000 and was stamped at 2_050 (listed 2_000);
        // our next listing, at 3_900, shows it.
        m.observe(Listed::at(3_900), &[sighting(1, 2_000, "a1")]);
        let dated_ms = 2_000 + 60 + 1_000 + super::super::store_clock::SLACK_MS;
        assert!(dated_ms >= 2_000, "never before the write started");
        assert_eq!(m.next_verdict_ms(), Some(dated_ms + 6_000));
        // a died after that write: judged dead by a listing from the dated
        // time plus a lease, not from 3_900 plus a lease.
        for at in [5_900, 7_900] {
            m.observe(Listed::at(at), &[sighting(1, 2_000, "a1")]);
        }
        m.observe(Listed::at(dated_ms + 5_999), &[sighting(1, 2_000, "a1")]);
        assert!(m.renewing(&a, dated_ms + 5_999));
        m.observe(Listed::at(dated_ms + 6_000), &[sighting(1, 2_000, "a1")]);
        assert!(!m.renewing(&a, dated_ms + 6_000));
        assert!(dated_ms + 6_000 < 3_900 + 6_000);
    }

    /// A sighting listed again unchanged says nothing new about the store's
    /// clock (it only grows older): it must not push the tight samples out of
    /// the bounded set, or renewals would be dated later and verdicts slip.
    #[test]
    fn an_unchanged_sighting_does_not_crowd_out_the_store_clock_samples() {
        use super::super::store_clock::{SAMPLES_MAX, SLACK_MS};
        let mut m = Membership::new(6_000, u64::MAX);
        sample_own_write(&mut m);
        let tight_ms = 5_000 + 60 + 1_000 + SLACK_MS;
        assert_eq!(m.store_clock.stamped_by_ms(5_000), Some(tight_ms));
        for n in 0..(SAMPLES_MAX as u64 + 8) {
            m.observe(Listed::at(1_900 + n * 1_000), &[sighting(1, 1_000, "a0")]);
        }
        assert_eq!(m.store_clock.stamped_by_ms(5_000), Some(tight_ms));
    }

    /// Our own heartbeat counts as a sample only in the version our last
    /// PUT wrote: a PUT that timed out may land later, after the one that
    /// succeeded returned, and pairing its stamp with that return would
    /// date the store's clock too early.
    #[test]
    fn only_the_version_our_last_put_wrote_samples_the_store_clock() {
        let mut m = Membership::new(6_000, u64::MAX);
        let me = InstanceId([9; 16]);
        let own = |tag: &str, modified_ms| Sighting {
            instance: me,
            modified_ms,
            e_tag: Some(tag.into()),
            size: 100,
        };
        m.wrote_own(Some(OwnWrite {
            e_tag: "new".into(),
            ended_ms: 1_000,
        }));
        m.saw_own(&own("late", 9_000)); // another version: ignored
        m.wrote_own(None);
        m.saw_own(&own("new", 1_000)); // after a failed PUT: ignored
        assert_eq!(m.store_clock.stamped_by_ms(5_000), None);
        m.wrote_own(Some(OwnWrite {
            e_tag: "new".into(),
            ended_ms: 1_000,
        }));
        m.saw_own(&own("new", 1_000));
        assert!(m.store_clock.stamped_by_ms(5_000).is_some());
    }

    #[test]
    fn an_old_heartbeat_seen_first_is_dead() {
        let mut m = Membership::new(6_000, 10_000);
        assert!(m
            .observe(Listed::at(100_000), &[sighting(1, 1_000, "e1")])
            .is_empty());
        assert!(m.live(100_000).is_empty());
        // Once it changes again, it is alive.
        let due = m.observe(Listed::at(101_000), &[sighting(1, 101_000, "e2")]);
        assert_eq!(due, vec![InstanceId([1; 16])]);
    }

    #[test]
    fn heartbeats_are_read_once_per_refresh_or_when_asked() {
        let mut m = Membership::new(6_000, 10_000);
        let a = InstanceId([1; 16]);
        assert_eq!(m.observe(Listed::at(0), &[sighting(1, 0, "e1")]), vec![a]);
        m.read(a, Some(heartbeat(1)), 0);
        assert!(m
            .observe(Listed::at(2_000), &[sighting(1, 2_000, "e2")])
            .is_empty());
        m.reread(&a);
        assert_eq!(
            m.observe(Listed::at(4_000), &[sighting(1, 4_000, "e3")]),
            vec![a]
        );
        m.read(a, Some(heartbeat(1)), 4_000);
        assert_eq!(
            m.observe(Listed::at(14_000), &[sighting(1, 14_000, "e4")]),
            vec![a]
        );
    }

    #[test]
    fn long_dead_heartbeats_are_found_oldest_first() {
        let mut m = Membership::new(6_000, u64::MAX);
        m.observe(
            Listed::at(100_000),
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
    fn a_missing_heartbeat_leaves_after_the_lease_and_an_unreadable_one_is_not_placed() {
        let mut m = Membership::new(6_000, 10_000);
        let (a, b) = (InstanceId([1; 16]), InstanceId([2; 16]));
        m.observe(Listed::at(0), &[sighting(1, 0, "e1"), sighting(2, 0, "e1")]);
        m.read(a, Some(heartbeat(1)), 0);
        m.read(b, None, 0);
        assert_eq!(m.live(0).len(), 1, "b's heartbeat did not decode");
        // A listing without a (deleted, or a partial listing) does not end a
        // before its lease: a may still believe itself live.
        for at in [1_000, 3_000, 5_000] {
            m.observe(Listed::at(at), &[sighting(2, at, &format!("e{at}"))]);
        }
        assert_eq!(m.live(6_999).len(), 1);
        m.observe(Listed::at(7_000), &[sighting(2, 7_000, "e3")]);
        assert!(m.live(7_000).is_empty(), "a lease of absence");
        assert!(!m.knows(&a), "forgotten once dead and unlisted");
    }

    /// After a gap in the observer's own listings, nobody is judged dead on
    /// the strength of the observer's absence: the verdict waits a lease.
    #[test]
    fn a_gap_in_our_listings_judges_no_one_dead() {
        let mut m = Membership::new(6_000, u64::MAX);
        let a = InstanceId([1; 16]);
        m.observe(Listed::at(0), &[sighting(1, 0, "e1")]);
        m.read(a, Some(heartbeat(1)), 0);
        // We stalled for 20 s; a's heartbeat is unchanged (it may have died,
        // or the listing we get now may be stale): still live for a lease.
        m.observe(Listed::at(20_000), &[sighting(1, 0, "e1")]);
        assert_eq!(m.live(20_000).len(), 1);
        for at in [22_000, 24_000, 26_000] {
            m.observe(Listed::at(at), &[sighting(1, 0, "e1")]);
        }
        assert!(
            m.live(26_000).is_empty(),
            "a lease of our own listings without a change"
        );
        // A member already dead before our next pause is not revived by it.
        m.observe(Listed::at(60_000), &[sighting(1, 0, "e1")]);
        assert!(
            m.live(60_000).is_empty(),
            "dead before the gap, dead after it"
        );
    }

    /// A member that stops renewing can be judged dead at its last renewal
    /// seen plus the lease: that is when the next listing is worth taking.
    #[test]
    fn the_next_verdict_is_a_lease_after_the_oldest_renewal_seen() {
        let mut m = Membership::new(6_000, u64::MAX);
        m.observe(
            Listed::at(1_000),
            &[sighting(1, 1_000, "a1"), sighting(2, 1_000, "b1")],
        );
        m.observe(
            Listed::at(3_000),
            &[sighting(1, 3_000, "a2"), sighting(2, 1_000, "b1")],
        );
        assert_eq!(m.next_verdict_ms(), Some(7_000), "b, seen at 1 s");
        m.observe(
            Listed::at(5_000),
            &[sighting(1, 3_000, "a2"), sighting(2, 1_000, "b1")],
        );
        m.observe(
            Listed::at(7_000),
            &[sighting(1, 3_000, "a2"), sighting(2, 1_000, "b1")],
        );
        assert!(!m.renewing(&InstanceId([2; 16]), 7_000));
        assert_eq!(m.next_verdict_ms(), Some(9_000), "a, seen at 3 s");
        m.observe(
            Listed::at(9_000),
            &[sighting(1, 3_000, "a2"), sighting(2, 1_000, "b1")],
        );
        assert_eq!(m.next_verdict_ms(), None, "nobody left to judge");
    }

    /// A verdict of death rests on listings alone: the time a listing took,
    /// and the time after it (a slow heartbeat write, a claim's manifest
    /// read), count for nothing, since a member may have renewed unseen.
    #[test]
    fn a_member_is_judged_as_of_the_start_of_the_last_listing() {
        let mut m = Membership::new(6_000, u64::MAX);
        let a = InstanceId([1; 16]);
        m.observe(Listed::at(0), &[sighting(1, 0, "e1")]);
        m.read(a, Some(heartbeat(1)), 0);
        for at in [2_000, 4_000] {
            m.observe(Listed::at(at), &[sighting(1, 0, "e1")]);
        }
        // A slow listing: sent at 5.5 s, its last page at 6.5 s.
        let slow = Listed {
            started_ms: 5_500,
            ended_ms: 6_500,
        };
        m.observe(slow, &[sighting(1, 0, "e1")]);
        assert!(m.renewing(&a, 6_500), "unchanged for 5.5 s of listings");
        assert!(m.renewing(&a, 9_000), "nothing was listed after 5.5 s");
        assert_eq!(m.live(9_000).len(), 1);
        m.observe(Listed::at(8_000), &[sighting(1, 0, "e1")]);
        assert!(
            !m.renewing(&a, 8_000),
            "a lease of listings without a change"
        );
        assert!(m.live(8_000).is_empty());
    }
}
