//! Cascading on the real binary (redo routes): a primary, a standby that forwards what it
//! receives, and a terminal standby behind it. Writes on the primary are read on the terminal;
//! the cascading standby killed with -9 while the primary switches logs, then restarted: the
//! terminal catches up, gap included, with archives byte-identical to the primary's; after a
//! switchover the new primary's routes apply; a switchover to a member that would reach one of
//! the primary's first hops only through a relay is refused, and done in two steps. The terminal's transport lag is end to end: its
//! forwarder's own lag behind a silent primary shows on it. (A forwarder the routes do not
//! name is refused: `transport::cascade`'s unit tests.)

mod common;
mod replication_support;
mod roles_support;

use std::time::Duration;

use common::Watchdog;
use roles_support::{
    Cluster, ClusterConfig, MemberSpec, all_data, archives, complete_path, first_write, set,
};

/// `a` primary; when `a` is the primary, `b` forwards to `c`; when `b` is, `c` forwards to `a`.
fn cascade() -> ClusterConfig {
    let mut a = MemberSpec::new("a", "async", "primary");
    let mut b = MemberSpec::new("b", "async", "standby");
    let mut c = MemberSpec::new("c", "async", "standby");
    a.extra = "";
    b.extra = "routes = [{ when = \"a\", to = \"c\" }]\n";
    c.extra = "routes = [{ when = \"b\", to = \"a\" }]\n";
    ClusterConfig {
        members: vec![a, b, c],
        protection_mode: "maximum_performance",
        ..ClusterConfig::pair()
    }
}

fn write_keys(cluster: &Cluster, member: &str, prefix: &str, count: usize) {
    let mut connection = common::redis_connection(cluster.resp_addr(member));
    for index in 0..count {
        redis::cmd("SET")
            .arg(format!("{prefix}:{index}"))
            .arg(format!("value {index} of {prefix}, {}", "x".repeat(index % 200)))
            .query::<()>(&mut connection)
            .unwrap_or_else(|error| panic!("SET on {member}: {error}\n{}", cluster.logs()));
    }
}

fn assert_same_data(cluster: &Cluster, a: &str, b: &str) {
    let ours = all_data(&mut common::redis_connection(cluster.resp_addr(a)));
    let theirs = all_data(&mut common::redis_connection(cluster.resp_addr(b)));
    assert!(!ours.is_empty());
    assert_eq!(ours.len(), theirs.len(), "{a} and {b} hold different numbers of keys");
    assert!(ours == theirs, "{a} and {b} hold different data");
}

/// Every archived log both members hold is the same file, byte for byte.
fn assert_same_archives(cluster: &Cluster, a: &str, b: &str) -> usize {
    let ours = archives(&cluster.data_dir(a));
    let theirs = archives(&cluster.data_dir(b));
    let mut compared = 0;
    for (name, bytes) in &theirs {
        if let Some(primary) = ours.get(name) {
            assert!(primary == bytes, "archived log {name} of {b} differs from {a}'s");
            compared += 1;
        }
    }
    compared
}

