//! PostgreSQL 15 with a streaming standby and Redis with a replica, measured the way
//! `bench transport` measures redoguard: commits/s and commit latency p50/p99 at each client
//! count, on plain loopback and through linkemu at each RTT, with the raw fdatasync of the
//! same file system and the RTT measured in the same run.
//!
//! # Where things run
//!
//! RTT 0 is plain loopback: primary and standby are two processes on 127.0.0.1 of this host.
//! An RTT above 0 is one linkemu link at 1 Gbit/s (two network namespaces, A and B): the
//! primary and the clients in A, the standby or replica in B, replication crossing the link;
//! the clients reach the primary on A's own loopback. One link serves every RTT above 0 (its
//! RTT is changed between cases), and before each system's cases at each RTT a TCP
//! ping-pong of one byte from A to B (21 round trips, the median) gives `rtt_ms`; on
//! loopback the same ping-pong runs on 127.0.0.1. `fdatasync_p50_us` is one `iotest` run
//! (4 KiB writes, each followed by fdatasync, 2 s) in the directory the servers' files are in,
//! before any server starts. The two systems never run at the same time.
//!
//! # What a commit is
//!
//! Each system's module says how it is set up, what load runs, and what a commit waits for
//! in each mode, beside the nearest redoguard case: `postgresql` (and `quorum`, with two
//! standbys) and `redis`; `load` is the SET load over the Redis protocol.
//!
//! # Cleaning up
//!
//! Every server is a child of this process, stopped by its PID when its guard drops (also
//! on error): PostgreSQL with SIGINT (fast shutdown), Redis with SIGKILL, then SIGKILL for
//! whatever has not stopped within 30 s. The work directory inside `dir` is removed at the
//! end, and the link's drop deletes its namespaces.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::bench_resp::ensure_redis;

mod load;
mod pgbench;
mod postgresql;
mod process;
pub mod quorum;
mod redis;

pub(crate) use load::set_load_at;
use postgresql::{ensure_postgresql, postgresql_cases};
use redis::redis_cases;

/// Where Debian's PostgreSQL 15 keeps its programs.
pub const POSTGRESQL_BIN: &str = "/usr/lib/postgresql/15/bin";
/// The line rate of the emulated link.
pub use crate::network::LINK_RATE_BITS_PER_S;
/// The longest case the benchmark accepts.
pub const DURATION_MAX: Duration = Duration::from_secs(3600);
/// The most clients per case.
pub const CLIENTS_MAX: u32 = 256;
/// How long one Redis `WAIT 1` may wait for the replica, in milliseconds.
const WAIT_TIMEOUT_MS: u64 = 10_000;
/// Keys are drawn uniformly from this many (as `redis-benchmark -r 1000000` does).
const KEYS: u64 = 1_000_000;
/// Bytes of the value each commit writes.
const VALUE_BYTES: usize = 100;
/// How long a server may take to start, or a standby to catch up and become synchronous.
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a server may take to stop after its stop signal before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Histogram bounds of commit latency, in microseconds.
const LATENCY_US_MAX: u64 = 600_000_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct ExternalConfig {
    /// File system for the servers' data: a temporary directory is created inside it and
    /// removed at the end. The `postgres` user must be able to reach it (every parent
    /// directory searchable by others).
    pub dir: PathBuf,
    /// How long each case runs. PostgreSQL's pgbench counts in whole seconds, so both systems
    /// run for this rounded up to a whole second. Bounds: 1 s..=1 h.
    pub duration: Duration,
    /// Round-trip times in milliseconds: 0 = plain loopback, above 0 = through linkemu.
    /// Bounds: at most 10 000, at least one entry.
    pub rtts_ms: Vec<u32>,
    /// Client counts. Bounds: 1..=256 each, at least one entry.
    pub clients: Vec<u32>,
}

impl ExternalConfig {
    /// Refuses values out of bounds, naming the field.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            (Duration::from_secs(1)..=DURATION_MAX).contains(&self.duration),
            "duration: {:?} is outside 1 s..=1 h",
            self.duration
        );
        anyhow::ensure!(!self.rtts_ms.is_empty(), "rtts: give at least one RTT");
        if let Some(rtt) = self.rtts_ms.iter().find(|&&rtt| rtt > 10_000) {
            anyhow::bail!("rtts: {rtt} ms is more than 10 000 ms");
        }
        anyhow::ensure!(!self.clients.is_empty(), "clients: give at least one client count");
        if let Some(clients) = self.clients.iter().find(|&&c| !(1..=CLIENTS_MAX).contains(&c)) {
            anyhow::bail!("clients: {clients} is outside 1..={CLIENTS_MAX}");
        }
        Ok(())
    }

    /// The whole seconds each case runs.
    fn seconds(&self) -> u64 {
        self.duration.as_secs() + u64::from(self.duration.subsec_nanos() > 0)
    }
}

/// One measured case.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct ExternalCase {
    /// `postgresql` or `redis`.
    pub system: String,
    /// See the `postgresql` and `redis` modules' documentation: `no_standby`,
    /// `sync_commit_off`, `sync_commit_local`, `sync_commit_remote_write`, `sync_commit_on`,
    /// `no_wait`, `wait_1`.
    pub mode: String,
    /// The RTT measured between primary and standby just before the case (median of a
    /// one-byte TCP ping-pong), in milliseconds.
    pub rtt_ms: f64,
    /// The RTT asked of the link (0: plain loopback), in milliseconds.
    pub rtt_set_ms: u32,
    pub clients: u32,
    pub commits_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Raw 4 KiB write + fdatasync latency of the data directory's file system, this run.
    pub fdatasync_p50_us: f64,
    /// What exactly ran, and anything that qualifies the figures.
    pub notes: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct ExternalReport {
    pub cases: Vec<ExternalCase>,
    /// What could not run, and why.
    pub skipped: Vec<String>,
}

