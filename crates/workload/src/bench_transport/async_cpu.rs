//! `async_cpu`: what an ASYNC standby costs the primary in CPU, which commits/s cannot show
//! while the standby shares the primary's CPUs. At `async_cpu_rtt_ms`, a primary alone and a
//! primary with one ASYNC standby (Maximum Performance) each take the same steady load
//! (`async_cpu_commits_per_s` SETs of 100 bytes a second from [`CONNECTIONS`] connections);
//! the primary process's CPU time (user + system, /proc/PID/stat, read just before and just
//! after the load) divided by the commits is held to at most 1.05 of the primary alone's.
//!
//! CPU per commit follows the disk: a slower fdatasync makes larger commit groups, and each
//! commit then costs less. Two modes measured a minute apart saw different disks, so both
//! setups run side by side for the whole experiment and the load alternates between them in
//! [`ORDER`] (A B B A B A A B): a drift that is linear in time weighs on both modes alike.
//! Each mode's case is the sum of its rounds (CPU seconds / commits), with each round's
//! figures and its commits per log write beside, so that a reader sees whether the grouping
//! was alike.

use std::fmt::Write as _;

use super::runs::{Bench, CaseKind, Measured, quantile, sent_per_commit};
use super::setup::{Mode, Setup};
use super::steady::SteadyLoad;
use super::{CpuRound, Experiment, Target, TransportCase, TransportReport};

/// Connections of a CPU case.
const CONNECTIONS: u32 = 16;
/// Bytes of each SET's value.
const VALUE_BYTES: usize = 100;
/// The bound: ASYNC costs the primary at most 5 % more CPU per commit.
const CPU_LIMIT: f64 = 1.05;
/// The order of the rounds, each the bench's duration long: four of each mode, the sum of
/// positions alike (1 + 4 + 6 + 7 = 2 + 3 + 5 + 8), so that a linear drift cancels.
const ORDER: [Mode; 8] = [
    Mode::NoStandby,
    Mode::Async,
    Mode::Async,
    Mode::NoStandby,
    Mode::Async,
    Mode::NoStandby,
    Mode::NoStandby,
    Mode::Async,
];

/// Both setups at the bench's RTT, started together, then the rounds. Fails only on an
/// interrupt.
pub(super) fn run(
    bench: &Bench<'_>,
    report: &mut TransportReport,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let rtt = bench.rtt();
    let what = |mode: Mode| format!("redoguard {} (CPU) at RTT {rtt} ms", mode.name());
    crate::interrupt::check()?;
    progress(&format!("redoguard no_standby and async (CPU), RTT {rtt} ms: starting both"));
    let alone = bench.start(Mode::NoStandby, "async-cpu");
    Bench::on_setup(alone, &what(Mode::NoStandby), report, |alone, report| {
        let with = bench.start(Mode::Async, "async-cpu");
        Bench::on_setup(with, &what(Mode::Async), report, |with, report| {
            rounds(bench, alone, with, report, progress)
        })
    })
}

/// One mode's rounds so far.
#[derive(Default)]
pub(super) struct Sum {
    pub(super) cases: Vec<TransportCase>,
    pub(super) measured: Vec<Measured>,
    pub(super) rounds: Vec<CpuRound>,
    pub(super) problems: Vec<String>,
}

/// How the rounds of this experiment alternate, for the notes.
const ORDER_TEXT: &str = "the order A B B A B A A B, A = no_standby, both setups up throughout";

/// The rounds in [`ORDER`], then one case per mode with their sums.
fn rounds(
    bench: &Bench<'_>,
    alone: &Setup<'_>,
    with: &Setup<'_>,
    report: &mut TransportReport,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let rtt = bench.rtt();
    let load = SteadyLoad {
        connections: CONNECTIONS,
        commits_per_s: bench.config.async_cpu_commits_per_s,
        value_bytes: VALUE_BYTES,
        sample_lag: false,
    };
    let mut sums = [Sum::default(), Sum::default()];
    for (index, mode) in ORDER.into_iter().enumerate() {
        crate::interrupt::check()?;
        let position = index as u32 + 1;
        progress(&format!(
            "redoguard {} (CPU), RTT {rtt} ms (measured {:.3}), steady {} commits/s, round {position} of {}",
            mode.name(),
            bench.limits.rtt_ms,
            load.commits_per_s,
            ORDER.len()
        ));
        let (setup, sum) = match mode {
            Mode::NoStandby => (alone, &mut sums[0]),
            _ => (with, &mut sums[1]),
        };
        let what = format!(
            "redoguard {} at RTT {rtt} ms, steady {} commits/s, round {position}",
            mode.name(),
            load.commits_per_s
        );
        let round =
            bench.steady_measured(setup, mode, load, None, CaseKind::of(Experiment::AsyncCpu));
        sum.add(position, round, &what, report)?;
    }
    for sum in sums {
        if let Some(case) = summed(sum, ORDER_TEXT) {
            report.cases.push(case);
        }
    }
    Ok(())
}

