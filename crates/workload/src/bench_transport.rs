//! `redoguard bench transport`: what redo transport costs a commit and what an ASYNC standby
//! may lose, on loopback and through linkemu, against the physical limits measured in the
//! same run (the file system's fdatasync and the RTT), with PostgreSQL and Redis beside.
//!
//! # What runs
//!
//! For every RTT (0 = plain loopback; above 0 = one linkemu link at 1 Gbit/s, the primary and
//! the clients on side A, the standby on side B, so that every byte of redo and every
//! acknowledgement crosses the emulated RTT):
//!
//! 1. the physical limits, with no server running: raw 4 KiB write + fdatasync (`iotest`, one
//!    writer for 2 s, then two writers at once for 1 s, as a primary and a standby on one
//!    disk write), and the TCP RTT from side A to side B (median of 21 one-byte round trips).
//!    The raw fdatasync is measured again for 1 s just before and just after each case (the
//!    servers up and idle), and the lower p50 is the case's `fdatasync_p50_us`: a disk made
//!    slower for a while by other work is compared with itself (as `bench commit` does), and a
//!    reading spoiled by that work can only make a latency target stricter;
//! 2. fresh setups, one after the other: a primary alone (`no_standby`); a primary with one
//!    standby over `async` (Maximum Performance); the same again for the steady-rate cases;
//!    over `sync` with `affirm = false` (`sync_noaffirm`) and with `affirm = true`
//!    (`sync_affirm`), both under Maximum Availability. Each setup is one or two
//!    `redoguard server` processes with generated configurations (3 online log groups, 4
//!    standby log groups, `log_file_size` each) in a temporary directory, measured once the
//!    destination is `STREAMING` (ASYNC) or `SYNCHRONIZED` (SYNC), and stopped and removed
//!    after its cases. A fresh setup starts on an empty log, so with the default 256 MiB logs
//!    no log switch falls into 5-second cases: a switch archives the log on both servers,
//!    and here both share one disk, which a standby on its own host does not;
//! 3. on each setup but the steady-rate one, for each client count, a closed loop: every
//!    client sends `SET key:<random of 10^6> <100 bytes>` and the next one once it is
//!    acknowledged (the load of `bench external`, so the figures stand beside PostgreSQL's
//!    and Redis's);
//! 4. on the steady-rate ASYNC setup, for each of `lag_rates_mb_per_s`: 8 connections commit
//!    200 `SET`s a second in all, of values of rate / 200 bytes (10 kB at 2 MB/s, 100 kB at
//!    20 MB/s), on a fixed schedule; meanwhile the primary's status is read every 100 ms and
//!    its destination's `transport_lag_s` (the age of the oldest redo the standby has not
//!    acknowledged as durable: the data-loss exposure of a failover at that moment) goes into
//!    a histogram.
//!
//! Then, unless told not to, `bench external` runs PostgreSQL 15 with a streaming standby and
//! Redis with a replica at the same RTTs and client counts (see `bench_external`), and their
//! cases join the report.
//!
//! # Targets
//!
//! - SYNC AFFIRM, 1 client: commit p50 ≤ 1.15 × max(local fdatasync, RTT + remote
//!   fdatasync). The log writer sends a write to the standby before its own write and waits
//!   for both, so the two overlap; both disks are this one, so local and remote fdatasync are
//!   the same measurement. (With 16 clients a commit usually finds a write in progress and
//!   waits for it and then its own: group commit, not transport; no target.)
//! - ASYNC, every client count: commits/s ≥ 0.97 × the primary alone's at the same RTT and
//!   client count (ASYNC costs at most 3 %).
//! - ASYNC at a steady rate: transport lag p99 ≤ 2 × RTT + 10 ms (while the link's bandwidth
//!   suffices: 1 Gbit/s here).
//!
//! Every process started is a child of this one, stopped by its PID (and killed if it does
//! not stop); the link's drop deletes its namespaces, and the temporary directory goes at the
//! end, also on an error or an interrupt (see `interrupt`).

use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use linkemu::Side;
use resp::Frame;
use serde::{Deserialize, Serialize};

use crate::bench_external::{self, ExternalConfig, latency_histogram};
use crate::client::Client;
use crate::network::Network;
use crate::process::ServerProcess;

/// Connections of a steady-rate case.
const STEADY_CONNECTIONS: u32 = 8;
/// Commits a second of a steady-rate case, over all its connections.
const STEADY_COMMITS_PER_S: f64 = 200.0;
/// Keys each steady-rate connection cycles through (keeps the data small).
const STEADY_KEYS: u64 = 16;
/// How long the raw fdatasync is measured just before and just after each case (half the
/// case's duration if that is shorter).
const RAW_CASE_DURATION: Duration = Duration::from_secs(1);
/// How often the primary's transport lag is sampled.
const LAG_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);
/// The steady rates the benchmark accepts, in MB/s: values stay under 1 MB.
const RATE_MB_PER_S_MAX: f64 = 200.0;
/// How long a destination may take to reach STREAMING or SYNCHRONIZED.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// A SYNC destination that does not answer within this is dropped (the case then reports it).
const NET_TIMEOUT: &str = "10s";
/// Histogram bound of transport lag samples, in microseconds (1 h).
const LAG_US_MAX: u64 = 3_600_000_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    /// The `redoguard` binary the servers run from.
    pub binary: PathBuf,
    /// File system for every server's files: a temporary directory is made inside it and
    /// removed at the end. The `postgres` user must be able to reach it for the PostgreSQL
    /// cases (every parent directory searchable by others).
    pub dir: PathBuf,
    /// How long each case runs. Bounds: 1 s..=1 h.
    pub duration: Duration,
    /// Round-trip times in ms: 0 = plain loopback, above 0 = through linkemu at 1 Gbit/s.
    /// Bounds: at most 10 000, at least one.
    pub rtts_ms: Vec<u32>,
    /// Client counts of the closed-loop cases. Bounds: 1..=256 each, at least one.
    pub clients: Vec<u32>,
    /// Steady redo rates of the ASYNC lag cases, in MB/s (10^6 bytes). Bounds: each
    /// 0.01..=200; none is allowed (no lag cases).
    pub lag_rates_mb_per_s: Vec<f64>,
    /// `log_file_size` of both servers (the standby's must equal the primary's). Bounds:
    /// 1 MiB..=1 GiB. The CLI's default, 256 MiB, holds every case of a fresh setup at 5 s
    /// per case without a log switch.
    pub log_file_size: u64,
    /// Run PostgreSQL and Redis too (`bench external`).
    pub external: bool,
    /// Redo transport over mutual TLS (a test CA and certificates made for the run).
    pub tls: bool,
}

