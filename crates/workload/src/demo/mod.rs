//! `redoguard demo`: the main job, on an embedded default setup.
//!
//! Starts a standby and a primary (two real redoguard server processes on a throwaway data
//! directory; SYNC AFFIRM under Maximum Availability by default) and, unless the protection
//! mode rules it out, a fast-start failover observer. Drives the primary over the Redis
//! protocol with a built-in workload (many small OLTP commits, then a batch load of large
//! transactions alongside a few OLTP sessions), connected through the observer's Sentinel
//! front, and shows live progress with both lags. Then:
//!
//! - with the observer (`observed`): kills the primary with SIGKILL under load; the observer
//!   fails over, the sessions find the new primary through Sentinel and carry on; the old
//!   primary restarts and is reinstated by the observer; a switchover returns the roles; and
//!   it checks that no acknowledged commit was lost anywhere and that both end with the same
//!   data and byte-identical archived logs, reporting how long the application could not
//!   write;
//! - without (`single`): kills the primary, checks on the standby that every acknowledged
//!   commit is there, restarts the primary (crash recovery), lets the standby catch up, and
//!   compares data and archived logs.
//!
//! Counters exact, transfers balanced, every acknowledged order present: that is the check
//! (`load::verify`).

mod checks;
mod far_sync;
pub mod load;
mod members;
mod observed;
mod report;
mod single;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use serde::Serialize;

pub use checks::{
    all_data, archive_files, differing_archives, switch_and_wait_archived,
    wait_applied_all_received,
};
pub use report::{render, transport_label, write_json};

use crate::process::ServerProcess;
use load::{Shared, Target, histogram};

#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// The `redoguard` binary to run the servers (and the observer) from.
    pub binary: PathBuf,
    pub duration: Duration,
    pub oltp_clients: usize,
    pub batch_clients: usize,
    /// Where the databases live; `None`: a throwaway directory, deleted at the end.
    pub data_dir: Option<PathBuf>,
    pub keep: bool,
    /// The standby and how redo reaches it; `None`: the primary alone.
    pub standby: Option<StandbyOptions>,
    /// With a standby: a fast-start failover observer, a failover, a reinstate and a
    /// switchover (not under Maximum Protection, which fast-start failover does not run
    /// under).
    pub observer: bool,
    /// With a standby: a far sync between the primary and the standby; with the observer, its
    /// fast-start failover through the far sync (`observed`), else a failover through it run
    /// as a DBA would (`far_sync`).
    pub far_sync: bool,
    /// No passwords (and, through `StandbyOptions::tls`, no TLS): `redoguard demo --insecure`.
    pub insecure: bool,
}

/// How the demo's standby is protected.
#[derive(Debug, Clone)]
pub struct StandbyOptions {
    /// `sync` or `async`.
    pub transport: String,
    pub affirm: bool,
    /// `maximum_performance`, `maximum_availability` or `maximum_protection`.
    pub protection_mode: String,
    /// Redo transport over mutual TLS (the observer's pings too), with a test CA and
    /// certificates made in the demo's directory (`certs/`).
    pub tls: bool,
}

/// Makes a test CA and a certificate for each of `names` in `certs` (as `redoguard certs`).
fn make_certificates(certs: &Path, names: &[&str]) -> anyhow::Result<()> {
    let names: Vec<(String, Vec<String>)> =
        names.iter().map(|name| (name.to_string(), Vec::new())).collect();
    tls::certs::write_set(certs, &names).map_err(anyhow::Error::msg)?;
    Ok(())
}

/// A throwaway password for the demo's servers and its Sentinel front: 24 random hex digits.
fn throwaway_password() -> String {
    (0..12).map(|_| format!("{:02x}", rand::random::<u8>())).collect()
}

/// A member's `[auth]` section: the demo's password for the Redis protocol.
fn auth_section(password: &str) -> String {
    format!("[auth]\nrequirepass = \"{password}\"\n")
}

/// The `[tls]` section of `name`, its files in `certs`.
fn tls_section(certs: &Path, name: &str) -> String {
    format!(
        "[tls]\nca_file = \"{0}/ca.pem\"\ncert_file = \"{0}/{name}.pem\"\nkey_file = \"{0}/{name}-key.pem\"\nname = \"{name}\"\n",
        certs.display()
    )
}

