//! Waits at a log switch, by reason: a committer held up while the switch waits for the next
//! group's archiving, for the checkpoint, or for a SYNC standby's acknowledgement is counted
//! under exactly that reason (`log_writer::switch_waits`). Each test holds the one thing the
//! switch waits for (the archiver at a failpoint, the checkpoint by never advancing it, the
//! standby's acknowledgement of the closed header) until it has seen the committer waiting
//! in that phase. A task's wait for log buffer space (`RedoLog::buffer_space_wait`) during
//! the switch is counted under its reason too.

use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use stats::WaitEventSnapshot;

use crate::crashdisk::{CrashDisk, Watchdog};
use crate::log_writer::SwitchPhase;
use crate::ship::{LogWrite, ShipWait, Shipper, Tried, WriteKind};
use crate::tests::{IMMEDIATE_WAIT, payload_for, small_config, wait_until};
use crate::*;

/// Where a test holds a thread (an archiver at its failpoint, a ship wait) until it opens.
#[derive(Default)]
pub(crate) struct Gate {
    open: Mutex<bool>,
    changed: Condvar,
}

impl Gate {
    pub(crate) fn pass(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut open = self.open.lock();
        while !*open {
            assert!(Instant::now() < deadline, "the test never opened the gate");
            self.changed.wait_for(&mut open, Duration::from_millis(50));
        }
    }

    pub(crate) fn open(&self) {
        *self.open.lock() = true;
        self.changed.notify_all();
    }
}

/// A log with no checkpoint handler (the test advances the checkpoint itself), `groups` groups
/// and a background writer that stays idle unless woken.
fn open_log(disk: &CrashDisk, groups: u32) -> Arc<RedoLog> {
    let config = RedoConfig {
        groups,
        log_buffer_size: 1 << 20,
        batch_write_interval: Duration::from_secs(10),
        ..small_config(Path::new("/db"))
    };
    Arc::new(RedoLog::open(config, Arc::new(disk.clone()), Metrics::new()).unwrap())
}

fn wait_event(log: &RedoLog, name: &str) -> Option<WaitEventSnapshot> {
    log.metrics().snapshot().wait(name).cloned()
}

/// Commits from a thread of its own until its redo reaches log `seq`: the commit that needs
/// the switch into it waits for that switch. Returns how many it committed.
fn commit_until_log(log: &Arc<RedoLog>, seq: LogSeq) -> thread::JoinHandle<u64> {
    let log = log.clone();
    thread::spawn(move || {
        let mut n = 0;
        while log.durable_addr().seq < seq {
            log.commit(&payload_for(n, 4000), IMMEDIATE_WAIT).unwrap();
            n += 1;
        }
        n
    })
}

/// Waits until the switch is in `phase` with a committer waiting; returns when it saw that.
fn held_in(log: &RedoLog, phase: SwitchPhase) -> Instant {
    wait_until("a committer waits behind the switch", || {
        log.shared.log_writer.switch_clock.phase() == Some(phase)
            && log.shared.log_writer.commit.lock().waiting() > 0
    });
    Instant::now()
}

/// Asserts that the one held committer was counted under `reason` for at least `held`, and
/// under no other reason the switch could wait for.
fn assert_counted_under(log: &RedoLog, reason: &str, held: Duration) {
    let event = wait_event(log, reason).unwrap_or_else(|| panic!("no wait under {reason}"));
    assert_eq!(event.count, 1, "{event:?}");
    assert!(event.total_us >= held.as_micros() as u64, "held {held:?}, counted {event:?}");
    for other in [
        stats::LOG_FILE_SWITCH_ARCHIVING,
        stats::LOG_FILE_SWITCH_CHECKPOINT,
        stats::LOG_FILE_SWITCH_SYNC_STANDBY,
    ] {
        if other != reason {
            assert_eq!(wait_event(log, other), None, "counted under {other} too");
        }
    }
    // The rest of the switch (its headers) is "completion", and the whole wait stays part of
    // "log file sync".
    let completion = wait_event(log, stats::LOG_FILE_SWITCH_COMPLETION).expect("completion");
    assert!(completion.total_us < event.total_us, "{completion:?} against {event:?}");
    assert!(wait_event(log, "log file sync").unwrap().total_us >= event.total_us);
}