impl TransportConfig {
    /// Refuses values out of bounds, naming the field.
    pub fn validate(&self) -> anyhow::Result<()> {
        ExternalConfig {
            dir: self.dir.clone(),
            duration: self.duration,
            rtts_ms: self.rtts_ms.clone(),
            clients: self.clients.clone(),
        }
        .validate()?;
        if let Some(rate) = self
            .lag_rates_mb_per_s
            .iter()
            .find(|&&rate| !(0.01..=RATE_MB_PER_S_MAX).contains(&rate))
        {
            anyhow::bail!("lag-rates: {rate} MB/s is outside 0.01..={RATE_MB_PER_S_MAX}");
        }
        anyhow::ensure!(
            (1 << 20..=1 << 30).contains(&self.log_file_size),
            "log-file-size: {} bytes is outside 1 MiB..=1 GiB",
            self.log_file_size
        );
        Ok(())
    }
}

/// What a case is measured against, and whether it made it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Target {
    /// The target in words.
    pub description: String,
    /// The physical reference the figure is divided by (the no-standby commits/s, the
    /// fdatasync + RTT bound in µs, or 2 × RTT + 10 ms in ms).
    pub reference: f64,
    /// The case's figure divided by `reference`.
    pub ratio: f64,
    /// `<=` or `>=`: how `ratio` must compare with `limit`.
    pub comparison: String,
    pub limit: f64,
    pub met: bool,
}

impl Target {
    fn at_most(description: String, value: f64, reference: f64, limit: f64) -> Target {
        let ratio = value / reference;
        Target {
            description,
            reference,
            ratio,
            comparison: "<=".into(),
            limit,
            met: ratio.is_finite() && ratio <= limit,
        }
    }

    fn at_least(description: String, value: f64, reference: f64, limit: f64) -> Target {
        let ratio = value / reference;
        Target {
            description,
            reference,
            ratio,
            comparison: ">=".into(),
            limit,
            met: ratio.is_finite() && ratio >= limit,
        }
    }
}

/// One measured case: redoguard's, PostgreSQL's or Redis's.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct TransportCase {
    /// `redoguard`, `postgresql` or `redis`.
    pub system: String,
    /// redoguard: `no_standby`, `async`, `sync_noaffirm`, `sync_affirm`. PostgreSQL and
    /// Redis: see `bench_external`.
    pub mode: String,
    /// `closed_loop` (each client commits again as soon as acknowledged) or `steady_rate`
    /// (the ASYNC lag cases: a fixed redo rate).
    pub load: String,
    /// The RTT measured from the primary's side to the standby's just before, in ms.
    pub rtt_ms: f64,
    /// The RTT asked of the link, in ms (0: plain loopback).
    pub rtt_set_ms: u32,
    /// Client connections.
    pub clients: u32,
    pub commits_per_s: f64,
    /// Commit latency, from sending the command to its reply, in µs.
    pub p50_us: f64,
    pub p99_us: f64,
    /// Raw 4 KiB write + fdatasync p50 of the servers' file system, in µs: redoguard, the
    /// lower of two 1 s measurements just before and just after the case (the servers up and
    /// idle); PostgreSQL and Redis, one 2 s measurement before all their cases.
    pub fdatasync_p50_us: f64,
    /// redoguard: the mean of the primary's own log writes during the case ("log file
    /// parallel write": write + fdatasync of the redo log), in µs.
    pub log_write_avg_us: Option<f64>,
    /// Steady-rate cases: the redo rate the primary generated (its `redo size` statistic),
    /// in MB/s (10^6 bytes).
    pub redo_mb_per_s: Option<f64>,
    /// Steady-rate cases: the rate asked for, in MB/s.
    pub redo_mb_per_s_target: Option<f64>,
    /// Steady-rate cases: the primary's transport lag sampled every 100 ms, in ms.
    pub transport_lag_p50_ms: Option<f64>,
    pub transport_lag_p99_ms: Option<f64>,
    pub transport_lag_max_ms: Option<f64>,
    pub transport_lag_samples: Option<u64>,
    /// The target this case is held to, if any.
    pub target: Option<Target>,
    /// What exactly ran, and anything that qualifies the figures.
    pub notes: String,
}

/// The physical limits measured at one RTT, before its servers start.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct PathLimits {
    pub rtt_set_ms: u32,
    pub rtt_ms: f64,
    /// One writer: 4 KiB write + fdatasync, 2 s (or one case's duration if shorter).
    pub fdatasync_p50_us: f64,
    pub fdatasync_p99_us: f64,
    /// Two writers at once, each on its own file (what a primary and its standby on one
    /// disk do), 1 s (or half a case's duration): the p50 each sees.
    pub fdatasync_two_writers_p50_us: f64,
}

#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct TransportReport {
    pub dir: String,
    pub filesystem: String,
    pub duration_s: f64,
    pub limits: Vec<PathLimits>,
    pub cases: Vec<TransportCase>,
    pub targets_met: u32,
    pub targets_missed: u32,
    /// What could not run here (a system that cannot be installed, no linkemu), and why.
    pub skipped: Vec<String>,
    /// redoguard cases that failed or whose figures are not valid: a bug to look at.
    pub failures: Vec<String>,
    pub elapsed_s: f64,
}

/// A redoguard setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    NoStandby,
    Async,
    SyncNoAffirm,
    SyncAffirm,
}

/// What a setup's cases load it with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    /// Each client commits again once acknowledged, for each client count.
    ClosedLoop,
    /// A steady redo rate, for each rate (ASYNC only).
    SteadyRate,
}

