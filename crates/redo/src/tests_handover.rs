//! The hand-over writer (`log_writer::handover`): a task leader with other committers waiting
//! hands its write to the `redo-lgwr-task` thread, and the runtime's one worker goes on running
//! tasks while that write and its sync are on the disk. Under power cuts at random moments,
//! every commit acknowledged before the cut is in the image, and SCNs have no gap.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::crashdisk::{CrashDisk, Tear, Watchdog};
use crate::tests::{IMMEDIATE_WAIT, open_on, payload_for, small_config};
use crate::*;

fn on_handover_thread() -> bool {
    std::thread::current().name() == Some("redo-lgwr-task")
}

#[test]
fn a_single_worker_keeps_running_tasks_while_a_handed_over_write_syncs() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the hand-over writer test");
    let seed: u64 = rand::rng().random();
    println!("seed {seed}");
    let root = tempfile::tempdir().unwrap();
    let config = RedoConfig { log_file_size: 256 << 10, ..small_config(root.path()) };
    let disk = CrashDisk::new();
    let log = open_on(&disk, &config).unwrap();
    // Every I/O of the hand-over writer is slow (a disk that takes 2 ms a write or sync), and
    // says so while it lasts; now and then a power cut is imaged, with what was acknowledged.
    let handed_io = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    let images: Arc<parking_lot::Mutex<Vec<(Scn, CrashDisk)>>> = Arc::default();
    {
        let (disk_for_hook, handed_io) = (disk.clone(), handed_io.clone());
        let (acknowledged, images) = (acknowledged.clone(), images.clone());
        let rng = parking_lot::Mutex::new(StdRng::seed_from_u64(seed));
        disk.set_hook(Some(Arc::new(move || {
            let mut rng = rng.lock();
            if images.lock().len() < 12 && rng.random_range(0..40) == 0 {
                let tear = [Tear::Nothing, Tear::Sectors, Tear::Prefix][rng.random_range(0..3)];
                let before = Scn(acknowledged.load(Ordering::Acquire));
                let image = disk_for_hook.crash_image(&mut *rng, tear);
                images.lock().push((before, image));
            }
            drop(rng);
            if on_handover_thread() {
                handed_io.store(true, Ordering::Release);
                std::thread::sleep(Duration::from_millis(2));
                handed_io.store(false, Ordering::Release);
            }
        })));
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (tasks, per_task) = (8u64, 40u64);
    let ticks_during_handed_io = Arc::new(AtomicU64::new(0));
    let committed: Vec<(Scn, Vec<u8>)> = runtime.block_on(async {
        let done = Arc::new(AtomicBool::new(false));
        let ticker = {
            let (done, handed_io, ticks) =
                (done.clone(), handed_io.clone(), ticks_during_handed_io.clone());
            tokio::spawn(async move {
                while !done.load(Ordering::Acquire) {
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    if handed_io.load(Ordering::Acquire) {
                        ticks.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        let committers: Vec<_> = (0..tasks)
            .map(|task| {
                let (log, acknowledged) = (log.clone(), acknowledged.clone());
                tokio::spawn(async move {
                    let mut mine = Vec::new();
                    for n in 0..per_task {
                        let payload = payload_for(task << 32 | n, 200 + (n as usize * 37) % 3000);
                        let scn = log.append(&payload).unwrap();
                        log.commit_waiter(scn, IMMEDIATE_WAIT).expect("WAIT waits").await.unwrap();
                        assert!(log.durable_scn() >= scn);
                        acknowledged.fetch_max(log.durable_scn().0, Ordering::AcqRel);
                        mine.push((scn, payload));
                    }
                    mine
                })
            })
            .collect();
        let mut all = Vec::new();
        for committer in committers {
            all.extend(committer.await.unwrap());
        }
        done.store(true, Ordering::Release);
        ticker.await.unwrap();
        all
    });
    disk.set_hook(None);
    let handed_over = log.metrics().stat("redo writes handed over").get();
    let switches = log.metrics().stat("redo log switches").get();
    let records = crate::tests::read_all(&log);
    log.shutdown().unwrap();
    assert_eq!(committed.len() as u64, tasks * per_task);
    for (scn, payload) in &committed {
        assert_eq!(&records[(scn.0 - 1) as usize].payload, payload, "SCN {scn}");
    }
    assert!(handed_over > 0, "no write was handed over");
    assert!(switches >= 3, "only {switches} log switches");
    // The worker ran the ticker while the hand-over writer was in the middle of a write.
    assert!(
        ticks_during_handed_io.load(Ordering::Relaxed) > 0,
        "the worker did nothing while {handed_over} handed-over writes were on the disk"
    );
    let images = std::mem::take(&mut *images.lock());
    assert!(!images.is_empty());
    for (index, (before, image)) in images.iter().enumerate() {
        let reopened = open_on(image, &config)
            .unwrap_or_else(|error| panic!("seed {seed}, image {index}: reopen: {error}"));
        let records = crate::tests::read_all(&reopened);
        for (position, record) in records.iter().enumerate() {
            assert_eq!(record.scn, Scn(position as u64 + 1), "seed {seed}, image {index}: a gap");
        }
        assert!(
            records.len() as u64 >= before.0,
            "seed {seed}, image {index}: SCN {before} was acknowledged before the cut, the image ends at {}",
            records.len()
        );
        for record in &records {
            let known = committed.iter().find(|(scn, _)| *scn == record.scn);
            assert_eq!(
                known.map(|(_, payload)| payload),
                Some(&record.payload),
                "seed {seed}, image {index}: SCN {} reads back other bytes",
                record.scn
            );
        }
        reopened.shutdown().unwrap();
    }
}

/// A task leader finds others waiting, and before it hands over, the engine shuts down and the
/// idle hand-over writer ends. The task must not hand the leadership to a thread that is gone
/// (nobody would ever end it: the other commit would wait for ever, and so would the shutdown
/// behind the background writer queued for the leadership): it leads itself, and both commits
/// get the shutdown's answer. Forced with the engine's failpoints, as a reviewer found it.
#[test]
fn a_hand_over_after_the_writer_ended_is_not_made() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "the hand-over shutdown race test");
    let disk = CrashDisk::new();
    let root = tempfile::tempdir().unwrap();
    let log = open_on(&disk, &small_config(root.path())).unwrap();
    log.commit(b"first", IMMEDIATE_WAIT).unwrap();
    let (flushed_tx, flushed_rx) = std::sync::mpsc::channel::<()>();
    let (deciding_tx, deciding_rx) = std::sync::mpsc::channel::<()>();
    let (flushed_tx, deciding_tx) =
        (parking_lot::Mutex::new(flushed_tx), parking_lot::Mutex::new(deciding_tx));
    let deciding_rx = parking_lot::Mutex::new(deciding_rx);
    let shutting_down = Arc::new(AtomicBool::new(false));
    {
        let shutting_down = shutting_down.clone();
        *log.shared.failpoint.lock() = Some(Arc::new(move |point| match point {
            "shutdown: flushed" => {
                // Let the tasks append, one lead and find the other waiting.
                let _ = flushed_tx.lock().send(());
                let _ = deciding_rx.lock().recv_timeout(Duration::from_secs(5));
                shutting_down.store(true, Ordering::Release);
            }
            "hand-over: others wait" if !shutting_down.load(Ordering::Acquire) => {
                let _ = deciding_tx.lock().send(());
                // Meanwhile the shutdown sets its flag and the idle hand-over writer ends.
                std::thread::sleep(Duration::from_millis(500));
            }
            _ => {}
        }));
    }
    let stopping = log.clone();
    let (stopped_tx, stopped_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = stopped_tx.send(stopping.shutdown());
    });
    flushed_rx.recv().unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let outcomes = runtime.block_on(async {
        let tasks: Vec<_> = (0..2u64)
            .map(|n| {
                let log = log.clone();
                tokio::spawn(async move {
                    let scn = log.append(&payload_for(n, 300)).unwrap();
                    let waiter = log.commit_waiter(scn, IMMEDIATE_WAIT).unwrap();
                    tokio::time::timeout(Duration::from_secs(5), waiter).await
                })
            })
            .collect();
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        outcomes
    });
    *log.shared.failpoint.lock() = None;
    let stopped = stopped_rx.recv_timeout(Duration::from_secs(5));
    assert!(
        outcomes.iter().all(|outcome| matches!(outcome, Ok(Err(RedoError::Shutdown)))),
        "each commit gets the shutdown's answer, none waits for ever: {outcomes:?}"
    );
    assert!(stopped.is_ok(), "the shutdown returns");
    assert_eq!(log.metrics().stat("redo writes handed over").get(), 0);
}
