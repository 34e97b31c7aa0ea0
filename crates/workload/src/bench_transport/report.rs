//! What the report says: each case's target, the order of the cases, and the tables a person
//! reads.

use super::steady::LAG_SAMPLE_INTERVAL;
use super::{Experiment, Target, TransportCase, TransportReport};
use super::{async_cpu, commit_mode, fan_out, far_sync, quorum, sync_rate};

/// Sets each redoguard case's target (see the module documentation), and the changes the
/// experiments compare.
pub(super) fn assess(cases: &mut [TransportCase]) {
    let base = |case: &TransportCase| {
        case.system == "redoguard" && matches!(case.experiment, Experiment::Modes | Experiment::Lag)
    };
    let alone: Vec<(u32, u32, f64)> = cases
        .iter()
        .filter(|case| base(case) && case.mode == "no_standby" && case.load == "closed_loop")
        .map(|case| (case.rtt_set_ms, case.clients, case.commits_per_s))
        .collect();
    // The primary alone's commits/s at a case's RTT and client count, if it ran.
    let alone_at = |case: &TransportCase| {
        alone
            .iter()
            .find(|(rtt, clients, _)| *rtt == case.rtt_set_ms && *clients == case.clients)
            .map(|&(_, _, reference)| reference)
    };
    // The peers' synchronous cases: PostgreSQL `synchronous_commit = on`, Redis `WAIT 1`.
    let peers: Vec<(String, u32, u32, f64)> = cases
        .iter()
        .filter(|case| {
            case.experiment == Experiment::Modes
                && matches!(
                    (case.system.as_str(), case.mode.as_str()),
                    ("postgresql", "sync_commit_on") | ("redis", "wait_1")
                )
        })
        .map(|case| (case.system.clone(), case.rtt_set_ms, case.clients, case.commits_per_s))
        .collect();
    for case in cases.iter_mut().filter(|case| base(case)) {
        if (case.mode.as_str(), case.load.as_str()) == ("sync_affirm", "closed_loop")
            && case.clients > 1
        {
            case.more_targets = peers
                .iter()
                .filter(|(_, rtt, clients, _)| *rtt == case.rtt_set_ms && *clients == case.clients)
                .map(|(system, _, _, reference)| {
                    let peer = if system == "redis" {
                        "Redis WAIT 1"
                    } else {
                        "PostgreSQL synchronous_commit = on"
                    };
                    Target::at_least(
                        format!("SYNC AFFIRM commits/s >= {peer} commits/s (same RTT and clients)"),
                        case.commits_per_s,
                        *reference,
                        1.0,
                    )
                })
                .collect();
        }
        case.target = match (case.mode.as_str(), case.load.as_str()) {
            ("async", "closed_loop") => alone_at(case).map(|reference| {
                    Target::at_least(
                        "ASYNC commits/s >= 0.97 x no_standby commits/s (same RTT and clients)"
                            .into(),
                        case.commits_per_s,
                        reference,
                        0.97,
                    )
                }),
            ("sync_affirm", "closed_loop") if case.clients == 1 => {
                Some(Target::at_most(
                    "SYNC AFFIRM p50 <= 1.15 x max(local fdatasync, RTT + remote fdatasync)".into(),
                    case.p50_us,
                    case.protected_floor_us(),
                    1.15,
                ))
            }
            ("sync_affirm", "closed_loop") if case.rtt_set_ms == 0 => alone_at(case).map(|reference| {
                    Target::at_least(
                        "SYNC AFFIRM commits/s >= 0.85 x no_standby commits/s (loopback, same clients)"
                            .into(),
                        case.commits_per_s,
                        reference,
                        0.85,
                    )
                }),
            ("sync_affirm", "closed_loop") => Some(Target::at_most(
                "SYNC AFFIRM p50 <= 1.15 x (RTT + remote fdatasync)".into(),
                case.p50_us,
                case.rtt_ms * 1000.0 + case.remote_fdatasync_us(),
                1.15,
            )),
            ("async", "steady_rate") => case.transport_lag_p99_ms.map(|p99| {
                Target::at_most(
                    "ASYNC transport lag p99 <= 2 x RTT + 10 ms".into(),
                    p99,
                    2.0 * case.rtt_ms + 10.0,
                    1.0,
                )
            }),
            _ => None,
        };
    }
    sync_rate::assess(cases);
    commit_mode::assess(cases);
    async_cpu::assess(cases);
    far_sync::assess(cases);
    fan_out::assess(cases);
}

/// A figure of the tables, or `-`.
fn figure(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), |value| format!("{value:.0}"))
}

