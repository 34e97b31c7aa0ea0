//! Several SYNC standbys and the SYNC quorum, on the real binary (docs/sync-transport.md):
//! - `sync_quorum = "any 1"`: with one of two SYNC standbys frozen (SIGSTOP) under load,
//!   commits go on at once with the other, and every acknowledged write is on it;
//! - `sync_quorum = "all"` with `sync_latency`: a frozen standby is dropped from the
//!   synchronized set after the latency, not after `net_timeout`, commits go on, and the
//!   standby synchronizes again by itself once it runs;
//! - kill -9 of the primary at random moments under load, with writes pipelined to two SYNC
//!   AFFIRM standbys: every acknowledged write is on both.

mod common;
mod replication_support;
mod roles_support;

use std::time::{Duration, Instant};

use common::Watchdog;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use replication_support::{ClientLog, Load};
use roles_support::{Cluster, ClusterConfig, MemberSpec};
use transport::Phase;

/// A primary `east` and two SYNC AFFIRM standbys, `west` and `north`.
fn trio(replication_extra: &str, net_timeout: &'static str) -> ClusterConfig {
    ClusterConfig {
        members: vec![
            MemberSpec::new("east", "sync", "primary"),
            MemberSpec::new("west", "sync", "standby"),
            MemberSpec::new("north", "sync", "standby"),
        ],
        net_timeout,
        replication_extra: replication_extra.to_string(),
        ..ClusterConfig::pair()
    }
}

fn phase_of(cluster: &Cluster, primary: &str, name: &str) -> (Phase, Option<String>) {
    let status = cluster.server(primary).status();
    let destination = status
        .replication
        .destinations
        .iter()
        .find(|destination| destination.name == name)
        .unwrap_or_else(|| panic!("{primary} has no destination {name}"));
    (destination.phase, destination.last_error.clone())
}

fn wait_synchronized(cluster: &Cluster, names: &[&str], limit: Duration) {
    let ok = common::poll_until(limit, || {
        names.iter().all(|name| phase_of(cluster, "east", name).0 == Phase::Synchronized)
    });
    assert!(ok, "{names:?} not all SYNCHRONIZED within {limit:?}\n{}", cluster.logs());
}

fn freeze(cluster: &Cluster, name: &str) -> u32 {
    let pid = cluster.server(name).pid();
    common::freeze(pid);
    pid
}

fn verify_on(cluster: &Cluster, name: &str, logs: &[ClientLog]) -> u64 {
    cluster.wait_applied(name, "east", Duration::from_secs(30));
    let mut connection = common::redis_connection(cluster.resp_addr(name));
    replication_support::verify_acknowledged(&mut connection, logs, name)
}

#[test]
fn any_1_goes_on_at_once_when_one_of_two_sync_standbys_freezes() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "any 1 with a frozen standby");
    // net_timeout far longer than the test allows a stall: commits going on prove they did
    // not wait for the frozen standby.
    let cluster = Cluster::start(trio("sync_quorum = \"any 1\"\n", "60s"));
    wait_synchronized(&cluster, &["west", "north"], Duration::from_secs(30));
    let load = Load::start(
        replication_support::connections(cluster.resp_addr("east"), 4),
        "any1",
        common::seed(),
    );
    assert!(load.wait_for_more(100, Duration::from_secs(20)), "no load\n{}", cluster.logs());
    let north = freeze(&cluster, "north");
    let frozen = Instant::now();
    let progressed = load.wait_for_more(200, Duration::from_secs(15));
    let took = frozen.elapsed();
    common::thaw(north);
    let logs = load.stop();
    assert!(
        progressed,
        "commits stalled with north frozen under \"any 1\" (net_timeout 60s)\n{}",
        cluster.logs()
    );
    println!("200 more commits {took:?} after north froze");
    // North stayed synchronized: under "any 1" its lateness cost nothing and it answers
    // again once thawed.
    let checked = verify_on(&cluster, "west", &logs);
    assert!(checked > 0);
    wait_synchronized(&cluster, &["west", "north"], Duration::from_secs(30));
    verify_on(&cluster, "north", &logs);
}

#[test]
fn all_with_sync_latency_drops_a_frozen_standby_after_the_latency_and_it_comes_back() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "sync_latency");
    let cluster = Cluster::start(trio("sync_quorum = \"all\"\nsync_latency = \"300ms\"\n", "60s"));
    wait_synchronized(&cluster, &["west", "north"], Duration::from_secs(30));
    let load = Load::start(
        replication_support::connections(cluster.resp_addr("east"), 4),
        "latency",
        common::seed(),
    );
    assert!(load.wait_for_more(100, Duration::from_secs(20)), "no load\n{}", cluster.logs());
    let north = freeze(&cluster, "north");
    let frozen = Instant::now();
    // The reason is read as the drop is seen: once thawed, north synchronizes again and its
    // error is cleared.
    let mut error = None;
    let dropped = common::poll_until(Duration::from_secs(15), || {
        let (phase, last_error) = phase_of(&cluster, "east", "north");
        error = last_error;
        phase != Phase::Synchronized
    });
    let took = frozen.elapsed();
    let progressed = load.wait_for_more(200, Duration::from_secs(15));
    common::thaw(north);
    let logs = load.stop();
    assert!(dropped, "north was not dropped within 15 s (net_timeout 60s)\n{}", cluster.logs());
    assert!(
        error.as_deref().is_some_and(|error| error.contains("sync_latency")),
        "north was dropped for another reason: {error:?}\n{}",
        cluster.logs()
    );
    assert!(progressed, "commits stalled after north was dropped\n{}", cluster.logs());
    println!("north dropped {took:?} after it froze (sync_latency 300ms, net_timeout 60s)");
    verify_on(&cluster, "west", &logs);
    // Thawed, it catches up and is synchronized again, holding everything.
    wait_synchronized(&cluster, &["west", "north"], Duration::from_secs(30));
    verify_on(&cluster, "north", &logs);
}

