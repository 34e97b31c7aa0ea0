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
//!    With a `standby_dir` (the standbys' data on another file system): one writer there too,
//!    and the two at once are one in each. The raw fdatasync is measured again for 1 s just
//!    before and just after each case (the servers up and idle), and the lower p50 is the
//!    case's `fdatasync_p50_us`: a disk made slower for a while by other work is compared
//!    with itself (as `bench commit` does), and a reading spoiled by that work can only make
//!    a latency target stricter;
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
//! Those are the `modes` and `lag` experiments. The others (issue 11), each at its own RTTs,
//! on fresh setups, with the RTT's limits as their fdatasync (no measurement around each
//! case), their cases marked with their `experiment`:
//!
//! - `quorum` (`quorum`): one SYNC AFFIRM standby, then two (both on side B), the commit
//!   waiting for all or for any one of them, in closed loops at each client count; and,
//!   unless told not to, PostgreSQL with two synchronous standbys (`FIRST 2`, `ANY 1`;
//!   `bench_external::quorum`);
//! - `sync_rate` (`sync_rate`): a primary alone and one with a SYNC AFFIRM standby at the
//!   same steady redo rate, the second's change of commits/s and latency against the first;
//! - `commit_mode` (`commit_mode`): one SYNC AFFIRM setup, a closed loop per `COMMITMODE`,
//!   compared with WAIT IMMEDIATE;
//! - `async_cpu` (`async_cpu`): a primary alone and one with an ASYNC standby at the same
//!   steady commit rate, the primary's CPU time per commit (from /proc) of each.
//!
//! And the experiments of redo routes (issue 33), each on a linkemu mesh of its own, every
//! member of one configuration on its own site (`members`):
//!
//! - `far_sync` (`far_sync`): SYNC AFFIRM through a far sync near the primary, against SYNC
//!   AFFIRM and ASYNC to the distant terminal standby itself, in closed loops;
//! - `fan_out` (`fan_out`): four standbys shipped to by the primary itself, or through one
//!   cascading standby, against one standby: the primary's CPU and bytes sent per commit at a
//!   steady commit rate.
//!
//! Every redoguard case also reports the primary's CPU time per commit.
//!
//! # Targets
//!
//! - SYNC AFFIRM, 1 client: commit p50 ≤ 1.15 × max(local fdatasync, RTT + remote
//!   fdatasync). The log writer sends a write to the standby before its own write and waits
//!   for both, so the two overlap; both disks are this one, so local and remote fdatasync are
//!   the same measurement.
//! - SYNC AFFIRM, several clients, through linkemu: commit p50 ≤ 1.15 × (RTT + remote
//!   fdatasync). Writes to the standby are pipelined, so a commit does not wait for the round
//!   trip of a write before its own.
//! - SYNC AFFIRM, several clients, on loopback: commits/s ≥ 0.85 × the primary alone's. The
//!   standby shares the primary's CPUs and disk here, so the report also gives the ceiling
//!   that the whole machine's CPU time per commit (from /proc/stat) leaves.
//! - SYNC AFFIRM, several clients, each RTT: commits/s ≥ PostgreSQL's with
//!   `synchronous_commit = on` and ≥ Redis's with `WAIT 1`, at the same RTT and clients.
//! - ASYNC, every client count: commits/s ≥ 0.97 × the primary alone's at the same RTT and
//!   client count (ASYNC costs at most 3 %).
//! - ASYNC at a steady rate: transport lag p99 ≤ 2 × RTT + 10 ms (while the link's bandwidth
//!   suffices: 1 Gbit/s here).
//! - SYNC AFFIRM at a steady redo rate, RTT ≤ 10 ms: commits/s ≥ 0.95 × the primary alone's
//!   (the reference: under 5 % at 10 ms and 4 MB/s).
//! - COMMITMODE NOWAIT under SYNC: p50 ≤ 0.10 × WAIT IMMEDIATE's (the reference: -90 %).
//! - ASYNC: the primary's CPU per commit ≤ 1.05 × the primary alone's.
//! - SYNC AFFIRM through a far sync: commits/s ≥ 0.9 × ASYNC direct's to the same terminal;
//!   SYNC AFFIRM direct is bounded by clients / RTT (printed).
//! - Four standbys through a cascade: the primary's CPU and bytes sent per commit ≤ 1.1 ×
//!   one standby's.
//!
//! Every process started is a child of this one, stopped by its PID (and killed if it does
//! not stop); the link's drop deletes its namespaces, and the temporary directory goes at the
//! end, also on an error or an interrupt (see `interrupt`).

