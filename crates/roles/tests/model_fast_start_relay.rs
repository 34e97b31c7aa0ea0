//! Model checking of fast-start failover to a target behind a far sync with stateright:
//! `model/fast_start_relay.rs` is the model; this file the checks (docs/fast-start-failover.md,
//! "Targets behind a far sync", gives the bounds and the figures).
//!
//! - Today's logic: every write P acknowledged is on T when the observer's failover opens it,
//!   and once T opened P acknowledges no write T lacks, in every reachable state within the
//!   bound, with P crashing (for good, or restarting with what it keeps on disk), F crashing
//!   and restarting, links cut one way, messages lost and reordered.
//! - With a step missing (the failover opening T without F's seal and tail; P calling T
//!   synchronized once F is shipped to SYNC again, before F holds what was acknowledged
//!   without it, and the observer not comparing F's position; P restarting without its
//!   record, with a second observer), the checker finds a counterexample.
//! - A hole in the old logic (`WordPassedOnWhileFailingOver`), found with P's restart and a
//!   second observer (`restart_during_the_tail`; the checker's hunts for it, with the old logic
//!   and with today's, run in CI): T, asked by O and taking F's tail, still takes P's word
//!   through F, so it names O2, O2 becomes active and grants T away, P acknowledges a write F
//!   lacks, and the seal then reaches F: T opens without it.

#[path = "model/fast_start_relay.rs"]
mod fast_start_relay;
#[path = "model/run.rs"]
mod run;

use std::time::Instant;

use fast_start_relay::{
    Action, Body, Config, F, FAILS_OVER, FastStartRelay, NOTHING_LOST, ONE_PRIMARY, P, T, Variant,
    Word, name,
};
use std::collections::BTreeSet;

use stateright::{Checker, HasDiscoveries, Model};

type Trace = stateright::Path<fast_start_relay::State, Action>;

struct Run {
    /// The depth bound (none: the whole space).
    bound: Option<usize>,
    /// A variant's run, which stops at its first counterexample.
    hunting: bool,
    unique: usize,
    depth: usize,
    seconds: f64,
    exhausted: bool,
    discoveries: Vec<(&'static str, Trace)>,
}

fn explore(config: Config, depth: Option<usize>) -> Run {
    let hunting = config.variant != Variant::Current;
    explore_hunting(config, depth, hunting)
}

/// `explore`; `hunting`: done at the first counterexample of either property.
fn explore_hunting(config: Config, depth: Option<usize>, hunting: bool) -> Run {
    let started = Instant::now();
    let mut checker =
        FastStartRelay { config }.checker().threads(run::threads()).timeout(run::budget());
    if let Some(depth) = depth {
        checker = checker.target_max_depth(depth);
    }
    if hunting {
        // A variant: done at the first (shortest) counterexample.
        checker =
            checker.finish_when(HasDiscoveries::AnyOf(BTreeSet::from([NOTHING_LOST, ONE_PRIMARY])));
    }
    let checker = checker.spawn_bfs().join();
    let discoveries = [NOTHING_LOST, ONE_PRIMARY, FAILS_OVER]
        .into_iter()
        .filter_map(|name| checker.discovery(name).map(|path| (name, path)))
        .collect();
    Run {
        bound: depth,
        hunting,
        unique: checker.unique_state_count(),
        depth: checker.max_depth(),
        seconds: started.elapsed().as_secs_f64(),
        exhausted: checker.is_done() && started.elapsed() < run::budget(),
        discoveries,
    }
}

impl Run {
    fn found(&self, name: &str) -> Option<&Trace> {
        self.discoveries.iter().find(|(found, _)| *found == name).map(|(_, path)| path)
    }