#[test]
fn a_committer_held_up_by_archiving_is_counted_under_archiving_needed() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "archiving needed");
    let disk = CrashDisk::new();
    let log = open_log(&disk, 2);
    let archiver = Arc::new(Gate::default());
    *log.shared.failpoint.lock() = Some({
        let archiver = archiver.clone();
        Arc::new(move |point| {
            if point == "archiver: before archiving" {
                archiver.pass();
            }
        })
    });
    // Log 1 fills and is closed; its archiving is held at the failpoint. The checkpoint is
    // past it: reusing its group waits for archiving alone.
    commit_until_log(&log, LogSeq(2)).join().unwrap();
    log.advance_checkpoint(log.durable_scn()).unwrap();
    // The commit that needs group 1 again waits for log 1's archiving.
    let committer = commit_until_log(&log, LogSeq(3));
    let held_from = held_in(&log, SwitchPhase::Archiving);
    // The switch hurries log 1's copy, should it be spread (`archive_spread_max`).
    wait_until("the switch hurries log 1's copy", || {
        log.shared.archive_hurry.load(std::sync::atomic::Ordering::Acquire) >= 1
    });
    thread::sleep(Duration::from_millis(20));
    let held = held_from.elapsed();
    archiver.open();
    committer.join().unwrap();
    assert_counted_under(&log, stats::LOG_FILE_SWITCH_ARCHIVING, held);
    // The log writer's own record: one per switch (the first write's, into 2, into 3).
    assert_eq!(wait_event(&log, "log writer switch").map(|event| event.count), Some(3));
    *log.shared.failpoint.lock() = None;
    log.shutdown().unwrap();
}

#[test]
fn an_async_committer_held_up_by_the_checkpoint_is_counted_under_checkpoint_incomplete() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "checkpoint incomplete");
    let disk = CrashDisk::new();
    let log = open_log(&disk, 2);
    commit_until_log(&log, LogSeq(2)).join().unwrap();
    wait_until("log 1 is archived", || {
        log.archived_logs().iter().any(|entry| entry.seq == LogSeq(1))
    });
    // More than the rest of log 2 holds, committed by one task: its commit needs group 1
    // again, whose log the checkpoint has not passed (nobody advances it).
    let mut last = Scn(0);
    for n in 0..20 {
        last = log.append(&payload_for(1000 + n, 4000)).unwrap();
    }
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
    let commit = runtime.spawn(log.commit_waiter(last, IMMEDIATE_WAIT).expect("WAIT waits"));
    let held_from = held_in(&log, SwitchPhase::Checkpoint);
    // Another session waits for room in the log buffer meanwhile, as a task does.
    let space = log.buffer_space_wait();
    thread::sleep(Duration::from_millis(20));
    let held = held_from.elapsed();
    log.advance_checkpoint(log.durable_scn()).unwrap();
    runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(20), commit).await.unwrap().unwrap().unwrap();
    });
    assert_counted_under(&log, stats::LOG_FILE_SWITCH_CHECKPOINT, held);
    // The wait for space ends: "log buffer space", and held up by the same checkpoint.
    drop(space);
    let space = wait_event(&log, "log buffer space").expect("the wait for space counted");
    assert_eq!(space.count, 1);
    let checkpoint = wait_event(&log, stats::LOG_FILE_SWITCH_CHECKPOINT).unwrap();
    assert_eq!(checkpoint.count, 2, "{checkpoint:?}");
    log.shutdown().unwrap();
}

/// Acknowledges every write at once (no wait) but the closed header of log 1, whose
/// acknowledgement waits for `gate`: a SYNC standby slow to take the switch.
struct SlowSwitchStandby {
    gate: Arc<Gate>,
}

struct GatedWait(Arc<Gate>);

