//! The observer's decisions on hand-made answers and a driven clock.

use proto::{FastStartMode, Position as WirePosition, RoleInfo};

use super::*;

const SECOND: u64 = 1_000_000;

fn settings() -> ObserverSettings {
    ObserverSettings {
        me: "obs1".into(),
        members: vec!["east".into(), "west".into()],
        fast_start: Settings {
            threshold: Duration::from_secs(2),
            lag_limit: Duration::from_secs(30),
            protection: Protection::MaximumAvailability,
            targets: vec!["east".into(), "west".into()],
            observers: vec!["obs1".into(), "obs2".into()],
            relays: Default::default(),
        },
        enabled: true,
        auto_reinstate: true,
    }
}

fn pong(
    member: &str,
    role: WireRole,
    incarnation: u32,
    synchronized_targets: &[&str],
) -> ObserverPong {
    let info = RoleInfo {
        member: member.into(),
        role,
        database_id: 7,
        incarnation,
        fenced_incarnation: 0,
        primary: "east".into(),
        position: WirePosition { current_seq: 1, current_offset: 100, ..WirePosition::default() },
        durable_scn: 0,
        time_us: 0,
        history: Vec::new(),
    };
    ObserverPong {
        active_observer: "obs1".into(),
        synchronized: true,
        targets_synchronized: synchronized_targets.iter().map(|name| name.to_string()).collect(),
        mode: FastStartMode::Enabled,
        ..ObserverPong::empty(info)
    }
}

/// A disk that keeps the last record written, and can be made to fail.
#[derive(Default)]
struct Disk {
    record: Option<ObserverRecord>,
    full: bool,
}

impl Disk {
    fn persist(&mut self) -> impl FnMut(&ObserverRecord) -> Result<(), String> + '_ {
        |record| {
            if self.full {
                return Err("No space left on device".into());
            }
            self.record = Some(record.clone());
            Ok(())
        }
    }
}

fn answer(observer: &mut Observer, disk: &mut Disk, pong: ObserverPong, now: Time) {
    let name = pong.info.member.clone();
    observer.note(
        &name,
        Outcome::Answered { pong: Box::new(pong), to_failover: false },
        now,
        &mut disk.persist(),
    );
}

/// East the primary of incarnation 1, west its synchronized standby following obs1, and obs1
/// active: armed, at time 10 s.
fn armed() -> (Observer, Disk, Time) {
    let mut disk = Disk::default();
    let mut observer = Observer::new(settings(), ObserverRecord::default());
    let now = Time(10 * SECOND);
    answer(&mut observer, &mut disk, pong("east", WireRole::Primary, 1, &["west"]), now);
    answer(&mut observer, &mut disk, pong("west", WireRole::Standby, 1, &[]), now);
    observer.step(now, &mut disk.persist());
    assert_eq!(observer.primary(), Some("east"));
    assert_eq!(disk.record.as_ref().and_then(|record| record.primary.as_deref()), Some("east"));
    (observer, disk, now)
}

/// East silent for 3 s; west answers; one step.
fn east_silent(observer: &mut Observer, disk: &mut Disk, now: Time) -> Time {
    let later = now.plus(Duration::from_secs(3));
    answer(observer, disk, pong("west", WireRole::Standby, 1, &[]), later);
    observer.step(later, &mut disk.persist());
    later
}

#[test]
fn an_armed_observer_reports_the_target_and_fails_over_to_it() {
    let (mut observer, mut disk, now) = armed();
    assert_eq!(observer.ready(now), ["west"]);
    let later = east_silent(&mut observer, &mut disk, now);
    assert_eq!(observer.failing_over_to(), Some("west"));
    // The decision is on disk before the request goes.
    assert_eq!(
        disk.record.as_ref().unwrap().failover.as_ref().map(|f| f.to.as_str()),
        Some("west")
    );
    let ping = observer.ping_for("west", later, &mut disk.persist());
    assert!(ping.failover);
    assert_eq!((ping.failover_from.as_str(), ping.failover_incarnation), ("east", 1));
    // The old primary gets no lease from now on.
    assert!(!observer.ping_for("east", later, &mut disk.persist()).lease);
}

