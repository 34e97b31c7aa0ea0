//! The DBA's role changes under partitions, on the real binary: three members, each in a site
//! of its own of a linkemu mesh, the test (and the `redoguard` commands it runs, the broker) in
//! a site linked to all of them and never cut.
//!
//! - a `failover --force` fences every primary it reaches, not only the newest one: an older
//!   primary restarted and still unconfirmed holds a welcome from before the failover, which
//!   would open it beside the new primary once the DBA defers the member that would refuse it
//!   (found by the restart model, `crates/roles/tests/model_restart.rs`).
//!
//! linkemu needs root, `/dev/net/tun` and `ip`: without them these tests fail, saying why.

mod common;
mod roles_support;

use std::time::Duration;

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