/// Runs every case: PostgreSQL then Redis on loopback (if `rtts_ms` has 0), then both
/// through one linkemu link for the RTTs above 0. A system that cannot be installed, or
/// fails on one network, is reported in `skipped` and the rest goes on.
pub fn run(
    config: &ExternalConfig,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<ExternalReport> {
    config.validate()?;
    let progress: &mut dyn FnMut(&str) = &mut progress;
    std::fs::create_dir_all(&config.dir)
        .with_context(|| format!("cannot create {}", config.dir.display()))?;
    let work = tempfile::Builder::new()
        .prefix("redoguard-bench-external-")
        .tempdir_in(&config.dir)
        .with_context(|| format!("cannot create a directory in {}", config.dir.display()))?;
    // The postgres user must get through it to its own directory below.
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755))?;

    progress("raw fdatasync, 4 KiB, 2 s");
    let mut iotest =
        tools::iotest::IoTestConfig::new(work.path(), 4096, tools::iotest::SyncMethod::Fdatasync);
    iotest.duration = Duration::from_secs(2);
    let fdatasync_p50_us = tools::iotest::run(&iotest)
        .with_context(|| format!("measuring fdatasync in {}", work.path().display()))?
        .lat_p50_us;

    let mut report = ExternalReport::default();
    let postgresql = ensure_postgresql(progress).map_err(|reason| format!("postgresql: {reason}"));
    let redis = ensure_redis(progress).map_err(|reason| format!("redis: {reason}"));
    for missing in [&postgresql, &redis].into_iter().filter_map(|r| r.as_ref().err()) {
        report.skipped.push(missing.clone());
    }
    let bench = Bench { config, work: work.path(), fdatasync_p50_us };

    let networks = crate::network::networks_for(
        &config.rtts_ms,
        "every system",
        &mut report.skipped,
        progress,
    );
    for (network, rtts) in &networks {
        if postgresql.is_ok() {
            let result = postgresql_cases(&bench, network, rtts, &mut report.cases, progress);
            if let Err(error) = result {
                report.skipped.push(format!("postgresql on {}: {error:#}", network.describe(rtts)));
            }
        }
        if redis.is_ok() {
            let result = redis_cases(&bench, network, rtts, &mut report.cases, progress);
            if let Err(error) = result {
                report.skipped.push(format!("redis on {}: {error:#}", network.describe(rtts)));
            }
        }
    }
    // The link goes down here, after every server on it has stopped; the work directory
    // after that.
    drop(networks);
    crate::interrupt::check()?;
    Ok(report)
}

/// What every case shares.
struct Bench<'a> {
    config: &'a ExternalConfig,
    work: &'a Path,
    fdatasync_p50_us: f64,
}

impl Bench<'_> {
    fn case(
        &self,
        system: &str,
        mode: &str,
        (rtt_set_ms, rtt_ms): (u32, f64),
        clients: u32,
        measured: &Measured,
        notes: String,
    ) -> ExternalCase {
        ExternalCase {
            system: system.into(),
            mode: mode.into(),
            rtt_ms,
            rtt_set_ms,
            clients,
            commits_per_s: measured.commits_per_s,
            p50_us: measured.latency_us.value_at_quantile(0.5) as f64,
            p99_us: measured.latency_us.value_at_quantile(0.99) as f64,
            fdatasync_p50_us: self.fdatasync_p50_us,
            notes,
        }
    }
}

/// The outcome of one case's load.
pub(crate) struct Measured {
    pub(crate) commits: u64,
    pub(crate) commits_per_s: f64,
    pub(crate) latency_us: Histogram<u64>,
    /// Transactions that failed (PostgreSQL) or WAITs no replica acknowledged (Redis).
    pub(crate) failures: u64,
}

pub(crate) fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).expect("valid bounds")
}

// ---------------------------------------------------------------------------------------
// Output.

/// The cases as a table, then what was skipped.
pub fn render(report: &ExternalReport) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<11} {:<25} {:>8} {:>8} {:>10} {:>9} {:>9} {:>10}",
        "system", "mode", "rtt ms", "clients", "commits/s", "p50 µs", "p99 µs", "fdsync µs"
    );
    for case in &report.cases {
        let _ = writeln!(
            out,
            "{:<11} {:<25} {:>8.3} {:>8} {:>10.0} {:>9.0} {:>9.0} {:>10.0}",
            case.system,
            case.mode,
            case.rtt_ms,
            case.clients,
            case.commits_per_s,
            case.p50_us,
            case.p99_us,
            case.fdatasync_p50_us
        );
    }
    for skipped in &report.skipped {
        let _ = writeln!(out, "skipped: {skipped}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_bounds_are_named() {
        let good = ExternalConfig {
            dir: ".".into(),
            duration: Duration::from_millis(1500),
            rtts_ms: vec![0, 10],
            clients: vec![1, 16],
        };
        good.validate().unwrap();
        assert_eq!(good.seconds(), 2);
        let message = |config: ExternalConfig| config.validate().unwrap_err().to_string();
        assert!(
            message(ExternalConfig { clients: vec![0], ..good.clone() }).starts_with("clients")
        );
        assert!(message(ExternalConfig { rtts_ms: vec![], ..good.clone() }).starts_with("rtts"));
        assert!(
            message(ExternalConfig { duration: Duration::from_millis(10), ..good })
                .starts_with("duration")
        );
    }
}
