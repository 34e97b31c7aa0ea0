//! The DBA's role changes under partitions, on the real binary: three members, each in a site
//! of its own of a linkemu mesh, the test (and the `redoguard` commands it runs, the broker) in
//! a site linked to all of them and never cut.
//!
//! - a `failover --force` fences every primary it reaches, not only the newest one: an older
//!   primary restarted and still unconfirmed holds a welcome from before the failover, which
//!   would open it beside the new primary once the DBA defers the member that would refuse it
//!   (found by the restart model, `crates/roles/tests/model_restart.rs`).
//!
//! - a standby cut off from its primary (packets dropped: no FIN, no RST) says within its
//!   `silence_timeout` that the primary is not connected, so that a `failover` without
//!   `--force` is not refused as if the primary were there; once the link is back it
//!   reconnects and redo flows again. Before the limit, it called the primary connected for
//!   as long as TCP kept retrying (keepalive, then minutes of retransmissions).
//!
//! linkemu needs root, `/dev/net/tun` and `ip`: without them these tests fail, saying why.

mod common;
mod roles_support;

use std::time::{Duration, Instant};

use common::Watchdog;
use roles_support::{Cluster, ClusterConfig, MemberSpec};

fn set(connection: &mut redis::Connection, key: &str, value: &str) -> Result<(), String> {
    redis::cmd("SET").arg(key).arg(value).query::<()>(connection).map_err(|error| error.to_string())
}

/// What a write to `name` gets: `None` if it was taken.
fn write_refusal(cluster: &Cluster, name: &str) -> Option<String> {
    let mut connection = common::redis_connection(cluster.resp_addr(name));
    set(&mut connection, "must-not-be-taken", "1").err()
}

/// Waits until `name`'s status says it is fenced.
fn wait_fenced(cluster: &Cluster, name: &str) {
    let fenced = common::poll_until(Duration::from_secs(20), || {
        cluster.server(name).status().roles.is_some_and(|roles| roles.fenced.is_some())
    });
    assert!(fenced, "{name} is not fenced\n{}", cluster.logs());
}

