//! The demo's report as a person reads it, and as JSON.

use std::path::Path;

use anyhow::Context as _;

use super::{DemoReport, Verification};

pub fn render(report: &DemoReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nredoguard demo: {:.0} s, data in {}{}",
        report.duration_s,
        report.data_dir,
        if report.data_dir_kept { "" } else { " (deleted)" }
    );
    let _ = writeln!(
        out,
        "  {:<8} {:>9} {:>10} {:>10} {:>9} {:>9} {:>9}",
        "phase", "commits", "commits/s", "redo MB/s", "p50 µs", "p99 µs", "max µs"
    );
    for phase in &report.phases {
        let _ = writeln!(
            out,
            "  {:<8} {:>9} {:>10.0} {:>10.2} {:>9} {:>9} {:>9}",
            phase.name,
            phase.commits,
            phase.commits_per_s,
            phase.redo_mb_per_s,
            phase.commit_p50_us,
            phase.commit_p99_us,
            phase.commit_max_us
        );
    }
    let _ = writeln!(
        out,
        "  {:<8} {:>9} {:>10.0} {:>10.2} {:>9} {:>9} {:>9}",
        "total",
        report.commits,
        report.commits_per_s,
        report.redo_mb_per_s,
        report.commit_p50_us,
        report.commit_p99_us,
        report.commit_max_us
    );
    let _ = writeln!(
        out,
        "  redo: {} in {} writes for {} commits, {} log switches, {} logs archived",
        units::format_bytes(report.redo_bytes),
        report.stats.get("redo writes").copied().unwrap_or(0),
        report.stats.get("user commits").copied().unwrap_or(0),
        report.log_switches,
        report.archived_logs
    );
    let _ = writeln!(out, "  top wait events:");
    for event in report.waits.iter().take(5) {
        let _ = writeln!(
            out,
            "    {:<40} {:>9} waits {:>10.1} ms  avg {:>8.1} µs  p99 {:>7} µs",
            event.name,
            event.count,
            event.total_us as f64 / 1000.0,
            event.avg_us,
            event.p99_us
        );
    }
    let _ =
        writeln!(out, "  waits at log switches (sessions held up, by what the switch waited for):");
    for event in &report.switch_waits {
        let _ = writeln!(
            out,
            "    {:<40} {:>9} waits {:>10.1} ms  avg {:>8.1} µs  p99 {:>7} µs  max {:>7} µs",
            event.name,
            event.count,
            event.total_us as f64 / 1000.0,
            event.avg_us,
            event.p99_us,
            event.max_us
        );
    }
    if let (Some(standby), Some(lag)) = (&report.standby, &report.lag) {
        let _ = writeln!(
            out,
            "  standby: {} under {}; lags over {} samples (p50 / p99 / max):",
            transport_label(&standby.transport, standby.affirm),
            report.protection_mode,
            lag.samples
        );
        let _ = writeln!(
            out,
            "    transport lag {:>8.1} {:>8.1} {:>8.1} ms",
            lag.transport_p50_ms, lag.transport_p99_ms, lag.transport_max_ms
        );
        let _ = writeln!(
            out,
            "    apply lag     {:>8.1} {:>8.1} {:>8.1} ms",
            lag.apply_p50_ms, lag.apply_p99_ms, lag.apply_max_ms
        );
        let loss = &standby.zero_data_loss;
        let _ = writeln!(
            out,
            "  failover check: primary killed with SIGKILL; on the {} {}",
            if report.failover.is_some() { "new primary" } else { "standby" },
            loss.found()
        );
        let _ = writeln!(
            out,
            "  {} {}",
            verdict(loss.passed || standby.transport != "sync"),
            if loss.passed {
                "zero data loss: every acknowledged commit was on the standby".to_string()
            } else if standby.transport == "sync" {
                "acknowledged commits were missing on a SYNC standby".to_string()
            } else {
                format!(
                    "{} acknowledged orders were not yet on the ASYNC standby (the data loss ASYNC allows)",
                    loss.orders_missing
                )
            }
        );
    }
    if let Some(failover) = &report.failover {
        let _ = writeln!(
            out,
            "  {} {} to {}: {:.2} s without writes, {} acknowledged commits lost",
            verdict(
                failover.acknowledged_lost == 0 || report.protection_mode == "maximum_performance"
            ),
            failover.how,
            failover.target,
            failover.seconds_without_writes,
            failover.acknowledged_lost
        );
    }
    if let Some(reinstate) = &report.reinstate {
        let _ = writeln!(
            out,
            "  {} the old primary restarted (recovery replayed {} redo records) and was reinstated by {} in {:.1} s; {} divergent transactions set aside",
            verdict(reinstate.ok),
            reinstate.recovered_records,
            reinstate.by,
            reinstate.seconds,
            reinstate.divergent_transactions
        );
    }
    if let Some(switchover) = &report.switchover {
        let _ = writeln!(
            out,
            "  {} switchover back: {:.2} s, {:.2} s without writes",
            verdict(switchover.ok),
            switchover.seconds,
            switchover.seconds_without_writes
        );
    }
    let verification = &report.verification;
    if report.failover.is_some() {
        let _ = writeln!(out, "  at the end, on the primary: {}", verification.found());
        let _ = writeln!(
            out,
            "  {} every acknowledged commit is there, through the crash, the failover, the reinstate{}",
            verdict(verification.passed),
            if report.switchover.is_some() { " and the switchover" } else { "" }
        );
    } else {
        let _ = writeln!(
            out,
            "  crash recovery: primary restarted; recovery replayed {} redo records; {}",
            verification.recovered_records,
            verification.found()
        );
        let _ = writeln!(
            out,
            "  {} every acknowledged commit survived the crash on the primary",
            verdict(verification.passed)
        );
    }
    if let Some(standby) = &report.standby {
        let _ = writeln!(
            out,
            "  {} the standby caught up: {} keys equal on both",
            verdict(standby.data_equal),
            standby.keys_compared
        );
        let _ = writeln!(
            out,
            "  {} {} archived logs byte-identical on primary and standby",
            verdict(standby.archives_identical),
            standby.archives_compared
        );
    }
    let _ = writeln!(
        out,
        "  {}",
        if report.passed() { "ALL CHECKS PASSED" } else { "SOME CHECKS FAILED" }
    );
    out
}

