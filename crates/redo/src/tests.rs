//! Engine tests: commits, group commit under concurrency (threads and tasks), commit options,
//! a full log buffer, a panicking leader; and the helpers the other `tests_*` modules share.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::crashdisk::{CrashDisk, Watchdog};

pub(crate) const IMMEDIATE_WAIT: CommitOptions =
    CommitOptions { wait: CommitWait::Wait, logging: CommitLogging::Immediate };

/// A small layout: 64 KiB logs (14 units of 4 KiB) so that switches happen often.
pub(crate) fn small_config(root: &Path) -> RedoConfig {
    RedoConfig {
        log_file_size: 64 << 10,
        groups: 3,
        log_buffer_size: 128 << 10,
        log_buffer_strands: 2,
        batch_write_interval: Duration::from_millis(5),
        archive_retry_interval: Duration::from_millis(20),
        ..RedoConfig::default()
    }
    .resolve(root)
}

pub(crate) fn open_on(disk: &CrashDisk, config: &RedoConfig) -> Result<Arc<RedoLog>> {
    let log = Arc::new(RedoLog::open(config.clone(), Arc::new(disk.clone()), Metrics::new())?);
    install_checkpointer(&log);
    Ok(log)
}

/// Without data files, a checkpoint is immediate: the handler advances it to what is asked.
fn install_checkpointer(log: &Arc<RedoLog>) {
    let weak: Weak<RedoLog> = Arc::downgrade(log);
    log.set_checkpoint_handler(Arc::new(move |scn| {
        if let Some(log) = weak.upgrade() {
            log.advance_checkpoint(scn).expect("checkpoint");
        }
    }));
}

pub(crate) fn payload_for(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random()).collect()
}

pub(crate) fn read_all(log: &RedoLog) -> Vec<RedoRecord> {
    log.read_from_scn(Scn(1)).expect("reader").collect::<Result<Vec<_>>>().expect("records")
}

pub(crate) fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn commits_survive_a_clean_restart_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let config = RedoConfig { log_file_size: 1 << 20, ..RedoConfig::default() }.resolve(dir.path());
    let storage: Arc<dyn Storage> = Arc::new(OsStorage::new(IoMode::Fdatasync));
    let mut expected = Vec::new();
    {
        let log = RedoLog::open(config.clone(), storage.clone(), Metrics::new()).unwrap();
        for n in 0..200u64 {
            let payload = payload_for(n, (n as usize * 37) % 3000);
            let scn = log.commit(&payload, IMMEDIATE_WAIT).unwrap();
            assert_eq!(scn, Scn(n + 1));
            assert!(log.durable_scn() >= scn);
            expected.push(RedoRecord { scn, payload });
        }
        let snapshot = log.metrics().snapshot();
        assert_eq!(snapshot.stat("user commits"), 200);
        assert_eq!(snapshot.stat("redo entries"), 200);
        assert!(snapshot.wait("log file sync").is_some());
        assert!(snapshot.wait("log file parallel write").is_some());
        log.shutdown().unwrap();
    }
    let log = RedoLog::open(config.clone(), storage.clone(), Metrics::new()).unwrap();
    assert_eq!(log.next_scn(), Scn(201));
    assert_eq!(read_all(&log), expected);
    // Redo continues after a restart, in a new log.
    let scn = log.commit(b"after restart", IMMEDIATE_WAIT).unwrap();
    assert_eq!(scn, Scn(201));
    let groups = log.groups();
    assert_eq!(groups.iter().filter(|group| group.state == GroupState::Current).count(), 1);
    assert_eq!(
        groups.iter().find(|group| group.state == GroupState::Current).unwrap().seq,
        Some(LogSeq(2))
    );
    log.shutdown().unwrap();
}

