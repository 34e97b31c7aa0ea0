//! `async_cpu`: what an ASYNC standby costs the primary in CPU, which commits/s cannot show
//! while the standby shares the primary's CPUs. At `async_cpu_rtt_ms`, a primary alone and a
//! primary with one ASYNC standby (Maximum Performance) each take the same steady load
//! (`async_cpu_commits_per_s` SETs of 100 bytes a second from [`CONNECTIONS`] connections);
//! the primary process's CPU time (user + system, /proc/PID/stat, read just before and just
//! after the load) divided by the commits is held to at most 1.05 of the primary alone's.

use std::fmt::Write as _;

use super::runs::{Bench, CaseKind};
use super::setup::Mode;
use super::steady::SteadyLoad;
use super::{Experiment, Target, TransportCase, TransportReport};

/// Connections of a CPU case.
const CONNECTIONS: u32 = 16;
/// Bytes of each SET's value.
const VALUE_BYTES: usize = 100;
/// The bound: ASYNC costs the primary at most 5 % more CPU per commit.
const CPU_LIMIT: f64 = 1.05;

/// Both setups at the bench's RTT. Fails only on an interrupt.
pub(super) fn run(
    bench: &Bench<'_>,
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
    for mode in [Mode::NoStandby, Mode::Async] {
        crate::interrupt::check()?;
        progress(&format!(
            "redoguard {} (CPU), RTT {rtt} ms (measured {:.3}), steady {} commits/s",
            mode.name(),
            bench.limits.rtt_ms,
            load.commits_per_s
        ));
        let what = format!(
            "redoguard {} at RTT {rtt} ms, steady {} commits/s",
            mode.name(),
            load.commits_per_s
        );
        Bench::on_setup(bench.start(mode, "async-cpu"), &what, report, |setup, report| {
            let case = bench.steady(setup, mode, load, None, CaseKind::of(Experiment::AsyncCpu));
            bench.record(report, &what, case)
        })?;
    }
    Ok(())
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

/// The `async_cpu` cases as a table (empty if there is none).
pub(super) fn table(report: &TransportReport) -> String {
    let cases: Vec<&TransportCase> =
        report.cases.iter().filter(|case| case.experiment == Experiment::AsyncCpu).collect();
    let mut out = String::new();
    if cases.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "the primary's CPU per commit, with and without an ASYNC standby (steady load; /proc/PID/stat utime + stime):"
    );
    let _ = writeln!(
        out,
        "  {:<12} {:>7} {:>8} {:>10} {:>9} {:>9} {:>13}  target ratio",
        "mode", "RTT set", "RTT ms", "commits/s", "p50 µs", "p99 µs", "CPU µs/commit"
    );
    for case in cases {
        let _ = writeln!(
            out,
            "  {:<12} {:>7} {:>8.3} {:>10.0} {:>9.0} {:>9.0} {:>13}  {}",
            case.mode,
            case.rtt_set_ms,
            case.rtt_ms,
            case.commits_per_s,
            case.p50_us,
            case.p99_us,
            case.cpu_us_per_commit.map_or_else(|| "-".into(), |us| format!("{us:.1}")),
            super::report::verdict(&case.target)
        );
    }
    out
}
