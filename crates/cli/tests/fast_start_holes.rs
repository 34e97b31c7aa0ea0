//! The holes issue 29 found in fast-start failover, each tried on the real binary: every one of
//! them let two databases acknowledge writes at once, or lost a write one acknowledged, before
//! the decisions moved into `roles::fast_start` with what they rest on kept on disk.
//!
//! - an observer restarted after a failover, which then sees only the old primary, must not
//!   lease it (it keeps its record; the mesh, as issue 29 reproduced it);
//! - a primary restarted while one of its standbys still names the first observer must not let
//!   a second become active (it keeps whom it named an observer to);
//! - a standby the primary went on without is synchronized again only once it holds what was
//!   acknowledged without it, not once everything is sent (a WAN link, the primary lost at the
//!   moment the observer would fail over to it again);
//! - observe-only for planned maintenance: the primary restarts and no failover happens;
//! - a switchover half done survives a restart of the old primary, and completes;
//! - an observer whose settings are not the members' is refused, by name;
//! - a COMMITMODE NOWAIT write is refused by a primary without its observer's lease.
//!
//! The mesh tests (linkemu) need root, `/dev/net/tun` and `ip`, and run one at a time.

mod common;
mod partition_support;
mod replication_support;
mod roles_support;

use std::time::{Duration, Instant};

use common::Watchdog;
use partition_support::{
    SERIAL, Writers, armed, check_nothing_lost, check_reigns, named_primary, settled,
};
use roles_support::{Cluster, ClusterConfig, MemberSpec};

/// Waits until the observer names `primary` and `target` is ready (it would fail over to it).
fn ready_for(cluster: &Cluster, observer: &str, primary: &'static str, target: &str) {
    let ok = common::poll_until(Duration::from_secs(40), || {
        named_primary(cluster, Duration::from_secs(1)) == Some(primary)
            && cluster.failover_ready(observer).iter().any(|name| name == target)
    });
    assert!(ok, "{observer} would not fail over to {target}\n{}", cluster.logs());
}

/// A POST to a member's admin API (the admin client finds the member's own token on this host):
/// (status code, body).
fn post(cluster: &Cluster, member: &str, path: &str) -> (u16, String) {
    admin::client::http_call(&cluster.addr_of(member), "POST", path, Duration::from_secs(90))
        .unwrap_or_else(|error| panic!("POST {path} to {member}: {error:#}"))
}

/// Hole 1, as issue 29 reproduced it with real partitions: east is cut from west and the
/// observer, which fails over to west; the observer is killed and restarted; the links change
/// so that it reaches east and not west (east and west still cut apart); clients write to east.
/// Before, the restarted observer knew nothing, leased east and let it go on without west: east
/// acknowledged every write, all lost. Now it keeps its record: it tells east of the newer
/// incarnation, and east acknowledges nothing.
#[test]
fn a_restarted_observer_never_lets_the_old_primary_acknowledge_again() {
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _watchdog = Watchdog::new(Duration::from_secs(240), "observer restarted after a failover");
    let mut cluster = Cluster::start(ClusterConfig {
        mesh: true,
        insecure: true,
        net_timeout: "2s",
        auto_reinstate: false,
        ..ClusterConfig::pair_with_observer()
    });
    armed(&cluster, "east", "west");
    cluster.cut("east", &["west", "obs1"]);
    let ok = common::poll_until(Duration::from_secs(20), || {
        named_primary(&cluster, Duration::from_secs(1)) == Some("west")
    });
    assert!(ok, "no failover to west\n{}", cluster.logs());
    println!("east cut off; the observer failed over to west");
    cluster.kill_observer("obs1");
    cluster.start_observer("obs1");
    cluster.restore("east", &["obs1"]);
    cluster.cut("obs1", &["west"]);
    let changed = Instant::now();
    println!("observer restarted; it reaches east and not west; east and west still apart");
    let writers = Writers::start(&cluster, &["east"]);
    std::thread::sleep(Duration::from_secs(10));
    let acks = writers.stop();
    let late: Vec<_> = acks.iter().filter(|ack| ack.sent > changed).collect();
    println!("east acknowledged {} writes after the observer came back", late.len());
    assert!(
        late.is_empty(),
        "east acknowledged {} writes after the failover (first {:?}): two primaries\n{}",
        late.len(),
        late.first().map(|ack| &ack.key),
        cluster.logs()
    );
    // The observer told east of the newer incarnation: it is fenced.
    let fenced = common::poll_until(Duration::from_secs(20), || {
        cluster.server("east").status().roles.is_some_and(|roles| roles.fenced.is_some())
    });
    assert!(fenced, "east was not fenced\n{}", cluster.logs());
    cluster.restore_all();
}

