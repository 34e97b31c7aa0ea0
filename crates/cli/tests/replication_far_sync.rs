//! A far sync on the real binary is what Data Guard's is: standby logs and archives, no data
//! files, never opened, no apply. `a` ships SYNC AFFIRM to the far sync `fs`, which forwards
//! to the terminal `t`: its data directory holds no data file, its applied SCN never moves,
//! its RESP port refuses the key space by name, its archives are byte-identical to the
//! primary's and kept only while what it forwards needs them; killed with -9 under load and
//! restarted, it comes back as it was (still no data file, nothing replayed) and relays again,
//! the gap included, and nothing `a` acknowledged is missing on `t`.
//! (The failover through it and its alternate route: `replication_cascade`,
//! `replication_alternate`.)

mod common;
mod replication_support;
mod roles_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::Watchdog;
use roles_support::{Cluster, ClusterConfig, MemberSpec, archives};

/// The data file a database keeps in its data directory (`DbConfig::data_file`).
const DATA_FILE: &str = "kv.redb";

/// Every file under `dir` whose name is `name`, at any depth.
fn files_named(dir: &std::path::Path, name: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return found };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(files_named(&path, name));
        } else if path.file_name().is_some_and(|file| file == name) {
            found.push(path);
        }
    }
    found
}

fn assert_no_data_file(cluster: &Cluster, member: &str, when: &str) {
    let found = files_named(&cluster.data_dir(member), DATA_FILE);
    assert!(found.is_empty(), "{member} holds data files {when}: {found:?}");
}

/// The far sync's RESP port: the key space is refused, naming why; PING and INFO answer.
fn assert_refuses_the_key_space(cluster: &Cluster, member: &str) {
    let mut connection = common::redis_connection(cluster.resp_addr(member));
    for command in [redis::cmd("GET").arg("k").clone(), redis::cmd("SET").arg("k").arg(1).clone()] {
        let error = command.query::<Option<String>>(&mut connection).unwrap_err().to_string();
        assert!(
            error.contains("NOTOPEN")
                && error.contains("is a far sync")
                && error.contains("never opened"),
            "{member} answered a key-space command with: {error}"
        );
    }
    let error = redis::cmd("DBSIZE").query::<i64>(&mut connection).unwrap_err().to_string();
    assert!(error.contains("NOTOPEN"), "DBSIZE on {member}: {error}");
    let pong: String = redis::cmd("PING").query(&mut connection).unwrap();
    assert_eq!(pong, "PONG");
    let info: String = redis::cmd("INFO").arg("replication").query(&mut connection).unwrap();
    assert!(info.contains("role:"), "INFO replication on {member}: {info}");
}

/// Writers on `address` until `stop`: the keys each acknowledged.
fn writers(
    address: std::net::SocketAddr,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Vec<String>>> {
    (0..4)
        .map(|writer| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut connection = common::redis_connection(address);
                let mut acknowledged = Vec::new();
                for index in 0.. {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    let key = format!("w{writer}:{index}");
                    let value = format!("{index} {}", "x".repeat(index % 300));
                    match redis::cmd("SET").arg(&key).arg(value).query::<()>(&mut connection) {
                        Ok(()) => acknowledged.push(key),
                        Err(error) => panic!("SET {key}: {error}"),
                    }
                }
                acknowledged
            })
        })
        .collect()
}