impl Verification {
    /// Acknowledged commits it found missing: orders, counter increments, typed transactions.
    pub(super) fn acknowledged_lost(&self) -> u64 {
        self.orders_missing + self.counters_lost + self.typed_missing
    }

    /// What the check found: "8 counters exact, balances sum to 0, 10/10 orders present".
    fn found(&self) -> String {
        if self.while_writing {
            return format!(
                "{} counters {}, {}/{} orders present, {}/{} hash+list+sorted-set transactions present",
                self.counters,
                if self.counters_exact {
                    "at least their acknowledged increments"
                } else {
                    "BELOW their acknowledged increments"
                },
                self.orders_checked - self.orders_missing,
                self.orders_checked,
                self.typed_checked - self.typed_missing,
                self.typed_checked
            );
        }
        format!(
            "{} counters {}{}, balances sum to {}, {}/{} orders present, {}/{} hash+list+sorted-set transactions present",
            self.counters,
            if self.counters_exact { "exact" } else { "WRONG" },
            if self.counters_uncertain > 0 {
                format!(" (allowing {} increments whose reply was lost)", self.counters_uncertain)
            } else {
                String::new()
            },
            self.balances_sum,
            self.orders_checked - self.orders_missing,
            self.orders_checked,
            self.typed_checked - self.typed_missing,
            self.typed_checked
        )
    }
}

fn verdict(passed: bool) -> &'static str {
    if passed { "PASSED:" } else { "FAILED:" }
}

impl DemoReport {
    /// Every check passed: crash recovery lost nothing; with a standby, a SYNC standby had
    /// every acknowledged commit at the crash, and after catching up it holds the same data
    /// and the same archived logs as the primary.
    pub fn passed(&self) -> bool {
        self.verification.passed
            && self.failover.as_ref().is_none_or(|failover| {
                failover.acknowledged_lost == 0 || self.protection_mode == "maximum_performance"
            })
            && self.reinstate.as_ref().is_none_or(|reinstate| reinstate.ok)
            && self.switchover.as_ref().is_none_or(|switchover| switchover.ok)
            && self.standby.as_ref().is_none_or(|standby| {
                (standby.zero_data_loss.passed || standby.transport != "sync")
                    && standby.data_equal
                    && standby.archives_identical
                    && standby.archives_compared > 0
            })
    }
}

/// Writes `report` as JSON to `path`.
pub fn write_json(report: &DemoReport, path: &Path) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(report)?)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// "SYNC AFFIRM", "SYNC NOAFFIRM" or "ASYNC": AFFIRM or NOAFFIRM say when a SYNC write is
/// acknowledged; an ASYNC one never makes a commit wait.
pub fn transport_label(transport: &str, affirm: bool) -> String {
    match (transport, affirm) {
        ("sync", true) => "SYNC AFFIRM".into(),
        ("sync", false) => "SYNC NOAFFIRM".into(),
        (other, _) => other.to_uppercase(),
    }
}