/// Large records take the gathered write (payloads written from the log buffer), small ones
/// the formatted one; both, mixed, waited for and streamed, across log switches and two
/// members, read back whole after a restart.
#[test]
fn large_records_survive_a_restart_on_real_files() {
    let dir = tempfile::tempdir().unwrap();
    let config = RedoConfig {
        log_file_size: 4 << 20,
        groups: 3,
        members: 2,
        log_buffer_size: 8 << 20,
        ..RedoConfig::default()
    }
    .resolve(dir.path());
    let storage: Arc<dyn Storage> = Arc::new(OsStorage::new(IoMode::Fdatasync));
    let mut expected = Vec::new();
    {
        let log = Arc::new(RedoLog::open(config.clone(), storage.clone(), Metrics::new()).unwrap());
        install_checkpointer(&log);
        let sizes = [1 << 20, 0, 70_000, 5, 300_000, 4064, 4048, 1 << 20, 123_457, 9000];
        for n in 0..40u64 {
            let len = sizes[n as usize % sizes.len()];
            let payload = payload_for(n, len);
            let options = if n % 3 == 0 {
                CommitOptions { wait: CommitWait::NoWait, logging: CommitLogging::Immediate }
            } else {
                IMMEDIATE_WAIT
            };
            let scn = log.commit(&payload, options).unwrap();
            expected.push(RedoRecord { scn, payload });
        }
        log.flush().unwrap();
        log.shutdown().unwrap();
    }
    let log = RedoLog::open(config, storage, Metrics::new()).unwrap();
    let records = read_all(&log);
    assert_eq!(records.len(), expected.len());
    assert!(records == expected, "every large record reads back as committed");
    log.shutdown().unwrap();
}

#[test]
fn group_commit_batches_concurrent_committers() {
    let _watchdog =
        Watchdog::new(Duration::from_secs(120), "group_commit_batches_concurrent_committers");
    let dir = tempfile::tempdir().unwrap();
    let config = RedoConfig { log_file_size: 8 << 20, ..RedoConfig::default() }.resolve(dir.path());
    let log =
        Arc::new(RedoLog::open(config, Arc::new(OsStorage::default()), Metrics::new()).unwrap());
    install_checkpointer(&log);
    let committers = 32;
    let per_committer = 100;
    let handles: Vec<_> = (0..committers)
        .map(|committer| {
            let log = log.clone();
            thread::spawn(move || {
                let mut acknowledged = Vec::new();
                for n in 0..per_committer {
                    let payload = format!("committer {committer} commit {n}").into_bytes();
                    let scn = log.commit(&payload, IMMEDIATE_WAIT).unwrap();
                    // Acknowledged means durable.
                    assert!(log.durable_scn() >= scn);
                    acknowledged.push((scn, payload));
                }
                acknowledged
            })
        })
        .collect();
    let mut acknowledged: BTreeMap<Scn, Vec<u8>> = BTreeMap::new();
    for handle in handles {
        acknowledged.extend(handle.join().unwrap());
    }
    assert_eq!(acknowledged.len(), committers * per_committer);
    let records = read_all(&log);
    assert_eq!(records.len(), acknowledged.len());
    for record in &records {
        assert_eq!(acknowledged.get(&record.scn), Some(&record.payload));
    }
    let snapshot = log.metrics().snapshot();
    let writes = snapshot.stat("redo writes");
    assert!(
        writes < (committers * per_committer) as u64 / 2,
        "{writes} writes for {} commits: group commit is not batching",
        committers * per_committer
    );
    log.shutdown().unwrap();
}