const MODES: [Mode; 4] = [Mode::NoStandby, Mode::Async, Mode::SyncNoAffirm, Mode::SyncAffirm];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::NoStandby => "no_standby",
            Mode::Async => "async",
            Mode::SyncNoAffirm => "sync_noaffirm",
            Mode::SyncAffirm => "sync_affirm",
        }
    }

    /// The phase the destination must be in while measured.
    fn phase(self) -> Option<transport::Phase> {
        match self {
            Mode::NoStandby => None,
            Mode::Async => Some(transport::Phase::Streaming),
            Mode::SyncNoAffirm | Mode::SyncAffirm => Some(transport::Phase::Synchronized),
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Mode::NoStandby => "a primary alone; the commit waits for its local log write",
            Mode::Async => {
                "transport = async under maximum_performance; the commit waits for the local log write only, the sender streams the redo"
            }
            Mode::SyncNoAffirm => {
                "transport = sync, affirm = false under maximum_availability; the commit waits for the local log write and the standby's receipt, sent in parallel"
            }
            Mode::SyncAffirm => {
                "transport = sync, affirm = true under maximum_availability; the commit waits for the local log write and the standby's fdatasync, sent in parallel"
            }
        }
    }
}

/// The primary's configuration for `mode`, shipping to `standby` (its redo listener).
fn primary_config(mode: Mode, log_file_size: u64, standby: Option<SocketAddr>) -> String {
    let mut text = format!(
        "# Written by `redoguard bench transport`.\n[redo]\nlog_file_size = {log_file_size}\ngroups = 3\n"
    );
    let (transport, affirm, protection) = match mode {
        Mode::NoStandby => return text,
        Mode::Async => ("async", true, "maximum_performance"),
        Mode::SyncNoAffirm => ("sync", false, "maximum_availability"),
        Mode::SyncAffirm => ("sync", true, "maximum_availability"),
    };
    let address = standby.map_or_else(String::new, |address| address.to_string());
    text.push_str(&format!(
        "[replication]\nrole = \"primary\"\nprotection_mode = \"{protection}\"\n[[replication.destinations]]\nname = \"standby\"\naddress = \"{address}\"\ntransport = \"{transport}\"\naffirm = {affirm}\nnet_timeout = \"{NET_TIMEOUT}\"\nreopen = \"500ms\"\n"
    ));
    text
}

/// The standby's configuration: the primary's log size, one more group, listening on `listen`.
fn standby_config(log_file_size: u64, listen: Ipv4Addr) -> String {
    format!(
        "# Written by `redoguard bench transport`.\n[redo]\nlog_file_size = {log_file_size}\ngroups = 4\n[replication]\nrole = \"standby\"\n[replication.standby]\nlisten = \"{listen}:0\"\n"
    )
}

/// Runs every case; see the module documentation.
pub fn run(
    config: &TransportConfig,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<TransportReport> {
    config.validate()?;
    let started = Instant::now();
    let progress: &mut dyn FnMut(&str) = &mut progress;
    std::fs::create_dir_all(&config.dir)
        .with_context(|| format!("cannot create {}", config.dir.display()))?;
    let work = tempfile::Builder::new()
        .prefix("redoguard-bench-transport-")
        .tempdir_in(&config.dir)
        .with_context(|| format!("cannot create a directory in {}", config.dir.display()))?;
    // The postgres user must get through it to the external cases' directory below.
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755))?;
    let filesystem =
        tools::iotest::filesystem_name(&config.dir).unwrap_or_else(|_| "unknown".to_string());
    let mut report = TransportReport {
        dir: config.dir.display().to_string(),
        filesystem,
        duration_s: config.duration.as_secs_f64(),
        limits: Vec::new(),
        cases: Vec::new(),
        targets_met: 0,
        targets_missed: 0,
        skipped: Vec::new(),
        failures: Vec::new(),
        elapsed_s: 0.0,
    };

    let networks =
        crate::network::networks_for(&config.rtts_ms, "redoguard", &mut report.skipped, progress);
    for (network, rtts) in &networks {
        for &rtt in rtts {
            crate::interrupt::check()?;
            network.set_rtt(rtt)?;
            let limits = measure_limits(network, rtt, work.path(), config.duration, progress)?;
            let bench = Bench { config, network, limits: &limits, work: work.path() };
            // The steady-rate cases get a fresh ASYNC setup of their own, right after the
            // closed-loop ones.
            let mut setups: Vec<(Mode, Load)> =
                MODES.iter().map(|&mode| (mode, Load::ClosedLoop)).collect();
            if !config.lag_rates_mb_per_s.is_empty() {
                setups.insert(2, (Mode::Async, Load::SteadyRate));
            }
            for (mode, load) in setups {
                crate::interrupt::check()?;
                if let Err(error) = bench.setup_cases(mode, load, &mut report, progress) {
                    crate::interrupt::check()?;
                    report
                        .failures
                        .push(format!("redoguard {} at RTT {rtt} ms: {error:#}", mode.name()));
                }
            }
            report.limits.push(limits);
        }
    }
    // Every server on it has stopped: the link goes down before the other systems bring up
    // their own.
    drop(networks);

    if config.external {
        let external = ExternalConfig {
            dir: work.path().to_path_buf(),
            duration: config.duration,
            rtts_ms: config.rtts_ms.clone(),
            clients: config.clients.clone(),
        };
        match bench_external::run(&external, &mut *progress) {
            Ok(external) => {
                report.skipped.extend(external.skipped);
                report.cases.extend(external.cases.into_iter().map(|case| TransportCase {
                    system: case.system,
                    mode: case.mode,
                    load: "closed_loop".into(),
                    rtt_ms: case.rtt_ms,
                    rtt_set_ms: case.rtt_set_ms,
                    clients: case.clients,
                    commits_per_s: case.commits_per_s,
                    p50_us: case.p50_us,
                    p99_us: case.p99_us,
                    fdatasync_p50_us: case.fdatasync_p50_us,
                    log_write_avg_us: None,
                    redo_mb_per_s: None,
                    redo_mb_per_s_target: None,
                    transport_lag_p50_ms: None,
                    transport_lag_p99_ms: None,
                    transport_lag_max_ms: None,
                    transport_lag_samples: None,
                    target: None,
                    notes: case.notes,
                }));
            }
            Err(error) => {
                crate::interrupt::check()?;
                report.skipped.push(format!("postgresql and redis: {error:#}"));
            }
        }
    }
    assess(&mut report.cases);
    sort_cases(&mut report.cases);
    let targets = report.cases.iter().filter_map(|case| case.target.as_ref());
    report.targets_met = targets.clone().filter(|target| target.met).count() as u32;
    report.targets_missed = targets.filter(|target| !target.met).count() as u32;
    report.elapsed_s = started.elapsed().as_secs_f64();
    Ok(report)
}

