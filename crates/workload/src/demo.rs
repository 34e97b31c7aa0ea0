//! `redoguard demo`: the main job, on an embedded default setup.
//!
//! Starts a standby and a primary (two real redoguard server processes on a throwaway data
//! directory; SYNC AFFIRM under Maximum Availability by default), drives the primary over the
//! Redis protocol with a built-in workload (many small OLTP commits, then a batch load of large
//! transactions alongside a few OLTP sessions), and shows live progress with both lags. Then it
//! kills the primary with SIGKILL and checks on the standby that every acknowledged commit is
//! there (counters exact, transfers balanced, every acknowledged order present), restarts the
//! primary (crash recovery), lets the standby catch up, and proves that the standby's data
//! equals the primary's and that their archived logs are byte-identical.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use resp::Frame;
use serde::Serialize;

use crate::client::{Client, integer};
use crate::process::{ServerProcess, status_at};

#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// The `redoguard` binary to run the server from.
    pub binary: PathBuf,
    pub duration: Duration,
    pub oltp_clients: usize,
    pub batch_clients: usize,
    /// Where the databases live; `None`: a throwaway directory, deleted at the end.
    pub data_dir: Option<PathBuf>,
    pub keep: bool,
    /// The standby and how redo reaches it; `None`: the primary alone.
    pub standby: Option<StandbyOptions>,
}

/// How the demo's standby is protected.
#[derive(Debug, Clone)]
pub struct StandbyOptions {
    /// `sync` or `async`.
    pub transport: String,
    pub affirm: bool,
    /// `maximum_performance`, `maximum_availability` or `maximum_protection`.
    pub protection_mode: String,
    /// Redo transport over mutual TLS, with a test CA and certificates made in the demo's
    /// directory (`certs/`).
    pub tls: bool,
}

/// The `[tls]` section of `name` (`primary` or `standby`), its files in `certs`.
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
    /// Every acknowledged commit was on the standby when the primary was killed.
    pub zero_data_loss: Verification,
    /// Same keys and values on both, once the standby caught up with the restarted primary.
    pub data_equal: bool,
    pub keys_compared: u64,
    /// Every archived log of the primary is byte-identical on the standby.
    pub archives_identical: bool,
    pub archives_compared: u64,
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
}

#[derive(Debug, Clone, Serialize)]
pub struct Verification {
    /// The server was killed with SIGKILL under load, then restarted.
    pub crashed_and_restarted: bool,
    /// Redo records crash recovery replayed on restart.
    pub recovered_records: u64,
    pub counters: u64,
    pub counters_exact: bool,
    pub balances_sum: i64,
    pub orders_checked: u64,
    pub orders_missing: u64,
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
    pub stats: BTreeMap<String, u64>,
    pub log_switches: u64,
    pub archived_logs: u64,
    /// The primary after its crash and restart (crash recovery).
    pub verification: Verification,
    pub protection_mode: String,
    pub standby: Option<StandbyReport>,
    pub lag: Option<LagReport>,
    pub data_dir: String,
    pub data_dir_kept: bool,
}

/// One line of live progress.
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
    /// The standby's lags now (transport, apply), in milliseconds.
    pub lags_ms: Option<(f64, f64)>,
}

const COUNTERS: usize = 8;
const ACCOUNTS: usize = 16;

/// What all clients share: commit counts and latencies, and what was acknowledged.
struct Shared {
    commits: AtomicU64,
    interval: Mutex<Histogram<u64>>,
    phase: Mutex<Histogram<u64>>,
    total: Mutex<Histogram<u64>>,
    counters: [AtomicU64; COUNTERS],
    stop_oltp: AtomicBool,
    stop_batch: AtomicBool,
    orders: Mutex<Vec<String>>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds")
}

