//! Redo routes on the linkemu mesh (issue 33's set-up), real processes, each member in a site
//! of its own: the primary `a` —1 ms— the far sync `fs` —50 ms— the terminal `t` (and `a`
//! —50 ms— `t`), and a second terminal `t2` 50 ms behind a cascading standby `c` 1 ms from
//! `a`. The clients' site is 1 ms from `a`.
//! - `a` killed with -9 under load, failover to `t` at once: every acknowledged write is on
//!   `t`, and the time without writes (from the kill to `t`'s first acknowledged write) is
//!   printed.
//! - `fs` killed with -9 under load: `a`'s alternate route ships to `t` itself, and nothing
//!   acknowledged is lost.
//! - Under Maximum Protection, `a` cut from `t` and from the clients but not from `fs`, with
//!   a client of its own still writing: the failover to `t` seals `fs`, so `a` acknowledges
//!   nothing after `t` took the tail, and every write `a` acknowledged is on `t` (what the seal
//!   alone guarantees; on loopback the fence of the new primary hid it).

mod common;
mod replication_support;
mod roles_support;

use std::time::{Duration, Instant};

use common::Watchdog;
use replication_support::{Load, acknowledged, connections, verify_acknowledged};
use roles_support::{Cluster, ClusterConfig, MemberSpec};

const NEAR: Duration = Duration::from_millis(1);
const FAR: Duration = Duration::from_millis(50);

/// The members (`routes`: each member's `extra`), on a mesh whose links are 1 ms, but those
/// between `far` pairs, which are 50 ms.
fn mesh_cluster(
    members: Vec<MemberSpec>,
    protection_mode: &'static str,
    far: &[(&str, &str)],
) -> Cluster {
    let config = ClusterConfig {
        members,
        protection_mode,
        mesh_link: Some(linkemu::LinkConfig { rtt: NEAR, ..Default::default() }),
        log_file_size: "4MiB",
        ..ClusterConfig::pair()
    };
    Cluster::start_on_mesh(config, far, FAR)
}

/// `a` ships SYNC AFFIRM to the far sync `fs` (which forwards to `t`) and ASYNC to the
/// cascading `c` (which forwards to `t2`).
fn routes() -> Vec<MemberSpec> {
    let a = MemberSpec::new("a", "async", "primary");
    let mut fs = MemberSpec::new("fs", "sync", "standby");
    fs.extra = "kind = \"far_sync\"\nroutes = [{ when = \"a\", to = \"t\" }]\n";
    let t = MemberSpec::new("t", "async", "standby");
    let mut c = MemberSpec::new("c", "async", "standby");
    c.extra = "routes = [{ when = \"a\", to = \"t2\" }]\n";
    let t2 = MemberSpec::new("t2", "async", "standby");
    vec![a, fs, t, c, t2]
}

const FAR_PAIRS: [(&str, &str); 5] =
    [("fs", "t"), ("a", "t"), ("c", "t2"), ("a", "t2"), ("fs", "t2")];

#[test]
fn on_the_mesh_a_failover_through_the_far_sync_to_a_terminal_50_ms_away_loses_nothing_acknowledged()
{
    let _watchdog = Watchdog::new(Duration::from_secs(400), "far sync failover on the mesh");
    let mut cluster = mesh_cluster(routes(), "maximum_availability", &FAR_PAIRS);
    let shown = cluster.must(&["show", "configuration"]);
    assert!(shown.contains("├─ fs  SYNC AFFIRM  SYNCHRONIZED"), "{shown}");
    assert!(shown.contains("└─ t2  ASYNC  STREAMING"), "{shown}");

    let load = Load::start(connections(cluster.resp_addr("a"), 8), "mesh", 33);
    assert!(
        load.wait_for_more(2000, Duration::from_secs(60)),
        "the load did not get going\n{}",
        cluster.logs()
    );
    // Both terminals receive through their relays while the load runs.
    let limit = Duration::from_secs(60);
    for terminal in ["t", "t2"] {
        let through = common::poll_until(limit, || {
            cluster.server(terminal).status().database.applied_scn.0 > 0
        });
        assert!(through, "{terminal} applies nothing\n{}", cluster.logs());
    }
    cluster.kill("a");
    let killed = Instant::now();
    let logs = load.stop();
    let acknowledged_writes = acknowledged(&logs);
    assert!(acknowledged_writes > 1000, "only {acknowledged_writes} writes acknowledged");

    let said = cluster.must(&["failover", "--to", "t", "--addr", &cluster.addr_of("t")]);
    // The time without writes: until the new primary acknowledges one.
    let mut connection = common::redis_connection(cluster.resp_addr("t"));
    let written = common::poll_until(limit, || {
        redis::cmd("SET").arg("after-failover").arg(1).query::<()>(&mut connection).is_ok()
    });
    assert!(written, "t takes no write after the failover\n{}", cluster.logs());
    let without_writes = killed.elapsed();
    let checked = verify_acknowledged(&mut connection, &logs, "t after the failover");
    assert_eq!(checked, acknowledged_writes);
    println!(
        "far sync on the mesh: {acknowledged_writes} acknowledged writes, all on t; {:.2} s without writes (kill -9 to t's first write, the failover command included); {}",
        without_writes.as_secs_f64(),
        said.lines().find(|line| line.contains("tail")).unwrap_or("no tail line")
    );
}