    fn summary(&self, what: &str) -> String {
        format!(
            "{what}: {} unique states, paths up to {} steps, {}in {:.1} s",
            self.unique,
            self.depth,
            match (self.exhausted && !self.hunting, self.bound) {
                _ if self.hunting => "breadth first to the first counterexample, ".to_string(),
                (true, Some(bound)) => format!("every state within {bound} steps, "),
                (true, None) => "every reachable state, ".to_string(),
                (false, _) => "NOT exhausted, ".to_string(),
            },
            self.seconds
        )
    }
}

fn describe(action: &Action) -> String {
    match action {
        Action::Write => "a client writes on P".into(),
        Action::Ship => "P sends its redo to F".into(),
        Action::Heartbeat => "P sends F a heartbeat (its word for T)".into(),
        Action::Acknowledge => "P acknowledges its next write".into(),
        Action::DropSync => "P drops F from SYNC (a timeout)".into(),
        Action::ShipSync => "P ships to F SYNC again".into(),
        Action::Forward => "F forwards its redo to T".into(),
        Action::ForwardBeat => "F sends T a heartbeat (passing P's word on)".into(),
        Action::Deliver(message) => {
            let body = match message.body {
                Body::Redo { end } => format!("redo up to write {end}"),
                Body::Beat { word } => format!("P's word ({})", word_of(Some(word))),
                Body::Ack { end } => format!("an acknowledgement up to write {end}"),
                Body::Forward { boot, end } => format!("redo up to write {end} (session {boot})"),
                Body::ForwardBeat { boot, word } => {
                    format!("F's heartbeat ({}, session {boot})", word_of(word))
                }
                Body::Seal => "the seal".into(),
                Body::Sealed { end } => format!("the seal's answer (up to write {end})"),
            };
            let verb = if matches!(action, Action::Deliver(_)) {
                "reaches"
            } else {
                "is lost on the way to"
            };
            format!("{body} from {} {verb} {}", name(message.from), name(message.to))
        }
        Action::Ping { to, answered } => {
            format!("O pings {}{}", name(*to), if *answered { "" } else { " (the answer is lost)" })
        }
        Action::PingSecond { answered } => {
            format!("O2 pings P{}", if *answered { "" } else { " (the answer is lost)" })
        }
        Action::Decide => "O decides P is lost: it fails over to T (recorded)".into(),
        Action::Ask => "O asks T to fail over".into(),
        Action::Open => "T holds F's tail: it opens as the primary".into(),
        Action::GiveUp => "T gives up waiting for the tail (not final)".into(),
        Action::Crash(node) => format!("{} crashes", name(*node)),
        Action::Restart(node) => format!("{} restarts", name(*node)),
        Action::Cut(from, to) => format!("the link from {} to {} is cut", name(*from), name(*to)),
        Action::Heal(from, to) => format!("the link from {} to {} is back", name(*from), name(*to)),
    }
}

fn word_of(word: Option<Word>) -> String {
    match word {
        None => "no word".into(),
        Some(word) => format!(
            "observer {}, {}",
            word.observer.map_or("none", name),
            if word.synchronized { "synchronized" } else { "not synchronized" }
        ),
    }
}

fn config(writes: u8, faults: u8, cuts: bool, variant: Variant) -> Config {
    Config {
        writes,
        faults,
        cuts,
        variant,
        restarts: false,
        observers: 1,
        far_crashes: true,
        observer_pings: true,
    }
}

/// Today's logic: no property broken in every state within `depth` states of the armed start
/// (the start is the first; stateright's depth)
/// (CI), or in the deep run (`REDOGUARD_MODEL_DEEP=1`) with more writes and faults and no depth
/// bound, within its time.
fn assert_safe(config: Config, depth: usize, what: &str) {
    let run = explore(config, (!run::deep()).then_some(depth));
    println!("{}", run.summary(what));
    for property in [NOTHING_LOST, ONE_PRIMARY] {
        if let Some(path) = run.found(property) {
            panic!("{what}: '{property}' broken:\n{}", run::render(path, describe));
        }
    }
    assert!(run.exhausted || run::deep(), "{what}: the space was not checked to its end");
    // (A failover after an acknowledged write takes 12 steps from the armed start: found
    // within 14 states of depth, the start being the first.)
    if depth >= 14 || run::deep() {
        let failover = run.found(FAILS_OVER).expect("the observer never fails over to T");
        println!("a failover it finds:\n{}", run::render(failover, describe));
    }
}

#[test]
fn the_observer_fails_over_to_a_target_behind_a_far_sync_losing_nothing_through_crashes() {
    let (writes, faults) = if run::deep() { (2, 2) } else { (1, 1) };
    assert_safe(config(writes, faults, false, Variant::Current), 18, "P or F crashes");
}

#[test]
fn the_observer_fails_over_to_a_target_behind_a_far_sync_losing_nothing_through_cuts() {
    let (writes, faults) = if run::deep() { (2, 2) } else { (1, 1) };
    assert_safe(config(writes, faults, true, Variant::Current), 16, "a crash or a cut");
}

fn assert_found(variant: Variant, what: &str) {
    let run = explore(config(1, 0, false, variant), None);
    println!("{}", run.summary(what));
    let path = run.found(NOTHING_LOST).unwrap_or_else(|| panic!("{what}: no counterexample"));
    println!(
        "{what}, {} steps:\n{}",
        path.clone().into_actions().len(),
        run::render(path, describe)
    );
}

/// P crashes and restarts with what it keeps on disk, one observer: nothing P acknowledged is
/// lost, whether T took over meanwhile or not.
#[test]
fn the_observer_fails_over_to_a_target_behind_a_far_sync_losing_nothing_through_restarts() {
    let (writes, faults) = if run::deep() { (2, 2) } else { (1, 1) };
    let config = Config {
        restarts: true,
        far_crashes: run::deep(),
        ..config(writes, faults, false, Variant::Current)
    };
    assert_safe(config, RESTART_DEPTH, "P crashes and restarts");
}

/// The CI bound of the restart check.
const RESTART_DEPTH: usize = 17;

#[test]
fn without_the_seal_and_the_tail_the_checker_finds_a_lost_write() {
    assert_found(Variant::NoTail, "the observer's failover without F's tail");
}

#[test]
fn synchronized_once_sent_through_a_relay_is_found() {
    assert_found(Variant::SynchronizedOnceSent, "synchronized once F is shipped SYNC");
}

/// A step of a replayed trace: an action, or the delivery of the message in flight on a link.
enum Step {
    Do(Action),
    Deliver(usize, usize),
}

/// The first property of `properties` broken in `state`, if any.
fn broken(model: &FastStartRelay, state: &fast_start_relay::State) -> Option<&'static str> {
    model
        .properties()
        .into_iter()
        .filter(|property| matches!(property.expectation, stateright::Expectation::Always))
        .find(|property| !(property.condition)(model, state))
        .map(|property| property.name)
}