mod async_cpu;
mod commit_mode;
mod fan_out;
mod far_sync;
mod limits;
mod members;
mod quorum;
mod report;
mod runs;
mod setup;
mod steady;
mod sync_rate;
#[cfg(test)]
mod tests;

use std::os::unix::fs::PermissionsExt as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::{Deserialize, Serialize};

use crate::bench_external::{self, ExternalConfig};

use limits::measure_limits;
pub use report::render;
use report::{assess, sort_cases};
use runs::Bench;
use setup::{Load, MODES, Mode};

/// The steady rates the benchmark accepts, in MB/s: values stay under 1 MB.
const RATE_MB_PER_S_MAX: f64 = 200.0;
/// The steady commit rates the CPU cases accept.
const CPU_COMMITS_PER_S_MAX: f64 = 100_000.0;

/// The experiments of a run (see the module documentation).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Experiment {
    /// No standby, ASYNC, SYNC NOAFFIRM, SYNC AFFIRM in closed loops at each RTT and client
    /// count (and PostgreSQL and Redis beside).
    #[default]
    Modes,
    /// ASYNC transport lag at steady redo rates.
    Lag,
    /// Two SYNC AFFIRM standbys, the commit waiting for both or for any one.
    Quorum,
    /// SYNC AFFIRM against no standby at a steady redo rate, as the RTT grows.
    SyncRate,
    /// COMMITMODE WAIT/NOWAIT × IMMEDIATE/BATCH under SYNC AFFIRM.
    CommitMode,
    /// The primary's CPU time per commit with and without an ASYNC standby.
    AsyncCpu,
    /// SYNC AFFIRM through a far sync against SYNC AFFIRM and ASYNC direct at a distance.
    FarSync,
    /// Four standbys direct or through a cascading standby, against one: the primary's cost.
    FanOut,
}

impl Experiment {
    pub const ALL: [Experiment; 8] = [
        Experiment::Modes,
        Experiment::Lag,
        Experiment::Quorum,
        Experiment::SyncRate,
        Experiment::CommitMode,
        Experiment::AsyncCpu,
        Experiment::FarSync,
        Experiment::FanOut,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Experiment::Modes => "modes",
            Experiment::Lag => "lag",
            Experiment::Quorum => "quorum",
            Experiment::SyncRate => "sync-rate",
            Experiment::CommitMode => "commit-mode",
            Experiment::AsyncCpu => "async-cpu",
            Experiment::FarSync => "far-sync",
            Experiment::FanOut => "fan-out",
        }
    }
}

impl std::str::FromStr for Experiment {
    type Err = String;