/// East, the primary of incarnation 1, is failed over to west while it is down, with west cut
/// off from east and south. East restarts unconfirmed: south, still in incarnation 1, welcomes
/// it; west cannot answer. Then east is cut from south, and west's link to south is back:
/// south follows west in incarnation 2, and east still holds its welcome from incarnation 1.
/// The DBA fails over to south, `--force`: the broker reaches east and west, both primaries
/// not fenced, and must fence both. The broker before fenced only west (the newest
/// incarnation), and once the DBA deferred west (true: a fenced, failed-over primary), east's
/// rule waited for south alone, whose stale welcome it held, and east took writes beside
/// south (the restart model's trace, on the real binary: this test fails so with the broker
/// before). South is a SYNC standby too, so that deferring west leaves east's Maximum
/// Availability a SYNC destination and the edit is taken everywhere.
#[test]
fn a_forced_failover_fences_an_older_unconfirmed_primary_too() {
    let _watchdog =
        Watchdog::new(Duration::from_secs(240), "a forced failover fences every primary");
    let mut cluster = Cluster::start(ClusterConfig {
        members: vec![
            MemberSpec::new("east", "sync", "primary"),
            MemberSpec::new("west", "sync", "standby"),
            MemberSpec::new("south", "sync", "standby"),
        ],
        mesh: true,
        insecure: true,
        net_timeout: "2s",
        ..ClusterConfig::pair()
    });
    cluster.wait_shipping("east", Duration::from_secs(30));
    let followed = common::poll_until(Duration::from_secs(20), || {
        cluster.server("east").status().roles.is_some_and(|roles| roles.followed)
    });
    assert!(followed, "east does not record that a standby followed it\n{}", cluster.logs());

    cluster.kill("east");
    cluster.wait_primary_lost("west", Duration::from_secs(20));
    // West will hear from no member, and no member from it.
    cluster.cut("west", &["east", "south"]);
    cluster.must(&["failover", "--to", "west"]);
    let open =
        common::poll_until(Duration::from_secs(20), || write_refusal(&cluster, "west").is_none());
    assert!(open, "west takes no write after the failover\n{}", cluster.logs());

    // East restarts: south welcomes it in incarnation 1; it waits for west.
    cluster.start_member("east");
    let mut last = String::new();
    let waits_for_west = common::poll_until(Duration::from_secs(30), || {
        match write_refusal(&cluster, "east") {
            None => panic!("east took a write while west may be primary\n{}", cluster.logs()),
            Some(refusal) => last = refusal,
        }
        last.to_ascii_uppercase().contains("TRYAGAIN") && last.contains("(west did not answer yet")
    });
    assert!(waits_for_west, "east does not wait for west alone: {last}\n{}", cluster.logs());
    cluster.cut("east", &["south"]);
    cluster.restore("west", &["south"]);
    let south_follows_west = common::poll_until(Duration::from_secs(30), || {
        cluster.server("south").status().roles.is_some_and(|roles| roles.incarnation == 2)
    });
    assert!(south_follows_west, "south did not follow west\n{}", cluster.logs());

    // Without --force: refused, naming both primaries the broker reaches.
    let (ok, _, said) = cluster.redoguard(&["failover", "--to", "south"]);
    assert!(
        !ok && said.contains("'east' in incarnation 1") && said.contains("'west' in incarnation 2"),
        "{said}"
    );
    let done = cluster.must(&["failover", "--to", "south", "--force"]);
    assert!(done.contains("'east', a primary of an older incarnation, was fenced too"), "{done}");
    wait_fenced(&cluster, "west");
    wait_fenced(&cluster, "east");

    // The DBA takes west, the failed-over primary, out of what members wait for: east stays
    // fenced, and south is the only member taking writes.
    cluster.must(&["edit", "destination", "west", "state=defer"]);
    let south_open =
        common::poll_until(Duration::from_secs(20), || write_refusal(&cluster, "south").is_none());
    assert!(south_open, "south takes no write after the failover\n{}", cluster.logs());
    for _ in 0..10 {
        let refusal = write_refusal(&cluster, "east")
            .unwrap_or_else(|| panic!("east took a write beside south\n{}", cluster.logs()));
        assert!(refusal.to_ascii_lowercase().contains("readonly"), "{refusal}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The standby's default `silence_timeout`.
const SILENCE_TIMEOUT: Duration = Duration::from_secs(5);
/// What noticing the silence may take beyond it on a loaded machine (the receiver looks once a
/// second). Less than TCP keepalive of the standby's listener (10 s idle, then three probes 5 s
/// apart), so that keepalive cannot pass this test for the limit.
const SILENCE_SLACK: Duration = Duration::from_secs(11);

/// Whether `standby`'s status says its primary is connected.
fn primary_connected(cluster: &Cluster, standby: &str) -> bool {
    cluster
        .server(standby)
        .status()
        .replication
        .standby
        .is_some_and(|status| status.primary_connected)
}

/// How many connections west ended for east's silence, by its log.
fn silences_logged(cluster: &Cluster) -> usize {
    let log = std::fs::read_to_string(cluster.log_path("west")).unwrap_or_default();
    log.matches("nothing heard from 'east'").count()
}

/// Cuts east from west, then waits (bounded) until west says east is not connected: within
/// its silence timeout and some slack, and its log says why.
fn cut_and_wait_not_connected(cluster: &Cluster, round: usize) {
    let logged = silences_logged(cluster);
    let cut = Instant::now();
    cluster.cut("east", &["west"]);
    let lost =
        common::poll_until(SILENCE_TIMEOUT + SILENCE_SLACK, || !primary_connected(cluster, "west"));
    assert!(
        lost,
        "round {round}: {:?} after the cut west still says east is connected\n{}",
        cut.elapsed(),
        cluster.logs()
    );
    // (The line is written as the connection ends, just after the status changed.)
    let said = common::poll_until(Duration::from_secs(5), || silences_logged(cluster) > logged);
    assert!(
        said,
        "round {round}: west's log does not say it heard nothing from east\n{}",
        cluster.logs()
    );
}

/// East, the primary, and west, its SYNC standby, in sites of a linkemu mesh. The link between
/// them is cut (every packet dropped, no FIN, no RST): west says east is not connected within
/// its silence timeout (5 s, the default) and some slack, and its log says for how long it
/// heard nothing. The link is restored: west is connected and shipped to again, and a write
/// on east reaches it. The link is cut again, and east from the test's site too, as a primary
/// lost in a partition: `failover --to west` without `--force` is accepted (before the
/// silence timeout, west refused it, "the primary 'east' is connected to this standby", for
/// as long as TCP kept the dead connection), and west takes a write.
#[test]
fn a_standby_cut_off_from_its_primary_says_so_within_its_silence_timeout() {
    let _watchdog =
        Watchdog::new(Duration::from_secs(240), "a standby cut off from its primary says so");
    let cluster =
        Cluster::start(ClusterConfig { mesh: true, insecure: true, ..ClusterConfig::pair() });
    let connected =
        common::poll_until(Duration::from_secs(20), || primary_connected(&cluster, "west"));
    assert!(connected, "west does not say east is connected\n{}", cluster.logs());

    cut_and_wait_not_connected(&cluster, 1);
    cluster.restore("east", &["west"]);
    let back = common::poll_until(Duration::from_secs(30), || primary_connected(&cluster, "west"));
    assert!(back, "west does not reconnect to east once the link is back\n{}", cluster.logs());
    cluster.wait_shipping("east", Duration::from_secs(60));
    let mut east = common::redis_connection(cluster.resp_addr("east"));
    set(&mut east, "after-the-cut", "1").unwrap_or_else(|error| panic!("east: {error}"));
    let mut west = common::redis_connection(cluster.resp_addr("west"));
    let arrived = common::poll_until(Duration::from_secs(30), || {
        redis::cmd("GET")
            .arg("after-the-cut")
            .query::<Option<String>>(&mut west)
            .is_ok_and(|value| value.as_deref() == Some("1"))
    });
    assert!(arrived, "east's write after the link came back is not on west\n{}", cluster.logs());

    // East lost in a partition: cut from west, and from the test's site (the last of the
    // mesh), so that the broker does not reach it either.
    cut_and_wait_not_connected(&cluster, 2);
    let mesh = cluster.mesh.as_ref().expect("a mesh cluster");
    mesh.cut(cluster.sites["east"], cluster.sites.len());
    let west_admin = cluster.addr_of("west");
    let (ok, stdout, stderr) =
        cluster.redoguard(&["failover", "--to", "west", "--addr", &west_admin]);
    assert!(
        ok,
        "failover --to west without --force was refused:\n{stdout}{stderr}\n{}",
        cluster.logs()
    );
    let open =
        common::poll_until(Duration::from_secs(20), || write_refusal(&cluster, "west").is_none());
    assert!(open, "west takes no write after the failover\n{}", cluster.logs());
}