/// Hole 2. Three members, two observers, on the mesh: obs1 active, west and south following it.
/// East is cut from obs1 and south and restarted at once. Before, the restarted east had named
/// no observer to anyone, so obs2 became active at once and let it go on without south, while
/// obs1, which could reach south only, failed over to it: both acknowledged writes. Now east
/// keeps whom it named an observer to: obs2 is not active until south follows it, east takes
/// no write south lacks, and obs1's failover to south is the only primary's.
#[test]
fn a_restarted_primary_lets_no_second_observer_act_while_a_standby_names_the_first() {
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _watchdog = Watchdog::new(Duration::from_secs(300), "primary restarted, two observers");
    let mut cluster = Cluster::start(ClusterConfig {
        members: vec![
            MemberSpec::new("east", "sync", "primary"),
            MemberSpec::new("west", "sync", "standby"),
            MemberSpec::new("south", "sync", "standby"),
        ],
        observers: vec!["obs1", "obs2"],
        mesh: true,
        insecure: true,
        net_timeout: "2s",
        threshold: "3s",
        auto_reinstate: false,
        ..ClusterConfig::pair()
    });
    ready_for(&cluster, "obs1", "east", "west");
    let south_follows = common::poll_until(Duration::from_secs(30), || {
        cluster.server("south").status().replication.standby.is_some_and(|standby| {
            standby.caught_up && standby.active_observer.as_deref() == Some("obs1")
        })
    });
    assert!(south_follows, "south does not follow obs1\n{}", cluster.logs());
    let writers = Writers::start(&cluster, &["east", "south"]);
    std::thread::sleep(Duration::from_secs(1));
    let start = Instant::now();
    cluster.cut("east", &["obs1", "south"]);
    cluster.kill("east");
    cluster.start_member("east");
    println!(
        "east cut from obs1 and south, and restarted at {:.2} s",
        start.elapsed().as_secs_f64()
    );
    // obs1 counts east lost after 3.6 s of silence.
    std::thread::sleep(Duration::from_secs(12));
    cluster.restore_all();
    println!("links restored at {:.2} s", start.elapsed().as_secs_f64());
    std::thread::sleep(Duration::from_secs(2));
    let acks = writers.stop();
    let primary = settled(&cluster, true);
    println!("settled on {primary}");
    check_reigns(&acks, start, &cluster);
    check_nothing_lost(&acks, &cluster, primary);
}