/// What the machine's CPUs allow, for the loopback SYNC AFFIRM cases held to a share of the
/// primary alone: at the CPU time per commit measured on the whole machine (the standby and
/// the clients run on the same CPUs), the most commits a second all the CPUs could carry, and
/// that as a share of the primary alone's commits/s. A ceiling below the target's share says
/// the target cannot be met on this machine without less CPU per commit.
pub(super) fn cpu_ceilings(commits: &[&TransportCase]) -> Vec<String> {
    commits
        .iter()
        .filter(|case| {
            case.system == "redoguard"
                && case.mode == "sync_affirm"
                && case.target.as_ref().is_some_and(|target| target.comparison == ">=")
        })
        .filter_map(|case| {
            let per_commit = case.machine_cpu_us_per_commit?;
            let cpus = case.machine_cpus?;
            let reference = case.target.as_ref()?.reference;
            let ceiling = f64::from(cpus) * 1e6 / per_commit;
            Some(format!(
                "ceiling: sync_affirm, RTT {} ms, {} clients, at {per_commit:.1} µs of the machine's CPU per commit: at most {ceiling:.0} commits/s on {cpus} CPUs, {:.2} of no_standby",
                case.rtt_set_ms,
                case.clients,
                ceiling / reference
            ))
        })
        .collect()
}

/// A target's ratio and verdict, for the tables.
pub(super) fn verdict(target: &Option<Target>) -> String {
    match target {
        Some(target) => {
            // A ratio that rounds to its limit is printed closer, so that "1.00 >= 1.00
            // MISSED" cannot be read.
            let decimals = if format!("{:.2}", target.ratio) == format!("{:.2}", target.limit) {
                4
            } else {
                2
            };
            format!(
                "{:>6.decimals$} {} {:<5.2} {}",
                target.ratio,
                target.comparison,
                target.limit,
                if target.met { "met" } else { "MISSED" }
            )
        }
        None => String::new(),
    }
}

/// Commit cases by RTT, clients, system and mode, so that the systems stand side by side;
/// the steady-rate cases after them.
pub(super) fn sort_cases(cases: &mut [TransportCase]) {
    let system = |name: &str| ["redoguard", "postgresql", "redis"].iter().position(|s| *s == name);
    let mode = |name: &str| {
        [
            "no_standby",
            "async",
            "sync_noaffirm",
            "sync_affirm",
            "sync_affirm_2_all",
            "sync_affirm_2_any_1",
            "sync_commit_off",
            "sync_commit_local",
            "sync_commit_remote_write",
            "sync_commit_on",
            "sync_commit_on_first_2",
            "sync_commit_on_any_1",
            "no_wait",
            "wait_1",
            "sync_affirm_far_sync",
            "sync_affirm_direct",
            "async_direct",
            "async_one_standby",
            "async_four_direct",
            "async_cascade_1_to_3",
        ]
        .iter()
        .position(|m| *m == name)
    };
    cases.sort_by(|a, b| {
        let experiment = |case: &TransportCase| match case.experiment {
            // The lag cases of old reports are `modes`.
            Experiment::Modes | Experiment::Lag => Experiment::Modes,
            other => other,
        };
        (
            experiment(a),
            a.load != "closed_loop",
            a.rtt_set_ms,
            a.clients,
            system(&a.system),
            mode(&a.mode),
        )
            .cmp(&(
                experiment(b),
                b.load != "closed_loop",
                b.rtt_set_ms,
                b.clients,
                system(&b.system),
                mode(&b.mode),
            ))
            .then(commit_mode::position(&a.commit_mode).cmp(&commit_mode::position(&b.commit_mode)))
            .then(a.standbys.cmp(&b.standbys))
            .then(
                a.redo_mb_per_s_target
                    .unwrap_or(0.0)
                    .total_cmp(&b.redo_mb_per_s_target.unwrap_or(0.0)),
            )
    });
}