#[test]
fn kill_dash_nine_under_pipelined_writes_to_two_sync_standbys_loses_nothing_on_either() {
    let _watchdog = Watchdog::new(Duration::from_secs(150), "kill -9 with two SYNC standbys");
    let seed = common::seed();
    println!("seed {seed} (set REDOGUARD_TEST_SEED to replay the same choices)");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cluster = Cluster::start(trio("", "10s"));
    let mut all_logs: Vec<ClientLog> = Vec::new();
    for round in 0..3 {
        wait_synchronized(&cluster, &["west", "north"], Duration::from_secs(30));
        let load = Load::start(
            replication_support::connections(cluster.resp_addr("east"), 8),
            &format!("k{round}"),
            rng.random(),
        );
        std::thread::sleep(Duration::from_millis(rng.random_range(300..1200)));
        assert!(
            load.wait_for_more(1, Duration::from_secs(20)),
            "round {round}: nothing acknowledged\n{}",
            cluster.logs()
        );
        cluster.kill("east");
        let logs = load.stop();
        for standby in ["west", "north"] {
            block_on_applied(&cluster, standby);
            let mut connection = common::redis_connection(cluster.resp_addr(standby));
            let checked = replication_support::verify_acknowledged(
                &mut connection,
                &logs,
                &format!("round {round}, {standby} after the primary's kill -9"),
            );
            replication_support::verify_acknowledged(&mut connection, &all_logs, standby);
            println!("round {round}: {standby} holds all {checked} acknowledged writes");
        }
        all_logs.extend(logs);
        cluster.start_member("east");
    }
}

/// Waits until a standby has applied everything it received (its primary is gone).
fn block_on_applied(cluster: &Cluster, standby: &str) {
    replication_support::block_on(workload::demo::wait_applied_all_received(
        cluster.server(standby).admin_addr(),
        Duration::from_secs(30),
    ))
    .unwrap_or_else(|error| panic!("{standby}: {error:#}\n{}", cluster.logs()));
}

/// A commit waiting for a frozen SYNC standby holds no runtime worker: on a primary with one
/// worker (the default on two CPUs), reads and the admin API's status answer meanwhile.
#[test]
fn a_commit_waiting_for_a_frozen_sync_standby_holds_no_worker() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "a frozen SYNC standby");
    let cluster = Cluster::start(ClusterConfig { net_timeout: "30s", ..ClusterConfig::pair() });
    cluster.wait_shipping("east", Duration::from_secs(30));
    let mut reader = common::redis_connection(cluster.resp_addr("east"));
    let _: () = redis::cmd("SET").arg("before").arg("1").query(&mut reader).unwrap();
    let west = freeze(&cluster, "west");
    let addr = cluster.resp_addr("east");
    let writer = std::thread::spawn(move || {
        let mut connection = common::redis_connection_with_timeout(addr, Duration::from_secs(60));
        let started = Instant::now();
        let result = redis::cmd("SET").arg("during").arg("1").query::<()>(&mut connection);
        (result.map_err(|error| error.to_string()), started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    if writer.is_finished() {
        let (result, took) = writer.join().unwrap();
        common::thaw(west);
        panic!(
            "the SET did not wait for the frozen SYNC standby: {result:?} after {took:?}; \
             west was {:?}\n{}",
            phase_of(&cluster, "east", "west"),
            cluster.logs()
        );
    }
    let started = Instant::now();
    let value: Option<String> = redis::cmd("GET").arg("before").query(&mut reader).unwrap();
    let read_took = started.elapsed();
    let started = Instant::now();
    let (code, _) = common::http_get(cluster.server("east").admin_addr(), "/status");
    let status_took = started.elapsed();
    common::thaw(west);
    let (result, waited) = writer.join().unwrap();
    assert_eq!(value.as_deref(), Some("1"));
    assert_eq!(code, 200);
    // (Generous bounds for a shared machine: the commit waits up to net_timeout, 30 s.)
    assert!(read_took < Duration::from_secs(5), "a GET took {read_took:?} while a commit waited");
    assert!(status_took < Duration::from_secs(5), "/status took {status_took:?}");
    println!("GET {read_took:?}, /status {status_took:?} while the SET waited {waited:?}");
    assert!(
        result.is_ok(),
        "the SET failed once the standby ran again: {result:?}\n{}",
        cluster.logs()
    );
}
