//! Model checking of a manual failover with crashes, restarts and partitions, and of a
//! restarted primary's confirmation (`roles::confirmation`), with stateright: `model/restart.rs`
//! is the model; this file the checks (docs/roles.md, "Never two primaries: the argument, and
//! its limits", "Model-checked: manual failover, restarts and the confirmation", gives the
//! bounds and the figures).
//!
//! - Today's rule, the DBA failing over only past primaries whose process is down: never two
//!   primaries with an open gate, and no write by an older incarnation after a newer one's,
//!   in every reachable state within the bounds; a restarted primary does take writes again.
//! - Failing over past a running primary a cut hides from the broker too: the same, outside
//!   docs/roles.md's point 3 (that primary, until its process ends).
//! - With the rule before (the first welcome opens the gate), a failover that does not write
//!   `followed`, a copy served without writing it, or a failover to a standby that holds
//!   nothing, the checker finds a counterexample.
//! - With the broker before, which `--force`-fenced only the primary of the newest
//!   incarnation, it finds one too (the broker now fences every primary it reaches).
//! - Switchover (`model/switchover.rs`), run again and by two brokers at once, among crashes,
//!   cuts and a failover: the same properties, and a switchover completes (after its old
//!   primary crashed too) and is given back. A target that forgets its refusals, or an old
//!   primary that steps down after its answer, and the four holes this model found (fixed:
//!   an abort without `followed`, or naming no switchover; a prepare from an unconfirmed
//!   gate; a switchover completed twice; a pending record without its incarnation; a target
//!   that opens at once, beside the primary of a failover given while the switchover was half
//!   done) are each a counterexample.
//! - Redo routes (`model/routes.rs`), in two configurations, switchovers and failovers among
//!   crashes and cuts: the same properties. Without the switchover's routes rule, with a
//!   sealed target that takes over, and (found by this model) with an old primary's abort that
//!   ignores the seal a failover put on it, or checks it only before its database closes, a
//!   counterexample each.

#[path = "model/failover.rs"]
mod failover;
#[path = "model/restart.rs"]
mod restart;
#[path = "model/routes.rs"]
mod routes;
// (Its `render` is not used: these traces show each member's state after each step.)
#[path = "model/run.rs"]
mod run;
#[path = "model/switchover.rs"]
mod switchover;

use restart::{
    Action, Broker, Config, FAILS_OVER, Hidden, NAMES, NO_LATE_WRITE, ONE_OPEN,
    ONE_OPEN_PER_INCARNATION, REOPENS, REOPENS_AFTER_FAILOVER, RestartSystem, SWITCHES_OVER,
    SWITCHES_OVER_AFTER_CRASH, TAKES_BACK, Variant,
};
use routes::Routes;
use stateright::Model;

type Trace = stateright::Path<restart::State, Action>;

const SAFETY: [&str; 3] = [ONE_OPEN, ONE_OPEN_PER_INCARNATION, NO_LATE_WRITE];

type Run = run::Run<RestartSystem>;

/// A checker run to the end of its space (breadth first: the shortest traces).
fn explore(config: Config) -> Run {
    explore_until(config, stateright::HasDiscoveries::All)
}

/// As `explore`, stopping once `finish` holds of the discoveries.
fn explore_until(config: Config, finish: stateright::HasDiscoveries) -> Run {
    let checker = RestartSystem { config }
        .checker()
        .threads(run::threads())
        .timeout(run::budget())
        .finish_when(finish);
    run::explore(
        checker,
        &[
            ONE_OPEN,
            ONE_OPEN_PER_INCARNATION,
            NO_LATE_WRITE,
            REOPENS,
            FAILS_OVER,
            REOPENS_AFTER_FAILOVER,
            SWITCHES_OVER,
            SWITCHES_OVER_AFTER_CRASH,
            TAKES_BACK,
        ],
    )
}

