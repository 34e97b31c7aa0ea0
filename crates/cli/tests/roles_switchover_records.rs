//! Switchover's records on the real binary: a pending switchover that its old primary
//! recorded without an id is not completed, one its target refused is given back when run
//! again, a stale abort or complete of a switchover changes nothing, and a switchover a
//! failover came after is void (each found by or checked against
//! `roles/tests/model_restart.rs`'s switchover model).

mod common;
mod replication_support;
mod roles_support;

use std::time::Duration;

use common::Watchdog;
use roles_support::{Cluster, ClusterConfig, MemberSpec, complete_path, first_write, set};

/// POSTs `path` to `member`'s admin API: the status code and the body.
fn post(cluster: &Cluster, member: &str, path: &str) -> (u16, String) {
    admin::client::http_call(&cluster.addr_of(member), "POST", path, Duration::from_secs(90))
        .unwrap_or_else(|error| panic!("POST {path} to {member}: {error:#}"))
}

/// East the primary, west its standby, and south an ASYNC standby.
fn three_members() -> Cluster {
    let mut config = ClusterConfig::pair();
    config.members.push(MemberSpec::new("south", "async", "standby"));
    Cluster::start(config)
}

/// East prepares a switchover to west, south (ASYNC) holding east's end: once east is a
/// standby it ships nothing more, so south catches up first, and then applies the end.
fn prepare_with_south_caught_up(cluster: &Cluster) -> admin::roles::SwitchoverPrepared {
    cluster.wait_applied("south", "east", Duration::from_secs(30));
    let (code, reply) = post(cluster, "east", "/roles/switchover/prepare?to=west");
    assert_eq!(code, 200, "{reply}");
    let prepared: admin::roles::SwitchoverPrepared = serde_json::from_str(&reply).unwrap();
    let caught_up = common::poll_until(Duration::from_secs(30), || {
        cluster.server("south").status().database.applied_scn >= prepared.last_scn
    });
    assert!(caught_up, "south did not apply east's end\n{}", cluster.logs());
    prepared
}

/// A switchover half done whose old primary recorded it without an id (a
/// `switchover.pending` written before ids existed, here put back by hand while it was
/// stopped): `redoguard switchover` does not complete it (the target could not tell it from one
/// it refused, whose old primary may be the primary again) and says what to do; the abort it
/// names gives the role back, and a new switchover works.
#[test]
fn a_pending_switchover_without_an_id_is_not_completed() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "pending switchover without an id");
    let mut cluster = Cluster::start(ClusterConfig::pair());
    let (code, reply) = post(&cluster, "east", "/roles/switchover/prepare?to=west");
    assert_eq!(code, 200, "{reply}");
    let pending = cluster.data_dir("east").join("switchover.pending");
    let written = std::fs::read_to_string(&pending).unwrap();
    assert!(written.starts_with("west\n") && written.ends_with("\n1\n"), "{written:?}");
    assert_eq!(written.lines().count(), 3, "{written:?}");
    cluster.stop("east");
    std::fs::write(&pending, "west\n").unwrap();
    cluster.start_member("east");
    let remembered = common::poll_until(Duration::from_secs(20), || {
        cluster.server("east").status().roles.is_some_and(|roles| {
            roles.switchover_to.as_deref() == Some("west") && roles.switchover_id == Some(0)
        })
    });
    assert!(remembered, "east does not show the switchover with id 0\n{}", cluster.logs());

    let (ok, stdout, stderr) = cluster.redoguard(&["switchover", "--to", "west"]);
    assert!(!ok, "completed a switchover without an id:\n{stdout}");
    assert!(
        stderr.contains("without an id") && stderr.contains("/roles/switchover/abort"),
        "{stderr}"
    );
    let role = |member: &str| cluster.server(member).status().roles.expect("roles").role;
    assert_eq!((role("east").as_str(), role("west").as_str()), ("standby", "standby"));

    let (code, reply) = post(&cluster, "east", "/roles/switchover/abort");
    assert_eq!(code, 200, "{reply}");
    assert!(!pending.exists(), "the abort left {}", pending.display());
    assert_eq!(role("east"), "primary");
    cluster.wait_shipping("east", Duration::from_secs(60));
    cluster.must(&["switchover", "--to", "west"]);
    assert_eq!((role("east").as_str(), role("west").as_str()), ("standby", "primary"));
}

