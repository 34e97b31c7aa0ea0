//! The log writer's stall: a commit whose log switch a failure holds up (a full disk makes
//! archiving or the checkpoint fail) is told at once that it is not durable yet, and its redo
//! is written, in order, once the failure ends (`log_writer::switch`).

use std::path::Path;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crate::crashdisk::{CrashDisk, Watchdog};
use crate::tests::{IMMEDIATE_WAIT, open_on, payload_for, read_all, small_config, wait_until};
use crate::*;

/// Appends more than the rest of the current log holds, so that writing it needs a switch;
/// returns the SCNs appended.
fn append_beyond_the_current_log(log: &RedoLog) -> Vec<Scn> {
    (0..20).map(|n| log.append(&payload_for(1000 + n, 4000)).unwrap()).collect()
}

/// Waits for `scn` to be durable, asking again while the writer is still stalled (until the
/// switch it waits for notices that the failure is over).
fn wait_durable_once_unstalled(log: &RedoLog, scn: Scn) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match log.wait_durable(scn) {
            Ok(()) => return,
            Err(RedoError::CommitStalled { .. }) if Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(5));
            }
            Err(error) => panic!("SCN {scn} never became durable: {error}"),
        }
    }
}

/// A commit waiting on a log switch that a failing checkpoint holds up (a full data disk)
/// gets an error at once instead of hanging until space returns, and so does every commit
/// after it; its redo is kept and written once the checkpoint succeeds again.
#[test]
fn a_commit_held_up_by_a_failing_checkpoint_is_told_at_once_and_written_later() {
    let _watchdog = Watchdog::new(
        Duration::from_secs(60),
        "a_commit_held_up_by_a_failing_checkpoint_is_told_at_once_and_written_later",
    );
    let disk = CrashDisk::new();
    // Two groups: the switch back into the first one needs its checkpoint, which fails.
    let (log, before) = log_whose_checkpoints_fail(&disk);
    // More than the rest of the second log holds: the write needs the switch.
    let appended = append_beyond_the_current_log(&log);
    let last = *appended.last().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let started = Instant::now();
    let error = runtime.block_on(async {
        let waiter = log.commit_waiter(last, IMMEDIATE_WAIT).expect("WAIT waits");
        tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("a stalled commit is answered, not left waiting")
            .unwrap_err()
    });
    assert!(matches!(error, RedoError::CommitStalled { .. }), "{error}");
    assert!(error.is_disk_full(), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("not durable yet")
            && text.contains("log group 1")
            && text.contains("No space left on device"),
        "{text}"
    );
    println!("stalled commit answered after {:?}: {text}", started.elapsed());
    assert!(log.durable_scn() < last);
    // While the stall lasts, a thread's commit gets the same answer at once.
    let again = log.wait_durable(last).unwrap_err();
    assert!(matches!(again, RedoError::CommitStalled { .. }), "{again}");
    // Nothing is failed for good: the checkpoint succeeds again (space returned), and the
    // stalled redo is written, in order, by the switch that was waiting.
    log.advance_checkpoint(before).unwrap();
    log.note_checkpoint_failure(None);
    wait_durable_once_unstalled(&log, last);
    assert_eq!(log.durable_addr().seq, LogSeq(3));
    let scns: Vec<Scn> = read_all(&log).into_iter().map(|record| record.scn).collect();
    assert!(appended.iter().all(|scn| scns.contains(scn)));
    assert_eq!(scns.last(), Some(&last));
    log.commit(b"after", IMMEDIATE_WAIT).unwrap();
    log.shutdown().unwrap();
}

/// A log of two groups whose "database" fails every checkpoint on a full disk: the handler
/// only reports the failure. Filled until its second log is current; returns the log and the
/// SCN durable then.
fn log_whose_checkpoints_fail(disk: &CrashDisk) -> (Arc<RedoLog>, Scn) {
    let config = RedoConfig {
        groups: 2,
        log_buffer_size: 1 << 20,
        batch_write_interval: Duration::from_secs(10),
        ..small_config(Path::new("/db"))
    };
    let log = Arc::new(RedoLog::open(config, Arc::new(disk.clone()), Metrics::new()).unwrap());
    let weak: Weak<RedoLog> = Arc::downgrade(&log);
    log.set_checkpoint_handler(Arc::new(move |_scn| {
        if let Some(log) = weak.upgrade() {
            log.note_checkpoint_failure(Some("No space left on device (os error 28)".into()));
        }
    }));
    let mut n = 0;
    while log.durable_addr().seq < LogSeq(2) {
        log.commit(&payload_for(n, 4000), IMMEDIATE_WAIT).unwrap();
        n += 1;
    }
    let durable = log.durable_scn();
    (log, durable)
}

