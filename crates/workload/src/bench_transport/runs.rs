//! The redoguard runs: a fresh setup per mode, and on it the closed-loop cases (each client
//! commits again once acknowledged) or the steady-rate ones (`steady`), each case recorded
//! with what it changed in the primary's counters and the primary's CPU time.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::limits::raw_fdatasync;
use super::setup::{Load, Mode, Setup};
use super::steady::{LAG_CONNECTIONS, LAG_SAMPLE_INTERVAL, SteadyLoad, steady_load};
use super::{Experiment, PathLimits, TransportCase, TransportConfig, TransportReport};
use crate::bench_external;
use crate::network::Network;

/// How long the raw fdatasync is measured just before and just after each case (half the
/// case's duration if that is shorter).
const RAW_CASE_DURATION: Duration = Duration::from_secs(1);

/// What a case is, beyond its setup's mode and load.
#[derive(Debug, Clone, Copy)]
pub(super) struct CaseKind {
    pub(super) experiment: Experiment,
    /// The `COMMITMODE` arguments every connection sends before the clock starts (`None`:
    /// the default, WAIT IMMEDIATE).
    pub(super) commit_mode: Option<&'static str>,
    /// Measure the raw fdatasync for 1 s just before and just after the case (the cases with
    /// a latency target); otherwise the RTT's limits give it.
    pub(super) fdatasync_around: bool,
}

impl CaseKind {
    pub(super) fn of(experiment: Experiment) -> CaseKind {
        CaseKind {
            experiment,
            commit_mode: None,
            fdatasync_around: matches!(experiment, Experiment::Modes | Experiment::Lag),
        }
    }
}

use crate::process::MachineCpu;
pub(super) use crate::process::cpu_seconds;
use crate::process::{thread_cpu_seconds, threads_since};

/// What one RTT's cases share.
pub(super) struct Bench<'a> {
    pub(super) config: &'a TransportConfig,
    pub(super) network: &'a Network,
    pub(super) limits: &'a PathLimits,
    pub(super) work: &'a Path,
    /// Where the standbys' data goes, if not in `work` (`standby_dir`).
    pub(super) standby_work: Option<&'a Path>,
}

/// What a case changed in the primary's counters.
pub(super) struct Deltas {
    redo_bytes: u64,
    /// The primary's own log writes ("log file parallel write"): count and total time.
    log_writes: u64,
    log_write_us: u64,
    redo_writes: u64,
    user_commits: u64,
    remote_waits: u64,
    remote_wait_us: u64,
    /// What the primary sent its destinations, all together: redo bytes (as in the log files)
    /// and bytes of frames on the wire (`wire_bytes_sent`).
    redo_bytes_sent: u64,
    wire_bytes_sent: u64,
}

pub(super) fn deltas(before: &admin::ServerStatus, after: &admin::ServerStatus) -> Deltas {
    let stat = |name: &str| after.metrics.stat(name).saturating_sub(before.metrics.stat(name));
    let wait = |status: &admin::ServerStatus| {
        status.metrics.wait("SYNC remote write").map_or((0, 0), |wait| (wait.count, wait.total_us))
    };
    let (count_before, us_before) = wait(before);
    let (count_after, us_after) = wait(after);
    let writes = |status: &admin::ServerStatus| {
        status
            .metrics
            .wait("log file parallel write")
            .map_or((0, 0), |wait| (wait.count, wait.total_us))
    };
    let (writes_before, write_us_before) = writes(before);
    let (writes_after, write_us_after) = writes(after);
    Deltas {
        redo_bytes: stat("redo size"),
        log_writes: writes_after.saturating_sub(writes_before),
        log_write_us: write_us_after.saturating_sub(write_us_before),
        redo_writes: stat("redo writes"),
        user_commits: stat("user commits"),
        remote_waits: count_after.saturating_sub(count_before),
        remote_wait_us: us_after.saturating_sub(us_before),
        redo_bytes_sent: sent(before, after, |destination| destination.bytes_sent),
        wire_bytes_sent: sent(before, after, |destination| destination.wire_bytes_sent),
    }
}

/// A counter of the destinations' status, summed over them, after less before (a destination
/// only in `after` counts whole).
fn sent(
    before: &admin::ServerStatus,
    after: &admin::ServerStatus,
    counter: fn(&transport::DestinationStatus) -> u64,
) -> u64 {
    after
        .replication
        .destinations
        .iter()
        .map(|last| {
            let first = before
                .replication
                .destinations
                .iter()
                .find(|first| first.name == last.name)
                .map_or(0, counter);
            counter(last).saturating_sub(first)
        })
        .sum()
}