/// Issue 29's first hole: an observer restarted after a failover, which then sees only the old
/// primary, must not lease it.
#[test]
fn a_restarted_observer_never_leases_the_primary_it_failed_over_from() {
    let (mut observer, mut disk, now) = armed();
    let later = east_silent(&mut observer, &mut disk, now);
    let record = disk.record.clone().unwrap();
    // Restarted before west answered as the new primary: the decision stands.
    let mut restarted = Observer::new(settings(), record);
    answer(&mut restarted, &mut disk, pong("east", WireRole::Primary, 1, &[]), later);
    restarted.step(later, &mut disk.persist());
    assert!(!restarted.ping_for("east", later, &mut disk.persist()).lease);
    // It asks west again, and once west answers as primary of 2, that is on disk.
    assert!(restarted.ping_for("west", later, &mut disk.persist()).failover);
    answer(&mut restarted, &mut disk, pong("west", WireRole::Primary, 2, &[]), later);
    restarted.step(later, &mut disk.persist());
    assert_eq!(restarted.primary(), Some("west"));
    assert_eq!(disk.record.as_ref().unwrap().incarnation, 2);
    // Restarted again, it sees only east (incarnation 1): no lease, and the news.
    let mut again = Observer::new(settings(), disk.record.clone().unwrap());
    answer(&mut again, &mut disk, pong("east", WireRole::Primary, 1, &[]), later);
    again.step(later, &mut disk.persist());
    assert_eq!(again.primary(), Some("west"));
    let ping = again.ping_for("east", later, &mut disk.persist());
    assert!(!ping.lease);
    assert_eq!((ping.newer_incarnation, ping.new_primary.as_str()), (2, "west"));
}

#[test]
fn a_failover_that_gets_no_answer_is_asked_again_and_no_other_target_is_chosen() {
    let mut settings = settings();
    settings.members.push("south".into());
    settings.fast_start.targets.push("south".into());
    let mut disk = Disk::default();
    let mut observer = Observer::new(settings, ObserverRecord::default());
    let now = Time(10 * SECOND);
    answer(&mut observer, &mut disk, pong("east", WireRole::Primary, 1, &["west", "south"]), now);
    answer(&mut observer, &mut disk, pong("west", WireRole::Standby, 1, &[]), now);
    answer(&mut observer, &mut disk, pong("south", WireRole::Standby, 1, &[]), now);
    observer.step(now, &mut disk.persist());
    let later = now.plus(Duration::from_secs(3));
    answer(&mut observer, &mut disk, pong("west", WireRole::Standby, 1, &[]), later);
    answer(&mut observer, &mut disk, pong("south", WireRole::Standby, 1, &[]), later);
    observer.step(later, &mut disk.persist());
    assert_eq!(observer.failing_over_to(), Some("west"));
    assert!(observer.ping_for("west", later, &mut disk.persist()).failover);
    // The connection breaks: no answer. West may be taking over; it is asked again later,
    // and south never.
    observer.note(
        "west",
        Outcome::Unreachable { refused: false, error: "timed out".into() },
        later,
        &mut disk.persist(),
    );
    let much_later = later.plus(Duration::from_secs(200));
    answer(&mut observer, &mut disk, pong("south", WireRole::Standby, 1, &[]), much_later);
    observer.step(much_later, &mut disk.persist());
    assert_eq!(observer.failing_over_to(), Some("west"));
    assert!(!observer.ping_for("south", much_later, &mut disk.persist()).failover);
    assert!(observer.ping_for("west", much_later, &mut disk.persist()).failover);
    assert!(!observer.ping_for("east", much_later, &mut disk.persist()).lease);
}

#[test]
fn a_final_refusal_ends_the_failover_and_the_primary_is_leased_again() {
    let (mut observer, mut disk, now) = armed();
    let later = east_silent(&mut observer, &mut disk, now);
    assert!(observer.ping_for("west", later, &mut disk.persist()).failover);
    // A refusal that is not final (a role change under way) decides nothing.
    let busy = ObserverPong {
        refusal: "a role change is under way".into(),
        ..pong("west", WireRole::Standby, 1, &[])
    };
    observer.note(
        "west",
        Outcome::Answered { pong: Box::new(busy), to_failover: true },
        later,
        &mut disk.persist(),
    );
    assert_eq!(observer.failing_over_to(), Some("west"));
    let again = later.plus(REQUEST_AGAIN_AFTER);
    assert!(observer.ping_for("west", again, &mut disk.persist()).failover);
    let refusal = ObserverPong {
        refusal: "this standby heard from its primary 0.1 s ago".into(),
        refusal_final: true,
        ..pong("west", WireRole::Standby, 1, &[])
    };
    // Not recorded (disk full): the decision stands, and east gets no lease.
    disk.full = true;
    observer.note(
        "west",
        Outcome::Answered { pong: Box::new(refusal.clone()), to_failover: true },
        again,
        &mut disk.persist(),
    );
    assert_eq!(observer.failing_over_to(), Some("west"));
    disk.full = false;
    let third = again.plus(REQUEST_AGAIN_AFTER);
    assert!(observer.ping_for("west", third, &mut disk.persist()).failover);
    observer.note(
        "west",
        Outcome::Answered { pong: Box::new(refusal), to_failover: true },
        third,
        &mut disk.persist(),
    );
    assert_eq!(observer.failing_over_to(), None);
    assert!(disk.record.as_ref().unwrap().failover.is_none());
    assert!(observer.ping_for("east", third, &mut disk.persist()).lease);
}