/// Bytes of the file the raw fdatasync is measured on (kept between measurements, so that
/// only the first one writes it).
const RAW_FILE_BYTES: u64 = 16 << 20;

/// Raw 4 KiB write + fdatasync by `jobs` writers at once, in `work`/raw, for `duration`.
fn raw_fdatasync(
    work: &Path,
    jobs: u32,
    duration: Duration,
) -> anyhow::Result<tools::iotest::IoTestReport> {
    let dir = work.join("raw");
    std::fs::create_dir_all(&dir)?;
    let mut iotest =
        tools::iotest::IoTestConfig::new(&dir, 4096, tools::iotest::SyncMethod::Fdatasync);
    iotest.jobs = jobs;
    iotest.duration = duration;
    iotest.file_bytes = Some(RAW_FILE_BYTES);
    iotest.keep_files = true;
    tools::iotest::run(&iotest).with_context(|| format!("measuring fdatasync in {}", dir.display()))
}

/// Raw fdatasync (one writer, then two at once) and the RTT, with no server running.
fn measure_limits(
    network: &Network,
    rtt: u32,
    work: &Path,
    case_duration: Duration,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<PathLimits> {
    // 2 s and 1 s, or less for cases shorter than that.
    let one_writer = case_duration.min(Duration::from_secs(2));
    let two_writers = (case_duration / 2).min(Duration::from_secs(1));
    progress(&format!(
        "RTT {rtt} ms: raw fdatasync (4 KiB; one writer {one_writer:?}, two writers {two_writers:?}), RTT"
    ));
    let one = raw_fdatasync(work, 1, one_writer)?;
    let two = raw_fdatasync(work, 2, two_writers)?;
    let rtt_ms = network.measure_rtt_ms()?;
    Ok(PathLimits {
        rtt_set_ms: rtt,
        rtt_ms,
        fdatasync_p50_us: one.lat_p50_us,
        fdatasync_p99_us: one.lat_p99_us,
        fdatasync_two_writers_p50_us: two.lat_p50_us,
    })
}

/// What one RTT's cases share.
struct Bench<'a> {
    config: &'a TransportConfig,
    network: &'a Network,
    limits: &'a PathLimits,
    work: &'a Path,
}

/// A primary (on side A) and maybe its standby (on side B), stopped and removed when dropped.
struct Setup<'a> {
    network: &'a Network,
    dir: PathBuf,
    // Stopped in this order: the primary first, so that it does not log its standby's going.
    primary: ServerProcess,
    standby: Option<ServerProcess>,
}

impl Setup<'_> {
    /// The primary's status, read from its side.
    fn primary_status(&self) -> anyhow::Result<server::ServerStatus> {
        status(self.network, Side::A, self.primary.admin_addr)
    }

    /// Stops both servers with SIGTERM; fails if either does not stop cleanly.
    fn stop(mut self) -> anyhow::Result<()> {
        let primary = self.primary.stop().context("stopping the primary");
        let standby = match &mut self.standby {
            Some(standby) => standby.stop().context("stopping the standby"),
            None => Ok(()),
        };
        primary.and(standby)
    }
}