/// A switchover its target refused (here for an incarnation the test gave wrong) whose old
/// primary was left a standby (the broker that drove it lost the answer, say): running
/// `redoguard switchover` again finds it pending, the target refuses it at once (it was refused
/// already), and the old primary takes its role back; the next run starts a new switchover.
#[test]
fn a_switchover_its_target_refused_is_given_back_when_run_again() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "refused switchover run again");
    let cluster = Cluster::start(ClusterConfig::pair());
    let (code, reply) = post(&cluster, "east", "/roles/switchover/prepare?to=west");
    assert_eq!(code, 200, "{reply}");
    let prepared: admin::roles::SwitchoverPrepared = serde_json::from_str(&reply).unwrap();
    let complete = complete_path(&prepared, "east", prepared.incarnation + 1);
    let (code, reply) = post(&cluster, "west", &complete);
    assert_eq!(code, 409, "{reply}");
    let role = |member: &str| cluster.server(member).status().roles.expect("roles").role;
    assert_eq!((role("east").as_str(), role("west").as_str()), ("standby", "standby"));

    let (ok, stdout, stderr) = cluster.redoguard(&["switchover", "--to", "west"]);
    assert!(!ok, "completed a switchover west had refused:\n{stdout}");
    assert!(
        stderr.contains(&format!("switchover {} from 'east' was refused already", prepared.id))
            && stderr.contains("'east' is the primary again"),
        "{stderr}"
    );
    assert_eq!((role("east").as_str(), role("west").as_str()), ("primary", "standby"));
    cluster.wait_shipping("east", Duration::from_secs(60));
    cluster.must(&["switchover", "--to", "west"]);
    assert_eq!((role("east").as_str(), role("west").as_str()), ("standby", "primary"));
}

/// Found by `roles/tests/model_restart.rs`: an abort names its switchover (the old primary does
/// not give back a role a later switchover of its own moved), the role it gives back is
/// `followed` (the old primary waits for its standbys, now and after a restart: a failover may
/// have happened while it was a standby), and a target never completes a switchover twice (a
/// late call of one it completed, once it is a standby again, is a failure, not a refusal on
/// which the old primary would take its role back).
#[test]
fn a_stale_abort_or_complete_of_a_switchover_changes_nothing() {
    let _watchdog = Watchdog::new(Duration::from_secs(240), "stale switchover calls");
    let cluster = Cluster::start(ClusterConfig::pair());
    let role = |member: &str| cluster.server(member).status().roles.expect("roles").role;
    let prepare = |from: &str, to: &str| -> admin::roles::SwitchoverPrepared {
        let (code, reply) = post(&cluster, from, &format!("/roles/switchover/prepare?to={to}"));
        assert_eq!(code, 200, "{reply}");
        serde_json::from_str(&reply).unwrap()
    };
    let complete = |prepared: &admin::roles::SwitchoverPrepared, from: &str| {
        complete_path(prepared, from, prepared.incarnation)
    };

    let first = prepare("east", "west");
    let other = if first.id == u64::MAX { 1 } else { first.id + 1 };
    let (code, reply) = post(&cluster, "east", &format!("/roles/switchover/abort?id={other}"));
    assert_eq!(code, 409, "{reply}");
    assert!(reply.contains(&format!("not switchover {other}")), "{reply}");
    assert_eq!(role("east"), "standby");
    let (code, reply) = post(&cluster, "east", &format!("/roles/switchover/abort?id={}", first.id));
    assert_eq!(code, 200, "{reply}");
    let roles = cluster.server("east").status().roles.expect("roles");
    assert!(roles.role == "primary" && roles.followed, "{roles:?}");
    first_write(&cluster, "east", "after the abort");

    let second = prepare("east", "west");
    let (code, reply) = post(&cluster, "west", &complete(&second, "east"));
    assert_eq!(code, 200, "{reply}");
    first_write(&cluster, "west", "after the switchover");
    cluster.wait_shipping("west", Duration::from_secs(60));
    cluster.must(&["switchover", "--to", "east"]);
    assert_eq!((role("east").as_str(), role("west").as_str()), ("primary", "standby"));
    let (code, reply) = post(&cluster, "west", &complete(&second, "east"));
    assert_eq!(code, 500, "{reply}");
    assert!(reply.contains("was completed here already"), "{reply}");
    assert_eq!((role("east").as_str(), role("west").as_str()), ("primary", "standby"));
}

