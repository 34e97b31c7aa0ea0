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
//! # PostgreSQL 15: what a commit is
//!
//! Debian's `postgresql-15` (installed with apt-get if missing), run as the `postgres` user
//! through `setpriv`. The primary is a fresh `initdb --no-locale -E UTF8 --auth=trust`
//! cluster with its defaults (`fsync = on`, `wal_sync_method = fdatasync`,
//! `full_page_writes = on`, `wal_level = replica`, `shared_buffers = 128MB`) except
//! `checkpoint_timeout = 1h` and `max_wal_size = 8GB`, so that no checkpoint falls inside a
//! measurement, TCP only (`unix_socket_directories = ''`) and trust authentication from the
//! link's addresses. The standby is a `pg_basebackup -X stream -R` copy of it, started as a
//! hot standby that streams WAL from the primary over TCP (no replication slot), with the
//! same settings. `synchronous_standby_names = '*'` on the primary makes that standby
//! synchronous.
//!
//! The load is pgbench (`-n -M prepared -j 1 -c CLIENTS -T SECONDS`, connected over TCP to
//! 127.0.0.1) running one custom script; each transaction is one autocommitted statement,
//! the SQL counterpart of a Redis `SET` of a 100-byte value to one of a million keys:
//!
//! ```sql
//! \set k random(1, 1000000)
//! INSERT INTO kv (k, v) VALUES (:k, '<100 × v>') ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v;
//! ```
//!
//! on `kv (k integer PRIMARY KEY, v text NOT NULL)`. A commit's latency is pgbench's own
//! per-transaction latency (`--log`: from sending the statement to its result), so p50/p99
//! are exact over every transaction of the case; commits/s is pgbench's `tps` (without the
//! initial connection time). `synchronous_commit` is set per session through `PGOPTIONS`:
//!
//! | mode | PostgreSQL | the commit returns after | nearest redoguard case |
//! |---|---|---|---|
//! | `no_standby` (RTT 0 only) | `on`, before any standby exists | the local WAL fdatasync | no standby |
//! | `sync_commit_off` | `off` | nothing: WAL is flushed by the WAL writer within 3 × `wal_writer_delay` (200 ms); a crash loses commits | none (not durable) |
//! | `sync_commit_local` | `local` | the local WAL fdatasync; the standby streams asynchronously | ASYNC |
//! | `sync_commit_remote_write` | `remote_write` | the local fdatasync, then the standby's write() of it (not its fsync) | SYNC NOAFFIRM |
//! | `sync_commit_on` | `on` | the local fdatasync, then the standby's fdatasync (remote flush) | SYNC AFFIRM |
//!
//! PostgreSQL ships WAL to the standby only once it is flushed locally, so the remote part
//! follows the local flush: it is not sent in parallel with it as redoguard's SYNC does.
//!
//! # Redis: what a commit is
//!
//! Debian's `redis-server` and `redis-tools` (installed with apt-get if missing), as root.
//! The primary and the replica both run with `appendonly yes`, `appendfsync always` (the
//! append-only file is fdatasync'ed before replies are sent, once per event-loop pass: Redis's
//! group commit), `save ""` (no RDB snapshots) and otherwise defaults; the replica with
//! `replicaof <primary> <port>`.
//!
//! The load is our own generator: N connections (one tokio current-thread runtime in the
//! primary's namespace), each in a loop `SET key:<random 0..1000000, 12 digits> <100 bytes>`,
//! and in `wait_1` the command `WAIT 1 10000` pipelined behind it in the same write; the
//! commit's latency runs from that write to the last reply. A `WAIT` that answers 0 (no
//! replica acknowledged within 10 s) is not counted as a commit; `notes` gives how many.
//!
//! | mode | the commit returns after | nearest redoguard case |
//! |---|---|---|
//! | `no_standby` (RTT 0 only) | the local AOF fdatasync, no replica | no standby |
//! | `no_wait` | the local AOF fdatasync; the replica follows asynchronously | ASYNC |
//! | `wait_1` | the local AOF fdatasync, then the replica's acknowledgement of the write | SYNC NOAFFIRM (AFFIRM in practice, below) |
//!
//! `WAIT` counts a replica once it has acknowledged the write's replication offset, which it
//! does after processing the write; Redis does not document that the replica's append-only
//! file is on disk by then. In practice, with `appendfsync always` on the replica of Redis
//! 7.0.15 (Debian 12), `strace` of the replica showed, for one SET + WAIT:
//! `read` (SET and `REPLCONF GETACK`) → `write` to the AOF → `fdatasync` → `write`
//! (`REPLCONF ACK`): the acknowledgement followed the replica's fsync, because both happen in
//! the same event-loop pass and the fsync comes first. So `wait_1` behaves like SYNC AFFIRM
//! here while being promised only as SYNC NOAFFIRM. `WAITAOF`, which does promise the fsync,
//! exists only from Redis 7.2.
//!
//! # Cleaning up
//!
//! Every server is a child of this process, stopped by its PID when its guard drops (also
//! on error): PostgreSQL with SIGINT (fast shutdown), Redis with SIGKILL, then SIGKILL for
//! whatever has not stopped within 30 s. The work directory inside `dir` is removed at the
//! end, and the link's drop deletes its namespaces.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use hdrhistogram::Histogram;
use linkemu::Side;
use resp::Frame;
use serde::{Deserialize, Serialize};