    fn from_str(text: &str) -> Result<Experiment, String> {
        let text = text.trim().replace('_', "-");
        Experiment::ALL.into_iter().find(|experiment| experiment.name() == text).ok_or_else(|| {
            let names: Vec<&str> = Experiment::ALL.iter().map(|e| e.name()).collect();
            format!("unknown experiment {text:?}: expected one of {}", names.join(", "))
        })
    }
}

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
    /// The experiments to run. Bounds: at least one.
    pub experiments: Vec<Experiment>,
    /// RTTs of the two-standby cases (`quorum`), in ms. Bounds: as `rtts_ms`.
    pub quorum_rtts_ms: Vec<u32>,
    /// RTTs of the SYNC-at-a-steady-rate cases (`sync-rate`), in ms. Bounds: as `rtts_ms`.
    pub sync_rate_rtts_ms: Vec<u32>,
    /// The redo rate of the `sync-rate` cases, in MB/s. Bounds: 0.01..=200.
    pub sync_rate_mb_per_s: f64,
    /// The RTT of the `commit-mode` cases, in ms. Bounds: at most 10 000.
    pub commit_mode_rtt_ms: u32,
    /// The RTT of the `async-cpu` cases, in ms. Bounds: at most 10 000.
    pub async_cpu_rtt_ms: u32,
    /// The steady commit rate of the `async-cpu` cases. Bounds: 1..=100 000.
    pub async_cpu_commits_per_s: f64,
    /// `far-sync`: the RTT from the primary to the far sync, and from the far sync and the
    /// primary to the terminal standby, in ms. Bounds: near at most far, far 1..=10 000.
    pub far_sync_near_rtt_ms: u32,
    pub far_sync_far_rtt_ms: u32,
    /// `far-sync`: the clients of its closed loops. Bounds: 1..=256.
    pub far_sync_clients: u32,
    /// `fan-out`: the RTT between each two of its sites, in ms. Bounds: at most 10 000.
    pub fan_out_rtt_ms: u32,
    /// `fan-out`: the steady commit rate. Bounds: 1..=100 000.
    pub fan_out_commits_per_s: f64,
    /// Run PostgreSQL and Redis too (`bench external`, with the `modes` experiment; with
    /// `quorum`, PostgreSQL with two synchronous standbys).
    pub external: bool,
    /// Redo transport over mutual TLS (a test CA and certificates made for the run).
    pub tls: bool,
    /// The TCP congestion control of redoguard's redo connections (the destinations'
    /// `tcp_congestion`); none: the host's.
    pub tcp_congestion: Option<String>,
    /// File system for the redoguard standbys' data, if not `dir`'s: another disk, so that the
    /// standby's fdatasync does not queue behind the primary's on one device, as it does not
    /// on a standby host. A temporary directory is made inside it and removed at the end.
    pub standby_dir: Option<PathBuf>,
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
        anyhow::ensure!(!self.experiments.is_empty(), "experiments: give at least one");
        if let Some(name) = &self.tcp_congestion {
            transport::config::check_congestion_name(name)
                .map_err(|error| anyhow::anyhow!("tcp-congestion: {error}"))?;
        }
        for (name, rtts) in
            [("quorum-rtts", &self.quorum_rtts_ms), ("sync-rate-rtts", &self.sync_rate_rtts_ms)]
        {
            anyhow::ensure!(!rtts.is_empty(), "{name}: give at least one RTT");
            if let Some(rtt) = rtts.iter().find(|&&rtt| rtt > 10_000) {
                anyhow::bail!("{name}: {rtt} ms is more than 10 000 ms");
            }
        }
        for (name, rtt) in
            [("commit-mode-rtt", self.commit_mode_rtt_ms), ("async-cpu-rtt", self.async_cpu_rtt_ms)]
        {
            anyhow::ensure!(rtt <= 10_000, "{name}: {rtt} ms is more than 10 000 ms");
        }
        anyhow::ensure!(
            (0.01..=RATE_MB_PER_S_MAX).contains(&self.sync_rate_mb_per_s),
            "sync-rate: {} MB/s is outside 0.01..={RATE_MB_PER_S_MAX}",
            self.sync_rate_mb_per_s
        );
        anyhow::ensure!(
            (1..=10_000).contains(&self.far_sync_far_rtt_ms),
            "far-sync-rtt: {} ms is outside 1..=10 000",
            self.far_sync_far_rtt_ms
        );
        anyhow::ensure!(
            self.far_sync_near_rtt_ms <= self.far_sync_far_rtt_ms,
            "far-sync-near-rtt: {} ms is more than the far RTT ({} ms): a far sync is near the primary",
            self.far_sync_near_rtt_ms,
            self.far_sync_far_rtt_ms
        );
        anyhow::ensure!(
            (1..=bench_external::CLIENTS_MAX).contains(&self.far_sync_clients),
            "far-sync-clients: {} is outside 1..={}",
            self.far_sync_clients,
            bench_external::CLIENTS_MAX
        );
        anyhow::ensure!(
            self.fan_out_rtt_ms <= 10_000,
            "fan-out-rtt: {} ms is more than 10 000 ms",
            self.fan_out_rtt_ms
        );
        anyhow::ensure!(
            (1.0..=CPU_COMMITS_PER_S_MAX).contains(&self.fan_out_commits_per_s),
            "fan-out-rate: {} commits/s is outside 1..={CPU_COMMITS_PER_S_MAX}",
            self.fan_out_commits_per_s
        );
        anyhow::ensure!(
            (1.0..=CPU_COMMITS_PER_S_MAX).contains(&self.async_cpu_commits_per_s),
            "async-cpu-rate: {} commits/s is outside 1..={CPU_COMMITS_PER_S_MAX}",
            self.async_cpu_commits_per_s
        );
        Ok(())
    }

    fn runs(&self, experiment: Experiment) -> bool {
        self.experiments.contains(&experiment)
            && (experiment != Experiment::Lag || !self.lag_rates_mb_per_s.is_empty())
    }

    /// Whether `experiment` runs at `rtt`.
    fn runs_at(&self, experiment: Experiment, rtt: u32) -> bool {
        self.runs(experiment)
            && match experiment {
                Experiment::Modes | Experiment::Lag => self.rtts_ms.contains(&rtt),
                Experiment::Quorum => self.quorum_rtts_ms.contains(&rtt),
                Experiment::SyncRate => self.sync_rate_rtts_ms.contains(&rtt),
                Experiment::CommitMode => self.commit_mode_rtt_ms == rtt,
                Experiment::AsyncCpu => self.async_cpu_rtt_ms == rtt,
                // Each on a mesh of its own, after the others.
                Experiment::FarSync | Experiment::FanOut => false,
            }
    }

    /// Every RTT some experiment runs at, in the order given.
    fn all_rtts_ms(&self) -> Vec<u32> {
        let mut all: Vec<u32> = Vec::new();
        let lists = [
            self.rtts_ms.clone(),
            self.quorum_rtts_ms.clone(),
            self.sync_rate_rtts_ms.clone(),
            vec![self.commit_mode_rtt_ms, self.async_cpu_rtt_ms],
        ];
        for rtt in lists.into_iter().flatten() {
            if !all.contains(&rtt)
                && Experiment::ALL.iter().any(|&experiment| self.runs_at(experiment, rtt))
            {
                all.push(rtt);
            }
        }
        all
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
#[derive(Serialize, Deserialize, Clone, Debug, Default)]
pub struct TransportCase {
    /// The experiment the case belongs to.
    #[serde(default)]
    pub experiment: Experiment,
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
    /// `far_sync` through the far sync: the RTT measured from the primary to the far sync
    /// (`rtt_ms` is the one to the terminal standby), in ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub near_rtt_ms: Option<f64>,
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
    /// redoguard with a `standby_dir`: the raw fdatasync p50 of the standbys' file system
    /// (the RTT's limits), in µs; without, the standbys' is `fdatasync_p50_us`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby_fdatasync_p50_us: Option<f64>,
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
    /// Standbys the primary ships to (redoguard) or has (PostgreSQL, `quorum`).
    #[serde(default)]
    pub standbys: Option<u32>,
    /// `commit_mode` cases: the `COMMITMODE` of every connection, such as `NOWAIT BATCH`.
    #[serde(default)]
    pub commit_mode: Option<String>,
    /// redoguard: the primary process's CPU time (user + system, from /proc/PID/stat, read
    /// just before and just after the load) per commit, in µs.
    #[serde(default)]
    pub cpu_us_per_commit: Option<f64>,
    /// redoguard: the primary's commits per log write during the case ("user commits" /
    /// "redo writes": how many commits a group commit carried). CPU per commit falls as it
    /// rises, so compare CPU only between cases where it is alike.
    #[serde(default)]
    pub commits_per_log_write: Option<f64>,
    /// `async_cpu`: the rounds of this mode whose sums the case reports, each as measured,
    /// in the order run (the two modes alternate: see `async_cpu`).
    #[serde(default)]
    pub cpu_rounds: Option<Vec<CpuRound>>,
    /// `async_cpu`: `cpu_us_per_commit` by thread of the primary (summed over `cpu_rounds`,
    /// by thread name as the kernel keeps it: 15 bytes), which says where the difference
    /// between the modes goes. Absent from older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_us_per_commit_by_thread: Option<std::collections::BTreeMap<String, f64>>,
    /// Steady-load cases with standbys: the redo bytes the primary sent its standbys per
    /// commit (as in the log files: whole units, padding included), and the bytes of frames
    /// it handed to their connections (destination status `bytes_sent`, `wire_bytes_sent`).
    /// Absent from older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redo_bytes_sent_per_commit: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire_bytes_per_commit: Option<f64>,
    /// `far_sync`, `fan_out`: every other member's CPU time (user + system, /proc/PID/stat,
    /// read just before and just after the load) per commit of the primary, in µs, by member
    /// name (`fs`: the far sync, `s1`: the cascading standby, …). Absent from older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_cpu_us_per_commit: Option<std::collections::BTreeMap<String, f64>>,
    /// `async_cpu`: the primary's CPU seconds (user + system) and its commits, summed over
    /// `cpu_rounds` (`cpu_us_per_commit` is their quotient).
    #[serde(default)]
    pub cpu_s: Option<f64>,
    #[serde(default)]
    pub commits: Option<u64>,
    /// What `commits_change_pct` and `p50_change_pct` compare with: `no_standby` at the same
    /// RTT (`sync_rate`, `async_cpu`), `WAIT IMMEDIATE` at the same clients (`commit_mode`).
    #[serde(default)]
    pub compared_with: Option<String>,
    /// (this case / the one compared with - 1) × 100: commits/s and commit latency p50.
    #[serde(default)]
    pub commits_change_pct: Option<f64>,
    #[serde(default)]
    pub p50_change_pct: Option<f64>,
    /// redoguard's closed-loop cases: the whole machine's CPU time in use during the load
    /// (every process and the kernel, from /proc/stat: all but idle, iowait and steal), as a
    /// share of all its CPUs' time, in %. The clients' work is in it, and the standbys' and
    /// linkemu's when they run here (loopback and linkemu).
    #[serde(default)]
    pub machine_cpu_busy_pct: Option<f64>,
    /// The same CPU time per commit, in µs: `machine_cpus` × 10^6 / it is the most commits a
    /// second the machine's CPUs could carry at that cost.
    #[serde(default)]
    pub machine_cpu_us_per_commit: Option<f64>,
    #[serde(default)]
    pub machine_cpus: Option<u32>,
    /// The target this case is held to, if any (the tables show it).
    pub target: Option<Target>,
    /// Further targets of this case (SYNC AFFIRM with several clients: against PostgreSQL
    /// and Redis), counted as `target` is.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_targets: Vec<Target>,
    /// What exactly ran, and anything that qualifies the figures.
    pub notes: String,
}

/// One round of an `async_cpu` mode.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct CpuRound {
    /// Its place in the sequence of both modes' rounds, from 1.
    pub position: u32,
    pub commits: u64,
    /// The primary's CPU seconds (user + system) during the round.
    pub cpu_s: f64,
    pub cpu_us_per_commit: f64,
    pub commits_per_log_write: f64,
    /// The mean of the primary's own log writes (write + fdatasync), in µs.
    pub log_write_avg_us: f64,
}