fn describe(action: &Action) -> String {
    let name = |node: &usize| NAMES[*node];
    match action {
        Action::Hello { from, to, beyond } => format!(
            "{} says hello to {}{}",
            name(from),
            name(to),
            if *beyond { " (which holds redo past the branch point)" } else { "" }
        ),
        Action::Forward { primary, relay, to, beyond } => format!(
            "{} forwards {}'s hello to {}{}",
            name(relay),
            name(primary),
            name(to),
            if *beyond { " (which holds redo past the branch point)" } else { "" }
        ),
        Action::Copy { from, to } => {
            format!("{} is built from a copy of {}", name(to), name(from))
        }
        Action::Failover { to, force: false } => format!("the DBA: failover --to {}", name(to)),
        Action::Failover { to, force: true } => {
            format!("the DBA: failover --to {} --force", name(to))
        }
        Action::Defer(node) => format!("the DBA defers {}", name(node)),
        Action::Write(node) => format!("{} acknowledges a write", name(node)),
        Action::Crash(node) => format!("{} crashes", name(node)),
        Action::Restart(node) => format!("{} restarts", name(node)),
        Action::Cut(a, b) => format!("the link {}-{} is cut", name(a), name(b)),
        Action::Heal(a, b) => format!("the link {}-{} is back", name(a), name(b)),
        Action::Switchover { to } => format!("the DBA: switchover --to {}", name(to)),
        Action::Prepare(node) => format!("{} prepares (its next durable step)", name(node)),
        Action::Undo(node) => format!("{}'s prepare gives up: its gate reopens", name(node)),
        Action::Call(run) => format!("the broker's call of run {run} arrives"),
        Action::TakeOver(node) => format!("{} takes over: primary, open", name(node)),
        Action::Refuse(node) => format!("{}'s wait runs out: refused, recorded", name(node)),
        Action::TakeBack(node) => format!("{} takes its role back", name(node)),
        Action::Lost(run) => format!("broker run {run} is lost"),
    }
}