impl Sum {
    /// Adds a round at `position` (its problems, or its error, to the report's failures under
    /// `what`). Fails only on an interrupt.
    pub(super) fn add(
        &mut self,
        position: u32,
        round: anyhow::Result<(TransportCase, Vec<String>, Measured)>,
        what: &str,
        report: &mut TransportReport,
    ) -> anyhow::Result<()> {
        match round {
            Ok((case, problems, measured)) => {
                report.failures.extend(problems.iter().map(|problem| format!("{what}: {problem}")));
                self.problems.extend(problems);
                self.rounds.push(CpuRound {
                    position,
                    commits: measured.commits,
                    cpu_s: measured.cpu_s.unwrap_or(f64::NAN),
                    cpu_us_per_commit: case.cpu_us_per_commit.unwrap_or(f64::NAN),
                    commits_per_log_write: case.commits_per_log_write.unwrap_or(f64::NAN),
                    log_write_avg_us: case.log_write_avg_us.unwrap_or(f64::NAN),
                });
                self.cases.push(case);
                self.measured.push(measured);
            }
            Err(error) => {
                crate::interrupt::check()?;
                report.failures.push(format!("{what}: {error:#}"));
            }
        }
        Ok(())
    }
}

/// One mode's case from its rounds: commits, CPU time, seconds, log writes and latencies
/// added up; the first round's case for what does not change between rounds. None if no
/// round ran.
pub(super) fn summed(sum: Sum, order: &str) -> Option<TransportCase> {
    let Sum { cases, measured, rounds, problems } = sum;
    let mut case = cases.first()?.clone();
    let commits: u64 = measured.iter().map(|round| round.commits).sum();
    let seconds: f64 = measured.iter().map(|round| round.seconds).sum();
    let cpu_s: Option<f64> = measured.iter().map(|round| round.cpu_s).sum();
    let mut latency_us = crate::bench_external::latency_histogram();
    for round in &measured {
        let _ = latency_us.add(&round.latency_us);
    }
    let user_commits: u64 = measured.iter().map(|round| round.user_commits).sum();
    let redo_writes: u64 = measured.iter().map(|round| round.redo_writes).sum();
    let log_writes: u64 = measured.iter().map(|round| round.log_writes).sum();
    let log_write_us: u64 = measured.iter().map(|round| round.log_write_us).sum();
    let redo_mb: f64 = cases
        .iter()
        .zip(&measured)
        .map(|(case, round)| case.redo_mb_per_s.unwrap_or(0.0) * round.seconds)
        .sum();
    case.commits_per_s = commits as f64 / seconds.max(f64::MIN_POSITIVE);
    case.p50_us = quantile(&latency_us, 0.5);
    case.p99_us = quantile(&latency_us, 0.99);
    case.log_write_avg_us = Some(log_write_us as f64 / log_writes.max(1) as f64);
    case.redo_mb_per_s = Some(redo_mb / seconds.max(f64::MIN_POSITIVE));
    case.commits_per_log_write = Some(user_commits as f64 / redo_writes.max(1) as f64);
    case.cpu_s = cpu_s;
    case.commits = Some(commits);
    case.cpu_us_per_commit = cpu_s.filter(|_| commits > 0).map(|cpu| cpu * 1e6 / commits as f64);
    let list = |value: fn(&CpuRound) -> f64| {
        rounds.iter().map(|round| format!("{:.1}", value(round))).collect::<Vec<_>>().join(", ")
    };
    let mut notes = format!(
        "sums of {} rounds (places {} in {order}); per round CPU µs/commit {}, commits per log write {}; {commits} commits, {:.1} commits per log write in all; each round: {}",
        rounds.len(),
        rounds.iter().map(|round| round.position.to_string()).collect::<Vec<_>>().join(", "),
        list(|round| round.cpu_us_per_commit),
        list(|round| round.commits_per_log_write),
        user_commits as f64 / redo_writes.max(1) as f64,
        case.notes.split("; NOT VALID").next().unwrap_or_default()
    );
    if !problems.is_empty() {
        notes.push_str(&format!("; NOT VALID: {}", problems.join("; ")));
    }
    case.notes = notes;
    case.cpu_rounds = Some(rounds);
    case.cpu_us_per_commit_by_thread = crate::process::threads_summed(
        measured.iter().map(|round| &round.threads_cpu_s),
        commits as f64 / 1e6,
    );
    let redo_bytes_sent: u64 = measured.iter().map(|round| round.redo_bytes_sent).sum();
    let wire_bytes_sent: u64 = measured.iter().map(|round| round.wire_bytes_sent).sum();
    (case.redo_bytes_sent_per_commit, case.wire_bytes_per_commit) =
        sent_per_commit(redo_bytes_sent, wire_bytes_sent, commits);
    Some(case)
}

