//! Primary and standby databases in one process, redo transport between them over loopback.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use db::{Op, SetCondition};
use redo::crashdisk::Watchdog;
use redo::{CommitOptions, Scn};
use stats::Metrics;
use transport::{DestinationConfig, Phase, PrimaryTransport, ProtectionMode, Transport};

#[test]
fn sync_affirm_keeps_the_standby_equal_and_archives_byte_identical() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "sync affirm");
    let standby = Standby::open();
    let mut primary = Primary::open();
    primary.ship_to(
        ProtectionMode::MaximumAvailability,
        destination(standby.address(), Transport::Sync),
    );
    primary.set("first", "1");
    wait_until("the standby is synchronized", Duration::from_secs(20), || {
        primary.phase() == Phase::Synchronized
    });
    let value = "v".repeat(500);
    for n in 0..3000 {
        primary.set(&format!("key{n}"), &value);
        // While synchronized, an acknowledged commit is durable on the standby.
        if n % 500 == 0 && primary.phase() == Phase::Synchronized {
            let acknowledged = primary.transport.as_ref().unwrap().status()[0].acknowledged;
            assert!(
                acknowledged >= primary.db.redo().durable_addr(),
                "acknowledged {acknowledged} behind durable {}",
                primary.db.redo().durable_addr()
            );
        }
    }
    primary.db.redo().switch_logfile().unwrap();
    let last = primary.db.redo().durable_scn();
    wait_until("the standby applies everything", Duration::from_secs(30), || {
        standby.db.applied_scn() >= last
    });
    assert_eq!(state(&standby.db), state(&primary.db));
    let compared = assert_same_archives(&primary.db, &standby.db);
    assert!(compared >= 3, "only {compared} logs compared");
    let status = primary.transport.as_ref().unwrap().status();
    assert!(status[0].transport_lag_s < 5.0);
    let replication = standby.service.status();
    assert!(replication.connected);
    assert_eq!(replication.applied_scn, standby.db.applied_scn());
    primary.stop();
    standby.stop();
}

#[test]
fn a_late_async_standby_resolves_its_gap_and_catches_up() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "late async standby");
    let mut primary = Primary::open();
    let value = "w".repeat(2000);
    for n in 0..2000 {
        primary.set(&format!("early{n}"), &value);
    }
    let switches = primary.db.redo().archived_logs().len();
    assert!(switches >= 3, "the primary filled only {switches} logs");
    let standby = Standby::open();
    primary.ship_to(
        ProtectionMode::MaximumPerformance,
        destination(standby.address(), Transport::Async),
    );
    for n in 0..500 {
        primary.set(&format!("live{n}"), &value);
    }
    let last = primary.db.redo().durable_scn();
    wait_until("the standby catches up", Duration::from_secs(60), || {
        standby.db.applied_scn() >= last
    });
    assert_eq!(state(&standby.db), state(&primary.db));
    wait_until("streaming", Duration::from_secs(10), || primary.phase() == Phase::Streaming);
    // The standby is stopped and restarted; it resumes where it was.
    let address = standby.address();
    let dir = standby.stop();
    for n in 0..300 {
        primary.set(&format!("while down {n}"), &value);
    }
    let standby = Standby::open_in(dir, &address);
    let last = primary.db.redo().durable_scn();
    wait_until("the restarted standby catches up", Duration::from_secs(60), || {
        standby.db.applied_scn() >= last
    });
    assert_eq!(state(&standby.db), state(&primary.db));
    primary.db.redo().switch_logfile().unwrap();
    assert_same_archives(&primary.db, &standby.db);
    primary.stop();
    standby.stop();
}

