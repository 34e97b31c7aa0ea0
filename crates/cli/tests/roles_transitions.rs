//! Role transitions on the real binary: switchover under load and back, failover after kill -9
//! of a SYNC AFFIRM primary then reinstate, an ASYNC failover whose divergent tail is set
//! aside (rewound, or rebuilt from a copy), a new standby copied from a running primary whose
//! early logs are gone, each bad request refused with nothing changed (a reinstate sent to a
//! restarted primary no member has answered yet waits, then says so); a restarted primary one standby welcomes
//! still waits for the other, which may be the new primary; a primary that served a copy and
//! was lost before its first hello waits for the new standby's word after a restart.

mod common;
mod replication_support;
mod roles_support;

use std::time::{Duration, Instant};

use common::Watchdog;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use replication_support::{ClientLog, Load, acknowledged, connections, verify_acknowledged};
use roles_support::{
    Cluster, ClusterConfig, MemberSpec, archives, assert_same_data, first_write, set,
};

const CLIENTS: usize = 4;

/// Waits until a write to `name` is refused with READONLY (a fenced or demoted member).
fn refuses_writes(cluster: &Cluster, name: &str) -> String {
    let mut last = String::new();
    let refused = common::poll_until(Duration::from_secs(15), || {
        let mut connection = common::redis_connection(cluster.resp_addr(name));
        match set(&mut connection, "must-not-be-taken", "1") {
            Ok(()) => panic!("{name} took a write it must refuse\n{}", cluster.logs()),
            Err(error) => {
                last = error;
                last.to_ascii_lowercase().contains("readonly")
            }
        }
    });
    assert!(refused, "{name} did not refuse writes with READONLY: {last}");
    last
}

/// A write to `name` is refused with TRYAGAIN naming `awaited` (a restarted primary whose gate
/// waits for that member's word); `taken` is what a write taken would mean.
fn waits_for(cluster: &Cluster, name: &str, awaited: &str, taken: &str) {
    let mut connection = common::redis_connection(cluster.resp_addr(name));
    let refusal = set(&mut connection, "must-wait", "1").expect_err(taken);
    assert!(
        refusal.to_ascii_uppercase().contains("TRYAGAIN") && refusal.contains(awaited),
        "{refusal}"
    );
}

/// Waits until primary `name` has recorded that a standby followed it (what makes it
/// unconfirmed after a restart).
fn wait_followed(cluster: &Cluster, name: &str) {
    let followed = common::poll_until(Duration::from_secs(20), || {
        cluster.server(name).status().roles.is_some_and(|roles| roles.followed)
    });
    assert!(followed, "{name} does not record that a standby followed it\n{}", cluster.logs());
}

/// Switches logs on `primary` and waits until both members have archived the same logs, then
/// checks that every one is byte-identical.
fn assert_same_archives(cluster: &Cluster, primary: &str, standby: &str) {
    cluster.must(&["logswitch", "--addr", &cluster.addr_of(primary)]);
    let same_names = common::poll_until(Duration::from_secs(30), || {
        let (ours, theirs) =
            (archives(&cluster.data_dir(primary)), archives(&cluster.data_dir(standby)));
        ours.keys().eq(theirs.keys())
    });
    let (ours, theirs) =
        (archives(&cluster.data_dir(primary)), archives(&cluster.data_dir(standby)));
    assert!(same_names, "archived logs differ: {:?} and {:?}", ours.keys(), theirs.keys());
    for (name, bytes) in &ours {
        assert!(
            theirs[name] == *bytes,
            "archived log {name} differs between {primary} and {standby}"
        );
    }
}

fn stop_load(load: Load) -> Vec<ClientLog> {
    load.stop()
}