#[test]
fn on_the_mesh_the_far_sync_killed_under_load_the_alternate_route_takes_over_and_nothing_acknowledged_is_lost()
 {
    let _watchdog = Watchdog::new(Duration::from_secs(400), "alternate route on the mesh");
    let mut members = routes();
    members.truncate(3);
    members[0].extra =
        "routes = [{ when = \"a\", to = \"t\", alternate_of = \"fs\", after = \"1s\" }]\n";
    let mut cluster = mesh_cluster(members, "maximum_availability", &FAR_PAIRS[..2]);
    let limit = Duration::from_secs(60);
    let standing_by = common::poll_until(limit, || {
        cluster.phase_of("a", "fs") == Some(transport::Phase::Synchronized)
            && cluster.phase_of("a", "t") == Some(transport::Phase::Deferred)
    });
    assert!(standing_by, "the alternate stands by while the far sync is there\n{}", cluster.logs());

    let load = Load::start(connections(cluster.resp_addr("a"), 8), "alternate", 34);
    assert!(load.wait_for_more(2000, limit), "the load did not get going\n{}", cluster.logs());
    cluster.kill("fs");
    let killed = Instant::now();
    let took_over = common::poll_until(limit, || {
        cluster.phase_of("a", "t").is_some_and(|phase| {
            matches!(phase, transport::Phase::Streaming | transport::Phase::CatchingUp)
        })
    });
    assert!(took_over, "a did not ship to t itself once fs was lost\n{}", cluster.logs());
    let after = killed.elapsed();
    assert!(
        load.wait_for_more(2000, limit),
        "a took no writes after the far sync was lost\n{}",
        cluster.logs()
    );
    let logs = load.stop();
    assert!(
        logs.iter().all(|log| log.error.is_none()),
        "a client failed: {:?}",
        logs.iter().filter_map(|log| log.error.as_ref()).collect::<Vec<_>>()
    );
    cluster.wait_applied("t", "a", limit);
    let mut connection = common::redis_connection(cluster.resp_addr("t"));
    let checked = verify_acknowledged(&mut connection, &logs, "t, on the alternate route");
    println!(
        "alternate on the mesh: a ships to t itself {:.2} s after the far sync's kill (after = 1 s); {checked} acknowledged writes, all on t",
        after.as_secs_f64()
    );
}

/// The split the seal exists for: `a` alive and still connected to its far sync, cut from the
/// terminal and from the broker, a client beside it writing. Under Maximum Protection `a`
/// acknowledges only what `fs` holds durably; once the failover sealed `fs`, `fs` takes no more
/// of `a`'s redo, so `a` acknowledges nothing more and everything it did acknowledge is on `t`.
#[test]
fn a_live_old_primary_cut_off_with_its_far_sync_acknowledges_nothing_the_new_primary_lacks() {
    let _watchdog = Watchdog::new(Duration::from_secs(400), "far sync seal under a partition");
    // Under t, a (cut off, and then fenced) is fs's source; a is SYNC so that t, a primary
    // under Maximum Protection, has a SYNC AFFIRM destination of its own.
    let mut a = MemberSpec::new("a", "sync", "primary");
    a.extra = "routes = [{ when = \"t\", to = \"fs\" }]\n";
    let mut fs = MemberSpec::new("fs", "sync", "standby");
    fs.extra = "kind = \"far_sync\"\nroutes = [{ when = \"a\", to = \"t\" }]\n";
    let t = MemberSpec::new("t", "async", "standby");
    let cluster = mesh_cluster(vec![a, fs, t], "maximum_protection", &FAR_PAIRS[..2]);
    let mesh = cluster.mesh.as_ref().unwrap();
    let clients_site = mesh.sites() - 1;

    // The clients beside a, in its own site: the cut leaves them connected to it.
    let address = cluster.resp_addr("a");
    let beside = mesh
        .run_in(cluster.sites["a"], || {
            (0..4)
                .map(|_| common::redis_connection_with_timeout(address, Duration::from_secs(5)))
                .collect::<Vec<_>>()
        })
        .unwrap();
    let load = Load::start(beside, "split", 35);
    let limit = Duration::from_secs(60);
    assert!(load.wait_for_more(1000, limit), "the load did not get going\n{}", cluster.logs());
    cluster.cut("a", &["t"]);
    mesh.cut(cluster.sites["a"], clients_site);
    println!("a cut from t and from the clients' site; fs still reaches both");
    let said = cluster.must(&["failover", "--to", "t", "--addr", &cluster.addr_of("t")]);
    assert!(said.contains("took the tail held by 'fs'"), "{said}");
    // a's clients go on for a while: whatever a still acknowledges must be on t.
    std::thread::sleep(Duration::from_secs(3));
    let logs = load.stop();
    let acknowledged_writes = acknowledged(&logs);
    let mut connection = common::redis_connection(cluster.resp_addr("t"));
    let checked = verify_acknowledged(&mut connection, &logs, "t after the failover");
    assert_eq!(checked, acknowledged_writes);
    println!(
        "split: {acknowledged_writes} writes acknowledged by the cut-off old primary, all on t; {}",
        said.lines().find(|line| line.contains("tail")).unwrap_or_default()
    );
    // Healed, the old primary is fenced by the new one.
    cluster.restore("a", &["t"]);
    mesh.restore(cluster.sites["a"], clients_site);
    let fenced = common::poll_until(limit, || {
        cluster.server("a").status().roles.is_some_and(|roles| roles.fenced.is_some())
    });
    assert!(fenced, "the old primary was not fenced once healed\n{}", cluster.logs());
}
