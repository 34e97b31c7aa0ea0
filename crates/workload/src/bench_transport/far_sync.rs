//! `far_sync` (issue 33): zero data loss at a distance for the price of a short hop. On a
//! linkemu mesh of three sites (the primary and its clients —`far_sync_near_rtt_ms`— a far
//! sync —`far_sync_far_rtt_ms`— the terminal standby, and the primary `far_sync_far_rtt_ms`
//! from the terminal too), three setups one after the other, each a closed loop of
//! `far_sync_clients` clients:
//!
//! - `sync_affirm_far_sync`: SYNC AFFIRM to the far sync, which forwards ASYNC to the
//!   terminal;
//! - `sync_affirm_direct`: SYNC AFFIRM to the terminal itself;
//! - `async_direct`: ASYNC to the terminal itself.
//!
//! Targets: through the far sync, commits/s ≥ 0.9 of ASYNC direct's; SYNC direct cannot
//! beat clients / RTT (each client waits a round trip per commit), which the table prints as
//! its bound.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use super::limits::measure_limits;
use super::members::{
    Layout, add_cpu_since, members_cpu_text, per_commit, primary_destinations, standbys_cpu_seconds,
};
use super::runs::{Bench, CaseKind};
use super::setup::Mode;
use super::{Experiment, Target, TransportCase, TransportConfig, TransportReport};

/// The setups, in the order they run.
const LAYOUTS: [Layout; 3] = [Layout::FarSync, Layout::SyncAffirmDirect, Layout::AsyncDirect];
/// The target: through the far sync, at least this share of ASYNC direct's commits/s.
const RATE_SHARE_MIN: f64 = 0.9;

/// The sites: the primary and the clients, the far sync, the terminal standby.
const SITE_FAR_SYNC: usize = 1;
const SITE_TERMINAL: usize = 2;

/// Brings the mesh up, measures its limits, runs every setup. Fails only on an interrupt or
/// when the limits cannot be measured; a mesh that cannot come up is reported as skipped.
pub(super) fn run(
    config: &TransportConfig,
    work: &Path,
    standby_work: Option<&Path>,
    report: &mut TransportReport,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let (near, far) = (config.far_sync_near_rtt_ms, config.far_sync_far_rtt_ms);
    let Some(network) = super::members::mesh_network(
        "far-sync",
        3,
        Duration::from_millis(u64::from(far)),
        &format!("far-sync: mesh up, primary —{near} ms— far sync —{far} ms— terminal"),
        report,
        progress,
    ) else {
        return Ok(());
    };
    network.set_pair_rtt(0, SITE_FAR_SYNC, near)?;
    // The limits' RTT is side A to side B: the primary to the far sync.
    let mut limits = measure_limits(&network, far, work, standby_work, config.duration, progress)?;
    let near_ms = limits.rtt_ms;
    limits.rtt_ms = network.measure_rtt_ms_between(0, SITE_TERMINAL)?;
    let relay_ms = network.measure_rtt_ms_between(SITE_FAR_SYNC, SITE_TERMINAL)?;
    let bench = Bench { config, network: &network, limits: &limits, work, standby_work };
    let clients = config.far_sync_clients;
    for layout in LAYOUTS {
        crate::interrupt::check()?;
        let mode = Mode::Routes(layout);
        progress(&format!("far-sync: {} starting", layout.name()));
        let what = format!("redoguard {} (far-sync)", layout.name());
        let started = bench.start(mode, "far-sync");
        Bench::on_setup(started, &what, report, |setup, report| {
            crate::interrupt::check()?;
            progress(&format!(
                "far-sync: {}, RTT {near_ms:.3} ms to the far sync, {:.3} ms to the terminal, {clients} clients",
                layout.name(),
                limits.rtt_ms
            ));
            let cpu_before = standbys_cpu_seconds(layout, setup);
            let case = bench.closed_loop(setup, mode, clients, CaseKind::of(Experiment::FarSync));
            let cpu_after = standbys_cpu_seconds(layout, setup);
            let case = case.map(|(mut case, mut problems)| {
                let mut members = std::collections::BTreeMap::new();
                add_cpu_since(&mut members, &cpu_before, &cpu_after);
                let commits = (case.commits_per_s * bench.config.duration.as_secs_f64()).round();
                case.member_cpu_us_per_commit = per_commit(&members, commits as u64);
                let forwarding = bench.forwarding_problems(layout, setup);
                if !forwarding.is_empty() {
                    case.notes.push_str(&format!("; NOT VALID: {}", forwarding.join("; ")));
                }
                problems.extend(forwarding);
                case.near_rtt_ms = (layout == Layout::FarSync).then_some(near_ms);
                case.standbys = Some(primary_destinations(layout));
                case.notes.push_str(&format!(
                    "; measured RTTs: primary to far sync {near_ms:.3} ms, far sync to terminal {relay_ms:.3} ms, primary to terminal {:.3} ms",
                    limits.rtt_ms
                ));
                (case, problems)
            });
            bench.record(report, &format!("{what}, {clients} clients"), case)
        })?;
    }
    report.limits.push(limits);
    Ok(())
}