#[test]
fn a_switchover_under_load_loses_nothing_and_a_switchover_back_works() {
    let _watchdog = Watchdog::new(Duration::from_secs(240), "switchover under load");
    let seed = common::seed();
    println!("seed {seed}");
    let mut cluster = Cluster::start(ClusterConfig::pair());
    let load = Load::start(connections(cluster.resp_addr("east"), CLIENTS), "before", seed);
    assert!(load.wait_for_more(500, Duration::from_secs(30)), "no load\n{}", cluster.logs());
    let validation = cluster.must(&["validate", "west"]);
    assert!(validation.contains("Ready for switchover: Yes"), "{validation}");
    let started = Instant::now();
    let done = cluster.must(&["switchover", "--to", "west"]);
    println!("{done} (command took {:?})", started.elapsed());
    // The clients of the old primary were told, and stopped.
    let logs = stop_load(load);
    for log in &logs {
        let error = log.error.as_deref().unwrap_or_default().to_ascii_lowercase();
        assert!(
            error.contains("readonly") || error.contains("tryagain"),
            "a client stopped on: {error}"
        );
    }
    let before = acknowledged(&logs);
    let checked = verify_acknowledged(
        &mut common::redis_connection(cluster.resp_addr("west")),
        &logs,
        "west after the switchover",
    );
    assert!(checked >= before, "checked {checked} of {before}");
    refuses_writes(&cluster, "east");
    // The new primary takes writes, and the old one follows it.
    let load = Load::start(connections(cluster.resp_addr("west"), CLIENTS), "after", seed + 1);
    assert!(
        load.wait_for_more(500, Duration::from_secs(30)),
        "no load on west\n{}",
        cluster.logs()
    );
    let logs_after = stop_load(load);
    assert!(
        logs_after.iter().all(|log| log.error.is_none()),
        "{:?}",
        logs_after.iter().map(|log| &log.error).collect::<Vec<_>>()
    );
    cluster.wait_shipping("west", Duration::from_secs(30));
    cluster.wait_applied("east", "west", Duration::from_secs(30));
    assert_same_data(&cluster, "east", "west");
    assert_same_archives(&cluster, "west", "east");
    let configuration = cluster.must(&["show", "configuration", "--json"]);
    let configuration: serde_json::Value = serde_json::from_str(&configuration).unwrap();
    assert_eq!(configuration["primary"], "west", "{configuration}");
    // And back.
    cluster.must(&["switchover", "--to", "east"]);
    first_write(&cluster, "east", "back home");
    verify_acknowledged(
        &mut common::redis_connection(cluster.resp_addr("east")),
        &logs_after,
        "east after switching back",
    );
    let mut east = common::redis_connection(cluster.resp_addr("east"));
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut east).unwrap();
    assert_eq!(role.first(), Some(&redis::Value::BulkString(b"master".to_vec())), "{role:?}");
    cluster.wait_shipping("east", Duration::from_secs(30));
    let mut west = common::redis_connection(cluster.resp_addr("west"));
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut west).unwrap();
    assert_eq!(role.first(), Some(&redis::Value::BulkString(b"slave".to_vec())), "{role:?}");
    let _ = &mut cluster;
}

#[test]
fn a_failover_after_kill_dash_nine_loses_no_acknowledged_commit_then_reinstate_and_back() {
    let _watchdog = Watchdog::new(Duration::from_secs(300), "failover after kill -9");
    let seed = common::seed();
    println!("seed {seed} (set REDOGUARD_TEST_SEED to replay the same choices)");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut cluster = Cluster::start(ClusterConfig::pair());
    for round in 0..2 {
        let load = Load::start(
            connections(cluster.resp_addr("east"), CLIENTS),
            &format!("round{round}"),
            rng.random(),
        );
        assert!(load.wait_for_more(100, Duration::from_secs(30)), "no load\n{}", cluster.logs());
        std::thread::sleep(Duration::from_millis(rng.random_range(100..1500)));
        cluster.kill("east");
        let logs = stop_load(load);
        let lost_primary_at = Instant::now();
        cluster.wait_primary_lost("west", Duration::from_secs(10));
        let out = cluster.must(&["failover", "--to", "west"]);
        let write = first_write(&cluster, "west", &format!("first write of round {round}"));
        println!(
            "round {round}: {out} first write after {:?} (from the kill: {:?})",
            write,
            lost_primary_at.elapsed()
        );
        assert!(out.contains("incarnation"), "{out}");
        let checked = verify_acknowledged(
            &mut common::redis_connection(cluster.resp_addr("west")),
            &logs,
            "west after the failover",
        );
        assert!(checked >= acknowledged(&logs));
        // The old primary, restarted, refuses writes until it is reinstated.
        cluster.start_member("east");
        let refusal = refuses_writes(&cluster, "east");
        assert!(refusal.contains("west"), "the refusal names the new primary: {refusal}");
        let reinstated = cluster.must(&["reinstate", "east"]);
        println!("round {round}: {reinstated}");
        cluster.wait_shipping("west", Duration::from_secs(60));
        cluster.wait_applied("east", "west", Duration::from_secs(60));
        assert_same_data(&cluster, "east", "west");
        // Back to east, which then takes writes again.
        cluster.must(&["switchover", "--to", "east"]);
        first_write(&cluster, "east", &format!("back in round {round}"));
        cluster.wait_shipping("east", Duration::from_secs(60));
    }
}