/// Hole 3. East and west 200 ms apart on a 20 Mbit/s link with 3 × BDP socket buffers. West is
/// cut until east goes on without it (the observer's grant), east acknowledges writes west
/// lacks, the link comes back, and east ships west what it missed. The moment the observer
/// would fail over to west again, east is lost (cut from everyone, then killed). Before, east
/// called west synchronized once it had *sent* everything, so the observer failed over to a
/// west still missing writes east had acknowledged. Several trials; nothing acknowledged may
/// be lost.
#[test]
fn a_standby_is_synchronized_again_only_once_it_holds_what_was_acknowledged_without_it() {
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _watchdog = Watchdog::new(Duration::from_secs(420), "synchronized once acknowledged");
    let mut cluster = Cluster::start(ClusterConfig {
        members: vec![
            MemberSpec {
                extra: "send_buffer = \"1536KiB\"\n",
                ..MemberSpec::new("east", "sync", "primary")
            },
            MemberSpec {
                extra: "send_buffer = \"1536KiB\"\n",
                ..MemberSpec::new("west", "sync", "standby")
            },
        ],
        replication_extra: "standby = { receive_buffer = \"1536KiB\" }\n".into(),
        observers: vec!["obs1"],
        mesh: true,
        insecure: true,
        mesh_link: Some(linkemu::LinkConfig {
            rtt: Duration::from_millis(200),
            rate_bits_per_s: Some(20_000_000),
            ..Default::default()
        }),
        net_timeout: "2s",
        threshold: "2s",
        auto_reinstate: false,
        ..ClusterConfig::pair()
    });
    let mut all_acks = Vec::new();
    let mut bulk_acks = Vec::new();
    let mut primary: &'static str = "east";
    for trial in 0..2 {
        let standby = if primary == "east" { "west" } else { "east" };
        ready_for(&cluster, "obs1", primary, standby);
        let writers = Writers::start(&cluster, &[primary]);
        std::thread::sleep(Duration::from_millis(500));
        cluster.cut(primary, &[standby]);
        // Large writes while the standby is away: what it misses takes seconds to ship, and
        // the last of it is still in flight when everything has been sent.
        let bulk = Bulk::start(cluster.resp_addr(primary), trial);
        // Dropped after net_timeout; the observer lets the primary go on without it.
        let granted = common::poll_until(Duration::from_secs(20), || {
            cluster.server(primary).status().roles.is_some_and(|roles| {
                roles.fast_start.as_ref().is_some_and(|fast_start| {
                    fast_start.synchronized == Some(false)
                        && fast_start.wants_unsync == Some(false)
                        && fast_start.isolated == Some(false)
                })
            })
        });
        assert!(granted, "{primary} did not go on without {standby}\n{}", cluster.logs());
        std::thread::sleep(Duration::from_secs(3));
        let bulk = bulk.stop();
        println!("trial {trial}: {} large writes acknowledged without {standby}", bulk.len());
        assert!(!bulk.is_empty(), "no large write acknowledged\n{}", cluster.logs());
        cluster.restore_all();
        // The moment the observer would fail over to the standby again, the primary is lost.
        let again = common::poll_until(Duration::from_secs(60), || {
            cluster.failover_ready("obs1").iter().any(|name| name == standby)
        });
        assert!(again, "{standby} never became ready again\n{}", cluster.logs());
        cluster.cut(primary, &[standby, "obs1"]);
        cluster.kill(primary);
        let lost_at = Instant::now();
        let acks = writers.stop();
        println!(
            "trial {trial}: {primary} lost when {standby} was ready again; {} writes acknowledged",
            acks.len()
        );
        let failed_over = common::poll_until(Duration::from_secs(15), || {
            named_primary(&cluster, Duration::from_secs(1)) == Some(standby)
        });
        assert!(
            failed_over,
            "no failover to {standby} (it holds {:?})\n{}",
            cluster.server(standby).status().replication.standby.map(|standby| standby.received),
            cluster.logs()
        );
        println!("  failed over to {standby} {:.2} s later", lost_at.elapsed().as_secs_f64());
        check_nothing_lost(&acks, &cluster, standby);
        Bulk::check(&bulk, &cluster, standby);
        all_acks.extend(acks);
        bulk_acks.extend(bulk);
        cluster.restore_all();
        cluster.start_member(primary);
        let fenced = common::poll_until(Duration::from_secs(30), || {
            cluster.server(primary).status().roles.is_some_and(|roles| roles.fenced.is_some())
        });
        assert!(fenced, "{primary} was not fenced\n{}", cluster.logs());
        cluster.must(&["reinstate", primary]);
        primary = standby;
    }
    let primary = settled(&cluster, false);
    check_nothing_lost(&all_acks, &cluster, primary);
    Bulk::check(&bulk_acks, &cluster, primary);
}

/// A client writing large values (128 KiB) as fast as it can, recording the keys acknowledged.
struct Bulk {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<Vec<String>>,
}

const BULK_VALUE_BYTES: usize = 128 * 1024;

impl Bulk {
    fn start(addr: std::net::SocketAddr, trial: usize) -> Bulk {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut acked = Vec::new();
            let value = vec![b'v'; BULK_VALUE_BYTES];
            let mut number = 0u64;
            while !flag.load(std::sync::atomic::Ordering::Acquire) {
                let Some(mut connection) = partition_support::connect(addr) else {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                };
                while !flag.load(std::sync::atomic::Ordering::Acquire) {
                    let key = format!("bulk:{trial}:{number}");
                    number += 1;
                    match redis::cmd("SET").arg(&key).arg(&value).query::<()>(&mut connection) {
                        Ok(()) => acked.push(key),
                        Err(error) if error.is_io_error() || error.is_timeout() => break,
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            }
            acked
        });
        Bulk { stop, thread }
    }

    fn stop(self) -> Vec<String> {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.thread.join().unwrap()
    }

    /// Every acknowledged large write is on `primary`, whole.
    fn check(keys: &[String], cluster: &Cluster, primary: &str) {
        let mut connection = common::redis_connection(cluster.resp_addr(primary));
        for key in keys {
            let value: Option<Vec<u8>> = redis::cmd("GET").arg(key).query(&mut connection).unwrap();
            assert_eq!(
                value.map_or(0, |value| value.len()),
                BULK_VALUE_BYTES,
                "{key}, acknowledged, is missing on {primary}\n{}",
                cluster.logs()
            );
        }
        println!("  all {} acknowledged large writes are on {primary}", keys.len());
    }
}

