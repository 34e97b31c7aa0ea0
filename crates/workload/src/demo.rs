//! `redoguard demo`: the main job, on an embedded default setup.
//!
//! Starts a real redoguard server (a child process on a throwaway data directory), drives it
//! over the Redis protocol with a built-in workload (many small OLTP commits, then a batch
//! load of large transactions alongside a few OLTP sessions), shows live progress, then kills
//! the server with SIGKILL, restarts it (crash recovery), and checks that every acknowledged
//! commit survived: counters exact, transfers balanced, every acknowledged order present.

use std::collections::BTreeMap;
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
use crate::process::ServerProcess;

#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// The `redoguard` binary to run the server from.
    pub binary: PathBuf,
    pub duration: Duration,
    pub oltp_clients: usize,
    pub batch_clients: usize,
    /// Where the database lives; `None`: a throwaway directory, deleted at the end.
    pub data_dir: Option<PathBuf>,
    pub keep: bool,
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
    pub verification: Verification,
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

/// The server's configuration for the demo: small logs so that log switches, archiving and
/// checkpoints all happen within a few seconds.
const DEMO_CONFIG: &str = r#"# Written by `redoguard demo`.
[redo]
log_file_size = "16MiB"
groups = 3
[db]
checkpoint_interval = "5s"
"#;

pub async fn run(
    config: DemoConfig,
    mut progress: impl FnMut(&Progress),
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
    let data_dir = config
        .data_dir
        .clone()
        .unwrap_or_else(|| throwaway.as_ref().expect("throwaway").path().to_path_buf());
    std::fs::create_dir_all(&data_dir)?;
    let config_file = data_dir.join("demo.toml");
    std::fs::write(&config_file, DEMO_CONFIG)?;
    let log = data_dir.join("server.log");
    let data_arg = data_dir.display().to_string();
    let config_arg = config_file.display().to_string();
    let args = ["--config", &config_arg, "--data-dir", &data_arg];
    let mut server = ServerProcess::start(&config.binary, &args, &log)?;
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
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    let mut last_commits = 0;
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
        let commits = shared.commits.load(Ordering::Relaxed);
        let interval = std::mem::replace(&mut *shared.interval.lock(), histogram());
        progress(&Progress {
            elapsed_s: started.elapsed().as_secs_f64(),
            phase: phase_name,
            commits_per_s: (commits - last_commits) as f64,
            redo_mb_per_s: status
                .metrics
                .stat("redo size")
                .saturating_sub(previous.metrics.stat("redo size"))
                as f64
                / 1e6,
            commit_p50_us: if interval.is_empty() { 0 } else { interval.value_at_quantile(0.5) },
            commit_p99_us: if interval.is_empty() { 0 } else { interval.value_at_quantile(0.99) },
            top_waits: top_wait_deltas(&previous, &status, 2),
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

    // A crash: SIGKILL, restart, recovery, and the check of every acknowledged commit.
    server.kill()?;
    let mut server = ServerProcess::start(&config.binary, &args, &log)?;
    let recovered = server.status()?.database.recovered_records;
    let verification = verify(server.resp_addr, &shared, recovered).await?;
    server.stop()?;

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
        data_dir: data_dir.display().to_string(),
        data_dir_kept: throwaway.is_none() || config.keep,
    };
    if let Some(throwaway) = throwaway
        && config.keep
    {
        let _ = throwaway.keep();
    }
    Ok(report)
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
    let verification = &report.verification;
    let _ = writeln!(
        out,
        "  crash test: server killed with SIGKILL, restarted; recovery replayed {} redo records",
        verification.recovered_records
    );
    let _ = writeln!(
        out,
        "  {} every acknowledged commit survived: {} counters {}, balances sum to {}, {}/{} orders present",
        if verification.passed { "PASSED:" } else { "FAILED:" },
        verification.counters,
        if verification.counters_exact { "exact" } else { "WRONG" },
        verification.balances_sum,
        verification.orders_checked - verification.orders_missing,
        verification.orders_checked
    );
    out
}

/// Writes `report` as JSON to `path`.
pub fn write_json(report: &DemoReport, path: &Path) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(report)?)
        .with_context(|| format!("cannot write {}", path.display()))
}
