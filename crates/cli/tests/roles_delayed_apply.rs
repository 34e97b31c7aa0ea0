//! Delayed apply on the real binary: a standby `west` with `delay = "5s"` receives and writes
//! a key the primary `east` commits at once, but serves it only once it is 5 s old; its status
//! shows the delay and an apply lag. Then a key is written, `east` is killed (kill -9) while
//! that key is still held back, and `redoguard failover --to west` applies it before opening
//! and says so: the key is readable on the new primary at once.
//!
//! And a failover refused after it stopped the standby's receiver (its apply could not reach
//! what it received within `replication.failover_apply_wait`) leaves a standby that receives
//! again, not one that stays deaf to its restarted primary. And a failover whose caller goes
//! away part way (the DBA's Ctrl-C) runs to its end all the same.

mod common;
mod roles_support;

use std::time::{Duration, Instant};

use common::Watchdog;
use roles_support::{Cluster, ClusterConfig, MemberSpec};

const DELAY: Duration = Duration::from_secs(5);

fn get(connection: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(connection).unwrap()
}

/// Waits until `name` has received (written durably) the primary's redo up to `scn`.
fn wait_received(cluster: &Cluster, name: &str, scn: u64) {
    let received = common::poll_until(Duration::from_secs(10), || {
        cluster
            .server(name)
            .status()
            .replication
            .standby
            .is_some_and(|standby| standby.received_scn.0 >= scn)
    });
    assert!(received, "{name} did not receive SCN {scn} within 10 s\n{}", cluster.logs());
}

