//! `fan_out` (issue 33): what four standbys cost the primary when it ships to each itself,
//! and when one cascading standby serves three of them. On a linkemu mesh of five sites (the
//! primary and its clients, four standbys, every pair `fan_out_rtt_ms` apart), three setups
//! up at once, all ASYNC under Maximum Performance:
//!
//! - `async_one_standby`: the primary ships to one standby (the reference);
//! - `async_four_direct`: to four standbys itself;
//! - `async_cascade_1_to_3`: to one standby, which forwards to the other three.
//!
//! Each takes the same steady load (`fan_out_commits_per_s` SETs of 100 bytes a second from
//! [`CONNECTIONS`] connections), in rounds that alternate in [`ORDER`] (A B C C B A) so that a
//! drift of the machine that is linear in time weighs on each alike; each setup's case sums
//! its rounds. Measured: the primary process's CPU time per commit (/proc/PID/stat, user +
//! system) and the bytes it sent its destinations per commit (the destinations' status
//! `wire_bytes_sent`: frames handed to their connections; and `bytes_sent`: redo bytes).
//! Target: with the cascade, both within 1.1 of one standby's. During the rounds the primaries
//! run on a CPU of their own and everything else (the standbys, the clients, linkemu) on the
//! others, as on hosts of their own ([`Placement`]): on one shared pair of CPUs, four more busy
//! processes beside the primary cost it switches and caches, and its log writer carried fewer
//! commits per write, which is the machine's cost, not the fan-out's.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;

use super::async_cpu::{Sum, summed};
use super::limits::measure_limits;
use super::members::{
    Layout, add_cpu_since, members_cpu_text, per_commit, primary_destinations, standbys_cpu_seconds,
};
use super::runs::{Bench, CaseKind};
use super::setup::{Mode, Setup};
use super::steady::SteadyLoad;
use super::{Experiment, Target, TransportCase, TransportConfig, TransportReport};
use crate::placement::Cpus;

/// Connections of a round.
const CONNECTIONS: u32 = 16;
/// Bytes of each SET's value.
const VALUE_BYTES: usize = 100;
/// The bound: with the cascade, the primary's cost at most 1.1 of one standby's.
const COST_LIMIT: f64 = 1.1;
/// The order of the rounds: each setup's places sum alike (1 + 6 = 2 + 5 = 3 + 4).
const ORDER: [Layout; 6] = [
    Layout::OneStandby,
    Layout::FourDirect,
    Layout::Cascade,
    Layout::Cascade,
    Layout::FourDirect,
    Layout::OneStandby,
];
const ORDER_TEXT: &str = "the order A B C C B A, A = async_one_standby, B = async_four_direct, C = async_cascade_1_to_3, the three setups up throughout";
/// The setups, in the order they start (and in the report).
const LAYOUTS: [Layout; 3] = [Layout::OneStandby, Layout::FourDirect, Layout::Cascade];

/// Brings the mesh up, measures its limits, starts the three setups, runs the rounds. Fails
/// only on an interrupt or when the limits cannot be measured; a mesh that cannot come up is
/// reported as skipped.
pub(super) fn run(
    config: &TransportConfig,
    work: &Path,
    standby_work: Option<&Path>,
    report: &mut TransportReport,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let rtt = config.fan_out_rtt_ms;
    let Some(network) = super::members::mesh_network(
        "fan-out",
        5,
        Duration::from_millis(u64::from(rtt)),
        &format!("fan-out: mesh of 5 sites up, {rtt} ms between each two"),
        report,
        progress,
    ) else {
        return Ok(());
    };
    let limits = measure_limits(&network, rtt, work, standby_work, config.duration, progress)?;
    let bench = Bench { config, network: &network, limits: &limits, work, standby_work };
    let what = |layout: Layout| format!("redoguard {} (fan-out)", layout.name());
    progress("fan-out: starting the three setups");
    let [one, four, cascade] = LAYOUTS;
    let started = bench.start(Mode::Routes(one), "fan-out");
    Bench::on_setup(started, &what(one), report, |one, report| {
        let started = bench.start(Mode::Routes(four), "fan-out");
        Bench::on_setup(started, &what(four), report, |four, report| {
            let started = bench.start(Mode::Routes(cascade), "fan-out");
            Bench::on_setup(started, &what(cascade), report, |cascade, report| {
                rounds(&bench, [one, four, cascade], report, progress)
            })
        })
    })?;
    report.limits.push(limits);
    Ok(())
}

