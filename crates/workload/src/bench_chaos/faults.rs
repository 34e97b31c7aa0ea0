//! The faults of `bench chaos` and the seeded plan of a campaign: which faults each round
//! brings, to whom and when. Pure: the same seed, kinds and round length give the same plan,
//! and round `n`'s faults do not depend on how many rounds were asked for, so that
//! `--seed S --rounds N` replays the first `N` rounds of any campaign of seed `S`.
//!
//! Targets are roles, not names ("the primary", "the active observer"): a round starts from a
//! settled configuration, and its roles are resolved then (`nemesis`), so that a replay hits
//! the process in the same role even if an earlier round left another member primary.

use std::fmt;

use rand::rngs::StdRng;
use rand::seq::SliceRandom as _;
use rand::{Rng as _, SeedableRng as _};
use serde::Serialize;

/// Most faults in one round.
pub const FAULTS_PER_ROUND_MAX: usize = 2;
/// Most sides a partition moves through.
pub const PARTITION_PHASES_MAX: usize = 3;

/// What a fault does, in general.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// A full partition: a subset of the processes' sites cut from the rest, both ways; it
    /// may move once or twice during the fault (another subset each time).
    Partition,
    /// Asymmetric cuts: one to three directions between two processes' sites dropped.
    OneWay,
    /// kill -9 of a process (member or observer), restarted later.
    Kill,
    /// SIGSTOP of a process, SIGCONT later.
    Pause,
    /// kill -9 of an observer and its restart at once: whatever it held in memory is gone.
    ObserverRestart,
    /// The primary cut from some of the others, killed, and restarted while still cut.
    PrimaryRestartPartitioned,
    /// A standby's file system (a small tmpfs) filled to the last byte, freed later.
    DiskFull,
    /// `redoguard switchover --to` the SYNC standby, under load.
    Switchover,
    /// `redoguard failover --force --to` the SYNC standby, under load.
    Failover,
    /// Nothing: a control round (and the planted-fault check's round).
    Quiet,
}

impl FaultKind {
    /// Every kind a default campaign draws from (not `Quiet`).
    pub const ALL: [FaultKind; 9] = [
        FaultKind::Partition,
        FaultKind::OneWay,
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::ObserverRestart,
        FaultKind::PrimaryRestartPartitioned,
        FaultKind::DiskFull,
        FaultKind::Switchover,
        FaultKind::Failover,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Partition => "partition",
            FaultKind::OneWay => "one_way",
            FaultKind::Kill => "kill",
            FaultKind::Pause => "pause",
            FaultKind::ObserverRestart => "observer_restart",
            FaultKind::PrimaryRestartPartitioned => "primary_restart_partitioned",
            FaultKind::DiskFull => "disk_full",
            FaultKind::Switchover => "switchover",
            FaultKind::Failover => "failover",
            FaultKind::Quiet => "quiet",
        }
    }
}

impl std::str::FromStr for FaultKind {
    type Err = String;

    fn from_str(text: &str) -> Result<FaultKind, String> {
        FaultKind::ALL
            .into_iter()
            .chain([FaultKind::Quiet])
            .find(|kind| kind.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = FaultKind::ALL.iter().map(|kind| kind.name()).collect();
                format!("'{text}' is not a fault kind ({}, quiet)", names.join(", "))
            })
    }
}

/// A process, by the role it has when the round starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Primary,
    /// The SYNC AFFIRM standby: the fast-start failover target.
    SyncStandby,
    AsyncStandby,
    /// The observer the primary names as active.
    ActiveObserver,
    /// The other observer.
    StandbyObserver,
    /// The far sync (`--layout far-sync` only): a relay, never a primary nor a target.
    FarSync,
}

impl Role {
    /// Every process of a configuration, each in a site of its own.
    pub const ALL: [Role; 5] = [
        Role::Primary,
        Role::SyncStandby,
        Role::AsyncStandby,
        Role::ActiveObserver,
        Role::StandbyObserver,
    ];