/// ASYNC under Maximum Performance: the primary ships nothing to the standby while it commits,
/// the primary is killed, the standby fails over without what it lacked; the old primary's extra
/// redo is set aside at its reinstate, and both end equal.
fn async_failover_sets_the_divergent_tail_aside(checkpoint_interval: &'static str, rebuilt: bool) {
    let mut config = ClusterConfig::pair();
    config.members = vec![
        MemberSpec::new("east", "async", "primary"),
        MemberSpec::new("west", "async", "standby"),
    ];
    config.protection_mode = "maximum_performance";
    config.checkpoint_interval = checkpoint_interval;
    let mut cluster = Cluster::start(config);
    let mut east = common::redis_connection(cluster.resp_addr("east"));
    for n in 0..300 {
        set(&mut east, &format!("shared{n}"), "both have it").unwrap();
    }
    cluster.wait_applied("west", "east", Duration::from_secs(30));
    // The primary stops shipping to the standby (its destination deferred, as for a standby
    // taken out of service), goes on committing (ASYNC), then is lost. (Stopping the standby's
    // process is no way to make it miss redo: its kernel goes on taking what fits in the
    // socket's buffers, and 200 small commits do fit.)
    let deferred = cluster.must(&["edit", "destination", "west", "state=defer"]);
    assert!(deferred.contains("state=defer"), "{deferred}");
    for n in 0..200 {
        set(&mut east, &format!("lost{n}"), "only the old primary has it").unwrap();
    }
    cluster.kill("east");
    // As a DBA would: fail over once the standby has seen its primary go (it refuses while
    // the primary is connected to it).
    cluster.wait_primary_lost("west", Duration::from_secs(10));
    let out = cluster.must(&["failover", "--to", "west"]);
    println!("{out}");
    first_write(&cluster, "west", "new incarnation");
    cluster.start_member("east");
    refuses_writes(&cluster, "east");
    let reinstated = cluster.must(&["reinstate", "east", "--json"]);
    println!("{reinstated}");
    let reinstated: serde_json::Value = serde_json::from_str(&reinstated).unwrap();
    assert_eq!(reinstated["rebuilt"], rebuilt, "{reinstated}");
    let records = reinstated["set_aside"]["records"].as_u64().unwrap();
    assert!(records >= 1, "the divergent tail is reported: {reinstated}");
    let dir = std::path::PathBuf::from(reinstated["set_aside"]["dir"].as_str().unwrap());
    let listed = cluster.must(&["reinstate", "--show-divergent", dir.to_str().unwrap()]);
    assert_eq!(listed.lines().filter(|line| line.starts_with("SCN ")).count() as u64, records);
    assert!(listed.contains("lost"), "the set-aside records hold the lost keys:\n{listed}");
    // Byte for byte as Redis commands, to replay with `redis-cli --pipe`.
    let resp = std::fs::read(dir.join("divergent.resp")).unwrap();
    assert_eq!(
        resp.windows(b"MULTI".len()).filter(|window| *window == b"MULTI").count() as u64,
        records
    );
    cluster.wait_shipping("west", Duration::from_secs(60));
    cluster.wait_applied("east", "west", Duration::from_secs(60));
    assert_same_data(&cluster, "east", "west");
    let mut west = common::redis_connection(cluster.resp_addr("west"));
    let survived: Option<String> = redis::cmd("GET").arg("lost199").query(&mut west).unwrap();
    let shared: Option<String> = redis::cmd("GET").arg("shared299").query(&mut west).unwrap();
    assert_eq!(shared.as_deref(), Some("both have it"));
    // Whatever of the tail had reached the standby before it stopped is in the new
    // incarnation; what had not is only in the set-aside file.
    if survived.is_none() {
        assert!(listed.contains("lost199"));
    }
}

#[test]
fn an_async_failover_with_a_lag_then_reinstate_rewinds_the_old_primary() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "async failover, rewind");
    // Checkpoints rarely: the old primary's data files stay before the failover point.
    async_failover_sets_the_divergent_tail_aside("1h", false);
}