/// Commits from many sessions at once reach a streaming ASYNC standby in batches (several
/// writes a send, one status back for them); the standby's status still tells the primary
/// exactly how far it is: everything durable, applied, no transport lag left.
#[test]
fn a_streaming_async_standby_takes_writes_in_batches_and_reports_all_of_them() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "async batches");
    let standby = Standby::open();
    let mut primary = Primary::open();
    start_streaming(&mut primary, destination(standby.address(), Transport::Async));
    let value = "b".repeat(200);
    std::thread::scope(|scope| {
        for session in 0..8 {
            let primary = &primary;
            let value = &value;
            scope.spawn(move || {
                for n in 0..300 {
                    primary.set(&format!("s{session}-{n}"), value);
                    if n % 50 == 0 {
                        // A quiet spell: the next write goes alone.
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            });
        }
    });
    let durable = primary.db.redo().durable_addr();
    let last = primary.db.redo().durable_scn();
    wait_until(
        "the primary hears that the standby has everything",
        Duration::from_secs(30),
        || {
            let status = &primary.transport.as_ref().unwrap().status()[0];
            status.acknowledged >= durable && status.applied_scn >= last
        },
    );
    let status = &primary.transport.as_ref().unwrap().status()[0];
    assert!(status.sent >= durable, "sent {} but durable {durable}", status.sent);
    assert_eq!(status.transport_lag_s, 0.0);
    assert_eq!(status.phase, Phase::Streaming);
    assert_eq!(state(&standby.db), state(&primary.db));
    let replication = standby.service.status();
    assert!(replication.received >= durable, "received {}", replication.received);
    assert_eq!(replication.received_scn, last);
    primary.stop();
    standby.stop();
}

/// The voluntary context switches of this process's threads named `name` (from /proc).
fn voluntary_switches(name: &str) -> Vec<u64> {
    let mut found = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let status = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
        found.extend(status.lines().find_map(|line| {
            line.strip_prefix("voluntary_ctxt_switches:").and_then(|n| n.trim().parse::<u64>().ok())
        }));
    }
    found
}

/// A commit led by a tokio task (as a RESP session's is) whose SYNC acknowledgement is in by
/// the end of its local write is settled by that task (`ShipWait::try_wait`): the primary then
/// records no wait for the standby after its own write ("SYNC remote write" under 1 µs),
/// where the acknowledgement waiter, reading the acknowledgement itself, takes microseconds.
/// The primary's redo is on an in-memory disk that takes 5 ms per write and per sync, so the
/// standby's answer always comes first. Under Maximum Protection the wait is always handed
/// to the acknowledgement waiter.
#[test]
fn a_task_commit_acknowledged_before_its_local_write_ends_is_settled_by_the_task() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "settled by the task");
    const COMMITS: u64 = 20;
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut settled_at_once = Vec::new();
    for mode in [ProtectionMode::MaximumAvailability, ProtectionMode::MaximumProtection] {
        let standby = Standby::open();
        let disk = redo::crashdisk::CrashDisk::new();
        let mut primary = Primary::open_on(Arc::new(disk.clone()));
        let metrics = Metrics::new();
        primary.ship_to_with(mode, destination(standby.address(), Transport::Sync), &metrics);
        primary.set("first", "1");
        wait_until("the standby is synchronized", Duration::from_secs(20), || {
            primary.phase() == Phase::Synchronized
        });
        disk.set_hook(Some(Arc::new(|| std::thread::sleep(Duration::from_millis(5)))));
        let before = metrics.wait("SYNC remote write").snapshot();
        for n in 0..COMMITS {
            let executed = primary
                .db
                .execute(&[Op::set(
                    Bytes::from(format!("k{n}")),
                    Bytes::from_static(b"v"),
                    SetCondition::Always,
                )])
                .unwrap();
            let scn = executed.scn.expect("a change");
            runtime.block_on(primary.db.commit(scn, CommitOptions::default())).unwrap();
        }
        disk.set_hook(None);
        let after = metrics.wait("SYNC remote write").snapshot();
        let at_once = |snapshot: &stats::WaitEventSnapshot| {
            snapshot.histogram.iter().find(|bucket| bucket.le_us == 1).map_or(0, |b| b.count)
        };
        assert!(after.count - before.count >= COMMITS, "{mode:?}: {before:?} {after:?}");
        settled_at_once.push(at_once(&after) - at_once(&before));
        primary.stop();
        standby.stop();
    }
    println!("SYNC remote writes under 1 µs, of {COMMITS}: {settled_at_once:?}");
    assert!(
        settled_at_once[0] >= COMMITS / 2,
        "Maximum Availability: only {} of {COMMITS} commits settled at once",
        settled_at_once[0]
    );
    assert!(
        settled_at_once[1] < COMMITS / 2,
        "Maximum Protection: {} of {COMMITS} commits settled without the acknowledgement waiter",
        settled_at_once[1]
    );
}

