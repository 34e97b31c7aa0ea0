//! The primary's side of fast-start failover: whether a write may be acknowledged.
//!
//! A primary acknowledges a commit (declares its redo durable) only if every target holds it
//! durably, or, for the targets that do not, while it holds the **lease** of its active
//! observer and, under Maximum Availability, that observer's **grant** for each of them. The
//! observer records that it will not fail over to a target *before* it grants the primary to
//! go on without it; so a target the observer may fail over to holds every commit the primary
//! acknowledged.
//!
//! - The lease of observer O runs from when this member *sent* the answer that preceded O's
//!   ping (the observer sends its next ping on a connection only after reading the previous
//!   answer), for `threshold`: however late a ping arrives, the lease ends before the
//!   observer, counting from when it *received* that answer, may call the primary lost.
//! - A target is **synchronized** once the transport ships to it synchronously *and* it has
//!   acknowledged, durably, everything this primary acknowledged without it (`owed`): the
//!   redo that carried commits acknowledged under a grant may still be in flight when the
//!   transport switches to SYNC. Only then does its grant end, and only then does the primary
//!   tell the observer it is synchronized. A new primary owes every target its whole redo up
//!   to where it opened: what an earlier primary acknowledged without a target is in there.
//! - The **active observer** is the one whose lease and grants count. It changes only when its
//!   lease has lapsed, and then only once the new one reports (`following`) that every target
//!   this primary ever named an observer to names the new one, so that no target still takes
//!   a failover from the old one. The targets named an observer to (`announced_to`) and the
//!   active observer are kept on disk (`PrimaryRecord`), across restarts and handed on by a
//!   switchover: a restarted primary whose standby still names the old observer must not let
//!   another become active at once.
//! - A target this primary's routes reach through one **relay** (a far sync) holds what the
//!   relay acknowledged durably, and is synchronized once the relay is shipped to
//!   synchronously and holds what is owed the target: the relay's acknowledgements stand in
//!   for the target's, in `admit`, `refresh` and the grants alike. Sound because every
//!   failover to such a target, the observer's included, first seals the relay and takes its
//!   tail, or fails (docs/fast-start-failover.md, "Targets behind a far sync").

use std::collections::{BTreeMap, BTreeSet};

use proto::ObserverPing;

use super::reach::Reach;
use super::record::PrimaryRecord;
use super::{Position, Protection, Settings, Time};

/// The primary's fast-start failover state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Primary {
    settings: Settings,
    /// The fast-start targets other than this member, and the relays of those behind one.
    reach: Reach,
    /// What is on disk.
    record: PrimaryRecord,
    /// Per observer: when its lease began.
    lease_from: BTreeMap<String, Time>,
    /// The observer named to the targets during a hand-over, waiting for them to follow it.
    proposed: Option<String>,
    /// The targets the transport ships to synchronously now.
    shipping_sync: BTreeSet<String>,
    /// The targets that are synchronized: shipped to synchronously, holding what is owed.
    synchronized: BTreeSet<String>,
    /// The targets the active observer let this primary go on without (until synchronized).
    granted: BTreeSet<String>,
    /// Per target: the end of the last write acknowledged without it.
    owed: BTreeMap<String, Position>,
    /// Observe-only (planned maintenance): no failover can happen (every target refuses one
    /// before a primary is made observe-only, and the observers ask none of it), so a write
    /// needs no lease or grant.
    observe_only: bool,
}

/// What the primary tells the observer of itself.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrimaryView {
    /// The targets synchronized now.
    pub synchronized: Vec<String>,
    /// Targets neither synchronized nor granted: a write they lack waits for a grant.
    pub wants_unsync: Vec<String>,
    /// No lease, and some target is not synchronized: commits wait, the gate is closed.
    pub isolated: bool,
    pub all_synchronized: bool,
}

/// Whether a write may be acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    Admit,
    /// Not yet: these targets lack it, and there is no lease, or (Maximum Availability) no
    /// grant for some of them.
    Wait {
        missing: Vec<String>,
        lease: bool,
    },
}

impl Primary {
    /// A primary of `me` that opened with its redo durable up to `start`, with what its
    /// record says. Every target owes it `start`: whatever an earlier primary acknowledged
    /// without a target is in there.
    pub fn new(settings: Settings, me: &str, record: PrimaryRecord, start: Position) -> Primary {
        let reach = Reach::new(&settings, me);
        let owed = reach.targets().iter().map(|target| (target.clone(), start)).collect();
        Primary {
            settings,
            reach,
            record,
            lease_from: BTreeMap::new(),
            proposed: None,
            shipping_sync: BTreeSet::new(),
            synchronized: BTreeSet::new(),
            granted: BTreeSet::new(),
            owed,
            observe_only: false,
        }
    }

