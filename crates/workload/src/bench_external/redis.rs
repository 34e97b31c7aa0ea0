//! Redis with a replica: the servers and their cases.
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

use std::time::Duration;

use linkemu::Side;

use super::load::set_load;
use super::process::{run_ok, wait_until};
use super::{Bench, ExternalCase, KEYS, START_TIMEOUT, VALUE_BYTES, WAIT_TIMEOUT_MS};
use crate::bench_resp::RedisServer;
use crate::network::Network;
use crate::ports::free_port;

/// A redis-cli on one side asking 127.0.0.1:`port` for `INFO replication`.
fn redis_info(network: &Network, side: Side, port: u16) -> anyhow::Result<String> {
    let mut command = network.command(side, "redis-cli");
    command.args(["-p", &port.to_string(), "info", "replication"]);
    run_ok(command, Duration::from_secs(10))
}

pub(super) fn redis_cases(
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
