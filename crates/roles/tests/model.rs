//! Model checking of fast-start failover with stateright: `model/system.rs` is the model; this
//! file the checks.
//!
//! - Maximum Availability, today's logic: no write is acknowledged by a primary after a newer
//!   one acknowledged one, and every acknowledged write is held by the newest primary, in every
//!   state reachable within the bounds (CI: `cargo test -p roles --release --test model`; the
//!   deep run: `REDOGUARD_MODEL_DEEP=1` (and `REDOGUARD_MODEL_SECONDS`, default 6 h per
//!   check; `REDOGUARD_MODEL_STATES`, default 100 million; `REDOGUARD_MODEL_THREADS`), see docs/fast-start-failover.md for its figures).
//! - The old logic, with one of issue 29's holes back at a time: the checker finds a
//!   counterexample by itself, printed as the trace that docs/fast-start-failover.md shows.
//! - Maximum Performance under its timing assumptions: never two primaries acknowledging.
//! - A failover happens (a `sometimes` property), and, with fair scheduling after the primary
//!   is lost for good, always happens (`a_lost_primary_is_always_failed_over`).

#[path = "model/run.rs"]
mod run;
#[path = "model/system.rs"]
mod system;

use std::time::{Duration, Instant};

use roles::fast_start::Protection;
use run::{budget, deep, threads};
use stateright::{Checker, Model};
use system::{Action, Config, System, Variant};

/// Checks `config` to `depth`: every property, state counts printed. Breadth first (every
/// state within the depth reached is checked) unless `depth_first` or the deep run: the deep
/// run's breadth-first queue of whole states filled this machine's 24 GiB in four minutes
/// (depth first keeps the path and a fingerprint per state), and under Maximum Performance a
/// failover needs more steps (ticks of the common clock) than breadth first reaches in CI.
fn check(what: &str, config: Config, depth: usize, depth_first: bool) {
    let started = Instant::now();
    let members = config.members;
    let builder =
        System { config }.checker().threads(threads()).target_max_depth(depth).timeout(budget());
    if deep() || depth_first {
        // (stateright's depth-first checker looks at its timeout only when a thread runs out of
        // work: a state count bounds it too, `REDOGUARD_MODEL_STATES` in the deep run.)
        let states = std::env::var("REDOGUARD_MODEL_STATES")
            .ok()
            .filter(|_| deep())
            .and_then(|states| states.parse().ok())
            .unwrap_or(if deep() { 100_000_000 } else { 1_500_000 });
        let builder = builder.target_state_count(states);
        report(what, members, depth, "depth first", started, builder.spawn_dfs().join());
    } else {
        report(what, members, depth, "breadth first", started, builder.spawn_bfs().join());
    }
}