/// The rounds in [`ORDER`] on the setups (in the order of [`LAYOUTS`]), then one case per
/// setup with their sums.
fn rounds(
    bench: &Bench<'_>,
    setups: [&Setup<'_>; 3],
    report: &mut TransportReport,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let load = SteadyLoad {
        connections: CONNECTIONS,
        commits_per_s: bench.config.fan_out_commits_per_s,
        value_bytes: VALUE_BYTES,
        sample_lag: false,
    };
    let placement = place(&setups)?;
    let mut sums: [Sum; 3] = Default::default();
    // Each setup's standbys' CPU seconds over its rounds, by member.
    let mut members: [std::collections::BTreeMap<String, f64>; 3] = Default::default();
    for (index, layout) in ORDER.into_iter().enumerate() {
        crate::interrupt::check()?;
        let position = index as u32 + 1;
        progress(&format!(
            "fan-out: {}, steady {} commits/s, round {position} of {}",
            layout.name(),
            load.commits_per_s,
            ORDER.len()
        ));
        let slot = LAYOUTS.iter().position(|&l| l == layout).expect("every layout of ORDER");
        let setup = setups[slot];
        let what = format!(
            "redoguard {} (fan-out), steady {} commits/s, round {position}",
            layout.name(),
            load.commits_per_s
        );
        let mode = Mode::Routes(layout);
        let cpu_before = standbys_cpu_seconds(layout, setup);
        let round = bench
            .steady_measured(setup, mode, load, None, CaseKind::of(Experiment::FanOut))
            .map(|(mut case, mut problems, measured)| {
                let forwarding = bench.forwarding_problems(layout, setup);
                if !forwarding.is_empty() {
                    case.notes.push_str(&format!("; NOT VALID: {}", forwarding.join("; ")));
                }
                problems.extend(forwarding);
                (case, problems, measured)
            });
        add_cpu_since(&mut members[slot], &cpu_before, &standbys_cpu_seconds(layout, setup));
        sums[slot].add(position, round, &what, report)?;
    }
    for ((sum, layout), members) in sums.into_iter().zip(LAYOUTS).zip(members) {
        if let Some(mut case) = summed(sum, ORDER_TEXT) {
            case.standbys = Some(primary_destinations(layout));
            case.member_cpu_us_per_commit = per_commit(&members, case.commits.unwrap_or(0));
            if let Some(placement) = &placement {
                case.notes.push_str(&format!("; {}", placement.text));
            }
            report.cases.push(case);
        }
    }
    Ok(())
}

/// Where the rounds run, until dropped: then this process's threads may run on every CPU
/// again (the servers stop after the rounds).
struct Placement {
    text: String,
    restore: Cpus,
}

impl Drop for Placement {
    fn drop(&mut self) {
        if let Err(error) = self.restore.apply_to_process(std::process::id()) {
            tracing::warn!(%error, "giving the bench its CPUs back after the fan-out rounds");
        }
    }
}

/// The three setups' primaries on this process's first CPU; their standbys and this process
/// (the clients of the steady load, the link emulator's threads) on the others. None on one
/// CPU.
fn place(setups: &[&Setup<'_>; 3]) -> anyhow::Result<Option<Placement>> {
    let allowed = Cpus::allowed().context("reading this process's CPUs")?;
    let Some((&first, rest)) = allowed.0.split_first() else { return Ok(None) };
    if rest.is_empty() {
        return Ok(None);
    }
    let (primaries, others) = (Cpus(vec![first]), Cpus(rest.to_vec()));
    let placement = Placement {
        text: format!(
            "placement: the primaries on CPU {}, everything else (the standbys, the clients, linkemu) on CPU {}, as on hosts of their own",
            primaries.list(),
            others.list()
        ),
        restore: allowed,
    };
    others.apply_to_process(std::process::id())?;
    for setup in setups {
        if let Some(pid) = setup.primary.pid() {
            primaries.apply_to_process(pid)?;
        }
        for standby in &setup.standbys {
            if let Some(pid) = standby.pid() {
                others.apply_to_process(pid)?;
            }
        }
    }
    Ok(Some(placement))
}

/// The cascade's CPU and bytes per commit against one standby's; the four direct standbys'
/// are shown beside, without a target.
pub(super) fn assess(cases: &mut [TransportCase]) {
    let one = cases
        .iter()
        .find(|case| {
            case.experiment == Experiment::FanOut && case.mode == Layout::OneStandby.name()
        })
        .map(|case| (case.cpu_us_per_commit, case.wire_bytes_per_commit));
    let Some((cpu, bytes)) = one else { return };
    for case in cases.iter_mut().filter(|case| {
        case.experiment == Experiment::FanOut && case.mode != Layout::OneStandby.name()
    }) {
        case.compared_with = Some(Layout::OneStandby.name().into());
        if case.mode != Layout::Cascade.name() {
            continue;
        }
        if let (Some(with), Some(reference)) = (case.cpu_us_per_commit, cpu) {
            case.target = Some(Target::at_most(
                format!(
                    "the primary's CPU per commit, four standbys through a cascade <= {COST_LIMIT} x one standby's"
                ),
                with,
                reference,
                COST_LIMIT,
            ));
        }
        if let (Some(with), Some(reference)) = (case.wire_bytes_per_commit, bytes) {
            case.more_targets = vec![Target::at_most(
                format!(
                    "the primary's bytes sent per commit, four standbys through a cascade <= {COST_LIMIT} x one standby's"
                ),
                with,
                reference,
                COST_LIMIT,
            )];
        }
    }
}

/// The `fan_out` cases as a table (empty if there is none): each setup's sums, then its
/// rounds.
pub(super) fn table(report: &TransportReport) -> String {
    let cases: Vec<&TransportCase> =
        report.cases.iter().filter(|case| case.experiment == Experiment::FanOut).collect();
    let mut out = String::new();
    if cases.is_empty() {
        return out;
    }
    let one = cases.iter().find(|case| case.mode == Layout::OneStandby.name());
    let ratio = |value: Option<f64>, reference: Option<f64>| match (value, reference) {
        (Some(value), Some(reference)) if reference > 0.0 => format!("{:.2}", value / reference),
        _ => "-".into(),
    };
    let _ = writeln!(
        out,
        "fan-out: the primary's cost of four standbys, direct or through a cascade, against one (steady load, rounds A B C C B A; /proc/PID/stat utime + stime; the primary's destinations' counters):"
    );
    if let Some(placement) = cases
        .iter()
        .find_map(|case| case.notes.split("; ").find(|part| part.starts_with("placement: ")))
    {
        let _ = writeln!(out, "  {placement}");
    }
    let _ = writeln!(
        out,
        "  {:<22} {:>7} {:>8} {:>10} {:>9} {:>9} {:>13} {:>8} {:>13} {:>8} {:>9}  target ratio",
        "mode",
        "shipped",
        "RTT ms",
        "commits/s",
        "p50 µs",
        "per logwr",
        "CPU µs/commit",
        "x one",
        "wire B/commit",
        "x one",
        "redo B/c"
    );
    let figure = |value: Option<f64>, decimals: usize| {
        value.map_or_else(|| "-".into(), |value| format!("{value:.decimals$}"))
    };
    for case in &cases {
        let _ = writeln!(
            out,
            "  {:<22} {:>7} {:>8.3} {:>10.0} {:>9.0} {:>9} {:>13} {:>8} {:>13} {:>8} {:>9}  {}",
            case.mode,
            case.standbys.map_or_else(|| "-".into(), |n| n.to_string()),
            case.rtt_ms,
            case.commits_per_s,
            case.p50_us,
            figure(case.commits_per_log_write, 2),
            figure(case.cpu_us_per_commit, 1),
            ratio(case.cpu_us_per_commit, one.and_then(|one| one.cpu_us_per_commit)),
            figure(case.wire_bytes_per_commit, 0),
            ratio(case.wire_bytes_per_commit, one.and_then(|one| one.wire_bytes_per_commit)),
            figure(case.redo_bytes_sent_per_commit, 0),
            super::report::verdict(&case.target)
        );
        for target in &case.more_targets {
            let _ = writeln!(
                out,
                "  {:<22} {:>126}  {}",
                "",
                "bytes sent:",
                super::report::verdict(&Some(target.clone()))
            );
        }
    }
    // The primary's redo senders and status readers (`redo-send-*`, `redo-recv-*`): what
    // shipping costs it, apart from the sessions and the log writer, whose CPU per commit
    // follows how many commits a log write carries.
    let transport = |case: &TransportCase| {
        case.cpu_us_per_commit_by_thread.as_ref().map(|threads| {
            threads
                .iter()
                .filter(|(name, _)| {
                    name.starts_with("redo-send-") || name.starts_with("redo-recv-")
                })
                .map(|(_, us)| us)
                .sum::<f64>()
        })
    };
    for case in &cases {
        let shipping = transport(case);
        let _ = writeln!(
            out,
            "  {:<22} the primary's senders and status readers {} µs per commit (x one {}), its other threads {} µs; the standbys' CPU µs per commit: {}",
            case.mode,
            figure(shipping, 1),
            ratio(shipping, one.and_then(|one| transport(one))),
            figure(shipping.zip(case.cpu_us_per_commit).map(|(t, all)| all - t), 1),
            members_cpu_text(case)
        );
    }
    out.push_str(&super::async_cpu::rounds_table(&cases, 22));
    out
}