impl Drop for Setup<'_> {
    fn drop(&mut self) {
        let _ = self.primary.kill();
        if let Some(standby) = &mut self.standby {
            let _ = standby.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A server's status through its admin API, read from `side` (where it listens).
fn status(
    network: &Network,
    side: Side,
    admin: SocketAddr,
) -> anyhow::Result<server::ServerStatus> {
    let body = network.run_in(side, move || {
        server::status::http_get(&admin.to_string(), "/status", Duration::from_secs(10))
    })??;
    serde_json::from_str(&body).context("parsing the server's status")
}

/// What a case changed in the primary's counters.
struct Deltas {
    redo_bytes: u64,
    /// The primary's own log writes ("log file parallel write"): count and total time.
    log_writes: u64,
    log_write_us: u64,
    redo_writes: u64,
    user_commits: u64,
    remote_waits: u64,
    remote_wait_us: u64,
}

fn deltas(before: &server::ServerStatus, after: &server::ServerStatus) -> Deltas {
    let stat = |name: &str| after.metrics.stat(name).saturating_sub(before.metrics.stat(name));
    let wait = |status: &server::ServerStatus| {
        status.metrics.wait("SYNC remote write").map_or((0, 0), |wait| (wait.count, wait.total_us))
    };
    let (count_before, us_before) = wait(before);
    let (count_after, us_after) = wait(after);
    let writes = |status: &server::ServerStatus| {
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
    }
}

impl Bench<'_> {
    fn rtt(&self) -> u32 {
        self.limits.rtt_set_ms
    }

    /// The raw fdatasync p50 now, in µs. Each case measures it just before and just after
    /// and keeps the lower: a disk made slower for a while by other work on the machine is
    /// compared with itself (as `bench commit` does), and a reading spoiled by that work can
    /// only make a latency target stricter.
    fn raw_p50_us(&self) -> anyhow::Result<f64> {
        let duration = RAW_CASE_DURATION.min(self.config.duration / 2);
        Ok(raw_fdatasync(self.work, 1, duration)?.lat_p50_us)
    }

    /// Starts `mode`'s servers, waits until the destination is as `mode` wants it.
    fn start(&self, mode: Mode, load: Load) -> anyhow::Result<Setup<'_>> {
        let dir = self.work.join(format!("redoguard-{}-{}-{load:?}", self.rtt(), mode.name()));
        std::fs::create_dir_all(&dir)?;
        let log_file_size = self.config.log_file_size;
        let binary = &self.config.binary;
        let server = |side: Side, name: &str, config: String| -> anyhow::Result<ServerProcess> {
            let data = dir.join(name);
            std::fs::create_dir_all(&data)?;
            let config_path = dir.join(format!("{name}.toml"));
            std::fs::write(&config_path, config)?;
            let (config_path, data) =
                (config_path.display().to_string(), data.display().to_string());
            ServerProcess::start_command(
                self.network.command(side, binary),
                &["--config", &config_path, "--data-dir", &data],
                &dir.join(format!("{name}.log")),
            )
            .with_context(|| format!("starting the {name}"))
        };
        let tls_section = |name: &str| -> anyhow::Result<String> {
            if !self.config.tls {
                return Ok(String::new());
            }
            let certs = dir.join("certs");
            if !certs.join("ca.pem").exists() {
                tls::certs::write_set(
                    &certs,
                    &[("primary".into(), Vec::new()), ("standby".into(), Vec::new())],
                )
                .map_err(anyhow::Error::msg)?;
            }
            Ok(format!(
                "[tls]\nca_file = \"{0}/ca.pem\"\ncert_file = \"{0}/{name}.pem\"\nkey_file = \"{0}/{name}-key.pem\"\nname = \"{name}\"\n",
                certs.display()
            ))
        };
        let standby = match mode {
            Mode::NoStandby => None,
            _ => Some(server(
                Side::B,
                "standby",
                standby_config(log_file_size, self.network.address(Side::B))
                    + &tls_section("standby")?,
            )?),
        };
        let redo = standby.as_ref().and_then(|standby| standby.redo_addr);
        let primary_text = primary_config(mode, log_file_size, redo)
            + &if mode == Mode::NoStandby { String::new() } else { tls_section("primary")? };
        let primary = match server(Side::A, "primary", primary_text) {
            Ok(primary) => primary,
            Err(error) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(error);
            }
        };
        let setup = Setup { network: self.network, dir, primary, standby };
        if let Some(wanted) = mode.phase() {
            let deadline = Instant::now() + CONNECT_TIMEOUT;
            loop {
                crate::interrupt::check()?;
                let status = setup.primary_status()?;
                let destination = status.replication.destinations.first();
                if destination.is_some_and(|destination| destination.phase == wanted) {
                    break;
                }
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "the standby did not reach {wanted:?} within {CONNECT_TIMEOUT:?}: {:?}",
                    destination
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(setup)
    }

    /// A fresh setup of `mode`, and its cases: closed-loop ones, or steady-rate ones.
    fn setup_cases(
        &self,
        mode: Mode,
        load: Load,
        report: &mut TransportReport,
        progress: &mut dyn FnMut(&str),
    ) -> anyhow::Result<()> {
        progress(&format!("redoguard {} at RTT {} ms: starting", mode.name(), self.rtt()));
        let setup = self.start(mode, load)?;
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
            let case = self.closed_loop(&setup, mode, clients);
            match case {
                Ok((case, problems)) => {
                    report.failures.extend(problems.into_iter().map(|problem| {
                        format!(
                            "redoguard {} at RTT {} ms, {clients} clients: {problem}",
                            mode.name(),
                            self.rtt()
                        )
                    }));
                    report.cases.push(case);
                }
                Err(error) => {
                    crate::interrupt::check()?;
                    report.failures.push(format!(
                        "redoguard {} at RTT {} ms, {clients} clients: {error:#}",
                        mode.name(),
                        self.rtt()
                    ));
                }
            }
        }
        if load == Load::SteadyRate {
            for &rate in &self.config.lag_rates_mb_per_s {
                crate::interrupt::check()?;
                progress(&format!(
                    "redoguard async, RTT {} ms (measured {:.3}), steady {rate} MB/s of redo",
                    self.rtt(),
                    self.limits.rtt_ms
                ));
                match self.steady(&setup, rate) {
                    Ok((case, problems)) => {
                        report.failures.extend(problems.into_iter().map(|problem| {
                            format!(
                                "redoguard async at RTT {} ms, {rate} MB/s: {problem}",
                                self.rtt()
                            )
                        }));
                        report.cases.push(case);
                    }
                    Err(error) => {
                        crate::interrupt::check()?;
                        report.failures.push(format!(
                            "redoguard async at RTT {} ms, {rate} MB/s: {error:#}",
                            self.rtt()
                        ));
                    }
                }
            }
        }
        setup.stop()
    }

    /// Checks that the destination stayed as `mode` wants it through a case; returns what
    /// went wrong.
    fn check_destination(
        mode: Mode,
        before: &server::ServerStatus,
        after: &server::ServerStatus,
        deltas: &Deltas,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let Some(wanted) = mode.phase() else { return problems };
        let (Some(first), Some(last)) =
            (before.replication.destinations.first(), after.replication.destinations.first())
        else {
            problems.push("the primary reports no destination".into());
            return problems;
        };
        if last.phase != wanted || last.failures != first.failures {
            problems.push(format!(
                "the destination left {wanted:?} during the case: now {:?}, last error {:?}",
                last.phase, last.last_error
            ));
        }
        let synchronous = matches!(mode, Mode::SyncAffirm | Mode::SyncNoAffirm);
        if synchronous && deltas.remote_waits == 0 {
            problems.push("no log write waited for the standby (SYNC remote write)".into());
        }
        if last.bytes_sent <= first.bytes_sent {
            problems.push("no redo was sent to the standby".into());
        }
        problems
    }

    fn closed_loop(
        &self,
        setup: &Setup<'_>,
        mode: Mode,
        clients: u32,
    ) -> anyhow::Result<(TransportCase, Vec<String>)> {
        let fdatasync_before = self.raw_p50_us()?;
        let before = setup.primary_status()?;
        let measured = bench_external::set_load(
            self.network,
            setup.primary.resp_addr.port(),
            clients,
            self.config.duration,
            false,
        )?;
        crate::interrupt::check()?;
        let after = setup.primary_status()?;
        let fdatasync_p50_us = fdatasync_before.min(self.raw_p50_us()?);
        let deltas = deltas(&before, &after);
        let problems = Bench::check_destination(mode, &before, &after, &deltas);
        let mut notes = format!(
            "{clients} connections from the primary's side, each looping SET key:<random of 10^6> <100 bytes>, latency from the write to the reply; {}; {} commits, {:.1} commits per log write",
            mode.describe(),
            measured.commits,
            deltas.user_commits as f64 / deltas.redo_writes.max(1) as f64
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
            log_write_avg_us: Some(deltas.log_write_us as f64 / deltas.log_writes.max(1) as f64),
            redo_mb_per_s: None,
            redo_mb_per_s_target: None,
            transport_lag_p50_ms: None,
            transport_lag_p99_ms: None,
            transport_lag_max_ms: None,
            transport_lag_samples: None,
            target: None,
            notes,
        };
        Ok((case, problems))
    }

    fn steady(
        &self,
        setup: &Setup<'_>,
        rate_mb_per_s: f64,
    ) -> anyhow::Result<(TransportCase, Vec<String>)> {
        let fdatasync_before = self.raw_p50_us()?;
        let before = setup.primary_status()?;
        let started = Instant::now();
        let steady = steady_load(
            self.network,
            setup.primary.resp_addr,
            setup.primary.admin_addr,
            rate_mb_per_s,
            self.config.duration,
        )?;
        let seconds = started.elapsed().as_secs_f64();
        crate::interrupt::check()?;
        let after = setup.primary_status()?;
        let fdatasync_p50_us = fdatasync_before.min(self.raw_p50_us()?);
        let deltas = deltas(&before, &after);
        let mut problems = Bench::check_destination(Mode::Async, &before, &after, &deltas);
        problems.extend(steady.problems.iter().cloned());
        let redo_mb_per_s = deltas.redo_bytes as f64 / 1e6 / seconds;
        let lag_ms = |quantile: f64| {
            if steady.lag_us.is_empty() {
                0.0
            } else {
                steady.lag_us.value_at_quantile(quantile) as f64 / 1000.0
            }
        };
        let mut notes = format!(
            "{} connections from the primary's side committing {} SETs a second in all, on a fixed schedule, of {}-byte values; {}; transport lag = the primary's destination status (age of the oldest redo not yet durable on the standby) read every {} ms; {} commits, {:.1} commits per log write",
            STEADY_CONNECTIONS,
            STEADY_COMMITS_PER_S,
            steady.value_bytes,
            Mode::Async.describe(),
            LAG_SAMPLE_INTERVAL.as_millis(),
            steady.commits,
            deltas.user_commits as f64 / deltas.redo_writes.max(1) as f64
        );
        if redo_mb_per_s < 0.9 * rate_mb_per_s {
            notes.push_str(&format!(
                "; the primary did not sustain the rate asked ({redo_mb_per_s:.2} of {rate_mb_per_s} MB/s)"
            ));
        }
        if !problems.is_empty() {
            notes.push_str(&format!("; NOT VALID: {}", problems.join("; ")));
        }
        let case = TransportCase {
            system: "redoguard".into(),
            mode: Mode::Async.name().into(),
            load: "steady_rate".into(),
            rtt_ms: self.limits.rtt_ms,
            rtt_set_ms: self.rtt(),
            clients: STEADY_CONNECTIONS,
            commits_per_s: steady.commits as f64 / steady.seconds,
            p50_us: quantile(&steady.latency_us, 0.5),
            p99_us: quantile(&steady.latency_us, 0.99),
            fdatasync_p50_us,
            log_write_avg_us: Some(deltas.log_write_us as f64 / deltas.log_writes.max(1) as f64),
            redo_mb_per_s: Some(redo_mb_per_s),
            redo_mb_per_s_target: Some(rate_mb_per_s),
            transport_lag_p50_ms: Some(lag_ms(0.5)),
            transport_lag_p99_ms: Some(lag_ms(0.99)),
            transport_lag_max_ms: Some(steady.lag_us.max() as f64 / 1000.0),
            transport_lag_samples: Some(steady.lag_us.len()),
            target: None,
            notes,
        };
        Ok((case, problems))
    }
}

