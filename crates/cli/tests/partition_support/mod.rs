//! What the partition tests share: clients that write to chosen databases and record what
//! each acknowledged, the checks made of those records (no two databases acknowledging at
//! once; nothing acknowledged lost), and waits for fast-start failover to be armed and for a
//! configuration to settle on one primary.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common;
use crate::roles_support::{Cluster, all_data};

/// One test at a time: each runs three servers, an observer and a mesh on a 2-core machine,
/// and measures how long things take.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// A write a database acknowledged.
#[derive(Debug, Clone)]
pub struct Ack {
    pub key: String,
    pub member: &'static str,
    pub sent: Instant,
    pub acked: Instant,
}

/// Clients that write distinct keys to one database each, reconnecting after any error, and
/// record every write acknowledged.
pub struct Writers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Vec<Ack>>>,
}

pub fn connect(addr: SocketAddr) -> Option<redis::Connection> {
    let client = redis::Client::open(format!("redis://{addr}/")).ok()?;
    let connection = client.get_connection_with_timeout(Duration::from_secs(1)).ok()?;
    connection.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    connection.set_write_timeout(Some(Duration::from_secs(2))).ok()?;
    Some(connection)
}

impl Writers {
    pub fn start(cluster: &Cluster, members: &[&'static str]) -> Writers {
        let stop = Arc::new(AtomicBool::new(false));
        let threads = members
            .iter()
            .flat_map(|member| (0..2).map(move |number| (*member, number)))
            .map(|(member, number)| {
                let (stop, addr) = (stop.clone(), cluster.resp_addr(member));
                std::thread::spawn(move || {
                    let mut acks = Vec::new();
                    let mut sequence = 0u64;
                    while !stop.load(Ordering::Acquire) {
                        let Some(mut connection) = connect(addr) else {
                            std::thread::sleep(Duration::from_millis(50));
                            continue;
                        };
                        while !stop.load(Ordering::Acquire) {
                            let key = format!("part:{member}:{number}:{sequence}");
                            sequence += 1;
                            let sent = Instant::now();
                            match redis::cmd("SET").arg(&key).arg(&key).query::<()>(&mut connection)
                            {
                                Ok(()) => {
                                    acks.push(Ack { key, member, sent, acked: Instant::now() })
                                }
                                Err(error) if error.is_io_error() || error.is_timeout() => break,
                                // READONLY, TRYAGAIN, an error of a fenced primary: next key.
                                Err(_) => std::thread::sleep(Duration::from_millis(20)),
                            }
                        }
                    }
                    acks
                })
            })
            .collect();
        Writers { stop, threads }
    }

    pub fn stop(self) -> Vec<Ack> {
        self.stop.store(true, Ordering::Release);
        self.threads.into_iter().flat_map(|thread| thread.join().unwrap()).collect()
    }
}

/// Prints which database took writes when (relative to `start`) and checks that their reigns
/// never overlap: ordered by first acknowledgement, no database acknowledged a write sent
/// after the next one had acknowledged its first.
pub fn check_reigns(acks: &[Ack], start: Instant, cluster: &Cluster) {
    let mut by_member: BTreeMap<&str, Vec<&Ack>> = BTreeMap::new();
    for ack in acks {
        by_member.entry(ack.member).or_default().push(ack);
    }
    let mut reigns: Vec<(&str, Instant, Instant, usize)> = by_member
        .iter()
        .map(|(member, acks)| {
            let first = acks.iter().map(|ack| ack.acked).min().unwrap();
            let last = acks.iter().map(|ack| ack.acked).max().unwrap();
            (*member, first, last, acks.len())
        })
        .collect();
    reigns.sort_by_key(|reign| reign.1);
    for (member, first, last, count) in &reigns {
        println!(
            "  {member} acknowledged {count} writes from {:.2} s to {:.2} s",
            first.duration_since(start).as_secs_f64(),
            last.duration_since(start).as_secs_f64()
        );
    }
    for pair in reigns.windows(2) {
        let (earlier, next_first) = (pair[0].0, pair[1].1);
        let late: Vec<&&Ack> =
            by_member[earlier].iter().filter(|ack| ack.sent >= next_first).collect();
        assert!(
            late.is_empty(),
            "{earlier} acknowledged {} writes sent after {} had started acknowledging writes (first {:?}): two primaries\n{}",
            late.len(),
            pair[1].0,
            late.first().map(|ack| &ack.key),
            cluster.logs()
        );
    }
}

/// Every acknowledged write is on `primary`.
pub fn check_nothing_lost(acks: &[Ack], cluster: &Cluster, primary: &str) {
    let mut connection = common::redis_connection(cluster.resp_addr(primary));
    for chunk in acks.chunks(500) {
        let keys: Vec<&str> = chunk.iter().map(|ack| ack.key.as_str()).collect();
        let values: Vec<Option<String>> =
            redis::cmd("MGET").arg(&keys).query(&mut connection).unwrap();
        for (ack, value) in chunk.iter().zip(values) {
            assert_eq!(
                value.as_deref(),
                Some(ack.key.as_str()),
                "{} was acknowledged by {} and is missing on the primary {primary}\n{}",
                ack.key,
                ack.member,
                cluster.logs()
            );
        }
    }
    println!("  all {} acknowledged writes are on {primary}", acks.len());
}

/// The member the observer names as the primary, once it names one.
pub fn named_primary(cluster: &Cluster, limit: Duration) -> Option<&'static str> {
    let mut named = None;
    common::poll_until(limit, || {
        named = cluster.sentinel_master("obs1").and_then(|addr| cluster.member_at(addr));
        named.is_some()
    });
    named
}