/// The case of stop 22's CI failure: the standby says it is synchronized again, but since the
/// observer granted the primary to go on without it the primary has not said so.
#[test]
fn a_target_granted_away_is_not_ready_until_the_primary_calls_it_synchronized() {
    let (mut observer, mut disk, now) = armed();
    answer(
        &mut observer,
        &mut disk,
        ObserverPong {
            wants_unsync: vec!["west".into()],
            ..pong("east", WireRole::Primary, 1, &[])
        },
        now,
    );
    let ping = observer.ping_for("east", now, &mut disk.persist());
    assert_eq!(ping.grant_unsync, ["west"]);
    // On disk before the ping was returned.
    assert!(disk.record.as_ref().unwrap().ineligible.contains("west"));
    assert!(observer.ready(now).is_empty());
    east_silent(&mut observer, &mut disk, now);
    assert_eq!(observer.failing_over_to(), None);
    assert!(observer.last_event().unwrap().contains("no target is ready"));
}

#[test]
fn a_grant_that_cannot_be_recorded_is_not_given() {
    let (mut observer, mut disk, now) = armed();
    answer(
        &mut observer,
        &mut disk,
        ObserverPong {
            wants_unsync: vec!["west".into()],
            ..pong("east", WireRole::Primary, 1, &[])
        },
        now,
    );
    disk.full = true;
    let ping = observer.ping_for("east", now, &mut disk.persist());
    assert!(ping.lease && ping.grant_unsync.is_empty());
    assert!(!observer.record().ineligible.contains("west"));
}

#[test]
fn a_target_that_does_not_hold_the_primarys_end_is_not_failed_over_to_yet() {
    let (mut observer, mut disk, now) = armed();
    let later = now.plus(Duration::from_secs(3));
    let mut behind = pong("west", WireRole::Standby, 1, &[]);
    behind.info.position.current_offset = 50;
    answer(&mut observer, &mut disk, behind, later);
    observer.step(later, &mut disk.persist());
    assert_eq!(observer.failing_over_to(), None);
    answer(&mut observer, &mut disk, pong("west", WireRole::Standby, 1, &[]), later);
    observer.step(later, &mut disk.persist());
    assert_eq!(observer.failing_over_to(), Some("west"));
}

#[test]
fn a_restarted_observer_fails_over_to_no_one_before_the_primary_answers_it() {
    let (_, disk, now) = armed();
    let mut disk = Disk { record: disk.record, full: false };
    let mut restarted = Observer::new(settings(), disk.record.clone().unwrap());
    let later = now.plus(Duration::from_secs(30));
    answer(&mut restarted, &mut disk, pong("west", WireRole::Standby, 1, &[]), later);
    restarted.step(later, &mut disk.persist());
    assert_eq!(restarted.failing_over_to(), None);
}

#[test]
fn an_observe_only_primary_is_not_failed_over() {
    let (mut observer, mut disk, now) = armed();
    answer(
        &mut observer,
        &mut disk,
        ObserverPong {
            mode: FastStartMode::ObserveOnly,
            ..pong("east", WireRole::Primary, 1, &["west"])
        },
        now,
    );
    east_silent(&mut observer, &mut disk, now);
    assert_eq!(observer.failing_over_to(), None);
}