#[test]
fn dedicated_writer_and_commit_options() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "dedicated_writer_and_commit_options");
    for writer in [WriterMode::Dedicated, WriterMode::Leader] {
        let disk = CrashDisk::new();
        let config = RedoConfig { writer, ..small_config(Path::new("/db")) };
        let log = open_on(&disk, &config).unwrap();
        let scn = log.commit(b"wait immediate", IMMEDIATE_WAIT).unwrap();
        assert!(log.durable_scn() >= scn);
        let batch_wait = CommitOptions { wait: CommitWait::Wait, logging: CommitLogging::Batch };
        let scn = log.commit(b"wait batch", batch_wait).unwrap();
        assert!(
            log.durable_scn() >= scn,
            "BATCH WAIT returns once durable (written by the background writer)"
        );
        // NOWAIT returns at once; the background writer makes it durable soon.
        for logging in [CommitLogging::Immediate, CommitLogging::Batch] {
            let scn =
                log.commit(b"nowait", CommitOptions { wait: CommitWait::NoWait, logging }).unwrap();
            wait_until("NOWAIT redo becomes durable", || log.durable_scn() >= scn);
        }
        // Concurrent committers in this mode.
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let log = log.clone();
                thread::spawn(move || {
                    for _ in 0..50 {
                        let scn = log.commit(&[7; 300], IMMEDIATE_WAIT).unwrap();
                        assert!(log.durable_scn() >= scn);
                    }
                })
            })
            .collect();
        handles.into_iter().for_each(|handle| handle.join().unwrap());
        assert_eq!(read_all(&log).len(), 4 + 400);
        log.shutdown().unwrap();
    }
}

#[test]
fn an_appender_never_outruns_a_full_buffer() {
    // A 64 KiB buffer and NOWAIT appends of 10 KiB: appenders wait for space ("log buffer
    // space"), and nothing is lost.
    let disk = CrashDisk::new();
    let config = RedoConfig {
        log_buffer_size: 64 << 10,
        log_buffer_strands: 1,
        log_file_size: 1 << 20,
        ..small_config(Path::new("/db"))
    };
    let log = open_on(&disk, &config).unwrap();
    let nowait = CommitOptions { wait: CommitWait::NoWait, logging: CommitLogging::Batch };
    for n in 0..300u64 {
        log.commit(&payload_for(n, 10_000), nowait).unwrap();
    }
    let durable = log.flush().unwrap();
    assert_eq!(durable, Scn(300));
    let records = read_all(&log);
    assert_eq!(records.len(), 300);
    assert!(
        records
            .iter()
            .enumerate()
            .all(|(n, record)| record.payload == payload_for(n as u64, 10_000))
    );
    assert!(log.metrics().snapshot().stat("redo buffer allocation retries") > 0);
    log.shutdown().unwrap();
}

#[test]
fn async_committers_group_commit_and_a_cancelled_wait_loses_nothing() {
    let _watchdog = Watchdog::new(
        Duration::from_secs(120),
        "async_committers_group_commit_and_a_cancelled_wait_loses_nothing",
    );
    let dir = tempfile::tempdir().unwrap();
    let config = RedoConfig { log_file_size: 8 << 20, ..RedoConfig::default() }.resolve(dir.path());
    let log =
        Arc::new(RedoLog::open(config, Arc::new(OsStorage::default()), Metrics::new()).unwrap());
    install_checkpointer(&log);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let tasks = 48;
    let per_task = 40;
    let acknowledged: Vec<Vec<(Scn, Vec<u8>)>> = runtime.block_on(async {
        // Tasks whose waits are cancelled at random moments: they must neither lose the
        // leadership nor leave waiters behind.
        let cancelled: Vec<_> = (0..8u64)
            .map(|task| {
                let log = log.clone();
                tokio::spawn(async move {
                    for n in 0..per_task {
                        let scn = log.append(format!("cancelled {task} {n}").as_bytes()).unwrap();
                        if let Some(waiter) = log.commit_waiter(scn, IMMEDIATE_WAIT) {
                            let _ =
                                tokio::time::timeout(Duration::from_micros(n as u64 * 10), waiter)
                                    .await;
                        }
                    }
                })
            })
            .collect();
        let committers: Vec<_> = (0..tasks)
            .map(|task| {
                let log = log.clone();
                tokio::spawn(async move {
                    let mut acknowledged = Vec::new();
                    for n in 0..per_task {
                        let payload = format!("task {task} commit {n}").into_bytes();
                        let scn = log.append(&payload).unwrap();
                        log.commit_waiter(scn, IMMEDIATE_WAIT).expect("WAIT waits").await.unwrap();
                        assert!(log.durable_scn() >= scn);
                        acknowledged.push((scn, payload));
                    }
                    acknowledged
                })
            })
            .collect();
        for task in cancelled {
            task.await.unwrap();
        }
        let mut all = Vec::new();
        for task in committers {
            all.push(task.await.unwrap());
        }
        all
    });
    let acknowledged: BTreeMap<Scn, Vec<u8>> = acknowledged.into_iter().flatten().collect();
    assert_eq!(acknowledged.len(), tasks * per_task);
    // Nothing is stuck: a plain commit still completes, and every acknowledged record reads back.
    log.commit(b"after", IMMEDIATE_WAIT).unwrap();
    let records = read_all(&log);
    for (scn, payload) in &acknowledged {
        assert_eq!(&records[(scn.0 - 1) as usize].payload, payload);
    }
    let writes = log.metrics().snapshot().stat("redo writes");
    assert!(
        writes < (tasks * per_task) as u64 / 2,
        "{writes} writes: async commits are not grouped"
    );
    log.shutdown().unwrap();
}

