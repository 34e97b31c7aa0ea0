//! Fast-start failover to a terminal standby behind a far sync, on the real binary (loopback):
//! `a` ships SYNC AFFIRM to the far sync `fs`, which forwards ASYNC to `t`; Maximum
//! Availability; one observer whose only target is `t` (docs/fast-start-failover.md, "Targets
//! behind a far sync").
//!
//! - kill -9 of `a` under load: the observer fails over to `t` by itself, `t` seals `fs` and
//!   takes its tail first, and every write `a` acknowledged is on `t`; the time from the kill to
//!   `t`'s first acknowledged write is printed;
//! - `fs` killed first: `a` asks the observer to go on without `t` (its acknowledgements came
//!   through `fs`), is granted it, and goes on; `a` then killed, the observer does not fail over
//!   to `t`, which lacks writes `a` acknowledged;
//! - `t` killed and restarted while clients write: failover to it is armed again while they
//!   write on (the far sync, never idle, still sends its heartbeats, which carry the primary's
//!   word for `t`);
//! - Maximum Performance, `fs` shipped ASYNC: `a` killed, no refused port counts, so the
//!   observer waits out the threshold, and `t` takes the failover once *its primary's* silence,
//!   as `fs` reports it, is past the threshold (`fs` itself goes on talking to `t`).

mod common;
mod far_sync_support;
mod replication_support;
mod roles_support;

use std::time::Duration;

use common::Watchdog;
use far_sync_support::{
    kill_a_under_load, sealed_the_far_sync_first, through_a_far_sync, through_a_far_sync_shipped,
};
use replication_support::{Load, acknowledged, connections, verify_acknowledged};
use roles_support::{Cluster, ClusterConfig};

#[test]
fn the_observer_fails_over_to_a_terminal_behind_a_far_sync_and_loses_nothing_acknowledged() {
    let _watchdog =
        Watchdog::new(Duration::from_secs(240), "fast-start failover through a far sync");
    let mut cluster = Cluster::start(through_a_far_sync("10s"));
    let (logs, killed) = kill_a_under_load(&mut cluster, 4, 300, "far");
    let outage = cluster.failed_over_to("t", killed, Duration::from_secs(30));
    sealed_the_far_sync_first(&cluster);
    let checked = verify_acknowledged(
        &mut common::redis_connection(cluster.resp_addr("t")),
        &logs,
        "t, failed over to by the observer",
    );
    assert!(checked >= acknowledged(&logs));
    println!(
        "far sync: a killed with -9; the observer failed over to t, which took writes {:.0} ms later; all {} writes a acknowledged are on t",
        outage.as_secs_f64() * 1000.0,
        acknowledged(&logs)
    );
}

#[test]
fn with_the_far_sync_lost_first_the_observer_does_not_fail_over_to_the_terminal() {
    let _watchdog = Watchdog::new(Duration::from_secs(240), "the far sync lost, then the primary");
    let mut cluster = Cluster::start(through_a_far_sync("2s"));
    cluster.wait_armed_to("t", Duration::from_secs(60));
    let load = Load::start(connections(cluster.resp_addr("a"), 4), "lost", common::seed());
    assert!(load.wait_for_more(100, Duration::from_secs(30)), "no load\n{}", cluster.logs());
    cluster.kill("fs");
    // `a` times out `fs`, asks to go on without `t`, is granted it: writes go on that `t` can
    // never have (nothing else ships to it), and the observer no longer counts on `t`.
    assert!(
        load.wait_for_more(200, Duration::from_secs(30)),
        "a did not go on without its far sync\n{}",
        cluster.logs()
    );
    let ineligible = common::poll_until(Duration::from_secs(10), || {
        !cluster.failover_ready("obs1").iter().any(|name| name == "t")
    });
    assert!(ineligible, "the observer still counts on t\n{}", cluster.logs());
    cluster.kill("a");
    let logs = load.stop();
    // Well past the point where the observer would have failed over (a's port refuses at once;
    // 1.2 × the 2 s threshold otherwise).
    std::thread::sleep(Duration::from_secs(8));
    let t_status = cluster.server("t").status();
    assert!(
        t_status.replication.standby.is_some(),
        "t took over without the writes a acknowledged through the grant\n{}",
        cluster.logs()
    );
    assert_ne!(
        cluster.sentinel_master("obs1").and_then(|addr| cluster.member_at(addr)),
        Some("t"),
        "the observer names t as the primary\n{}",
        cluster.logs()
    );
    // What t lacks is why: writes a acknowledged after fs was lost.
    let mut connection = common::redis_connection(cluster.resp_addr("t"));
    let mut missing = 0;
    for log in &logs {
        for key in &log.keys {
            let held: bool = redis::cmd("EXISTS").arg(key).query(&mut connection).unwrap();
            missing += usize::from(!held);
        }
    }
    assert!(missing > 0, "t holds every acknowledged write: the refusal was not tested");
    let observer_log = std::fs::read_to_string(cluster.log_path("obs1")).unwrap_or_default();
    println!(
        "far sync lost first: {} writes acknowledged, {missing} of the SETs not on t; t is still a standby; the observer said: {}",
        acknowledged(&logs),
        observer_log
            .lines()
            .rev()
            .find(|line| line.contains("the primary is lost"))
            .unwrap_or("(nothing about a lost primary)")
    );
}

