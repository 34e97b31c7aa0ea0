//! Redis Sentinel's trials: Debian's redis-server as a primary and a replica (durable:
//! `appendonly yes`, `appendfsync always`, as in `bench external`), and three redis-sentinel
//! processes (quorum 2) with the tightest sane timing: `down-after-milliseconds 1000` (a
//! Sentinel pings every second, so less only adds false alarms) and `failover-timeout 3000`
//! (long enough for a promotion to be seen: Sentinel reads a replica's INFO every second
//! during a failover; shorter aborts failovers that would succeed).

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use resp::Frame;

use super::writers::{self, Discovery, Writers};
use super::{
    Bench, Case, FAILOVER_LIMIT, Place, SITE_PRIMARY, SITE_STANDBY, SITE_WATCH, Sample, Spawned,
    System, measure_event, wait_until,
};
use crate::bench_resp::{RedisServer, have};
use crate::ports::free_port;

/// The master name the Sentinels monitor.
const MASTER: &str = "bench";
const SENTINELS: usize = 3;
const QUORUM: usize = 2;
const DOWN_AFTER_MS: u64 = 1000;
const FAILOVER_TIMEOUT_MS: u64 = 3000;
/// How long the replica may take to sync, and the Sentinels to find one another.
const READY_LIMIT: Duration = Duration::from_secs(60);

/// Installs redis-server, redis-tools and redis-sentinel from Debian's packages if missing.
pub(super) fn ensure_installed(progress: &mut dyn FnMut(&str)) -> Result<(), String> {
    let present = || ["redis-server", "redis-cli", "redis-sentinel"].into_iter().all(have);
    if present() {
        return Ok(());
    }
    progress("installing redis-server, redis-tools and redis-sentinel from Debian's packages");
    let install = "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server redis-tools redis-sentinel";
    let status = Command::new("sh")
        .arg("-c")
        .arg(install)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    match status {
        Ok(status) if status.success() && present() => Ok(()),
        Ok(status) => Err(format!(
            "`{install}` failed ({status}); is this Debian, as root, with the package registry reachable?"
        )),
        Err(error) => Err(format!("cannot run `{install}`: {error}")),
    }
}

/// One trial of `case` (`Kill` or `Cut`).
pub(super) fn trial(
    bench: &Bench<'_>,
    case: Case,
    place: Place<'_>,
    number: u32,
) -> anyhow::Result<Sample> {
    let dir = bench.trial_dir(System::Redis, case, number)?;
    let binds = |site: usize| {
        let mut binds = vec!["127.0.0.1".to_string()];
        if let Place::Mesh(_) = place {
            binds.push(place.host(site).to_string());
        }
        binds
    };
    let server = |site: usize, name: &str, extra: &[&str]| -> anyhow::Result<RedisServer> {
        let bind = binds(site);
        let bind: Vec<&str> = bind.iter().map(String::as_str).collect();
        RedisServer::start_with(
            place.command(site, "redis-server"),
            || place.command(site, "redis-cli"),
            &bind,
            free_port()?,
            &dir.path().join(name),
            extra,
        )
    };
    let first = server(SITE_PRIMARY, "primary", &[])?;
    let primary_addr = SocketAddr::from((place.host(SITE_PRIMARY), first.port));
    let mut primary = Some(first);
    let (host, port) = (primary_addr.ip().to_string(), primary_addr.port().to_string());
    let replica = server(SITE_STANDBY, "replica", &["--replicaof", &host, &port])?;
    let replica_addr = SocketAddr::from((place.host(SITE_STANDBY), replica.port));
    wait_until("the Redis replica in sync", READY_LIMIT, || {
        Ok(info_replication(replica_addr)?.contains("master_link_status:up"))
    })?;
    let mut sentinels = Vec::new();
    let mut sentinel_addrs = Vec::new();
    for number in 0..SENTINELS {
        let port = free_port()?;
        let path = dir.path().join(format!("sentinel{number}.conf"));
        std::fs::write(&path, sentinel_config(port, &binds(SITE_WATCH), dir.path(), primary_addr))?;
        let mut command = place.command(SITE_WATCH, "redis-sentinel");
        command.arg(&path);
        let log = dir.path().join(format!("sentinel{number}.log"));
        sentinels.push(Spawned::start("redis-sentinel", command, &log, None)?);
        sentinel_addrs.push(SocketAddr::from((place.host(SITE_WATCH), port)));
    }
    let ready = wait_until(
        "the Sentinels watching the primary, its replica and one another",
        READY_LIMIT,
        || {
            for &sentinel in &sentinel_addrs {
                let state = master_state(sentinel)?;
                let field = |name: &str| {
                    state.iter().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
                };
                if field("flags") != Some("master")
                    || field("num-slaves") != Some("1")
                    || field("num-other-sentinels") != Some(&(SENTINELS - 1).to_string())
                {
                    return Ok(false);
                }
            }
            Ok(true)
        },
    );
    let logs = || {
        sentinels
            .iter()
            .enumerate()
            .map(|(number, sentinel)| format!("\n--- sentinel{number}:\n{}", sentinel.tail()))
            .collect::<String>()
    };
    ready.map_err(|error| error.context(logs()))?;

    let writers = Writers::start(
        Discovery::Sentinel { sentinels: sentinel_addrs.clone(), master: MASTER.into() },
        &format!("{}:{number}", case.name()),
        place.clients_namespace(),
    )?;
    let limit = Duration::from_millis(DOWN_AFTER_MS) + FAILOVER_LIMIT;
    let outcome = match case {
        Case::Kill => measure_event(writers, replica_addr, limit, || {
            let started = Instant::now();
            drop(primary.take());
            Ok((started, (), None))
        }),
        Case::Cut => measure_event(writers, replica_addr, limit, || {
            let started = Instant::now();
            Ok((started, place.cut(SITE_PRIMARY, &[SITE_STANDBY, SITE_WATCH]), None))
        }),
        Case::Switchover | Case::Failover => {
            anyhow::bail!("Redis has no {} case here", case.name())
        }
    };
    let outcome = outcome.map_err(|error| error.context(logs()));
    drop(sentinels);
    drop(replica);
    drop(primary);
    drop(dir);
    outcome
}

