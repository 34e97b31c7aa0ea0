//! Fast-start failover on the real binary, on loopback: an observer process watches a SYNC
//! AFFIRM pair under Maximum Availability and fails over by itself.
//!
//! - kill -9 of the primary under load, seeded rounds: the observer fails over within the
//!   threshold + 1 s, no acknowledged commit is lost, the old primary comes back and is
//!   reinstated by the observer, and the next round kills the new primary;
//! - a frozen primary (SIGSTOP: to everyone it is as if the network were cut), with clients
//!   writing to it: after the failover, nothing it acknowledges ever again, even once it runs;
//! - an old primary that comes back while clients still talk to it refuses every write until
//!   it is reinstated;
//! - writers using redis-py's `Sentinel` (its defaults: RESP3) and ioredis carry on against the
//!   new primary, through a Sentinel front and members that require passwords;
//! - with two observers, the second takes over when the first is lost, and then fails over.
//!
//! Partitions that cut some parties but not others are in `fast_start_partitions.rs` (linkemu).

mod common;
mod replication_support;
mod roles_support;

use std::time::{Duration, Instant};

use common::Watchdog;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use replication_support::{Load, acknowledged, connections, verify_acknowledged};
use roles_support::{Cluster, ClusterConfig, all_data};

/// The primary, as the observer's Sentinel front names it (waiting for it to name one), once
/// fast-start failover is armed: the standby knows it is synchronized and which observer is
/// active, and the observer would fail over to it (the primary has called it synchronized
/// since the last grant to go on without it).
fn sentinel_primary(cluster: &Cluster, limit: Duration) -> &'static str {
    let mut named = None;
    common::poll_until(limit, || {
        named = cluster.sentinel_master("obs1").and_then(|addr| cluster.member_at(addr));
        named.is_some()
    });
    let primary =
        named.unwrap_or_else(|| panic!("the observer names no primary\n{}", cluster.logs()));
    let standby = if primary == "east" { "west" } else { "east" };
    cluster.wait_armed_to(standby, limit);
    primary
}

/// Waits until `name` is a standby of `primary` with everything applied.
fn reinstated(cluster: &Cluster, name: &str, primary: &str) {
    let ok = common::poll_until(Duration::from_secs(60), || {
        let status = cluster.server(name).status();
        status.replication.standby.as_ref().is_some_and(|standby| {
            standby.primary_member.as_deref() == Some(primary) && standby.connected
        }) && status.roles.as_ref().is_some_and(|roles| roles.fenced.is_none())
    });
    assert!(ok, "{name} was not reinstated as a standby of {primary}\n{}", cluster.logs());
    cluster.wait_applied(name, primary, Duration::from_secs(60));
}

#[test]
fn kill_dash_nine_with_the_observer_fails_over_within_the_threshold_and_loses_nothing() {
    let _watchdog = Watchdog::new(Duration::from_secs(300), "fast-start failover after kill -9");
    let seed = common::seed();
    println!("seed {seed} (set REDOGUARD_TEST_SEED to replay the same choices)");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cluster = Cluster::start(ClusterConfig::pair_with_observer());
    let threshold = Duration::from_secs(2);
    for round in 0..3 {
        let primary = sentinel_primary(&cluster, Duration::from_secs(30));
        let standby = if primary == "east" { "west" } else { "east" };
        cluster.wait_shipping(primary, Duration::from_secs(60));
        let load = Load::start(
            connections(cluster.resp_addr(primary), 4),
            &format!("round{round}"),
            rng.random(),
        );
        assert!(load.wait_for_more(100, Duration::from_secs(30)), "no load\n{}", cluster.logs());
        std::thread::sleep(Duration::from_millis(rng.random_range(50..1000)));
        // Still armed: a standby that fell behind under the load (the primary then goes on
        // without it, with the observer's grant) is rightly not failed over to, which is not
        // what this test is about.
        let armed = common::poll_until(Duration::from_secs(30), || {
            cluster.failover_ready("obs1").iter().any(|name| name == standby)
        });
        assert!(armed, "the observer would not fail over to {standby}\n{}", cluster.logs());
        let killed = Instant::now();
        cluster.kill(primary);
        let logs = load.stop();
        let outage = cluster.failed_over_to(standby, killed, threshold + Duration::from_secs(10));
        println!(
            "round {round}: {primary} killed; {standby} took writes {outage:?} later ({} acknowledged before)",
            acknowledged(&logs)
        );
        assert!(
            outage < threshold + Duration::from_secs(1),
            "the failover took {outage:?}\n{}",
            cluster.logs()
        );
        let checked = verify_acknowledged(
            &mut common::redis_connection(cluster.resp_addr(standby)),
            &logs,
            "the new primary",
        );
        assert!(checked >= acknowledged(&logs));
        // The old primary comes back and the observer reinstates it.
        cluster.start_member(primary);
        reinstated(&cluster, primary, standby);
    }
    let ours = all_data(&mut common::redis_connection(cluster.resp_addr("east")));
    let theirs = all_data(&mut common::redis_connection(cluster.resp_addr("west")));
    assert!(ours == theirs, "east and west hold different data");
}

