//! A far sync on the real binary is what Data Guard's is: standby logs and archives, no data
//! files, never opened, no apply. `a` ships SYNC AFFIRM to the far sync `fs`, which forwards
//! to the terminal `t`: its data directory holds no data file, its applied SCN never moves,
//! its RESP port refuses the key space by name, its archives are byte-identical to the
//! primary's and kept only while what it forwards needs them; killed with -9 under load and
//! restarted, it comes back as it was (still no data file, nothing replayed) and relays again,
//! the gap included, and nothing `a` acknowledged is missing on `t`.
//! A switchover to the terminal behind it loses nothing; one the terminal refused (cut from the
//! far sync) it never completes, even once it has caught up after the old primary took its role
//! back. (The failover through it and its alternate route: `replication_cascade`,
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

/// `a`, primary, ships SYNC to the far sync `fs`, which forwards to `t` while `a` is the
/// primary (under another primary, each ships to every other member itself).
fn relayed() -> Vec<MemberSpec> {
    let a = MemberSpec::new("a", "async", "primary");
    let mut fs = MemberSpec::new("fs", "sync", "standby");
    fs.extra = "kind = \"far_sync\"\nroutes = [{ when = \"a\", to = \"t\" }]\n";
    let t = MemberSpec::new("t", "async", "standby");
    vec![a, fs, t]
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
    let mut cluster = Cluster::start(ClusterConfig {
        members: relayed(),
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
    let cluster = Cluster::start(ClusterConfig {
        members: relayed(),
        protection_mode: "maximum_availability",
        ..ClusterConfig::pair()
    });
    let limit = Duration::from_secs(60);
    cluster.wait_applied("t", "a", limit);
    let shipped: Vec<String> =
        cluster.server("a").status().replication.destinations.into_iter().map(|d| d.name).collect();
    assert_eq!(shipped, ["fs"], "a ships to fs only: t is behind it");

    // Writers until the old primary turns them away (its gate closes for the switchover).
    let writers = roles_support::writers_until_turned_away(cluster.resp_addr("a"));
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

/// A POST to a member's admin API (the admin client finds the member's own token on this host):
/// (status code, body).
fn post(cluster: &Cluster, member: &str, path: &str) -> (u16, String) {
    admin::client::http_call(&cluster.addr_of(member), "POST", path, Duration::from_secs(150))
        .unwrap_or_else(|error| panic!("POST {path} to {member}: {error:#}"))
}

/// The race a switchover through a relay made real, step by step through the admin API as two
/// brokers would drive it: `a` prepares a switchover to `t` (behind the far sync `fs`, cut from
/// `t`: `t` cannot get `a`'s end); `t`'s complete runs out of time and refuses; `a` takes its
/// role back; the link comes back and `t` receives and applies everything `a` had when it
/// prepared; a second complete of the same switchover (a second broker's, which waited on
/// `t`'s transition lock) must be refused: before switchover ids, `t` opened as a second
/// primary of the same incarnation, beside `a`. Then a new switchover works.
#[test]
fn a_switchover_the_target_refused_is_never_completed_after_the_old_primary_took_its_role_back() {
    let _watchdog = Watchdog::new(Duration::from_secs(420), "refused switchover completed late");
    let cluster = Cluster::start(ClusterConfig {
        members: relayed(),
        protection_mode: "maximum_availability",
        mesh: true,
        insecure: true,
        // t's wait for a's end (60 s by default) need not be long here: it cannot end well.
        replication_extra: "switchover_wait = \"5s\"\n".into(),
        ..ClusterConfig::pair()
    });
    let limit = Duration::from_secs(60);
    cluster.wait_applied("t", "a", limit);

    // A far sync is never the target of a switchover: refused before a's gate closes.
    let (code, reply) = post(&cluster, "a", "/roles/switchover/prepare?to=fs");
    assert_eq!(code, 409, "{reply}");
    assert!(reply.contains("'fs' is a far sync"), "{reply}");

    // t is cut from its relay; a goes on writing (fs acknowledges, SYNC).
    cluster.cut("fs", &["t"]);
    let mut connection = common::redis_connection(cluster.resp_addr("a"));
    let mut acknowledged = Vec::new();
    for index in 0..100 {
        let key = format!("before:{index}");
        redis::cmd("SET").arg(&key).arg(index).query::<()>(&mut connection).unwrap();
        acknowledged.push(key);
    }

    let (code, reply) = post(&cluster, "a", "/roles/switchover/prepare?to=t");
    assert_eq!(code, 200, "{reply}");
    let prepared: admin::roles::SwitchoverPrepared = serde_json::from_str(&reply).unwrap();
    assert_ne!(prepared.id, 0, "the prepare drew no switchover id: {reply}");
    let roles = cluster.server("a").status().roles.expect("a has roles");
    assert_eq!(roles.switchover_to.as_deref(), Some("t"));
    assert_eq!(roles.switchover_id, Some(prepared.id), "a's status names the switchover's id");
    let complete = |id: Option<u64>, incarnation: u32| {
        format!(
            "/roles/switchover/complete?from=a{}&incarnation={incarnation}&end_seq={}&end_offset={}&last_scn={}",
            id.map_or(String::new(), |id| format!("&id={id}")),
            prepared.end.seq.0,
            prepared.end.offset,
            prepared.last_scn.0
        )
    };

    // Without its id, or from another incarnation: refused at once, naming what is wrong.
    let (code, reply) = post(&cluster, "t", &complete(None, prepared.incarnation));
    assert_eq!(code, 409, "{reply}");
    assert!(reply.contains("`id` is missing"), "{reply}");
    let other = prepared.id.wrapping_add(1).max(1);
    let (code, reply) = post(&cluster, "t", &complete(Some(other), prepared.incarnation + 1));
    assert_eq!(code, 409, "{reply}");
    assert!(
        reply.contains(&format!("in incarnation {}", prepared.incarnation + 1))
            && reply.contains(&format!("in incarnation {}", prepared.incarnation)),
        "{reply}"
    );

    // The first broker's complete: t cannot catch up and refuses after its wait, which its
    // status reports (a broker waits that long and a margin for its answer).
    let t_roles = cluster.server("t").status().roles.expect("t has roles");
    assert_eq!(t_roles.switchover_wait_s, Some(5.0), "t's status reports its switchover_wait");
    let asked = std::time::Instant::now();
    let (code, reply) = post(&cluster, "t", &complete(Some(prepared.id), prepared.incarnation));
    let waited = asked.elapsed();
    assert_eq!(code, 409, "{reply}");
    assert!(reply.contains("it stays a standby"), "{reply}");
    assert!(waited >= Duration::from_secs(5), "t refused before its switchover_wait: {waited:?}");
    // So the first broker gives a its role back.
    let (code, reply) = post(&cluster, "a", "/roles/switchover/abort");
    assert_eq!(code, 200, "{reply}");
    common::wait_until(limit, "a to take writes again", || {
        redis::cmd("SET").arg("after the abort").arg(1).query::<()>(&mut connection).is_ok()
    });
    acknowledged.push("after the abort".to_string());

    // The relay delivers: t holds and has applied everything a had when it prepared.
    cluster.restore("fs", &["t"]);
    common::wait_until(limit, "t to receive and apply a's end", || {
        let status = cluster.server("t").status();
        status.replication.standby.is_some_and(|standby| standby.received >= prepared.end)
            && status.database.applied_scn >= prepared.last_scn
    });

    // The second broker's complete of the same switchover: refused at once, t stays a standby.
    let asked = std::time::Instant::now();
    let (code, reply) = post(&cluster, "t", &complete(Some(prepared.id), prepared.incarnation));
    assert_eq!(code, 409, "t completed a switchover it had refused: {reply}");
    assert!(
        reply.contains(&format!("switchover {} from 'a' was refused already", prepared.id))
            && reply.contains("redoguard switchover --to t"),
        "{reply}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "not refused at once: {:?}",
        asked.elapsed()
    );
    let role = |member: &str| cluster.server(member).status().roles.expect("roles").role;
    assert_eq!(role("t"), "standby");
    assert_eq!(role("a"), "primary");
    redis::cmd("SET").arg("a alone").arg(1).query::<()>(&mut connection).unwrap();
    acknowledged.push("a alone".to_string());

    // A new switchover (a new id) completes.
    let said = cluster.must(&["switchover", "--to", "t"]);
    assert_eq!(role("t"), "primary");
    // A complete that comes after t became the primary (another broker's call of the same
    // switchover, which waited on t's lock) is a failure, not a refusal: on a refusal the
    // broker would give a, a standby of t now, its role back.
    let late = prepared.id.wrapping_add(2).max(1);
    let (code, reply) = post(&cluster, "t", &complete(Some(late), prepared.incarnation));
    assert_eq!(code, 500, "{reply}");
    assert!(reply.contains("'a' must not take its role back"), "{reply}");
    cluster.assert_all_present("t", &acknowledged, "writes a acknowledged");
    cluster.wait_applied("a", "t", limit);
    println!(
        "refused switchover {}: t refused after {waited:?}, and again at once after the abort; {}",
        prepared.id,
        said.lines().next().unwrap_or_default()
    );
}