#[test]
fn a_cascading_standby_forwards_to_the_terminal_which_catches_up_after_a_kill_and_a_switchover_applies_the_new_routes()
 {
    let _watchdog = Watchdog::new(Duration::from_secs(300), "cascade");
    let mut cluster = Cluster::start(cascade());
    let limit = Duration::from_secs(60);

    // a ships to b only; b forwards to c.
    let a = cluster.server("a").status();
    let names: Vec<&str> =
        a.replication.destinations.iter().map(|destination| destination.name.as_str()).collect();
    assert_eq!(names, ["b"], "under a's routes a ships to b only");
    let b = cluster.server("b").status();
    assert_eq!(
        b.replication.destinations.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
        ["c"],
        "b forwards to c"
    );

    write_keys(&cluster, "a", "first", 300);
    cluster.wait_applied("c", "a", limit);
    assert_same_data(&cluster, "a", "c");
    let c = cluster.server("c").status().replication.standby.expect("c is a standby");
    assert_eq!(c.primary_member.as_deref(), Some("a"), "c follows a");
    assert_eq!(c.source_member.as_deref(), Some("b"), "through b");

    // Lags end to end: with a silent (frozen), b's transport lag grows, and c, which holds
    // all b has, lacks at least as much; it says so (b's lag, passed on), not 0.
    let transport_lag = |name: &str| {
        let status = cluster.server(name).status().replication.standby;
        status.expect("a standby").transport_lag_s
    };
    common::freeze(cluster.server("a").pid());
    common::wait_until(Duration::from_secs(20), "b's transport lag to pass 2 s", || {
        transport_lag("b") >= 2.0
    });
    let (b_lag, c_lag) = (transport_lag("b"), transport_lag("c"));
    common::thaw(cluster.server("a").pid());
    assert!(c_lag >= 1.5, "c's transport lag {c_lag:.3} s while b's is {b_lag:.3} s");
    common::wait_until(Duration::from_secs(20), "c's transport lag to fall under 1 s", || {
        transport_lag("c") < 1.0
    });

    let shown = cluster.must(&["show", "configuration"]);
    assert!(shown.contains("Redo routes (when a is the primary):"), "{shown}");
    let tree: Vec<&str> = shown
        .lines()
        .skip_while(|line| !line.contains("Redo routes"))
        .skip(1)
        .take(3)
        .map(str::trim)
        .collect();
    assert_eq!(tree[0], "a", "{shown}");
    assert!(tree[1].starts_with("└─ b  ASYNC"), "{shown}");
    assert!(tree[2].starts_with("└─ c  ASYNC  STREAMING"), "{shown}");
    assert!(shown.contains("Configuration status: SUCCESS"), "{shown}");

    // kill -9 of the forwarder; the primary goes on and switches logs: the terminal lacks
    // whole logs, which b gets from a, and c from b (gap resolution).
    cluster.kill("b");
    write_keys(&cluster, "a", "during", 300);
    for _ in 0..2 {
        cluster.must(&["logswitch", "--addr", &cluster.addr_of("a")]);
        write_keys(&cluster, "a", "switched", 50);
    }
    let durable = cluster.server("a").status().database.redo.durable_scn;
    assert!(
        cluster.server("c").status().database.applied_scn < durable,
        "c must have nothing of what a wrote while b was down"
    );
    cluster.start_member("b");
    cluster.wait_applied("c", "a", limit);
    assert_same_data(&cluster, "a", "c");
    // The logs closed while b was down reached c byte for byte.
    cluster.must(&["logswitch", "--addr", &cluster.addr_of("a")]);
    let a_seq = cluster.server("a").status().database.redo.durable_addr.seq;
    let archived = common::poll_until(limit, || {
        cluster
            .server("c")
            .status()
            .replication
            .standby
            .is_some_and(|standby| standby.complete_through_seq.0 + 1 >= a_seq.0)
    });
    assert!(archived, "c did not archive every log a closed\n{}", cluster.logs());
    assert!(assert_same_archives(&cluster, "a", "c") >= 3, "c archived the logs a closed");

    // Switchover to b: b's routes apply by themselves: b ships to c, c forwards to a.
    cluster.must(&["switchover", "--to", "b"]);
    cluster.wait_shipping("b", limit);
    let b = cluster.server("b").status();
    assert_eq!(
        b.replication.destinations.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
        ["c"],
        "under b's routes b ships to c only"
    );
    write_keys(&cluster, "b", "after", 200);
    cluster.wait_applied("a", "b", limit);
    assert_same_data(&cluster, "b", "a");
    let a = cluster.server("a").status().replication.standby.expect("a is a standby now");
    assert_eq!(a.primary_member.as_deref(), Some("b"));
    assert_eq!(a.source_member.as_deref(), Some("c"));

    // Straight back to a is refused, nothing changed: b ships directly to c, which a would
    // reach only through b, so a failover to c while the switchover was half done would go
    // unseen by a as it opened (`roles::switchover`). b stays the primary and takes writes.
    let (ok, out, err) = cluster.redoguard(&["switchover", "--to", "a"]);
    let said = format!("{out}{err}");
    assert!(!ok && said.contains("'c'") && said.contains("only through a relay"), "{said}");
    assert_eq!(cluster.server("b").status().roles.expect("roles").role, "primary");
    write_keys(&cluster, "b", "refused", 10);

    // In two steps whose routes keep the first hops: to c (which ships to a and b directly),
    // then to a, which c reaches directly; a's routes apply again (a ships to b, b forwards
    // to c).
    cluster.must(&["switchover", "--to", "c"]);
    cluster.wait_shipping("c", limit);
    cluster.must(&["switchover", "--to", "a"]);
    cluster.wait_shipping("a", limit);
    write_keys(&cluster, "a", "back", 200);
    cluster.wait_applied("c", "a", limit);
    assert_same_data(&cluster, "a", "c");
    let c = cluster.server("c").status().replication.standby.expect("c is a standby");
    assert_eq!(c.source_member.as_deref(), Some("b"), "under a, c receives through b again");
}