/// A committing thread (leader/follower mode: the first committer writes) whose own write
/// needs the held-up switch is told too: the switch goes to the background writer, and the
/// thread, following, gets the stall instead of blocking inside it.
#[test]
fn a_committing_thread_that_would_lead_a_held_up_switch_is_told_at_once() {
    let _watchdog = Watchdog::new(
        Duration::from_secs(60),
        "a_committing_thread_that_would_lead_a_held_up_switch_is_told_at_once",
    );
    let disk = CrashDisk::new();
    let (log, before) = log_whose_checkpoints_fail(&disk);
    let last = *append_beyond_the_current_log(&log).last().unwrap();
    // Nobody else is writing: this thread would lead the write, and the write needs the switch.
    let error = log.wait_durable(last).unwrap_err();
    assert!(matches!(error, RedoError::CommitStalled { .. }), "{error}");
    log.advance_checkpoint(before).unwrap();
    log.note_checkpoint_failure(None);
    wait_durable_once_unstalled(&log, last);
    assert_eq!(read_all(&log).last().map(|record| record.scn), Some(last));
    log.shutdown().unwrap();
}

/// A database fenced (or whose writer fails) during a stall: when the switch could go on, it
/// does not, and nothing it held is ever counted durable.
#[test]
fn a_writer_refused_during_a_stall_never_writes_the_stalled_redo() {
    let _watchdog = Watchdog::new(
        Duration::from_secs(60),
        "a_writer_refused_during_a_stall_never_writes_the_stalled_redo",
    );
    let disk = CrashDisk::new();
    let (log, before) = log_whose_checkpoints_fail(&disk);
    let last = *append_beyond_the_current_log(&log).last().unwrap();
    let error = log.wait_durable(last).unwrap_err();
    assert!(matches!(error, RedoError::CommitStalled { .. }), "{error}");
    let durable = log.durable_scn();
    log.shared.refuse_further_redo("fenced: another member is primary in incarnation 2");
    // The failure ends: the switch could go on, but the writer was refused meanwhile.
    log.advance_checkpoint(before).unwrap();
    log.note_checkpoint_failure(None);
    let refused = log.wait_durable(last).unwrap_err();
    assert!(refused.to_string().contains("fenced"), "{refused}");
    thread::sleep(Duration::from_millis(300));
    assert_eq!(log.durable_scn(), durable, "redo made durable after the writer was refused");
    assert!(read_all(&log).iter().all(|record| record.scn <= durable));
    let _ = log.shutdown();
}

/// The same on a full archive disk: the switch needs a group whose log cannot be archived.
#[test]
fn a_commit_held_up_by_failing_archiving_is_told_at_once_and_written_later() {
    let _watchdog = Watchdog::new(
        Duration::from_secs(60),
        "a_commit_held_up_by_failing_archiving_is_told_at_once_and_written_later",
    );
    let disk = CrashDisk::new();
    let config = RedoConfig {
        groups: 2,
        log_buffer_size: 1 << 20,
        batch_write_interval: Duration::from_secs(10),
        ..small_config(Path::new("/db"))
    };
    let log = open_on(&disk, &config).unwrap();
    log.commit(b"before", IMMEDIATE_WAIT).unwrap();
    // The logs are preallocated: only archiving needs space, and none is left for it.
    disk.set_capacity(Some(disk.used_bytes() + 1000));
    // Appended before archiving fails (it is refused after): more than two logs hold, so
    // the write switches into the second group, then needs the first back.
    let mut last = Scn(0);
    for n in 0..40 {
        last = log.append(&payload_for(n, 4000)).unwrap();
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let error = runtime.block_on(async {
        let waiter = log.commit_waiter(last, IMMEDIATE_WAIT).expect("WAIT waits");
        tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("a stalled commit is answered, not left waiting")
            .unwrap_err()
    });
    let text = error.to_string();
    assert!(matches!(error, RedoError::CommitStalled { .. }), "{text}");
    assert!(error.is_disk_full(), "{text}");
    assert!(text.contains("log sequence 1 cannot be archived"), "{text}");
    assert!(log.durable_scn() < last);
    // The status says so while it lasts.
    let stall = log.status().stall.expect("the status shows the stall");
    assert!(stall.contains("log sequence 1 cannot be archived"), "{stall}");
    disk.set_capacity(None);
    wait_durable_once_unstalled(&log, last);
    wait_until("the stall ends", || log.status().stall.is_none());
    assert_eq!(read_all(&log).last().map(|record| record.scn), Some(last));
    wait_until("archiving resumes", || log.archiver_stuck().is_none());
    log.commit(b"after", IMMEDIATE_WAIT).unwrap();
    log.shutdown().unwrap();
}