impl Deltas {
    /// Commits per log write (group commit): "user commits" / "redo writes".
    pub(super) fn commits_per_log_write(&self) -> f64 {
        self.user_commits as f64 / self.redo_writes.max(1) as f64
    }
}

/// Redo bytes and bytes on the wire sent to the standbys, per commit (None without a standby
/// or a commit).
pub(super) fn sent_per_commit(redo: u64, wire: u64, commits: u64) -> (Option<f64>, Option<f64>) {
    let per_commit = |bytes: u64| (commits > 0 && redo > 0).then(|| bytes as f64 / commits as f64);
    (per_commit(redo), per_commit(wire))
}

impl Bench<'_> {
    pub(super) fn rtt(&self) -> u32 {
        self.limits.rtt_set_ms
    }

    /// The raw fdatasync p50 now, in µs. Each case measures it just before and just after
    /// and keeps the lower: a disk made slower for a while by other work on the machine is
    /// compared with itself (as `bench commit` does), and a reading spoiled by that work can
    /// only make a latency target stricter.
    pub(super) fn raw_p50_us(&self) -> anyhow::Result<f64> {
        let duration = RAW_CASE_DURATION.min(self.config.duration / 2);
        Ok(raw_fdatasync(self.work, 1, duration)?.lat_p50_us)
    }
}

