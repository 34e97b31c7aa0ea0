//! `redoguard bench apply`: how fast a standby applies redo, against how fast its primary
//! generates it, measured on the same machine in the same run.
//!
//! For each workload (the demo's: `oltp`, its small OLTP commits; `batch`, its batch phase,
//! large MSET transactions beside a few OLTP sessions):
//!
//! 1. A standby starts with delayed apply (`delay = "1h"`): it receives, writes and archives
//!    every byte of redo at once, and applies none of it. A primary ships to it ASYNC (so the
//!    standby never slows the primary down: the primary generates as fast as it can).
//! 2. The workload runs for `duration`; the primary's "redo size" and "redo entries" are
//!    sampled every 250 ms. Its **peak** redo rate is the highest over any one-second window
//!    of those samples, as the reference sizes for peaks.
//! 3. The load stops; once the standby has acknowledged everything, it is stopped (SIGTERM)
//!    and started again on the same data and port without the delay. Its real-time apply then
//!    reads the held-back redo from its standby logs and archive, exactly as it reads live
//!    redo, and applies it; the standby's "apply redo size" and "apply redo records applied"
//!    are sampled every 20 ms until its applied SCN reaches the primary's last one.
//!
//! The apply rate counts only what was applied between the first and the last sample
//! (opening the database, before the first sample, is reported apart): the last sample can
//! come up to 20 ms after apply finished, so the rate errs low, never high. An apply too short
//! for that (under 250 ms between the samples) is timed from the standby's start, its opening
//! included, and says so (`apply_basis`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use tools::bench::plot::{BarPanel, Figure, Group, Limit, LimitValue, Line, LinePanel};

use crate::demo::load::{self, Shared, Target};
use crate::process::ServerProcess;
use crate::thread_time::{self, SchedReader};

/// Data Guard's published Redo Apply rates (MB/s), the reference line of the figure.
pub const DATA_GUARD_APPLY_MB_PER_S: (f64, f64) = (47.0, 112.0);
/// The target: apply at least this many times the primary's peak redo rate.
pub const APPLY_OVER_PEAK_MIN: f64 = 2.0;
/// The delay that holds apply back while the redo is generated.
const HOLD_DELAY: &str = "1h";
const LOAD_SAMPLE: Duration = Duration::from_millis(250);
const APPLY_SAMPLE: Duration = Duration::from_millis(20);
/// The window of the primary's peak rate.
const PEAK_WINDOW: Duration = Duration::from_secs(1);
/// Longest the standby may take to receive what the primary generated, or to apply it.
const CATCH_UP_MAX: Duration = Duration::from_secs(600);
/// Shortest apply window between samples that gives a rate of its own; a shorter apply is
/// timed from the standby's start instead (its opening included: a rate that errs low).
const APPLY_WINDOW_MIN_S: f64 = 0.25;

/// The workloads: the demo's two phases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// The demo's OLTP sessions: small SETs, INCRs, MULTI/EXEC of an HSET, an RPUSH and a
    /// ZADD, transfers of two INCRBYs.
    Oltp,
    /// The demo's batch phase: sessions of MSETs of 200 keys × 512 bytes (about 100 KiB of
    /// redo each) beside four OLTP sessions.
    Batch,
}

impl Workload {
    pub const ALL: [Workload; 2] = [Workload::Oltp, Workload::Batch];

    pub fn name(self) -> &'static str {
        match self {
            Workload::Oltp => "oltp",
            Workload::Batch => "batch",
        }
    }
}

impl std::str::FromStr for Workload {
    type Err = String;