/// What the demo found about its standby.
#[derive(Debug, Clone, Serialize)]
pub struct StandbyReport {
    pub transport: String,
    pub affirm: bool,
    /// Every acknowledged commit was on the standby when the primary was killed (with the
    /// observer: on the new primary once it took writes).
    pub zero_data_loss: Verification,
    /// Same keys and values on both at the end.
    pub data_equal: bool,
    pub keys_compared: u64,
    /// Every archived log of the primary is byte-identical on the standby.
    pub archives_identical: bool,
    pub archives_compared: u64,
}

/// The failover after the primary was killed.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverReport {
    /// From the last commit the old primary acknowledged to the first the new one did, as
    /// the application's sessions saw it.
    pub seconds_without_writes: f64,
    /// Acknowledged commits (orders, counter increments) missing on the new primary.
    pub acknowledged_lost: u64,
    pub target: String,
    /// Which failover: "fast-start failover" (the observer's), or one run as a DBA would.
    pub how: String,
}

/// The old primary, restarted and reinstated.
#[derive(Debug, Clone, Serialize)]
pub struct ReinstateReport {
    pub ok: bool,
    /// Transactions set aside as its divergent tail (zero after a SYNC AFFIRM failover).
    pub divergent_transactions: u64,
    /// Redo records its crash recovery replayed on restart.
    pub recovered_records: u64,
    pub seconds: f64,
    /// Who reinstated it: "the observer", or "`redoguard reinstate`".
    pub by: String,
}

impl ReinstateReport {
    /// The demo's line for it: the old primary `old`, now a standby of `new`.
    fn event(&self, old: &str, new: &str) -> String {
        format!(
            "{old} restarted (crash recovery replayed {} records) and was reinstated by {} as {new}'s standby in {:.1} s; {} divergent transactions set aside",
            self.recovered_records, self.by, self.seconds, self.divergent_transactions
        )
    }
}

/// The switchover that returns the roles.
#[derive(Debug, Clone, Serialize)]
pub struct SwitchoverReport {
    pub ok: bool,
    /// The command, from start to end.
    pub seconds: f64,
    /// As the application saw it: from the last commit the old primary acknowledged to the
    /// first the new one did.
    pub seconds_without_writes: f64,
}