impl Bench<'_> {
    /// A fresh setup of `mode`, and its cases: closed-loop ones, or steady-rate ones.
    pub(super) fn setup_cases(
        &self,
        mode: Mode,
        load: Load,
        report: &mut TransportReport,
        progress: &mut dyn FnMut(&str),
    ) -> anyhow::Result<()> {
        progress(&format!("redoguard {} at RTT {} ms: starting", mode.name(), self.rtt()));
        let setup = self.start(mode, &format!("{load:?}"))?;
        let client_counts: &[u32] =
            if load == Load::ClosedLoop { &self.config.clients } else { &[] };
        for &clients in client_counts {
            crate::interrupt::check()?;
            progress(&format!(
                "redoguard {}, RTT {} ms (measured {:.3}), {clients} clients",
                mode.name(),
                self.rtt(),
                self.limits.rtt_ms
            ));
            let case = self.closed_loop(&setup, mode, clients, CaseKind::of(Experiment::Modes));
            let what =
                format!("redoguard {} at RTT {} ms, {clients} clients", mode.name(), self.rtt());
            self.record(report, &what, case)?;
        }
        if load == Load::SteadyRate {
            for &rate in &self.config.lag_rates_mb_per_s {
                crate::interrupt::check()?;
                progress(&format!(
                    "redoguard async, RTT {} ms (measured {:.3}), steady {rate} MB/s of redo",
                    self.rtt(),
                    self.limits.rtt_ms
                ));
                let case = self.steady(
                    &setup,
                    Mode::Async,
                    SteadyLoad::redo_rate(LAG_CONNECTIONS, rate, true),
                    Some(rate),
                    CaseKind::of(Experiment::Lag),
                );
                let what = format!("redoguard async at RTT {} ms, {rate} MB/s", self.rtt());
                self.record(report, &what, case)?;
            }
        }
        setup.stop()
    }

    /// Adds a case to the report, and its problems (or its error) to the failures, under
    /// `what`. Fails only on an interrupt.
    pub(super) fn record(
        &self,
        report: &mut TransportReport,
        what: &str,
        case: anyhow::Result<(TransportCase, Vec<String>)>,
    ) -> anyhow::Result<()> {
        match case {
            Ok((case, problems)) => {
                report
                    .failures
                    .extend(problems.into_iter().map(|problem| format!("{what}: {problem}")));
                report.cases.push(case);
            }
            Err(error) => {
                crate::interrupt::check()?;
                report.failures.push(format!("{what}: {error:#}"));
            }
        }
        Ok(())
    }

    /// Runs `cases` on a setup `started` for them, then stops it. A setup that failed to
    /// start, or fails to stop, is added to the failures under `what`, and the experiment
    /// goes on. Fails only on an interrupt, or with what `cases` fails with (the setup is then
    /// dropped, which kills its servers).
    pub(super) fn on_setup<'s>(
        started: anyhow::Result<Setup<'s>>,
        what: &str,
        report: &mut TransportReport,
        cases: impl FnOnce(&Setup<'s>, &mut TransportReport) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let setup = match started {
            Ok(setup) => setup,
            Err(error) => {
                crate::interrupt::check()?;
                report.failures.push(format!("{what}: {error:#}"));
                return Ok(());
            }
        };
        cases(&setup, report)?;
        if let Err(error) = setup.stop() {
            report.failures.push(format!("{what}: {error:#}"));
        }
        Ok(())
    }

    /// Checks that every destination stayed as `mode` wants it through a case; returns what
    /// went wrong.
    pub(super) fn check_destination(
        mode: Mode,
        before: &admin::ServerStatus,
        after: &admin::ServerStatus,
        deltas: &Deltas,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let Some(wanted) = mode.phase() else { return problems };
        let (firsts, lasts) = (&before.replication.destinations, &after.replication.destinations);
        if firsts.is_empty() || lasts.len() != firsts.len() {
            problems.push(format!(
                "the primary reports {} destinations, then {}",
                firsts.len(),
                lasts.len()
            ));
            return problems;
        }
        for (first, last) in firsts.iter().zip(lasts) {
            if last.phase != wanted || last.failures != first.failures {
                problems.push(format!(
                    "the destination {} left {wanted:?} during the case: now {:?}, last error {:?}",
                    last.name, last.phase, last.last_error
                ));
            }
            if last.bytes_sent <= first.bytes_sent {
                problems.push(format!("no redo was sent to the standby {}", last.name));
            }
        }
        let synchronous = wanted == transport::Phase::Synchronized;
        if synchronous && deltas.remote_waits == 0 {
            problems.push("no log write waited for the standby (SYNC remote write)".into());
        }
        problems
    }

    /// The raw fdatasync p50 before a case: measured now if `kind` wants it, else the
    /// RTT's.
    fn fdatasync_before(&self, kind: CaseKind) -> anyhow::Result<f64> {
        if kind.fdatasync_around { self.raw_p50_us() } else { Ok(self.limits.fdatasync_p50_us) }
    }

    /// The lower of `before` and, if `kind` wants it, the raw fdatasync p50 now.
    fn fdatasync_after(&self, kind: CaseKind, before: f64) -> anyhow::Result<f64> {
        Ok(if kind.fdatasync_around { before.min(self.raw_p50_us()?) } else { before })
    }

    pub(super) fn closed_loop(
        &self,
        setup: &Setup<'_>,
        mode: Mode,
        clients: u32,
        kind: CaseKind,
    ) -> anyhow::Result<(TransportCase, Vec<String>)> {
        let fdatasync_before = self.fdatasync_before(kind)?;
        let before = setup.primary_status()?;
        let prelude: Vec<Vec<u8>> = kind.commit_mode.map_or_else(Vec::new, |commit_mode| {
            std::iter::once("COMMITMODE")
                .chain(commit_mode.split_whitespace())
                .map(|word| word.as_bytes().to_vec())
                .collect()
        });
        let cpu_before = setup.primary_pid().map(cpu_seconds).transpose()?;
        let machine_before = MachineCpu::now()?;
        let measured = bench_external::set_load_at(
            self.network,
            setup.client_addr,
            clients,
            self.config.duration,
            false,
            &prelude,
        )?;
        let cpu_after = setup.primary_pid().map(cpu_seconds).transpose()?;
        let machine_after = MachineCpu::now()?;
        crate::interrupt::check()?;
        let (machine_busy_s, machine_busy_share) = machine_after.since(&machine_before)?;
        let after = setup.primary_status()?;
        let fdatasync_p50_us = self.fdatasync_after(kind, fdatasync_before)?;
        let deltas = deltas(&before, &after);
        let problems = Bench::check_destination(mode, &before, &after, &deltas);
        let commit_mode = kind
            .commit_mode
            .map_or_else(String::new, |commit_mode| format!(", after COMMITMODE {commit_mode}"));
        let mut notes = format!(
            "{clients} connections from the primary's side{commit_mode}, each looping SET key:<random of 10^6> <100 bytes>, latency from the write to the reply; {}; {} commits, {:.1} commits per log write",
            mode.describe(),
            measured.commits,
            deltas.commits_per_log_write()
        );
        if deltas.remote_waits > 0 {
            notes.push_str(&format!(
                "; SYNC remote write (after the local write) {} waits, avg {:.0} µs",
                deltas.remote_waits,
                deltas.remote_wait_us as f64 / deltas.remote_waits as f64
            ));
        }
        if !problems.is_empty() {
            notes.push_str(&format!("; NOT VALID: {}", problems.join("; ")));
        }
        let case = TransportCase {
            experiment: kind.experiment,
            system: "redoguard".into(),
            mode: mode.name().into(),
            load: "closed_loop".into(),
            rtt_ms: self.limits.rtt_ms,
            rtt_set_ms: self.rtt(),
            clients,
            commits_per_s: measured.commits_per_s,
            p50_us: quantile(&measured.latency_us, 0.5),
            p99_us: quantile(&measured.latency_us, 0.99),
            fdatasync_p50_us,
            standby_fdatasync_p50_us: self.limits.standby_fdatasync_p50_us,
            log_write_avg_us: Some(deltas.log_write_us as f64 / deltas.log_writes.max(1) as f64),
            standbys: Some(mode.standbys().len() as u32),
            commit_mode: kind.commit_mode.map(str::to_string),
            cpu_us_per_commit: cpu_per_commit(cpu_before, cpu_after, measured.commits),
            commits_per_log_write: Some(deltas.commits_per_log_write()),
            machine_cpu_busy_pct: Some(machine_busy_share * 100.0),
            machine_cpu_us_per_commit: (measured.commits > 0)
                .then(|| machine_busy_s * 1e6 / measured.commits as f64),
            machine_cpus: Some(machine_after.cpus),
            notes,
            ..TransportCase::default()
        };
        Ok((case, problems))
    }

    /// A steady load on `setup`; `rate_mb_per_s` is the redo rate asked for, if the load is
    /// one.
    pub(super) fn steady(
        &self,
        setup: &Setup<'_>,
        mode: Mode,
        load: SteadyLoad,
        rate_mb_per_s: Option<f64>,
        kind: CaseKind,
    ) -> anyhow::Result<(TransportCase, Vec<String>)> {
        self.steady_measured(setup, mode, load, rate_mb_per_s, kind)
            .map(|(case, problems, _)| (case, problems))
    }

    /// `steady`, with the raw figures behind the case (to sum several rounds).
    pub(super) fn steady_measured(
        &self,
        setup: &Setup<'_>,
        mode: Mode,
        load: SteadyLoad,
        rate_mb_per_s: Option<f64>,
        kind: CaseKind,
    ) -> anyhow::Result<(TransportCase, Vec<String>, Measured)> {
        let fdatasync_before = self.fdatasync_before(kind)?;
        let before = setup.primary_status()?;
        let cpu_before = setup.primary_pid().map(cpu_seconds).transpose()?;
        let threads_before = setup.primary_pid().map(thread_cpu_seconds).transpose()?;
        let started = Instant::now();
        let steady = steady_load(
            self.network,
            setup.primary.resp_addr,
            setup.primary.admin_addr,
            load,
            self.config.duration,
        )?;
        let seconds = started.elapsed().as_secs_f64();
        let cpu_after = setup.primary_pid().map(cpu_seconds).transpose()?;
        let threads_after = setup.primary_pid().map(thread_cpu_seconds).transpose()?;
        crate::interrupt::check()?;
        let after = setup.primary_status()?;
        let fdatasync_p50_us = self.fdatasync_after(kind, fdatasync_before)?;
        let deltas = deltas(&before, &after);
        let mut problems = Bench::check_destination(mode, &before, &after, &deltas);
        problems.extend(steady.problems.iter().cloned());
        let redo_mb_per_s = deltas.redo_bytes as f64 / 1e6 / seconds;
        let lag_ms = |quantile: f64| {
            if steady.lag_us.is_empty() {
                0.0
            } else {
                steady.lag_us.value_at_quantile(quantile) as f64 / 1000.0
            }
        };
        let lag = if load.sample_lag {
            format!(
                "; transport lag = the primary's destination status (age of the oldest redo not yet durable on the standby) read every {} ms",
                LAG_SAMPLE_INTERVAL.as_millis()
            )
        } else {
            String::new()
        };
        let mut notes = format!(
            "{} connections from the primary's side committing {} SETs a second in all, on a fixed schedule, of {}-byte values; {}{lag}; {} commits, {:.1} commits per log write",
            load.connections,
            load.commits_per_s,
            steady.value_bytes,
            mode.describe(),
            steady.commits,
            deltas.commits_per_log_write()
        );
        if let Some(rate) = rate_mb_per_s
            && redo_mb_per_s < 0.9 * rate
        {
            notes.push_str(&format!(
                "; the primary did not sustain the rate asked ({redo_mb_per_s:.2} of {rate} MB/s)"
            ));
        }
        let commits_per_s = steady.commits as f64 / steady.seconds;
        if rate_mb_per_s.is_none() && commits_per_s < 0.9 * load.commits_per_s {
            notes.push_str(&format!(
                "; the primary did not sustain the rate asked ({commits_per_s:.0} of {} commits/s)",
                load.commits_per_s
            ));
        }
        if !problems.is_empty() {
            notes.push_str(&format!("; NOT VALID: {}", problems.join("; ")));
        }
        let sampled = |value: f64| load.sample_lag.then_some(value);
        let (redo_bytes_sent_per_commit, wire_bytes_per_commit) =
            sent_per_commit(deltas.redo_bytes_sent, deltas.wire_bytes_sent, steady.commits);
        let case = TransportCase {
            experiment: kind.experiment,
            system: "redoguard".into(),
            mode: mode.name().into(),
            load: "steady_rate".into(),
            rtt_ms: self.limits.rtt_ms,
            rtt_set_ms: self.rtt(),
            clients: load.connections,
            commits_per_s,
            p50_us: quantile(&steady.latency_us, 0.5),
            p99_us: quantile(&steady.latency_us, 0.99),
            fdatasync_p50_us,
            standby_fdatasync_p50_us: self.limits.standby_fdatasync_p50_us,
            log_write_avg_us: Some(deltas.log_write_us as f64 / deltas.log_writes.max(1) as f64),
            redo_mb_per_s: Some(redo_mb_per_s),
            redo_mb_per_s_target: rate_mb_per_s,
            transport_lag_p50_ms: sampled(lag_ms(0.5)),
            transport_lag_p99_ms: sampled(lag_ms(0.99)),
            transport_lag_max_ms: sampled(steady.lag_us.max() as f64 / 1000.0),
            transport_lag_samples: load.sample_lag.then_some(steady.lag_us.len()),
            standbys: Some(mode.standbys().len() as u32),
            cpu_us_per_commit: cpu_per_commit(cpu_before, cpu_after, steady.commits),
            commits_per_log_write: Some(deltas.commits_per_log_write()),
            redo_bytes_sent_per_commit,
            wire_bytes_per_commit,
            notes,
            ..TransportCase::default()
        };
        let measured = Measured {
            commits: steady.commits,
            seconds: steady.seconds,
            cpu_s: cpu_before.zip(cpu_after).map(|(before, after)| after - before),
            latency_us: steady.latency_us,
            user_commits: deltas.user_commits,
            redo_writes: deltas.redo_writes,
            log_writes: deltas.log_writes,
            log_write_us: deltas.log_write_us,
            threads_cpu_s: threads_before
                .zip(threads_after)
                .map(|(before, after)| threads_since(&before, after))
                .unwrap_or_default(),
            redo_bytes_sent: deltas.redo_bytes_sent,
            wire_bytes_sent: deltas.wire_bytes_sent,
        };
        Ok((case, problems, measured))
    }
}