#[test]
fn an_async_failover_then_reinstate_rebuilds_an_old_primary_that_checkpointed_past_the_branch() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "async failover, rebuild");
    // Checkpoints often: the old primary's data files already hold the divergent tail.
    async_failover_sets_the_divergent_tail_aside("100ms", true);
}

#[test]
fn a_new_standby_copied_from_a_primary_under_load_whose_early_logs_are_gone_ends_equal() {
    let _watchdog = Watchdog::new(Duration::from_secs(240), "a new standby from a running primary");
    let seed = common::seed();
    let mut config = ClusterConfig::pair();
    config.log_file_size = "1MiB";
    config.redo_extra =
        "archive_deletion_policy = \"applied_on_all_standby\"\narchive_keep_min = \"0s\"\n".into();
    let mut cluster = Cluster::start(config);
    let load = Load::start(connections(cluster.resp_addr("east"), CLIENTS), "early", seed);
    // Enough redo for several logs, archived, applied by west, then deleted by retention.
    let deleted = common::poll_until(Duration::from_secs(90), || {
        let status = cluster.server("east").status();
        status
            .retention
            .as_ref()
            .and_then(|retention| retention.last_pass.as_ref())
            .is_some_and(|pass| pass.deleted_logs > 0)
            && status.archive.recent.first().is_some_and(|oldest| oldest.seq.0 > 2)
    });
    assert!(
        deleted,
        "retention deleted no early log: {:?}\n{}",
        cluster.server("east").status().retention,
        cluster.logs()
    );
    // The standby is lost for good; a new one is built from the running primary.
    cluster.kill("west");
    std::fs::remove_dir_all(cluster.data_dir("west")).unwrap();
    cluster.start_member_with("west", &["--from", "east"]);
    let copied = std::fs::read_to_string(cluster.log_path("west")).unwrap();
    assert!(copied.contains("copy of the data complete"), "{copied}");
    assert!(
        load.wait_for_more(200, Duration::from_secs(30)),
        "the load stopped\n{}",
        cluster.logs()
    );
    let logs = stop_load(load);
    assert!(
        logs.iter().all(|log| log.error.is_none()),
        "{:?}",
        logs.iter().map(|log| &log.error).collect::<Vec<_>>()
    );
    cluster.wait_shipping("east", Duration::from_secs(60));
    cluster.wait_applied("west", "east", Duration::from_secs(60));
    assert_same_data(&cluster, "east", "west");
    verify_acknowledged(
        &mut common::redis_connection(cluster.resp_addr("west")),
        &logs,
        "the new standby",
    );
    // Retention may have deleted every archived log by now (all applied on the new standby
    // too): an empty archive has no log 1 either.
    let archive = cluster.server("east").status().archive;
    let oldest = archive.recent.first().map(|entry| entry.seq.0);
    assert!(
        oldest.is_none_or(|seq| seq > 1),
        "log 1 is still in the primary's archive: {:?}",
        archive.recent
    );
}

#[test]
fn bad_role_changes_are_refused_with_a_reason_and_change_nothing() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "bad role changes");
    let mut config = ClusterConfig::pair();
    config.net_timeout = "1s";
    let mut cluster = Cluster::start(config);
    let mut east = common::redis_connection(cluster.resp_addr("east"));
    set(&mut east, "kept", "yes").unwrap();
    let refused = |cluster: &Cluster, args: &[&str], says: &str| {
        let (ok, stdout, stderr) = cluster.redoguard(args);
        assert!(!ok, "redoguard {args:?} should be refused:\n{stdout}");
        assert!(stderr.contains(says), "redoguard {args:?} says:\n{stderr}\n(expected '{says}')");
    };
    refused(&cluster, &["switchover", "--to", "nowhere"], "not a member");
    refused(&cluster, &["switchover", "--to", "east"], "primary already");
    refused(&cluster, &["failover", "--to", "west"], "reachable and open");
    refused(&cluster, &["reinstate", "west"], "nothing to reinstate");
    refused(&cluster, &["reinstate", "east"], "is the primary");
    // A standby that lags (stopped: the primary drops it after net_timeout).
    let west_pid = cluster.server("west").pid();
    common::freeze(west_pid);
    for n in 0..20 {
        set(&mut east, &format!("while stopped {n}"), "x").unwrap();
    }
    refused(&cluster, &["switchover", "--to", "west"], "not ready");
    common::thaw(west_pid);
    // A member that cannot be reached.
    cluster.kill("west");
    refused(&cluster, &["reinstate", "west"], "cannot be reached");
    refused(&cluster, &["failover", "--to", "west"], "cannot be reached");
    // Nothing changed: east is the primary and takes writes; its data is whole.
    set(&mut east, "still", "the primary").unwrap();
    let kept: Option<String> = redis::cmd("GET").arg("kept").query(&mut east).unwrap();
    assert_eq!(kept.as_deref(), Some("yes"));
    let status = cluster.server("east").status();
    let roles = status.roles.expect("a member's status");
    assert_eq!((roles.role.as_str(), roles.incarnation), ("primary", 1));
    assert!(roles.fenced.is_none());
    // A new standby that no primary has shipped to and that took no copy holds no database:
    // a primary made of it would hold nothing, beside an old primary that no standby followed
    // (found by the restart model, `roles/tests/model_restart.rs`).
    cluster.kill("east");
    std::fs::remove_dir_all(cluster.data_dir("west")).unwrap();
    cluster.start_member("west");
    refused(&cluster, &["failover", "--to", "west"], "holds no database");
}