#[test]
fn under_maximum_performance_the_target_behind_a_far_sync_waits_for_its_primarys_silence() {
    let _watchdog =
        Watchdog::new(Duration::from_secs(240), "maximum performance through a far sync");
    let mut cluster = Cluster::start(ClusterConfig {
        protection_mode: "maximum_performance",
        ..through_a_far_sync_shipped("async", "10s")
    });
    let (logs, killed) = kill_a_under_load(&mut cluster, 4, 300, "perf");
    let outage = cluster.failed_over_to("t", killed, Duration::from_secs(30));
    // Not before the threshold (2 s): t, hearing fs all along, counted a's silence.
    assert!(outage >= Duration::from_secs(2), "failed over after {outage:?}\n{}", cluster.logs());
    sealed_the_far_sync_first(&cluster);
    // Maximum Performance may lose what a acknowledged and had not shipped; count it.
    let mut connection = common::redis_connection(cluster.resp_addr("t"));
    let mut missing = 0;
    for log in &logs {
        for key in &log.keys {
            let held: bool = redis::cmd("EXISTS").arg(key).query(&mut connection).unwrap();
            missing += usize::from(!held);
        }
    }
    println!(
        "maximum performance through a far sync: a killed with -9; t took writes {:.0} ms later; {missing} of {} acknowledged SETs not on t",
        outage.as_secs_f64() * 1000.0,
        logs.iter().map(|log| log.keys.len()).sum::<usize>()
    );
}

/// A new session behind the far sync under load: `t` killed and restarted while clients write
/// to `a` is armed again while they write on. The primary's word for `t` (synchronized, the
/// observer) travels in the far sync's heartbeats, which went out only when it had nothing
/// else to send: under load, never (bench chaos --layout far-sync, finding F1: `t` stayed
/// unarmed until the writes stopped, and a loss of `a` meanwhile was not failed over).
#[test]
fn a_terminal_restarted_under_load_is_armed_again_while_clients_write() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "armed again under load");
    let mut cluster = Cluster::start(through_a_far_sync("10s"));
    cluster.wait_armed_to("t", Duration::from_secs(60));
    let load = Load::start(connections(cluster.resp_addr("a"), 4), "rearm", common::seed());
    let limit = Duration::from_secs(60);
    assert!(load.wait_for_more(300, limit), "the load did not get going\n{}", cluster.logs());
    cluster.kill("t");
    cluster.start_member("t");
    cluster.wait_armed_to("t", Duration::from_secs(30));
    // And the clients wrote all along.
    assert!(load.wait_for_more(100, limit), "the load stopped\n{}", cluster.logs());
    let logs = load.stop();
    println!("t restarted under load, armed again; {} writes acknowledged", acknowledged(&logs));
}
