//! `sync_rate`: the reference's experiment of the primary's cost of SYNC at a steady redo
//! rate as the RTT grows (under 5 % at 10 ms and 4 MB/s). At each of `sync_rate_rtts_ms`, a
//! primary alone and a primary with one SYNC AFFIRM standby (Maximum Availability) each take
//! `sync_rate_mb_per_s` of redo: 200 SETs a second on a fixed schedule from
//! [`CONNECTIONS`] connections, values of rate / 200 bytes (20 kB at 4 MB/s). The impact is
//! the change of commits/s and of commit latency against the primary alone at the same RTT.
//!
//! The reference's response time was that of whole transactions, of which the commit was a
//! part; here a transaction is its commit, so the latency change shows the RTT itself and is
//! reported, not held to 5 %. The commit rate is: the primary must keep the rate asked.

use std::fmt::Write as _;

use super::runs::{Bench, CaseKind};
use super::setup::Mode;
use super::steady::SteadyLoad;
use super::{Experiment, Target, TransportCase, TransportReport};

/// Connections of a `sync_rate` case: enough that each has 160 ms between commits, so that
/// the rate holds while a SYNC commit takes a few round trips.
const CONNECTIONS: u32 = 32;
/// The reference's bound on the cost, and the RTTs it holds at.
const IMPACT_LIMIT: f64 = 0.05;
const IMPACT_RTT_MS_MAX: u32 = 10;

/// Both setups at the bench's RTT. Fails only on an interrupt.
pub(super) fn run(
    bench: &Bench<'_>,
    report: &mut TransportReport,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let rtt = bench.rtt();
    let rate = bench.config.sync_rate_mb_per_s;
    for mode in [Mode::NoStandby, Mode::SyncAffirm] {
        crate::interrupt::check()?;
        progress(&format!(
            "redoguard {} (sync rate), RTT {rtt} ms (measured {:.3}), steady {rate} MB/s of redo",
            mode.name(),
            bench.limits.rtt_ms
        ));
        let what = format!("redoguard {} at RTT {rtt} ms, steady {rate} MB/s", mode.name());
        Bench::on_setup(bench.start(mode, "sync-rate"), &what, report, |setup, report| {
            let load = SteadyLoad::redo_rate(CONNECTIONS, rate, false);
            let kind = CaseKind::of(Experiment::SyncRate);
            let case = bench.steady(setup, mode, load, Some(rate), kind);
            bench.record(report, &what, case)
        })?;
    }
    Ok(())
}

/// Each SYNC case's change against the primary alone at the same RTT, and its target.
pub(super) fn assess(cases: &mut [TransportCase]) {
    let alone: Vec<(u32, f64, f64)> = cases
        .iter()
        .filter(|case| case.experiment == Experiment::SyncRate && case.mode == "no_standby")
        .map(|case| (case.rtt_set_ms, case.commits_per_s, case.p50_us))
        .collect();
    for case in cases
        .iter_mut()
        .filter(|case| case.experiment == Experiment::SyncRate && case.mode != "no_standby")
    {
        let Some(&(_, commits, p50)) = alone.iter().find(|(rtt, ..)| *rtt == case.rtt_set_ms)
        else {
            continue;
        };
        case.compared_with = Some("no_standby".into());
        case.commits_change_pct = Some((case.commits_per_s / commits - 1.0) * 100.0);
        case.p50_change_pct = Some((case.p50_us / p50 - 1.0) * 100.0);
        if case.rtt_set_ms <= IMPACT_RTT_MS_MAX {
            case.target = Some(Target::at_least(
                format!(
                    "SYNC AFFIRM at a steady rate, RTT <= {IMPACT_RTT_MS_MAX} ms: commits/s >= {} x no standby",
                    1.0 - IMPACT_LIMIT
                ),
                case.commits_per_s,
                commits,
                1.0 - IMPACT_LIMIT,
            ));
        }
    }
}

/// The `sync_rate` cases as a table (empty if there is none).
pub(super) fn table(report: &TransportReport) -> String {
    let cases: Vec<&TransportCase> =
        report.cases.iter().filter(|case| case.experiment == Experiment::SyncRate).collect();
    let mut out = String::new();
    if cases.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "SYNC AFFIRM at a steady redo rate against no standby (impact = change against no standby at the same RTT):"
    );
    let _ = writeln!(
        out,
        "  {:<12} {:>7} {:>8} {:>10} {:>9} {:>10} {:>9} {:>9} {:>13} {:>11}  target ratio",
        "mode",
        "RTT set",
        "RTT ms",
        "asked MB/s",
        "redo MB/s",
        "commits/s",
        "p50 µs",
        "p99 µs",
        "commits/s %",
        "p50 %"
    );
    for case in cases {
        let pct = |value: Option<f64>| value.map_or_else(|| "-".into(), |v| format!("{v:+.1}"));
        let _ = writeln!(
            out,
            "  {:<12} {:>7} {:>8.3} {:>10.1} {:>9.2} {:>10.0} {:>9.0} {:>9.0} {:>13} {:>11}  {}",
            case.mode,
            case.rtt_set_ms,
            case.rtt_ms,
            case.redo_mb_per_s_target.unwrap_or(0.0),
            case.redo_mb_per_s.unwrap_or(0.0),
            case.commits_per_s,
            case.p50_us,
            case.p99_us,
            pct(case.commits_change_pct),
            pct(case.p50_change_pct),
            super::report::verdict(&case.target)
        );
    }
    out
}