#[test]
fn a_frozen_primary_acknowledges_nothing_once_the_observer_has_failed_over() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "a frozen primary");
    let cluster = Cluster::start(ClusterConfig::pair_with_observer());
    assert_eq!(sentinel_primary(&cluster, Duration::from_secs(30)), "east");
    // Clients of the old primary go on trying for the whole test, each write timed.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|number| {
            let (stop, addr) = (stop.clone(), cluster.resp_addr("east"));
            std::thread::spawn(move || {
                // Each acknowledged write with when it was sent: a reply that was on its way
                // when the process froze may arrive late, but no write sent after the
                // failover may be acknowledged.
                let mut acknowledged: Vec<(String, Instant)> = Vec::new();
                let mut sequence = 0;
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    let mut connection =
                        common::redis_connection_with_timeout(addr, Duration::from_secs(3));
                    while !stop.load(std::sync::atomic::Ordering::Acquire) {
                        let key = format!("frozen:{number}:{sequence}");
                        sequence += 1;
                        let sent = Instant::now();
                        match redis::cmd("SET").arg(&key).arg(&key).query::<()>(&mut connection) {
                            Ok(()) => acknowledged.push((key, sent)),
                            Err(_) => break,
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                acknowledged
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(800));
    let east = cluster.server("east").pid();
    common::freeze(east);
    let frozen = Instant::now();
    let outage = cluster.failed_over_to("west", frozen, Duration::from_secs(20));
    let new_primary_took_writes = Instant::now();
    println!("east frozen; west took writes {outage:?} later");
    common::thaw(east);
    // The old primary runs again, its clients still at it: for a few seconds it must not
    // acknowledge a single write.
    std::thread::sleep(Duration::from_secs(4));
    stop.store(true, std::sync::atomic::Ordering::Release);
    let acknowledged: Vec<(String, Instant)> =
        writers.into_iter().flat_map(|writer| writer.join().unwrap()).collect();
    let late: Vec<&(String, Instant)> =
        acknowledged.iter().filter(|(_, at)| *at >= new_primary_took_writes).collect();
    assert!(
        late.is_empty(),
        "the old primary acknowledged {} writes sent after the new one took writes: {:?}\n{}",
        late.len(),
        &late[..late.len().min(5)],
        cluster.logs()
    );
    // And nothing it acknowledged before is lost.
    let mut west = common::redis_connection(cluster.resp_addr("west"));
    for (key, _) in &acknowledged {
        let value: Option<String> = redis::cmd("GET").arg(key).query(&mut west).unwrap();
        assert_eq!(
            value.as_deref(),
            Some(key.as_str()),
            "{key}, acknowledged by the old primary, is missing on the new one"
        );
    }
    println!(
        "{} writes acknowledged by the old primary before it froze, all on the new one",
        acknowledged.len()
    );
}

#[test]
fn an_old_primary_that_comes_back_refuses_every_write_until_it_is_reinstated() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "an old primary comes back");
    let mut cluster = Cluster::start(ClusterConfig {
        auto_reinstate: false,
        ..ClusterConfig::pair_with_observer()
    });
    assert_eq!(sentinel_primary(&cluster, Duration::from_secs(30)), "east");
    let killed = Instant::now();
    cluster.kill("east");
    cluster.failed_over_to("west", killed, Duration::from_secs(20));
    cluster.start_member("east");
    // Clients that still talk to east: every write refused, for as long as they try.
    let tried = Instant::now();
    let mut refusals = 0;
    while tried.elapsed() < Duration::from_secs(3) {
        let mut connection = common::redis_connection(cluster.resp_addr("east"));
        match redis::cmd("SET").arg("to the old primary").arg("1").query::<()>(&mut connection) {
            Ok(()) => panic!("the old primary took a write\n{}", cluster.logs()),
            Err(error) => {
                let text = error.to_string().to_ascii_lowercase();
                assert!(text.contains("readonly") || text.contains("tryagain"), "{error}");
                // A READONLY names the primary it knows of, for the client to go there.
                assert!(!text.contains("readonly") || text.contains("'west'"), "{error}");
                refusals += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(refusals > 10);
    let out = cluster.must(&["reinstate", "east"]);
    println!("{out}");
    reinstated(&cluster, "east", "west");
    let mut west = common::redis_connection(cluster.resp_addr("west"));
    let value: Option<String> =
        redis::cmd("GET").arg("to the old primary").query(&mut west).unwrap();
    assert_eq!(value, None);
}

/// A writer of another process (a client library through the Sentinel front), started now.
struct ClientWriter {
    library: &'static str,
    child: std::process::Child,
    out: std::path::PathBuf,
}

impl ClientWriter {
    /// `program script SENTINEL_PORT cluster SECONDS OUT SENTINEL_PASSWORD PASSWORD`.
    fn start(
        cluster: &Cluster,
        library: &'static str,
        program: &str,
        script: &str,
    ) -> ClientWriter {
        let out = cluster.root.path().join(format!("{library}.json"));
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
        let child = std::process::Command::new(program)
            .arg(&script)
            .arg(cluster.sentinel_ports["obs1"].to_string())
            .arg("cluster")
            .arg("8")
            .arg(&out)
            .arg(SENTINEL_PASSWORD)
            .arg(PASSWORD)
            .spawn()
            .unwrap_or_else(|error| {
                panic!("{program} {script:?} (scripts/setup installs {library}): {error}")
            });
        common::register_kill(child.id());
        ClientWriter { library, child, out }
    }

    /// Waits for the writer and checks that it went on against `primary` after the failover
    /// and that everything it was acknowledged is on `primary`.
    fn check(mut self, cluster: &Cluster, primary: &str) {
        let status = self.child.wait().unwrap();
        common::unregister_kill(self.child.id());
        assert!(status.success(), "the {} writer failed: {status}", self.library);
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&self.out).unwrap()).unwrap();
        let acknowledged = report["acknowledged"].as_array().unwrap();
        let errors = report["errors"].as_array().unwrap();
        let port = cluster.ports[primary].resp;
        let on_primary =
            acknowledged.iter().filter(|entry| entry[2].as_u64() == Some(u64::from(port))).count();
        println!(
            "{}: {} writes acknowledged ({on_primary} by the new primary), {} errors, the first {:?}",
            self.library,
            acknowledged.len(),
            errors.len(),
            errors.first()
        );
        assert!(
            on_primary > 10,
            "the {} writer did not carry on against the new primary: {report}",
            self.library
        );
        let mut connection = common::redis_connection_as(cluster.resp_addr(primary), PASSWORD);
        for entry in acknowledged {
            let key = entry[0].as_str().unwrap();
            let value: Option<String> = redis::cmd("GET").arg(key).query(&mut connection).unwrap();
            assert_eq!(
                value.as_deref(),
                Some(key),
                "{key} was acknowledged to {} and is missing",
                self.library
            );
        }
    }
}

const PASSWORD: &str = "the members' password";
const SENTINEL_PASSWORD: &str = "the sentinel's password";

/// redis-py (its `Sentinel` with its defaults: RESP3, so `HELLO 3 AUTH …`, and `CLIENT SETINFO`)
/// and ioredis (RESP2, `AUTH`, the `+switch-master` subscription), each writing through a
/// kill -9 of the primary: both find the new primary by themselves, and nothing either was
/// acknowledged is lost.
#[test]
fn redis_py_and_ioredis_writers_carry_on_against_the_new_primary() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "client libraries through a failover");
    let mut cluster = Cluster::start(ClusterConfig {
        auth_extra: format!("requirepass = \"{PASSWORD}\"\n"),
        sentinel_password: Some(SENTINEL_PASSWORD),
        ..ClusterConfig::pair_with_observer()
    });
    assert_eq!(sentinel_primary(&cluster, Duration::from_secs(30)), "east");
    let writers = [
        ClientWriter::start(&cluster, "redis-py", "python3", "tests/python/sentinel_writer.py"),
        ClientWriter::start(&cluster, "ioredis", "node", "tests/node/sentinel_writer.js"),
    ];
    std::thread::sleep(Duration::from_secs(2));
    cluster.kill("east");
    for writer in writers {
        writer.check(&cluster, "west");
    }
}