impl ShipWait for GatedWait {
    fn wait(self: Box<Self>) -> Result<()> {
        self.0.pass();
        Ok(())
    }

    fn try_wait(self: Box<Self>) -> Tried {
        Err(self)
    }
}

impl Shipper for SlowSwitchStandby {
    fn ship(&self, write: &Arc<LogWrite>) -> Option<Box<dyn ShipWait>> {
        (write.kind == WriteKind::ClosedHeader && write.seq == LogSeq(1))
            .then(|| Box::new(GatedWait(self.gate.clone())) as Box<dyn ShipWait>)
    }
}

#[test]
fn a_committer_held_up_by_a_sync_standby_at_the_switch_is_counted_under_sync_standby() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "SYNC standby");
    let disk = CrashDisk::new();
    let log = open_log(&disk, 3);
    let gate = Arc::new(Gate::default());
    log.set_shipper(Some(Arc::new(SlowSwitchStandby { gate: gate.clone() })));
    // The commit that fills log 1 waits for the switch, which waits for the standby's
    // acknowledgement of log 1's end (the next group was never used: nothing else to wait for).
    let committer = commit_until_log(&log, LogSeq(2));
    let held_from = held_in(&log, SwitchPhase::SyncStandby);
    thread::sleep(Duration::from_millis(20));
    let held = held_from.elapsed();
    gate.open();
    committer.join().unwrap();
    assert_counted_under(&log, stats::LOG_FILE_SWITCH_SYNC_STANDBY, held);
    log.shutdown().unwrap();
}

#[test]
fn an_append_held_up_for_log_buffer_space_by_the_checkpoint_is_counted_under_it() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "log buffer space");
    let disk = CrashDisk::new();
    // Small strands (16 KiB) and larger logs (256 KiB): an appender fills its strand while the
    // switch waits, and what it appended fits in the next log (no second switch).
    let config = RedoConfig {
        groups: 2,
        log_file_size: 256 << 10,
        log_buffer_size: 64 << 10,
        log_buffer_strands: 4,
        ..small_config(Path::new("/db"))
    };
    let log = Arc::new(RedoLog::open(config, Arc::new(disk.clone()), Metrics::new()).unwrap());
    commit_until_log(&log, LogSeq(2)).join().unwrap();
    wait_until("log 1 is archived", || {
        log.archived_logs().iter().any(|entry| entry.seq == LogSeq(1))
    });
    // A session appends without waiting for durability; the background writer writes it, and
    // fills log 2: its switch needs group 1, whose log the checkpoint has not passed.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appender = {
        let (log, stop) = (log.clone(), stop.clone());
        thread::spawn(move || {
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                log.append(&payload_for(2000 + n, 2000)).unwrap();
                n += 1;
            }
        })
    };
    wait_until("the appender waits for space behind the switch", || {
        log.shared.log_writer.switch_clock.phase() == Some(SwitchPhase::Checkpoint)
            && log.metrics().snapshot().stat("redo buffer allocation retries") > 0
    });
    let held_from = Instant::now();
    stop.store(true, std::sync::atomic::Ordering::Release);
    thread::sleep(Duration::from_millis(20));
    let held = held_from.elapsed();
    log.advance_checkpoint(log.durable_scn()).unwrap();
    appender.join().unwrap();
    let checkpoint = wait_event(&log, stats::LOG_FILE_SWITCH_CHECKPOINT).expect("counted");
    assert_eq!(checkpoint.count, 1, "{checkpoint:?}");
    assert!(checkpoint.total_us >= held.as_micros() as u64, "held {held:?}: {checkpoint:?}");
    let space = wait_event(&log, "log buffer space").expect("the appender waited for space");
    assert!(space.total_us >= checkpoint.total_us, "{space:?} against {checkpoint:?}");
    assert_eq!(wait_event(&log, stats::LOG_FILE_SWITCH_ARCHIVING), None);
    assert_eq!(wait_event(&log, stats::LOG_FILE_SWITCH_SYNC_STANDBY), None);
    log.shutdown().unwrap();
}