impl Shared {
    fn record(&self, started: Instant) {
        let us = (started.elapsed().as_micros() as u64).max(1);
        self.commits.fetch_add(1, Ordering::Relaxed);
        let _ = self.interval.lock().record(us);
        let _ = self.phase.lock().record(us);
        let _ = self.total.lock().record(us);
    }
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

fn primary_config(standby: Option<(&StandbyOptions, std::net::SocketAddr)>) -> String {
    let mut text = DEMO_CONFIG.replace("GROUPS", "3");
    if let Some((options, redo)) = standby {
        text.push_str(&format!(
            "[replication]\nrole = \"primary\"\nprotection_mode = \"{}\"\n[[replication.destinations]]\nname = \"standby\"\naddress = \"{redo}\"\ntransport = \"{}\"\naffirm = {}\nnet_timeout = \"5s\"\nreopen = \"500ms\"\n",
            options.protection_mode, options.transport, options.affirm
        ));
    }
    text
}

fn standby_config() -> String {
    // One more standby log group than the primary has.
    DEMO_CONFIG.replace("GROUPS", "4")
        + "[replication]\nrole = \"standby\"\n[replication.standby]\nlisten = \"127.0.0.1:0\"\n"
}

/// Lag samples in microseconds.
struct Lags {
    transport: Histogram<u64>,
    apply: Histogram<u64>,
}

impl Lags {
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
    primary: &server::ServerStatus,
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
    let result = run_in(&config, &root, progress).await;
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

async fn run_in(
    config: &DemoConfig,
    root: &Path,
    mut progress: impl FnMut(&Progress),
) -> anyhow::Result<DemoReport> {
    let primary_dir = root.join("primary");
    let standby_dir = root.join("standby");
    std::fs::create_dir_all(&primary_dir)?;
    let certs = root.join("certs");
    let tls = config.standby.as_ref().is_some_and(|standby| standby.tls);
    if tls {
        tls::certs::write_set(
            &certs,
            &[("primary".into(), Vec::new()), ("standby".into(), Vec::new())],
        )
        .map_err(anyhow::Error::msg)?;
    }
    let with_tls = |text: String, name: &str| {
        if tls { text + &tls_section(&certs, name) } else { text }
    };
    // The standby first: the primary names its redo listener.
    let mut standby = match &config.standby {
        Some(_) => {
            std::fs::create_dir_all(&standby_dir)?;
            std::fs::write(standby_dir.join("demo.toml"), with_tls(standby_config(), "standby"))?;
            let args = [
                "--config".to_string(),
                standby_dir.join("demo.toml").display().to_string(),
                "--data-dir".to_string(),
                standby_dir.display().to_string(),
            ];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Some(ServerProcess::start(&config.binary, &args, &standby_dir.join("server.log"))?)
        }
        None => None,
    };
    let redo_addr = standby.as_ref().and_then(|standby| standby.redo_addr);
    std::fs::write(
        primary_dir.join("demo.toml"),
        with_tls(primary_config(config.standby.as_ref().zip(redo_addr)), "primary"),
    )?;
    let primary_args_owned = [
        "--config".to_string(),
        primary_dir.join("demo.toml").display().to_string(),
        "--data-dir".to_string(),
        primary_dir.display().to_string(),
    ];
    let primary_args: Vec<&str> = primary_args_owned.iter().map(String::as_str).collect();
    let primary_log = primary_dir.join("server.log");
    let mut server = ServerProcess::start(&config.binary, &primary_args, &primary_log)?;
    if let Some(options) = &config.standby {
        // Start the load once the standby protects the primary as configured.
        let wanted = if options.transport == "sync" {
            transport::Phase::Synchronized
        } else {
            transport::Phase::Streaming
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = server.status()?;
            if status
                .replication
                .destinations
                .first()
                .is_some_and(|destination| destination.phase == wanted)
            {
                break;
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "the standby did not reach {wanted:?} within 30 s; see {}",
                standby_dir.join("server.log").display()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let addr = server.resp_addr;
    let shared = Arc::new(Shared {
        commits: AtomicU64::new(0),
        interval: Mutex::new(histogram()),
        phase: Mutex::new(histogram()),
        total: Mutex::new(histogram()),
        counters: Default::default(),
        stop_oltp: AtomicBool::new(false),
        stop_batch: AtomicBool::new(false),
        orders: Mutex::new(Vec::new()),
    });
    let mut lags = Lags { transport: histogram(), apply: histogram() };

    let started = Instant::now();
    let oltp_until = config.duration.mul_f64(0.6);
    let mut tasks = Vec::new();
    for client in 0..config.oltp_clients {
        let shared = shared.clone();
        tasks.push(tokio::spawn(async move { oltp_client(addr, client, shared).await }));
    }
    let mut phases = Vec::new();
    let mut status = server.status()?;
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
            phases.push(close_phase(phase_name, &shared, phase_start, &server.status()?));
            phase_name = "batch";
            // The batch load runs beside a few OLTP sessions, whose latency shows its effect.
            shared.stop_oltp.store(true, Ordering::Release);
            for task in tasks.drain(..) {
                task.await??;
            }
            shared.stop_oltp.store(false, Ordering::Release);
            for client in 0..config.oltp_clients.min(4) {
                let shared = shared.clone();
                tasks.push(tokio::spawn(async move { oltp_client(addr, client, shared).await }));
            }
            for client in 0..config.batch_clients {
                let shared = shared.clone();
                batch_tasks
                    .push(tokio::spawn(async move { batch_client(addr, client, shared).await }));
            }
            let status = server.status()?;
            phase_start = (
                Instant::now(),
                shared.commits.load(Ordering::Relaxed),
                status.metrics.stat("redo size"),
            );
        }
        status = server.status()?;
        if let Some((transport_s, apply_s)) = current_lags(&status, standby.as_ref()) {
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
            lags_ms: lags_now,
        });
        last_commits = commits;
        previous = status.clone();
    }
    // Stop the load: first the batch, then OLTP, each client finishing its current commit.
    shared.stop_batch.store(true, Ordering::Release);
    shared.stop_oltp.store(true, Ordering::Release);
    for task in batch_tasks.into_iter().chain(tasks) {
        task.await??;
    }
    let end_status = server.status()?;
    phases.push(close_phase(phase_name, &shared, phase_start, &end_status));
    let elapsed = started.elapsed().as_secs_f64();

    // A crash of the primary: SIGKILL. What the standby has is what a failover would have.
    server.kill()?;
    let zero_data_loss = match &standby {
        Some(standby) => {
            // A failover first applies all the redo the standby received.
            wait_applied_all_received(standby.admin_addr, Duration::from_secs(60)).await?;
            Some(verify(standby.resp_addr, &shared, 0).await?)
        }
        None => None,
    };
    // The primary restarts (crash recovery) and its standby catches up.
    let mut server = ServerProcess::start(&config.binary, &primary_args, &primary_log)?;
    let recovered = server.status()?.database.recovered_records;
    let verification = verify(server.resp_addr, &shared, recovered).await?;
    let standby_report = match (&mut standby, &config.standby) {
        (Some(standby), Some(options)) => Some(
            compare(
                &server,
                standby,
                &primary_dir,
                &standby_dir,
                options,
                zero_data_loss.expect("verified"),
            )
            .await?,
        ),
        _ => None,
    };
    server.stop()?;
    if let Some(standby) = &mut standby {
        standby.stop()?;
    }

    let total = shared.total.lock();
    let commits = shared.commits.load(Ordering::Relaxed);
    let redo_bytes = end_status.metrics.stat("redo size");
    let waits = end_status
        .metrics
        .waits
        .iter()
        .take(8)
        .map(|event| WaitReport {
            name: event.name.clone(),
            count: event.count,
            total_us: event.total_us,
            avg_us: event.avg_us,
            p99_us: event.p99_us,
        })
        .collect();
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
    let report = DemoReport {
        duration_s: elapsed,
        commits,
        commits_per_s: commits as f64 / elapsed,
        redo_bytes,
        redo_mb_per_s: redo_bytes as f64 / 1e6 / elapsed,
        commit_p50_us: total.value_at_quantile(0.5),
        commit_p99_us: total.value_at_quantile(0.99),
        commit_max_us: total.max(),
        phases,
        waits,
        stats,
        log_switches: end_status.metrics.stat("redo log switches"),
        archived_logs: end_status.archive.archived_logs,
        verification,
        protection_mode: config
            .standby
            .as_ref()
            .map_or("none (no standby)".to_string(), |options| options.protection_mode.clone()),
        lag: standby_report.as_ref().map(|_| lags.report()),
        standby: standby_report,
        data_dir: root.display().to_string(),
        data_dir_kept: true,
    };
    Ok(report)
}

/// Once the standby has caught up with the restarted primary: same keys and values, and the
/// same bytes in every archived log.
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

/// Waits until the standby whose admin API is at `standby_admin` has applied all the redo it
/// received: what a failover does first, and what makes every acknowledged commit readable.
pub async fn wait_applied_all_received(
    standby_admin: SocketAddr,
    limit: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        let status = status_at(standby_admin)?;
        let standby_status =
            status.replication.standby.as_ref().context("the standby reports no standby status")?;
        if status.database.applied_scn >= standby_status.received_scn {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the standby did not apply the redo it received within {limit:?} (applied {}, received {})",
            status.database.applied_scn,
            standby_status.received_scn
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Closes the primary's current log (POST /logswitch) so that its last redo is archived too,
/// then waits until the standby has applied everything durable on the primary and holds every
/// log the primary archived in `primary_archive` in `standby_archive`. Returns the primary's
/// archived logs, oldest first.
pub async fn switch_and_wait_archived(
    primary_admin: SocketAddr,
    standby_admin: SocketAddr,
    primary_archive: &Path,
    standby_archive: &Path,
    limit: Duration,
) -> anyhow::Result<Vec<PathBuf>> {
    server::status::http_post(&primary_admin.to_string(), "/logswitch", Duration::from_secs(60))?;
    let deadline = Instant::now() + limit;
    loop {
        let status = status_at(primary_admin)?;
        let durable = status.database.redo.durable_scn;
        let applied = status_at(standby_admin)?.database.applied_scn;
        let primary_archives = archive_files(primary_archive)?;
        let missing: Vec<&PathBuf> = primary_archives
            .iter()
            .filter(|path| !standby_archive.join(path.file_name().expect("file")).exists())
            .collect();
        let unarchived = status
            .database
            .redo
            .groups
            .iter()
            .filter(|group| !group.archived && group.seq.is_some())
            .count();
        if applied >= durable
            && missing.is_empty()
            && status.database.redo.archive_errors.is_empty()
            && unarchived <= 1
        {
            return Ok(primary_archives);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the standby did not catch up within {limit:?}: applied SCN {applied} of {durable}, \
             archived logs missing on the standby {missing:?}, {unarchived} logs not archived on \
             the primary, archive errors {:?}",
            status.database.redo.archive_errors
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The archived logs among `archived` whose copy of the same name in `standby_archive` is
/// missing or differs in any byte.
pub fn differing_archives(
    archived: &[PathBuf],
    standby_archive: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    let mut differing = Vec::new();
    for path in archived {
        let theirs = standby_archive.join(path.file_name().context("an archived log's name")?);
        let ours = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        if std::fs::read(&theirs).ok().is_none_or(|bytes| bytes != ours) {
            differing.push(path.clone());
        }
    }
    Ok(differing)
}

/// The archived logs (`*.arc`) in `dir`, oldest first.
pub fn archive_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|entry| entry.path()))
        .filter(|path| path.extension().is_some_and(|extension| extension == "arc"))
        .collect();
    files.sort();
    Ok(files)
}

/// Every key and value, via SCAN and MGET.
pub async fn all_data(addr: SocketAddr) -> anyhow::Result<BTreeMap<Vec<u8>, Vec<u8>>> {
    let mut client = Client::connect(addr).await?;
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut cursor = b"0".to_vec();
    loop {
        let reply = client.ok(&[b"SCAN", &cursor, b"COUNT", b"1000"]).await?;
        let Frame::Array(parts) = reply else { anyhow::bail!("SCAN answered {reply:?}") };
        let (Some(Frame::Bulk(next)), Some(Frame::Array(batch))) = (parts.first(), parts.get(1))
        else {
            anyhow::bail!("SCAN answered {parts:?}")
        };
        keys.extend(
            batch.iter().filter_map(|key| {
                if let Frame::Bulk(key) = key { Some(key.to_vec()) } else { None }
            }),
        );
        if next.as_ref() == b"0" {
            break;
        }
        cursor = next.to_vec();
    }
    let mut data = BTreeMap::new();
    for chunk in keys.chunks(500) {
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(chunk.iter().map(Vec::as_slice));
        let Frame::Array(values) = client.ok(&args).await? else { anyhow::bail!("MGET failed") };
        for (key, value) in chunk.iter().zip(values) {
            if let Frame::Bulk(value) = value {
                data.insert(key.clone(), value.to_vec());
            }
        }
    }
    Ok(data)
}

fn close_phase(
    name: &str,
    shared: &Shared,
    (started, commits, redo): (Instant, u64, u64),
    status: &server::ServerStatus,
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
    before: &server::ServerStatus,
    after: &server::ServerStatus,
    count: usize,
) -> Vec<(String, f64)> {
    let mut deltas: Vec<(String, f64)> = after
        .metrics
        .waits
        .iter()
        .map(|event| {
            let previous = before.metrics.wait(&event.name).map_or(0, |previous| previous.total_us);
            (event.name.clone(), event.total_us.saturating_sub(previous) as f64 / 1000.0)
        })
        .filter(|(_, ms)| *ms > 0.0)
        .collect();
    deltas.sort_by(|a, b| b.1.total_cmp(&a.1));
    deltas.truncate(count);
    deltas
}

/// Small transactions: an order (SET), a counter (INCR) or a transfer between two accounts
/// (MULTI/EXEC of two INCRBYs that sum to zero).
async fn oltp_client(
    addr: std::net::SocketAddr,
    client: usize,
    shared: Arc<Shared>,
) -> anyhow::Result<()> {
    let mut connection = Client::connect(addr).await?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(client as u64);
    let mut sequence = 0u64;
    let order_value = vec![b'o'; 200];
    while !shared.stop_oltp.load(Ordering::Acquire) {
        let started = Instant::now();
        match rng.random_range(0..4) {
            0 | 1 => {
                sequence += 1;
                let key = format!("order:{client}:{sequence}");
                connection.ok(&[b"SET", key.as_bytes(), &order_value]).await?;
                shared.record(started);
                shared.orders.lock().push(key);
            }
            2 => {
                let counter = rng.random_range(0..COUNTERS);
                connection.ok(&[b"INCR", format!("counter:{counter}").as_bytes()]).await?;
                shared.record(started);
                shared.counters[counter].fetch_add(1, Ordering::Relaxed);
            }
            _ => {
                let from = format!("balance:{}", rng.random_range(0..ACCOUNTS));
                let to = format!("balance:{}", rng.random_range(0..ACCOUNTS));
                connection.ok(&[b"MULTI"]).await?;
                connection.ok(&[b"INCRBY", from.as_bytes(), b"-5"]).await?;
                connection.ok(&[b"INCRBY", to.as_bytes(), b"5"]).await?;
                let reply = connection.ok(&[b"EXEC"]).await?;
                anyhow::ensure!(
                    matches!(&reply, Frame::Array(items) if items.len() == 2),
                    "EXEC answered {reply:?}"
                );
                shared.record(started);
            }
        }
    }
    Ok(())
}

/// Large transactions: MSET of 200 keys of 512 bytes (about 100 KiB of redo each).
async fn batch_client(
    addr: std::net::SocketAddr,
    client: usize,
    shared: Arc<Shared>,
) -> anyhow::Result<()> {
    let mut connection = Client::connect(addr).await?;
    let value = vec![b'b'; 512];
    let mut batch = 0u64;
    while !shared.stop_batch.load(Ordering::Acquire) {
        batch += 1;
        let keys: Vec<String> =
            (0..200).map(|row| format!("load:{client}:{}", (batch * 200 + row) % 20_000)).collect();
        let mut args: Vec<&[u8]> = vec![b"MSET"];
        for key in &keys {
            args.push(key.as_bytes());
            args.push(&value);
        }
        let started = Instant::now();
        connection.ok(&args).await?;
        shared.record(started);
    }
    Ok(())
}

async fn verify(
    addr: std::net::SocketAddr,
    shared: &Shared,
    recovered_records: u64,
) -> anyhow::Result<Verification> {
    let mut connection = Client::connect(addr).await?;
    let mut counters_exact = true;
    for (index, acknowledged) in shared.counters.iter().enumerate() {
        let value = connection.ok(&[b"GET", format!("counter:{index}").as_bytes()]).await?;
        let value = if value == Frame::Null {
            0
        } else {
            integer(&value).context("a counter is not an integer")?
        };
        // Each client finished its last commit before the crash, so every INCR was
        // acknowledged: the value must be exactly their number.
        counters_exact &= value == acknowledged.load(Ordering::Relaxed) as i64;
    }
    let mut balances_sum = 0i64;
    for account in 0..ACCOUNTS {
        let value = connection.ok(&[b"GET", format!("balance:{account}").as_bytes()]).await?;
        if value != Frame::Null {
            balances_sum += integer(&value).context("a balance is not an integer")?;
        }
    }
    let orders = shared.orders.lock().clone();
    let mut missing = 0u64;
    for chunk in orders.chunks(500) {
        let mut args: Vec<&[u8]> = vec![b"MGET"];
        args.extend(chunk.iter().map(|key| key.as_bytes()));
        match connection.ok(&args).await? {
            Frame::Array(values) => {
                missing += values.iter().filter(|value| **value == Frame::Null).count() as u64
            }
            other => anyhow::bail!("MGET answered {other:?}"),
        }
    }
    Ok(Verification {
        crashed_and_restarted: true,
        recovered_records,
        counters: COUNTERS as u64,
        counters_exact,
        balances_sum,
        orders_checked: orders.len() as u64,
        orders_missing: missing,
        passed: counters_exact && balances_sum == 0 && missing == 0,
    })
}

/// The report a person reads at a glance.
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
            "  failover check: primary killed with SIGKILL; on the standby {}",
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
    let verification = &report.verification;
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
    /// What the check found: "8 counters exact, balances sum to 0, 10/10 orders present".
    fn found(&self) -> String {
        format!(
            "{} counters {}, balances sum to {}, {}/{} orders present",
            self.counters,
            if self.counters_exact { "exact" } else { "WRONG" },
            self.balances_sum,
            self.orders_checked - self.orders_missing,
            self.orders_checked
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