/// A primary restarted while no other member can answer it does not know whether it was failed
/// over while it was down (its write gate is unconfirmed). A reinstate sent to it then waits
/// for an answer, briefly, and says that it has none, not that there is nothing to reinstate;
/// once its standby is back and tells it that it was not failed over, the refusal says that.
#[test]
fn a_reinstate_before_the_primary_has_heard_whether_it_was_failed_over_says_so() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "reinstate of an unconfirmed primary");
    let mut cluster = Cluster::start(ClusterConfig::pair());
    wait_followed(&cluster, "east");
    let reinstate = |cluster: &Cluster| {
        admin::client::http_call(
            &cluster.addr_of("east"),
            "POST",
            "/roles/reinstate?primary=west",
            Duration::from_secs(90),
        )
        .unwrap_or_else(|error| panic!("POST /roles/reinstate to east: {error:#}"))
    };
    cluster.kill("west");
    cluster.stop("east");
    cluster.start_member("east");
    let asked = Instant::now();
    let (code, reply) = reinstate(&cluster);
    let waited = asked.elapsed();
    assert_eq!(code, 409, "{reply}");
    assert!(
        reply.contains("has not yet heard from any member whether it was failed over"),
        "{reply}"
    );
    assert!(
        waited >= Duration::from_secs(4),
        "refused after {waited:?}, without waiting for an answer"
    );
    // Its writes wait for the same answer, then are told to try again: it is not open.
    let mut connection = common::redis_connection(cluster.resp_addr("east"));
    let refusal =
        set(&mut connection, "must-wait", "1").expect_err("an unconfirmed primary took a write");
    assert!(refusal.to_ascii_uppercase().contains("TRYAGAIN"), "{refusal}");

    cluster.start_member("west");
    let mut last = String::new();
    let told = common::poll_until(Duration::from_secs(30), || {
        let (code, reply) = reinstate(&cluster);
        assert_eq!(code, 409, "{reply}");
        last = reply;
        last.contains("has not been failed over")
    });
    assert!(told, "east still says: {last}\n{}", cluster.logs());
    let _ = first_write(&cluster, "east", "east confirmed");
}