/// A primary `a` ships SYNC AFFIRM to the far sync `fs` only, under Maximum Availability;
/// `fs` forwards to the terminal `t`. Under load, `t` is killed with -9 (`fs` then waits a
/// minute, `t`'s `reopen`, before it connects to it again), then `a`: `t` restarts holding
/// none of what `a` wrote meanwhile, and is failed over to at once. The failover seals `fs`
/// and takes its tail (docs/roles.md, "Failover through a far sync"): every write `a`
/// acknowledged is on `t`. `fs` is never a target.
#[test]
fn through_a_far_sync_a_failover_to_the_terminal_takes_the_far_syncs_tail_and_loses_nothing_acknowledged()
 {
    let _watchdog = Watchdog::new(Duration::from_secs(300), "far sync");
    let a = MemberSpec::new("a", "async", "primary");
    let mut fs = MemberSpec::new("fs", "sync", "standby");
    fs.extra = "kind = \"far_sync\"\nroutes = [{ when = \"a\", to = \"t\" }]\n";
    let mut t = MemberSpec::new("t", "async", "standby");
    t.extra = "reopen = \"60s\"\n";
    let mut cluster = Cluster::start(ClusterConfig {
        members: vec![a, fs, t],
        protection_mode: "maximum_availability",
        ..ClusterConfig::pair()
    });
    let status = cluster.server("a").status();
    let shipped: Vec<(&str, transport::Phase)> = status
        .replication
        .destinations
        .iter()
        .map(|destination| (destination.name.as_str(), destination.phase))
        .collect();
    assert_eq!(shipped, [("fs", transport::Phase::Synchronized)], "a ships SYNC to fs only");
    let shown = cluster.must(&["show", "configuration"]);
    assert!(shown.contains("└─ fs  SYNC AFFIRM  SYNCHRONIZED"), "{shown}");
    assert!(shown.contains("└─ t  ASYNC  STREAMING"), "{shown}");
    assert!(shown.contains("Far sync"), "{shown}");
    let (ok, out, err) = cluster.redoguard(&["switchover", "--to", "fs"]);
    let said = out + &err;
    assert!(!ok && said.contains("is a far sync"), "a switchover to the far sync: {said}");

    // Writers until the kill: every acknowledged key is recorded.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let address = cluster.resp_addr("a");
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut connection = common::redis_connection(address);
                let mut acknowledged = Vec::new();
                for index in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Acquire) {
                        break;
                    }
                    let key = format!("w{writer}:{index}");
                    match redis::cmd("SET").arg(&key).arg(index).query::<()>(&mut connection) {
                        Ok(()) => acknowledged.push(key),
                        Err(_) => break,
                    }
                }
                acknowledged
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    cluster.kill("t");
    std::thread::sleep(Duration::from_millis(1500));
    cluster.kill("a");
    stop.store(true, std::sync::atomic::Ordering::Release);
    let acknowledged: Vec<String> =
        writers.into_iter().flat_map(|writer| writer.join().unwrap()).collect();
    assert!(acknowledged.len() > 100, "only {} writes acknowledged", acknowledged.len());

    // t comes back without what a wrote while it was down (fs connects to it again only a
    // minute after it lost it): the failover must take that tail from fs.
    cluster.start_member("t");
    let fs_received = cluster.server("fs").status().replication.standby.unwrap().received;
    let t_received = cluster.server("t").status().replication.standby.unwrap().received;
    assert!(
        (t_received.seq.0, t_received.offset) < (fs_received.seq.0, fs_received.offset),
        "t must lack the tail fs holds before the failover: t {t_received}, fs {fs_received}"
    );
    let (ok, out, err) = cluster.redoguard(&["failover", "--to", "fs"]);
    let said = out + &err;
    assert!(!ok && said.contains("far sync"), "a failover to the far sync: {said}");
    let said = cluster.must(&["failover", "--to", "t"]);
    assert!(said.contains("took the tail held by 'fs'"), "{said}");
    cluster.assert_all_present("t", &acknowledged, "acknowledged writes (after the failover)");
    println!(
        "far sync: {} acknowledged writes, all on t after the failover; t held {t_received}, fs {fs_received}: {}",
        acknowledged.len(),
        said.lines().find(|line| line.contains("tail")).unwrap_or_default()
    );
}

