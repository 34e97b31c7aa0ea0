//! Fast-start failover through a far sync on the linkemu mesh (issue 33's set-up), real
//! processes, each member and the observer in a site of its own: the primary `a` —1 ms— the
//! far sync `fs` —50 ms— the terminal `t` (and `a` —50 ms— `t`); the observer and the clients'
//! site 1 ms from every member, as in `fast_start_partitions.rs`. `a` ships SYNC AFFIRM to
//! `fs`, which forwards ASYNC to `t`, the observer's only target; Maximum Availability
//! (docs/fast-start-failover.md, "Targets behind a far sync").
//!
//! - kill -9 of `a` under load: the observer fails over to `t` by itself, `t` seals `fs` and
//!   takes its tail over the 50 ms link, every write `a` acknowledged is on `t`, and the time
//!   without writes (from the kill to `t`'s first acknowledged write) is printed;
//! - `a` alive but cut from `fs`, the observer and `t` (not from its clients), clients writing
//!   to `a` and to `t` all along: `a` stops acknowledging (no far sync, no lease, no grant), the
//!   observer fails over to `t`, which takes `fs`'s tail; no write `a` acknowledged was sent
//!   after `t` had started acknowledging, and every acknowledged write is on `t`;
//! - `a` cut from `fs` alone: `a` goes on under the observer's grant, no failover, `t` stays a
//!   standby; healed, failover to `t` is armed again and `t` holds every acknowledged write.
//!
//! linkemu needs root, `/dev/net/tun` and `ip`: without them these tests fail, saying why.

mod common;
mod far_sync_support;
mod partition_support;
mod replication_support;
mod roles_support;

use std::time::{Duration, Instant};

use common::Watchdog;
use far_sync_support::{kill_a_under_load, sealed_the_far_sync_first, through_a_far_sync};
use partition_support::{SERIAL, Writers, check_nothing_lost, check_reigns, named_primary};
use replication_support::{acknowledged, verify_acknowledged};
use roles_support::{Cluster, ClusterConfig};

/// The far sync and the terminal, and the primary and the terminal, are 50 ms apart; every
/// other link is 1 ms.
const FAR: Duration = Duration::from_millis(50);
const FAR_PAIRS: [(&str, &str); 2] = [("fs", "t"), ("a", "t")];

fn on_the_mesh(net_timeout: &'static str) -> Cluster {
    let cluster = Cluster::start_on_mesh(
        ClusterConfig { log_file_size: "4MiB", ..through_a_far_sync(net_timeout) },
        &FAR_PAIRS,
        FAR,
    );
    // The set-up is what it says: a TCP handshake takes one round trip. linkemu hands a packet
    // over up to its timer's learnt lateness (at most 0.5 ms) before it is due, so that it is
    // not late: a round trip may measure up to 1 ms short (49.95 ms was seen).
    let (near, far) = (connect_time(&cluster, "a", "fs"), connect_time(&cluster, "fs", "t"));
    let early = Duration::from_millis(1);
    assert!(near < FAR / 2 && far >= FAR - early, "a—fs connects in {near:?}, fs—t in {far:?}");
    println!("a—fs connects in {near:.1?}, fs—t in {far:.1?}");
    cluster
}

/// Waits until failover to `t` is armed, then starts clients writing to `a` and to `t` (which
/// refuses them while a standby) and lets them write for a second: the writers, and the time
/// after that second.
fn armed_and_written_to(cluster: &Cluster) -> (Writers, Instant) {
    cluster.wait_armed_to("t", Duration::from_secs(60));
    let writers = Writers::start(cluster, &["a", "t"]);
    std::thread::sleep(Duration::from_secs(1));
    (writers, Instant::now())
}

/// How long a TCP connection from the site of `from` to the client port of `to` takes to open.
fn connect_time(cluster: &Cluster, from: &str, to: &str) -> Duration {
    let (mesh, address) = (cluster.mesh.as_ref().expect("a mesh cluster"), cluster.resp_addr(to));
    mesh.run_in(cluster.sites[from], || {
        let started = Instant::now();
        std::net::TcpStream::connect_timeout(&address, Duration::from_secs(5))
            .unwrap_or_else(|error| panic!("connecting from {from} to {to}: {error}"));
        started.elapsed()
    })
    .unwrap_or_else(|error| panic!("entering the site of {from}: {error}"))
}

#[test]
fn on_the_mesh_the_observer_fails_over_to_the_terminal_50_ms_behind_the_far_sync_and_loses_nothing_acknowledged()
 {
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _watchdog = Watchdog::new(Duration::from_secs(240), "fast-start through a far sync, mesh");
    let mut cluster = on_the_mesh("10s");
    // Still armed after 2000 writes: `t`, 50 ms behind `fs`, keeps up with it.
    let (logs, killed) = kill_a_under_load(&mut cluster, 8, 2000, "mesh");
    let without_writes = cluster.failed_over_to("t", killed, Duration::from_secs(30));
    sealed_the_far_sync_first(&cluster);
    let acknowledged_writes = acknowledged(&logs);
    assert!(acknowledged_writes >= 2000, "only {acknowledged_writes} writes acknowledged");
    let checked = verify_acknowledged(
        &mut common::redis_connection(cluster.resp_addr("t")),
        &logs,
        "t, failed over to by the observer",
    );
    assert_eq!(checked, acknowledged_writes);
    println!(
        "fast-start through a far sync on the mesh: a killed with -9; the observer failed over to t (50 ms behind fs), which took writes {:.0} ms later; all {acknowledged_writes} writes a acknowledged are on t",
        without_writes.as_secs_f64() * 1000.0
    );
}