fn quantile(histogram: &Histogram<u64>, quantile: f64) -> f64 {
    if histogram.is_empty() { 0.0 } else { histogram.value_at_quantile(quantile) as f64 }
}

/// The outcome of a steady-rate load.
struct Steady {
    commits: u64,
    seconds: f64,
    value_bytes: usize,
    latency_us: Histogram<u64>,
    lag_us: Histogram<u64>,
    /// Samples that could not be read, or saw the destination out of STREAMING.
    problems: Vec<String>,
}

/// Commits `rate_mb_per_s` of values to the primary at `resp` on a fixed schedule for
/// `duration`, from side A, while a thread there samples the transport lag from `admin`.
fn steady_load(
    network: &Network,
    resp: SocketAddr,
    admin: SocketAddr,
    rate_mb_per_s: f64,
    duration: Duration,
) -> anyhow::Result<Steady> {
    let value_bytes = ((rate_mb_per_s * 1e6 / STEADY_COMMITS_PER_S) as usize).max(1);
    network.run_in(Side::A, move || -> anyhow::Result<Steady> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let mut connections = Vec::with_capacity(STEADY_CONNECTIONS as usize);
        runtime.block_on(async {
            for _ in 0..STEADY_CONNECTIONS {
                let connect = tokio::time::timeout(Duration::from_secs(10), Client::connect(resp));
                connections.push(connect.await.context("connecting within 10 s")??);
            }
            anyhow::Ok(())
        })?;
        // Started from this thread, the sampler is on the same side.
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("lag-sampler".into())
                .spawn(move || sample_lag(admin, &stop))?
        };
        let started = Instant::now();
        let deadline = started + duration;
        let interval =
            Duration::from_secs_f64(f64::from(STEADY_CONNECTIONS) / STEADY_COMMITS_PER_S);
        let value = Arc::new(vec![b's'; value_bytes]);
        let load = runtime.block_on(async {
            let mut tasks = tokio::task::JoinSet::new();
            for (index, client) in connections.into_iter().enumerate() {
                // Spread the connections evenly over one interval.
                let first =
                    started + interval.mul_f64(index as f64 / f64::from(STEADY_CONNECTIONS));
                tasks.spawn(steady_client(client, index, first, interval, deadline, value.clone()));
            }
            let mut latency_us = latency_histogram();
            let mut commits = 0;
            while let Some(joined) = tasks.join_next().await {
                let (count, histogram) = joined??;
                commits += count;
                latency_us.add(&histogram)?;
            }
            anyhow::Ok((commits, latency_us))
        });
        let seconds = started.elapsed().as_secs_f64();
        stop.store(true, Ordering::Relaxed);
        let (lag_us, problems) =
            sampler.join().map_err(|_| anyhow::anyhow!("the lag sampler panicked"))?;
        let (commits, latency_us) = load?;
        Ok(Steady { commits, seconds, value_bytes, latency_us, lag_us, problems })
    })?
}