/// Connections to the Sentinel front that never authenticate: each newcomer beyond 64 ends the
/// oldest, and a client that gives the password still finds the primary at once. Before, 256
/// idle strangers held every slot for 10 s (renewable) and a client's connection was reset
/// without a word (found by a hostile-input audit).
#[test]
fn idle_strangers_do_not_keep_sentinel_clients_out() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "idle Sentinel strangers");
    let cluster = Cluster::start(ClusterConfig {
        sentinel_password: Some(SENTINEL_PASSWORD),
        ..ClusterConfig::pair_with_observer()
    });
    assert_eq!(sentinel_primary(&cluster, Duration::from_secs(30)), "east");
    let addr = cluster.sentinel_addr("obs1");
    let idle: Vec<std::net::TcpStream> =
        (0..300).filter_map(|_| std::net::TcpStream::connect(addr).ok()).collect();
    assert_eq!(idle.len(), 300);
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let master = cluster.sentinel_master("obs1").and_then(|addr| cluster.member_at(addr));
    assert_eq!(master, Some("east"), "a client with the password did not find the primary");
    assert!(started.elapsed() < Duration::from_secs(2), "{:.1?}", started.elapsed());
    drop(idle);
}

/// A stranger that pipelines requests to the Sentinel front and never reads the replies is
/// closed 10 s after it connected, as a silent one is. Before, its connection waited in the
/// write with no deadline, holding one of the front's 256 slots for good: 256 of them kept
/// every Sentinel client out (found by reading what a stranger can hold).
#[test]
fn a_sentinel_stranger_that_never_reads_is_closed_at_its_deadline() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "a Sentinel stranger that never reads");
    let cluster = Cluster::start(ClusterConfig {
        sentinel_password: Some(SENTINEL_PASSWORD),
        ..ClusterConfig::pair_with_observer()
    });
    assert_eq!(sentinel_primary(&cluster, Duration::from_secs(30)), "east");
    let addr = cluster.sentinel_addr("obs1");
    let connected = Instant::now();
    let mut stranger = common::raw(addr);
    let port = stranger.local_addr().unwrap().port();
    let sent = common::send_until_stalled(&mut stranger, b"PING\r\n");
    assert!(common::tcp_established(addr.port(), port), "closed before its deadline");
    let closed =
        common::poll_until(Duration::from_secs(25), || !common::tcp_established(addr.port(), port));
    assert!(
        closed,
        "the Sentinel front still holds a stranger that sent {sent} bytes and never read, {:.1?} after it connected",
        connected.elapsed()
    );
    println!("closed {:.1?} after it connected ({sent} bytes sent)", connected.elapsed());
    assert!(connected.elapsed() < Duration::from_secs(16), "{:.1?}", connected.elapsed());
    drop(stranger);
}