/// Each case against ASYNC direct at the same clients; the far sync's target and SYNC
/// direct's bound.
pub(super) fn assess(cases: &mut [TransportCase]) {
    let async_direct: Vec<(u32, f64, f64)> = cases
        .iter()
        .filter(|case| {
            case.experiment == Experiment::FarSync && case.mode == Layout::AsyncDirect.name()
        })
        .map(|case| (case.clients, case.commits_per_s, case.p50_us))
        .collect();
    for case in cases.iter_mut().filter(|case| {
        case.experiment == Experiment::FarSync && case.mode != Layout::AsyncDirect.name()
    }) {
        if let Some(&(_, commits, p50)) =
            async_direct.iter().find(|(clients, ..)| *clients == case.clients)
        {
            case.compared_with = Some(Layout::AsyncDirect.name().into());
            case.commits_change_pct = Some((case.commits_per_s / commits - 1.0) * 100.0);
            case.p50_change_pct = Some((case.p50_us / p50 - 1.0) * 100.0);
            if case.mode == Layout::FarSync.name() {
                case.target = Some(Target::at_least(
                    format!(
                        "SYNC AFFIRM through a far sync: commits/s >= {RATE_SHARE_MIN} x ASYNC direct's (same clients)"
                    ),
                    case.commits_per_s,
                    commits,
                    RATE_SHARE_MIN,
                ));
            }
        }
        if case.mode == Layout::SyncAffirmDirect.name() && case.rtt_ms > 0.0 {
            case.target = Some(Target::at_most(
                "SYNC AFFIRM direct: commits/s <= clients / RTT (each client waits a round trip per commit)".into(),
                case.commits_per_s,
                sync_direct_bound(case),
                1.0,
            ));
        }
    }
}

/// The most commits a second `case`'s clients can make when each waits a round trip to the
/// terminal per commit.
fn sync_direct_bound(case: &TransportCase) -> f64 {
    f64::from(case.clients) * 1000.0 / case.rtt_ms
}

/// The `far_sync` cases as a table (empty if there is none).
pub(super) fn table(report: &TransportReport) -> String {
    let cases: Vec<&TransportCase> =
        report.cases.iter().filter(|case| case.experiment == Experiment::FarSync).collect();
    let mut out = String::new();
    if cases.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "far sync (closed loop; the terminal standby at the far RTT; change against async_direct at the same clients):"
    );
    let _ = writeln!(
        out,
        "  {:<22} {:>10} {:>11} {:>7} {:>10} {:>9} {:>9} {:>11} {:>11} {:>13} {:>9}  target ratio",
        "mode",
        "near RTT",
        "far RTT ms",
        "clients",
        "commits/s",
        "p50 µs",
        "p99 µs",
        "CPU µs/cmt",
        "commits/s %",
        "clients/RTT/s",
        "p50 %"
    );
    let mut cpu_lines = Vec::new();
    let pct = |value: Option<f64>| value.map_or_else(|| "-".into(), |v| format!("{v:+.1}"));
    for case in &cases {
        // The RTT each client waits for per commit: the far one direct, the near one through
        // the far sync.
        let bound = match case.mode.as_str() {
            mode if mode == Layout::SyncAffirmDirect.name() => {
                format!("{:.0}", sync_direct_bound(case))
            }
            mode if mode == Layout::FarSync.name() => {
                case.near_rtt_ms.filter(|&near| near > 0.0).map_or_else(
                    || "-".into(),
                    |near| format!("{:.0}", f64::from(case.clients) * 1000.0 / near),
                )
            }
            _ => "-".into(),
        };
        let _ = writeln!(
            out,
            "  {:<22} {:>10} {:>11.3} {:>7} {:>10.0} {:>9.0} {:>9.0} {:>11} {:>11} {:>13} {:>9}  {}",
            case.mode,
            case.near_rtt_ms.map_or_else(|| "-".into(), |rtt| format!("{rtt:.3}")),
            case.rtt_ms,
            case.clients,
            case.commits_per_s,
            case.p50_us,
            case.p99_us,
            case.cpu_us_per_commit.map_or_else(|| "-".into(), |cpu| format!("{cpu:.1}")),
            pct(case.commits_change_pct),
            bound,
            pct(case.p50_change_pct),
            super::report::verdict(&case.target)
        );
        cpu_lines.push(format!(
            "  {:<22} the machine's CPUs {} % busy, {} µs of them per commit (every process and the kernel); the other members' CPU µs per commit: {}",
            case.mode,
            case.machine_cpu_busy_pct.map_or_else(|| "-".into(), |busy| format!("{busy:.0}")),
            case.machine_cpu_us_per_commit.map_or_else(|| "-".into(), |us| format!("{us:.0}")),
            members_cpu_text(case)
        ));
    }
    for line in cpu_lines {
        let _ = writeln!(out, "{line}");
    }
    // On one machine the far sync's work shares the primary's CPUs; with them all busy, the
    // commits/s the far sync's case could reach is ASYNC direct's times the ratio of their
    // CPU per commit.
    let of = |mode: Layout| cases.iter().find(|case| case.mode == mode.name());
    if let (Some(far), Some(direct)) = (of(Layout::FarSync), of(Layout::AsyncDirect))
        && let (Some(far_us), Some(direct_us)) =
            (far.machine_cpu_us_per_commit, direct.machine_cpu_us_per_commit)
        && far_us > 0.0
    {
        let _ = writeln!(
            out,
            "  all members share this machine's CPUs: at their CPU per commit, through the far sync the machine carries {:.2} of ASYNC direct's commits/s once its CPUs are all busy (a far sync on a host of its own takes its share off the primary's)",
            direct_us / far_us
        );
    }
    out
}