/// A SYNC destination dropped from the synchronized set between the send of a task's write
/// and the task's own look at the acknowledgements (`ShipWait::try_wait`): the write is not
/// waited for on it, as `await_quorum` would not wait, so under Maximum Availability the
/// commit ends at once, before the standby holds it. With fast-start failover and that
/// standby its target, the same commit must not end until the target holds the write (no
/// observer here: no lease, no grant), whichever thread settles it.
///
/// The interleaving is forced with in-memory disks: the standby takes 300 ms over each write
/// (until the commit ends, in the first case), and the primary's disk hook, run after its
/// local write (so after the send), has a helper thread change the destination's settings,
/// which drops it (a new SYNC epoch) before the task looks. The data files and the control
/// file are on that disk too: a checkpoint's write that reaches the hook first, before the
/// commit's write is sent, is let through and the hook armed again.
#[test]
fn a_destination_dropped_before_a_task_looks_is_not_waited_for_but_a_fast_start_target_is() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Mutex, mpsc};
    let _watchdog = Watchdog::new(Duration::from_secs(120), "dropped before the task looks");
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    for fast_start in [false, true] {
        let standby_disk = redo::crashdisk::CrashDisk::new();
        let standby = Standby::open_on(
            tempfile::tempdir().unwrap(),
            "127.0.0.1:0",
            Arc::new(standby_disk.clone()),
        );
        let disk = redo::crashdisk::CrashDisk::new();
        let mut primary = Primary::open_on(Arc::new(disk.clone()));
        let mut config = destination(standby.address(), Transport::Sync);
        let mode = ProtectionMode::MaximumAvailability;
        let records = tempfile::tempdir().unwrap();
        let gate = fast_start.then(|| {
            let fast_start = transport::FastStartFailoverConfig {
                enabled: true,
                target: vec![config.name.clone()],
                ..Default::default()
            };
            let settings = roles::fast_start::Settings {
                threshold: fast_start.threshold,
                lag_limit: fast_start.lag_limit,
                protection: roles::fast_start::Protection::MaximumAvailability,
                targets: vec![config.name.clone()],
                observers: vec!["observer".into()],
                relays: Default::default(),
            };
            let (file, record) = transport::fast_start::RecordFile::load(
                Arc::new(redo::storage::OsStorage::default()),
                records.path(),
            )
            .unwrap();
            transport::FastStart::new(
                fast_start,
                settings,
                "primary",
                file,
                record,
                primary.db.redo().durable_addr(),
            )
        });
        let transport = PrimaryTransport::start_as(
            primary.db.redo().handle(),
            transport::PrimaryIdentity::default(),
            mode,
            vec![config.clone()],
            &Metrics::new(),
            Arc::new(|_| {}),
            gate,
        )
        .unwrap();
        primary.db.redo().set_shipper(Some(transport.shipper()));
        primary.transport = Some(transport);
        primary.set("first", "1");
        wait_until("the standby is synchronized", Duration::from_secs(20), || {
            primary.phase() == Phase::Synchronized
        });
        let transport = primary.transport.as_ref().unwrap();
        // Any change but net_timeout's, reopen's or max_failure's reconnects: the destination
        // is dropped.
        config.max_send /= 2;
        let armed = Arc::new(AtomicBool::new(false));
        let (ask, asked) = mpsc::channel::<()>();
        let (done, finished) = mpsc::channel::<()>();
        let (ask, finished) = (Mutex::new(ask), Mutex::new(finished));
        disk.set_hook(Some(Arc::new({
            let armed = armed.clone();
            move || {
                if armed.swap(false, Ordering::SeqCst) {
                    ask.lock().unwrap().send(()).unwrap();
                    finished.lock().unwrap().recv_timeout(Duration::from_secs(30)).unwrap();
                }
            }
        })));
        let (config, standby_disk, rearm) = (&config, &standby_disk, armed.clone());
        let (ended_in, held_at_end, end, dropped) = std::thread::scope(|scope| {
            let helper = scope.spawn(move || {
                // (A commit whose write never reaches the hook leaves this thread waiting only
                // until the timeout; the check after the scope then says so.)
                while asked.recv_timeout(Duration::from_secs(30)).is_ok() {
                    let status = &transport.status()[0];
                    if status.sent <= status.acknowledged {
                        // Not the commit's write (nothing unacknowledged has been sent yet).
                        rearm.store(true, Ordering::SeqCst);
                        done.send(()).unwrap();
                        continue;
                    }
                    assert_eq!(status.phase, Phase::Synchronized);
                    transport.reconfigure(mode, std::slice::from_ref(config)).unwrap();
                    assert_ne!(transport.status()[0].phase, Phase::Synchronized);
                    if fast_start {
                        // The write in flight still takes its 300 ms; the catch-up the commit
                        // waits for does not.
                        standby_disk.set_hook(None);
                    }
                    done.send(()).unwrap();
                    return true;
                }
                false
            });
            standby_disk
                .set_hook(Some(Arc::new(|| std::thread::sleep(Duration::from_millis(300)))));
            armed.store(true, Ordering::SeqCst);
            let started = Instant::now();
            let executed = primary
                .db
                .execute(&[Op::set(
                    Bytes::from_static(b"dropped"),
                    Bytes::from_static(b"v"),
                    SetCondition::Always,
                )])
                .unwrap();
            let scn = executed.scn.expect("a change");
            // Led by a tokio task, as a RESP session's commit is.
            runtime.block_on(primary.db.commit(scn, CommitOptions::default())).unwrap();
            let ended_in = started.elapsed();
            let end = primary.db.redo().durable_addr();
            let held = transport.status()[0].acknowledged >= end;
            standby_disk.set_hook(None);
            armed.store(false, Ordering::SeqCst);
            (ended_in, held, end, helper.join().unwrap())
        });
        disk.set_hook(None);
        assert!(dropped, "the commit's write never reached the disk hook with a write in flight");
        println!(
            "fast-start {fast_start}: the commit ended in {ended_in:?}, the standby holding it: \
             {held_at_end}"
        );
        if fast_start {
            assert!(held_at_end, "a commit ended before its fast-start target held {end:?}");
        } else {
            // Waiting for it would take its 300 ms write at least, and its acknowledgement, on
            // the connection dropped, would never come: net_timeout (2 s).
            assert!(
                !held_at_end && ended_in < Duration::from_secs(1),
                "the dropped destination was waited for: {ended_in:?}, held: {held_at_end}"
            );
        }
        primary.stop();
        standby.stop();
    }
}