/// Waits until fast-start failover is armed: the observer names `primary`, which has its
/// lease, the standby names the observer and is synchronized, and the observer would fail
/// over to it.
pub fn armed(cluster: &Cluster, primary: &'static str, standby: &'static str) {
    let ok = common::poll_until(Duration::from_secs(30), || {
        named_primary(cluster, Duration::from_secs(1)) == Some(primary)
            && cluster.server(primary).status().roles.as_ref().is_some_and(|roles| {
                roles.fast_start.as_ref().is_some_and(|fast_start| {
                    fast_start.observer.as_deref() == Some("obs1")
                        && fast_start.isolated == Some(false)
                })
            })
            && cluster.server(standby).status().replication.standby.is_some_and(|standby| {
                standby.caught_up && standby.active_observer.as_deref() == Some("obs1")
            })
            && cluster.failover_ready("obs1").iter().any(|name| name == standby)
    });
    assert!(ok, "fast-start failover is not armed\n{}", cluster.logs());
}

/// Waits until one primary remains, every other member is its standby with everything
/// applied, and all hold the same data; returns the primary. With `reinstate`, a fenced old
/// primary is reinstated by the test (the observer does not reinstate by itself).
pub fn settled(cluster: &Cluster, reinstate: bool) -> &'static str {
    if reinstate {
        let ok = common::poll_until(Duration::from_secs(30), || {
            named_primary(cluster, Duration::from_secs(1)).is_some_and(|named| {
                cluster.server(named).status().roles.is_some_and(|roles| roles.fenced.is_none())
            })
        });
        assert!(ok, "no open primary\n{}", cluster.logs());
    }
    let mut primary = None;
    let ok = common::poll_until(Duration::from_secs(90), || {
        let Some(named) = named_primary(cluster, Duration::from_secs(1)) else { return false };
        // An old primary may learn of its fence only after the links are back (the new
        // primary's hello): it is reinstated whenever it is seen fenced, not only at first.
        if reinstate {
            for name in cluster.member_names().into_iter().filter(|name| *name != named) {
                let fenced =
                    cluster.server(name).status().roles.is_some_and(|roles| roles.fenced.is_some());
                if fenced {
                    // (Refused while the new primary is not open yet: tried again next time.)
                    let (ok, out, err) = cluster.redoguard(&["reinstate", name]);
                    println!("  reinstating {name}: {}", if ok { out.trim() } else { err.trim() });
                }
            }
        }
        let status = cluster.server(named).status();
        // Open: a primary, not fenced, not isolated, and with no commit still waiting (a
        // write is visible in memory before its commit is durable, so a commit held while
        // the primary was isolated would show on it and not yet on its standby).
        let open = status.roles.as_ref().is_some_and(|roles| {
            roles.role == "primary"
                && roles.fenced.is_none()
                && roles
                    .fast_start
                    .as_ref()
                    .is_none_or(|fast_start| fast_start.isolated != Some(true))
        }) && status.database.redo.durable_scn.0 + 1 >= status.database.redo.next_scn.0;
        let others_follow =
            cluster.member_names().into_iter().filter(|name| *name != named).all(|name| {
                let status = cluster.server(name).status();
                status.replication.standby.as_ref().is_some_and(|standby| {
                    standby.primary_member.as_deref() == Some(named)
                        && standby.connected
                        && standby.caught_up
                }) && status.roles.as_ref().is_some_and(|roles| roles.fenced.is_none())
            });
        primary = Some(named);
        open && others_follow
    });
    let primary = primary.filter(|_| ok).unwrap_or_else(|| {
        panic!(
            "the configuration did not settle on one primary and its standby\n{}",
            cluster.logs()
        )
    });
    for standby in cluster.member_names().into_iter().filter(|name| *name != primary) {
        same_data(cluster, primary, standby);
    }
    primary
}

/// Waits until `standby` has applied everything `primary` has, then checks they hold the same
/// data.
pub fn same_data(cluster: &Cluster, primary: &'static str, standby: &'static str) {
    cluster.wait_applied(standby, primary, Duration::from_secs(60));
    let ours = all_data(&mut common::redis_connection(cluster.resp_addr(primary)));
    let theirs = all_data(&mut common::redis_connection(cluster.resp_addr(standby)));
    if ours != theirs {
        let ours: BTreeMap<_, _> = ours.into_iter().collect();
        let theirs: BTreeMap<_, _> = theirs.into_iter().collect();
        let only_ours: Vec<_> = ours.keys().filter(|key| !theirs.contains_key(*key)).collect();
        let only_theirs: Vec<_> = theirs.keys().filter(|key| !ours.contains_key(*key)).collect();
        let show = |keys: &[&Vec<u8>]| -> Vec<String> {
            keys.iter().take(5).map(|key| String::from_utf8_lossy(key).into_owned()).collect()
        };
        panic!(
            "{primary} and {standby} hold different data: {} keys only on {primary} ({:?}), {} only on {standby} ({:?})\n{}",
            only_ours.len(),
            show(&only_ours),
            only_theirs.len(),
            show(&only_theirs),
            cluster.logs()
        );
    }
}