/// One connection's share of a steady load: a SET every `interval` from `first` until
/// `deadline`; late ones are sent at once, so the rate holds as long as the server keeps up.
async fn steady_client(
    mut client: Client,
    index: usize,
    first: Instant,
    interval: Duration,
    deadline: Instant,
    value: Arc<Vec<u8>>,
) -> anyhow::Result<(u64, Histogram<u64>)> {
    let mut latency_us = latency_histogram();
    let mut due = first;
    let mut commits = 0u64;
    while due < deadline && !crate::interrupt::requested() {
        tokio::time::sleep_until(due.into()).await;
        let key = format!("steady:{index}:{}", commits % STEADY_KEYS);
        let started = Instant::now();
        let reply = tokio::time::timeout(
            Duration::from_secs(30),
            client.command(&[b"SET", key.as_bytes(), &value]),
        )
        .await
        .context("no reply within 30 s")??;
        anyhow::ensure!(
            matches!(&reply, Frame::Simple(ok) if &ok[..] == b"OK"),
            "SET answered {reply:?}"
        );
        latency_us.record((started.elapsed().as_micros() as u64).clamp(1, 600_000_000))?;
        commits += 1;
        due += interval;
    }
    Ok((commits, latency_us))
}

/// Reads the primary's first destination's transport lag every [`LAG_SAMPLE_INTERVAL`]
/// until `stop`.
fn sample_lag(admin: SocketAddr, stop: &AtomicBool) -> (Histogram<u64>, Vec<String>) {
    let mut lag_us = Histogram::new_with_bounds(1, LAG_US_MAX, 3).expect("valid bounds");
    let mut problems = Vec::new();
    let address = admin.to_string();
    let mut next = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let sample = server::status::http_get(&address, "/status", Duration::from_secs(5))
            .and_then(|body| Ok(serde_json::from_str::<server::ServerStatus>(&body)?));
        match sample {
            Ok(status) => match status.replication.destinations.first() {
                Some(destination) => {
                    if destination.phase != transport::Phase::Streaming && problems.len() < 5 {
                        problems.push(format!(
                            "a lag sample saw the destination {:?}",
                            destination.phase
                        ));
                    }
                    let us = (destination.transport_lag_s * 1e6) as u64;
                    let _ = lag_us.record(us.clamp(1, LAG_US_MAX));
                }
                None if problems.len() < 5 => {
                    problems.push("the primary reports no destination".into())
                }
                None => {}
            },
            Err(error) if problems.len() < 5 => {
                problems.push(format!("reading the primary's status: {error:#}"))
            }
            Err(_) => {}
        }
        next += LAG_SAMPLE_INTERVAL;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
    (lag_us, problems)
}