/// Maximum Protection through a far sync, the primary frozen (SIGSTOP) rather than dead: the
/// broker cannot reach it and fails over to the terminal, which seals the far sync and takes
/// its tail. Thawed, the old primary is fenced by the new one, and every write it acknowledged
/// is on the new primary. (On loopback the new primary's hello, already waiting on the frozen
/// primary's port, fences it before its next write: this passed with the seal disabled too.
/// What the seal alone prevents, a far sync acknowledging a live old primary that the new one
/// cannot reach, needs a partition: `replication_routes_mesh.rs`.)
#[test]
fn a_frozen_old_primary_failed_over_through_a_far_sync_is_fenced_and_loses_nothing_it_acknowledged()
{
    let _watchdog = Watchdog::new(Duration::from_secs(300), "far sync seal");
    // Under t, a (fenced, so silent) is fs's source: fs hears of t's incarnation from no one.
    // (a is SYNC: t, as a primary under Maximum Protection, needs a SYNC AFFIRM destination of
    // its own.)
    let mut a = MemberSpec::new("a", "sync", "primary");
    a.extra = "routes = [{ when = \"t\", to = \"fs\" }]\n";
    let mut fs = MemberSpec::new("fs", "sync", "standby");
    fs.extra = "kind = \"far_sync\"\nroutes = [{ when = \"a\", to = \"t\" }]\n";
    let t = MemberSpec::new("t", "async", "standby");
    let cluster = Cluster::start(ClusterConfig {
        members: vec![a, fs, t],
        protection_mode: "maximum_protection",
        ..ClusterConfig::pair()
    });
    let limit = Duration::from_secs(60);
    cluster.wait_shipping("a", limit);

    let writers = roles_support::writers_until_turned_away(cluster.resp_addr("a"));
    std::thread::sleep(Duration::from_millis(1500));
    let a_pid = cluster.server("a").pid();
    common::freeze(a_pid);
    let said = cluster.must(&["failover", "--to", "t", "--addr", &cluster.addr_of("t")]);
    assert!(said.contains("took the tail held by 'fs'"), "{said}");
    common::thaw(a_pid);
    let acknowledged: Vec<String> =
        writers.into_iter().flat_map(|writer| writer.join().unwrap()).collect();
    assert!(acknowledged.len() > 100, "only {} writes acknowledged", acknowledged.len());
    let fenced = common::poll_until(limit, || {
        cluster.server("a").status().roles.is_some_and(|roles| roles.fenced.is_some())
    });
    assert!(fenced, "the old primary was not fenced by the new one\n{}", cluster.logs());
    cluster.assert_all_present("t", &acknowledged, "writes the old primary acknowledged");
    println!(
        "frozen primary: {} writes acknowledged by the old primary, all on t; {}",
        acknowledged.len(),
        said.lines().find(|line| line.contains("tail")).unwrap_or_default()
    );
}