/// Hole 4: planned maintenance. With fast-start failover observe-only, the primary is killed and
/// restarted: no failover happens, the observer reports it would fail over to no one, and once
/// enabled again it is armed again. Before, there was no way to say so: the observer failed
/// over.
#[test]
fn observe_only_lets_the_primary_restart_without_a_failover() {
    let _watchdog = Watchdog::new(Duration::from_secs(240), "observe-only maintenance");
    let mut cluster = Cluster::start(ClusterConfig::pair_with_observer());
    armed(&cluster, "east", "west");
    println!("{}", cluster.must(&["edit", "fast-start", "observe-only"]).trim());
    let quiet =
        common::poll_until(Duration::from_secs(10), || cluster.failover_ready("obs1").is_empty());
    assert!(quiet, "the observer still reports a target in observe-only\n{}", cluster.logs());
    // `show configuration` says so (it said ENABLED as before).
    let shown = cluster.must(&["show", "configuration"]);
    assert!(shown.contains("Fast-start failover: ENABLED (OBSERVE ONLY"), "{shown}");
    cluster.kill("east");
    std::thread::sleep(Duration::from_secs(6));
    let west = cluster.server("west").status();
    assert_eq!(
        west.roles.as_ref().map(|roles| roles.role.as_str()),
        Some("standby"),
        "west took over during planned maintenance\n{}",
        cluster.logs()
    );
    cluster.start_member("east");
    let writable = common::poll_until(Duration::from_secs(30), || {
        let mut connection = common::redis_connection(cluster.resp_addr("east"));
        redis::cmd("SET").arg("after maintenance").arg("1").query::<()>(&mut connection).is_ok()
    });
    assert!(writable, "east takes no write after its restart\n{}", cluster.logs());
    println!("{}", cluster.must(&["edit", "fast-start", "enabled"]).trim());
    armed(&cluster, "east", "west");
}

/// Hole 4: a switchover the broker left half done (the old primary a standby waiting for its
/// target), and the old primary restarted. Before, it forgot the switchover it began (kept in
/// memory): no member was primary and `redoguard switchover` could not complete it.
#[test]
fn a_switchover_half_done_survives_a_restart_of_the_old_primary() {
    let _watchdog = Watchdog::new(Duration::from_secs(180), "switchover half done");
    let mut cluster = Cluster::start(ClusterConfig::pair());
    let (code, reply) = post(&cluster, "east", "/roles/switchover/prepare?to=west");
    assert_eq!(code, 200, "{reply}");
    cluster.kill("east");
    cluster.start_member("east");
    let remembered = common::poll_until(Duration::from_secs(20), || {
        cluster
            .server("east")
            .status()
            .roles
            .is_some_and(|roles| roles.switchover_to.as_deref() == Some("west"))
    });
    assert!(remembered, "east forgot the switchover it began\n{}", cluster.logs());
    println!("{}", cluster.must(&["switchover", "--to", "west"]).trim());
    let mut west = common::redis_connection(cluster.resp_addr("west"));
    redis::cmd("SET").arg("after the switchover").arg("1").query::<()>(&mut west).unwrap();
    // East follows west, and the switchover is no longer pending.
    let done = common::poll_until(Duration::from_secs(30), || {
        let status = cluster.server("east").status();
        status.roles.as_ref().is_some_and(|roles| roles.switchover_to.is_none())
            && status
                .replication
                .standby
                .is_some_and(|standby| standby.primary_member.as_deref() == Some("west"))
    });
    assert!(done, "east does not follow west\n{}", cluster.logs());
}

