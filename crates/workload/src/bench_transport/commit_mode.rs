//! `commit_mode`: the reference's COMMIT NOWAIT / BATCH against WAIT under SYNC (the rate
//! +10-35 %, the response time -90 %). One SYNC AFFIRM setup at `commit_mode_rtt_ms`; for
//! each mode and client count a closed loop whose connections each send `COMMITMODE <mode>`
//! before the clock starts. Each case is compared with `WAIT IMMEDIATE` (the default) at the
//! same client count.

use std::fmt::Write as _;

use super::runs::{Bench, CaseKind};
use super::setup::Mode;
use super::{Experiment, Target, TransportCase, TransportReport};

/// The commit modes, the reference (the default) first.
const COMMIT_MODES: [&str; 4] =
    ["WAIT IMMEDIATE", "WAIT BATCH", "NOWAIT IMMEDIATE", "NOWAIT BATCH"];
/// Where a case's commit mode is in the order the modes run (`None` first).
pub(super) fn position(commit_mode: &Option<String>) -> Option<usize> {
    commit_mode.as_deref().and_then(|mode| COMMIT_MODES.iter().position(|m| *m == mode))
}

/// The reference's response time with NOWAIT: -90 %, so at most 0.10 of WAIT's.
const NOWAIT_P50_LIMIT: f64 = 0.10;

/// Every mode at the bench's RTT. Fails only on an interrupt.
pub(super) fn run(
    bench: &Bench<'_>,
    report: &mut TransportReport,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let rtt = bench.rtt();
    let mode = Mode::SyncAffirm;
    progress(&format!("redoguard {} (commit modes) at RTT {rtt} ms: starting", mode.name()));
    let started = bench.start(mode, "commit-mode");
    let what = format!("redoguard commit modes at RTT {rtt} ms");
    Bench::on_setup(started, &what, report, |setup, report| {
        for commit_mode in COMMIT_MODES {
            for &clients in &bench.config.clients {
                crate::interrupt::check()?;
                progress(&format!(
                    "redoguard {} COMMITMODE {commit_mode}, RTT {rtt} ms (measured {:.3}), {clients} clients",
                    mode.name(),
                    bench.limits.rtt_ms
                ));
                let kind = CaseKind {
                    commit_mode: Some(commit_mode),
                    ..CaseKind::of(Experiment::CommitMode)
                };
                let case = bench.closed_loop(setup, mode, clients, kind);
                let what = format!(
                    "redoguard {} COMMITMODE {commit_mode} at RTT {rtt} ms, {clients} clients",
                    mode.name()
                );
                bench.record(report, &what, case)?;
            }
        }
        Ok(())
    })
}

/// Each case's change against WAIT IMMEDIATE at the same RTT and client count; NOWAIT's
/// latency target.
pub(super) fn assess(cases: &mut [TransportCase]) {
    let wait: Vec<(u32, u32, f64, f64)> = cases
        .iter()
        .filter(|case| {
            case.experiment == Experiment::CommitMode
                && case.commit_mode.as_deref() == Some(COMMIT_MODES[0])
        })
        .map(|case| (case.rtt_set_ms, case.clients, case.commits_per_s, case.p50_us))
        .collect();
    for case in cases.iter_mut().filter(|case| {
        case.experiment == Experiment::CommitMode
            && case.commit_mode.as_deref().is_some_and(|mode| mode != COMMIT_MODES[0])
    }) {
        let Some(&(.., commits, p50)) = wait
            .iter()
            .find(|(rtt, clients, ..)| (*rtt, *clients) == (case.rtt_set_ms, case.clients))
        else {
            continue;
        };
        case.compared_with = Some(COMMIT_MODES[0].into());
        case.commits_change_pct = Some((case.commits_per_s / commits - 1.0) * 100.0);
        case.p50_change_pct = Some((case.p50_us / p50 - 1.0) * 100.0);
        if case.commit_mode.as_deref().is_some_and(|mode| mode.starts_with("NOWAIT")) {
            case.target = Some(Target::at_most(
                format!(
                    "COMMITMODE NOWAIT p50 <= {NOWAIT_P50_LIMIT} x WAIT IMMEDIATE p50 (the reference: -90 %)"
                ),
                case.p50_us,
                p50,
                NOWAIT_P50_LIMIT,
            ));
        }
    }
}

/// The `commit_mode` cases as a table (empty if there is none).
pub(super) fn table(report: &TransportReport) -> String {
    let cases: Vec<&TransportCase> =
        report.cases.iter().filter(|case| case.experiment == Experiment::CommitMode).collect();
    let mut out = String::new();
    if cases.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "COMMITMODE under SYNC AFFIRM (closed loop; change against WAIT IMMEDIATE at the same clients):"
    );
    let _ = writeln!(
        out,
        "  {:<18} {:>7} {:>8} {:>7} {:>10} {:>9} {:>9} {:>13} {:>9}  target ratio",
        "COMMITMODE",
        "RTT set",
        "RTT ms",
        "clients",
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
            "  {:<18} {:>7} {:>8.3} {:>7} {:>10.0} {:>9.0} {:>9.0} {:>13} {:>9}  {}",
            case.commit_mode.as_deref().unwrap_or("-"),
            case.rtt_set_ms,
            case.rtt_ms,
            case.clients,
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