/// Behind two relays (`a` → far sync `fs` → cascading `c` → `t`), a failover to `t` could
/// seal only `c`, which may lack what `fs` acknowledged (and `fs` would go on acknowledging a
/// live `a`): it is refused, naming the relay behind the relay, and `c`, behind one relay, is
/// failed over to with `fs`'s tail — once `a` is gone: while it is up, the broker refuses (the
/// target cannot see `a` itself).
#[test]
fn behind_two_relays_a_failover_is_refused_and_the_nearer_member_takes_the_tail() {
    let _watchdog = Watchdog::new(Duration::from_secs(300), "two relays");
    let a = MemberSpec::new("a", "async", "primary");
    let mut fs = MemberSpec::new("fs", "sync", "standby");
    fs.extra = "kind = \"far_sync\"\nroutes = [{ when = \"a\", to = \"c\" }]\n";
    let mut c = MemberSpec::new("c", "async", "standby");
    c.extra = "routes = [{ when = \"a\", to = \"t\" }]\n";
    let t = MemberSpec::new("t", "async", "standby");
    let mut cluster = Cluster::start(ClusterConfig {
        members: vec![a, fs, c, t],
        protection_mode: "maximum_availability",
        ..ClusterConfig::pair()
    });
    write_keys(&cluster, "a", "chain", 200);
    cluster.wait_applied("t", "a", Duration::from_secs(60));
    // While `a` is up it is not lost: `c` never sees it (it hears `a` through `fs`), and the
    // broker's own check refuses.
    let (ok, out, err) = cluster.redoguard(&["failover", "--to", "c"]);
    let said = out + &err;
    assert!(
        !ok && said.contains("the primary 'a' is reachable and open: it is not lost"),
        "a failover while the primary ships to the far sync: {said}\n{}",
        cluster.logs()
    );
    cluster.kill("a");
    let (ok, out, err) = cluster.redoguard(&["failover", "--to", "t"]);
    let said = out + &err;
    assert!(
        !ok && said.contains("receives from 'fs', itself a relay"),
        "a failover behind two relays: {said}\n{}",
        cluster.logs()
    );
    let said = cluster.must(&["failover", "--to", "c"]);
    assert!(said.contains("took the tail held by 'fs'"), "{said}");
    let mut keys = Vec::new();
    for index in 0..200 {
        keys.push(format!("chain:{index}"));
    }
    cluster.assert_all_present("c", &keys, "keys written on a");
}