/// The report as tables a person reads.
pub fn render(report: &TransportReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "bench transport: {:.0} s per case, files in {} ({}), {:.0} s in all",
        report.duration_s, report.dir, report.filesystem, report.elapsed_s
    );
    if !report.tcp_congestion.is_empty() {
        let _ = writeln!(
            out,
            "TCP congestion control of redoguard's redo connections: {}",
            report.tcp_congestion
        );
    }
    if let Some(dir) = &report.standby_dir {
        let _ = writeln!(
            out,
            "redoguard's standbys' files in {dir} ({}); \"2 writers at once\" is one there and one in {}",
            report.standby_filesystem.as_deref().unwrap_or("unknown"),
            report.dir
        );
    }
    let _ = writeln!(out, "physical limits (no server running):");
    let _ = writeln!(
        out,
        "  {:>7} {:>9} {:>15} {:>15} {:>22}{}",
        "RTT set",
        "RTT ms",
        "fdatasync p50",
        "fdatasync p99",
        "2 writers at once p50",
        if report.standby_dir.is_some() { "  standbys' fdatasync p50" } else { "" }
    );
    for limits in &report.limits {
        let _ = writeln!(
            out,
            "  {:>7} {:>9.3} {:>12.0} µs {:>12.0} µs {:>19.0} µs{}",
            limits.rtt_set_ms,
            limits.rtt_ms,
            limits.fdatasync_p50_us,
            limits.fdatasync_p99_us,
            limits.fdatasync_two_writers_p50_us,
            limits
                .standby_fdatasync_p50_us
                .map_or_else(String::new, |p50| format!(" {p50:>21.0} µs"))
        );
    }
    let commits: Vec<&TransportCase> = report
        .cases
        .iter()
        .filter(|case| case.load == "closed_loop" && case.experiment == Experiment::Modes)
        .collect();
    if !commits.is_empty() {
        let _ =
            writeln!(out, "commits (closed loop: each client commits again once acknowledged):");
        let _ = writeln!(
            out,
            "  {:<10} {:<24} {:>7} {:>8} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9} {:>6} {:>8}  target ratio",
            "system",
            "mode",
            "RTT set",
            "RTT ms",
            "clients",
            "commits/s",
            "p50 µs",
            "p99 µs",
            "fdsync µs",
            "logwr µs",
            "cpu %",
            "cpu µs/c"
        );
        let mut previous = None;
        for case in &commits {
            if previous.is_some_and(|previous| previous != (case.rtt_set_ms, case.clients)) {
                let _ = writeln!(out);
            }
            previous = Some((case.rtt_set_ms, case.clients));
            let _ = writeln!(
                out,
                "  {:<10} {:<24} {:>7} {:>8.3} {:>7} {:>10.0} {:>9.0} {:>9.0} {:>9.0} {:>9} {:>6} {:>8}  {}",
                case.system,
                case.mode,
                case.rtt_set_ms,
                case.rtt_ms,
                case.clients,
                case.commits_per_s,
                case.p50_us,
                case.p99_us,
                case.fdatasync_p50_us,
                figure(case.log_write_avg_us),
                figure(case.machine_cpu_busy_pct),
                figure(case.machine_cpu_us_per_commit),
                verdict(&case.target)
            );
        }
        let _ = writeln!(
            out,
            "  (cpu: the whole machine's CPU time in use during the case, every process and the kernel, as a share of all its CPUs and per commit)"
        );
        for case in commits.iter().filter(|case| !case.more_targets.is_empty()) {
            for target in &case.more_targets {
                let _ = writeln!(
                    out,
                    "  {} {}, RTT {} ms, {} clients: {}: {}",
                    case.system,
                    case.mode,
                    case.rtt_set_ms,
                    case.clients,
                    target.description,
                    verdict(&Some(target.clone()))
                );
            }
        }
        for line in cpu_ceilings(&commits) {
            let _ = writeln!(out, "  {line}");
        }
    }
    let steady: Vec<&TransportCase> = report
        .cases
        .iter()
        .filter(|case| {
            case.load == "steady_rate"
                && matches!(case.experiment, Experiment::Modes | Experiment::Lag)
        })
        .collect();
    if !steady.is_empty() {
        let _ = writeln!(
            out,
            "ASYNC data-loss exposure (transport lag at a steady redo rate, sampled every {} ms):",
            LAG_SAMPLE_INTERVAL.as_millis()
        );
        let _ = writeln!(
            out,
            "  {:>7} {:>8} {:>9} {:>9} {:>10} {:>9} {:>9} {:>9} {:>8}  target ratio (p99 / (2 x RTT + 10 ms))",
            "RTT set",
            "RTT ms",
            "asked MB/s",
            "redo MB/s",
            "commits/s",
            "lag p50",
            "lag p99",
            "lag max",
            "samples"
        );
        for case in steady {
            let ms =
                |value: Option<f64>| value.map_or_else(|| "-".into(), |v| format!("{v:.1} ms"));
            let _ = writeln!(
                out,
                "  {:>7} {:>8.3} {:>10.1} {:>9.2} {:>10.0} {:>9} {:>9} {:>9} {:>8}  {}",
                case.rtt_set_ms,
                case.rtt_ms,
                case.redo_mb_per_s_target.unwrap_or(0.0),
                case.redo_mb_per_s.unwrap_or(0.0),
                case.commits_per_s,
                ms(case.transport_lag_p50_ms),
                ms(case.transport_lag_p99_ms),
                ms(case.transport_lag_max_ms),
                case.transport_lag_samples.unwrap_or(0),
                verdict(&case.target)
            );
        }
    }
    out.push_str(&quorum::table(report));
    out.push_str(&sync_rate::table(report));
    out.push_str(&commit_mode::table(report));
    out.push_str(&async_cpu::table(report));
    out.push_str(&far_sync::table(report));
    out.push_str(&fan_out::table(report));
    let _ = writeln!(out, "targets: {} met, {} missed", report.targets_met, report.targets_missed);
    for skipped in &report.skipped {
        let _ = writeln!(out, "skipped: {skipped}");
    }
    for failure in &report.failures {
        let _ = writeln!(out, "FAILED: {failure}");
    }
    out
}