/// With nothing to send, a streaming ASYNC destination's sender sleeps until its next
/// heartbeat (every 500 ms) instead of looking at its queue every 20 ms, and a commit still
/// wakes it at once. Counted in the thread's voluntary context switches over 2 s: about 4
/// heartbeats (and the few wake-ups around them), against about 100 when it polled.
#[test]
fn an_idle_async_sender_sleeps_until_its_heartbeat_and_a_commit_wakes_it() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "idle sender");
    let standby = Standby::open();
    let mut primary = Primary::open();
    let mut idle = destination(standby.address(), Transport::Async);
    // A name of its own: the thread, "redo-send-idle1", is this test's alone.
    idle.name = "idle1".into();
    start_streaming(&mut primary, idle);
    let transport = primary.transport.as_ref().unwrap();
    let caught_up = |what: &str| {
        let durable = primary.db.redo().durable_addr();
        wait_until(what, Duration::from_secs(20), || transport.status()[0].acknowledged >= durable);
    };
    caught_up("the standby has the first write");
    for round in 0..3 {
        let before = voluntary_switches("redo-send-idle1");
        assert_eq!(before.len(), 1, "one sender thread named redo-send-idle1: {before:?}");
        std::thread::sleep(Duration::from_secs(2));
        let after = voluntary_switches("redo-send-idle1");
        let woke = after[0] - before[0];
        assert!(woke <= 20, "round {round}: the idle sender woke {woke} times in 2 s");
        // A commit is shipped without waiting for the heartbeat.
        let committed = Instant::now();
        primary.set(&format!("idle{round}"), "v");
        caught_up("the standby has the commit made while the sender slept");
        println!(
            "round {round}: {woke} wake-ups in 2 s; a commit acknowledged {:?} after",
            committed.elapsed()
        );
    }
    primary.stop();
    standby.stop();
}

