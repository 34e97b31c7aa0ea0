//! What the fast-start tests through a far sync share, on loopback and on the linkemu mesh: the
//! configuration (`a` primary —SYNC AFFIRM— `fs` far sync —ASYNC— `t`, the observer's only
//! target), kill -9 of `a` under load once failover to `t` is armed, and the check that `t`
//! sealed `fs` before it opened. (Armed and failed over:
//! `Cluster::wait_armed_to`, `Cluster::failed_over_to`.)

// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use crate::common;
use crate::replication_support::{ClientLog, Load, connections};
use crate::roles_support::{Cluster, ClusterConfig, MemberSpec};

/// `a` primary —SYNC AFFIRM— `fs` (far sync) —ASYNC— `t`, the observer's only target.
pub fn through_a_far_sync(net_timeout: &'static str) -> ClusterConfig {
    through_a_far_sync_shipped("sync", net_timeout)
}

/// `a` primary —`transport`— `fs` (far sync) —ASYNC— `t`, the observer's only target.
pub fn through_a_far_sync_shipped(
    transport: &'static str,
    net_timeout: &'static str,
) -> ClusterConfig {
    let a = MemberSpec::new("a", transport, "primary");
    let mut fs = MemberSpec::new("fs", transport, "standby");
    fs.extra = "kind = \"far_sync\"\nroutes = [{ when = \"a\", to = \"t\" }]\n";
    let t = MemberSpec::new("t", "async", "standby");
    ClusterConfig {
        members: vec![a, fs, t],
        observers: vec!["obs1"],
        fast_start_extra: "target = [\"t\"]\n",
        net_timeout,
        ..ClusterConfig::pair()
    }
}

/// Asserts that `t` sealed `fs` and waited for its tail before it opened (its log says so).
pub fn sealed_the_far_sync_first(cluster: &Cluster) {
    let t_log = std::fs::read_to_string(cluster.log_path("t")).unwrap_or_default();
    assert!(
        t_log.contains("the relay is sealed; waiting for its tail"),
        "t did not seal fs before opening\n{}",
        cluster.logs()
    );
}

/// Once failover to `t` is armed, `clients` clients write to `a` (keys under `prefix`) until
/// `writes` are acknowledged and failover to `t` is still armed (a far sync that fell behind
/// would be granted away, which is not what these tests are about); then kill -9 of `a`. What
/// the clients saw, and when `a` was killed.
pub fn kill_a_under_load(
    cluster: &mut Cluster,
    clients: usize,
    writes: u64,
    prefix: &str,
) -> (Vec<ClientLog>, Instant) {
    cluster.wait_armed_to("t", Duration::from_secs(60));
    let load = Load::start(connections(cluster.resp_addr("a"), clients), prefix, common::seed());
    let limit = Duration::from_secs(60);
    assert!(load.wait_for_more(writes, limit), "the load did not get going\n{}", cluster.logs());
    cluster.wait_armed_to("t", Duration::from_secs(30));
    let killed = Instant::now();
    cluster.kill("a");
    (load.stop(), killed)
}