fn report(
    what: &str,
    members: usize,
    depth: usize,
    order: &str,
    started: Instant,
    checker: impl Checker<System>,
) {
    println!(
        "{what}: {} unique states ({} generated), paths up to {} steps from the armed configuration (bound {depth}, {order}), in {:.1} s",
        checker.unique_state_count(),
        checker.state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    for name in [
        "no write acknowledged by a primary after a newer one acknowledged one",
        "every acknowledged write is held by the newest primary",
    ] {
        if let Some(path) = checker.discovery(name) {
            panic!("{what}: {name} is violated:\n{}", render(&path, members));
        }
    }
}

fn render(path: &stateright::Path<system::State, Action>, members: usize) -> String {
    run::render(path, |action| describe(action, members))
}

/// An action, for a person (nodes numbered members first, then observers).
fn describe(action: &Action, members: usize) -> String {
    let member = |index: &usize| system::MEMBERS[*index];
    let node = |index: &usize| {
        if *index < members { system::MEMBERS[*index] } else { system::OBSERVERS[*index - members] }
    };
    match action {
        Action::Write(p) => format!("a client writes on {}", member(p)),
        Action::Acknowledge(p) => format!("{} acknowledges its next write", member(p)),
        Action::Hello(p, d) => format!("{} opens a session with {}", member(p), member(d)),
        Action::Send(p, d) => format!("{} sends its redo to {}", member(p), member(d)),
        Action::Deliver(p, d) => format!("{}'s redo reaches {}", member(p), member(d)),
        Action::Ack(p, d) => format!("{} acknowledges {}'s redo", member(d), member(p)),
        Action::Synchronize(p, d) => format!("{} ships to {} SYNC again", member(p), member(d)),
        Action::Desynchronize(p, d) => format!("{} drops {} (a timeout)", member(p), member(d)),
        Action::Heartbeat(p, d) => format!("{} sends {} a heartbeat", member(p), member(d)),
        Action::Ping(o, m) => format!("{} pings {}", system::OBSERVERS[*o], member(m)),
        Action::Step(o) => format!("{} decides", system::OBSERVERS[*o]),
        Action::Cut(a, b) => format!("the link from {} to {} is cut", node(a), node(b)),
        Action::Heal(a, b) => format!("the link from {} to {} is back", node(a), node(b)),
        Action::Crash(n) => format!("{} crashes", node(n)),
        Action::Restart(n) => format!("{} restarts", node(n)),
        Action::Jump(n) => format!("{}'s clock runs past every timeout", node(n)),
        Action::Tick => "a second passes".to_string(),
        Action::Switchover(p, t) => format!("switchover from {} to {}", member(p), member(t)),
    }
}

fn availability(members: usize, observers: usize, variant: Variant) -> Config {
    Config {
        protection: Protection::MaximumAvailability,
        members,
        observers,
        writes: 2,
        faults: 3,
        switchovers: members > 2,
        cuts: true,
        crashes: true,
        jumps: true,
        variant,
        armed: true,
    }
}

#[test]
fn maximum_availability_never_makes_two_primaries_nor_loses_an_acknowledged_write() {
    let (config, depth) = if deep() {
        (Config { faults: 4, ..availability(3, 2, Variant::Current) }, 40)
    } else {
        (availability(2, 1, Variant::Current), 24)
    };
    check("maximum availability", config, depth, false);
}

/// A path the checker found.
type Trace = stateright::Path<system::State, Action>;

/// The first safety property the checker found violated, and how many states it visited.
fn violation(checker: impl Checker<System>) -> (Option<(&'static str, Trace)>, usize) {
    let found = [
        "no write acknowledged by a primary after a newer one acknowledged one",
        "every acknowledged write is held by the newest primary",
    ]
    .into_iter()
    .find_map(|name| checker.discovery(name).map(|path| (name, path)));
    (found, checker.unique_state_count())
}

/// The old logic, one hole at a time, with what each needs: `(variant, observers, crashes)`.
const OLD_HOLES: [(Variant, usize, u8); 3] = [
    (Variant::SynchronizedWhenSent, 1, 1),
    (Variant::ObserverAmnesia, 1, 2),
    (Variant::TwoObservers, 2, 1),
];

fn hole_config(variant: Variant, observers: usize, crashes: u8) -> Config {
    Config {
        writes: 1,
        faults: crashes,
        cuts: false,
        jumps: false,
        switchovers: false,
        ..availability(2, observers, variant)
    }
}

/// Searches `variant`'s model breadth first (the shortest trace) and returns the violation.
fn hunt(variant: Variant, observers: usize, crashes: u8) -> String {
    let started = Instant::now();
    let checker = System { config: hole_config(variant, observers, crashes) }
        .checker()
        .threads(threads())
        .target_max_depth(20)
        .timeout(Duration::from_secs(if deep() { 3600 } else { 150 }))
        .spawn_bfs()
        .join();
    let (found, unique) = violation(checker);
    let Some((name, path)) = found else {
        panic!(
            "{variant:?}: no counterexample in {unique} states ({:.1} s)",
            started.elapsed().as_secs_f64()
        );
    };
    let trace = render(&path, 2);
    println!(
        "{variant:?}: '{name}' violated, found after {unique} states ({:.1} s):\n{trace}\n",
        started.elapsed().as_secs_f64()
    );
    trace
}

/// The checker finds, by itself, the hole a standby synchronized once everything is sent opens
/// (seconds: it runs in CI).
#[test]
fn the_checker_finds_the_synchronized_when_sent_hole() {
    hunt(Variant::SynchronizedWhenSent, 1, 1);
}

/// The checker finds, by itself, the hole an observer that forgets its failover on a restart
/// opens (seconds: it runs in CI; 248 795 states, 3.5 s here).
#[test]
fn the_checker_finds_the_observer_amnesia_hole() {
    hunt(Variant::ObserverAmnesia, 1, 2);
}

/// The checker finds every old hole by itself (the deep run, `REDOGUARD_MODEL_DEEP=1`: the
/// two observers' hole takes 1.4 million states, 46 s here; CI replays the traces it found,
/// below).
#[test]
fn the_checker_finds_every_old_hole_in_the_deep_run() {
    if !deep() {
        println!("(the deep run only: REDOGUARD_MODEL_DEEP=1)");
        return;
    }
    for (variant, observers, crashes) in OLD_HOLES {
        hunt(variant, observers, crashes);
    }
}

/// The traces the checker found for the old holes (docs/fast-start-failover.md shows them):
/// each violates a safety property under its old logic, and none under today's.
#[test]
fn the_old_holes_traces_break_only_the_old_logic() {
    use Action::*;
    let traces: [(Variant, usize, u8, &[Action]); 3] = [
        (
            Variant::SynchronizedWhenSent,
            1,
            1,
            &[
                Write(0),
                Desynchronize(0, 1),
                Hello(0, 1),
                Send(0, 1),
                Ping(0, 0),
                Ping(0, 0),
                Acknowledge(0),
                Synchronize(0, 1),
                Heartbeat(0, 1),
                Ping(0, 0),
                Crash(0),
                Ping(0, 0),
                Ping(0, 0),
                Ping(0, 1),
            ],
        ),
        (
            Variant::ObserverAmnesia,
            1,
            2,
            &[
                Crash(0),
                Ping(0, 0),
                Ping(0, 0),
                Ping(0, 1),
                Restart(0),
                Write(0),
                Crash(2),
                Restart(2),
                Ping(0, 0),
                Ping(0, 0),
                Acknowledge(0),
            ],
        ),
        (
            Variant::TwoObservers,
            2,
            1,
            &[
                Crash(0),
                Ping(0, 0),
                Ping(0, 0),
                Ping(0, 1),
                Restart(0),
                Write(0),
                Ping(1, 0),
                Ping(1, 0),
                Acknowledge(0),
            ],
        ),
    ];
    for (variant, observers, crashes, trace) in traces {
        let state = replay(hole_config(variant, observers, crashes), trace)
            .unwrap_or_else(|error| panic!("{variant:?}: {error}"));
        assert!(!safe(&state), "{variant:?}: its trace no longer breaks the old logic");
        // Today's logic: the trace stops short (an action is not possible, or changes
        // nothing), or ends safe.
        if let Ok(state) = replay(hole_config(Variant::Current, observers, crashes), trace) {
            assert!(safe(&state), "{variant:?}: its trace breaks today's logic");
        }
    }
}

/// Both safety properties of Maximum Availability hold in `state`.
fn safe(state: &system::State) -> bool {
    let ordered = state.acks.windows(2).all(|pair| pair[0].reign <= pair[1].reign);
    let newest =
        state.members.iter().filter(|member| member.primary_role).max_by_key(|member| member.reign);
    let held =
        newest.is_none_or(|newest| state.acks.iter().all(|ack| newest.log.contains(&ack.write)));
    ordered && held
}

#[test]
fn maximum_performance_never_makes_two_primaries_under_its_timing_assumptions() {
    let config = Config {
        protection: Protection::MaximumPerformance,
        members: 2,
        observers: 1,
        writes: 2,
        faults: if deep() { 10 } else { 7 },
        switchovers: false,
        cuts: true,
        crashes: true,
        jumps: false,
        variant: Variant::Current,
        armed: true,
    };
    check("maximum performance", config, 40, true);
}

/// Replays `actions` from the initial state of `config`: the state after the last, or the
/// step that was not possible.
fn replay(config: Config, actions: &[Action]) -> Result<system::State, String> {
    let system = System { config };
    let mut state = system.init_states().remove(0);
    for (step, action) in actions.iter().enumerate() {
        let mut possible = Vec::new();
        system.actions(&state, &mut possible);
        if !possible.contains(action) {
            return Err(format!("step {step}: {} is not possible", describe(action, 2)));
        }
        state = system
            .next_state(&state, action.clone())
            .ok_or_else(|| format!("step {step}: {} changes nothing", describe(action, 2)))?;
    }
    Ok(state)
}

/// Liveness, under fair scheduling (which stateright's `eventually` cannot assume): from states
/// reached by random protocol steps (seeded, no fault), whenever the observer, having just
/// pinged everyone, would fail over to west, east is lost for good; every process then takes each of its steps in turn, and west
/// must become the primary of a new incarnation within a bounded number of rounds.
#[test]
fn a_lost_primary_is_always_failed_over_under_fair_scheduling() {
    let config =
        Config { faults: 1, cuts: false, jumps: false, ..availability(2, 1, Variant::Current) };
    let system = System { config };
    let mut tried = 0;
    for seed in 0..200u64 {
        let mut random = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut state = system.init_states().remove(0);
        // A random prefix of protocol steps: no crash, no cut.
        for _ in 0..(seed % 25) {
            let mut actions = Vec::new();
            system.actions(&state, &mut actions);
            actions.retain(|action| !matches!(action, Action::Crash(_) | Action::Cut(..)));
            if actions.is_empty() {
                break;
            }
            random = random.wrapping_mul(6364136223846793005).wrapping_add(1);
            let action = actions[(random >> 33) as usize % actions.len()].clone();
            if let Some(next) = system.next_state(&state, action) {
                state = next;
            }
        }
        // What the observer knows is current: it pings every member once.
        for member in 0..2 {
            if let Some(next) = system.next_state(&state, Action::Ping(0, member)) {
                state = next;
            }
        }
        let observer = &state.observers[0];
        if !observer.core.ready(observer.now).contains(&"west".to_string()) {
            continue;
        }
        tried += 1;
        state = system.next_state(&state, Action::Crash(0)).expect("east crashes");
        let mut failed_over = false;
        for _round in 0..20 {
            let mut actions = Vec::new();
            system.actions(&state, &mut actions);
            actions.retain(|action| {
                !matches!(
                    action,
                    Action::Crash(_) | Action::Cut(..) | Action::Restart(0) | Action::Jump(_)
                )
            });
            for action in actions {
                if let Some(next) = system.next_state(&state, action) {
                    state = next;
                }
            }
            if state.members[1].primary_role && state.members[1].incarnation == 2 {
                failed_over = true;
                break;
            }
        }
        assert!(
            failed_over,
            "seed {seed}: no failover to west within 20 fair rounds: observer {:?} (last event {:?}), west {:?}",
            state.observers[0].core.record(),
            state.observers[0].core.last_event(),
            (
                state.members[1].following,
                &state.members[1].heard_observer,
                state.members[1].heard_synchronized,
                state.members[1].log.len(),
                state.members[1].incarnation
            )
        );
    }
    assert!(tried >= 20, "only {tried} random prefixes left the observer armed");
    println!("{tried} armed states, from random prefixes: each failed over once east was lost");
}