/// P restarts while T, asked by O, is taking F's tail; O2 (P's lease from O gone with the
/// restart) is proposed, named to T through F, and T (still receiving from F, to take the
/// tail) passes it on as its observer; P makes O2 active, O2 grants T away, P acknowledges a
/// write F lacks; then the seal reaches F, and T opens without the write.
fn restart_during_the_tail() -> Vec<Step> {
    use Step::{Deliver, Do};
    vec![
        Do(Action::Crash(P)),
        Do(Action::Decide),
        Do(Action::Ask),
        Do(Action::Restart(P)),
        Do(Action::PingSecond { answered: true }),
        Do(Action::PingSecond { answered: true }),
        Do(Action::Heartbeat),
        Deliver(P, F),
        Do(Action::ForwardBeat),
        Deliver(F, T),
        Do(Action::PingSecond { answered: true }),
        Do(Action::PingSecond { answered: true }),
        Do(Action::Write),
        Do(Action::Acknowledge),
        Deliver(T, F),
        Deliver(F, T),
        Do(Action::Open),
    ]
}

/// Replays `restart_during_the_tail` under `variant`: where it breaks a property (the step and
/// the property), or `None` if it goes through, or stops, whole.
fn replay_the_hole_trace(variant: Variant) -> Option<(usize, &'static str)> {
    let model = FastStartRelay {
        config: Config {
            restarts: true,
            observers: 2,
            far_crashes: false,
            ..config(1, 1, false, variant)
        },
    };
    let mut state = model.init_states().remove(0);
    for (at, step) in restart_during_the_tail().iter().enumerate() {
        let action = match step {
            Step::Do(action) => action.clone(),
            Step::Deliver(from, to) => {
                let message = state
                    .in_flight
                    .iter()
                    .find(|message| (message.from, message.to) == (*from, *to))
                    .unwrap_or_else(|| panic!("step {at}: nothing in flight {from} -> {to}"));
                Action::Deliver(*message)
            }
        };
        let next = model_actions(&model, &state)
            .contains(&action)
            .then(|| model.next_state(&state, action.clone()))
            .flatten();
        let Some(next) = next else {
            println!("{variant:?}: the trace stops at step {at}: {}", describe(&action));
            assert!(at > 9, "stopped before T is told of O2: step {at}");
            return None;
        };
        state = next;
        if let Some(property) = broken(&model, &state) {
            return Some((at, property));
        }
    }
    None
}