/// A trace, one step a line, each with the members' state after it, up to the first state
/// that violates `property` (if any).
fn render(path: &Trace, property: Option<&str>) -> String {
    let states = path.clone().into_states();
    let actions = path.clone().into_actions();
    let system = RestartSystem { config: Config { switchovers: 1, ..config(Variant::Current) } };
    let violates = |state: &restart::State| {
        system.properties().iter().any(|checked| {
            Some(checked.name) == property
                && checked.expectation == stateright::Expectation::Always
                && !(checked.condition)(&system, state)
        })
    };
    let sometimes = |state: &restart::State| {
        system.properties().iter().any(|checked| {
            Some(checked.name) == property
                && checked.expectation == stateright::Expectation::Sometimes
                && (checked.condition)(&system, state)
        })
    };
    let end =
        states.iter().position(|state| violates(state) || sometimes(state)).unwrap_or(states.len());
    actions
        .iter()
        .zip(states.iter().skip(1))
        .take(end)
        .enumerate()
        .map(|(step, (action, state))| {
            let members: Vec<String> = state
                .members
                .iter()
                .enumerate()
                .map(|(node, member)| {
                    let preparing =
                        matches!(member.change, Some(switchover::Change::Prepare { .. }));
                    let role = match (member.up, member.role, member.fenced, member.open) {
                        (false, ..) => "down".to_string(),
                        (true, restart::Role::Primary, None, false) if preparing => {
                            "quiesced".into()
                        }
                        (true, _, Some(fence), _) => format!("fenced by {fence}"),
                        (true, restart::Role::Standby, None, _) => "standby".into(),
                        (true, restart::Role::Primary, None, true) => "OPEN".into(),
                        (true, restart::Role::Primary, None, false) => "unconfirmed".into(),
                    };
                    let change = match &member.change {
                        Some(switchover::Change::Prepare { .. }) => " (preparing)",
                        Some(switchover::Change::Complete { .. }) => " completing",
                        Some(switchover::Change::Abort) => " aborting",
                        None => "",
                    };
                    format!(
                        "{} {role}{change} inc {}{}{}{}",
                        NAMES[node],
                        member.incarnation,
                        if member.sealed_below > 0 {
                            format!(" sealed below {}", member.sealed_below)
                        } else {
                            String::new()
                        },
                        if member.followed && member.role == restart::Role::Primary {
                            " followed"
                        } else {
                            ""
                        },
                        member.pending.map_or(String::new(), |(to, id, prepared_in)| format!(
                            " pending {id} to {} (inc {prepared_in})",
                            NAMES[usize::from(to)]
                        ))
                    )
                })
                .collect();
            let runs: Vec<String> = state.runs.iter().map(switchover::describe_run).collect();
            let runs =
                if runs.is_empty() { String::new() } else { format!(" runs: {}", runs.join(", ")) };
            format!("{step:>3}. {:<52} [{}]{runs}", describe(action), members.join("; "))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn config(variant: Variant) -> Config {
    Config {
        faults: 3,
        failovers: 2,
        force: true,
        hidden: Hidden::No,
        broker: Broker::EveryPrimary,
        defer: true,
        switchovers: 0,
        brokers: 1,
        failover_amid_switchover: false,
        routes: routes::Routes::DIRECT,
        variant,
    }
}

fn assert_safe(what: &str, config: Config) -> Run {
    let run = explore(config);
    println!("{}", run.summary(what));
    for name in SAFETY {
        if let Some(path) = run.found(name) {
            panic!("{what}: '{name}' is violated:\n{}", render(path, Some(name)));
        }
    }
    run
}

/// The DBA fails over only past primaries whose process is down (the broker reaches every
/// running member): no window at all.
#[test]
fn a_restarted_primary_never_takes_writes_beside_a_failover_s_primary() {
    // CI: about 490 000 states, 7 s; deep: more faults and failovers, to its budget.
    let config = if run::deep() {
        Config { faults: 8, failovers: 4, ..config(Variant::Current) }
    } else {
        Config { faults: 6, failovers: 3, ..config(Variant::Current) }
    };
    let run = assert_safe("today's rule, failover past primaries that are down", config);
    assert!(run.exhausted || run::deep(), "{}", run.summary("not every state was checked"));
    for name in [REOPENS, FAILS_OVER, REOPENS_AFTER_FAILOVER] {
        let path = run.found(name).unwrap_or_else(|| panic!("never: {name}"));
        println!("{name}:\n{}\n", render(path, Some(name)));
    }
}

/// The DBA may also fail over past a running primary that a cut hides from the broker:
/// docs/roles.md's point 3 (its writes until it hears of the new incarnation are its
/// divergent tail). Outside that window, a primary running hidden at a failover, the same
/// holds: no other primary takes writes beside the new one.
#[test]
fn past_a_hidden_primary_only_the_documented_window_remains() {
    // CI: about 1.5 million states, 20 s on two CPUs; deep: more faults and failovers.
    let config = if run::deep() {
        Config { faults: 6, failovers: 3, hidden: Hidden::Yes, ..config(Variant::Current) }
    } else {
        Config { faults: 4, hidden: Hidden::Yes, ..config(Variant::Current) }
    };
    let run = assert_safe("today's rule, failover past hidden primaries too", config);
    assert!(run.exhausted || run::deep(), "{}", run.summary("not every state was checked"));
    assert!(run.found(FAILS_OVER).is_some() && run.found(REOPENS_AFTER_FAILOVER).is_some());
}

/// Searches `config` (a broken variant) breadth first, and returns the first safety property
/// found violated with its trace.
fn hunt(what: &str, config: Config) -> (&'static str, String) {
    // (It stops at the first counterexample: not every state is seen.)
    let run = explore_until(config, stateright::HasDiscoveries::AnyFailures);
    println!("{what}: {} unique states searched in {:.1} s", run.unique, run.seconds);
    let (name, path) = SAFETY
        .into_iter()
        .find_map(|name| run.found(name).map(|path| (name, path)))
        .unwrap_or_else(|| panic!("{what}: no counterexample in {} states", run.unique));
    let trace = render(path, Some(name));
    println!("{what}: '{name}' violated:\n{trace}\n");
    (name, trace)
}

#[test]
fn the_first_welcome_opening_the_gate_lets_an_old_primary_write_beside_the_new() {
    let (_, trace) = hunt("the first welcome opens the gate", config(Variant::FirstWelcome));
    assert!(trace.contains("failover"), "{trace}");
}

#[test]
fn a_failover_that_does_not_write_followed_lets_its_primary_restart_open() {
    let (_, trace) = hunt("failover without followed", config(Variant::FailoverNotFollowed));
    assert!(trace.contains("failover"), "{trace}");
}

/// Main before this model: a primary that served the copies its standbys were built from,
/// and crashed before any of them welcomed it, restarted with its gate open beside the
/// failover's primary.
#[test]
fn a_copy_served_without_writing_followed_lets_the_old_primary_restart_open() {
    let (_, trace) = hunt("a copy without followed", config(Variant::CopyNotFollowed));
    assert!(trace.contains("failover"), "{trace}");
}

/// Main before this model: a standby that received nothing could be failed over to (a
/// primary of no data), beside the old primary that no standby had followed.
#[test]
fn a_failover_to_a_standby_that_holds_nothing_lets_the_old_primary_restart_open() {
    let (_, trace) = hunt("a failover to an empty standby", config(Variant::EmptyFailover));
    assert!(trace.contains("failover"), "{trace}");
}

/// Found by this model, against the broker before: `failover --force` fenced only the primary
/// of the newest incarnation it reached, and left an older one running, as failed over
/// already. But an older primary restarted and waiting for its confirmation still holds a
/// welcome from before the failover, from the member that is now the primary; once the
/// member that would have refused it is deferred (the DBA's true word: it is a failed-over
/// primary, fenced), that welcome is enough, and it opens beside the new primary. The broker
/// now fences every primary it reaches (`Broker::EveryPrimary`, the checks above).
#[test]
fn a_broker_fencing_only_the_newest_primary_leaves_an_unconfirmed_older_one_that_a_stale_welcome_opens()
 {
    let config = Config { broker: Broker::NewestOnly, ..config(Variant::Current) };
    let (_, trace) = hunt("the broker before", config);
    assert!(trace.contains("--force") && trace.contains("defers"), "{trace}");
}

/// Switchovers (`redoguard switchover --to T`), run again and by two brokers at once, among
/// crashes, cuts and a failover (given while no switchover is under way: see below).
fn switchover_config(variant: Variant) -> Config {
    Config { faults: 2, failovers: 1, switchovers: 2, brokers: 2, ..config(variant) }
}

/// Today's switchover (with this model's three fixes, below): the switchover completes, after a
/// crash of its old primary too, or is refused and given back; never two primaries with an
/// open gate, never a write of an older incarnation after a newer one's.
#[test]
fn a_switchover_never_leaves_two_primaries() {
    // CI: about 460 000 states, 2 s on two CPUs; deep: a fault and a switchover run more
    // (8.1 million states, about 90 s).
    let config = if run::deep() {
        Config { faults: 3, switchovers: 3, ..switchover_config(Variant::Current) }
    } else {
        switchover_config(Variant::Current)
    };
    let run = assert_safe("today's switchover", config);
    assert!(run.exhausted || run::deep(), "{}", run.summary("not every state was checked"));
    for name in [SWITCHES_OVER, SWITCHES_OVER_AFTER_CRASH, TAKES_BACK] {
        let path = run.found(name).unwrap_or_else(|| panic!("never: {name}"));
        println!("{name}:\n{}\n", render(path, Some(name)));
    }
}

/// A target that does not read `switchover.refused`: two brokers drive one switchover; T
/// refuses the first, which gives P its role back; the second's complete opens T beside P.
#[test]
fn a_target_that_forgets_its_refusals_opens_beside_the_old_primary_given_its_role_back() {
    let (_, trace) = hunt("no refused record", switchover_config(Variant::CompleteIgnoresRefused));
    assert!(trace.contains("takes its role back") && trace.contains("takes over"), "{trace}");
}

/// An old primary that keeps its gate open while it prepares, and says standby only after
/// the broker has its answer: T opens while P still takes writes.
#[test]
fn an_old_primary_that_steps_down_after_its_answer_writes_beside_the_new_one() {
    let (_, trace) = hunt("standby after the answer", switchover_config(Variant::LateStandby));
    assert!(trace.contains("takes over"), "{trace}");
}

/// Found by this model, fixed in `abort_switchover`: an aborted switchover's old primary
/// opened at once with `followed` cleared (by its prepare); crashed before any welcome, it
/// restarted open beside the primary a failover made meanwhile (or, a failover given while
/// it was a standby, it opened beside that one at once).
#[test]
fn an_abort_without_followed_opens_beside_a_failover_s_primary() {
    let config = switchover_config(Variant::AbortNotFollowed);
    let (_, trace) = hunt("abort without followed", config);
    assert!(trace.contains("takes its role back") && trace.contains("failover"), "{trace}");
}

/// Found by this model, fixed in `abort_switchover` and the broker: an abort named no
/// switchover, so a broker whose complete of switchover 1 was refused gave the old primary
/// its role back from switchover 2, which another run then completed.
#[test]
fn an_abort_of_another_switchover_gives_back_a_role_that_a_later_one_moved() {
    let config = Config { failovers: 0, switchovers: 3, ..switchover_config(Variant::AbortAnyId) };
    let (_, trace) = hunt("abort of any switchover", config);
    assert!(trace.contains("takes its role back") && trace.contains("takes over"), "{trace}");
}

/// Found by this model, fixed in `prepare_switchover`: a primary restarted and unconfirmed
/// (a failover happened while it was down) prepared a switchover, and its prepare, giving up,
/// set its gate open beside the failover's primary.
#[test]
fn an_unconfirmed_primary_s_prepare_that_gives_up_opens_its_gate() {
    let (_, trace) = hunt("unconfirmed prepare", switchover_config(Variant::PrepareUnconfirmed));
    assert!(trace.contains("gives up") && trace.contains("failover"), "{trace}");
}

/// A failover while a switchover is half done (P a standby with it pending, no primary open:
/// the broker's failover needs no `--force`), then the switchover's complete (a broker still
/// running, or run again): today the target opens unconfirmed, as a restarted primary, and
/// takes writes only once every destination has welcomed it in its incarnation, so that the
/// failover's primary, or a member that follows it, fences it instead. Neither two open
/// primaries nor two of one incarnation, in the whole space of the configuration (CI: one
/// fault; deep: two); the switchover still completes, after its old primary crashed too.
#[test]
fn a_failover_amid_a_switchover_never_leaves_its_target_open_beside_the_new_primary() {
    let config = Config {
        failover_amid_switchover: true,
        faults: if run::deep() { 2 } else { 1 },
        ..switchover_config(Variant::Current)
    };
    let run = assert_safe("a failover amid a switchover", config);
    assert!(run.exhausted, "{}", run.summary("not every state was checked"));
    for name in [SWITCHES_OVER, SWITCHES_OVER_AFTER_CRASH, FAILS_OVER] {
        let path = run.found(name).unwrap_or_else(|| panic!("never: {name}"));
        println!("{name}:\n{}\n", render(path, Some(name)));
    }
}

/// Found by this model, fixed in `complete_switchover_locked` (the open finding of the last
/// stop): a target that opens at once (`promoted_here`, as a failover's target does) opens
/// beside the primary of a failover given while the switchover was half done, in the old
/// incarnation, until a hello between them fences it.
#[test]
fn a_target_that_opens_at_once_opens_beside_a_failover_s_primary() {
    let config =
        Config { failover_amid_switchover: true, ..switchover_config(Variant::TargetOpensAtOnce) };
    let (name, trace) = hunt("a target that opens at once", config);
    assert!(name == ONE_OPEN && trace.contains("failover") && trace.contains("takes over"));
}

/// Within that finding, the part fixed first: never two primaries of *one* incarnation,
/// which no hello between them would fence, even with the target opening at once. A target
/// that adopted the failover's incarnation while it waited refuses the switchover
/// (`complete_switchover_locked` reads its control file again, its database closed, before it
/// writes it); a pending record keeps the incarnation it was prepared in, which the broker
/// passes (before: its old primary's incarnation *now*, adopted from the failover's primary
/// since), and an abort of a record older than the member's incarnation gives no role back.
/// The broker before is a counterexample.
#[test]
fn a_switchover_never_makes_a_second_primary_of_one_incarnation_even_amid_a_failover() {
    // (One fault: the whole space in CI's time; the broker before needs no more.)
    let amid = |variant| Config {
        failover_amid_switchover: true,
        faults: if run::deep() { 2 } else { 1 },
        ..switchover_config(variant)
    };
    let run =
        explore_until(amid(Variant::TargetOpensAtOnce), stateright::HasDiscoveries::AllFailures);
    println!("{}", run.summary("a failover amid a switchover, one incarnation"));
    assert!(run.exhausted, "{}", run.summary("not every state was checked"));
    assert!(run.found(ONE_OPEN).is_some(), "the target opening at once is no counterexample");
    if let Some(path) = run.found(ONE_OPEN_PER_INCARNATION) {
        let trace = render(path, Some(ONE_OPEN_PER_INCARNATION));
        panic!("two open primaries of one incarnation:\n{trace}");
    }
    let wanted = [ONE_OPEN_PER_INCARNATION].into_iter().collect();
    let run = explore_until(
        amid(Variant::PendingIncarnationNow),
        stateright::HasDiscoveries::AnyOf(wanted),
    );
    let path = run.found(ONE_OPEN_PER_INCARNATION).unwrap_or_else(|| {
        panic!("{}", run.summary("the broker before: no second primary of one incarnation"))
    });
    let trace = render(path, Some(ONE_OPEN_PER_INCARNATION));
    println!("the broker before, {} states:\n{trace}", run.unique);
}

/// Found by this model, fixed in `complete_switchover` (`switchover.completed`) and the broker:
/// an old primary that never followed its switchover's target keeps `switchover.pending`;
/// after later switchovers, `switchover --to T` completed that stale record first (or T
/// refused it, and the old primary took its role back), as did a second broker's late call:
/// a second primary of the same incarnation, which nothing fences.
#[test]
fn a_stale_switchover_completed_again_makes_a_second_primary_of_one_incarnation() {
    let config = Config {
        failovers: 0,
        switchovers: 3,
        brokers: 1,
        ..switchover_config(Variant::CompleteTwice)
    };
    let (name, trace) = hunt("a stale switchover completed again", config);
    assert!(name == ONE_OPEN && trace.contains("takes over"), "{trace}");
}

/// Switchovers and failovers under redo routes (`model/routes.rs`), a failover allowed while
/// a switchover is half done (CI: two faults; deep: three, and a third switchover run).
/// Without `--force`: with it a
/// failover may open without sealing its relay, and the routes argument does not hold
/// (docs/roles.md, "Switchover and routes": the DBA's call, as failing over past a primary a
/// partition hides is).
fn routes_config(routes: Routes, variant: Variant) -> Config {
    Config {
        force: false,
        failover_amid_switchover: true,
        faults: if run::deep() { 3 } else { 2 },
        switchovers: if run::deep() { 3 } else { 2 },
        routes,
        ..switchover_config(variant)
    }
}

/// Under routes that differ with the primary, the switchover's checks of routes
/// (`roles::switchover::unseen_hops` at P's prepare and T's complete, and a target a
/// failover sealed refusing) keep the target from opening beside a failover's primary it
/// never hears of: never two primaries, in the whole space of each configuration; a
/// switchover still completes, and a failover through a sealed relay happens.
#[test]
fn under_routes_a_failover_amid_a_switchover_never_leaves_two_primaries() {
    for routes in [Routes::RELAYED_UNDER_TARGET, Routes::CASCADE] {
        let run = assert_safe(&format!("{routes:?}"), routes_config(routes, Variant::Current));
        assert!(run.exhausted, "{}", run.summary("not every state was checked"));
        for name in [SWITCHES_OVER, FAILS_OVER] {
            let path = run.found(name).unwrap_or_else(|| panic!("{routes:?}: never: {name}"));
            println!("{name}:\n{}\n", render(path, Some(name)));
        }
    }
}

/// Main before e05ad50, found by a review and now by this model: a switchover from A to B,
/// where B reaches C only through A while A ships to C directly, prepared; a failover to C
/// seals nothing (C heard A directly); B takes over and A, still in the old incarnation,
/// welcomes it: B opens beside C.
#[test]
fn without_the_routes_rule_a_target_opens_beside_a_failover_s_primary_it_never_hears_of() {
    let config = routes_config(Routes::RELAYED_UNDER_TARGET, Variant::NoRouteRule);
    let (name, trace) = hunt("no routes rule", config);
    assert!(name == ONE_OPEN && trace.contains("failover") && trace.contains("takes over"));
}

/// Main before e05ad50: under the cascade, A prepares a switchover to B; a failover to C,
/// which receives from B under A, seals B; B takes over all the same, and A welcomes it.
#[test]
fn a_target_a_failover_sealed_that_takes_over_opens_beside_its_primary() {
    let config = routes_config(Routes::CASCADE, Variant::SealedTargetCompletes);
    let (_, trace) = hunt("a sealed target completes", config);
    assert!(trace.contains("sealed below") && trace.contains("takes over"), "{trace}");
}

/// Found by this model once it had routes (fixed in `abort_switchover`): under the cascade, B
/// the primary prepares a switchover to A; C, which heard A last (B's hellos are forwarded to
/// it by A, and none had come), fails over from A and seals B, its relay under A; A's wait runs
/// out and B, aborting, takes its role back in incarnation 1, which A welcomes: B opens beside
/// C. The abort now reads the seal, with its database closed.
#[test]
fn an_abort_that_ignores_its_seal_takes_the_role_back_beside_a_failover_s_primary() {
    let config = routes_config(Routes::CASCADE, Variant::AbortBeforeSeals);
    let (name, trace) = hunt("an abort that ignores its seal", config);
    assert!(name == ONE_OPEN && trace.contains("takes its role back"), "{trace}");
}

/// The abort's checks made only before its database closes: a seal, or a failover's newer
/// incarnation adopted, between the check and the close goes unseen.
#[test]
fn an_abort_that_checks_only_before_its_database_closes_takes_the_role_back_beside_a_failover_s_primary()
 {
    let config = routes_config(Routes::CASCADE, Variant::AbortChecksEarly);
    let (name, trace) = hunt("an abort that checks early", config);
    assert!(name == ONE_OPEN && trace.contains("takes its role back"), "{trace}");
}

/// Failovers, restarts and cuts under redo routes, no switchover: a failover target behind a
/// relay seals it, and neither the old primary restarted nor a relay sealed makes a second
/// primary (CI: three failovers and six faults; deep: four and eight). Without `--force`, as
/// above.
#[test]
fn under_routes_failovers_and_restarts_never_leave_two_primaries() {
    for routes in [Routes::RELAYED_UNDER_TARGET, Routes::CASCADE] {
        let (faults, failovers) = if run::deep() { (8, 4) } else { (6, 3) };
        let config = Config { faults, failovers, force: false, routes, ..config(Variant::Current) };
        let run = assert_safe(&format!("{routes:?}, no switchover"), config);
        assert!(run.exhausted || run::deep(), "{}", run.summary("not every state was checked"));
        assert!(run.found(FAILS_OVER).is_some() && run.found(REOPENS_AFTER_FAILOVER).is_some());
    }
}

/// Under routes, failing over past a running primary a cut hides from the broker (the DBA's
/// call) too: only the documented window remains, with and without switchovers (CI: four
/// faults without; two with, and a failover amid a switchover).
#[test]
fn under_routes_past_a_hidden_primary_only_the_documented_window_remains() {
    for routes in [Routes::RELAYED_UNDER_TARGET, Routes::CASCADE] {
        let config = Config {
            faults: 4,
            force: false,
            hidden: Hidden::Yes,
            routes,
            ..config(Variant::Current)
        };
        let run = assert_safe(&format!("{routes:?}, hidden primaries"), config);
        assert!(run.exhausted || run::deep(), "{}", run.summary("not every state was checked"));
        let config = Config { hidden: Hidden::Yes, ..routes_config(routes, Variant::Current) };
        let run = assert_safe(&format!("{routes:?}, hidden primaries, switchovers"), config);
        assert!(run.exhausted || run::deep(), "{}", run.summary("not every state was checked"));
    }
}