    /// Observe-only on or off. It may be turned on only once every target refuses failovers
    /// (`redoguard edit fast-start` turns the targets first), and off here before the targets.
    pub fn set_observe_only(&mut self, observe_only: bool) {
        self.observe_only = observe_only;
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn targets(&self) -> &[String] {
        self.reach.targets()
    }

    /// The targets and the relays whose acknowledgements count for them.
    pub fn reach(&self) -> &Reach {
        &self.reach
    }

    pub fn record(&self) -> &PrimaryRecord {
        &self.record
    }

    fn lease_of(&self, observer: &str, now: Time) -> bool {
        self.lease_from.get(observer).is_some_and(|from| now.since(*from) < self.settings.threshold)
    }

    /// Whether the active observer's lease holds now.
    pub fn lease_valid(&self, now: Time) -> bool {
        self.record.active.as_deref().is_some_and(|active| self.lease_of(active, now))
    }

    /// The observer whose decisions count.
    pub fn active(&self) -> Option<&str> {
        self.record.active.as_deref()
    }

    /// For status: how long ago the active observer's lease began.
    pub fn active_lease_age(&self, now: Time) -> Option<std::time::Duration> {
        let active = self.record.active.as_ref()?;
        self.lease_from.get(active).map(|from| now.since(*from))
    }

    /// An observer's ping. `lease_from` is when this member sent the answer before it on the
    /// same connection (none for a connection's first ping: no lease). A change of the active
    /// observer is persisted first; if that fails it does not happen (and this ping's grants,
    /// which would come from it, are not taken).
    pub fn note_ping(
        &mut self,
        ping: &ObserverPing,
        lease_from: Option<Time>,
        now: Time,
        persist: &mut dyn FnMut(&PrimaryRecord) -> Result<(), String>,
    ) -> Result<(), String> {
        if !self.settings.observers.contains(&ping.observer) {
            return Ok(());
        }
        match (ping.lease, lease_from) {
            (true, Some(from)) => {
                self.lease_from.insert(ping.observer.clone(), from);
            }
            // The observer no longer sees this member as its primary: its lease is withdrawn
            // at once.
            (false, _) => {
                self.lease_from.remove(&ping.observer);
            }
            (true, None) => {}
        }
        self.choose_observer(ping, now, persist)?;
        if self.record.active.as_deref() == Some(ping.observer.as_str()) {
            for target in &ping.grant_unsync {
                if self.reach.is_target(target) && !self.synchronized.contains(target) {
                    self.granted.insert(target.clone());
                }
            }
        }
        Ok(())
    }

    /// The hand-over rule: the active observer stays while its lease holds; once it has
    /// lapsed, the first observer (in priority order) with a lease is proposed to the targets,
    /// and becomes active when it says every target this primary named an observer to
    /// follows it.
    fn choose_observer(
        &mut self,
        ping: &ObserverPing,
        now: Time,
        persist: &mut dyn FnMut(&PrimaryRecord) -> Result<(), String>,
    ) -> Result<(), String> {
        if self.lease_valid(now) {
            self.proposed = None;
            return Ok(());
        }
        let candidate = self
            .settings
            .observers
            .iter()
            .find(|name| {
                Some(name.as_str()) != self.record.active.as_deref() && self.lease_of(name, now)
            })
            .cloned();
        self.proposed = candidate;
        if self.proposed.as_deref() == Some(ping.observer.as_str())
            && self.record.announced_to.iter().all(|target| ping.following.contains(target))
            && self.lease_of(&ping.observer, now)
        {
            let record = PrimaryRecord {
                active: Some(ping.observer.clone()),
                announced_to: self.record.announced_to.clone(),
            };
            persist(&record)?;
            self.record = record;
            self.proposed = None;
        }
        Ok(())
    }

    /// The observer to name in a heartbeat to `destination`: the proposed one during a
    /// hand-over, else the active one. Naming one to a target is recorded (persisted) first:
    /// if that fails, none is named.
    pub fn announce_to(
        &mut self,
        destination: &str,
        persist: &mut dyn FnMut(&PrimaryRecord) -> Result<(), String>,
    ) -> Option<String> {
        let announced = self.proposed.clone().or_else(|| self.record.active.clone())?;
        if self.reach.is_target(destination) && !self.record.announced_to.contains(destination) {
            let mut record = self.record.clone();
            record.announced_to.insert(destination.to_string());
            if persist(&record).is_err() {
                return None;
            }
            self.record = record;
        }
        Some(announced)
    }

    /// The destinations the transport ships to synchronously now (targets, and relays of
    /// targets), and how far each has acknowledged durably: which targets are synchronized (a
    /// grant ends there).
    pub fn set_shipping_sync(
        &mut self,
        shipping_sync: BTreeSet<String>,
        acknowledged: &dyn Fn(&str) -> Position,
    ) {
        self.shipping_sync = shipping_sync;
        self.refresh(acknowledged);
    }

    /// Looks again at which targets are synchronized, from how far each has acknowledged.
    pub fn refresh(&mut self, acknowledged: &dyn Fn(&str) -> Position) {
        let synchronized: BTreeSet<String> = self
            .reach
            .targets()
            .iter()
            .filter(|target| self.shipping_sync.contains(self.reach.stands_for(target)))
            .filter(|target| {
                self.owed
                    .get(*target)
                    .is_none_or(|owed| acknowledged(self.reach.stands_for(target)) >= *owed)
            })
            .cloned()
            .collect();
        self.granted.retain(|target| !synchronized.contains(target));
        self.synchronized = synchronized;
    }

    pub fn view(&self, now: Time) -> PrimaryView {
        let all_synchronized =
            self.reach.targets().iter().all(|target| self.synchronized.contains(target));
        PrimaryView {
            synchronized: self.synchronized.iter().cloned().collect(),
            wants_unsync: self
                .reach
                .targets()
                .iter()
                .filter(|target| {
                    !self.synchronized.contains(*target) && !self.granted.contains(*target)
                })
                .cloned()
                .collect(),
            isolated: !all_synchronized && !self.lease_valid(now) && !self.observe_only,
            all_synchronized,
        }
    }

    /// Whether a write that ends at `end`, held durably by the destinations in `holding`
    /// (targets, relays: a target behind a relay holds what its relay holds), may be
    /// acknowledged now. Admitted without some target, it is owed to that target: the target
    /// is not synchronized again until it has acknowledged `end`.
    pub fn admit(&mut self, end: Position, holding: &BTreeSet<String>, now: Time) -> Admission {
        let missing: Vec<String> = self
            .reach
            .targets()
            .iter()
            .filter(|target| !self.reach.holds(target, holding))
            .cloned()
            .collect();
        if missing.is_empty() {
            return Admission::Admit;
        }
        let lease = self.lease_valid(now);
        let granted = self.settings.protection != Protection::MaximumAvailability
            || missing.iter().all(|target| self.granted.contains(target));
        if !(self.observe_only || lease && granted) {
            return Admission::Wait { missing, lease };
        }
        for target in &missing {
            let owed = self.owed.entry(target.clone()).or_default();
            *owed = (*owed).max(end);
            self.synchronized.remove(target);
        }
        Admission::Admit
    }

    /// Whether a reply may be given before the write is durable anywhere (`COMMITMODE
    /// NOWAIT`): only under the active observer's lease, which ends before any observer may
    /// fail over (the timing assumption of Maximum Performance, whatever the mode: no target
    /// holds such a write when the reply leaves).
    pub fn may_reply_before_durable(&self, now: Time) -> bool {
        self.lease_valid(now) || self.observe_only
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MS: u64 = 1000;

    fn settings(targets: &[&str]) -> Settings {
        Settings {
            threshold: Duration::from_millis(500),
            lag_limit: Duration::from_secs(30),
            protection: Protection::MaximumAvailability,
            targets: targets.iter().map(|name| name.to_string()).collect(),
            observers: vec!["o1".into(), "o2".into()],
            relays: BTreeMap::new(),
        }
    }

    /// `west` behind the far sync `far` when `east` is the primary.
    fn behind_far(targets: &[&str]) -> Settings {
        let relays = BTreeMap::from([(
            "east".to_string(),
            BTreeMap::from([("west".to_string(), "far".to_string())]),
        )]);
        Settings { relays, ..settings(targets) }
    }

    fn ping(observer: &str, lease: bool) -> ObserverPing {
        ObserverPing { observer: observer.into(), lease, ..ObserverPing::default() }
    }

    fn following(observer: &str, targets: &[&str]) -> ObserverPing {
        ObserverPing {
            following: targets.iter().map(|name| name.to_string()).collect(),
            ..ping(observer, true)
        }
    }

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    fn at(seq: u64, offset: u64) -> Position {
        Position { seq, offset }
    }

    /// A disk that keeps what it is given.
    #[derive(Default)]
    struct Disk(Option<PrimaryRecord>);

    impl Disk {
        fn persist(&mut self) -> impl FnMut(&PrimaryRecord) -> Result<(), String> + '_ {
            |record| {
                self.0 = Some(record.clone());
                Ok(())
            }
        }
    }

    fn primary(targets: &[&str]) -> Primary {
        Primary::new(settings(targets), "east", PrimaryRecord::default(), at(1, 0))
    }

    /// Makes `observer` the active one at `now` (proposed, announced to the targets, followed).
    fn activate(primary: &mut Primary, disk: &mut Disk, observer: &str, now: Time) {
        primary.note_ping(&ping(observer, true), Some(now), now, &mut disk.persist()).unwrap();
        let targets = primary.targets().to_vec();
        for target in &targets {
            assert_eq!(primary.announce_to(target, &mut disk.persist()).as_deref(), Some(observer));
        }
        let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
        primary
            .note_ping(&following(observer, &targets), Some(now), now, &mut disk.persist())
            .unwrap();
        assert_eq!(primary.active(), Some(observer));
    }

    #[test]
    fn a_write_every_target_holds_needs_nothing_more() {
        let mut primary = primary(&["west", "far"]);
        assert_eq!(primary.admit(at(1, 10), &set(&["west", "far"]), Time(0)), Admission::Admit);
    }

    #[test]
    fn without_a_target_a_write_needs_the_lease_and_a_grant_for_exactly_that_target() {
        let mut disk = Disk::default();
        let mut primary = primary(&["west", "far"]);
        let now = Time(1000 * MS);
        primary.set_shipping_sync(set(&["west", "far"]), &|_| at(1, 0));
        activate(&mut primary, &mut disk, "o1", now);
        primary.set_shipping_sync(set(&["west"]), &|_| at(1, 0));
        assert_eq!(primary.view(now).wants_unsync, vec!["far".to_string()]);
        let grant =
            |target: &str| ObserverPing { grant_unsync: vec![target.into()], ..ping("o1", true) };
        primary.note_ping(&grant("west"), Some(now), now, &mut disk.persist()).unwrap();
        assert!(matches!(primary.admit(at(1, 10), &set(&["west"]), now), Admission::Wait { .. }));
        primary.note_ping(&grant("far"), Some(now), now, &mut disk.persist()).unwrap();
        assert_eq!(primary.admit(at(1, 10), &set(&["west"]), now), Admission::Admit);
    }

    /// Issue 29's third hole: the transport ships to `far` synchronously again, but the write
    /// acknowledged under the grant may still be in flight. `far` is not synchronized (and its
    /// grant stands) until it has acknowledged that write.
    #[test]
    fn a_target_is_synchronized_only_once_it_holds_what_was_acknowledged_without_it() {
        let mut disk = Disk::default();
        let mut primary = primary(&["far"]);
        let now = Time(1000 * MS);
        primary.set_shipping_sync(set(&["far"]), &|_| at(1, 0));
        activate(&mut primary, &mut disk, "o1", now);
        primary.set_shipping_sync(set(&[]), &|_| at(1, 0));
        let grant = ObserverPing { grant_unsync: vec!["far".into()], ..ping("o1", true) };
        primary.note_ping(&grant, Some(now), now, &mut disk.persist()).unwrap();
        assert_eq!(primary.admit(at(1, 500), &set(&[]), now), Admission::Admit);
        // Shipping SYNC again, but far has acknowledged only up to 1:200.
        primary.set_shipping_sync(set(&["far"]), &|_| at(1, 200));
        let view = primary.view(now);
        assert!(view.synchronized.is_empty() && view.wants_unsync.is_empty(), "{view:?}");
        // The grant stands meanwhile: later writes far lacks are still admitted under it.
        assert_eq!(primary.admit(at(1, 600), &set(&[]), now), Admission::Admit);
        primary.refresh(&|_| at(1, 500));
        assert!(primary.view(now).synchronized.is_empty(), "1:600 is owed too");
        primary.refresh(&|_| at(1, 600));
        assert_eq!(primary.view(now).synchronized, vec!["far".to_string()]);
        // The grant ended with it: the next write far lacks waits for a new one.
        assert!(matches!(primary.admit(at(1, 700), &set(&[]), now), Admission::Wait { .. }));
    }

    #[test]
    fn a_new_primary_owes_every_target_its_redo_up_to_where_it_opened() {
        let mut primary =
            Primary::new(settings(&["west"]), "east", PrimaryRecord::default(), at(4, 100));
        primary.set_shipping_sync(set(&["west"]), &|_| at(4, 0));
        assert!(!primary.view(Time(0)).all_synchronized);
        primary.refresh(&|_| at(4, 100));
        assert!(primary.view(Time(0)).all_synchronized);
    }

    #[test]
    fn the_lease_runs_for_the_threshold_and_a_first_ping_gives_none() {
        let mut disk = Disk::default();
        let mut primary = Primary::new(
            Settings { protection: Protection::MaximumPerformance, ..settings(&["west"]) },
            "east",
            PrimaryRecord::default(),
            at(1, 0),
        );
        let now = Time(1000 * MS);
        activate(&mut primary, &mut disk, "o1", now);
        assert_eq!(primary.admit(at(1, 1), &set(&[]), now), Admission::Admit);
        let later = now.plus(Duration::from_millis(500));
        assert!(matches!(primary.admit(at(1, 2), &set(&[]), later), Admission::Wait { .. }));
        // A ping on a new connection renews nothing.
        primary.note_ping(&ping("o1", true), None, later, &mut disk.persist()).unwrap();
        assert!(primary.view(later).isolated);
        primary.note_ping(&ping("o1", true), Some(later), later, &mut disk.persist()).unwrap();
        assert!(!primary.view(later).isolated);
        // A ping without a lease withdraws it at once.
        primary.note_ping(&ping("o1", false), Some(later), later, &mut disk.persist()).unwrap();
        assert!(matches!(primary.admit(at(1, 3), &set(&[]), later), Admission::Wait { .. }));
    }

    #[test]
    fn a_new_observer_takes_over_only_after_the_lease_lapsed_and_the_targets_follow_it() {
        let mut disk = Disk::default();
        let mut primary = primary(&["west", "far"]);
        let now = Time(1000 * MS);
        activate(&mut primary, &mut disk, "o1", now);
        primary
            .note_ping(&following("o2", &["west", "far"]), Some(now), now, &mut disk.persist())
            .unwrap();
        assert_eq!(primary.active(), Some("o1"));
        assert_eq!(primary.announce_to("west", &mut disk.persist()).as_deref(), Some("o1"));
        let later = now.plus(Duration::from_millis(600));
        primary.note_ping(&ping("o2", true), Some(later), later, &mut disk.persist()).unwrap();
        assert_eq!(primary.announce_to("west", &mut disk.persist()).as_deref(), Some("o2"));
        assert_eq!(primary.active(), Some("o1"));
        assert!(primary.view(later).isolated);
        primary
            .note_ping(&following("o2", &["west"]), Some(later), later, &mut disk.persist())
            .unwrap();
        assert_eq!(primary.active(), Some("o1"), "far still names o1");
        primary
            .note_ping(&following("o2", &["west", "far"]), Some(later), later, &mut disk.persist())
            .unwrap();
        assert_eq!(primary.active(), Some("o2"));
        assert_eq!(disk.0.as_ref().and_then(|record| record.active.as_deref()), Some("o2"));
        assert!(!primary.view(later).isolated);
    }

    #[test]
    fn a_primary_that_named_no_observer_yet_takes_the_first_at_once() {
        let mut disk = Disk::default();
        let mut primary = primary(&["west"]);
        primary.note_ping(&ping("o2", true), Some(Time(0)), Time(0), &mut disk.persist()).unwrap();
        assert_eq!(primary.active(), Some("o2"));
    }

    /// Issue 29's second hole: a primary restarted from its record still knows whom it named
    /// an observer to; another observer is not active until they follow it.
    #[test]
    fn a_restarted_primary_keeps_the_hand_over_rule() {
        let mut disk = Disk::default();
        let mut primary = primary(&["west"]);
        activate(&mut primary, &mut disk, "o1", Time(0));
        let record = disk.0.clone().unwrap();
        assert!(record.announced_to.contains("west"));
        let mut restarted = Primary::new(settings(&["west"]), "east", record, at(1, 0));
        let now = Time(5_000 * MS);
        restarted.note_ping(&ping("o2", true), Some(now), now, &mut disk.persist()).unwrap();
        assert_eq!(restarted.active(), Some("o1"), "west has not heard of o2");
        assert!(restarted.view(now).isolated);
    }

    #[test]
    fn nothing_is_named_or_changed_when_the_record_cannot_be_written() {
        let mut primary = primary(&["west"]);
        let mut failing = |_: &PrimaryRecord| Err("disk full".to_string());
        assert!(
            primary.note_ping(&ping("o1", true), Some(Time(0)), Time(0), &mut failing).is_err()
        );
        assert_eq!(primary.active(), None);
        let mut disk = Disk::default();
        primary.note_ping(&ping("o1", true), Some(Time(0)), Time(0), &mut disk.persist()).unwrap();
        assert_eq!(primary.announce_to("west", &mut failing), None);
        assert!(primary.record().announced_to.is_empty());
    }

    #[test]
    fn a_target_behind_a_relay_holds_what_its_relay_acknowledged() {
        let mut primary =
            Primary::new(behind_far(&["west"]), "east", PrimaryRecord::default(), at(1, 0));
        let reach = primary.reach();
        assert_eq!(reach.relay_of("west"), Some("far"));
        assert_eq!(reach.behind("far"), vec!["west".to_string()]);
        assert!(reach.counts("far") && reach.counts("west") && !reach.counts("south"));
        // Shipping SYNC to the far sync, which holds what is owed: west is synchronized.
        primary.set_shipping_sync(set(&["far"]), &|name| {
            if name == "far" { at(1, 0) } else { at(0, 0) }
        });
        assert_eq!(primary.view(Time(0)).synchronized, vec!["west".to_string()]);
        // The far sync's acknowledgement is west's; west's own (lagging, ASYNC) is not needed.
        assert_eq!(primary.admit(at(1, 10), &set(&["far"]), Time(0)), Admission::Admit);
        assert!(primary.reach().all_hold(&set(&["far"])));
        // Neither holds it: no lease, no grant, it waits.
        assert_eq!(
            primary.admit(at(1, 20), &set(&[]), Time(0)),
            Admission::Wait { missing: vec!["west".into()], lease: false }
        );
        // Shipping SYNC to west itself does not make it synchronized: only its relay counts.
        primary.set_shipping_sync(set(&["west"]), &|_| at(1, 0));
        assert!(primary.view(Time(0)).synchronized.is_empty());
    }

    /// Grants and `owed` work per target as before, with the relay's acknowledgements standing
    /// in for the target's: after a write acknowledged under a grant, west is synchronized
    /// again only once the far sync has acknowledged that write.
    #[test]
    fn behind_a_relay_a_target_is_synchronized_again_only_once_its_relay_holds_what_is_owed() {
        let mut disk = Disk::default();
        let mut primary =
            Primary::new(behind_far(&["west"]), "east", PrimaryRecord::default(), at(1, 0));
        let now = Time(1000 * MS);
        primary.set_shipping_sync(set(&["far"]), &|_| at(1, 0));
        activate(&mut primary, &mut disk, "o1", now);
        assert!(disk.0.as_ref().unwrap().announced_to.contains("west"));
        // The far sync times out: west wants a grant, gets it, a write goes on without it.
        primary.set_shipping_sync(set(&[]), &|_| at(1, 0));
        assert_eq!(primary.view(now).wants_unsync, vec!["west".to_string()]);
        let grant = ObserverPing { grant_unsync: vec!["west".into()], ..ping("o1", true) };
        primary.note_ping(&grant, Some(now), now, &mut disk.persist()).unwrap();
        assert_eq!(primary.admit(at(1, 500), &set(&[]), now), Admission::Admit);
        // Shipping to the far sync SYNC again; it has acknowledged up to 1:200 only. West
        // itself holding 1:500 (an alternate route) does not count for synchronized.
        primary.set_shipping_sync(set(&["far"]), &|name| {
            if name == "far" { at(1, 200) } else { at(1, 500) }
        });
        assert!(primary.view(now).synchronized.is_empty());
        primary.refresh(&|_| at(1, 500));
        assert_eq!(primary.view(now).synchronized, vec!["west".to_string()]);
        // The grant ended: the next write the far sync lacks waits for a new one.
        assert!(matches!(primary.admit(at(1, 700), &set(&[]), now), Admission::Wait { .. }));
    }
}
