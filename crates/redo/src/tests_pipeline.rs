//! Pipelined SYNC writes (`log_writer::pipeline`), against a shipper whose acknowledgements
//! the test hands out itself: in any order, late, or never. Whatever the order, durability is
//! published in write order, never past a write whose wait has not returned, and never past
//! one whose wait failed; what is in flight stays bounded; a log switch waits for it.
//! (The real transport, over real sockets to real standbys, is tested in crates/cli/tests.)

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::crashdisk::{CrashDisk, Watchdog};
use crate::ship::{LogWrite, ShipWait, Shipper, Tried, WriteKind};
use crate::tests::{IMMEDIATE_WAIT, open_on, payload_for, read_all, small_config};
use crate::*;

/// What the test decides for a write: acknowledged, or failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ack,
    Fail,
    /// The wait panics (a bug in a shipper): it must fail like an error, not hang anyone.
    Panic,
}

/// A shipper whose every units write must be acknowledged by the test (`release`); header
/// writes are acknowledged at once.
#[derive(Default)]
struct ScriptedShipper {
    state: Mutex<Script>,
    changed: Condvar,
}

#[derive(Default)]
struct Script {
    /// Units writes shipped, in order: their last SCN.
    shipped: Vec<Scn>,
    verdicts: BTreeMap<usize, Verdict>,
    /// Waits returned.
    returned: usize,
    /// Most writes shipped and not yet returned from their wait, at once.
    most_in_flight: usize,
    /// Acknowledge each write as it is shipped (a standby that answers before the local
    /// write ends): its wait is `ready`.
    acknowledge_at_once: bool,
    /// The thread each wait ran on, by write.
    waited_on: BTreeMap<usize, String>,
}

struct ScriptedWait {
    shipper: Arc<ScriptedShipper>,
    index: usize,
}

impl ShipWait for ScriptedWait {
    fn try_wait(self: Box<Self>) -> Tried {
        let acknowledged =
            self.shipper.state.lock().verdicts.get(&self.index) == Some(&Verdict::Ack);
        if acknowledged { Ok(self.wait()) } else { Err(self) }
    }

    fn wait(self: Box<Self>) -> Result<()> {
        let mut script = self.shipper.state.lock();
        let thread = thread::current().name().unwrap_or("unnamed").to_string();
        script.waited_on.insert(self.index, thread);
        let deadline = Instant::now() + Duration::from_secs(30);
        let verdict = loop {
            if let Some(verdict) = script.verdicts.get(&self.index) {
                break *verdict;
            }
            assert!(Instant::now() < deadline, "write {} was never released", self.index);
            self.shipper.changed.wait_for(&mut script, Duration::from_millis(50));
        };
        script.returned += 1;
        match verdict {
            Verdict::Ack => Ok(()),
            Verdict::Fail => Err(RedoError::WriterFailed(format!("write {} failed", self.index))),
            Verdict::Panic => {
                drop(script);
                panic!("write {}'s wait panicked (as the test asked)", self.index)
            }
        }
    }
}

struct Handle(Arc<ScriptedShipper>);

impl Shipper for Handle {
    fn ship(&self, write: &Arc<LogWrite>) -> Option<Box<dyn ShipWait>> {
        if write.kind != WriteKind::Units {
            return None;
        }
        let mut script = self.0.state.lock();
        script.shipped.push(write.last_scn);
        let index = script.shipped.len() - 1;
        if script.acknowledge_at_once {
            script.verdicts.insert(index, Verdict::Ack);
        }
        script.most_in_flight = script.most_in_flight.max(script.shipped.len() - script.returned);
        self.0.changed.notify_all();
        Some(Box::new(ScriptedWait { shipper: self.0.clone(), index }))
    }
}

impl ScriptedShipper {
    fn release(&self, index: usize, verdict: Verdict) {
        self.state.lock().verdicts.insert(index, verdict);
        self.changed.notify_all();
    }

    fn shipped(&self) -> Vec<Scn> {
        self.state.lock().shipped.clone()
    }

    /// Waits until at least `count` units writes were shipped.
    fn wait_shipped(&self, count: usize) -> Vec<Scn> {
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut script = self.state.lock();
        while script.shipped.len() < count {
            assert!(
                Instant::now() < deadline,
                "only {} writes shipped, {count} expected",
                script.shipped.len()
            );
            self.changed.wait_for(&mut script, Duration::from_millis(50));
        }
        script.shipped.clone()
    }
}

fn log_with_scripted_shipper(disk: &CrashDisk) -> (Arc<RedoLog>, Arc<ScriptedShipper>) {
    let log = open_on(disk, &small_config(Path::new("/db"))).unwrap();
    let shipper = Arc::new(ScriptedShipper::default());
    log.set_shipper(Some(Arc::new(Handle(shipper.clone()))));
    (log, shipper)
}