/// Lags sampled every quarter of a second during the run, in milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct LagReport {
    pub samples: u64,
    pub transport_p50_ms: f64,
    pub transport_p99_ms: f64,
    pub transport_max_ms: f64,
    pub apply_p50_ms: f64,
    pub apply_p99_ms: f64,
    pub apply_max_ms: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    pub name: String,
    pub seconds: f64,
    pub commits: u64,
    pub commits_per_s: f64,
    pub redo_bytes: u64,
    pub redo_mb_per_s: f64,
    pub commit_p50_us: u64,
    pub commit_p99_us: u64,
    pub commit_max_us: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct WaitReport {
    pub name: String,
    pub count: u64,
    pub total_us: u64,
    pub avg_us: f64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl WaitReport {
    fn of(event: &stats::WaitEventSnapshot) -> WaitReport {
        WaitReport {
            name: event.name.clone(),
            count: event.count,
            total_us: event.total_us,
            avg_us: event.avg_us,
            p99_us: event.p99_us,
            max_us: event.max_us,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    /// The server was killed with SIGKILL under load, then restarted.
    pub crashed_and_restarted: bool,
    /// Redo records crash recovery replayed on restart.
    pub recovered_records: u64,
    pub counters: u64,
    /// Each counter holds its acknowledged increments (and, once every session stopped, at
    /// most those plus the ones whose reply was lost in a failover or switchover).
    pub counters_exact: bool,
    /// Increments whose outcome the sessions could not know.
    pub counters_uncertain: u64,
    /// Acknowledged increments missing.
    pub counters_lost: u64,
    pub balances_sum: i64,
    /// Checked while sessions still wrote: counters at least their acknowledged increments,
    /// and the balances not summed (transfers went on committing between the reads).
    pub while_writing: bool,
    pub orders_checked: u64,
    pub orders_missing: u64,
    /// Acknowledged transactions of an HSET, an RPUSH and a ZADD checked, and those not all
    /// present (the hash's field, the list's element, the member's score).
    pub typed_checked: u64,
    pub typed_missing: u64,
    pub passed: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    pub duration_s: f64,
    pub commits: u64,
    pub commits_per_s: f64,
    pub redo_bytes: u64,
    pub redo_mb_per_s: f64,
    pub commit_p50_us: u64,
    pub commit_p99_us: u64,
    pub commit_max_us: u64,
    pub phases: Vec<PhaseReport>,
    pub waits: Vec<WaitReport>,
    /// Sessions held up at log switches, one per reason (`stats::LOG_FILE_SWITCH_WAITS`),
    /// whether or not it made the top waits.
    pub switch_waits: Vec<WaitReport>,
    pub stats: BTreeMap<String, u64>,
    pub log_switches: u64,
    pub archived_logs: u64,
    /// The primary at the end: every acknowledged commit there (after its crash and
    /// restart: crash recovery, and with the observer a failover and a switchover back).
    pub verification: Verification,
    pub protection_mode: String,
    pub standby: Option<StandbyReport>,
    pub lag: Option<LagReport>,
    pub failover: Option<FailoverReport>,
    pub reinstate: Option<ReinstateReport>,
    pub switchover: Option<SwitchoverReport>,
    pub data_dir: String,
    pub data_dir_kept: bool,
}

/// One line of live progress, or an event between them.
#[derive(Debug, Clone)]
pub struct Progress {
    pub elapsed_s: f64,
    pub phase: &'static str,
    pub commits_per_s: f64,
    pub redo_mb_per_s: f64,
    pub commit_p50_us: u64,
    pub commit_p99_us: u64,
    /// The wait events that took the most time in the last interval: name, milliseconds.
    pub top_waits: Vec<(String, f64)>,
    /// Sessions held up at log switches in the last interval, by reason: name, milliseconds
    /// (reasons not waited for are left out).
    pub switch_waits: Vec<(String, f64)>,
    /// The standby's lags now (transport, apply), in milliseconds.
    pub lags_ms: Option<(f64, f64)>,
    /// Something that happened (a failover, say): printed instead of the figures.
    pub event: Option<String>,
}

impl Progress {
    fn event(elapsed_s: f64, text: String) -> Progress {
        Progress {
            elapsed_s,
            phase: "",
            commits_per_s: 0.0,
            redo_mb_per_s: 0.0,
            commit_p50_us: 0,
            commit_p99_us: 0,
            top_waits: Vec::new(),
            switch_waits: Vec::new(),
            lags_ms: None,
            event: Some(text),
        }
    }
}

/// The demo's online log size (`DEMO_CONFIG`): small on purpose, see [`log_size_note`].
pub const DEMO_LOG_FILE_SIZE: u64 = 16 << 20;
/// The redo its phases generate on the development machine, MB/s ("redo size"): their means,
/// rounded, as `redoguard bench apply` measured them with the demo's own workloads
/// (docs/bench/apply.txt).
pub const DEMO_REDO_MB_PER_S: [(&str, f64); 2] = [("OLTP", 1.0), ("batch", 50.0)];
/// How long one of its checkpoints takes in the batch phase on the development machine,
/// seconds: the p99 of "db file parallel write" over demo runs. 0.6–1.4 s on 2026-11-28;
/// 1.07–1.32 s on 2026-11-29, since a checkpoint's pages go to the disk as they are written
/// (`redo::storage::Writeback`), which made it longer and the commits' slowest shorter.
pub const DEMO_CHECKPOINT_S: f64 = 1.2;

/// The demo's online log groups (a standby in the single-role form gets one more): what
/// `redoguard advise` computes for its fastest phase's switches and its checkpoints, so that a
/// log switch does not wait for a checkpoint ("log file switch (checkpoint incomplete)").
pub fn demo_groups() -> u32 {
    let fastest = DEMO_REDO_MB_PER_S.iter().map(|(_, mb_per_s)| *mb_per_s).fold(0.0, f64::max);
    let switch_s = tools::advise::logs::switch_interval_s(DEMO_LOG_FILE_SIZE, fastest * 1e6);
    tools::advise::logs::groups_for(2.0 * DEMO_CHECKPOINT_S, switch_s)
}

/// Why the demo's logs are as small as they are, with the switch interval they give at the
/// redo it generates: the line it prints first.
pub fn log_size_note() -> String {
    let switches: Vec<String> = DEMO_REDO_MB_PER_S
        .iter()
        .map(|(phase, mb_per_s)| {
            format!(
                "{} in its {phase} phase (about {mb_per_s} MB/s of redo)",
                tools::advise::logs::format_seconds(tools::advise::logs::switch_interval_s(
                    DEMO_LOG_FILE_SIZE,
                    mb_per_s * 1e6
                ))
            )
        })
        .collect();
    let fastest = DEMO_REDO_MB_PER_S.iter().map(|(_, mb_per_s)| *mb_per_s).fold(0.0, f64::max);
    let switch_s = tools::advise::logs::switch_interval_s(DEMO_LOG_FILE_SIZE, fastest * 1e6);
    format!(
        "online logs of {}: a log switch every {} here; small on purpose, so that switches, archiving and checkpoints all happen within a short demo. {} groups, so that a switch never waits for a checkpoint: one takes up to {} here, and the one that frees a group may first wait for the one running, so 2 + ⌈2 × {} / {}⌉, as `redoguard advise` counts. In production, size them for a switch every 15-20 minutes at the peak: `redoguard advise --from-status http://HOST:PORT/status`",
        units::format_bytes(DEMO_LOG_FILE_SIZE),
        switches.join(", every "),
        demo_groups(),
        tools::advise::logs::format_seconds(DEMO_CHECKPOINT_S),
        tools::advise::logs::format_seconds(DEMO_CHECKPOINT_S),
        tools::advise::logs::format_seconds(switch_s),
    )
}

/// The servers' configuration for the demo: small logs so that log switches, archiving and
/// checkpoints all happen within a few seconds.
const DEMO_CONFIG: &str = r#"# Written by `redoguard demo`.
[redo]
log_file_size = "16MiB"
groups = GROUPS
[db]
checkpoint_interval = "5s"
"#;

/// Lag samples in microseconds.
struct Lags {
    transport: Histogram<u64>,
    apply: Histogram<u64>,
}

impl Lags {
    fn new() -> Lags {
        Lags { transport: histogram(), apply: histogram() }
    }

    fn record(&mut self, transport_s: f64, apply_s: f64) {
        let _ = self.transport.record((transport_s * 1e6) as u64);
        let _ = self.apply.record((apply_s * 1e6) as u64);
    }

    fn report(&self) -> LagReport {
        let ms = |histogram: &Histogram<u64>, quantile: f64| {
            if histogram.is_empty() {
                0.0
            } else {
                histogram.value_at_quantile(quantile) as f64 / 1000.0
            }
        };
        LagReport {
            samples: self.transport.len(),
            transport_p50_ms: ms(&self.transport, 0.5),
            transport_p99_ms: ms(&self.transport, 0.99),
            transport_max_ms: self.transport.max() as f64 / 1000.0,
            apply_p50_ms: ms(&self.apply, 0.5),
            apply_p99_ms: ms(&self.apply, 0.99),
            apply_max_ms: self.apply.max() as f64 / 1000.0,
        }
    }
}

/// The standby's lags as the primary's and the standby's status say.
fn current_lags(
    primary: &admin::ServerStatus,
    standby: Option<&ServerProcess>,
) -> Option<(f64, f64)> {
    let standby = standby?.status().ok()?;
    let transport = primary
        .replication
        .destinations
        .first()
        .map_or(0.0, |destination| destination.transport_lag_s);
    let apply = standby.replication.standby.as_ref().map_or(0.0, |status| status.apply_lag_s);
    Some((transport, apply))
}

pub async fn run(
    config: DemoConfig,
    progress: impl FnMut(&Progress),
) -> anyhow::Result<DemoReport> {
    let throwaway = match &config.data_dir {
        Some(_) => None,
        None => Some(
            tempfile::Builder::new()
                .prefix("redoguard-demo-")
                .tempdir()
                .context("creating a throwaway data directory")?,
        ),
    };
    let root = config
        .data_dir
        .clone()
        .unwrap_or_else(|| throwaway.as_ref().expect("throwaway").path().to_path_buf());
    // Its servers run secure, as a deployment's should: passwords here (and TLS for redo
    // unless --no-tls); the sessions and checks authenticate.
    crate::client::authenticate_with((!config.insecure).then(throwaway_password));
    let result = match &config.standby {
        Some(options) if config.observer => {
            observed::run(&config, options, config.far_sync, &root, progress).await
        }
        Some(options) if config.far_sync => far_sync::run(&config, options, &root, progress).await,
        _ => single::run(&config, &root, progress).await,
    };
    // A throwaway directory goes unless asked to keep it, or something went wrong: then
    // its logs and data are what one needs to see why.
    let keep =
        throwaway.is_none() || config.keep || !matches!(&result, Ok(report) if report.passed());
    if keep && let Some(throwaway) = throwaway {
        let _ = throwaway.keep();
    }
    match result {
        Ok(mut report) => {
            report.data_dir_kept = keep;
            Ok(report)
        }
        Err(error) => {
            Err(error.context(format!("the demo's files are kept in {}", root.display())))
        }
    }
}

/// What the load phase leaves for the checks after it.
struct Loaded {
    shared: Arc<Shared>,
    phases: Vec<PhaseReport>,
    lags: Lags,
    /// The OLTP sessions, still running (stopped by the caller).
    oltp: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
    started: Instant,
}

/// Runs the workload against `target` for `config.duration` (OLTP, then a batch load beside a
/// few OLTP sessions), printing a line every second from the primary's status; stops the batch
/// sessions at the end and hands back the OLTP ones still running.
async fn drive(
    config: &DemoConfig,
    target: &Target,
    primary: &ServerProcess,
    standby: Option<&ServerProcess>,
    progress: &mut impl FnMut(&Progress),
) -> anyhow::Result<Loaded> {
    let shared = Arc::new(Shared::new());
    let mut lags = Lags::new();
    let started = Instant::now();
    let oltp_until = config.duration.mul_f64(0.6);
    let spawn_oltp = |count: usize, shared: &Arc<Shared>| {
        (0..count)
            .map(|client| {
                let (shared, target) = (shared.clone(), target.clone());
                tokio::spawn(async move { load::oltp_client(target, client, shared).await })
            })
            .collect::<Vec<_>>()
    };
    let mut tasks = spawn_oltp(config.oltp_clients, &shared);
    let mut phases = Vec::new();
    let mut status = primary.status()?;
    let mut phase_start =
        (Instant::now(), shared.commits.load(Ordering::Relaxed), status.metrics.stat("redo size"));
    let mut phase_name = "oltp";
    let mut batch_tasks = Vec::new();
    let mut previous = status.clone();
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    tick.tick().await;
    let mut last_commits = 0;
    let mut last_line = Instant::now();
    let mut lags_now = None;
    while started.elapsed() < config.duration {
        tick.tick().await;
        if phase_name == "oltp" && started.elapsed() >= oltp_until {
            phases.push(close_phase(phase_name, &shared, phase_start, &primary.status()?));
            phase_name = "batch";
            // The batch load runs beside a few OLTP sessions, whose latency shows its effect.
            shared.stop_oltp.store(true, Ordering::Release);
            for task in tasks.drain(..) {
                task.await??;
            }
            shared.stop_oltp.store(false, Ordering::Release);
            tasks = spawn_oltp(config.oltp_clients.min(4), &shared);
            for client in 0..config.batch_clients {
                let (shared, target) = (shared.clone(), target.clone());
                batch_tasks.push(tokio::spawn(async move {
                    load::batch_client(target, client, shared).await
                }));
            }
            let status = primary.status()?;
            phase_start = (
                Instant::now(),
                shared.commits.load(Ordering::Relaxed),
                status.metrics.stat("redo size"),
            );
        }
        status = primary.status()?;
        if let Some((transport_s, apply_s)) = current_lags(&status, standby) {
            lags.record(transport_s, apply_s);
            lags_now = Some((transport_s * 1000.0, apply_s * 1000.0));
        }
        if last_line.elapsed() < Duration::from_millis(990) {
            continue;
        }
        let seconds = last_line.elapsed().as_secs_f64();
        last_line = Instant::now();
        let commits = shared.commits.load(Ordering::Relaxed);
        let interval = std::mem::replace(&mut *shared.interval.lock(), histogram());
        progress(&Progress {
            elapsed_s: started.elapsed().as_secs_f64(),
            phase: phase_name,
            commits_per_s: (commits - last_commits) as f64 / seconds,
            redo_mb_per_s: status
                .metrics
                .stat("redo size")
                .saturating_sub(previous.metrics.stat("redo size"))
                as f64
                / 1e6
                / seconds,
            commit_p50_us: if interval.is_empty() { 0 } else { interval.value_at_quantile(0.5) },
            commit_p99_us: if interval.is_empty() { 0 } else { interval.value_at_quantile(0.99) },
            top_waits: top_wait_deltas(&previous, &status, 2),
            switch_waits: wait_deltas(&previous, &status, |name| {
                stats::LOG_FILE_SWITCH_WAITS.contains(&name)
            }),
            lags_ms: lags_now,
            event: None,
        });
        last_commits = commits;
        previous = status.clone();
    }
    // The batch ends; the OLTP sessions go on for whatever comes next.
    shared.stop_batch.store(true, Ordering::Release);
    for task in batch_tasks {
        task.await??;
    }
    phases.push(close_phase(phase_name, &shared, phase_start, &primary.status()?));
    Ok(Loaded { shared, phases, lags, oltp: tasks, started })
}

impl Loaded {
    /// Stops the OLTP sessions, each finishing its current commit.
    async fn stop(&mut self) -> anyhow::Result<()> {
        self.shared.stop_oltp.store(true, Ordering::Release);
        for task in self.oltp.drain(..) {
            task.await??;
        }
        Ok(())
    }
}

/// The figures of the whole run, from the primary's status at the end of the load.
fn summary(
    loaded: &Loaded,
    elapsed: f64,
    end_status: &admin::ServerStatus,
    root: &Path,
) -> (DemoReportParts, BTreeMap<String, u64>) {
    let total = loaded.shared.total.lock();
    let commits = loaded.shared.commits.load(Ordering::Relaxed);
    let redo_bytes = end_status.metrics.stat("redo size");
    let waits = end_status.metrics.waits.iter().take(8).map(WaitReport::of).collect();
    let switch_waits = end_status.metrics.log_switch_waits().iter().map(WaitReport::of).collect();
    let stats = [
        "redo size",
        "redo entries",
        "redo writes",
        "redo synch writes",
        "redo wastage",
        "redo log switches",
        "archived logs",
        "checkpoints completed",
        "user commits",
    ]
    .iter()
    .map(|name| (name.to_string(), end_status.metrics.stat(name)))
    .collect();
    (
        DemoReportParts {
            duration_s: elapsed,
            commits,
            commits_per_s: commits as f64 / elapsed,
            redo_bytes,
            redo_mb_per_s: redo_bytes as f64 / 1e6 / elapsed,
            commit_p50_us: total.value_at_quantile(0.5),
            commit_p99_us: total.value_at_quantile(0.99),
            commit_max_us: total.max(),
            phases: loaded.phases.clone(),
            waits,
            switch_waits,
            log_switches: end_status.metrics.stat("redo log switches"),
            archived_logs: end_status.archive.archived_logs,
            data_dir: root.display().to_string(),
        },
        stats,
    )
}

/// The parts of a report every flow fills the same way.
struct DemoReportParts {
    duration_s: f64,
    commits: u64,
    commits_per_s: f64,
    redo_bytes: u64,
    redo_mb_per_s: f64,
    commit_p50_us: u64,
    commit_p99_us: u64,
    commit_max_us: u64,
    phases: Vec<PhaseReport>,
    waits: Vec<WaitReport>,
    switch_waits: Vec<WaitReport>,
    log_switches: u64,
    archived_logs: u64,
    data_dir: String,
}

impl DemoReportParts {
    #[allow(clippy::too_many_arguments)]
    fn into_report(
        self,
        stats: BTreeMap<String, u64>,
        verification: Verification,
        protection_mode: String,
        standby: Option<StandbyReport>,
        lag: Option<LagReport>,
        failover: Option<FailoverReport>,
        reinstate: Option<ReinstateReport>,
        switchover: Option<SwitchoverReport>,
    ) -> DemoReport {
        DemoReport {
            duration_s: self.duration_s,
            commits: self.commits,
            commits_per_s: self.commits_per_s,
            redo_bytes: self.redo_bytes,
            redo_mb_per_s: self.redo_mb_per_s,
            commit_p50_us: self.commit_p50_us,
            commit_p99_us: self.commit_p99_us,
            commit_max_us: self.commit_max_us,
            phases: self.phases,
            waits: self.waits,
            switch_waits: self.switch_waits,
            stats,
            log_switches: self.log_switches,
            archived_logs: self.archived_logs,
            verification,
            protection_mode,
            standby,
            lag,
            failover,
            reinstate,
            switchover,
            data_dir: self.data_dir,
            data_dir_kept: true,
        }
    }
}

/// Once the standby has caught up with the primary: same keys and values, and the same bytes
/// in every archived log.
async fn compare(
    primary: &ServerProcess,
    standby: &ServerProcess,
    primary_dir: &Path,
    standby_dir: &Path,
    options: &StandbyOptions,
    zero_data_loss: Verification,
) -> anyhow::Result<StandbyReport> {
    let archived = switch_and_wait_archived(
        primary.admin_addr,
        standby.admin_addr,
        &primary_dir.join("archive"),
        &standby_dir.join("archive"),
        Duration::from_secs(60),
    )
    .await?;
    let differing = differing_archives(&archived, &standby_dir.join("archive"))?;
    let ours = all_data(primary.resp_addr).await?;
    let theirs = all_data(standby.resp_addr).await?;
    Ok(StandbyReport {
        transport: options.transport.clone(),
        affirm: options.affirm,
        zero_data_loss,
        data_equal: ours == theirs,
        keys_compared: ours.len() as u64,
        archives_identical: differing.is_empty(),
        archives_compared: archived.len() as u64,
    })
}

fn close_phase(
    name: &str,
    shared: &Shared,
    (started, commits, redo): (Instant, u64, u64),
    status: &admin::ServerStatus,
) -> PhaseReport {
    let seconds = started.elapsed().as_secs_f64();
    let commits = shared.commits.load(Ordering::Relaxed) - commits;
    let redo_bytes = status.metrics.stat("redo size").saturating_sub(redo);
    let histogram = std::mem::replace(&mut *shared.phase.lock(), histogram());
    let quantile = |q: f64| if histogram.is_empty() { 0 } else { histogram.value_at_quantile(q) };
    PhaseReport {
        name: name.to_string(),
        seconds,
        commits,
        commits_per_s: commits as f64 / seconds,
        redo_bytes,
        redo_mb_per_s: redo_bytes as f64 / 1e6 / seconds,
        commit_p50_us: quantile(0.5),
        commit_p99_us: quantile(0.99),
        commit_max_us: histogram.max(),
    }
}

fn top_wait_deltas(
    before: &admin::ServerStatus,
    after: &admin::ServerStatus,
    count: usize,
) -> Vec<(String, f64)> {
    let mut deltas = wait_deltas(before, after, |_| true);
    deltas.sort_by(|a, b| b.1.total_cmp(&a.1));
    deltas.truncate(count);
    deltas
}

/// Milliseconds waited between two statuses on each event `pick` chooses (none left out
/// that waited).
fn wait_deltas(
    before: &admin::ServerStatus,
    after: &admin::ServerStatus,
    pick: impl Fn(&str) -> bool,
) -> Vec<(String, f64)> {
    after
        .metrics
        .waits
        .iter()
        .filter(|event| pick(&event.name))
        .map(|event| {
            let previous = before.metrics.wait(&event.name).map_or(0, |previous| previous.total_us);
            (event.name.clone(), event.total_us.saturating_sub(previous) as f64 / 1000.0)
        })
        .filter(|(_, ms)| *ms > 0.0)
        .collect()
}

/// A free port on loopback (for the members' fixed addresses in the configuration form).
fn free_port() -> anyhow::Result<u16> {
    crate::ports::free_port().context("finding a free port")
}

/// `addr` as `127.0.0.1:port`.
fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

#[cfg(test)]
mod tests;