/// The raw figures of one steady-rate case, which rounds of the same mode add up.
pub(super) struct Measured {
    pub(super) commits: u64,
    pub(super) seconds: f64,
    /// The primary's CPU time (user + system) during the load, in seconds.
    pub(super) cpu_s: Option<f64>,
    pub(super) latency_us: Histogram<u64>,
    /// The primary's "user commits" and "redo writes" (its log writes that carried commits).
    pub(super) user_commits: u64,
    pub(super) redo_writes: u64,
    /// "log file parallel write": count and total µs.
    pub(super) log_writes: u64,
    pub(super) log_write_us: u64,
    /// The primary's CPU seconds during the load by thread name (`thread_cpu_seconds`); a
    /// thread started during the load counts whole.
    pub(super) threads_cpu_s: BTreeMap<String, f64>,
    /// What the primary sent its standbys (`Deltas`): redo bytes, and bytes on the wire.
    pub(super) redo_bytes_sent: u64,
    pub(super) wire_bytes_sent: u64,
}

/// CPU µs per commit from the CPU seconds before and after.
fn cpu_per_commit(before: Option<f64>, after: Option<f64>, commits: u64) -> Option<f64> {
    match (before, after) {
        (Some(before), Some(after)) if commits > 0 => Some((after - before) * 1e6 / commits as f64),
        _ => None,
    }
}

pub(super) fn quantile(histogram: &Histogram<u64>, quantile: f64) -> f64 {
    if histogram.is_empty() { 0.0 } else { histogram.value_at_quantile(quantile) as f64 }
}