use crate::bench_resp::{RedisServer, ensure_redis, free_port};
use crate::client::Client;
use crate::network::Network;

pub mod quorum;

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
    /// See the module documentation: `no_standby`, `sync_commit_off`, `sync_commit_local`,
    /// `sync_commit_remote_write`, `sync_commit_on`, `no_wait`, `wait_1`.
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
// Processes.

/// A server process this benchmark started; stopped by its PID when dropped.
struct Daemon {
    what: String,
    child: Option<Child>,
    stop_signal: libc::c_int,
    log: PathBuf,
}

impl Daemon {
    /// Starts `command` with stdout and stderr appended to `log`.
    fn spawn(
        what: &str,
        mut command: Command,
        log: &Path,
        stop_signal: libc::c_int,
    ) -> anyhow::Result<Daemon> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        Ok(Daemon { what: what.into(), child: Some(child), stop_signal, log: log.into() })
    }

    /// Fails, quoting its log, if the process has exited.
    fn check_alive(&mut self) -> anyhow::Result<()> {
        if let Some(child) = &mut self.child
            && let Some(status) = child.try_wait()?
        {
            self.child = None;
            anyhow::bail!(
                "{} exited with {status}; its log ends with:\n{}",
                self.what,
                log_tail(&self.log, 15)
            );
        }
        Ok(())
    }

    /// Sends the stop signal, waits up to [`STOP_TIMEOUT`], then kills.
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else { return };
        if child.try_wait().ok().flatten().is_some() {
            return;
        }
        // SAFETY: a signal to our own child, by its PID; it has not been reaped (try_wait
        // above saw it running), so the PID is still its.
        unsafe { libc::kill(child.id() as libc::pid_t, self.stop_signal) };
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        tracing::warn!(what = self.what, "did not stop within 30 s of its signal; killing it");
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last `lines` lines of a log file.
fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Runs a command to completion with its output captured, killing it after `timeout`.
fn run_bounded(mut command: Command, timeout: Duration) -> anyhow::Result<Output> {
    let shown = format!("{command:?}");
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot run {shown}"))?;
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stdout.read_to_end(&mut bytes);
        bytes
    });
    let err = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        bytes
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("{shown} did not finish within {timeout:?}; killed it");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    Ok(Output { status, stdout, stderr })
}