/// A failover after a switchover was prepared (the old primary a standby with it pending, so no
/// member an open primary): the old primary adopts the failover's incarnation, and the
/// switchover is void. Run again (the failover's primary down, so that the broker reads the
/// pending record), the broker does not complete it; before, it completed it in the old
/// primary's incarnation *now*, and the target opened as a second primary of the failover's
/// incarnation, which no hello fences (found by `roles/tests/model_restart.rs`). The abort
/// removes the void record and gives no role back.
#[test]
fn a_switchover_a_failover_came_after_is_void() {
    let _watchdog = Watchdog::new(Duration::from_secs(240), "a void switchover");
    let mut cluster = three_members();
    let status = |cluster: &Cluster, member: &str| cluster.server(member).status();
    let prepared = prepare_with_south_caught_up(&cluster);
    cluster.must(&["failover", "--to", "south"]);
    first_write(&cluster, "south", "incarnation 2");
    let adopted = common::poll_until(Duration::from_secs(30), || {
        ["east", "west"].iter().all(|member| {
            status(&cluster, member).roles.is_some_and(|roles| roles.incarnation == 2)
        })
    });
    assert!(adopted, "east and west did not follow incarnation 2\n{}", cluster.logs());
    cluster.kill("south");

    let (ok, stdout, stderr) = cluster.redoguard(&["switchover", "--to", "west"]);
    assert!(!ok, "completed a void switchover:\n{stdout}\n{}", cluster.logs());
    assert!(stderr.contains("prepared in incarnation 1") && stderr.contains("void"), "{stderr}");
    let role = |member: &str| status(&cluster, member).roles.expect("roles").role;
    assert_eq!((role("east").as_str(), role("west").as_str()), ("standby", "standby"));

    let (code, reply) =
        post(&cluster, "east", &format!("/roles/switchover/abort?id={}", prepared.id));
    assert_eq!(code, 409, "{reply}");
    assert!(reply.contains("void") && reply.contains("no role is given back"), "{reply}");
    assert!(!cluster.data_dir("east").join("switchover.pending").exists());
    assert_eq!((role("east").as_str(), role("west").as_str()), ("standby", "standby"));
    assert!(status(&cluster, "east").roles.expect("roles").switchover_to.is_none());
}

/// A failover while a switchover is half done, and the switchover's complete then reaching a
/// target that never heard of the failover (a broker still running, or run again elsewhere):
/// east prepares for west; west is down while `failover --to south` makes south the primary of
/// incarnation 2; east and south are then lost, and west, back in incarnation 1, is asked to
/// complete. It takes over unconfirmed, as a restarted primary: no write is taken while it
/// cannot hear from the members it ships to, and once south is back, its hello there fences
/// west. Before, west opened at once and took writes beside the primary of incarnation 2 (the
/// open finding of `roles/tests/model_restart.rs`, now
/// `a_failover_amid_a_switchover_never_leaves_its_target_open_beside_the_new_primary`).
#[test]
fn a_switchover_completed_after_a_failover_it_never_heard_of_takes_no_write() {
    let _watchdog = Watchdog::new(Duration::from_secs(240), "a switchover amid a failover");
    let mut cluster = three_members();
    let status = |cluster: &Cluster, member: &str| cluster.server(member).status();
    let roles = |cluster: &Cluster, member: &str| status(cluster, member).roles.expect("roles");
    first_write(&cluster, "east", "incarnation 1");
    let prepared = prepare_with_south_caught_up(&cluster);
    cluster.kill("west");
    cluster.must(&["failover", "--to", "south"]);
    first_write(&cluster, "south", "incarnation 2");
    let adopted =
        common::poll_until(Duration::from_secs(30), || roles(&cluster, "east").incarnation == 2);
    assert!(adopted, "east did not follow incarnation 2\n{}", cluster.logs());
    cluster.kill("east");
    cluster.kill("south");

    cluster.start_member("west");
    let west = roles(&cluster, "west");
    assert_eq!((west.role.as_str(), west.incarnation), ("standby", 1), "{west:?}");
    let complete = complete_path(&prepared, "east", prepared.incarnation);
    let (code, reply) = post(&cluster, "west", &complete);
    assert_eq!(code, 200, "{reply}\n{}", cluster.logs());
    let promoted: admin::roles::Promoted = serde_json::from_str(&reply).unwrap();
    let awaited = promoted.awaiting.join("; ");
    assert!(
        awaited.contains("east") && awaited.contains("south"),
        "west took over without waiting for east and south (a second primary beside south's incarnation 2): {reply}\n{}",
        cluster.logs()
    );
    let mut connection = common::redis_connection(cluster.resp_addr("west"));
    let refused = set(&mut connection, "beside incarnation 2", "lost")
        .expect_err("west took a write beside the primary of incarnation 2: two primaries");
    assert!(refused.contains("TryAgain") && refused.contains("switchover"), "{refused}");
    let gate = roles(&cluster, "west").gate;
    assert!(matches!(gate, admin::roles::GateState::Unconfirmed { .. }), "{gate:?}");

    // South, back (unconfirmed itself: east is gone), refuses west's hello: west is fenced.
    cluster.start_member("south");
    let fenced = common::poll_until(Duration::from_secs(30), || {
        roles(&cluster, "west").fenced.is_some_and(|fence| fence.incarnation.0 == 2)
    });
    assert!(fenced, "west was not fenced by south's incarnation 2\n{}", cluster.logs());
    let refused = set(&mut connection, "beside incarnation 2", "lost")
        .expect_err("west took a write once fenced");
    assert!(refused.contains("ReadOnly") && refused.contains("failed over"), "{refused}");
}