#[test]
fn a_target_is_not_ready_unless_every_condition_holds() {
    type Spoil = fn(&mut ObserverPong, &mut ObserverPong);
    let spoils: [(&str, Spoil); 5] = [
        ("the standby is not synchronized", |_, west| west.synchronized = false),
        ("the primary does not call it synchronized", |east, _| east.targets_synchronized.clear()),
        ("it follows another observer", |_, west| west.active_observer = "obs2".into()),
        ("it is of another incarnation", |_, west| west.info.incarnation = 2),
        ("the primary names another observer active", |east, _| {
            east.active_observer = "obs2".into()
        }),
    ];
    for (what, spoil) in spoils {
        let (mut observer, mut disk, now) = armed();
        let mut east = pong("east", WireRole::Primary, 1, &["west"]);
        let mut west = pong("west", WireRole::Standby, 1, &[]);
        spoil(&mut east, &mut west);
        answer(&mut observer, &mut disk, east, now);
        answer(&mut observer, &mut disk, west.clone(), now);
        observer.step(now, &mut disk.persist());
        assert!(observer.ready(now).is_empty(), "{what}: reported ready");
        let later = now.plus(Duration::from_secs(3));
        answer(&mut observer, &mut disk, west, later);
        observer.step(later, &mut disk.persist());
        assert_eq!(observer.failing_over_to(), None, "{what}: failed over");
    }
}

#[test]
fn of_two_primaries_in_one_incarnation_the_one_that_answered_last_is_the_primary() {
    let (mut observer, mut disk, now) = armed();
    // A switchover: west answers as the primary of incarnation 1; east's last answer (as the
    // primary) is older.
    let later = now.plus(Duration::from_millis(100));
    answer(&mut observer, &mut disk, pong("west", WireRole::Primary, 1, &["east"]), later);
    let (effects, _) = observer.step(later, &mut disk.persist());
    assert_eq!(observer.primary(), Some("west"));
    assert_eq!(effects, [Effect::SwitchMaster { old: "east".into(), new: "west".into() }]);
}

#[test]
fn a_member_of_another_database_is_not_taken_for_one_of_the_configuration() {
    let (mut observer, mut disk, now) = armed();
    assert_eq!(disk.record.as_ref().unwrap().database_id, 7);
    let mut stranger = pong("west", WireRole::Primary, 5, &[]);
    stranger.info.database_id = 8;
    answer(&mut observer, &mut disk, stranger, now);
    observer.step(now, &mut disk.persist());
    assert_eq!(observer.primary(), Some("east"));
    assert!(
        observer.views()["west"].error.as_deref().unwrap().contains("remove the observer's record")
    );
}

/// Issue 29, item 8: the observer logged "reinstating 'east' as a standby of 'east'" when its
/// record of the primary was stale. It reinstates only a fenced member other than the primary,
/// under a primary that answers as such.
#[test]
fn a_reinstate_is_asked_only_under_a_primary_that_answers_as_such() {
    let (mut observer, mut disk, now) = armed();
    // East answers fenced, and the observer still knows it as the primary: no reinstate.
    let mut fenced = pong("east", WireRole::Primary, 1, &[]);
    fenced.info.fenced_incarnation = 2;
    answer(&mut observer, &mut disk, fenced.clone(), now);
    let (effects, _) = observer.step(now, &mut disk.persist());
    assert!(
        effects.iter().all(|effect| !matches!(effect, Effect::Reinstate { .. })),
        "{effects:?}"
    );
    // West answers as the primary of incarnation 2: east is reinstated under it.
    answer(&mut observer, &mut disk, pong("west", WireRole::Primary, 2, &[]), now);
    let (effects, _) = observer.step(now, &mut disk.persist());
    assert!(
        effects.contains(&Effect::Reinstate { old: "east".into(), primary: "west".into() }),
        "{effects:?}"
    );
}

/// bench chaos's finding: the target refused the failover (it still heard from east), then a
/// switchover made it the primary of the same incarnation. The failover is moot: the observer
/// names west, on disk, and counts no failover; east is no longer asked of.
#[test]
fn a_switchover_while_a_failover_is_pending_makes_the_failover_moot() {
    let (mut observer, mut disk, now) = armed();
    let later = east_silent(&mut observer, &mut disk, now);
    assert_eq!(observer.failing_over_to(), Some("west"));
    // East answers again, still the primary: that alone ends nothing.
    answer(&mut observer, &mut disk, pong("east", WireRole::Primary, 1, &["west"]), later);
    observer.step(later, &mut disk.persist());
    assert_eq!(observer.failing_over_to(), Some("west"));
    let after = later.plus(Duration::from_millis(500));
    answer(&mut observer, &mut disk, pong("west", WireRole::Primary, 1, &["east"]), after);
    let (effects, _) = observer.step(after, &mut disk.persist());
    assert_eq!(observer.failing_over_to(), None);
    assert_eq!(observer.primary(), Some("west"));
    assert_eq!(effects, [Effect::SwitchMaster { old: "east".into(), new: "west".into() }]);
    let record = disk.record.as_ref().unwrap();
    assert_eq!((record.primary.as_deref(), record.incarnation), (Some("west"), 1));
    assert!(record.failover.is_none());
    assert!(observer.failovers.is_empty());
}