    fn from_str(text: &str) -> Result<Workload, String> {
        match text {
            "oltp" => Ok(Workload::Oltp),
            "batch" => Ok(Workload::Batch),
            other => Err(format!("'{other}' is not a workload (oltp, batch)")),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ApplyConfig {
    pub binary: PathBuf,
    /// Where both servers' data goes (a temporary directory is made inside it and removed).
    pub dir: PathBuf,
    /// How long each workload generates redo.
    pub duration: Duration,
    pub workloads: Vec<Workload>,
    /// Sessions of the `oltp` workload (the demo's default: 16).
    pub oltp_clients: usize,
    /// Batch sessions of the `batch` workload (the demo's default: 4).
    pub batch_clients: usize,
    /// Size of each online and standby log file.
    pub log_file_size: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApplyCase {
    pub workload: Workload,
    pub sessions: String,
    /// Seconds of load on the primary.
    pub load_s: f64,
    /// Redo records and bytes ("redo size": records with their headers) the primary generated.
    pub records: u64,
    pub redo_mb: f64,
    pub primary_mean_mb_per_s: f64,
    /// The highest rate over any one-second window of the load.
    pub primary_peak_mb_per_s: f64,
    pub primary_mean_records_per_s: f64,
    pub primary_peak_records_per_s: f64,
    /// Seconds from starting the standby again (without the delay) to its status answering:
    /// process start and opening the database.
    pub standby_open_s: f64,
    /// Records and bytes applied between the first and the last sample, and the seconds
    /// between them.
    pub apply_window_s: f64,
    pub apply_window_records: u64,
    pub apply_window_mb: f64,
    pub apply_mb_per_s: f64,
    pub apply_records_per_s: f64,
    /// Seconds from starting the standby again to everything applied (open included).
    pub apply_total_s: f64,
    /// What the apply rate is timed over: `samples` (between the first and last status
    /// samples) or `start` (from the standby's start, its opening included: apply was too
    /// short to sample).
    pub apply_basis: String,
    /// apply MB/s / primary peak MB/s.
    pub apply_over_peak: f64,
    pub target_met: bool,
    /// The primary's rate over the load: (seconds since the load began, MB/s per 250 ms).
    pub primary_rate: Vec<(f64, f64)>,
    /// The standby's apply rate: (seconds since it was started again, MB/s per 20 ms sample,
    /// smoothed over 100 ms).
    pub apply_rate: Vec<(f64, f64)>,
    /// The standby's wait events during apply that took the most time: (name, seconds).
    pub standby_waits: Vec<(String, f64)>,
    /// CPU time (Linux's per-thread `utime + stime`) from the standby's restart to everything
    /// applied, in seconds, of its apply thread (`db-apply`) and of the read-ahead thread that
    /// reads and decodes the redo for it (`db-apply-read`); `None` where `/proc` cannot tell.
    /// On a machine shared with other work the apply *rate* follows the neighbours; the CPU
    /// apply costs per GB does not.
    pub apply_thread_cpu_s: Option<f64>,
    pub read_ahead_cpu_s: Option<f64>,
    /// The apply thread's CPU seconds per GB of redo applied since the restart.
    pub apply_thread_cpu_s_per_gb: Option<f64>,
    /// How the apply thread spent the apply window (`apply_window_s`), as shares of it, from
    /// its `/proc/PID/task/TID/schedstat`: on a CPU, ready but waiting for one (the machine's
    /// other work had them), and neither (sleeping: on a lock, for the read-ahead, for redo).
    #[serde(default)]
    pub apply_thread_on_cpu: Option<f64>,
    #[serde(default)]
    pub apply_thread_waiting_for_cpu: Option<f64>,
    #[serde(default)]
    pub apply_thread_sleeping: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApplyReport {
    pub method: String,
    pub dir: String,
    pub log_file_size: u64,
    pub cases: Vec<ApplyCase>,
    pub failures: Vec<String>,
    pub reference: String,
}

pub fn run(config: &ApplyConfig, mut progress: impl FnMut(&str)) -> anyhow::Result<ApplyReport> {
    std::fs::create_dir_all(&config.dir)
        .with_context(|| format!("cannot create {}", config.dir.display()))?;
    let work = tempfile::Builder::new()
        .prefix("redoguard-bench-apply-")
        .tempdir_in(&config.dir)
        .with_context(|| format!("creating a directory in {}", config.dir.display()))?;
    let mut cases = Vec::new();
    let mut failures = Vec::new();
    for &workload in &config.workloads {
        crate::interrupt::check()?;
        let dir = work.path().join(workload.name());
        match run_case(config, workload, &dir, &mut progress) {
            Ok(case) => {
                progress(&format!(
                    "{}: primary peak {:.1} MB/s, apply {:.1} MB/s ({:.1} x)",
                    workload.name(),
                    case.primary_peak_mb_per_s,
                    case.apply_mb_per_s,
                    case.apply_over_peak
                ));
                cases.push(case);
            }
            Err(error) => {
                progress(&format!("{}: FAILED: {error:#}", workload.name()));
                failures.push(format!("{}: {error:#}", workload.name()));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(ApplyReport {
        method: format!(
            "the standby receives with apply delayed ({HOLD_DELAY}) while the primary generates (ASYNC), is restarted without the delay, and applies the held-back redo from its standby logs and archive; the primary's peak over any {} s window against the standby's apply rate between its first and last status samples ({} ms apart)",
            PEAK_WINDOW.as_secs(),
            APPLY_SAMPLE.as_millis()
        ),
        dir: config.dir.display().to_string(),
        log_file_size: config.log_file_size,
        cases,
        failures,
        reference: format!(
            "Data Guard's published Redo Apply rates: {:.0}-{:.0} MB/s; target: apply >= {APPLY_OVER_PEAK_MIN} x the primary's peak redo rate",
            DATA_GUARD_APPLY_MB_PER_S.0, DATA_GUARD_APPLY_MB_PER_S.1
        ),
    })
}

fn start(
    config: &ApplyConfig,
    dir: &Path,
    name: &str,
    text: &str,
) -> anyhow::Result<ServerProcess> {
    let config_path = dir.join(format!("{name}.toml"));
    std::fs::write(&config_path, text)?;
    let data = dir.join(name);
    std::fs::create_dir_all(&data)?;
    let (config_path, data) = (config_path.display().to_string(), data.display().to_string());
    ServerProcess::start(
        &config.binary,
        &["--config", &config_path, "--data-dir", &data],
        &dir.join(format!("{name}.log")),
    )
    .with_context(|| format!("starting the {name}"))
}

fn standby_text(log_file_size: u64, port: u16, delay: Option<&str>) -> String {
    format!(
        "# Written by `redoguard bench apply`.\n[redo]\nlog_file_size = {log_file_size}\ngroups = 4\n\
         [replication]\nrole = \"standby\"\n[replication.standby]\nlisten = \"127.0.0.1:{port}\"\n{}",
        delay.map_or(String::new(), |delay| format!("delay = \"{delay}\"\n"))
    )
}

fn primary_text(log_file_size: u64, standby_port: u16) -> String {
    format!(
        "# Written by `redoguard bench apply`.\n[redo]\nlog_file_size = {log_file_size}\ngroups = 3\n\
         [replication]\nrole = \"primary\"\nprotection_mode = \"maximum_performance\"\n\
         [[replication.destinations]]\nname = \"standby\"\naddress = \"127.0.0.1:{standby_port}\"\n\
         transport = \"async\"\nnet_timeout = \"5s\"\nreopen = \"200ms\"\n"
    )
}

fn run_case(
    config: &ApplyConfig,
    workload: Workload,
    dir: &Path,
    progress: &mut impl FnMut(&str),
) -> anyhow::Result<ApplyCase> {
    std::fs::create_dir_all(dir)?;
    let port = crate::ports::free_port().context("picking the standby's redo port")?;
    let mut standby =
        start(config, dir, "standby", &standby_text(config.log_file_size, port, Some(HOLD_DELAY)))?;
    let mut primary = match start(config, dir, "primary", &primary_text(config.log_file_size, port))
    {
        Ok(primary) => primary,
        Err(error) => {
            let _ = standby.stop();
            return Err(error);
        }
    };
    let result = measure(config, workload, dir, port, &primary, &mut standby, progress);
    let stopped = primary.stop().context("stopping the primary");
    let standby_stopped = standby.stop().context("stopping the standby");
    let case = result?;
    stopped?;
    standby_stopped?;
    Ok(case)
}

/// (seconds, cumulative bytes, cumulative records) samples.
type Samples = Vec<(f64, u64, u64)>;

/// The highest rates (bytes/s, records/s) over any window of at least `window` between two
/// samples.
fn peak_rates(samples: &[(f64, u64, u64)], window: Duration) -> (f64, f64) {
    let window = window.as_secs_f64();
    let (mut bytes, mut records) = (0.0f64, 0.0f64);
    for (index, &(t0, b0, r0)) in samples.iter().enumerate() {
        if let Some(&(t1, b1, r1)) =
            samples[index..].iter().find(|&&(t1, _, _)| t1 - t0 >= window - 1e-9)
        {
            let seconds = t1 - t0;
            bytes = bytes.max(b1.saturating_sub(b0) as f64 / seconds);
            records = records.max(r1.saturating_sub(r0) as f64 / seconds);
        }
    }
    (bytes, records)
}

/// MB/s between consecutive samples `step` apart (or more), at the end of each step.
fn rate_points(samples: &[(f64, u64, u64)], step: usize) -> Vec<(f64, f64)> {
    samples
        .windows(step + 1)
        .map(|pair| {
            let (t0, b0, _) = pair[0];
            let (t1, b1, _) = pair[step];
            (t1, b1.saturating_sub(b0) as f64 / 1e6 / (t1 - t0).max(1e-9))
        })
        .collect()
}

fn measure(
    config: &ApplyConfig,
    workload: Workload,
    dir: &Path,
    port: u16,
    primary: &ServerProcess,
    standby: &mut ServerProcess,
    progress: &mut impl FnMut(&str),
) -> anyhow::Result<ApplyCase> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while primary
        .status()?
        .replication
        .destinations
        .first()
        .is_none_or(|destination| destination.phase != transport::Phase::Streaming)
    {
        anyhow::ensure!(Instant::now() < deadline, "the standby did not reach STREAMING");
        std::thread::sleep(Duration::from_millis(100));
    }
    // 1. Generate, apply held back.
    let (sessions, load_samples, load_s) = generate(config, workload, primary, progress)?;
    let first = load_samples.first().copied().context("no load sample")?;
    let last = load_samples.last().copied().context("no load sample")?;
    let end = primary.status()?;
    let target_scn = end.database.redo.durable_scn;
    let target_addr = end.database.redo.durable_addr;
    progress(&format!(
        "{}: {:.1} MB of redo in {load_s:.1} s; waiting for the standby to hold it all",
        workload.name(),
        (last.1 - first.1) as f64 / 1e6
    ));
    let received = Instant::now();
    loop {
        crate::interrupt::check()?;
        let now = primary.status()?;
        let destination = now.replication.destinations.first().context("a destination")?;
        if (destination.acknowledged.seq, destination.acknowledged.offset)
            >= (target_addr.seq, target_addr.offset)
        {
            break;
        }
        anyhow::ensure!(
            received.elapsed() < CATCH_UP_MAX,
            "the standby did not receive everything within {CATCH_UP_MAX:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let held = standby.status()?;
    anyhow::ensure!(
        held.metrics.stat("apply redo records applied") == 0,
        "the standby applied {} records while its apply was to be held back",
        held.metrics.stat("apply redo records applied")
    );
    // 2. The standby again, without the delay: apply runs.
    standby.stop().context("stopping the delayed standby")?;
    progress(&format!("{}: the standby applies", workload.name()));
    let started = Instant::now();
    *standby = start(config, dir, "standby", &standby_text(config.log_file_size, port, None))?;
    let mut apply_samples: Samples = Vec::new();
    let mut open_s = None;
    let mut before_waits = None;
    // The apply thread's scheduler times at the first and the last sample.
    let mut sched = None;
    let mut sched_times = (None, None);
    let after = loop {
        crate::interrupt::check()?;
        let status = standby.status()?;
        let at = started.elapsed().as_secs_f64();
        open_s.get_or_insert(at);
        before_waits.get_or_insert_with(|| status.metrics.clone());
        if sched.is_none() {
            sched = standby.pid().and_then(|pid| SchedReader::find(pid, "db-apply"));
        }
        let times = sched.as_ref().and_then(SchedReader::read);
        if apply_samples.is_empty() {
            sched_times.0 = times;
        }
        sched_times.1 = times;
        apply_samples.push((
            at,
            status.metrics.stat("apply redo size"),
            status.metrics.stat("apply redo records applied"),
        ));
        if status.database.applied_scn >= target_scn {
            break status;
        }
        anyhow::ensure!(
            started.elapsed() < CATCH_UP_MAX,
            "the standby did not apply everything within {CATCH_UP_MAX:?} (applied SCN {}, target {})",
            status.database.applied_scn,
            target_scn
        );
        std::thread::sleep(APPLY_SAMPLE);
    };
    let apply_total_s = started.elapsed().as_secs_f64();
    let standby_pid = standby.pid();
    let apply_thread_cpu_s = standby_pid.and_then(|pid| thread_time::cpu_s(pid, "db-apply"));
    let read_ahead_cpu_s = standby_pid.and_then(|pid| thread_time::cpu_s(pid, "db-apply-read"));
    let applied_gb = after.metrics.stat("apply redo size") as f64 / 1e9;
    let (mut a0, a1) = (apply_samples[0], *apply_samples.last().expect("a sample"));
    let mut apply_basis = "samples";
    if a1.0 - a0.0 < APPLY_WINDOW_MIN_S {
        // From the start: nothing was applied before it.
        a0 = (0.0, 0, 0);
        apply_basis = "start";
    }
    let apply_window_s = a1.0 - a0.0;
    let shares = match sched_times {
        (Some(first), Some(last)) if apply_basis == "samples" => {
            last.shares_since(&first, apply_window_s)
        }
        _ => None,
    };
    let apply_window_bytes = a1.1 - a0.1;
    let apply_window_records = a1.2 - a0.2;
    let apply_mb_per_s = apply_window_bytes as f64 / 1e6 / apply_window_s;
    let (peak_bytes, peak_records) = peak_rates(&load_samples, PEAK_WINDOW);
    let primary_peak_mb_per_s = peak_bytes / 1e6;
    let apply_over_peak = apply_mb_per_s / primary_peak_mb_per_s.max(1e-9);
    let mut standby_waits: Vec<(String, f64)> = after
        .metrics
        .waits
        .iter()
        .map(|event| {
            let before = before_waits
                .as_ref()
                .and_then(|before| before.wait(&event.name))
                .map_or(0, |before| before.total_us);
            (event.name.clone(), event.total_us.saturating_sub(before) as f64 / 1e6)
        })
        .filter(|(_, seconds)| *seconds > 0.0)
        .collect();
    standby_waits.sort_by(|a, b| b.1.total_cmp(&a.1));
    standby_waits.truncate(5);
    // Smoothed over 100 ms (five samples).
    let apply_rate = rate_points(&apply_samples, 5);
    Ok(ApplyCase {
        workload,
        sessions,
        load_s,
        records: last.2 - first.2,
        redo_mb: (last.1 - first.1) as f64 / 1e6,
        primary_mean_mb_per_s: (last.1 - first.1) as f64 / 1e6 / load_s,
        primary_peak_mb_per_s,
        primary_mean_records_per_s: (last.2 - first.2) as f64 / load_s,
        primary_peak_records_per_s: peak_records,
        standby_open_s: open_s.unwrap_or(apply_total_s),
        apply_window_s,
        apply_window_records,
        apply_window_mb: apply_window_bytes as f64 / 1e6,
        apply_mb_per_s,
        apply_records_per_s: apply_window_records as f64 / apply_window_s,
        apply_total_s,
        apply_basis: apply_basis.to_string(),
        apply_over_peak,
        target_met: apply_over_peak >= APPLY_OVER_PEAK_MIN,
        primary_rate: rate_points(&load_samples, 1),
        apply_rate,
        standby_waits,
        apply_thread_cpu_s,
        read_ahead_cpu_s,
        apply_thread_cpu_s_per_gb: apply_thread_cpu_s
            .filter(|_| applied_gb > 0.0)
            .map(|seconds| seconds / applied_gb),
        apply_thread_on_cpu: shares.map(|shares| shares.on_cpu),
        apply_thread_waiting_for_cpu: shares.map(|shares| shares.waiting_for_cpu),
        apply_thread_sleeping: shares.map(|shares| shares.sleeping),
    })
}

/// Runs `workload` against the primary for the configured duration, sampling its redo
/// counters; returns the sessions, the samples and the seconds of load.
fn generate(
    config: &ApplyConfig,
    workload: Workload,
    primary: &ServerProcess,
    progress: &mut impl FnMut(&str),
) -> anyhow::Result<(String, Samples, f64)> {
    let (oltp, batch) = match workload {
        Workload::Oltp => (config.oltp_clients, 0),
        // As the demo's batch phase: a few OLTP sessions beside the batch.
        Workload::Batch => (config.oltp_clients.min(4), config.batch_clients),
    };
    let sessions = match workload {
        Workload::Oltp => format!("{oltp} OLTP sessions"),
        Workload::Batch => format!("{batch} batch sessions + {oltp} OLTP sessions"),
    };
    progress(&format!("{}: {sessions} for {:?}", workload.name(), config.duration));
    let shared = Arc::new(Shared::new());
    let target = Target::Direct(primary.resp_addr);
    let driver = {
        let shared = shared.clone();
        std::thread::spawn(move || -> anyhow::Result<()> {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            runtime.block_on(async move {
                let mut tasks = tokio::task::JoinSet::new();
                for client in 0..oltp {
                    let (target, shared) = (target.clone(), shared.clone());
                    tasks.spawn(load::oltp_client(target, client, shared));
                }
                for client in 0..batch {
                    let (target, shared) = (target.clone(), shared.clone());
                    tasks.spawn(load::batch_client(target, client, shared));
                }
                while let Some(result) = tasks.join_next().await {
                    result??;
                }
                anyhow::Ok(())
            })
        })
    };
    let sample = |started: Instant| -> anyhow::Result<(f64, u64, u64)> {
        let status = primary.status()?;
        Ok((
            started.elapsed().as_secs_f64(),
            status.metrics.stat("redo size"),
            status.metrics.stat("redo entries"),
        ))
    };
    let started = Instant::now();
    let outcome = (|| -> anyhow::Result<Samples> {
        let mut samples = vec![sample(started)?];
        while started.elapsed() < config.duration {
            crate::interrupt::check()?;
            std::thread::sleep(LOAD_SAMPLE);
            samples.push(sample(started)?);
        }
        Ok(samples)
    })();
    shared.stop_oltp.store(true, Ordering::Release);
    shared.stop_batch.store(true, Ordering::Release);
    let driven = driver.join().map_err(|_| anyhow::anyhow!("the load panicked"))?;
    let mut samples = outcome?;
    driven.context("the load")?;
    // What the sessions committed after the last sample (each finishes its command).
    samples.push(sample(started)?);
    let load_s = samples.last().expect("a sample").0;
    Ok((sessions, samples, load_s))
}

pub fn render(report: &ApplyReport) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "bench apply in {} (log files of {}): {}",
        report.dir,
        units::format_bytes(report.log_file_size),
        report.method
    );
    let _ = writeln!(
        text,
        "{:<6} {:<34} {:>7} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>11} {:>7} {:>7}",
        "case",
        "sessions",
        "redo_MB",
        "records",
        "gen_MB/s",
        "peak_MB/s",
        "peak_rec/s",
        "apply_MB/s",
        "apply_rec/s",
        "apply/peak",
        "open_s",
        "apply_s"
    );
    for case in &report.cases {
        let _ = writeln!(
            text,
            "{:<6} {:<34} {:>7.1} {:>9} {:>8.2} {:>9.2} {:>10.0} {:>10.1} {:>11.0} {:>11.1} {:>7.2} {:>7.2}",
            case.workload.name(),
            case.sessions,
            case.redo_mb,
            case.records,
            case.primary_mean_mb_per_s,
            case.primary_peak_mb_per_s,
            case.primary_peak_records_per_s,
            case.apply_mb_per_s,
            case.apply_records_per_s,
            case.apply_over_peak,
            case.standby_open_s,
            case.apply_total_s
        );
    }
    for case in &report.cases {
        let waits: Vec<String> = case
            .standby_waits
            .iter()
            .map(|(name, seconds)| format!("{name} {seconds:.2} s"))
            .collect();
        let _ = writeln!(
            text,
            "{}: apply {:.1} MB / {} records in {:.2} s {}; standby waits during apply: {}",
            case.workload.name(),
            case.apply_window_mb,
            case.apply_window_records,
            case.apply_window_s,
            if case.apply_basis == "start" {
                "from the standby's start, its opening included (too short to sample)"
            } else {
                "between the first and last samples"
            },
            if waits.is_empty() { "none".to_string() } else { waits.join(", ") }
        );
        if let (Some(apply), Some(per_gb)) =
            (case.apply_thread_cpu_s, case.apply_thread_cpu_s_per_gb)
        {
            let _ = writeln!(
                text,
                "{}: CPU since the standby's restart: apply thread {apply:.2} s ({per_gb:.2} s per GB applied), read-ahead {}",
                case.workload.name(),
                case.read_ahead_cpu_s.map_or("-".to_string(), |seconds| format!("{seconds:.2} s"))
            );
        }
        if let (Some(on_cpu), Some(waiting), Some(sleeping)) = (
            case.apply_thread_on_cpu,
            case.apply_thread_waiting_for_cpu,
            case.apply_thread_sleeping,
        ) {
            let _ = writeln!(
                text,
                "{}: the apply thread over those {:.2} s: on a CPU {:.0} %, ready and waiting for a CPU {:.0} %, sleeping (locks, read-ahead, redo) {:.0} %",
                case.workload.name(),
                case.apply_window_s,
                on_cpu * 100.0,
                waiting * 100.0,
                sleeping * 100.0
            );
        }
    }
    for case in &report.cases {
        let _ = writeln!(
            text,
            "target: {} apply >= {APPLY_OVER_PEAK_MIN} x the primary's peak: {:.1} / {:.2} MB/s = {:.1} x ({})",
            case.workload.name(),
            case.apply_mb_per_s,
            case.primary_peak_mb_per_s,
            case.apply_over_peak,
            if case.target_met { "met" } else { "MISSED" }
        );
    }
    for failure in &report.failures {
        let _ = writeln!(text, "FAILED {failure}");
    }
    let _ = writeln!(text, "reference: {}", report.reference);
    text
}

/// Rates over time (the primary generating, the standby applying), then MB/s and records/s per
/// workload against the target (2 × the primary's peak) and Data Guard's published range.
pub fn figure(report: &ApplyReport) -> Figure {
    let label = |case: &ApplyCase| format!("{} · {}", case.workload.name(), case.sessions);
    let mut series = Vec::new();
    for case in &report.cases {
        series.push(Line {
            name: format!("{}: primary generating", case.workload.name()),
            points: case.primary_rate.clone(),
        });
        series.push(Line {
            name: format!("{}: standby applying", case.workload.name()),
            points: case.apply_rate.clone(),
        });
    }
    let lines = if report.cases.is_empty() {
        Vec::new()
    } else {
        vec![LinePanel {
            title: "Redo MB/s over time: the primary generating (apply held back), then the standby applying it".into(),
            x_label: "seconds since the load began / since the standby was started without the delay".into(),
            y_label: "MB/s".into(),
            series,
            events: Vec::new(),
        }]
    };
    let per_case = |value: &dyn Fn(&ApplyCase) -> f64| {
        LimitValue::PerGroup(report.cases.iter().map(|case| Some(value(case))).collect())
    };
    Figure {
        title: "bench apply: a standby's real-time apply against its primary's redo generation"
            .into(),
        lines,
        panels: vec![
            BarPanel {
                title: "Redo MB/s: generated by the primary, applied by the standby".into(),
                y_label: "MB/s (log scale)".into(),
                log_y: true,
                series: vec![
                    "primary mean".into(),
                    "primary peak (1 s)".into(),
                    "standby apply".into(),
                ],
                groups: report
                    .cases
                    .iter()
                    .map(|case| Group {
                        label: label(case),
                        values: vec![
                            Some(case.primary_mean_mb_per_s),
                            Some(case.primary_peak_mb_per_s),
                            Some(case.apply_mb_per_s),
                        ],
                    })
                    .collect(),
                limits: vec![
                    Limit {
                        label: format!("target: {APPLY_OVER_PEAK_MIN} × the primary's peak"),
                        value: per_case(&|case| APPLY_OVER_PEAK_MIN * case.primary_peak_mb_per_s),
                    },
                    Limit {
                        label: format!(
                            "Data Guard's published apply, low ({:.0} MB/s)",
                            DATA_GUARD_APPLY_MB_PER_S.0
                        ),
                        value: LimitValue::All(DATA_GUARD_APPLY_MB_PER_S.0),
                    },
                    Limit {
                        label: format!(
                            "Data Guard's published apply, high ({:.0} MB/s)",
                            DATA_GUARD_APPLY_MB_PER_S.1
                        ),
                        value: LimitValue::All(DATA_GUARD_APPLY_MB_PER_S.1),
                    },
                ],
            },
            BarPanel {
                title: "Redo records per second".into(),
                y_label: "records/s (log scale)".into(),
                log_y: true,
                series: vec!["primary peak (1 s)".into(), "standby apply".into()],
                groups: report
                    .cases
                    .iter()
                    .map(|case| Group {
                        label: label(case),
                        values: vec![
                            Some(case.primary_peak_records_per_s),
                            Some(case.apply_records_per_s),
                        ],
                    })
                    .collect(),
                limits: vec![Limit {
                    label: format!("target: {APPLY_OVER_PEAK_MIN} × the primary's peak"),
                    value: per_case(&|case| APPLY_OVER_PEAK_MIN * case.primary_peak_records_per_s),
                }],
            },
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_the_fastest_window_of_at_least_a_second() {
        // 1 MB/s, then 3 MB in the second from 2.0 to 3.0, then idle.
        let samples: Samples = vec![
            (0.0, 0, 0),
            (0.5, 500_000, 5),
            (1.0, 1_000_000, 10),
            (2.0, 2_000_000, 20),
            (2.5, 3_500_000, 50),
            (3.0, 5_000_000, 80),
            (4.0, 5_000_000, 80),
        ];
        let (bytes, records) = peak_rates(&samples, Duration::from_secs(1));
        assert_eq!(bytes, 3_000_000.0);
        assert_eq!(records, 60.0);
        // Samples closer than the window never make a peak on their own.
        let (bytes, _) = peak_rates(&samples[..2], Duration::from_secs(1));
        assert_eq!(bytes, 0.0);
    }

    #[test]
    fn rate_points_are_mb_per_s_over_each_step() {
        let samples: Samples = vec![(0.0, 0, 0), (0.5, 1_000_000, 1), (1.0, 3_000_000, 2)];
        assert_eq!(rate_points(&samples, 1), vec![(0.5, 2.0), (1.0, 4.0)]);
        assert_eq!(rate_points(&samples, 2), vec![(1.0, 3.0)]);
    }

    #[test]
    fn workloads_parse_by_name_and_refuse_others() {
        assert_eq!("oltp".parse::<Workload>(), Ok(Workload::Oltp));
        assert_eq!("batch".parse::<Workload>(), Ok(Workload::Batch));
        assert!("olap".parse::<Workload>().unwrap_err().contains("'olap' is not a workload"));
    }
}
