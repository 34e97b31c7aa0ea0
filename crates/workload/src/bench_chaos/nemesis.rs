//! The nemesis: a round's plan turned into timed actions on real processes and links, carried
//! out on schedule, then undone (`heal`). A round's roles are resolved to names once, from the
//! settled configuration it starts from (`timeline` is pure, and tested so).
//!
//! Cuts are counted per direction, so that two faults cutting the same pair do not end each
//! other's cut: a pair is cut both ways while both directions are wanted cut, one way while
//! one is, and restored when neither is.

use std::collections::BTreeMap;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::cluster::Cluster;
use super::faults::{Fault, Role, RoundPlan};
use super::settle::Settled;

/// How long a switchover or failover command may take before the round goes on without it
/// (the broker bounds each of its steps itself).
const COMMAND_WAIT_MAX: Duration = Duration::from_secs(150);

/// One timed action, on processes and links named for this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Action {
    /// Packets from the first site's process to the second's are dropped (counted).
    Cut(&'static str, &'static str),
    Uncut(&'static str, &'static str),
    Kill(&'static str),
    Restart(&'static str),
    Pause(&'static str),
    Resume(&'static str),
    FillDisk(&'static str),
    FreeDisk(&'static str),
    /// `redoguard switchover --to` this member.
    Switchover(&'static str),
    /// `redoguard failover --force --to` this member.
    Failover(&'static str),
}

/// Each role's process in the round's starting configuration (the far sync's, in a layout
/// that has one).
pub(crate) fn names(settled: &Settled) -> BTreeMap<Role, &'static str> {
    let mut names: BTreeMap<Role, &'static str> = [
        (Role::Primary, settled.primary),
        (Role::SyncStandby, settled.sync_standby),
        (Role::AsyncStandby, settled.async_standby),
        (Role::ActiveObserver, settled.active_observer),
        (Role::StandbyObserver, settled.standby_observer),
    ]
    .into();
    if let Some(far_sync) = settled.far_sync {
        names.insert(Role::FarSync, far_sync);
    }
    names
}

/// The round's actions in the order they are due (ms into the fault phase); actions due at
/// once keep the order the faults give them. A partition's other side is every role in
/// `names` (the layout's processes).
pub(crate) fn timeline(
    plan: &RoundPlan,
    names: &BTreeMap<Role, &'static str>,
) -> Vec<(u64, Action)> {
    let mut actions = Vec::new();
    for scheduled in &plan.faults {
        let (start, end) = (scheduled.start_ms, scheduled.start_ms + scheduled.duration_ms);
        let both_ways = |actions: &mut Vec<(u64, Action)>, a: &'static str, b: &'static str| {
            actions.push((start, Action::Cut(a, b)));
            actions.push((start, Action::Cut(b, a)));
            actions.push((end, Action::Uncut(a, b)));
            actions.push((end, Action::Uncut(b, a)));
        };
        match &scheduled.fault {
            Fault::Partition { sides } => {
                let share = scheduled.duration_ms / sides.len() as u64;
                for (phase, side) in sides.iter().enumerate() {
                    let from = start + phase as u64 * share;
                    let to = if phase + 1 == sides.len() { end } else { from + share };
                    for inside in side {
                        for outside in names.keys().filter(|role| !side.contains(role)) {
                            let (a, b) = (names[inside], names[outside]);
                            actions.push((from, Action::Cut(a, b)));
                            actions.push((from, Action::Cut(b, a)));
                            actions.push((to, Action::Uncut(a, b)));
                            actions.push((to, Action::Uncut(b, a)));
                        }
                    }
                }
            }
            Fault::OneWay { cuts } => {
                for (from, to) in cuts {
                    actions.push((start, Action::Cut(names[from], names[to])));
                    actions.push((end, Action::Uncut(names[from], names[to])));
                }
            }
            Fault::Kill { process } => {
                actions.push((start, Action::Kill(names[process])));
                actions.push((end, Action::Restart(names[process])));
            }
            Fault::Pause { process } => {
                actions.push((start, Action::Pause(names[process])));
                actions.push((end, Action::Resume(names[process])));
            }
            Fault::ObserverRestart { observer } => {
                actions.push((start, Action::Kill(names[observer])));
                actions.push((start, Action::Restart(names[observer])));
            }
            Fault::PrimaryRestartPartitioned { cut_from, kill_after_ms, down_ms } => {
                let primary = names[&Role::Primary];
                for other in cut_from {
                    both_ways(&mut actions, primary, names[other]);
                }
                actions.push((start + kill_after_ms, Action::Kill(primary)));
                actions.push((start + kill_after_ms + down_ms, Action::Restart(primary)));
            }
            Fault::DiskFull { standby } => {
                actions.push((start, Action::FillDisk(names[standby])));
                actions.push((end, Action::FreeDisk(names[standby])));
            }
            Fault::Switchover => {
                actions.push((start, Action::Switchover(names[&Role::SyncStandby])))
            }
            Fault::Failover => actions.push((start, Action::Failover(names[&Role::SyncStandby]))),
            Fault::Quiet => {}
        }
    }
    actions.sort_by_key(|(at, _)| *at);
    actions
}

/// The cuts wanted now, per direction (from, to) → how many faults want it.
#[derive(Debug, Default)]
pub(crate) struct Cuts {
    wanted: BTreeMap<(&'static str, &'static str), u32>,
}

impl Cuts {
    /// Changes the count of one direction; true if the mesh must change.
    fn change(&mut self, from: &'static str, to: &'static str, cut: bool) -> bool {
        let count = self.wanted.entry((from, to)).or_default();
        let before = *count > 0;
        *count = if cut { *count + 1 } else { count.saturating_sub(1) };
        before != (*count > 0)
    }

    fn is_cut(&self, from: &'static str, to: &'static str) -> bool {
        self.wanted.get(&(from, to)).is_some_and(|count| *count > 0)
    }

    /// Makes the mesh's link between the sites of `a` and `b` what is wanted.
    fn apply(&self, cluster: &Cluster<'_>, a: &'static str, b: &'static str) {
        let (site_a, site_b) = (cluster.site(a), cluster.site(b));
        let mesh = cluster.mesh;
        match (self.is_cut(a, b), self.is_cut(b, a)) {
            (true, true) => mesh.cut(site_a, site_b),
            (forward, backward) => {
                mesh.restore(site_a, site_b);
                if forward {
                    mesh.cut_one_way(site_a, site_b);
                }
                if backward {
                    mesh.cut_one_way(site_b, site_a);
                }
            }
        }
    }
}

/// Carries out a round's actions on schedule from `phase_started`; returns a line for each
/// thing done or that could not be. Commands run on threads of their own (joined by `heal`).
pub(crate) fn run(
    cluster: &mut Cluster<'_>,
    actions: &[(u64, Action)],
    phase_started: Instant,
    commands: &mut Vec<(String, JoinHandle<anyhow::Result<String>>)>,
) -> anyhow::Result<Vec<String>> {
    let mut notes = Vec::new();
    let mut cuts = Cuts::default();
    for (at, action) in actions {
        crate::interrupt::check()?;
        let due = phase_started + Duration::from_millis(*at);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let when = format!("+{:.1} s", phase_started.elapsed().as_secs_f64());
        let outcome: anyhow::Result<Option<String>> = match action {
            Action::Cut(from, to) | Action::Uncut(from, to) => {
                if cuts.change(from, to, matches!(action, Action::Cut(..))) {
                    cuts.apply(cluster, from, to);
                }
                Ok(None)
            }
            Action::Kill(name) => {
                cluster.kill(name);
                Ok(Some(format!("killed {name}")))
            }
            Action::Restart(name) if cluster.is_running(name) => Ok(None),
            Action::Restart(name) => {
                cluster.start_process(name).map(|()| Some(format!("started {name}")))
            }
            Action::Pause(name) if !cluster.is_running(name) => {
                Ok(Some(format!("{name} not running: not paused")))
            }
            Action::Pause(name) => cluster.pause(name).map(|()| Some(format!("paused {name}"))),
            Action::Resume(name) => {
                cluster.resume(name);
                Ok(Some(format!("resumed {name}")))
            }
            Action::FillDisk(name) => cluster
                .fill_disk(name)
                .map(|bytes| Some(format!("filled {name}'s file system ({} MiB)", bytes >> 20))),
            Action::FreeDisk(name) => {
                cluster.free_disk(name);
                Ok(Some(format!("freed {name}'s file system")))
            }
            Action::Switchover(to) | Action::Failover(to) => {
                let switchover = matches!(action, Action::Switchover(_));
                let admin = cluster.admin_addr(to).to_string();
                let namespace = cluster.mesh.namespace(cluster.site_clients()).to_string();
                let layout = cluster.layout();
                let to = to.to_string();
                let what = if switchover {
                    format!("switchover --to {to}")
                } else {
                    format!("failover --force --to {to}")
                };
                let thread = std::thread::spawn(move || -> anyhow::Result<String> {
                    let _inside = linkemu::namespace::enter(&namespace)?;
                    let started = Instant::now();
                    let mut tail = String::new();
                    if switchover {
                        broker::transitions::switchover(&admin, &to)?;
                    } else {
                        // A forced failover to a standby that lacks acknowledged commits loses
                        // them by the DBA's decision (docs/roles.md): only to a synchronized one.
                        if let Some(why) = not_synchronized(&admin, &to, layout) {
                            return Ok(format!("not run: {why}"));
                        }
                        let failover = broker::transitions::failover(&admin, &to, false, true)?;
                        if let Some(relay_tail) = failover.promoted.relay_tail {
                            tail = format!(" ({relay_tail})");
                        }
                    }
                    Ok(format!("done in {:.1} s{tail}", started.elapsed().as_secs_f64()))
                });
                commands.push((what.clone(), thread));
                Ok(Some(format!("began {what}")))
            }
        };
        match outcome {
            Ok(Some(note)) => notes.push(format!("{when} {note}")),
            Ok(None) => {}
            Err(error) => notes.push(format!("{when} {action:?} failed: {error:#}")),
        }
    }
    Ok(notes)
}

/// Why `to` is not a synchronized SYNC standby of an open primary now, as the broker's
/// report of the configuration (reached through `admin`) says; `None` if it is. A target
/// behind a relay (the far sync) is synchronized when the primary ships SYNC to the relay,
/// which is synchronized, and the primary lists the target among its synchronized fast-start
/// targets (the relay holds what it owes the target; the failover takes the relay's tail).
fn not_synchronized(admin: &str, to: &str, layout: super::layout::Layout) -> Option<String> {
    let configuration = match broker::gather(admin) {
        Ok(configuration) => configuration,
        Err(error) => return Some(format!("the configuration cannot be read: {error:#}")),
    };
    let Some(primary) = configuration.primary.clone() else {
        return Some("no open primary".into());
    };
    let status = match configuration.member(&primary).map(|member| member.admin.clone()) {
        Some(primary_admin) => admin::http_get(&primary_admin, "/status", Duration::from_secs(2))
            .ok()
            .and_then(|body| serde_json::from_str::<admin::ServerStatus>(&body).ok()),
        None => None,
    };
    let Some(status) = status else {
        return Some(format!("the primary {primary} does not answer"));
    };
    let synchronized_destination = |name: &str| {
        status.replication.destinations.iter().any(|destination| {
            destination.name == name && destination.phase == transport::Phase::Synchronized
        })
    };
    match layout.source(to, &primary) {
        None => (!synchronized_destination(to))
            .then(|| format!("{to} is not a synchronized standby of {primary}")),
        Some(relay) => {
            let listed = status
                .roles
                .as_ref()
                .and_then(|roles| roles.fast_start.as_ref())
                .and_then(|fast_start| fast_start.synchronized_targets.as_ref())
                .is_some_and(|targets| targets.iter().any(|target| target == to));
            (!(synchronized_destination(relay) && listed))
                .then(|| format!("{to} (behind {relay}) is not a synchronized target of {primary}"))
        }
    }
}

/// Undoes every fault: links restored, processes resumed, file systems freed, commands waited
/// for (bounded), and every process not running started again (a restart that fails now is
/// tried again while settling).
pub(crate) fn heal(
    cluster: &mut Cluster<'_>,
    commands: Vec<(String, JoinHandle<anyhow::Result<String>>)>,
    notes: &mut Vec<String>,
) {
    cluster.mesh.restore_all();
    cluster.resume_all();
    cluster.free_disks();
    for (what, thread) in commands {
        let deadline = Instant::now() + COMMAND_WAIT_MAX;
        while !thread.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if !thread.is_finished() {
            notes.push(format!("{what}: still running after {COMMAND_WAIT_MAX:?}; going on"));
            continue;
        }
        match thread.join() {
            Ok(Ok(outcome)) => notes.push(format!("{what}: {outcome}")),
            Ok(Err(error)) => notes.push(format!("{what}: refused or failed: {error:#}")),
            Err(_) => notes.push(format!("{what}: its thread panicked")),
        }
    }
    for name in cluster.process_names() {
        if !cluster.is_running(name) {
            match cluster.start_process(name) {
                Ok(()) => notes.push(format!("healed: started {name}")),
                Err(error) => notes.push(format!("healed: starting {name} failed: {error:#}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench_chaos::faults::ScheduledFault;

    fn roles() -> BTreeMap<Role, &'static str> {
        [
            (Role::Primary, "east"),
            (Role::SyncStandby, "west"),
            (Role::AsyncStandby, "south"),
            (Role::ActiveObserver, "obs1"),
            (Role::StandbyObserver, "obs2"),
        ]
        .into()
    }

    fn plan(faults: Vec<(Fault, u64, u64)>) -> RoundPlan {
        RoundPlan {
            number: 1,
            faults: faults
                .into_iter()
                .map(|(fault, start_ms, duration_ms)| ScheduledFault {
                    fault,
                    start_ms,
                    duration_ms,
                })
                .collect(),
        }
    }

    #[test]
    fn a_partition_cuts_every_pair_across_it_both_ways_and_ends_them() {
        let actions = timeline(
            &plan(vec![(
                Fault::Partition { sides: vec![vec![Role::Primary, Role::ActiveObserver]] },
                100,
                2000,
            )]),
            &roles(),
        );
        let cuts: Vec<&Action> =
            actions.iter().filter(|(at, _)| *at == 100).map(|(_, a)| a).collect();
        // 2 inside × 3 outside × 2 directions.
        assert_eq!(cuts.len(), 12);
        assert!(
            cuts.contains(&&Action::Cut("east", "west"))
                && cuts.contains(&&Action::Cut("west", "east"))
        );
        assert!(!cuts.contains(&&Action::Cut("east", "obs1")), "same side");
        assert_eq!(actions.iter().filter(|(at, _)| *at == 2100).count(), 12);
    }

    #[test]
    fn a_moving_partition_ends_each_side_as_the_next_begins() {
        let sides = vec![vec![Role::Primary], vec![Role::SyncStandby]];
        let actions = timeline(&plan(vec![(Fault::Partition { sides }, 0, 4000)]), &roles());
        let at = |ms: u64| -> Vec<&Action> {
            actions.iter().filter(|(at, _)| *at == ms).map(|(_, action)| action).collect()
        };
        assert_eq!(at(0).len(), 8, "east from 4 others, both ways");
        // At 2 s east's cuts end first, then west's begin (the counts see them in this order).
        let middle = at(2000);
        assert_eq!(middle.len(), 16);
        assert!(matches!(middle[0], Action::Uncut(..)) && matches!(middle[15], Action::Cut(..)));
        assert!(middle[8..].contains(&&Action::Cut("west", "east")));
        assert_eq!(at(4000).len(), 8);
    }

    #[test]
    fn a_primary_restart_is_killed_and_started_while_still_cut() {
        let fault = Fault::PrimaryRestartPartitioned {
            cut_from: vec![Role::SyncStandby],
            kill_after_ms: 500,
            down_ms: 700,
        };
        let actions = timeline(&plan(vec![(fault, 0, 3000)]), &roles());
        let order: Vec<(u64, Action)> = actions;
        assert_eq!(
            order,
            vec![
                (0, Action::Cut("east", "west")),
                (0, Action::Cut("west", "east")),
                (500, Action::Kill("east")),
                (1200, Action::Restart("east")),
                (3000, Action::Uncut("east", "west")),
                (3000, Action::Uncut("west", "east")),
            ]
        );
    }

    #[test]
    fn faults_of_one_round_interleave_by_time() {
        let actions = timeline(
            &plan(vec![
                (Fault::Kill { process: Role::ActiveObserver }, 1000, 2000),
                (Fault::OneWay { cuts: vec![(Role::SyncStandby, Role::Primary)] }, 0, 4000),
                (Fault::Switchover, 500, 3000),
                (Fault::ObserverRestart { observer: Role::StandbyObserver }, 200, 1000),
            ]),
            &roles(),
        );
        assert_eq!(
            actions,
            vec![
                (0, Action::Cut("west", "east")),
                (200, Action::Kill("obs2")),
                (200, Action::Restart("obs2")),
                (500, Action::Switchover("west")),
                (1000, Action::Kill("obs1")),
                (3000, Action::Restart("obs1")),
                (4000, Action::Uncut("west", "east")),
            ]
        );
    }

    #[test]
    fn cuts_are_counted_so_that_one_fault_does_not_end_anothers() {
        let mut cuts = Cuts::default();
        assert!(cuts.change("east", "west", true));
        assert!(!cuts.change("east", "west", true), "already cut");
        assert!(!cuts.change("east", "west", false), "still wanted by the other fault");
        assert!(cuts.is_cut("east", "west") && !cuts.is_cut("west", "east"));
        assert!(cuts.change("east", "west", false));
        assert!(!cuts.is_cut("east", "west"));
    }

    #[test]
    fn with_a_far_sync_a_partition_cuts_it_too_and_faults_name_it() {
        let mut names = roles();
        names.insert(Role::FarSync, "fs");
        let actions = timeline(
            &plan(vec![
                (Fault::Partition { sides: vec![vec![Role::Primary]] }, 0, 2000),
                (Fault::Kill { process: Role::FarSync }, 100, 1000),
                (Fault::OneWay { cuts: vec![(Role::FarSync, Role::SyncStandby)] }, 200, 1000),
            ]),
            &names,
        );
        let at_zero: Vec<&Action> =
            actions.iter().filter(|(at, _)| *at == 0).map(|(_, a)| a).collect();
        // east from 5 others, both ways.
        assert_eq!(at_zero.len(), 10);
        assert!(
            at_zero.contains(&&Action::Cut("east", "fs"))
                && at_zero.contains(&&Action::Cut("fs", "east"))
        );
        assert!(actions.contains(&(100, Action::Kill("fs"))));
        assert!(actions.contains(&(1100, Action::Restart("fs"))));
        assert!(actions.contains(&(200, Action::Cut("fs", "west"))));
        assert!(actions.contains(&(1200, Action::Uncut("fs", "west"))));
    }
}
