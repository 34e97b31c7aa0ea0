//! An alternate route on the real binary, on loopback (Data Guard's `ALTERNATE`): a primary
//! ships SYNC AFFIRM to a far sync, which forwards to a terminal standby; the primary's
//! alternate route ships to the terminal itself while the far sync is lost. The far sync
//! killed with -9 under load: the primary ships to the terminal within the route's `after`,
//! and the terminal holds every write the primary acknowledged; the far sync back: the primary
//! stops, and the terminal receives from the far sync again.

mod common;
mod replication_support;
mod roles_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::Watchdog;
use roles_support::{Cluster, ClusterConfig, MemberSpec};

#[test]
fn the_far_sync_killed_under_load_the_alternate_route_ships_to_the_terminal_and_nothing_acknowledged_is_lost()
 {
    let _watchdog = Watchdog::new(Duration::from_secs(300), "alternate route");
    let mut a = MemberSpec::new("a", "async", "primary");
    a.extra = "routes = [{ when = \"a\", to = \"t\", alternate_of = \"fs\", after = \"1s\" }]\n";
    let mut fs = MemberSpec::new("fs", "sync", "standby");
    fs.extra = "kind = \"far_sync\"\nroutes = [{ when = \"a\", to = \"t\" }]\n";
    let t = MemberSpec::new("t", "async", "standby");
    let mut cluster = Cluster::start(ClusterConfig {
        members: vec![a, fs, t],
        protection_mode: "maximum_availability",
        ..ClusterConfig::pair()
    });
    let limit = Duration::from_secs(60);
    // (fs may start later than `after` behind a: the alternate then stands down once fs is
    // connected.)
    let standing_by = common::poll_until(limit, || {
        cluster.phase_of("a", "fs") == Some(transport::Phase::Synchronized)
            && cluster.phase_of("a", "t") == Some(transport::Phase::Deferred)
            && cluster.phase_of("fs", "t") == Some(transport::Phase::Streaming)
    });
    assert!(standing_by, "the alternate stands by while the far sync is there\n{}", cluster.logs());
    let shown = cluster.must(&["show", "configuration"]);
    assert!(shown.contains("└─ t  ASYNC  STREAMING"), "{shown}");
    assert!(shown.contains("Configuration status: SUCCESS"), "{shown}");

    // Writers for the whole test: every acknowledged key is recorded.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let address = cluster.resp_addr("a");
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut connection = common::redis_connection(address);
                let mut acknowledged = Vec::new();
                for index in 0.. {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let key = format!("w{writer}:{index}");
                    match redis::cmd("SET").arg(&key).arg(index).query::<()>(&mut connection) {
                        Ok(()) => acknowledged.push(key),
                        Err(error) => panic!("SET {key} on a: {error}"),
                    }
                }
                acknowledged
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    cluster.kill("fs");
    let took_over = common::poll_until(limit, || {
        cluster.phase_of("a", "t").is_some_and(|phase| {
            matches!(phase, transport::Phase::Streaming | transport::Phase::CatchingUp)
        })
    });
    assert!(took_over, "a did not ship to t itself once fs was lost\n{}", cluster.logs());
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Release);
    let acknowledged: Vec<String> =
        writers.into_iter().flat_map(|writer| writer.join().unwrap()).collect();
    assert!(acknowledged.len() > 100, "only {} writes acknowledged", acknowledged.len());
    cluster.wait_applied("t", "a", limit);
    let t = cluster.server("t").status().replication.standby.expect("t is a standby");
    assert_eq!(t.source_member, None, "t receives from a itself");
    cluster.assert_all_present("t", &acknowledged, "acknowledged writes");

    // The far sync back: a stops shipping to t, and fs forwards to it again.
    cluster.start_member("fs");
    let back = common::poll_until(limit, || {
        cluster.phase_of("a", "fs") == Some(transport::Phase::Synchronized)
            && cluster.phase_of("a", "t") == Some(transport::Phase::Deferred)
            && cluster.phase_of("fs", "t") == Some(transport::Phase::Streaming)
    });
    assert!(back, "a did not go back to the far sync\n{}", cluster.logs());
    let mut connection = common::redis_connection(cluster.resp_addr("a"));
    for index in 0..200 {
        redis::cmd("SET")
            .arg(format!("after:{index}"))
            .arg(index)
            .query::<()>(&mut connection)
            .unwrap();
    }
    cluster.wait_applied("t", "a", limit);
    let through_fs = common::poll_until(limit, || {
        cluster
            .server("t")
            .status()
            .replication
            .standby
            .is_some_and(|standby| standby.source_member.as_deref() == Some("fs"))
    });
    assert!(through_fs, "t does not receive from fs again\n{}", cluster.logs());
    println!(
        "alternate route: {} writes acknowledged across the far sync's loss, all on t",
        acknowledged.len()
    );
}
