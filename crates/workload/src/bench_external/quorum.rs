//! PostgreSQL 15 with two synchronous standbys, `s1` and `s2`, both on side B: the commit
//! waiting for both (`synchronous_standby_names = 'FIRST 2 (s1, s2)'`: Data Guard's rule
//! for two SYNC destinations) or for the first to flush (`'ANY 1 (s1, s2)'`), with
//! `synchronous_commit = on` (remote flush), at each RTT and client count: the counterpart
//! of `bench transport`'s `quorum` cases. The cluster, the load and the figures are those of
//! the module above; only the standbys differ. One cluster serves every RTT and both names
//! (set with `ALTER SYSTEM` and a reload, then waited for in `pg_stat_replication`).

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use anyhow::Context as _;

use super::pgbench::pgbench;
use super::postgresql::{PgCluster, ensure_postgresql};
use super::{Bench, ExternalCase, ExternalConfig, ExternalReport, KEYS, VALUE_BYTES};
use crate::network::Network;

/// (mode, synchronous_standby_names, the sync_state both standbys then show, what a commit
/// waits for).
const MODES: [(&str, &str, &str, &str); 2] = [
    (
        "sync_commit_on_first_2",
        "FIRST 2 (s1, s2)",
        "sync",
        "the commit waits for the local WAL fdatasync, then for both standbys' flush of it (like redoguard's two SYNC AFFIRM standbys, all)",
    ),
    (
        "sync_commit_on_any_1",
        "ANY 1 (s1, s2)",
        "quorum",
        "the commit waits for the local WAL fdatasync, then for the first standby's flush of it (like redoguard's sync_quorum = \"any 1\")",
    ),
];

/// Every case, on loopback (if `rtts_ms` has 0) and through one linkemu link. PostgreSQL
/// that cannot be installed, or fails on one network, is reported in `skipped`.
pub fn run(
    config: &ExternalConfig,
    mut progress: impl FnMut(&str),
) -> anyhow::Result<ExternalReport> {
    config.validate()?;
    let progress: &mut dyn FnMut(&str) = &mut progress;
    std::fs::create_dir_all(&config.dir)
        .with_context(|| format!("cannot create {}", config.dir.display()))?;
    let work = tempfile::Builder::new()
        .prefix("redoguard-bench-pg-quorum-")
        .tempdir_in(&config.dir)
        .with_context(|| format!("cannot create a directory in {}", config.dir.display()))?;
    // The postgres user must get through it to its own directory below.
    std::fs::set_permissions(work.path(), std::fs::Permissions::from_mode(0o755))?;
    let mut report = ExternalReport::default();
    if let Err(reason) = ensure_postgresql(progress) {
        report.skipped.push(format!("postgresql with two standbys: {reason}"));
        return Ok(report);
    }
    progress("raw fdatasync, 4 KiB, 2 s");
    let mut iotest =
        tools::iotest::IoTestConfig::new(work.path(), 4096, tools::iotest::SyncMethod::Fdatasync);
    iotest.duration = Duration::from_secs(2);
    let fdatasync_p50_us = tools::iotest::run(&iotest)
        .with_context(|| format!("measuring fdatasync in {}", work.path().display()))?
        .lat_p50_us;
    let bench = Bench { config, work: work.path(), fdatasync_p50_us };
    let networks = crate::network::networks_for(
        &config.rtts_ms,
        "postgresql with two standbys",
        &mut report.skipped,
        progress,
    );
    for (network, rtts) in &networks {
        if let Err(error) = cases(&bench, network, rtts, &mut report.cases, progress) {
            crate::interrupt::check()?;
            report.skipped.push(format!(
                "postgresql with two standbys on {}: {error:#}",
                network.describe(rtts)
            ));
        }
    }
    drop(networks);
    crate::interrupt::check()?;
    Ok(report)
}

fn cases(
    bench: &Bench<'_>,
    network: &Network,
    rtts: &[u32],
    cases: &mut Vec<ExternalCase>,
    progress: &mut dyn FnMut(&str),
) -> anyhow::Result<()> {
    let seconds = bench.config.seconds();
    progress(&format!(
        "postgresql with two standbys on {}: initdb, primary, 2 x pg_basebackup",
        network.describe(rtts)
    ));
    network.set_rtt(rtts[0])?;
    let mut cluster = PgCluster::start(network, bench.work)?;
    cluster.start_standby(network, "s1")?;
    cluster.start_standby(network, "s2")?;
    for &rtt in rtts {
        network.set_rtt(rtt)?;
        let rtt_ms = network.measure_rtt_ms()?;
        for (mode, names, state, waits) in MODES {
            cluster.synchronous(network, names, state)?;
            for &clients in &bench.config.clients {
                crate::interrupt::check()?;
                progress(&format!(
                    "postgresql {mode} ({names}), RTT {rtt} ms (measured {rtt_ms:.3}), {clients} clients"
                ));
                let case_dir = bench.work.join(format!("pgbench-{mode}-{rtt}-{clients}"));
                let measured = pgbench(network, &mut cluster, "on", clients, seconds, &case_dir)?;
                let _ = std::fs::remove_dir_all(&case_dir);
                let notes = format!(
                    "pgbench -n -M prepared -j 1 -c {clients} -T {seconds} over TCP to 127.0.0.1, one autocommitted upsert of a {VALUE_BYTES}-byte value to one of {KEYS} keys per transaction; synchronous_commit=on, synchronous_standby_names='{names}' with two streaming standbys s1 and s2 on the standby side: {waits}; {} commits, {} failed",
                    measured.commits, measured.failures
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