/// The observer the primary takes decisions from, as its status says.
fn active_observer(cluster: &Cluster, primary: &str) -> Option<String> {
    cluster
        .server(primary)
        .status()
        .roles
        .and_then(|roles| roles.fast_start)
        .and_then(|fast_start| fast_start.observer)
}

#[test]
fn a_second_observer_takes_over_when_the_first_is_lost_and_then_fails_over() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "two observers");
    let mut cluster =
        Cluster::start(ClusterConfig { observers: vec!["obs1", "obs2"], ..ClusterConfig::pair() });
    // Whichever observer the primary took first stays active while it lives (a hand-over
    // needs the first one's lease to lapse).
    let mut first = None;
    let armed = common::poll_until(Duration::from_secs(30), || {
        first = active_observer(&cluster, "east");
        first.is_some()
            && cluster
                .server("west")
                .status()
                .replication
                .standby
                .is_some_and(|standby| standby.caught_up && standby.active_observer == first)
    });
    assert!(armed, "no observer became active\n{}", cluster.logs());
    let (first, second) =
        if first.as_deref() == Some("obs1") { ("obs1", "obs2") } else { ("obs2", "obs1") };
    // The other one watches and answers Sentinel clients, but acts on nothing.
    let named = cluster.sentinel_master(second).and_then(|addr| cluster.member_at(addr));
    assert_eq!(named, Some("east"));
    let lost = Instant::now();
    cluster.kill_observer(first);
    let handed_over = common::poll_until(Duration::from_secs(30), || {
        active_observer(&cluster, "east").as_deref() == Some(second)
            && cluster
                .server("west")
                .status()
                .replication
                .standby
                .is_some_and(|standby| standby.active_observer.as_deref() == Some(second))
            && cluster.failover_ready(second).iter().any(|name| name == "west")
    });
    assert!(handed_over, "{second} did not take over from {first}\n{}", cluster.logs());
    println!("{second} active {:?} after {first} was killed", lost.elapsed());
    // The primary never stopped taking writes: its SYNC standby acknowledged them all.
    let load = Load::start(connections(cluster.resp_addr("east"), 4), "two", 7);
    assert!(load.wait_for_more(100, Duration::from_secs(30)), "no load\n{}", cluster.logs());
    let killed = Instant::now();
    cluster.kill("east");
    let logs = load.stop();
    let mut took_writes = None;
    let ok = common::poll_until(Duration::from_secs(15), || {
        let named = cluster.sentinel_master(second).and_then(|addr| cluster.member_at(addr));
        if named != Some("west") {
            return false;
        }
        let mut connection = common::redis_connection(cluster.resp_addr("west"));
        let written = redis::cmd("SET")
            .arg("after the second observer's failover")
            .arg("1")
            .query::<()>(&mut connection);
        took_writes = Some(killed.elapsed());
        written.is_ok()
    });
    assert!(ok, "{second} did not fail over to west\n{}", cluster.logs());
    println!("west took writes {:?} after east was killed", took_writes.unwrap());
    verify_acknowledged(&mut common::redis_connection(cluster.resp_addr("west")), &logs, "west");
}