/// The ASYNC case's CPU per commit against the primary alone's at the same RTT.
pub(super) fn assess(cases: &mut [TransportCase]) {
    let alone: Vec<(u32, f64, f64, Option<f64>)> = cases
        .iter()
        .filter(|case| case.experiment == Experiment::AsyncCpu && case.mode == "no_standby")
        .map(|case| (case.rtt_set_ms, case.commits_per_s, case.p50_us, case.cpu_us_per_commit))
        .collect();
    for case in cases
        .iter_mut()
        .filter(|case| case.experiment == Experiment::AsyncCpu && case.mode == "async")
    {
        let Some(&(_, commits, p50, cpu)) = alone.iter().find(|(rtt, ..)| *rtt == case.rtt_set_ms)
        else {
            continue;
        };
        case.compared_with = Some("no_standby".into());
        case.commits_change_pct = Some((case.commits_per_s / commits - 1.0) * 100.0);
        case.p50_change_pct = Some((case.p50_us / p50 - 1.0) * 100.0);
        if let (Some(with), Some(without)) = (case.cpu_us_per_commit, cpu) {
            case.target = Some(Target::at_most(
                format!("primary CPU per commit with an ASYNC standby <= {CPU_LIMIT} x without"),
                with,
                without,
                CPU_LIMIT,
            ));
        }
    }
}

/// The `async_cpu` cases as a table (empty if there is none): each mode's sums, then its
/// rounds.
pub(super) fn table(report: &TransportReport) -> String {
    let cases: Vec<&TransportCase> =
        report.cases.iter().filter(|case| case.experiment == Experiment::AsyncCpu).collect();
    let mut out = String::new();
    if cases.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "the primary's CPU per commit, with and without an ASYNC standby (steady load, the modes' rounds alternating A B B A B A A B; /proc/PID/stat utime + stime):"
    );
    let _ = writeln!(
        out,
        "  {:<12} {:>7} {:>8} {:>10} {:>9} {:>9} {:>7} {:>9} {:>9} {:>13}  target ratio",
        "mode",
        "RTT set",
        "RTT ms",
        "commits/s",
        "p50 µs",
        "p99 µs",
        "CPU s",
        "commits",
        "per logwr",
        "CPU µs/commit"
    );
    let figure = |value: Option<f64>, decimals: usize| {
        value.map_or_else(|| "-".into(), |value| format!("{value:.decimals$}"))
    };
    for case in &cases {
        let _ = writeln!(
            out,
            "  {:<12} {:>7} {:>8.3} {:>10.0} {:>9.0} {:>9.0} {:>7} {:>9} {:>9} {:>13}  {}",
            case.mode,
            case.rtt_set_ms,
            case.rtt_ms,
            case.commits_per_s,
            case.p50_us,
            case.p99_us,
            figure(case.cpu_s, 2),
            case.commits.map_or_else(|| "-".into(), |commits| commits.to_string()),
            figure(case.commits_per_log_write, 2),
            figure(case.cpu_us_per_commit, 1),
            super::report::verdict(&case.target)
        );
    }
    out.push_str(&rounds_table(&cases, 12));
    for case in &cases {
        if let (Some(redo), Some(wire)) =
            (case.redo_bytes_sent_per_commit, case.wire_bytes_per_commit)
        {
            let _ = writeln!(
                out,
                "  {}: sent to the standby per commit: {redo:.0} bytes of redo (whole units, as in the log files), {wire:.0} bytes on the wire ({:.2} of it; destination status bytes_sent, wire_bytes_sent)",
                case.mode,
                wire / redo.max(f64::MIN_POSITIVE)
            );
        }
    }
    out.push_str(&by_thread_table(&cases));
    out
}