/// Commits from tokio tasks (each lead defers its wait): returns their tasks' handles.
fn commit_async(
    runtime: &tokio::runtime::Runtime,
    log: &Arc<RedoLog>,
    count: usize,
) -> Vec<(Scn, tokio::task::JoinHandle<Result<()>>)> {
    (0..count)
        .map(|n| {
            let scn = log.append(&payload_for(n as u64, 100)).unwrap();
            let waiter = log.commit_waiter(scn, IMMEDIATE_WAIT).expect("WAIT waits");
            (scn, runtime.spawn(waiter))
        })
        .collect()
}

fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

/// A task leader whose acknowledgement is in by the end of its local write settles the write
/// itself (no hand-off to the acknowledgement waiter); one with a write in flight ahead of it
/// still hands it over, and nothing is published past the write ahead.
#[test]
fn a_task_settles_an_acknowledged_write_itself_unless_one_is_in_flight_ahead() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "an acknowledged write settled here");
    let disk = CrashDisk::new();
    let (log, shipper) = log_with_scripted_shipper(&disk);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    shipper.state.lock().acknowledge_at_once = true;
    for n in 0..3 {
        let (scn, task) = commit_async(&runtime, &log, 1).pop().unwrap();
        runtime.block_on(task).unwrap().unwrap_or_else(|error| panic!("commit {scn}: {error}"));
        let waited_on = shipper.state.lock().waited_on.get(&n).cloned();
        assert!(
            waited_on.as_deref().is_some_and(|thread| thread != "redo-ackwait"),
            "write {n}'s wait ran on {waited_on:?}: handed to the acknowledgement waiter"
        );
    }
    // Write 3 is not acknowledged; write 4 is, at once, but 3 is in flight ahead of it.
    shipper.state.lock().acknowledge_at_once = false;
    let before = log.durable_scn();
    let mut commits = commit_async(&runtime, &log, 1);
    shipper.wait_shipped(4);
    shipper.state.lock().acknowledge_at_once = true;
    commits.extend(commit_async(&runtime, &log, 1));
    let shipped = shipper.wait_shipped(5);
    thread::sleep(Duration::from_millis(50));
    assert_eq!(log.durable_scn(), before, "published past write 3, which is not acknowledged");
    shipper.release(3, Verdict::Ack);
    wait_for("everything durable", || log.durable_scn() == shipped[4]);
    for (scn, task) in commits {
        runtime.block_on(task).unwrap().unwrap_or_else(|error| panic!("commit {scn}: {error}"));
    }
    let waited_on = shipper.state.lock().waited_on.clone();
    assert_eq!(waited_on.get(&3).map(String::as_str), Some("redo-ackwait"), "{waited_on:?}");
    assert_eq!(waited_on.get(&4).map(String::as_str), Some("redo-ackwait"), "{waited_on:?}");
}

/// Acknowledgements that come back in reverse order publish nothing until the first one
/// comes, and then everything, in order.
#[test]
fn acknowledgements_out_of_order_publish_in_write_order() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "acknowledgements out of order");
    let disk = CrashDisk::new();
    let (log, shipper) = log_with_scripted_shipper(&disk);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let before = log.durable_scn();
    // One commit at a time, each led by its own task: every one is its own write in flight.
    let mut commits = Vec::new();
    for n in 0..5 {
        commits.extend(commit_async(&runtime, &log, 1));
        shipper.wait_shipped(n + 1);
    }
    let shipped = shipper.shipped();
    assert_eq!(shipped.len(), 5, "each commit was sent without waiting for the one before");
    for index in (1..5).rev() {
        shipper.release(index, Verdict::Ack);
        thread::sleep(Duration::from_millis(20));
        assert_eq!(log.durable_scn(), before, "published past write 0, which is not acknowledged");
    }
    shipper.release(0, Verdict::Ack);
    wait_for("everything durable", || log.durable_scn() == *shipped.last().unwrap());
    for (scn, task) in commits {
        runtime.block_on(task).unwrap().unwrap_or_else(|error| panic!("commit {scn}: {error}"));
    }
}

