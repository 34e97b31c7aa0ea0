//! The archiver spreads the copy of a log over half the time the log took to fill, at most
//! `archive_spread_max` (`archiver::copy_spread`), so that its megabytes reach the disk a piece
//! at a time; a log switch that needs the group hurries the copy, and so does the shutdown.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use crate::archiver::copy_spread;
use crate::crashdisk::{CrashDisk, Watchdog};
use crate::tests::{IMMEDIATE_WAIT, payload_for, small_config, wait_until};
use crate::tests_standby::Forward;
use crate::tests_switch_waits::Gate;
use crate::*;

/// Logs of 4 MiB (four pieces of a copy), `groups` of them, copies spread up to a minute.
fn open_log(disk: &CrashDisk, groups: u32) -> Arc<RedoLog> {
    let config = RedoConfig {
        groups,
        log_file_size: 4 << 20,
        log_buffer_size: 1 << 20,
        archive_spread_max: Duration::from_secs(60),
        ..small_config(Path::new("/db"))
    };
    Arc::new(RedoLog::open(config, Arc::new(disk.clone()), Metrics::new()).unwrap())
}

fn commit_until_log(log: &RedoLog, seq: LogSeq, seed: &mut u64) {
    while log.durable_addr().seq < seq {
        log.commit(&payload_for(*seed, 4000), IMMEDIATE_WAIT).unwrap();
        *seed += 1;
    }
}

#[test]
fn a_copy_is_spread_over_half_the_time_its_log_took_to_fill_at_most_the_setting() {
    assert_eq!(copy_spread(4_000_000, Duration::from_secs(2)), Duration::from_secs(2));
    assert_eq!(copy_spread(1_000_000, Duration::from_secs(2)), Duration::from_millis(500));
    assert_eq!(copy_spread(4_000_000, Duration::ZERO), Duration::ZERO);
    assert_eq!(copy_spread(0, Duration::from_secs(2)), Duration::ZERO);
}

/// Nobody waits for log 1 (three groups): its copy takes at least three quarters of its
/// spread (four pieces, the last three each after its share of it) after the log closed.
#[test]
fn a_copy_nobody_waits_for_is_spread() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "a spread copy");
    let disk = CrashDisk::new();
    let log = open_log(&disk, 3);
    let mut seed = 0;
    log.commit(&payload_for(seed, 4000), IMMEDIATE_WAIT).unwrap();
    thread::sleep(Duration::from_millis(1200));
    commit_until_log(&log, LogSeq(2), &mut seed);
    wait_until("log 1 is archived", || {
        log.archived_logs().iter().any(|entry| entry.seq == LogSeq(1))
    });
    let entry = log.archived_logs().into_iter().find(|entry| entry.seq == LogSeq(1)).unwrap();
    let filled_us = entry.next_time_us - entry.first_time_us;
    assert!(filled_us >= 1_200_000, "{entry:?}");
    assert!(entry.size_bytes > 3 << 20, "four pieces: {entry:?}");
    let copied_us = entry.completed_us - entry.next_time_us;
    assert!(copied_us * 4 >= filled_us / 2 * 3, "copied in {copied_us} µs: {entry:?}");
    log.shutdown().unwrap();
}