/// A restarted primary takes writes only once every standby it ships to has accepted it. Here
/// the DBA failed over to `west` while `east` was down, and `west` does not ship to `south`
/// (deferred: what a partition between them would do), so `south` is still in east's
/// incarnation and welcomes east when it restarts, as if nothing had happened. With `west`
/// down too, east must not take that welcome as proof: it waits for west, whose refusal, once
/// it is back, fences it.
#[test]
fn a_restarted_primary_is_not_confirmed_by_one_standby_while_another_may_be_the_new_primary() {
    let _watchdog = Watchdog::new(Duration::from_secs(240), "confirmation by every standby");
    let mut cluster = Cluster::start(ClusterConfig {
        members: vec![
            MemberSpec::new("east", "sync", "primary"),
            MemberSpec::new("west", "sync", "standby"),
            MemberSpec::new("south", "async", "standby"),
        ],
        ..ClusterConfig::pair()
    });
    cluster.wait_shipping("east", Duration::from_secs(30));
    wait_followed(&cluster, "east");
    // Once primary, west will not ship to south: south never hears of the new incarnation.
    // (On west alone: `redoguard edit` would defer it on every member.)
    let (code, reply) = admin::client::http_call_with_body(
        &cluster.addr_of("west"),
        "POST",
        "/settings/destinations/south",
        br#"{"state": "defer"}"#,
        Duration::from_secs(30),
    )
    .unwrap_or_else(|error| panic!("POST /settings/destinations/south to west: {error:#}"));
    assert_eq!(code, 200, "{reply}");
    cluster.kill("east");
    cluster.wait_primary_lost("west", Duration::from_secs(10));
    cluster.must(&["failover", "--to", "west"]);
    first_write(&cluster, "west", "after the failover");
    cluster.kill("west");

    cluster.start_member("east");
    // South welcomes it (the refusal no longer names south); west cannot answer.
    let mut last = String::new();
    let heard_south = common::poll_until(Duration::from_secs(30), || {
        let mut connection = common::redis_connection(cluster.resp_addr("east"));
        match set(&mut connection, "must-not-be-taken", "1") {
            Ok(()) => panic!(
                "east took a write while west, the new primary, was down\n{}",
                cluster.logs()
            ),
            Err(error) => last = error,
        }
        last.to_ascii_uppercase().contains("TRYAGAIN") && last.contains("(west did not answer yet")
    });
    assert!(heard_south, "east did not wait for west alone: {last}\n{}", cluster.logs());
    let status = cluster.server("south").status();
    let standby = status.replication.standby.expect("south is a standby");
    assert!(standby.connected, "south does not follow east: {standby:?}\n{}", cluster.logs());
    // However long it waits, it takes no write.
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let mut connection = common::redis_connection(cluster.resp_addr("east"));
        let refusal = set(&mut connection, "must-not-be-taken", "1")
            .expect_err("east took a write while west was down");
        assert!(refusal.to_ascii_uppercase().contains("TRYAGAIN"), "{refusal}");
    }

    cluster.start_member("west");
    let refusal = refuses_writes(&cluster, "east");
    assert!(refusal.contains("west"), "{refusal}");
}

/// A new primary restarted before any standby followed it still waits for its standbys: the
/// failover that made it primary wrote `followed` with its role, since the old primary could
/// be made primary again once reinstated. Here the old primary is down: the new one takes no
/// write until the old one is back and reinstated as its standby, and then takes them.
#[test]
fn a_new_primary_restarted_before_any_standby_followed_it_waits_for_them() {
    let _watchdog = Watchdog::new(Duration::from_secs(240), "a restarted new primary");
    let mut cluster = Cluster::start(ClusterConfig::pair());
    cluster.wait_shipping("east", Duration::from_secs(30));
    cluster.kill("east");
    cluster.wait_primary_lost("west", Duration::from_secs(10));
    cluster.must(&["failover", "--to", "west"]);
    first_write(&cluster, "west", "after the failover");
    cluster.kill("west");
    cluster.start_member("west");
    waits_for(
        &cluster,
        "west",
        "east",
        "the restarted new primary took a write before any standby confirmed it",
    );

    cluster.start_member("east");
    refuses_writes(&cluster, "east");
    cluster.must(&["reinstate", "east"]);
    let _ = first_write(&cluster, "west", "confirmed by the reinstated east");
}