#[test]
fn a_delayed_standby_serves_a_write_only_once_it_is_old_and_a_failover_applies_the_rest() {
    let _watchdog = Watchdog::new(Duration::from_secs(150), "the delayed apply test");
    let mut config = ClusterConfig::pair();
    config.members = vec![
        MemberSpec::new("east", "async", "primary"),
        MemberSpec { extra: "delay = \"5s\"\n", ..MemberSpec::new("west", "async", "standby") },
    ];
    config.protection_mode = "maximum_performance";
    let mut cluster = Cluster::start(config);
    let mut east = common::redis_connection(cluster.resp_addr("east"));
    let mut west = common::redis_connection(cluster.resp_addr("west"));

    let written = Instant::now();
    redis::cmd("SET").arg("delayed").arg("v1").query::<()>(&mut east).unwrap();
    let durable = cluster.server("east").status().database.redo.durable_scn.0;
    wait_received(&cluster, "west", durable);
    // Received at once, applied only after the delay (the standby's estimate of the primary's
    // clock never runs ahead of it, so never before 5 s; 4.5 s leaves room for the test).
    let mut lag_seen = 0.0f64;
    while written.elapsed() < DELAY - Duration::from_millis(500) {
        assert_eq!(get(&mut west, "delayed"), None, "served after {:.1?}", written.elapsed());
        let status = cluster.server("west").status();
        let standby = status.replication.standby.expect("a standby's status");
        assert_eq!(standby.apply_delay_s, DELAY.as_secs_f64());
        lag_seen = lag_seen.max(standby.apply_lag_s);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(lag_seen >= 2.0, "the apply lag shows the held-back redo: {lag_seen} s");
    let served = common::poll_until(Duration::from_secs(10), || {
        get(&mut west, "delayed").as_deref() == Some("v1")
    });
    let after = written.elapsed();
    assert!(served, "never served within {:.1?}\n{}", after, cluster.logs());
    assert!(after >= DELAY - Duration::from_millis(500), "served after {after:.1?}");
    println!(
        "served {after:.2?} after the write (delay {DELAY:?}); apply lag seen {lag_seen:.1} s"
    );

    // A key still held back when the primary is lost: the failover applies it first.
    let written = Instant::now();
    redis::cmd("SET").arg("held").arg("v2").query::<()>(&mut east).unwrap();
    let durable = cluster.server("east").status().database.redo.durable_scn.0;
    wait_received(&cluster, "west", durable);
    assert_eq!(get(&mut west, "held"), None);
    cluster.kill("east");
    cluster.wait_primary_lost("west", Duration::from_secs(10));
    let out = cluster.must(&["failover", "--to", "west"]);
    println!("{out}");
    let took = written.elapsed();
    assert!(took < DELAY, "the failover came {took:.1?} after the write: nothing was held back");
    assert!(out.contains("apply delay of 5 s") && out.contains("held back"), "{out}");
    let mut west = common::redis_connection(cluster.resp_addr("west"));
    assert_eq!(get(&mut west, "held").as_deref(), Some("v2"), "the held-back key after failover");
    assert_eq!(get(&mut west, "delayed").as_deref(), Some("v1"));
    println!("failover {took:.2?} after the write applied it before opening");
}

/// A primary `east` and a standby `west` that holds `batches` × 2 000 SETs back by an apply
/// delay of an hour (`replication_extra` for both), `east` killed once `west` has received them
/// and `west` sure it is gone: a failover to `west` must first apply them all. Returns the
/// cluster and the SCN `west` received up to.
fn held_back_and_primary_lost(replication_extra: &str, batches: usize) -> (Cluster, u64) {
    let mut config = ClusterConfig::pair();
    config.members = vec![
        MemberSpec::new("east", "async", "primary"),
        MemberSpec { extra: "delay = \"1h\"\n", ..MemberSpec::new("west", "async", "standby") },
    ];
    config.protection_mode = "maximum_performance";
    config.replication_extra = replication_extra.into();
    let mut cluster = Cluster::start(config);
    let mut east = common::redis_connection(cluster.resp_addr("east"));
    for batch in 0..batches {
        let mut pipe = redis::pipe();
        for i in 0..2_000 {
            pipe.cmd("SET").arg(format!("k{batch}:{i}")).arg("v").ignore();
        }
        pipe.query::<()>(&mut east).unwrap();
    }
    let durable = cluster.server("east").status().database.redo.durable_scn.0;
    wait_received(&cluster, "west", durable);
    cluster.kill("east");
    cluster.wait_primary_lost("west", Duration::from_secs(10));
    (cluster, durable)
}

#[test]
fn a_failover_refused_for_its_apply_wait_leaves_a_standby_that_receives_again() {
    let _watchdog = Watchdog::new(Duration::from_secs(150), "the refused failover test");
    // No wait at all: the failover refuses while apply is behind what was received (40 000
    // records held back, which its apply takes a while to reach once it lifts the delay).
    let (mut cluster, _) = held_back_and_primary_lost("failover_apply_wait = \"0s\"\n", 20);
    let (ok, stdout, stderr) = cluster.redoguard(&["failover", "--to", "west"]);
    assert!(!ok, "the failover took over with apply behind:\n{stdout}{stderr}");
    assert!(
        format!("{stdout}{stderr}").contains("failover_apply_wait"),
        "the refusal names the setting:\n{stdout}{stderr}"
    );
    assert_eq!(cluster.server("west").status().replication.role, "standby");

    // The old primary comes back: west hears it and receives what it writes next.
    cluster.start_member("east");
    let mut east = common::redis_connection(cluster.resp_addr("east"));
    // It takes writes once west, its one standby, has confirmed that it did not take over
    // (a deaf west never answers, and east answers TRYAGAIN).
    let taken = common::poll_until(Duration::from_secs(20), || {
        redis::cmd("SET").arg("after").arg("v").query::<()>(&mut east).is_ok()
    });
    assert!(taken, "the restarted east never took a write\n{}", cluster.logs());
    let durable = cluster.server("east").status().database.redo.durable_scn.0;
    wait_received(&cluster, "west", durable);
    println!("west received SCN {durable} from the restarted east after the refused failover");
}

#[test]
fn a_failover_whose_caller_goes_away_part_way_runs_to_its_end() {
    let _watchdog = Watchdog::new(Duration::from_secs(200), "the abandoned failover test");
    // Enough redo held back that the failover's apply takes seconds.
    let (cluster, durable) = held_back_and_primary_lost("", 150);

    // The DBA's `redoguard failover`, killed once west is applying what its delay held back.
    let mut failover = std::process::Command::new(common::binary())
        .args(["failover", "--to", "west", "--addr", &cluster.any_addr()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let west_log = cluster.log_path("west");
    let applying = common::poll_until(Duration::from_secs(30), || {
        std::fs::read_to_string(&west_log)
            .is_ok_and(|log| log.contains("applying the redo the apply delay held back"))
    });
    failover.kill().unwrap();
    failover.wait().unwrap();
    assert!(applying, "west never began its failover\n{}", cluster.logs());
    let applied_then = cluster.server("west").status().database.applied_scn.0;
    assert!(applied_then < durable, "west had applied everything before the caller went away");

    // With its caller gone, west still opens as the primary, with every key.
    let primary = common::poll_until(Duration::from_secs(90), || {
        cluster.server("west").status().replication.role == "primary"
    });
    assert!(primary, "west never became the primary\n{}", cluster.logs());
    let mut west = common::redis_connection(cluster.resp_addr("west"));
    assert_eq!(get(&mut west, "k149:1999").as_deref(), Some("v"));
    redis::cmd("SET").arg("after").arg("v").query::<()>(&mut west).unwrap();
    println!(
        "west opened as the primary after its caller went away at SCN {applied_then} of {durable}"
    );
}