/// The copy's pacing ends at once when a log switch waits for this log or a later one, while
/// writes are refused for a failed copy, while other logs wait for the archivers, and at the
/// shutdown; an earlier log's hurry says nothing of it.
#[test]
fn a_spread_copy_goes_on_at_once_when_somebody_waits_for_it() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "a hurried copy");
    let disk = CrashDisk::new();
    let log = open_log(&disk, 3);
    let pace = |seq: u64| {
        let shared = log.shared.clone();
        thread::spawn(move || {
            shared.pace_copy(LogSeq(seq), Instant::now(), Duration::from_secs(30), 0.5)
        })
    };
    let paced = pace(5);
    log.shared.archive_hurry.store(4, Ordering::Release);
    thread::sleep(Duration::from_millis(200));
    assert!(!paced.is_finished(), "paced although only an earlier log was waited for");
    log.shared.archive_hurry.store(5, Ordering::Release);
    paced.join().unwrap();
    // While writes are refused until archiving succeeds again (a retry after a full disk).
    let paced = pace(6);
    thread::sleep(Duration::from_millis(200));
    assert!(!paced.is_finished());
    log.shared.archive_failing.store(true, Ordering::Release);
    paced.join().unwrap();
    log.shared.archive_failing.store(false, Ordering::Release);
    // While more logs wait for the archivers (a backlog).
    let paced = pace(7);
    thread::sleep(Duration::from_millis(200));
    assert!(!paced.is_finished());
    log.shared.archive_queue.lock().pending.push_back(LogSeq(8));
    paced.join().unwrap();
    log.shared.archive_queue.lock().pending.clear();
    // At the shutdown.
    let paced = pace(9);
    thread::sleep(Duration::from_millis(200));
    assert!(!paced.is_finished());
    log.shutdown().unwrap();
    paced.join().unwrap();
}

/// With two groups, the commit that needs group 1 again waits for log 1's copy, spread over a
/// minute: the switch hurries it, and the commit goes on long before the copy's spread ends.
#[test]
fn a_log_switch_waiting_for_a_spread_copy_hurries_it() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "a switch hurries the copy");
    let disk = CrashDisk::new();
    let log = open_log(&disk, 2);
    *log.shared.archive_spread_for_tests.lock() = Some(Duration::from_secs(60));
    let mut seed = 0;
    commit_until_log(&log, LogSeq(2), &mut seed);
    log.advance_checkpoint(log.durable_scn()).unwrap();
    let started = Instant::now();
    commit_until_log(&log, LogSeq(3), &mut seed);
    // Unhurried, the copy would end 45 s in (its last piece's share of the minute).
    let took = started.elapsed();
    assert!(took < Duration::from_secs(20), "the switch waited {took:?} for the copy");
    assert!(log.shared.archive_hurry.load(Ordering::Acquire) >= 1);
    log.shutdown().unwrap();
}

/// A standby whose every standby log group waits for the archiver (held at its failpoint)
/// before it can receive the next log hurries the copies of the logs it holds.
#[test]
fn a_standby_waiting_for_a_free_group_hurries_the_copies() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "a standby hurries the copies");
    let primary_disk = CrashDisk::new();
    let standby_disk = CrashDisk::new();
    let primary = crate::tests::open_on(&primary_disk, &small_config(Path::new("/db"))).unwrap();
    let standby = Arc::new(
        RedoLog::open_standby(
            RedoConfig { groups: 2, ..crate::tests::standby_config() },
            Arc::new(standby_disk.clone()),
            Metrics::new(),
        )
        .unwrap(),
    );
    standby.adopt_identity(primary.identity().database_id).unwrap();
    let archiver = Arc::new(Gate::default());
    *standby.shared.failpoint.lock() = Some({
        let archiver = archiver.clone();
        Arc::new(move |point| {
            if point == "archiver: before archiving" {
                archiver.pass();
            }
        })
    });
    primary.set_shipper(Some(Arc::new(Forward { standby: standby.clone() })));
    // Logs 1 and 2 fill both standby groups; log 3 needs one of them.
    let committer = {
        let primary = primary.clone();
        thread::spawn(move || {
            let mut seed = 0;
            commit_until_log(&primary, LogSeq(3), &mut seed);
        })
    };
    wait_until("the standby hurries the copies of the logs it holds", || {
        standby.shared.archive_hurry.load(Ordering::Acquire) >= 2
    });
    archiver.open();
    committer.join().unwrap();
    *standby.shared.failpoint.lock() = None;
    primary.shutdown().unwrap();
    standby.shutdown().unwrap();
}