/// An ASYNC write waits in the queue for others to share its send (up to 4 ms). It is redo
/// the standby lacks all that time, so the transport lag must count it: a status that shows
/// a committed write not yet acknowledged never shows a lag of 0, whether the write is
/// queued, in the sender's hands or sent. Both sides' redo is on an in-memory disk, so that
/// commits and acknowledgements take microseconds and writes do fall in the batching window
/// (with a disk slower than 4 ms a sync, none would); the test goes on until it has seen the
/// case the lag used to miss (everything sent acknowledged, a committed write still queued)
/// a few times.
#[test]
fn a_queued_async_write_counts_in_the_transport_lag() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "queued lag");
    let standby = Standby::open_on(
        tempfile::tempdir().unwrap(),
        "127.0.0.1:0",
        Arc::new(redo::crashdisk::CrashDisk::new()),
    );
    let mut primary = Primary::open_on(Arc::new(redo::crashdisk::CrashDisk::new()));
    start_streaming(&mut primary, destination(standby.address(), Transport::Async));
    let transport = primary.transport.as_ref().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut checked, mut queued_behind_acknowledged) = (0, 0);
    while queued_behind_acknowledged < 3 {
        assert!(
            Instant::now() < deadline,
            "in 60 s and {checked} commits, no status showed a write queued while everything \
             sent was acknowledged"
        );
        // One write, sent alone at once after a quiet spell; its acknowledgement; then
        // another, which waits in the queue for the rest of the batching window.
        std::thread::sleep(Duration::from_millis(10));
        primary.set(&format!("a{checked}"), "v");
        let durable = primary.db.redo().durable_addr();
        let answered = Instant::now() + Duration::from_millis(3);
        while transport.status()[0].acknowledged < durable && Instant::now() < answered {
            std::thread::yield_now();
        }
        for n in 0..4 {
            primary.set(&format!("b{checked}-{n}"), "v");
            let durable = primary.db.redo().durable_addr();
            let status = &transport.status()[0];
            checked += 1;
            if status.acknowledged < durable {
                assert!(
                    status.transport_lag_s > 0.0,
                    "the standby lacks redo (acknowledged {}, durable {durable}, sent {}) but \
                     the lag is 0",
                    status.acknowledged,
                    status.sent
                );
                if status.sent == status.acknowledged {
                    queued_behind_acknowledged += 1;
                }
            }
        }
    }
    primary.stop();
    standby.stop();
}

/// A standby that is down lacks every write made meanwhile: the primary's transport lag for
/// it grows from the first of them (it read 0 while nothing had been in flight when the
/// connection ended), and falls back to 0 once the standby is back and has caught up.
#[test]
fn a_disconnected_destination_s_lag_grows_and_clears_once_caught_up() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "disconnected lag");
    let standby = Standby::open();
    let mut primary = Primary::open();
    start_streaming(&mut primary, destination(standby.address(), Transport::Async));
    let transport = primary.transport.as_ref().unwrap();
    let durable = primary.db.redo().durable_addr();
    wait_until("everything acknowledged", Duration::from_secs(20), || {
        let status = &transport.status()[0];
        status.acknowledged >= durable && status.transport_lag_s == 0.0
    });
    let address = standby.address();
    let dir = standby.stop();
    wait_until("the primary sees the standby gone", Duration::from_secs(20), || {
        primary.phase() != Phase::Streaming
    });
    primary.set("while down", "1");
    let first = transport.status()[0].transport_lag_s;
    assert!(first > 0.0, "a write the standby lacks, but the lag is {first}");
    std::thread::sleep(Duration::from_millis(300));
    let later = transport.status()[0].transport_lag_s;
    assert!(
        later >= first + 0.25,
        "the lag did not grow while the standby was down: {first} then {later}"
    );
    let standby = Standby::open_in(dir, &address);
    let durable = primary.db.redo().durable_addr();
    wait_until("the standby is back and has everything", Duration::from_secs(60), || {
        let status = &transport.status()[0];
        status.acknowledged >= durable && status.transport_lag_s == 0.0
    });
    primary.stop();
    standby.stop();
}