/// A protected commit's floor, in µs: the local fdatasync and, in parallel, the round trip
/// and the standby's fdatasync (`standby`: its own file system's, when it had one; else the
/// same as the local one).
pub fn protected_floor_us(local: f64, standby: Option<f64>, rtt_ms: f64) -> f64 {
    local.max(rtt_ms * 1000.0 + standby.unwrap_or(local))
}

impl TransportCase {
    /// The standbys' raw fdatasync p50, in µs: their own file system's (`standby_dir`), or
    /// the one the primary shares with them.
    pub fn remote_fdatasync_us(&self) -> f64 {
        self.standby_fdatasync_p50_us.unwrap_or(self.fdatasync_p50_us)
    }

    /// `protected_floor_us` of this case.
    pub fn protected_floor_us(&self) -> f64 {
        protected_floor_us(self.fdatasync_p50_us, self.standby_fdatasync_p50_us, self.rtt_ms)
    }
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
    /// disk do), 1 s (or half a case's duration): the p50 each sees. With a `standby_dir`:
    /// one writer there and one here, the p50 here.
    pub fdatasync_two_writers_p50_us: f64,
    /// With a `standby_dir`: one writer there, as long as the one here: the standbys' raw
    /// fdatasync p50, the remote fdatasync of the SYNC AFFIRM latency targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby_fdatasync_p50_us: Option<f64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default)]
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
    /// The TCP congestion control of redoguard's redo connections: the one given, or the
    /// host's default (`net.ipv4.tcp_congestion_control`), and which.
    #[serde(default)]
    pub tcp_congestion: String,
    /// Where the redoguard standbys' data was, if not in `dir`, and its file system.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby_dir: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby_filesystem: Option<String>,
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
    let standby_work = match &config.standby_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("standby-dir: cannot create {}", dir.display()))?;
            Some(
                tempfile::Builder::new()
                    .prefix("redoguard-bench-transport-standby-")
                    .tempdir_in(dir)
                    .with_context(|| {
                        format!("standby-dir: cannot create a directory in {}", dir.display())
                    })?,
            )
        }
        None => None,
    };
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
        standby_dir: config.standby_dir.as_ref().map(|dir| dir.display().to_string()),
        standby_filesystem: config.standby_dir.as_ref().map(|dir| {
            tools::iotest::filesystem_name(dir).unwrap_or_else(|_| "unknown".to_string())
        }),
        tcp_congestion: match &config.tcp_congestion {
            Some(name) => format!("{name} (given)"),
            None => std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
                .map_or_else(
                    |_| "the host's default (unknown)".to_string(),
                    |name| format!("{} (the host's default)", name.trim()),
                ),
        },
    };

    let networks = crate::network::networks_for(
        &config.all_rtts_ms(),
        "redoguard",
        &mut report.skipped,
        progress,
    );
    for (network, rtts) in &networks {
        for &rtt in rtts {
            crate::interrupt::check()?;
            network.set_rtt(rtt)?;
            let standby_work = standby_work.as_ref().map(|dir| dir.path());
            let limits =
                measure_limits(network, rtt, work.path(), standby_work, config.duration, progress)?;
            let bench = Bench { config, network, limits: &limits, work: work.path(), standby_work };
            // The steady-rate cases get a fresh ASYNC setup of their own, right after the
            // closed-loop ones.
            let mut setups: Vec<(Mode, Load)> = Vec::new();
            if config.runs_at(Experiment::Modes, rtt) {
                setups.extend(MODES.iter().map(|&mode| (mode, Load::ClosedLoop)));
            }
            if config.runs_at(Experiment::Lag, rtt) {
                setups.insert(setups.len().min(2), (Mode::Async, Load::SteadyRate));
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
            if config.runs_at(Experiment::Quorum, rtt) {
                quorum::run(&bench, &mut report, progress)?;
            }
            if config.runs_at(Experiment::SyncRate, rtt) {
                sync_rate::run(&bench, &mut report, progress)?;
            }
            if config.runs_at(Experiment::CommitMode, rtt) {
                commit_mode::run(&bench, &mut report, progress)?;
            }
            if config.runs_at(Experiment::AsyncCpu, rtt) {
                async_cpu::run(&bench, &mut report, progress)?;
            }
            report.limits.push(limits);
        }
    }
    // Every server on it has stopped: the link goes down before the other systems bring up
    // their own.
    drop(networks);
    let standby_work = standby_work.as_ref().map(|dir| dir.path());
    if config.runs(Experiment::FarSync) {
        crate::interrupt::check()?;
        far_sync::run(config, work.path(), standby_work, &mut report, progress)?;
    }
    if config.runs(Experiment::FanOut) {
        crate::interrupt::check()?;
        fan_out::run(config, work.path(), standby_work, &mut report, progress)?;
    }

    if config.external && config.runs(Experiment::Modes) {
        let external = ExternalConfig {
            dir: work.path().to_path_buf(),
            duration: config.duration,
            rtts_ms: config.rtts_ms.clone(),
            clients: config.clients.clone(),
        };
        match bench_external::run(&external, &mut *progress) {
            Ok(external) => {
                report.skipped.extend(external.skipped);
                report.cases.extend(
                    external.cases.into_iter().map(|case| from_external(case, Experiment::Modes)),
                );
            }
            Err(error) => {
                crate::interrupt::check()?;
                report.skipped.push(format!("postgresql and redis: {error:#}"));
            }
        }
    }
    if config.external && config.runs(Experiment::Quorum) {
        let external = ExternalConfig {
            dir: work.path().to_path_buf(),
            duration: config.duration,
            rtts_ms: config.quorum_rtts_ms.clone(),
            clients: config.clients.clone(),
        };
        match bench_external::quorum::run(&external, &mut *progress) {
            Ok(external) => {
                report.skipped.extend(external.skipped);
                report.cases.extend(external.cases.into_iter().map(|case| TransportCase {
                    standbys: Some(2),
                    ..from_external(case, Experiment::Quorum)
                }));
            }
            Err(error) => {
                crate::interrupt::check()?;
                report.skipped.push(format!("postgresql with two standbys: {error:#}"));
            }
        }
    }
    assess(&mut report.cases);
    sort_cases(&mut report.cases);
    let targets = report.cases.iter().flat_map(|case| case.target.iter().chain(&case.more_targets));
    report.targets_met = targets.clone().filter(|target| target.met).count() as u32;
    report.targets_missed = targets.filter(|target| !target.met).count() as u32;
    report.elapsed_s = started.elapsed().as_secs_f64();
    Ok(report)
}

/// A case of `bench external` as one of this report's.
fn from_external(case: bench_external::ExternalCase, experiment: Experiment) -> TransportCase {
    TransportCase {
        experiment,
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
        notes: case.notes,
        ..TransportCase::default()
    }
}