/// Hole 5: an observer whose file says another threshold than the members' is refused by every
/// member, which says which setting differs; it names no primary. Before, each side decided
/// by its own settings.
#[test]
fn an_observer_with_other_settings_is_refused_by_name() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "observer settings disagree");
    let mut cluster = Cluster::start(ClusterConfig::pair_with_observer());
    cluster.kill_observer("obs1");
    let path = cluster.config_path("obs1");
    let text = std::fs::read_to_string(&path).unwrap();
    let other = text.replacen("threshold = \"2s\"", "threshold = \"3s\"", 1);
    assert_ne!(other, text, "the observer's file changed shape:\n{text}");
    std::fs::write(&path, other).unwrap();
    cluster.start_observer("obs1");
    let refused = common::poll_until(Duration::from_secs(20), || {
        std::fs::read_to_string(cluster.log_path("east")).is_ok_and(|log| {
            log.contains("threshold: the observer has 3000 ms, this member 2000 ms")
        })
    });
    assert!(refused, "east did not refuse the observer by name\n{}", cluster.logs());
    assert_eq!(named_primary(&cluster, Duration::from_secs(2)), None, "{}", cluster.logs());
    // The DBA sees it without reading logs: the member's status names the refused observer,
    // and `show configuration` says fast-start failover is not armed (it said SUCCESS).
    let refused = cluster.server("east").status().roles.and_then(|roles| roles.fast_start);
    let refused = refused.and_then(|fast_start| fast_start.observer_refused).unwrap_or_default();
    assert!(refused.starts_with("obs1: ") && refused.contains("threshold"), "{refused:?}");
    let shown = cluster.must(&["show", "configuration"]);
    assert!(
        shown.contains("'east' refuses the pings of observer obs1: ")
            && shown.contains("Configuration status: WARNING"),
        "{shown}"
    );
    // The observer connects again some fifty times a second; the member says so once (a minute).
    let said = std::fs::read_to_string(cluster.log_path("east"))
        .unwrap()
        .matches("threshold: the observer has 3000 ms")
        .count();
    assert_eq!(said, 1, "east logged the refusal {said} times\n{}", cluster.logs());
}

/// Hole 6: with its observer gone (its lease run out), the primary refuses a COMMITMODE NOWAIT
/// write, which would be answered before any standby holds it; a WAIT write its standby
/// acknowledges still goes. Before, NOWAIT answered OK whatever the lease.
#[test]
fn a_nowait_write_is_refused_without_the_observers_lease() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "NOWAIT without the lease");
    let mut cluster = Cluster::start(ClusterConfig::pair_with_observer());
    armed(&cluster, "east", "west");
    let mut east = common::redis_connection(cluster.resp_addr("east"));
    let nowait = |east: &mut redis::Connection, key: &str| -> redis::RedisResult<()> {
        redis::cmd("COMMITMODE").arg("NOWAIT").query::<()>(east)?;
        redis::cmd("SET").arg(key).arg("1").query::<()>(east)
    };
    nowait(&mut east, "nowait with the lease").unwrap();
    cluster.kill_observer("obs1");
    std::thread::sleep(Duration::from_millis(2500));
    let refused = nowait(&mut east, "nowait without").unwrap_err();
    assert!(refused.to_string().contains("lease"), "{refused}");
    redis::cmd("COMMITMODE").arg("WAIT").query::<()>(&mut east).unwrap();
    redis::cmd("SET").arg("wait without").arg("1").query::<()>(&mut east).unwrap();
    let exists: bool = redis::cmd("EXISTS").arg("nowait without").query(&mut east).unwrap();
    assert!(!exists, "the refused NOWAIT write changed the database");
    cluster.start_observer("obs1");
    armed(&cluster, "east", "west");
    // Its lease comes with its second ping on the new connection.
    let leased = common::poll_until(Duration::from_secs(10), || {
        nowait(&mut east, "nowait with the lease again").is_ok()
    });
    assert!(
        leased,
        "NOWAIT still refused with the observer back
{}",
        cluster.logs()
    );
}

/// Issue 29, item 8: SIGTERM stops a member cleanly within a bound, even cut off from every peer
/// with clients writing (the primary's commits waiting for its standby and the observer), and a
/// standby cut off from its primary.
#[test]
fn sigterm_stops_a_cut_off_member_cleanly_and_soon() {
    let _serial = SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let _watchdog = Watchdog::new(Duration::from_secs(240), "SIGTERM while cut off");
    let mut cluster = Cluster::start(ClusterConfig {
        mesh: true,
        insecure: true,
        net_timeout: "10s",
        ..ClusterConfig::pair_with_observer()
    });
    armed(&cluster, "east", "west");
    let writers = Writers::start(&cluster, &["east"]);
    std::thread::sleep(Duration::from_millis(500));
    cluster.cut("east", &["west", "obs1"]);
    std::thread::sleep(Duration::from_secs(1));
    let east = cluster.stop("east");
    let west = cluster.stop("west");
    let _ = writers.stop();
    println!("SIGTERM: east stopped in {east:?}, west in {west:?}");
    for (name, took) in [("east", east), ("west", west)] {
        assert!(took < Duration::from_secs(8), "{name} took {took:?} to stop\n{}", cluster.logs());
    }
    cluster.restore_all();
}