/// The hole the restart check found, as the server had it: T, taking F's tail, passed on O2's
/// word from F's heartbeats, and opened without a write P acknowledged under O2's grant.
#[test]
fn a_target_passing_on_its_relays_word_while_it_takes_over_loses_a_write() {
    let broken = replay_the_hole_trace(Variant::WordPassedOnWhileFailingOver);
    assert_eq!(broken.map(|(_, property)| property), Some(NOTHING_LOST), "{broken:?}");
}

/// Today's logic (T keeps the word it took the request under until the request ends) stops
/// the same trace: T never names O2, so P never makes O2 active, and the write waits.
#[test]
fn a_target_keeping_its_word_while_it_takes_over_stops_the_hole_trace() {
    assert_eq!(replay_the_hole_trace(Variant::Current), None);
}

/// The checker, by itself, finds the hole with T passing on its relay's word: P restarts, two
/// observers (breadth first, 17 steps).
#[test]
fn the_checker_finds_a_second_observer_granted_while_the_target_takes_the_tail() {
    let run = hunt_the_hole(Variant::WordPassedOnWhileFailingOver, None);
    let path = run.found(NOTHING_LOST).expect("the checker finds the lost write");
    println!("{} steps:\n{}", path.clone().into_actions().len(), run::render(path, describe));
}

/// Today's logic: no counterexample within the depth at which the old one has one (17 steps),
/// and three more: every state within 21.
#[test]
fn keeping_its_word_the_checker_finds_no_hole_within_its_depth() {
    let run = hunt_the_hole(Variant::Current, Some(21));
    assert!(run.exhausted, "the space within 21 steps was not checked to its end");
    for property in [NOTHING_LOST, ONE_PRIMARY] {
        if let Some(path) = run.found(property) {
            panic!(
                "'{property}' broken, {} steps:\n{}",
                path.clone().into_actions().len(),
                run::render(path, describe)
            );
        }
    }
}

fn hunt_the_hole(variant: Variant, depth: Option<usize>) -> Run {
    // (O's pings left out, as in the variants' hunts: a counterexample among fewer behaviours
    // is one among all.)
    let config = Config {
        restarts: true,
        observers: 2,
        far_crashes: false,
        observer_pings: false,
        ..config(1, 1, false, variant)
    };
    let run = explore_hunting(config, depth, true);
    println!("{}", run.summary(&format!("P restarts, two observers, {variant:?}")));
    println!("the space within the bound checked to its end: {}", run.exhausted);
    run
}

/// P restarting with no record: the checker finds O2 made active at once and granting T away
/// while T still names O (12 steps); the same steps under today's logic (P keeps its record)
/// break nothing: O2 is only proposed, T never names it, and P acknowledges nothing without F.
#[test]
fn a_primary_restarting_without_its_record_is_found() {
    let what = "P restarts with no record";
    let config = |variant| Config {
        restarts: true,
        observers: 2,
        far_crashes: false,
        ..config(1, 1, false, variant)
    };
    // (The hunt leaves O's pings out: a counterexample among fewer behaviours is one among
    // all, and today's logic replays it with them in.)
    let hunt = Config { observer_pings: false, ..config(Variant::RestartWithoutRecord) };
    let run = explore(hunt, None);
    println!("{}", run.summary(what));
    let path = [NOTHING_LOST, ONE_PRIMARY]
        .into_iter()
        .find_map(|property| run.found(property))
        .unwrap_or_else(|| panic!("{what}: no counterexample"));
    let actions = path.clone().into_actions();
    println!("{what}, {} steps:\n{}", actions.len(), run::render(path, describe));
    let today = FastStartRelay { config: config(Variant::Current) };
    let mut state = today.init_states().remove(0);
    for (step, action) in actions.iter().enumerate() {
        let mut allowed = Vec::new();
        today.actions(&state, &mut allowed);
        let next =
            allowed.contains(action).then(|| today.next_state(&state, action.clone())).flatten();
        let Some(next) = next else {
            println!("today's logic stops it at step {step}: {}", describe(action));
            return;
        };
        state = next;
        assert_eq!(broken(&today, &state), None, "today's logic, step {step}");
    }
    panic!("{what}: the trace goes through under today's logic too");
}

fn model_actions(model: &FastStartRelay, state: &fast_start_relay::State) -> Vec<Action> {
    let mut actions = Vec::new();
    model.actions(state, &mut actions);
    actions
}