/// Where each mode's CPU per commit went, by thread of the primary, and the difference
/// (empty if no case has the breakdown). A thread shown with less than 0.05 µs/commit in
/// every mode is left out.
/// Every round of `cases` in the order they ran: its mode (in a column `mode_width` wide), its
/// place, commits, CPU and group commit.
pub(super) fn rounds_table(cases: &[&TransportCase], mode_width: usize) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "  rounds:  {:<mode_width$} {:>5} {:>9} {:>7} {:>13} {:>9} {:>9}",
        "mode", "place", "commits", "CPU s", "CPU µs/commit", "per logwr", "logwr µs"
    );
    let mut rounds: Vec<(&str, &CpuRound)> = cases
        .iter()
        .flat_map(|case| {
            case.cpu_rounds.iter().flatten().map(move |round| (case.mode.as_str(), round))
        })
        .collect();
    rounds.sort_by_key(|(_, round)| round.position);
    for (mode, round) in rounds {
        let _ = writeln!(
            out,
            "           {:<mode_width$} {:>5} {:>9} {:>7.2} {:>13.1} {:>9.2} {:>9.0}",
            mode,
            round.position,
            round.commits,
            round.cpu_s,
            round.cpu_us_per_commit,
            round.commits_per_log_write,
            round.log_write_avg_us
        );
    }
    out
}