/// A primary no standby has followed yet serves a copy (`server --from`) and is lost before its
/// first hello reaches the new standby, which is then failed over to. The primary recorded
/// `followed` before it served the copy, so its restart waits for the new primary's word and
/// takes no write beside it. Before that record (found by `roles/tests/model_restart.rs`), it
/// restarted with no standby followed, its gate open: writes in incarnation 1 after
/// incarnation 2 had written. The hello is held off by west's `reopen`: east's one try, made
/// before west existed, failed, and the next is minutes away.
#[test]
fn a_primary_that_served_a_copy_and_was_lost_before_its_hello_waits_after_a_restart() {
    let _watchdog = Watchdog::new(Duration::from_secs(240), "a copy, then a lost primary");
    let mut config = ClusterConfig::pair();
    config.members = vec![
        MemberSpec::new("east", "async", "primary"),
        MemberSpec {
            extra: "reopen = \"600s\"\n",
            later: true,
            ..MemberSpec::new("west", "async", "standby")
        },
    ];
    config.protection_mode = "maximum_performance";
    let mut cluster = Cluster::start(config);
    let mut east = common::redis_connection(cluster.resp_addr("east"));
    set(&mut east, "before the copy", "1").unwrap();
    let destination = |cluster: &Cluster| {
        let status = cluster.server("east").status();
        let roles = status.roles.expect("a member's status");
        let west = status.replication.destinations.into_iter().find(|d| d.name == "west");
        (roles.followed, west.expect("east ships to west"))
    };
    let tried =
        common::poll_until(Duration::from_secs(20), || destination(&cluster).1.failures > 0);
    assert!(tried, "east has not tried west yet: {:?}\n{}", destination(&cluster), cluster.logs());
    assert!(!destination(&cluster).0, "east records a follower before any standby existed");

    cluster.start_member_with("west", &["--from", "east"]);
    let copied = std::fs::read_to_string(cluster.log_path("west")).unwrap();
    assert!(copied.contains("copy of the data complete"), "{copied}");
    let (followed, west) = destination(&cluster);
    // The window this test is about: the copy is served, no hello has reached west.
    assert!(
        !matches!(west.phase, transport::Phase::Synchronized | transport::Phase::Streaming)
            && west.failures == 1,
        "east reached west already, which voids this test: {west:?}"
    );
    assert!(followed, "east served a copy without recording that a standby holds its database");
    cluster.kill("east");
    cluster.must(&["failover", "--to", "west"]);
    first_write(&cluster, "west", "incarnation 2");
    // West is lost too; east restarts and must not take writes: west may be (and is) the
    // primary of a newer incarnation.
    cluster.kill("west");
    cluster.start_member("east");
    // (Each write waits a few seconds at the unconfirmed gate before it is refused.)
    for _ in 0..2 {
        waits_for(
            &cluster,
            "east",
            "west",
            "east took a write after west's failover: two primaries",
        );
    }
    // West back: its answer fences east, which then refuses as a standby would.
    cluster.start_member("west");
    refuses_writes(&cluster, "east");
}

/// An old primary that hears from no member after its restart stays unconfirmed (here it
/// defers its only destination and the new primary defers it: what a far sync that is down
/// leaves between them). A reinstate naming the new primary then asks that primary itself,
/// fences on its word (a newer incarnation of the same database), and goes on; the member
/// catches up once it is shipped to again.
#[test]
fn a_reinstate_of_a_primary_that_hears_from_no_member_asks_the_primary_it_names() {
    let _watchdog = Watchdog::new(Duration::from_secs(240), "reinstate asks the primary");
    let mut cluster = Cluster::start(ClusterConfig::pair());
    cluster.wait_shipping("east", Duration::from_secs(30));
    cluster.must(&["edit", "protection-mode", "maximum_performance"]);
    let mut east = common::redis_connection(cluster.resp_addr("east"));
    set(&mut east, "before the failover", "1").unwrap();
    cluster.wait_applied("west", "east", Duration::from_secs(30));
    cluster.must(&["edit", "destination", "west", "state=defer"]);
    wait_followed(&cluster, "east");
    drop(east);
    cluster.kill("east");
    cluster.wait_primary_lost("west", Duration::from_secs(10));
    cluster.must(&["failover", "--to", "west"]);
    first_write(&cluster, "west", "after the failover");
    cluster.must(&["edit", "protection-mode", "maximum_performance"]);
    cluster.must(&["edit", "destination", "east", "state=defer"]);

    cluster.start_member("east");
    let mut connection = common::redis_connection(cluster.resp_addr("east"));
    let refusal =
        set(&mut connection, "must-wait", "1").expect_err("an unconfirmed primary took a write");
    assert!(refusal.to_ascii_uppercase().contains("TRYAGAIN"), "{refusal}");
    let reinstated = cluster.must(&["reinstate", "east"]);
    println!("{reinstated}");
    assert!(reinstated.contains("is a standby of 'west'"), "{reinstated}");
    let log = std::fs::read_to_string(cluster.log_path("east")).unwrap_or_default();
    assert!(log.contains("the primary named by a reinstate says"), "east's log:\n{log}");

    cluster.must(&["edit", "destination", "east", "state=enable"]);
    cluster.wait_applied("east", "west", Duration::from_secs(60));
    assert_same_data(&cluster, "east", "west");
}