pub(crate) fn standby_config() -> RedoConfig {
    RedoConfig { groups: 4, ..small_config(Path::new("/standby")) }
}

/// A shipper with a bug: it panics on the first write it sees.
struct Panicking;

impl ship::Shipper for Panicking {
    fn ship(&self, _write: &Arc<ship::LogWrite>) -> Option<Box<dyn ship::ShipWait>> {
        panic!("a shipper bug");
    }
}

#[test]
fn a_panicking_leader_fails_the_writer_instead_of_hanging_its_waiters() {
    let _watchdog = Watchdog::new(Duration::from_secs(60), "panicking leader");
    let disk = CrashDisk::new();
    let primary = open_on(&disk, &small_config(Path::new("/db"))).unwrap();
    let durable = primary.commit(b"before", IMMEDIATE_WAIT).unwrap();
    primary.set_shipper(Some(Arc::new(Panicking)));
    let committer = {
        let primary = primary.clone();
        std::thread::spawn(move || primary.commit(b"during", IMMEDIATE_WAIT))
    };
    // The committer's thread leads, panics and unwinds; its commit is not acknowledged.
    assert!(committer.join().is_err(), "the leader's panic reaches its own thread");
    // Every later commit gets a clear error instead of waiting for ever.
    assert!(matches!(
        primary.commit(b"after", IMMEDIATE_WAIT),
        Err(RedoError::WriterFailed(message)) if message.contains("panicked")
    ));
    assert!(primary.durable_scn() >= durable);
    assert!(primary.status().writer_failure.is_some_and(|failure| failure.contains("panicked")));
    primary.shutdown().unwrap();
}

/// A late control-file writer of a shut-down engine (a hello or a relay seal its receiver was
/// still serving) changes nothing: a role change rewrites the file while the database is
/// closed, and the engine's cached copy, from before the change, must not go back over it.
#[test]
fn a_shut_down_engine_never_writes_its_control_file_again() {
    let disk = CrashDisk::new();
    let config = small_config(Path::new("/db"));
    let log = open_on(&disk, &config).unwrap();
    let late = log.handle();
    log.shutdown().unwrap();
    RedoLog::rewrite_control(&config, &disk, |control| {
        control.incarnation = Incarnation(7);
        Ok(())
    })
    .unwrap();
    assert!(matches!(late.seal_below(Incarnation(5)), Err(RedoError::Shutdown)));
    let fence = Fence { incarnation: Incarnation(9), by: "elsewhere".into() };
    assert!(matches!(late.fence(fence), Err(RedoError::Shutdown)));
    let on_disk = RedoLog::read_control(&config, &disk).unwrap().expect("a control file");
    assert_eq!(on_disk.incarnation, Incarnation(7), "the role change's write was undone");
    assert_eq!((on_disk.sealed_below, on_disk.fenced), (Incarnation(0), None));
}