#[test]
fn on_the_mesh_the_primary_cut_from_its_far_sync_and_the_observer_stops_before_the_terminal_starts()
{
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _watchdog = Watchdog::new(Duration::from_secs(240), "primary cut from its far sync, mesh");
    // `a` drops `fs` after 2 s and then needs the observer's grant to go on without `t`: the
    // observer, cut off, gives none.
    let cluster = on_the_mesh("2s");
    let (writers, start) = armed_and_written_to(&cluster);
    cluster.cut("a", &["fs", "obs1", "t"]);
    println!("a cut from fs, obs1 and t (a still reaches the clients; fs still reaches t)");
    let first_write = cluster.failed_over_to("t", start, Duration::from_secs(30));
    println!(
        "the observer names t, which takes a write {:.2} s after the cut",
        first_write.as_secs_f64()
    );
    // Both sides go on being written to for a while (a still cut off).
    std::thread::sleep(Duration::from_secs(3));
    let acks = writers.stop();
    sealed_the_far_sync_first(&cluster);
    check_reigns(&acks, start, &cluster);
    let last_of_a = acks.iter().filter(|ack| ack.member == "a").map(|ack| ack.acked).max();
    let first_of_t = acks.iter().filter(|ack| ack.member == "t").map(|ack| ack.acked).min();
    let (Some(last_of_a), Some(first_of_t)) = (last_of_a, first_of_t) else {
        panic!("a or t acknowledged no write\n{}", cluster.logs())
    };
    println!(
        "  a's last acknowledged write {:+.3} s from the cut; t's first {:+.3} s: {:.2} s without writes",
        seconds_from(start, last_of_a),
        seconds_from(start, first_of_t),
        first_of_t.saturating_duration_since(last_of_a).as_secs_f64()
    );
    check_nothing_lost(&acks, &cluster, "t");
}

/// `a` cut from its far sync alone, the observer still reaching it: `a` drops `fs` after
/// `net_timeout`, asks the observer to go on without `t`, is granted it and goes on; the
/// observer does not fail over (it reaches `a`), so `t` stays a standby. Once the link is back
/// `fs` catches up, `a` calls `t` synchronized again, fast-start failover to `t` is armed again,
/// and `t` holds every acknowledged write.
#[test]
fn on_the_mesh_the_primary_cut_from_its_far_sync_alone_goes_on_under_a_grant_without_a_failover() {
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _watchdog = Watchdog::new(Duration::from_secs(240), "primary cut from fs alone, mesh");
    let cluster = on_the_mesh("2s");
    let (writers, start) = armed_and_written_to(&cluster);
    cluster.cut("a", &["fs"]);
    println!("a cut from fs");
    // net_timeout (2 s), the grant, and writes after it; no failover meanwhile.
    std::thread::sleep(Duration::from_secs(8));
    assert_eq!(named_primary(&cluster, Duration::from_secs(5)), Some("a"), "{}", cluster.logs());
    assert!(
        !cluster.failover_ready("obs1").iter().any(|name| name == "t"),
        "the observer counts on t, which lacks what a acknowledged under the grant\n{}",
        cluster.logs()
    );
    assert!(
        cluster.server("t").status().replication.standby.is_some(),
        "t is not a standby any more\n{}",
        cluster.logs()
    );
    cluster.restore("a", &["fs"]);
    let healed = Instant::now();
    println!("a—fs restored at {:.2} s", seconds_from(start, healed));
    cluster.wait_armed_to("t", Duration::from_secs(60));
    println!("armed again {:.2} s after the link came back", healed.elapsed().as_secs_f64());
    let acks = writers.stop();
    check_reigns(&acks, start, &cluster);
    assert!(acks.iter().all(|ack| ack.member == "a"), "t acknowledged a write");
    let during_cut = acks
        .iter()
        .filter(|ack| ack.sent > start + Duration::from_secs(3) && ack.acked < healed)
        .count();
    let mut times: Vec<Instant> =
        acks.iter().map(|ack| ack.acked).filter(|at| *at > start).collect();
    times.sort();
    let first = times.first().map_or(Duration::ZERO, |at| at.duration_since(start));
    let longest =
        times.windows(2).map(|pair| pair[1] - pair[0]).max().unwrap_or_default().max(first);
    println!(
        "  a acknowledged {during_cut} writes from 3 s into the cut until it was healed; its longest pause after the cut: {:.2} s (net_timeout 2 s, then the grant)",
        longest.as_secs_f64()
    );
    assert!(during_cut > 0, "a took no write while its far sync was cut off\n{}", cluster.logs());
    cluster.wait_applied("t", "a", Duration::from_secs(60));
    check_nothing_lost(&acks, &cluster, "t");
}

/// `at` from `start`, in seconds, negative if before.
fn seconds_from(start: Instant, at: Instant) -> f64 {
    match at.checked_duration_since(start) {
        Some(after) => after.as_secs_f64(),
        None => -start.duration_since(at).as_secs_f64(),
    }
}