/// Reinstate and new standbys through a cascade (issue 33's "role transitions with routes").
/// `a` primary, `b` forwards to `c`. `a` killed with -9 and failed over to `b`: under `b`'s
/// routes `b` ships to `c` and `c` forwards to `a`, so `b` never ships to `a` itself. `a`,
/// restarted, is reinstated as a standby of `b` and catches up through `c`. Then `a` is lost
/// for good and rebuilt with `--from c`, a copy taken from the cascading standby (not from
/// the primary), and catches up through `c` again. Each ends with `b`'s data.
#[test]
fn an_old_primary_is_reinstated_through_a_cascade_and_a_new_standby_is_copied_from_the_cascading_one()
 {
    let _watchdog = Watchdog::new(Duration::from_secs(300), "reinstate through a cascade");
    let mut cluster = Cluster::start(cascade());
    let limit = Duration::from_secs(60);
    write_keys(&cluster, "a", "first", 300);
    cluster.wait_applied("c", "a", limit);

    cluster.kill("a");
    cluster.wait_primary_lost("b", limit);
    let said = cluster.must(&["failover", "--to", "b", "--addr", &cluster.addr_of("b")]);
    println!("{said}");
    cluster.wait_shipping("b", limit);
    write_keys(&cluster, "b", "after", 300);
    cluster.wait_applied("c", "b", limit);

    // The old primary comes back: it refuses writes until reinstated, then follows b through c.
    cluster.start_member("a");
    let reinstated = cluster.must(&["reinstate", "a", "--addr", &cluster.addr_of("b")]);
    println!("{reinstated}");
    cluster.wait_applied("a", "b", limit);
    assert_same_data(&cluster, "b", "a");
    let a = cluster.server("a").status().replication.standby.expect("a is a standby now");
    assert_eq!(a.primary_member.as_deref(), Some("b"), "a follows b");
    assert_eq!(a.source_member.as_deref(), Some("c"), "through c");

    // a lost for good: a new one, copied from the cascading standby c.
    cluster.kill("a");
    std::fs::remove_dir_all(cluster.data_dir("a")).unwrap();
    write_keys(&cluster, "b", "while-a-is-gone", 200);
    // c's data files hold all of it (its checkpoint), so the copy carries it, not the redo.
    let written = cluster.server("b").status().database.redo.durable_scn;
    let checkpointed = common::poll_until(limit, || {
        cluster.server("c").status().database.checkpoint_scn >= written
    });
    assert!(checkpointed, "c did not checkpoint SCN {written}\n{}", cluster.logs());
    cluster.start_member_with("a", &["--from", "c"]);
    let copied = std::fs::read_to_string(cluster.log_path("a")).unwrap();
    let complete = copied
        .lines()
        .find(|line| line.contains("copy of the data complete"))
        .unwrap_or_else(|| panic!("no copy completed: {copied}"));
    assert!(complete.contains("from=c"), "{complete}");
    let copied_scn: u64 = complete
        .split("checkpoint_scn=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("{complete}"));
    assert!(copied_scn >= written.0, "the copy is at SCN {copied_scn}, before {written}");
    write_keys(&cluster, "b", "rebuilt", 200);
    cluster.wait_applied("a", "b", limit);
    assert_same_data(&cluster, "b", "a");
    let a = cluster.server("a").status().replication.standby.expect("a is a standby");
    assert_eq!(a.source_member.as_deref(), Some("c"), "the new a receives through c");
}

/// Under `a`, `b` forwards to `c`; under `b` and under `c`, `a` forwards to the other. `a`
/// the primary, a write applied on `c`, and `a`'s switchover to `b` prepared.
fn sealing_cascade_prepared() -> (Cluster, admin::roles::SwitchoverPrepared) {
    let mut a = MemberSpec::new("a", "async", "primary");
    let mut b = MemberSpec::new("b", "async", "standby");
    let c = MemberSpec::new("c", "async", "standby");
    a.extra = "routes = [{ when = \"b\", to = \"c\" }, { when = \"c\", to = \"b\" }]\n";
    b.extra = "routes = [{ when = \"a\", to = \"c\" }]\n";
    let cluster = Cluster::start(ClusterConfig {
        members: vec![a, b, c],
        protection_mode: "maximum_performance",
        ..ClusterConfig::pair()
    });
    first_write(&cluster, "a", "incarnation 1");
    cluster.wait_applied("c", "a", Duration::from_secs(60));
    let (code, reply) = admin::client::http_call(
        &cluster.addr_of("a"),
        "POST",
        "/roles/switchover/prepare?to=b",
        Duration::from_secs(90),
    )
    .unwrap();
    assert_eq!(code, 200, "{reply}");
    let prepared = serde_json::from_str(&reply).unwrap();
    (cluster, prepared)
}

/// A switchover whose target a failover sealed is refused: under `a`, `b` forwards to `c`;
/// under `b` and under `c`, `a` forwards to the other. `a` prepares a switchover to `b`
/// (allowed: each ships first to the other) and is lost; `failover --to c` seals `b`, `c`'s
/// relay, and `c` opens in incarnation 2, shipping to `a` only; `c` is lost too, and `a`
/// comes back in incarnation 1, never having heard of it. The switchover's complete then
/// reaches `b` (a broker run again, say): `b` refuses it, its control file saying it was
/// sealed against incarnation 1. Without that check `b` took over in incarnation 1, was
/// welcomed by `a`, its only destination, and took writes beside `c`.
#[test]
fn a_switchover_whose_target_a_failover_sealed_is_refused() {
    let _watchdog = Watchdog::new(Duration::from_secs(240), "sealed switchover target");
    let (mut cluster, prepared) = sealing_cascade_prepared();
    let limit = Duration::from_secs(60);
    cluster.kill("a");
    cluster.must(&["failover", "--to", "c"]);
    let sealed = common::poll_until(limit, || {
        let roles = cluster.server("b").status().roles.expect("roles");
        roles.incarnation == 1 && roles.role == "standby"
    });
    assert!(sealed, "b is not a standby of incarnation 1\n{}", cluster.logs());
    first_write(&cluster, "c", "incarnation 2");
    cluster.kill("c");
    cluster.start_member("a");
    let a_roles = cluster.server("a").status().roles.expect("roles");
    assert_eq!((a_roles.role.as_str(), a_roles.incarnation), ("standby", 1), "{a_roles:?}");

    let complete = complete_path(&prepared, "a", prepared.incarnation);
    let (code, reply) =
        admin::client::http_call(&cluster.addr_of("b"), "POST", &complete, Duration::from_secs(90))
            .unwrap();
    assert_eq!(code, 409, "b completed a switchover after a failover sealed it: {reply}");
    assert!(reply.contains("sealed"), "{reply}");
    assert_eq!(cluster.server("b").status().roles.expect("roles").role, "standby");
    let mut connection = common::redis_connection(cluster.resp_addr("b"));
    let refused = set(&mut connection, "beside incarnation 2", "lost")
        .expect_err("b took a write beside the primary of incarnation 2");
    assert!(refused.contains("ReadOnly"), "{refused}");
}

/// An old primary a failover sealed does not take its role back: under `a`, `b` forwards to
/// `c`; under `b` and under `c`, `a` forwards to the other. `a` prepares a switchover to `b`.
/// A failover to `c` that last heard `b` as its primary (a stale word: the checker's trace in
/// `roles/tests/model_restart.rs`, `an_abort_that_ignores_its_seal_…`) seals `a`, its relay
/// under `b`; the test plays that failover's seal (`transport::relay_seal`, as `c`). `b`'s
/// wait then runs out and the broker calls `a`'s abort: `a` refuses it as void, removes its
/// record and stays a standby. Before, it took its role back in incarnation 1, `b` welcomed it,
/// and it took writes beside the failover's primary. A failover to `a` is refused too, unless
/// `--force`.
#[test]
fn an_old_primary_a_failover_sealed_does_not_take_its_role_back() {
    let _watchdog = Watchdog::new(Duration::from_secs(240), "sealed old primary's abort");
    let (cluster, prepared) = sealing_cascade_prepared();

    // `c`'s failover from `b`, in incarnation 1: its relay under `b` is `a`.
    let redo = format!("127.0.0.1:{}", cluster.ports["a"].redo);
    let sealed = transport::relay_seal(&redo, "a", "c", "b", 1, None, Duration::from_secs(10))
        .unwrap_or_else(|error| panic!("sealing a: {error}\n{}", cluster.logs()));
    assert_eq!(sealed.incarnation, 1, "{sealed:?}");

    // The broker, run again, does not complete the record: void.
    let (ok, _, stderr) = cluster.redoguard(&["switchover", "--to", "b"]);
    assert!(!ok && stderr.contains("void") && stderr.contains("sealed"), "{stderr}");
    assert_eq!(cluster.server("b").status().roles.expect("roles").role, "standby");

    let abort = format!("/roles/switchover/abort?id={}", prepared.id);
    let (code, reply) =
        admin::client::http_call(&cluster.addr_of("a"), "POST", &abort, Duration::from_secs(90))
            .unwrap();
    assert_eq!(code, 409, "a took its role back after a failover sealed it: {reply}");
    assert!(reply.contains("sealed") && reply.contains("void"), "{reply}");
    assert!(!cluster.data_dir("a").join("switchover.pending").exists(), "the void record stays");
    assert_eq!(cluster.server("a").status().roles.expect("roles").role, "standby");
    let mut connection = common::redis_connection(cluster.resp_addr("a"));
    let refused = set(&mut connection, "beside the failover's primary", "lost")
        .expect_err("a took a write after a failover sealed it");
    assert!(refused.contains("ReadOnly"), "{refused}");

    // Nor is it failed over to: that would be a second failover from incarnation 1, a second
    // primary of incarnation 2. `--force` is the DBA's word.
    let (ok, _, stderr) = cluster.redoguard(&["failover", "--to", "a"]);
    assert!(!ok && stderr.contains("sealed"), "a sealed member was failed over to: {stderr}");
    assert_eq!(cluster.server("a").status().roles.expect("roles").role, "standby");
    cluster.must(&["failover", "--to", "a", "--force"]);
    assert_eq!(cluster.server("a").status().roles.expect("roles").role, "primary");
}