/// Sets each redoguard case's target (see the module documentation).
fn assess(cases: &mut [TransportCase]) {
    let alone: Vec<(u32, u32, f64)> = cases
        .iter()
        .filter(|case| {
            case.system == "redoguard" && case.mode == "no_standby" && case.load == "closed_loop"
        })
        .map(|case| (case.rtt_set_ms, case.clients, case.commits_per_s))
        .collect();
    for case in cases.iter_mut().filter(|case| case.system == "redoguard") {
        case.target = match (case.mode.as_str(), case.load.as_str()) {
            ("async", "closed_loop") => alone
                .iter()
                .find(|(rtt, clients, _)| *rtt == case.rtt_set_ms && *clients == case.clients)
                .map(|&(_, _, reference)| {
                    Target::at_least(
                        "ASYNC commits/s >= 0.97 x no_standby commits/s (same RTT and clients)"
                            .into(),
                        case.commits_per_s,
                        reference,
                        0.97,
                    )
                }),
            ("sync_affirm", "closed_loop") if case.clients == 1 => {
                let fdatasync = case.fdatasync_p50_us;
                let reference = fdatasync.max(case.rtt_ms * 1000.0 + fdatasync);
                Some(Target::at_most(
                    "SYNC AFFIRM p50 <= 1.15 x max(local fdatasync, RTT + remote fdatasync)".into(),
                    case.p50_us,
                    reference,
                    1.15,
                ))
            }
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
}

/// Commit cases by RTT, clients, system and mode, so that the systems stand side by side;
/// the steady-rate cases after them.
fn sort_cases(cases: &mut [TransportCase]) {
    let system = |name: &str| ["redoguard", "postgresql", "redis"].iter().position(|s| *s == name);
    let mode = |name: &str| {
        [
            "no_standby",
            "async",
            "sync_noaffirm",
            "sync_affirm",
            "sync_commit_off",
            "sync_commit_local",
            "sync_commit_remote_write",
            "sync_commit_on",
            "no_wait",
            "wait_1",
        ]
        .iter()
        .position(|m| *m == name)
    };
    cases.sort_by(|a, b| {
        (a.load != "closed_loop", a.rtt_set_ms, a.clients, system(&a.system), mode(&a.mode))
            .cmp(&(
                b.load != "closed_loop",
                b.rtt_set_ms,
                b.clients,
                system(&b.system),
                mode(&b.mode),
            ))
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
    let _ = writeln!(out, "physical limits (no server running):");
    let _ = writeln!(
        out,
        "  {:>7} {:>9} {:>15} {:>15} {:>22}",
        "RTT set", "RTT ms", "fdatasync p50", "fdatasync p99", "2 writers at once p50"
    );
    for limits in &report.limits {
        let _ = writeln!(
            out,
            "  {:>7} {:>9.3} {:>12.0} µs {:>12.0} µs {:>19.0} µs",
            limits.rtt_set_ms,
            limits.rtt_ms,
            limits.fdatasync_p50_us,
            limits.fdatasync_p99_us,
            limits.fdatasync_two_writers_p50_us
        );
    }
    let verdict = |target: &Option<Target>| match target {
        Some(target) => format!(
            "{:>6.2} {} {:<5.2} {}",
            target.ratio,
            target.comparison,
            target.limit,
            if target.met { "met" } else { "MISSED" }
        ),
        None => String::new(),
    };
    let _ = writeln!(out, "commits (closed loop: each client commits again once acknowledged):");
    let _ = writeln!(
        out,
        "  {:<10} {:<24} {:>7} {:>8} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9}  target ratio",
        "system",
        "mode",
        "RTT set",
        "RTT ms",
        "clients",
        "commits/s",
        "p50 µs",
        "p99 µs",
        "fdsync µs",
        "logwr µs"
    );
    let mut previous = None;
    for case in report.cases.iter().filter(|case| case.load == "closed_loop") {
        if previous.is_some_and(|previous| previous != (case.rtt_set_ms, case.clients)) {
            let _ = writeln!(out);
        }
        previous = Some((case.rtt_set_ms, case.clients));
        let _ = writeln!(
            out,
            "  {:<10} {:<24} {:>7} {:>8.3} {:>7} {:>10.0} {:>9.0} {:>9.0} {:>9.0} {:>9}  {}",
            case.system,
            case.mode,
            case.rtt_set_ms,
            case.rtt_ms,
            case.clients,
            case.commits_per_s,
            case.p50_us,
            case.p99_us,
            case.fdatasync_p50_us,
            case.log_write_avg_us.map_or_else(|| "-".to_string(), |us| format!("{us:.0}")),
            verdict(&case.target)
        );
    }
    let steady: Vec<&TransportCase> =
        report.cases.iter().filter(|case| case.load == "steady_rate").collect();
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
    let _ = writeln!(out, "targets: {} met, {} missed", report.targets_met, report.targets_missed);
    for skipped in &report.skipped {
        let _ = writeln!(out, "skipped: {skipped}");
    }
    for failure in &report.failures {
        let _ = writeln!(out, "FAILED: {failure}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(mode: &str, load: &str, clients: u32) -> TransportCase {
        TransportCase {
            system: "redoguard".into(),
            mode: mode.into(),
            load: load.into(),
            rtt_ms: 10.0,
            rtt_set_ms: 10,
            clients,
            commits_per_s: 1000.0,
            p50_us: 12_000.0,
            p99_us: 20_000.0,
            fdatasync_p50_us: 1000.0,
            log_write_avg_us: None,
            redo_mb_per_s: None,
            redo_mb_per_s_target: None,
            transport_lag_p50_ms: None,
            transport_lag_p99_ms: None,
            transport_lag_max_ms: None,
            transport_lag_samples: None,
            target: None,
            notes: String::new(),
        }
    }

    #[test]
    fn targets_follow_the_issue() {
        let mut alone = case("no_standby", "closed_loop", 16);
        alone.commits_per_s = 2000.0;
        let mut asynchronous = case("async", "closed_loop", 16);
        asynchronous.commits_per_s = 1950.0;
        let mut slow = case("async", "closed_loop", 1);
        slow.commits_per_s = 900.0;
        let mut sync = case("sync_affirm", "closed_loop", 1);
        sync.p50_us = 12_600.0;
        let sync_many = case("sync_affirm", "closed_loop", 16);
        let mut lag = case("async", "steady_rate", 8);
        lag.transport_lag_p99_ms = Some(31.0);
        let mut cases = vec![alone, asynchronous, slow, sync, sync_many, lag];
        assess(&mut cases);
        // 1950 / 2000 = 0.975 >= 0.97.
        let target = cases[1].target.as_ref().unwrap();
        assert!(target.met && (target.ratio - 0.975).abs() < 1e-9, "{target:?}");
        // No no_standby case with 1 client: no reference, no target.
        assert_eq!(cases[2].target, None);
        // max(1 ms, 10 ms + 1 ms) = 11 ms; 12.6 / 11 = 1.145 <= 1.15.
        let target = cases[3].target.as_ref().unwrap();
        assert!(target.met && (target.reference - 11_000.0).abs() < 1e-9, "{target:?}");
        assert_eq!(cases[4].target, None);
        // 31 ms against 2 x 10 + 10 = 30 ms: missed.
        let target = cases[5].target.as_ref().unwrap();
        assert!(!target.met && (target.reference - 30.0).abs() < 1e-9, "{target:?}");
        assert!(cases[0].target.is_none());
    }

    #[test]
    fn cases_sort_side_by_side() {
        let mut postgresql = case("sync_commit_on", "closed_loop", 1);
        postgresql.system = "postgresql".into();
        let mut cases = vec![
            case("async", "steady_rate", 8),
            postgresql,
            case("sync_affirm", "closed_loop", 1),
            case("no_standby", "closed_loop", 16),
            case("no_standby", "closed_loop", 1),
        ];
        sort_cases(&mut cases);
        let order: Vec<(&str, u32)> =
            cases.iter().map(|case| (case.mode.as_str(), case.clients)).collect();
        assert_eq!(
            order,
            [
                ("no_standby", 1),
                ("sync_affirm", 1),
                ("sync_commit_on", 1),
                ("no_standby", 16),
                ("async", 8)
            ]
        );
    }

    #[test]
    fn configurations_parse_as_the_server_reads_them() {
        let standby: SocketAddr = "198.18.0.2:7000".parse().unwrap();
        for mode in MODES {
            let text = primary_config(mode, 64 << 20, Some(standby));
            let config = server::ServerConfig::parse(&text).unwrap();
            config.validate().unwrap();
            assert_eq!(config.replication.destinations.len(), usize::from(mode != Mode::NoStandby));
        }
        let text = standby_config(64 << 20, Ipv4Addr::new(198, 18, 0, 2));
        let config = server::ServerConfig::parse(&text).unwrap();
        config.validate().unwrap();
    }

    #[test]
    fn config_bounds_are_named() {
        let good = TransportConfig {
            binary: "redoguard".into(),
            dir: ".".into(),
            duration: Duration::from_secs(5),
            rtts_ms: vec![0, 10, 25],
            clients: vec![1, 16],
            lag_rates_mb_per_s: vec![2.0, 20.0],
            log_file_size: 64 << 20,
            tls: false,
            external: true,
        };
        good.validate().unwrap();
        let message = |config: TransportConfig| config.validate().unwrap_err().to_string();
        assert!(
            message(TransportConfig { lag_rates_mb_per_s: vec![500.0], ..good.clone() })
                .starts_with("lag-rates")
        );
        assert!(
            message(TransportConfig { log_file_size: 1000, ..good.clone() })
                .starts_with("log-file-size")
        );
        assert!(message(TransportConfig { clients: vec![], ..good }).starts_with("clients"));
    }
}