    /// Every process of the far-sync layout: [`Role::ALL`] and the far sync.
    pub const WITH_FAR_SYNC: [Role; 6] = [
        Role::Primary,
        Role::SyncStandby,
        Role::AsyncStandby,
        Role::ActiveObserver,
        Role::StandbyObserver,
        Role::FarSync,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::SyncStandby => "sync standby",
            Role::AsyncStandby => "async standby",
            Role::ActiveObserver => "active observer",
            Role::StandbyObserver => "standby observer",
            Role::FarSync => "far sync",
        }
    }

    pub fn is_observer(self) -> bool {
        matches!(self, Role::ActiveObserver | Role::StandbyObserver)
    }
}

/// One fault, with its targets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Fault {
    /// Each side in turn (for an equal share of the fault's time) cut from every other
    /// process, both ways (the clients reach everyone).
    Partition {
        sides: Vec<Vec<Role>>,
    },
    /// Packets from the first of each pair to the second are dropped; the other way goes on.
    OneWay {
        cuts: Vec<(Role, Role)>,
    },
    Kill {
        process: Role,
    },
    Pause {
        process: Role,
    },
    ObserverRestart {
        observer: Role,
    },
    /// The primary is cut from `cut_from`, killed `kill_after_ms` into the fault and started
    /// again `down_ms` later, still cut; the cut ends with the fault.
    PrimaryRestartPartitioned {
        cut_from: Vec<Role>,
        kill_after_ms: u64,
        down_ms: u64,
    },
    DiskFull {
        standby: Role,
    },
    Switchover,
    Failover,
    Quiet,
}

impl Fault {
    pub fn kind(&self) -> FaultKind {
        match self {
            Fault::Partition { .. } => FaultKind::Partition,
            Fault::OneWay { .. } => FaultKind::OneWay,
            Fault::Kill { .. } => FaultKind::Kill,
            Fault::Pause { .. } => FaultKind::Pause,
            Fault::ObserverRestart { .. } => FaultKind::ObserverRestart,
            Fault::PrimaryRestartPartitioned { .. } => FaultKind::PrimaryRestartPartitioned,
            Fault::DiskFull { .. } => FaultKind::DiskFull,
            Fault::Switchover => FaultKind::Switchover,
            Fault::Failover => FaultKind::Failover,
            Fault::Quiet => FaultKind::Quiet,
        }
    }
}

fn roles(roles: &[Role]) -> String {
    roles.iter().map(|role| role.name()).collect::<Vec<_>>().join(", ")
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Partition { sides } => {
                let sides: Vec<String> =
                    sides.iter().map(|side| format!("{{{}}}", roles(side))).collect();
                write!(f, "partition {} from the rest", sides.join(", then "))
            }
            Fault::OneWay { cuts } => {
                let cuts: Vec<String> = cuts
                    .iter()
                    .map(|(from, to)| format!("{} -/-> {}", from.name(), to.name()))
                    .collect();
                write!(f, "one-way cut {}", cuts.join(", "))
            }
            Fault::Kill { process } => write!(f, "kill -9 the {}", process.name()),
            Fault::Pause { process } => write!(f, "SIGSTOP the {}", process.name()),
            Fault::ObserverRestart { observer } => {
                write!(f, "kill -9 and restart the {}", observer.name())
            }
            Fault::PrimaryRestartPartitioned { cut_from, kill_after_ms, down_ms } => write!(
                f,
                "cut the primary from {{{}}}, kill -9 it at +{kill_after_ms} ms, restart it {down_ms} ms later still cut",
                roles(cut_from)
            ),
            Fault::DiskFull { standby } => write!(f, "fill the {}'s file system", standby.name()),
            Fault::Switchover => write!(f, "switchover to the sync standby"),
            Fault::Failover => write!(f, "failover --force to the sync standby"),
            Fault::Quiet => write!(f, "nothing"),
        }
    }
}

/// A fault and when, within its round's fault phase, it begins and ends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ScheduledFault {
    pub fault: Fault,
    pub start_ms: u64,
    /// How long it lasts (a cut, a pause, a process down, a full disk); a command runs once
    /// at the start and the round waits for it.
    pub duration_ms: u64,
}