/// Maximum Performance: a target is ready only with both its lags within `lag_limit` (30 s
/// here), whatever it says of being synchronized.
#[test]
fn under_maximum_performance_a_target_past_lag_limit_is_not_ready() {
    let mut settings = settings();
    settings.fast_start.protection = Protection::MaximumPerformance;
    let mut disk = Disk::default();
    let mut observer = Observer::new(settings, ObserverRecord::default());
    let now = Time(10 * SECOND);
    answer(&mut observer, &mut disk, pong("east", WireRole::Primary, 1, &["west"]), now);
    let lagging = |transport_lag_ms, apply_lag_ms| ObserverPong {
        transport_lag_ms,
        apply_lag_ms,
        ..pong("west", WireRole::Standby, 1, &[])
    };
    for (transport, apply, ready) in
        [(29_000, 0, true), (31_000, 0, false), (0, 31_000, false), (30_000, 30_000, true)]
    {
        answer(&mut observer, &mut disk, lagging(transport, apply), now);
        observer.step(now, &mut disk.persist());
        let expected: &[&str] = if ready { &["west"] } else { &[] };
        assert_eq!(observer.ready(now), expected, "transport {transport} ms, apply {apply} ms");
    }
    // Lost with west 31 s behind: no failover to it.
    answer(&mut observer, &mut disk, lagging(31_000, 0), now);
    let later = now.plus(Duration::from_secs(10));
    answer(&mut observer, &mut disk, lagging(31_000, 0), later);
    observer.step(later, &mut disk.persist());
    assert_eq!(observer.failing_over_to(), None);
    // The same silence with west within the limit: it is failed over to.
    answer(&mut observer, &mut disk, lagging(29_000, 0), later);
    observer.step(later, &mut disk.persist());
    assert_eq!(observer.failing_over_to(), Some("west"));
}

/// A target behind a far sync: the far sync's answer shows the primary's durable end (the
/// target takes the far sync's tail before it opens), not the target's own, which lags.
#[test]
fn behind_a_relay_the_relays_answer_shows_the_primarys_end() {
    let mut settings = settings();
    settings.members.push("far".into());
    settings.fast_start.relays = std::collections::BTreeMap::from([(
        "east".to_string(),
        std::collections::BTreeMap::from([("west".to_string(), "far".to_string())]),
    )]);
    let at = |pong: ObserverPong, offset: u64| {
        let mut pong = pong;
        pong.info.position.current_offset = offset;
        pong
    };
    let far = |offset| {
        let mut pong = at(pong("far", WireRole::Standby, 1, &[]), offset);
        pong.active_observer = String::new();
        pong.synchronized = false;
        pong
    };
    for (far_holds, fails_over) in [(100, true), (90, false)] {
        let mut disk = Disk::default();
        let mut observer = Observer::new(settings.clone(), ObserverRecord::default());
        let now = Time(10 * SECOND);
        answer(
            &mut observer,
            &mut disk,
            at(pong("east", WireRole::Primary, 1, &["west"]), 100),
            now,
        );
        answer(&mut observer, &mut disk, at(pong("west", WireRole::Standby, 1, &[]), 40), now);
        answer(&mut observer, &mut disk, far(far_holds), now);
        observer.step(now, &mut disk.persist());
        let later = now.plus(Duration::from_secs(3));
        answer(&mut observer, &mut disk, at(pong("west", WireRole::Standby, 1, &[]), 40), later);
        answer(&mut observer, &mut disk, far(far_holds), later);
        observer.step(later, &mut disk.persist());
        assert_eq!(
            observer.failing_over_to(),
            fails_over.then_some("west"),
            "the far sync holds 1:{far_holds} of east's 1:100"
        );
    }
}