/// A wait that fails in the middle: the writes before it are durable, it and everything after
/// it never are (even when acknowledged), their commits get the error, and no redo is taken
/// any more.
#[test]
fn a_failed_acknowledgement_in_the_middle_publishes_nothing_after_it() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "a failed acknowledgement");
    let disk = CrashDisk::new();
    let (log, shipper) = log_with_scripted_shipper(&disk);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut commits = Vec::new();
    for n in 0..4 {
        commits.extend(commit_async(&runtime, &log, 1));
        shipper.wait_shipped(n + 1);
    }
    let shipped = shipper.shipped();
    shipper.release(3, Verdict::Ack);
    shipper.release(2, Verdict::Ack);
    shipper.release(0, Verdict::Ack);
    wait_for("write 0 durable", || log.durable_scn() == shipped[0]);
    shipper.release(1, Verdict::Fail);
    wait_for("the writer refusing redo", || log.append(b"after").is_err());
    assert_eq!(log.durable_scn(), shipped[0], "published past the failed write");
    let outcomes: Vec<bool> =
        commits.into_iter().map(|(_, task)| runtime.block_on(task).unwrap().is_ok()).collect();
    assert_eq!(outcomes, [true, false, false, false]);
}

/// A wait that panics (a bug in a shipper) fails like one that returns an error: the writes
/// before it stay durable, its commit and the ones after it get an error rather than waiting
/// for ever, no redo is taken any more, and shutting down does not hang.
#[test]
fn a_wait_that_panics_fails_its_commits_instead_of_hanging_them() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "a panicking wait");
    let disk = CrashDisk::new();
    let (log, shipper) = log_with_scripted_shipper(&disk);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let mut commits = Vec::new();
    for n in 0..3 {
        commits.extend(commit_async(&runtime, &log, 1));
        shipper.wait_shipped(n + 1);
    }
    let shipped = shipper.shipped();
    shipper.release(0, Verdict::Ack);
    wait_for("write 0 durable", || log.durable_scn() == shipped[0]);
    shipper.release(2, Verdict::Ack);
    shipper.release(1, Verdict::Panic);
    wait_for("the writer refusing redo", || log.append(b"after").is_err());
    assert_eq!(log.durable_scn(), shipped[0], "published past the write whose wait panicked");
    let outcomes: Vec<bool> =
        commits.into_iter().map(|(_, task)| runtime.block_on(task).unwrap().is_ok()).collect();
    assert_eq!(outcomes, [true, false, false]);
    drop(log);
}

/// Many committers at once: never more waits in flight than the bound, every commit
/// acknowledged only once durable, and everything read back in SCN order, across log
/// switches in the middle of the writes in flight.
#[test]
fn many_committers_stay_bounded_and_cross_log_switches_in_order() {
    let _watchdog = Watchdog::new(Duration::from_secs(90), "many committers");
    let disk = CrashDisk::new();
    let (log, shipper) = log_with_scripted_shipper(&disk);
    let seq_before = log.written_addr().seq;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    // The test's "standby": acknowledges every write after a short delay, in a random order
    // among those waiting.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let acker = {
        let shipper = shipper.clone();
        let stop = stop.clone();
        thread::spawn(move || {
            let mut next = 0usize;
            let mut seed = 7u64;
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let shipped = shipper.shipped().len();
                if next < shipped {
                    // Release a random suffix first, then the rest.
                    seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                    let cut = next + (seed as usize % (shipped - next));
                    for index in (cut..shipped).rev() {
                        shipper.release(index, Verdict::Ack);
                    }
                    thread::sleep(Duration::from_micros(300));
                    for index in next..cut {
                        shipper.release(index, Verdict::Ack);
                    }
                    next = shipped;
                }
                thread::sleep(Duration::from_micros(200));
            }
        })
    };
    let log_for_tasks = log.clone();
    let acknowledged = runtime.block_on(async move {
        let mut tasks = Vec::new();
        for task in 0..100u64 {
            let log = log_for_tasks.clone();
            tasks.push(tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for n in 0..16u64 {
                    let scn = log.append(&payload_for(task * 1000 + n, 300)).unwrap();
                    if let Some(waiter) = log.commit_waiter(scn, IMMEDIATE_WAIT) {
                        waiter.await.unwrap();
                    }
                    // Acknowledged: it must be durable, and so everything before it.
                    assert!(log.durable_scn() >= scn, "SCN {scn} acknowledged before durable");
                    acknowledged.push(scn);
                }
                acknowledged
            }));
        }
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await.unwrap());
        }
        all
    });
    stop.store(true, std::sync::atomic::Ordering::Release);
    acker.join().unwrap();
    assert_eq!(acknowledged.len(), 1600);
    let most = shipper.state.lock().most_in_flight;
    assert!(
        most <= log_writer::pipeline::IN_FLIGHT_MAX,
        "{most} writes in flight at once, over the bound"
    );
    assert!(most > 1, "the writes were never pipelined ({most} in flight at most)");
    assert!(log.written_addr().seq > seq_before, "no log switch happened under the load");
    let records = read_all(&log);
    for (index, pair) in records.windows(2).enumerate() {
        assert_eq!(pair[1].scn, pair[0].scn.next(), "a gap after record {index}");
    }
    log.shutdown().unwrap();
}