/// Like [`run_bounded`], failing with its stderr unless it succeeds; returns its stdout.
fn run_ok(command: Command, timeout: Duration) -> anyhow::Result<String> {
    let shown = format!("{command:?}");
    let output = run_bounded(command, timeout)?;
    anyhow::ensure!(
        output.status.success(),
        "{shown} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Polls `check` every 100 ms until it returns true, for at most `timeout`.
fn wait_until(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        crate::interrupt::check()?;
        if check()? {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------------------
// PostgreSQL.

/// Installs Debian's postgresql-15 if its programs are missing.
fn ensure_postgresql(progress: &mut dyn FnMut(&str)) -> Result<(), String> {
    let programs = ["postgres", "initdb", "pg_basebackup", "pg_isready", "psql", "pgbench"];
    let present = || programs.iter().all(|p| Path::new(POSTGRESQL_BIN).join(p).exists());
    if !crate::bench_resp::have("setpriv") {
        return Err("`setpriv` (util-linux) is needed to run PostgreSQL as `postgres`".into());
    }
    if !present() {
        // Debian's package may also create and start its own cluster "15/main" on port
        // 5432; that one is the system's, not ours, and is left alone.
        progress("installing postgresql-15 from Debian's packages");
        let install = "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql-15";
        let status = Command::new("sh")
            .arg("-c")
            .arg(install)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        match status {
            Ok(status) if status.success() && present() => {}
            Ok(status) => {
                return Err(format!(
                    "`{install}` failed ({status}); is this Debian, as root, with the package registry reachable?"
                ));
            }
            Err(error) => return Err(format!("cannot run `{install}`: {error}")),
        }
    }
    let user = Command::new("id").args(["-u", "postgres"]).output();
    if !user.is_ok_and(|output| output.status.success()) {
        return Err("there is no `postgres` user (Debian's package creates it)".into());
    }
    Ok(())
}

/// A PostgreSQL program run as the `postgres` user on one side, in `cwd`.
fn as_postgres(network: &Network, side: Side, program: &str, cwd: &Path) -> Command {
    let mut command = network.command(side, "setpriv");
    command
        .args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--"])
        .arg(Path::new(POSTGRESQL_BIN).join(program))
        .current_dir(cwd)
        .env("HOME", cwd);
    command
}

/// A PostgreSQL client program (psql, pg_isready, pgbench) run as root on one side,
/// connecting as `postgres` to 127.0.0.1:`port`.
fn pg_client(network: &Network, side: Side, program: &str, port: u16) -> Command {
    let mut command = network.command(side, Path::new(POSTGRESQL_BIN).join(program));
    command.args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"]);
    command
}

/// psql's unaligned output of one or more SQL commands (each its own transaction).
fn psql(network: &Network, port: u16, sql: &[&str]) -> anyhow::Result<String> {
    let mut command = pg_client(network, Side::A, "psql", port);
    command.args(["-d", "postgres", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"]);
    for statement in sql {
        command.args(["-c", statement]);
    }
    // Setup statements must not wait for a synchronous standby.
    command.env("PGOPTIONS", "-c synchronous_commit=local");
    Ok(run_ok(command, Duration::from_secs(60))?.trim().to_string())
}

/// Settings both servers get on their command line (over postgresql.conf).
fn postgres_args(port: u16, listen: &[String]) -> Vec<String> {
    [
        format!("port={port}"),
        format!("listen_addresses={}", listen.join(",")),
        "unix_socket_directories=".into(),
        "checkpoint_timeout=1h".into(),
        "max_wal_size=8GB".into(),
        "logging_collector=off".into(),
    ]
    .into_iter()
    .flat_map(|setting| ["-c".to_string(), setting])
    .collect()
}

/// A primary, and once [`PgCluster::add_standby`] ran, its synchronous standby (or, with
/// [`PgCluster::start_standby`], several).
struct PgCluster {
    // Declared in stopping order: the standbys first.
    standbys: Vec<Daemon>,
    primary: Daemon,
    port: u16,
    dir: PathBuf,
}

impl PgCluster {
    /// initdb, then starts the primary on side A with the table the load writes.
    fn start(network: &Network, work: &Path) -> anyhow::Result<PgCluster> {
        let dir = work.join(format!("postgresql-{}", network.label()));
        std::fs::create_dir_all(&dir)?;
        run_ok(
            {
                let mut command = Command::new("chown");
                command.arg("postgres:postgres").arg(&dir);
                command
            },
            Duration::from_secs(10),
        )?;
        let probe = run_bounded(
            {
                let mut command = Command::new("setpriv");
                command
                    .args(["--reuid=postgres", "--regid=postgres", "--init-groups", "--"])
                    .args(["test", "-w"])
                    .arg(&dir);
                command
            },
            Duration::from_secs(10),
        )?;
        anyhow::ensure!(
            probe.status.success(),
            "the postgres user cannot write {}: every parent directory must be searchable by others",
            dir.display()
        );
        let primary_dir = dir.join("primary");
        let mut initdb = as_postgres(network, Side::A, "initdb", &dir);
        initdb.arg("-D").arg(&primary_dir).args([
            "-U",
            "postgres",
            "--auth=trust",
            "--no-locale",
            "-E",
            "UTF8",
        ]);
        run_ok(initdb, Duration::from_secs(120)).context("initdb")?;
        // Trust the link's addresses too (initdb trusts 127.0.0.1 and ::1).
        let mut hba =
            std::fs::OpenOptions::new().append(true).open(primary_dir.join("pg_hba.conf"))?;
        writeln!(
            hba,
            "host all all 198.18.0.0/24 trust\nhost replication all 198.18.0.0/24 trust"
        )?;
        drop(hba);

        let port = free_port()?;
        let mut postgres = as_postgres(network, Side::A, "postgres", &dir);
        postgres
            .arg("-D")
            .arg(&primary_dir)
            .args(postgres_args(port, &network.listen_addresses(Side::A)));
        let primary = Daemon::spawn(
            "the PostgreSQL primary",
            postgres,
            &dir.join("primary.log"),
            libc::SIGINT,
        )?;
        let mut cluster = PgCluster { standbys: Vec::new(), primary, port, dir };
        cluster.wait_ready(network, Side::A, port)?;
        psql(network, port, &["CREATE TABLE kv (k integer PRIMARY KEY, v text NOT NULL)"])?;
        Ok(cluster)
    }

    /// Waits until pg_isready on `side` says the server at `port` accepts connections.
    fn wait_ready(&mut self, network: &Network, side: Side, port: u16) -> anyhow::Result<()> {
        wait_until("PostgreSQL accepting connections", START_TIMEOUT, || {
            self.check_alive()?;
            let mut command = pg_client(network, side, "pg_isready", port);
            command.args(["-t", "2"]);
            Ok(run_bounded(command, Duration::from_secs(10))?.status.success())
        })
    }

    /// pg_basebackup on side B, start it there as a hot standby streaming from the primary,
    /// and make it synchronous.
    fn add_standby(&mut self, network: &Network) -> anyhow::Result<()> {
        self.start_standby(network, "standby")?;
        self.synchronous(network, "*", "sync")
    }

    /// pg_basebackup on side B into `name`, and start it there as a hot standby streaming
    /// from the primary as `name` (its `cluster_name`, which the walreceiver gives as its
    /// application_name, the name `synchronous_standby_names` lists).
    fn start_standby(&mut self, network: &Network, name: &str) -> anyhow::Result<()> {
        let standby_dir = self.dir.join(name);
        let mut backup = as_postgres(network, Side::B, "pg_basebackup", &self.dir);
        backup
            .args(["-h", &network.address(Side::A).to_string(), "-p", &self.port.to_string()])
            .args(["-U", "postgres", "-X", "stream", "-R", "-c", "fast", "-D"])
            .arg(&standby_dir);
        run_ok(backup, Duration::from_secs(300)).context("pg_basebackup")?;
        let standby_port = free_port()?;
        let mut postgres = as_postgres(network, Side::B, "postgres", &self.dir);
        postgres
            .arg("-D")
            .arg(&standby_dir)
            .args(postgres_args(standby_port, &network.listen_addresses(Side::B)))
            .args(["-c", "hot_standby=on", "-c", &format!("cluster_name={name}")]);
        self.standbys.push(Daemon::spawn(
            &format!("the PostgreSQL standby {name}"),
            postgres,
            &self.dir.join(format!("{name}.log")),
            libc::SIGINT,
        )?);
        self.wait_ready(network, Side::B, standby_port)?;
        let port = self.port;
        let streaming = self.standbys.len().to_string();
        wait_until("the standby streaming", START_TIMEOUT, || {
            self.check_alive()?;
            Ok(psql(
                network,
                port,
                &["SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"],
            )? == streaming)
        })
    }

    /// Sets `synchronous_standby_names` to `names` and waits until every standby's
    /// `sync_state` is `state` (`sync` for `*` with one standby and for `FIRST n` of n,
    /// `quorum` for `ANY k`).
    fn synchronous(&mut self, network: &Network, names: &str, state: &str) -> anyhow::Result<()> {
        let port = self.port;
        psql(
            network,
            port,
            &[
                &format!("ALTER SYSTEM SET synchronous_standby_names = '{names}'"),
                "SELECT pg_reload_conf()",
            ],
        )?;
        let expected = self.standbys.len().to_string();
        let query =
            format!("SELECT count(*) FROM pg_stat_replication WHERE sync_state = '{state}'");
        wait_until("the standbys synchronous", START_TIMEOUT, || {
            self.check_alive()?;
            Ok(psql(network, port, &[&query])? == expected)
        })
    }

    fn check_alive(&mut self) -> anyhow::Result<()> {
        self.primary.check_alive()?;
        for standby in &mut self.standbys {
            standby.check_alive()?;
        }
        Ok(())
    }
}

impl Drop for PgCluster {
    /// Stops the standbys, then the primary, then removes their files.
    fn drop(&mut self) {
        for standby in &mut self.standbys {
            standby.stop();
        }
        self.primary.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The pgbench script: one durable upsert per transaction, like a Redis SET.
fn pgbench_script() -> String {
    format!(
        "\\set k random(1, {KEYS})\nINSERT INTO kv (k, v) VALUES (:k, '{}') ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v;\n",
        "v".repeat(VALUE_BYTES)
    )
}

/// One pgbench run at one `synchronous_commit` setting.
fn pgbench(
    network: &Network,
    cluster: &mut PgCluster,
    synchronous_commit: &str,
    clients: u32,
    seconds: u64,
    case_dir: &Path,
) -> anyhow::Result<Measured> {
    std::fs::create_dir_all(case_dir)?;
    let script = case_dir.join("set.sql");
    std::fs::write(&script, pgbench_script())?;
    let mut command = pg_client(network, Side::A, "pgbench", cluster.port);
    command
        .args(["-n", "-M", "prepared", "-j", "1"])
        .args(["-c", &clients.to_string(), "-T", &seconds.to_string()])
        .arg("-f")
        .arg(&script)
        .arg("--log")
        .arg(format!("--log-prefix={}", case_dir.join("pgbench").display()))
        .arg("postgres")
        .current_dir(case_dir)
        .env("PGOPTIONS", format!("-c synchronous_commit={synchronous_commit}"));
    let output = run_bounded(command, Duration::from_secs(seconds + 120))?;
    cluster.check_alive()?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(
        output.status.success(),
        "pgbench failed ({}): {}{}",
        output.status,
        stdout.trim(),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let summary = parse_pgbench_summary(&stdout)
        .with_context(|| format!("no `tps = ` line in pgbench's output:\n{stdout}"))?;
    let mut log = PgbenchLog::default();
    for entry in std::fs::read_dir(case_dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with("pgbench.") {
            log.add(&std::fs::read_to_string(entry.path())?)?;
        }
    }
    anyhow::ensure!(
        log.transactions > 0,
        "pgbench logged no transaction in {}",
        case_dir.display()
    );
    Ok(Measured {
        commits: log.transactions,
        commits_per_s: summary.tps,
        latency_us: log.latency_us,
        failures: log.failed.max(summary.failed),
    })
}

/// What pgbench's summary says.
#[derive(Debug, PartialEq)]
struct PgbenchSummary {
    tps: f64,
    failed: u64,
}

/// Reads `tps = 1234.5 (without initial connection time)` and, if present,
/// `number of failed transactions: 3 (0.1%)`.
fn parse_pgbench_summary(stdout: &str) -> Option<PgbenchSummary> {
    let tps = stdout.lines().find_map(|line| {
        line.trim().strip_prefix("tps = ")?.split_whitespace().next()?.parse().ok()
    })?;
    let failed = stdout
        .lines()
        .find_map(|line| {
            line.trim()
                .strip_prefix("number of failed transactions: ")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0);
    Some(PgbenchSummary { tps, failed })
}

/// pgbench's per-transaction log (`--log`), one or more files.
struct PgbenchLog {
    transactions: u64,
    failed: u64,
    latency_us: Histogram<u64>,
}

impl Default for PgbenchLog {
    fn default() -> PgbenchLog {
        PgbenchLog { transactions: 0, failed: 0, latency_us: latency_histogram() }
    }
}

impl PgbenchLog {
    /// Adds one log file's lines. Format (PostgreSQL 15):
    /// `client_id transaction_no time script_no time_epoch time_us [schedule_lag] [retries]`,
    /// `time` being the transaction's latency in µs, or `failed`, `serialization`,
    /// `deadlock` or `skipped` for one that did not commit.
    fn add(&mut self, text: &str) -> anyhow::Result<()> {
        for (number, line) in text.lines().enumerate() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            anyhow::ensure!(
                fields.len() >= 6,
                "pgbench log line {}: expected at least 6 fields: {line:?}",
                number + 1
            );
            match fields[2].parse::<u64>() {
                Ok(latency_us) => {
                    self.latency_us.record(latency_us.clamp(1, LATENCY_US_MAX))?;
                    self.transactions += 1;
                }
                Err(_) => match fields[2] {
                    "failed" | "serialization" | "deadlock" | "skipped" => self.failed += 1,
                    other => {
                        anyhow::bail!("pgbench log line {}: unexpected time {other:?}", number + 1)
                    }
                },
            }
        }
        Ok(())
    }
}

/// The PostgreSQL modes measured with the standby: (mode, synchronous_commit, what it waits
/// for).
const POSTGRESQL_MODES: [(&str, &str, &str); 4] = [
    (
        "sync_commit_off",
        "off",
        "commit returns before its WAL is flushed (the WAL writer flushes within 3 x wal_writer_delay = 600 ms; not durable, no redoguard counterpart)",
    ),
    (
        "sync_commit_local",
        "local",
        "commit waits for the local WAL fdatasync only; the standby streams asynchronously (like redoguard ASYNC)",
    ),
    (
        "sync_commit_remote_write",
        "remote_write",
        "commit waits for the local WAL fdatasync, then for the synchronous standby to have written (not flushed) it (like redoguard SYNC NOAFFIRM)",
    ),
    (
        "sync_commit_on",
        "on",
        "commit waits for the local WAL fdatasync, then for the synchronous standby's flush of it (remote flush; like redoguard SYNC AFFIRM)",
    ),
];

fn postgresql_cases(
    bench: &Bench<'_>,
    network: &Network,
    rtts: &[u32],
    cases: &mut Vec<ExternalCase>,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let seconds = bench.config.seconds();
    let workload = |clients: u32| {
        format!(
            "pgbench -n -M prepared -j 1 -c {clients} -T {seconds} over TCP to 127.0.0.1, script: `\\set k random(1, {KEYS})` + `INSERT INTO kv (k, v) VALUES (:k, <{VALUE_BYTES}-byte text>) ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v` (one autocommitted upsert per transaction); latency percentiles from pgbench --log, commits/s is pgbench's tps; fsync=on, wal_sync_method=fdatasync, full_page_writes=on, checkpoint_timeout=1h, max_wal_size=8GB"
        )
    };
    let started = Instant::now();
    progress(&format!("postgresql on {}: initdb and primary", network.describe(rtts)));
    network.set_rtt(rtts[0])?;
    let mut cluster = PgCluster::start(network, bench.work)?;
    if matches!(network, Network::Loopback) {
        let rtt_ms = network.measure_rtt_ms()?;
        for &clients in &bench.config.clients {
            crate::interrupt::check()?;
            progress(&format!("postgresql no_standby, loopback, {clients} clients"));
            let case_dir = bench.work.join(format!("pgbench-no_standby-0-{clients}"));
            let measured = pgbench(network, &mut cluster, "on", clients, seconds, &case_dir)?;
            let _ = std::fs::remove_dir_all(&case_dir);
            let notes = format!(
                "{}; no standby exists yet: synchronous_commit=on waits for the local WAL fdatasync only; {} commits, {} failed",
                workload(clients),
                measured.commits,
                measured.failures
            );
            cases.push(bench.case(
                "postgresql",
                "no_standby",
                (0, rtt_ms),
                clients,
                &measured,
                notes,
            ));
        }
    }
    progress(&format!("postgresql on {}: pg_basebackup and standby", network.describe(rtts)));
    cluster.add_standby(network)?;
    tracing::info!(seconds = started.elapsed().as_secs_f64(), "postgresql set up");
    for &rtt in rtts {
        network.set_rtt(rtt)?;
        let rtt_ms = network.measure_rtt_ms()?;
        for (mode, synchronous_commit, waits) in POSTGRESQL_MODES {
            for &clients in &bench.config.clients {
                crate::interrupt::check()?;
                progress(&format!(
                    "postgresql {mode}, RTT {rtt} ms (measured {rtt_ms:.3}), {clients} clients"
                ));
                let case_dir = bench.work.join(format!("pgbench-{mode}-{rtt}-{clients}"));
                let measured = pgbench(
                    network,
                    &mut cluster,
                    synchronous_commit,
                    clients,
                    seconds,
                    &case_dir,
                )?;
                let _ = std::fs::remove_dir_all(&case_dir);
                let notes = format!(
                    "{}; synchronous_commit={synchronous_commit}, synchronous_standby_names='*' with one streaming standby: {waits}; {} commits, {} failed",
                    workload(clients),
                    measured.commits,
                    measured.failures
                );
                cases.push(bench.case(
                    "postgresql",
                    mode,
                    (rtt, rtt_ms),
                    clients,
                    &measured,
                    notes,
                ));
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Redis.

/// The next key of a client's sequence (splitmix64), uniform enough over [`KEYS`].
fn next_key(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % KEYS
}

/// One connection's commits until `deadline`: SET, and with `wait` a pipelined `WAIT 1`.
async fn redis_client(
    mut client: Client,
    seed: u64,
    deadline: Instant,
    wait: bool,
) -> anyhow::Result<(u64, u64, Histogram<u64>)> {
    let value = vec![b'v'; VALUE_BYTES];
    let timeout = WAIT_TIMEOUT_MS.to_string();
    let wait_command: [&[u8]; 3] = [b"WAIT", b"1", timeout.as_bytes()];
    let mut state = seed;
    let mut latency_us = latency_histogram();
    let (mut commits, mut unacknowledged) = (0u64, 0u64);
    while Instant::now() < deadline && !crate::interrupt::requested() {
        let key = format!("key:{:012}", next_key(&mut state));
        let set: [&[u8]; 3] = [b"SET", key.as_bytes(), &value];
        let started = Instant::now();
        let pipeline: &[&[&[u8]]] = if wait { &[&set, &wait_command] } else { &[&set] };
        let replies = tokio::time::timeout(
            Duration::from_millis(WAIT_TIMEOUT_MS) + Duration::from_secs(20),
            client.pipeline(pipeline),
        )
        .await
        .context("no reply within 30 s")??;
        let elapsed_us = started.elapsed().as_micros() as u64;
        anyhow::ensure!(
            matches!(&replies[0], Frame::Simple(ok) if &ok[..] == b"OK"),
            "SET answered {:?}",
            replies[0]
        );
        if wait {
            match &replies[1] {
                Frame::Integer(acknowledged) if *acknowledged >= 1 => {}
                Frame::Integer(_) => {
                    unacknowledged += 1;
                    continue;
                }
                other => anyhow::bail!("WAIT answered {other:?}"),
            }
        }
        latency_us.record(elapsed_us.clamp(1, LATENCY_US_MAX))?;
        commits += 1;
    }
    Ok((commits, unacknowledged, latency_us))
}

/// `clients` connections to the primary on side A's 127.0.0.1:`port`, all connected
/// before the clock starts, each committing `SET`s (with `wait`, each followed by `WAIT 1`)
/// back to back for `duration`. Any server of the Redis protocol: Redis, or redoguard.
pub(crate) fn set_load(
    network: &Network,
    port: u16,
    clients: u32,
    duration: Duration,
    wait: bool,
) -> anyhow::Result<Measured> {
    set_load_with(network, port, clients, duration, wait, &[])
}

/// Like [`set_load`], each connection first sending `prelude` (if not empty; it must not
/// fail) before the clock starts: `COMMITMODE NOWAIT`, say.
pub(crate) fn set_load_with(
    network: &Network,
    port: u16,
    clients: u32,
    duration: Duration,
    wait: bool,
    prelude: &[Vec<u8>],
) -> anyhow::Result<Measured> {
    let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let prelude = prelude.to_vec();
    network.run_in(Side::A, move || -> anyhow::Result<Measured> {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        runtime.block_on(async move {
            let mut connections = Vec::with_capacity(clients as usize);
            for _ in 0..clients {
                let connect =
                    tokio::time::timeout(Duration::from_secs(10), Client::connect(address));
                let mut client = connect.await.context("connecting within 10 s")??;
                if !prelude.is_empty() {
                    let args: Vec<&[u8]> = prelude.iter().map(Vec::as_slice).collect();
                    client.ok(&args).await?;
                }
                connections.push(client);
            }
            let started = Instant::now();
            let deadline = started + duration;
            let mut tasks = tokio::task::JoinSet::new();
            for (index, client) in connections.into_iter().enumerate() {
                tasks.spawn(redis_client(client, 0x5eed_0000 + index as u64, deadline, wait));
            }
            let mut latency_us = latency_histogram();
            let (mut commits, mut failures) = (0, 0);
            while let Some(joined) = tasks.join_next().await {
                let (count, unacknowledged, histogram) = joined??;
                commits += count;
                failures += unacknowledged;
                latency_us.add(&histogram)?;
            }
            let seconds = started.elapsed().as_secs_f64();
            Ok(Measured { commits, commits_per_s: commits as f64 / seconds, latency_us, failures })
        })
    })?
}

/// A redis-cli on one side asking 127.0.0.1:`port` for `INFO replication`.
fn redis_info(network: &Network, side: Side, port: u16) -> anyhow::Result<String> {
    let mut command = network.command(side, "redis-cli");
    command.args(["-p", &port.to_string(), "info", "replication"]);
    run_ok(command, Duration::from_secs(10))
}

fn redis_cases(
    bench: &Bench<'_>,
    network: &Network,
    rtts: &[u32],
    cases: &mut Vec<ExternalCase>,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let duration = Duration::from_secs(bench.config.seconds());
    let workload = |clients: u32, wait: bool| {
        format!(
            "our generator: {clients} connections from the primary's side, each looping SET key:<random of {KEYS}> <{VALUE_BYTES} bytes>{} ; latency from the write to the last reply; appendonly yes, appendfsync always, save \"\" on primary and replica",
            if wait {
                format!(" + WAIT 1 {WAIT_TIMEOUT_MS} pipelined in the same write")
            } else {
                String::new()
            }
        )
    };
    network.set_rtt(rtts[0])?;
    let dir = bench.work.join(format!("redis-{}", network.label()));
    let primary_port = free_port()?;
    let bind_a = network.listen_addresses(Side::A);
    let bind_a: Vec<&str> = bind_a.iter().map(String::as_str).collect();
    progress(&format!("redis on {}: primary", network.describe(rtts)));
    let primary = RedisServer::start_with(
        network.command(Side::A, "redis-server"),
        || network.command(Side::A, "redis-cli"),
        &bind_a,
        primary_port,
        &dir.join("primary"),
        &[],
    )?;
    if matches!(network, Network::Loopback) {
        let rtt_ms = network.measure_rtt_ms()?;
        for &clients in &bench.config.clients {
            crate::interrupt::check()?;
            progress(&format!("redis no_standby, loopback, {clients} clients"));
            let measured = set_load(network, primary.port, clients, duration, false)?;
            let notes = format!(
                "{}; no replica: the commit waits for the local AOF fdatasync only; {} commits",
                workload(clients, false),
                measured.commits
            );
            cases.push(bench.case("redis", "no_standby", (0, rtt_ms), clients, &measured, notes));
        }
    }
    progress(&format!("redis on {}: replica", network.describe(rtts)));
    let bind_b = network.listen_addresses(Side::B);
    let bind_b: Vec<&str> = bind_b.iter().map(String::as_str).collect();
    let primary_address = network.address(Side::A).to_string();
    let primary_port_text = primary_port.to_string();
    let replica_port = free_port()?;
    let replica = RedisServer::start_with(
        network.command(Side::B, "redis-server"),
        || network.command(Side::B, "redis-cli"),
        &bind_b,
        replica_port,
        &dir.join("replica"),
        &["--replicaof", &primary_address, &primary_port_text],
    )?;
    wait_until("the Redis replica in sync", START_TIMEOUT, || {
        Ok(redis_info(network, Side::B, replica.port)?.contains("master_link_status:up")
            && redis_info(network, Side::A, primary.port)?.contains("connected_slaves:1"))
    })?;
    for &rtt in rtts {
        network.set_rtt(rtt)?;
        let rtt_ms = network.measure_rtt_ms()?;
        for (mode, wait) in [("no_wait", false), ("wait_1", true)] {
            for &clients in &bench.config.clients {
                crate::interrupt::check()?;
                progress(&format!(
                    "redis {mode}, RTT {rtt} ms (measured {rtt_ms:.3}), {clients} clients"
                ));
                let measured = set_load(network, primary.port, clients, duration, wait)?;
                let waits = if wait {
                    format!(
                        "the commit waits for the local AOF fdatasync, then for WAIT 1: the replica acknowledged processing the write (promised: like redoguard SYNC NOAFFIRM; Redis 7.0 has no WAITAOF. Observed with strace on this Redis 7.0.15: the replica sends its ACK after its AOF fdatasync, so in practice like SYNC AFFIRM); {} WAITs answered 0 and are not counted",
                        measured.failures
                    )
                } else {
                    "the commit waits for the local AOF fdatasync only; the replica follows asynchronously (like redoguard ASYNC)".into()
                };
                let notes =
                    format!("{}; {waits}; {} commits", workload(clients, wait), measured.commits);
                cases.push(bench.case("redis", mode, (rtt, rtt_ms), clients, &measured, notes));
            }
        }
    }
    drop(replica);
    drop(primary);
    std::fs::remove_dir_all(&dir)?;
    Ok(())
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
    fn pgbench_log_gives_exact_percentiles_and_counts_failures() {
        let mut log = PgbenchLog::default();
        // 100 transactions of 1..=100 ms, in two files (two threads), one failure, and the
        // optional schedule-lag and retries columns on some lines.
        let mut first = String::new();
        let mut second = String::new();
        for n in 1..=100u64 {
            let line = format!("{} {n} {} 0 1700000000 {}\n", n % 4, n * 1000, n * 7);
            if n % 2 == 0 { first.push_str(&line) } else { second.push_str(&line) }
        }
        second.push_str("3 101 failed 0 1700000001 12 0 2\n");
        log.add(&first).unwrap();
        log.add(&second).unwrap();
        assert_eq!(log.transactions, 100);
        assert_eq!(log.failed, 1);
        let p50 = log.latency_us.value_at_quantile(0.5);
        let p99 = log.latency_us.value_at_quantile(0.99);
        // hdrhistogram with 3 significant digits: within 0.1 %.
        assert!((49_950..=50_050).contains(&p50), "p50 {p50}");
        assert!((98_900..=99_100).contains(&p99), "p99 {p99}");
    }

    #[test]
    fn pgbench_log_refuses_what_it_does_not_understand() {
        let mut log = PgbenchLog::default();
        assert!(log.add("0 1 1234\n").is_err());
        assert!(log.add("0 1 soon 0 1700000000 1\n").is_err());
    }

    #[test]
    fn pgbench_summary_of_postgresql_15() {
        let stdout = "\
transaction type: set.sql
scaling factor: 1
query mode: prepared
number of clients: 16
number of threads: 1
maximum number of tries: 1
duration: 5 s
number of transactions actually processed: 12345
number of failed transactions: 2 (0.016%)
latency average = 6.481 ms
initial connection time = 23.456 ms
tps = 2468.987654 (without initial connection time)
";
        assert_eq!(
            parse_pgbench_summary(stdout),
            Some(PgbenchSummary { tps: 2468.987654, failed: 2 })
        );
        assert_eq!(parse_pgbench_summary("latency average = 1 ms\n"), None);
    }

    #[test]
    fn keys_cover_the_key_space() {
        let mut state = 1;
        let keys: Vec<u64> = (0..10_000).map(|_| next_key(&mut state)).collect();
        assert!(keys.iter().all(|&key| key < KEYS));
        assert!(keys.iter().any(|&key| key < KEYS / 10));
        assert!(keys.iter().any(|&key| key > KEYS * 9 / 10));
    }

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