/// A Sentinel's file (it rewrites it as it learns).
fn sentinel_config(
    port: u16,
    binds: &[String],
    dir: &std::path::Path,
    primary: SocketAddr,
) -> String {
    format!(
        "# Written by `redoguard bench failover`.\nport {port}\nbind {}\ndaemonize no\nprotected-mode no\ndir {}\nlogfile \"\"\nsentinel monitor {MASTER} {} {} {QUORUM}\nsentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\nsentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\nsentinel parallel-syncs {MASTER} 1\n",
        binds.join(" "),
        dir.display(),
        primary.ip(),
        primary.port()
    )
}

fn info_replication(addr: SocketAddr) -> anyhow::Result<String> {
    match writers::ask(addr, &[b"INFO", b"replication"], Duration::from_secs(2))? {
        Frame::Bulk(text) => Ok(String::from_utf8_lossy(&text).into_owned()),
        other => anyhow::bail!("INFO replication answered {other:?}"),
    }
}

/// `SENTINEL master <name>` as pairs.
fn master_state(sentinel: SocketAddr) -> anyhow::Result<Vec<(String, String)>> {
    let reply = writers::ask(
        sentinel,
        &[b"SENTINEL", b"master", MASTER.as_bytes()],
        Duration::from_secs(2),
    )?;
    let Frame::Array(items) = reply else { anyhow::bail!("SENTINEL master answered {reply:?}") };
    let text = |frame: &Frame| match frame {
        Frame::Bulk(bytes) | Frame::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        other => format!("{other:?}"),
    };
    Ok(items
        .chunks(2)
        .filter(|pair| pair.len() == 2)
        .map(|pair| (text(&pair[0]), text(&pair[1])))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_config_monitors_the_primary_with_the_tight_timings() {
        let text = sentinel_config(
            26379,
            &["127.0.0.1".into(), "198.19.0.3".into()],
            std::path::Path::new("/tmp/x"),
            "198.19.0.1:7000".parse().unwrap(),
        );
        assert!(text.contains("bind 127.0.0.1 198.19.0.3\n"));
        assert!(text.contains("sentinel monitor bench 198.19.0.1 7000 2\n"));
        assert!(text.contains("sentinel down-after-milliseconds bench 1000\n"));
    }
}
