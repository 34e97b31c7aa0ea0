//! `quorum`: a primary with two SYNC AFFIRM standbys, the commit waiting for both
//! (`sync_quorum = "all"`, Data Guard's rule) or for the first to answer (`"any 1"`,
//! PostgreSQL's `ANY 1`), against one SYNC AFFIRM standby, at each of `quorum_rtts_ms` and
//! each client count, in closed loops. Both standbys are on side B: each crosses the RTT.
//!
//! A server that refuses the `sync_quorum` key (it came with issue 11) runs `all` without
//! it (its rule is the same), and `any 1` is listed under `skipped` as "needs sync_quorum".

use std::fmt::Write as _;

use super::runs::{Bench, CaseKind};
use super::setup::{Mode, Quorum, refused_sync_quorum};
use super::{Experiment, TransportCase, TransportReport};

/// The setups, in the order they run.
const MODES: [Mode; 3] =
    [Mode::SyncAffirm, Mode::SyncAffirmTwo(Quorum::All), Mode::SyncAffirmTwo(Quorum::AnyOne)];

/// The marker of a case this server cannot run yet.
pub(super) const NEEDS_SYNC_QUORUM: &str = "needs sync_quorum";

/// Every setup at the bench's RTT. Fails only on an interrupt.
pub(super) fn run(
    bench: &Bench<'_>,
    report: &mut TransportReport,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let rtt = bench.rtt();
    for wanted in MODES {
        crate::interrupt::check()?;
        progress(&format!("redoguard {} (quorum) at RTT {rtt} ms: starting", wanted.name()));
        let mut mode = wanted;
        let mut started = bench.start(mode, "quorum");
        if let Err(error) = &started
            && refused_sync_quorum(error)
        {
            if wanted == Mode::SyncAffirmTwo(Quorum::All) {
                // The server's own rule is the same: every synchronized SYNC destination.
                mode = Mode::SyncAffirmTwo(Quorum::Default);
                started = bench.start(mode, "quorum");
            } else {
                let text = format!("{error:#}");
                // The parser's own words ("unknown field `sync_quorum`…") if the log has them.
                let line = text
                    .lines()
                    .find(|line| line.contains("unknown field"))
                    .or_else(|| {
                        text.lines().find(|line| {
                            line.contains("sync_quorum") || line.contains("sync_latency")
                        })
                    })
                    .unwrap_or("")
                    .split(", expected")
                    .next()
                    .unwrap_or("")
                    .trim();
                report.skipped.push(format!(
                    "redoguard {} at RTT {rtt} ms: {NEEDS_SYNC_QUORUM} (this server refused the key: {line})",
                    wanted.name()
                ));
                continue;
            }
        }
        let what = format!("redoguard {} at RTT {rtt} ms", mode.name());
        Bench::on_setup(started, &what, report, |setup, report| {
            for &clients in &bench.config.clients {
                crate::interrupt::check()?;
                progress(&format!(
                    "redoguard {} (quorum), RTT {rtt} ms (measured {:.3}), {clients} clients",
                    mode.name(),
                    bench.limits.rtt_ms
                ));
                let case =
                    bench.closed_loop(setup, mode, clients, CaseKind::of(Experiment::Quorum));
                let what = format!("redoguard {} at RTT {rtt} ms, {clients} clients", mode.name());
                bench.record(report, &what, case)?;
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// The `quorum` cases as a table (empty if there is none).
pub(super) fn table(report: &TransportReport) -> String {
    let cases: Vec<&TransportCase> =
        report.cases.iter().filter(|case| case.experiment == Experiment::Quorum).collect();
    let needs: Vec<&String> =
        report.skipped.iter().filter(|skipped| skipped.contains(NEEDS_SYNC_QUORUM)).collect();
    let mut out = String::new();
    if cases.is_empty() && needs.is_empty() {
        return out;
    }
    let _ = writeln!(out, "two SYNC standbys (closed loop; floor = RTT + raw fdatasync p50):");
    let _ = writeln!(
        out,
        "  {:<10} {:<30} {:>8} {:>7} {:>8} {:>7} {:>10} {:>9} {:>9} {:>9}",
        "system",
        "mode",
        "standbys",
        "RTT set",
        "RTT ms",
        "clients",
        "commits/s",
        "p50 µs",
        "p99 µs",
        "floor µs"
    );
    for case in cases {
        let _ = writeln!(
            out,
            "  {:<10} {:<30} {:>8} {:>7} {:>8.3} {:>7} {:>10.0} {:>9.0} {:>9.0} {:>9.0}",
            case.system,
            case.mode,
            case.standbys.map_or_else(|| "-".into(), |n| n.to_string()),
            case.rtt_set_ms,
            case.rtt_ms,
            case.clients,
            case.commits_per_s,
            case.p50_us,
            case.p99_us,
            case.rtt_ms * 1000.0 + case.fdatasync_p50_us
        );
    }
    for skipped in needs {
        let _ = writeln!(out, "  {skipped}");
    }
    out
}