#[test]
fn a_destination_s_tcp_congestion_is_used_and_a_missing_one_named() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "tcp congestion");
    let standby = Standby::open();
    let mut primary = Primary::open();
    start_streaming(
        &mut primary,
        DestinationConfig {
            tcp_congestion: Some("reno".into()),
            ..destination(standby.address(), Transport::Async)
        },
    );
    let status = &primary.transport.as_ref().unwrap().status()[0];
    assert_eq!(status.tcp_congestion.as_deref(), Some("reno"));
    primary.stop();

    let mut primary = Primary::open();
    primary.ship_to(
        ProtectionMode::MaximumPerformance,
        DestinationConfig {
            tcp_congestion: Some("nosuchcc".into()),
            ..destination(standby.address(), Transport::Async)
        },
    );
    let transport = primary.transport.as_ref().unwrap();
    wait_until("the connection fails", Duration::from_secs(20), || {
        transport.status()[0].last_error.is_some()
    });
    let status = &transport.status()[0];
    let error = status.last_error.as_deref().unwrap();
    assert!(
        error.contains("the kernel has no TCP congestion control \"nosuchcc\" (it has: "),
        "{error}"
    );
    assert_ne!(status.phase, Phase::Streaming);
    primary.stop();
    standby.stop();
}

#[test]
fn a_primary_of_another_database_is_refused_on_both_sides() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "wrong database");
    let standby = Standby::open();
    let mut owner = Primary::open();
    owner.ship_to(
        ProtectionMode::MaximumPerformance,
        destination(standby.address(), Transport::Async),
    );
    owner.set("mine", "1");
    wait_until("the standby takes its primary's identity", Duration::from_secs(10), || {
        standby.db.applied_scn() >= Scn(1)
    });
    let mut stranger = Primary::open();
    stranger.ship_to(
        ProtectionMode::MaximumPerformance,
        destination(standby.address(), Transport::Async),
    );
    wait_until("the stranger hears why", Duration::from_secs(10), || {
        stranger.transport.as_ref().unwrap().status()[0]
            .last_error
            .as_deref()
            .is_some_and(|error| error.contains("refused") && error.contains("protects database"))
    });
    assert!(standby.service.status().last_error.unwrap().contains("refused"));
    assert!(standby.service.status().refused >= 1);
    // Nothing of the stranger's reached the standby; its own primary goes on.
    stranger.set("theirs", "1");
    owner.set("mine again", "1");
    let last = owner.db.redo().durable_scn();
    wait_until("the standby follows its own primary", Duration::from_secs(10), || {
        standby.db.applied_scn() >= last
    });
    assert_eq!(state(&standby.db), state(&owner.db));
    stranger.stop();
    owner.stop();
    standby.stop();
}

