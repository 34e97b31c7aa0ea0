//! What the fast-start tests through a far sync share, on loopback and on the linkemu mesh: the
//! configuration (`a` primary —SYNC AFFIRM— `fs` far sync —ASYNC— `t`, the observer's only
//! target), the wait until fast-start failover to `t` is armed, and the wait until the observer
//! has failed over to `t` and `t` takes a write.

// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use crate::common;
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

/// Waits until fast-start failover to `t` is armed: `t` was told, through `fs`, that it is
/// synchronized and which observer to take a failover from, and the observer would fail over
/// to it.
pub fn armed(cluster: &Cluster, limit: Duration) {
    let ready = common::poll_until(limit, || {
        cluster.server("t").status().replication.standby.is_some_and(|standby| {
            standby.caught_up && standby.active_observer.as_deref() == Some("obs1")
        }) && cluster.failover_ready("obs1").iter().any(|name| name == "t")
    });
    assert!(ready, "fast-start failover to t is not armed\n{}", cluster.logs());
}

/// Waits until the observer names `t` as the primary and it takes a write: the time from
/// `since`.
pub fn failed_over_to_t(cluster: &Cluster, since: Instant, limit: Duration) -> Duration {
    let mut last = String::new();
    let ok = common::poll_until(limit, || {
        if cluster.sentinel_master("obs1").and_then(|addr| cluster.member_at(addr)) != Some("t") {
            return false;
        }
        let mut connection = common::redis_connection(cluster.resp_addr("t"));
        match redis::cmd("SET").arg("after the failover").arg("1").query::<()>(&mut connection) {
            Ok(()) => true,
            Err(error) => {
                last = error.to_string();
                false
            }
        }
    });
    assert!(ok, "no failover to t within {limit:?} ({last})\n{}", cluster.logs());
    since.elapsed()
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