impl fmt::Display for ScheduledFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at +{} ms", self.fault, self.start_ms)?;
        if self.duration_ms > 0 {
            write!(f, " for {} ms", self.duration_ms)?;
        }
        Ok(())
    }
}

/// One round's faults.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RoundPlan {
    /// From 1.
    pub number: u32,
    pub faults: Vec<ScheduledFault>,
}

impl RoundPlan {
    /// The kinds of its faults, each once.
    pub fn kinds(&self) -> Vec<FaultKind> {
        let mut kinds: Vec<FaultKind> =
            self.faults.iter().map(|fault| fault.fault.kind()).collect();
        kinds.sort();
        kinds.dedup();
        kinds
    }
}

impl fmt::Display for RoundPlan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let faults: Vec<String> = self.faults.iter().map(ScheduledFault::to_string).collect();
        write!(f, "round {}: {}", self.number, faults.join("; "))
    }
}

/// The plan of round `number` (from 1) of a campaign of `seed`, drawing from `kinds` (at
/// least one), each fault within a fault phase of `phase_ms`, its targets among `roles` (the
/// layout's processes: [`Role::ALL`], or [`Role::WITH_FAR_SYNC`]).
pub fn round(
    seed: u64,
    number: u32,
    kinds: &[FaultKind],
    phase_ms: u64,
    roles: &[Role],
) -> RoundPlan {
    assert!(!kinds.is_empty(), "a campaign draws from at least one fault kind");
    // Every round its own generator: round n is the same whatever the number of rounds.
    let mut rng =
        StdRng::seed_from_u64(seed ^ u64::from(number).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let count = if kinds.len() > 1 && rng.random_bool(0.5) { 2 } else { 1 };
    let mut chosen: Vec<FaultKind> = kinds.to_vec();
    chosen.shuffle(&mut rng);
    chosen.truncate(count.min(FAULTS_PER_ROUND_MAX));
    chosen.sort();
    let faults =
        chosen.into_iter().map(|kind| scheduled(&mut rng, kind, phase_ms, roles)).collect();
    RoundPlan { number, faults }
}

/// The plans of rounds 1..=rounds.
pub fn plan(
    seed: u64,
    rounds: u32,
    kinds: &[FaultKind],
    phase_ms: u64,
    roles: &[Role],
) -> Vec<RoundPlan> {
    (1..=rounds).map(|number| round(seed, number, kinds, phase_ms, roles)).collect()
}

/// One side of a partition: half the time one process alone (the cases that matter most: a
/// primary, a target or an observer cut off), else any non-empty proper subset.
fn side(rng: &mut StdRng, roles: &[Role]) -> Vec<Role> {
    if rng.random_bool(0.5) {
        return vec![roles[rng.random_range(0..roles.len())]];
    }
    let mut all = roles.to_vec();
    all.shuffle(rng);
    let size = rng.random_range(1..roles.len());
    let mut side = all[..size].to_vec();
    side.sort();
    side
}

fn scheduled(rng: &mut StdRng, kind: FaultKind, phase_ms: u64, roles: &[Role]) -> ScheduledFault {
    // A restart or a command is one moment, anywhere in the phase; the others last.
    let instant =
        matches!(kind, FaultKind::ObserverRestart | FaultKind::Switchover | FaultKind::Failover);
    let (start_ms, duration_ms) = if instant {
        (rng.random_range(0..=phase_ms * 3 / 4), 0)
    } else {
        let start_ms = rng.random_range(0..=phase_ms / 4);
        (start_ms, rng.random_range(phase_ms / 4..=phase_ms - start_ms))
    };
    let fault = match kind {
        FaultKind::Partition => {
            let phases = rng.random_range(1..=PARTITION_PHASES_MAX);
            Fault::Partition { sides: (0..phases).map(|_| side(rng, roles)).collect() }
        }
        FaultKind::OneWay => {
            let count = rng.random_range(1..=3);
            let mut cuts: Vec<(Role, Role)> = Vec::new();
            while cuts.len() < count {
                let from = roles[rng.random_range(0..roles.len())];
                let to = roles[rng.random_range(0..roles.len())];
                if from != to && !cuts.contains(&(from, to)) {
                    cuts.push((from, to));
                }
            }
            Fault::OneWay { cuts }
        }
        FaultKind::Kill => Fault::Kill { process: roles[rng.random_range(0..roles.len())] },
        FaultKind::Pause => Fault::Pause { process: roles[rng.random_range(0..roles.len())] },
        FaultKind::ObserverRestart => Fault::ObserverRestart {
            observer: if rng.random_bool(0.75) {
                Role::ActiveObserver
            } else {
                Role::StandbyObserver
            },
        },
        FaultKind::PrimaryRestartPartitioned => {
            let others: Vec<Role> =
                roles.iter().copied().filter(|role| *role != Role::Primary).collect();
            let mut cut_from: Vec<Role> =
                others.iter().copied().filter(|_| rng.random_bool(0.6)).collect();
            if cut_from.is_empty() {
                cut_from.push(others[rng.random_range(0..others.len())]);
            }
            let kill_after_ms = rng.random_range(0..=duration_ms / 3);
            let down_ms = rng.random_range(0..=(duration_ms - kill_after_ms) / 2);
            Fault::PrimaryRestartPartitioned { cut_from, kill_after_ms, down_ms }
        }
        // With a far sync, its file system a third of the time (the standard layout's draw
        // is unchanged: the same seed gives the same plan).
        FaultKind::DiskFull if roles.contains(&Role::FarSync) => Fault::DiskFull {
            standby: [Role::SyncStandby, Role::AsyncStandby, Role::FarSync][rng.random_range(0..3)],
        },
        FaultKind::DiskFull => Fault::DiskFull {
            standby: if rng.random_bool(0.5) { Role::SyncStandby } else { Role::AsyncStandby },
        },
        FaultKind::Switchover => Fault::Switchover,
        FaultKind::Failover => Fault::Failover,
        FaultKind::Quiet => Fault::Quiet,
    };
    ScheduledFault { fault, start_ms, duration_ms }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_rounds_whatever_the_number_of_rounds() {
        let long = plan(42, 30, &FaultKind::ALL, 8000, &Role::ALL);
        let short = plan(42, 10, &FaultKind::ALL, 8000, &Role::ALL);
        assert_eq!(&long[..10], &short[..]);
        assert_ne!(
            plan(43, 10, &FaultKind::ALL, 8000, &Role::ALL),
            short,
            "another seed, other faults"
        );
    }

    #[test]
    fn rounds_hold_one_or_two_faults_of_the_kinds_asked_within_the_phase() {
        let kinds = [FaultKind::Kill, FaultKind::Partition, FaultKind::OneWay];
        let mut counts = [0usize; 3];
        for round in plan(7, 200, &kinds, 8000, &Role::ALL) {
            assert!((1..=FAULTS_PER_ROUND_MAX).contains(&round.faults.len()), "{round}");
            counts[round.faults.len()] += 1;
            assert_eq!(round.kinds().len(), round.faults.len(), "distinct kinds: {round}");
            for scheduled in &round.faults {
                assert!(kinds.contains(&scheduled.fault.kind()), "{round}");
                assert!(scheduled.start_ms + scheduled.duration_ms <= 8000, "{round}");
                assert!(scheduled.duration_ms >= 2000, "{round}");
                match &scheduled.fault {
                    Fault::Partition { sides } => {
                        assert!((1..=PARTITION_PHASES_MAX).contains(&sides.len()), "{round}");
                        for side in sides {
                            assert!(!side.is_empty() && side.len() < Role::ALL.len(), "{round}")
                        }
                    }
                    Fault::OneWay { cuts } => {
                        assert!((1..=3).contains(&cuts.len()));
                        assert!(cuts.iter().all(|(from, to)| from != to));
                    }
                    _ => {}
                }
            }
        }
        assert!(counts[1] > 50 && counts[2] > 50, "both one and two faults: {counts:?}");
        // A single kind gives one fault a round.
        assert!(
            plan(7, 20, &[FaultKind::Kill], 8000, &Role::ALL)
                .iter()
                .all(|round| round.faults.len() == 1)
        );
        // A restart or a command is a moment, anywhere but the last quarter.
        for round in
            plan(7, 50, &[FaultKind::ObserverRestart, FaultKind::Failover], 8000, &Role::ALL)
        {
            for scheduled in &round.faults {
                assert!(scheduled.duration_ms == 0 && scheduled.start_ms <= 6000, "{round}");
            }
        }
    }

    #[test]
    fn every_kind_is_drawn_and_named() {
        let mut seen = std::collections::BTreeSet::new();
        for round in plan(1, 100, &FaultKind::ALL, 6000, &Role::ALL) {
            seen.extend(round.kinds());
            assert!(round.to_string().starts_with(&format!("round {}: ", round.number)));
        }
        assert_eq!(seen.len(), FaultKind::ALL.len());
        for kind in FaultKind::ALL.into_iter().chain([FaultKind::Quiet]) {
            assert_eq!(kind.name().parse::<FaultKind>(), Ok(kind));
        }
        assert!("nap".parse::<FaultKind>().unwrap_err().contains("'nap' is not a fault kind"));
    }

    #[test]
    fn a_primary_restart_comes_back_within_its_fault() {
        for round in plan(3, 100, &[FaultKind::PrimaryRestartPartitioned], 8000, &Role::ALL) {
            let scheduled = &round.faults[0];
            let Fault::PrimaryRestartPartitioned { cut_from, kill_after_ms, down_ms } =
                &scheduled.fault
            else {
                panic!("{round}")
            };
            assert!(!cut_from.is_empty() && !cut_from.contains(&Role::Primary));
            assert!(kill_after_ms + down_ms <= scheduled.duration_ms, "{round}");
        }
    }

    /// The roles of a round's faults, every target of every fault.
    fn targets(round: &RoundPlan) -> Vec<Role> {
        let mut roles = Vec::new();
        for scheduled in &round.faults {
            match &scheduled.fault {
                Fault::Partition { sides } => roles.extend(sides.iter().flatten()),
                Fault::OneWay { cuts } => {
                    roles.extend(cuts.iter().flat_map(|(from, to)| [*from, *to]))
                }
                Fault::Kill { process } | Fault::Pause { process } => roles.push(*process),
                Fault::ObserverRestart { observer } => roles.push(*observer),
                Fault::PrimaryRestartPartitioned { cut_from, .. } => {
                    roles.push(Role::Primary);
                    roles.extend(cut_from)
                }
                Fault::DiskFull { standby } => roles.push(*standby),
                Fault::Switchover | Fault::Failover => roles.push(Role::SyncStandby),
                Fault::Quiet => {}
            }
        }
        roles
    }

    #[test]
    fn the_far_sync_is_hit_by_every_kind_of_fault_on_a_process_in_its_layout_only() {
        let standard = plan(5, 300, &FaultKind::ALL, 6000, &Role::ALL);
        assert!(standard.iter().all(|round| !targets(round).contains(&Role::FarSync)));
        let far_sync = plan(5, 300, &FaultKind::ALL, 6000, &Role::WITH_FAR_SYNC);
        let mut hit = std::collections::BTreeSet::new();
        for round in &far_sync {
            if targets(round).contains(&Role::FarSync) {
                hit.extend(round.kinds());
            }
        }
        for kind in [
            FaultKind::Partition,
            FaultKind::OneWay,
            FaultKind::Kill,
            FaultKind::Pause,
            FaultKind::PrimaryRestartPartitioned,
            FaultKind::DiskFull,
        ] {
            assert!(hit.contains(&kind), "{kind:?} never hits the far sync: {hit:?}");
        }
        // Never a role change onto it, never an observer's restart.
        for round in &far_sync {
            for scheduled in &round.faults {
                if let Fault::ObserverRestart { observer } = scheduled.fault {
                    assert!(observer.is_observer(), "{round}");
                }
            }
        }
    }
}