#[test]
fn a_far_sync_holds_no_data_applies_nothing_refuses_clients_and_relays_again_after_a_kill_9() {
    let _watchdog = Watchdog::new(Duration::from_secs(300), "far sync");
    let a = MemberSpec::new("a", "async", "primary");
    let mut fs = MemberSpec::new("fs", "sync", "standby");
    fs.extra = "kind = \"far_sync\"\nroutes = [{ when = \"a\", to = \"t\" }]\n";
    let t = MemberSpec::new("t", "async", "standby");
    let mut cluster = Cluster::start(ClusterConfig {
        members: vec![a, fs, t],
        protection_mode: "maximum_availability",
        // Archives go once every standby applied them: a far sync's own are judged by what
        // its terminal applied, never by an apply of its own.
        redo_extra: "archive_deletion_policy = \"applied_on_all_standby\"\n".into(),
        ..ClusterConfig::pair()
    });
    let limit = Duration::from_secs(60);
    assert_no_data_file(&cluster, "fs", "once started");
    assert!(
        !files_named(&cluster.data_dir("t"), DATA_FILE).is_empty(),
        "the terminal standby has its data file (the check looks in the right place)"
    );
    assert_refuses_the_key_space(&cluster, "fs");

    // Under load: fs acknowledges SYNC AFFIRM and forwards; it applies nothing.
    let stop = Arc::new(AtomicBool::new(false));
    let running = writers(cluster.resp_addr("a"), &stop);
    std::thread::sleep(Duration::from_millis(1500));
    let status = cluster.server("fs").status();
    let standby = status.replication.standby.clone().expect("fs receives");
    assert!(standby.far_sync, "fs's status says it is a far sync: {standby:?}");
    assert!(standby.received_scn.0 > 0, "fs received redo: {standby:?}");
    assert_eq!(status.database.checkpoint_scn.0, 0, "a far sync never checkpoints");
    assert_eq!(status.database.recovered_records, 0);
    let shipped = cluster.server("a").status().replication.destinations;
    assert!(
        shipped.iter().any(|d| d.name == "fs" && d.phase == transport::Phase::Synchronized),
        "a ships SYNC to fs, synchronized: {shipped:?}"
    );

    // kill -9 under load, restarted: no data file, nothing replayed, relaying again.
    cluster.kill("fs");
    // A far sync is not made from a copy of the primary's data: it holds none.
    let config = cluster.config_path("fs");
    let data_dir = cluster.data_dir("fs");
    let refused = std::process::Command::new(common::binary())
        .args(["server", "--config", config.to_str().unwrap()])
        .args(["--data-dir", data_dir.to_str().unwrap(), "--port", "0", "--admin-port", "0"])
        .args(["--from", "a"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr).to_string()
        + &String::from_utf8_lossy(&refused.stdout);
    assert!(
        !refused.status.success() && said.contains("is a far sync, which holds no data to copy"),
        "--from on a far sync: {said}"
    );
    cluster.start_member("fs");
    assert_no_data_file(&cluster, "fs", "after a kill -9 and a restart");
    let synchronized = common::poll_until(limit, || {
        cluster
            .server("a")
            .status()
            .replication
            .destinations
            .iter()
            .any(|d| d.name == "fs" && d.phase == transport::Phase::Synchronized)
    });
    assert!(synchronized, "fs is not synchronized again\n{}", cluster.logs());
    std::thread::sleep(Duration::from_millis(1000));
    stop.store(true, Ordering::Release);
    let acknowledged: Vec<String> =
        running.into_iter().flat_map(|writer| writer.join().unwrap()).collect();
    assert!(acknowledged.len() > 100, "only {} writes acknowledged", acknowledged.len());

    // Everything reaches t through fs (it never received from a: no route says so).
    cluster.wait_applied("t", "a", limit);
    let t = cluster.server("t").status().replication.standby.expect("t is a standby");
    assert_eq!(t.source_member.as_deref(), Some("fs"), "t receives from fs");
    cluster.assert_all_present("t", &acknowledged, "acknowledged writes (through the far sync)");
    let status = cluster.server("fs").status();
    assert_eq!(status.database.checkpoint_scn.0, 0, "nothing replayed into data files");
    assert_eq!(status.database.recovered_records, 0, "nothing replayed at the restart");
    assert_no_data_file(&cluster, "fs", "at the end");
    assert_refuses_the_key_space(&cluster, "fs");

    // Its archives are the primary's, byte for byte, and retention does not wait for an apply.
    let primary = archives(&cluster.data_dir("a"));
    let relayed = archives(&cluster.data_dir("fs"));
    for (name, bytes) in &relayed {
        if let Some(theirs) = primary.get(name) {
            assert!(theirs == bytes, "archived log {name} of fs differs from a's");
        }
    }
    let held = common::poll_until(limit, || {
        cluster
            .server("fs")
            .status()
            .retention
            .is_some_and(|retention| !retention.held_by.contains("apply"))
    });
    let retention = cluster.server("fs").status().retention;
    assert!(held, "fs's retention waits for an apply: {retention:?}");
    println!(
        "far sync: {} acknowledged writes, all on t through fs (killed -9 and restarted); fs archived {} logs, no data file; retention {retention:?}",
        acknowledged.len(),
        relayed.len()
    );
}

/// A switchover to the terminal behind the far sync (Data Guard allows it): `a` ships to `fs`
/// only, `t` receives from `fs`. The old primary hands its redo to `fs`, and `t` opens only
/// once it has received and applied all of it: every write `a` acknowledged, under load up to
/// the switchover, is on `t`; then `t`'s own routes apply (it ships to `a` itself), and a
/// switchover back to `a` works as to any direct destination.
#[test]
fn a_switchover_to_the_terminal_behind_the_far_sync_loses_nothing_and_goes_back() {
    let _watchdog = Watchdog::new(Duration::from_secs(300), "far sync switchover");
    let a = MemberSpec::new("a", "async", "primary");
    let mut fs = MemberSpec::new("fs", "sync", "standby");
    fs.extra = "kind = \"far_sync\"\nroutes = [{ when = \"a\", to = \"t\" }]\n";
    let t = MemberSpec::new("t", "async", "standby");
    let cluster = Cluster::start(ClusterConfig {
        members: vec![a, fs, t],
        protection_mode: "maximum_availability",
        ..ClusterConfig::pair()
    });
    let limit = Duration::from_secs(60);
    cluster.wait_applied("t", "a", limit);
    let shipped: Vec<String> =
        cluster.server("a").status().replication.destinations.into_iter().map(|d| d.name).collect();
    assert_eq!(shipped, ["fs"], "a ships to fs only: t is behind it");

    // Writers until the old primary turns them away (its gate closes for the switchover).
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let address = cluster.resp_addr("a");
            std::thread::spawn(move || {
                let mut connection = common::redis_connection(address);
                let mut acknowledged = Vec::new();
                let deadline = std::time::Instant::now() + Duration::from_secs(60);
                for index in 0.. {
                    let key = format!("w{writer}:{index}");
                    match redis::cmd("SET").arg(&key).arg(index).query::<()>(&mut connection) {
                        Ok(()) => acknowledged.push(key),
                        Err(_) => break,
                    }
                    if std::time::Instant::now() > deadline {
                        break;
                    }
                }
                acknowledged
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1500));
    let said = cluster.must(&["switchover", "--to", "t"]);
    let acknowledged: Vec<String> =
        writers.into_iter().flat_map(|writer| writer.join().unwrap()).collect();
    assert!(acknowledged.len() > 100, "only {} writes acknowledged", acknowledged.len());
    cluster.assert_all_present("t", &acknowledged, "writes a acknowledged before the switchover");

    // t is the primary and ships by its own routes (none: to every other member itself).
    cluster.wait_shipping("t", limit);
    let mut connection = common::redis_connection(cluster.resp_addr("t"));
    for index in 0..200 {
        redis::cmd("SET")
            .arg(format!("after:{index}"))
            .arg(index)
            .query::<()>(&mut connection)
            .unwrap();
    }
    cluster.wait_applied("a", "t", limit);
    let a = cluster.server("a").status().replication.standby.expect("a is a standby of t");
    assert_eq!(a.primary_member.as_deref(), Some("t"));
    assert_eq!(a.source_member.as_deref().unwrap_or("t"), "t", "t ships to a itself");

    // And back: a is one of t's own destinations.
    cluster.must(&["switchover", "--to", "a"]);
    cluster.wait_shipping("a", limit);
    cluster.wait_applied("t", "a", limit);
    let t = cluster.server("t").status().replication.standby.expect("t is a standby again");
    assert_eq!(t.source_member.as_deref(), Some("fs"), "under a, t receives from fs again");
    println!(
        "switchover through a far sync: {} acknowledged writes, all on t; {}",
        acknowledged.len(),
        said.lines().next().unwrap_or_default()
    );
}