#[test]
fn maximum_protection_makes_commits_wait_until_a_standby_has_them() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "maximum protection");
    // An address where no standby listens yet.
    let address = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().to_string()
    };
    let mut primary = Primary::open();
    primary
        .ship_to(ProtectionMode::MaximumProtection, destination(address.clone(), Transport::Sync));
    let commit = {
        let db = primary.db.clone();
        std::thread::spawn(move || {
            db.transact(
                &[Op::set(
                    Bytes::from_static(b"k"),
                    Bytes::from_static(b"v"),
                    SetCondition::Always,
                )],
                CommitOptions::default(),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(500));
    assert!(!commit.is_finished(), "Maximum Protection acknowledged a commit no standby has");
    assert_eq!(primary.phase(), Phase::Disconnected);
    let standby = Standby::open_in(tempfile::tempdir().unwrap(), &address);
    wait_until("the waiting commit completes", Duration::from_secs(20), || commit.is_finished());
    commit.join().unwrap().unwrap();
    assert_eq!(standby.db.redo().standby_position().next.seq, primary.db.redo().durable_addr().seq);
    wait_until("the standby applies it", Duration::from_secs(10), || {
        standby.db.get(b"k").unwrap().is_some()
    });
    primary.set("after", "1");
    wait_until("synchronized", Duration::from_secs(20), || primary.phase() == Phase::Synchronized);
    primary.stop();
    standby.stop();
}

#[test]
fn the_standby_names_its_primary_not_a_peer_that_left() {
    use std::io::{Read, Write};
    let _watchdog = Watchdog::new(Duration::from_secs(60), "primary peer");
    let standby = Standby::open();
    let mut owner = Primary::open();
    owner.ship_to(
        ProtectionMode::MaximumPerformance,
        destination(standby.address(), Transport::Async),
    );
    owner.set("mine", "1");
    wait_until("the standby applies its primary's redo", Duration::from_secs(10), || {
        standby.db.applied_scn() >= Scn(1)
    });
    let primary_peer = standby.service.status().primary_peer.expect("connected");
    // A peer of the same database says hello (accepted: it could be the primary
    // reconnecting), then goes away while the primary's connection stays.
    let (identity, config) = (owner.db.redo().identity(), owner.db.redo().config());
    let hello = proto::Message::Hello(proto::Hello {
        version: proto::PROTOCOL_VERSION,
        version_min: proto::PROTOCOL_VERSION_MIN,
        database_id: identity.database_id.0,
        incarnation: identity.incarnation.0,
        thread: identity.thread.0,
        channel: proto::Channel::Control,
        destination: "visitor".into(),
        block_size: config.block_size,
        log_file_size: config.log_file_size,
        groups: config.groups,
        primary_time_us: 0,
        member: "visitor".into(),
        history: Vec::new(),
        relay_of: String::new(),
    });
    let mut visitor = std::net::TcpStream::connect(standby.address()).unwrap();
    visitor.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    visitor.write_all(&hello.to_frame()).unwrap();
    let mut received = Vec::new();
    while proto::Decoder::default().decode(&received).unwrap().is_none() {
        let mut buffer = [0u8; 256];
        let read = visitor.read(&mut buffer).unwrap();
        assert!(read > 0, "closed before the welcome");
        received.extend_from_slice(&buffer[..read]);
    }
    let visitor_addr = visitor.local_addr().unwrap().to_string();
    // (The standby counts a connection in once it has sent its welcome.)
    wait_until("the standby names the newest connection", Duration::from_secs(10), || {
        standby.service.status().primary_peer.as_deref() == Some(visitor_addr.as_str())
    });
    drop(visitor);
    wait_until("the standby forgets the peer that left", Duration::from_secs(10), || {
        let status = standby.service.status();
        status.connected && status.primary_peer.as_deref() == Some(primary_peer.as_str())
    });
    owner.stop();
    standby.stop();
}

#[test]
fn sync_noaffirm_stays_synchronized_when_the_standby_pauses() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "sync noaffirm");
    let standby = Standby::open();
    let mut primary = Primary::open();
    primary.ship_to(
        ProtectionMode::MaximumAvailability,
        DestinationConfig { affirm: false, ..destination(standby.address(), Transport::Sync) },
    );
    primary.set("first", "1");
    wait_until("the standby is synchronized", Duration::from_secs(20), || {
        primary.phase() == Phase::Synchronized
    });
    // Each pause lets the standby find nothing more to read and sync what it received:
    // the SYNC connection must still carry nothing but the acknowledgements of its writes.
    for n in 0..20 {
        primary.set(&format!("key{n}"), "value");
        std::thread::sleep(Duration::from_millis(20));
    }
    let status = &primary.transport.as_ref().unwrap().status()[0];
    assert_eq!(status.phase, Phase::Synchronized, "last error: {:?}", status.last_error);
    assert_eq!(status.failures, 0, "last error: {:?}", status.last_error);
    primary.stop();
    standby.stop();
}
