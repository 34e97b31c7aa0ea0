//! PostgreSQL 15 with a streaming standby: installing it, the cluster (a primary and its
//! standbys, each a `Daemon`), and its cases.
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

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use linkemu::Side;

use super::pgbench::pgbench;
use super::process::{Daemon, run_bounded, run_ok, wait_until};
use super::{Bench, ExternalCase, KEYS, POSTGRESQL_BIN, START_TIMEOUT, VALUE_BYTES};
use crate::network::Network;
use crate::ports::free_port;

/// Installs Debian's postgresql-15 if its programs are missing.
pub(super) fn ensure_postgresql(progress: &mut dyn FnMut(&str)) -> Result<(), String> {
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
pub(super) fn pg_client(network: &Network, side: Side, program: &str, port: u16) -> Command {
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
pub(super) struct PgCluster {
    // Declared in stopping order: the standbys first.
    standbys: Vec<Daemon>,
    primary: Daemon,
    pub(super) port: u16,
    dir: PathBuf,
}

impl PgCluster {
    /// initdb, then starts the primary on side A with the table the load writes.
    pub(super) fn start(network: &Network, work: &Path) -> anyhow::Result<PgCluster> {
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
    pub(super) fn start_standby(&mut self, network: &Network, name: &str) -> anyhow::Result<()> {
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
    pub(super) fn synchronous(
        &mut self,
        network: &Network,
        names: &str,
        state: &str,
    ) -> anyhow::Result<()> {
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

    pub(super) fn check_alive(&mut self) -> anyhow::Result<()> {
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

pub(super) fn postgresql_cases(
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