fn by_thread_table(cases: &[&TransportCase]) -> String {
    let modes: Vec<(&str, &std::collections::BTreeMap<String, f64>)> = cases
        .iter()
        .filter_map(|case| {
            case.cpu_us_per_commit_by_thread.as_ref().map(|threads| (case.mode.as_str(), threads))
        })
        .collect();
    let mut out = String::new();
    if modes.is_empty() {
        return out;
    }
    let mut names: Vec<&String> = modes
        .iter()
        .flat_map(|(_, threads)| threads.iter())
        .filter(|(_, us)| **us >= 0.05)
        .map(|(name, _)| name)
        .collect();
    names.sort();
    names.dedup();
    let _ = writeln!(
        out,
        "  by thread, CPU µs/commit (/proc/PID/task/*/stat; redoguard-worke: the runtime's workers, serving the sessions; redo-lgwr-task: the hand-over log writer; redo-send-* and redo-recv-*: a destination's sender and status reader; difference: the second mode's less the first's):"
    );
    let _ = write!(out, "           {:<16}", "thread");
    for (mode, _) in &modes {
        let _ = write!(out, " {mode:>12}");
    }
    let compared = modes.len() == 2;
    if compared {
        let _ = write!(out, " {:>12}", "difference");
    }
    out.push('\n');
    let of = |threads: &std::collections::BTreeMap<String, f64>, name: &str| {
        threads.get(name).copied().unwrap_or(0.0)
    };
    for name in names {
        let _ = write!(out, "           {name:<16}");
        for (_, threads) in &modes {
            let _ = write!(out, " {:>12.1}", of(threads, name));
        }
        if compared {
            let _ = write!(out, " {:>+12.1}", of(modes[1].1, name) - of(modes[0].1, name));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(commits: u64, threads: &[(&str, f64)]) -> Measured {
        Measured {
            commits,
            seconds: 1.0,
            cpu_s: Some(threads.iter().map(|(_, seconds)| seconds).sum()),
            latency_us: crate::bench_external::latency_histogram(),
            user_commits: commits,
            redo_writes: commits / 2,
            log_writes: commits / 2,
            log_write_us: commits * 50,
            threads_cpu_s: threads.iter().map(|(name, s)| (name.to_string(), *s)).collect(),
            redo_bytes_sent: 0,
            wire_bytes_sent: 0,
        }
    }

    /// A round with a standby that was sent `redo` bytes of redo as `wire` bytes.
    fn sent(commits: u64, redo: u64, wire: u64) -> Measured {
        Measured { redo_bytes_sent: redo, wire_bytes_sent: wire, ..round(commits, &[]) }
    }

    fn mode(name: &str, measured: Vec<Measured>) -> TransportCase {
        let case = TransportCase {
            experiment: Experiment::AsyncCpu,
            system: "redoguard".into(),
            mode: name.into(),
            ..TransportCase::default()
        };
        summed(
            Sum {
                cases: vec![case; measured.len()],
                rounds: Vec::new(),
                measured,
                problems: Vec::new(),
            },
            ORDER_TEXT,
        )
        .unwrap()
    }

    #[test]
    fn the_cpu_per_commit_by_thread_is_summed_over_the_rounds_and_its_difference_shown() {
        // 2 rounds of 1000 commits each: 0.05 + 0.07 s of the workers = 60 µs a commit.
        let alone = mode(
            "no_standby",
            vec![
                round(1000, &[("redoguard-worke", 0.05), ("redo-lgwr-task", 0.02)]),
                round(1000, &[("redoguard-worke", 0.07), ("redo-lgwr-task", 0.02)]),
            ],
        );
        let with = mode(
            "async",
            vec![
                round(
                    1000,
                    &[
                        ("redoguard-worke", 0.06),
                        ("redo-lgwr-task", 0.02),
                        ("redo-send-stand", 0.01),
                        ("db-ckpt", 0.00001),
                    ],
                ),
                round(1000, &[("redoguard-worke", 0.07), ("redo-lgwr-task", 0.03)]),
            ],
        );
        let threads = alone.cpu_us_per_commit_by_thread.as_ref().unwrap();
        assert_eq!(threads.len(), 2);
        assert!((threads["redoguard-worke"] - 60.0).abs() < 1e-9, "{threads:?}");
        let threads = with.cpu_us_per_commit_by_thread.as_ref().unwrap();
        assert!((threads["redo-send-stand"] - 5.0).abs() < 1e-9, "{threads:?}");
        assert!((threads["redo-lgwr-task"] - 25.0).abs() < 1e-9, "{threads:?}");
        let report = TransportReport { cases: vec![alone, with], ..TransportReport::default() };
        let table = table(&report);
        let line = |name: &str| {
            table
                .lines()
                .find(|line| line.trim_start().starts_with(name))
                .unwrap_or_else(|| panic!("no {name} in {table}"))
                .split_whitespace()
                .skip(1)
                .collect::<Vec<_>>()
        };
        assert_eq!(line("redoguard-worke"), ["60.0", "65.0", "+5.0"], "{table}");
        assert_eq!(line("redo-send-stand"), ["0.0", "5.0", "+5.0"], "{table}");
        assert_eq!(line("redo-lgwr-task"), ["20.0", "25.0", "+5.0"], "{table}");
        // Under 0.05 µs a commit in both modes: left out.
        assert!(!table.contains("db-ckpt"), "{table}");
        // A report from before the breakdown: no such table.
        let mut older = report.clone();
        for case in &mut older.cases {
            case.cpu_us_per_commit_by_thread = None;
        }
        assert!(!super::table(&older).contains("by thread"));
        let json = serde_json::to_string(&older).unwrap();
        assert!(!json.contains("by_thread"));
    }

    #[test]
    fn the_bytes_sent_per_commit_are_summed_over_the_rounds() {
        let alone = mode("no_standby", vec![round(1000, &[]), round(1000, &[])]);
        let with =
            mode("async", vec![sent(1000, 4_096_000, 500_000), sent(3000, 12_288_000, 1_100_000)]);
        assert_eq!(alone.redo_bytes_sent_per_commit, None, "nothing sent without a standby");
        assert_eq!(with.redo_bytes_sent_per_commit, Some(4096.0));
        assert_eq!(with.wire_bytes_per_commit, Some(400.0));
        let report = TransportReport { cases: vec![alone, with], ..TransportReport::default() };
        let table = table(&report);
        assert!(
            table.contains("async: sent to the standby per commit: 4096 bytes of redo")
                && table.contains("400 bytes on the wire (0.10 of it"),
            "{table}"
        );
        assert!(!table.contains("no_standby: sent"), "{table}");
    }

    /// The recorded run (docs/bench/transport-async-cpu.*) reads, and shows the sender and
    /// the bytes sent.
    #[test]
    fn the_recorded_run_shows_the_cpu_by_thread() {
        let report: TransportReport =
            serde_json::from_str(include_str!("../../../../docs/bench/transport-async-cpu.json"))
                .unwrap();
        let table = table(&report);
        assert!(table.contains("redo-send-stand"), "{table}");
        assert!(table.contains("difference"), "{table}");
        assert!(table.contains("bytes on the wire"), "{table}");
    }
}
