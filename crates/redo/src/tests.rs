//! Engine tests: commits, group commit under concurrency, log switches and archiving,
//! readers, member failures, a full archive disk, corruption, and power cuts.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::crashdisk::{CrashDisk, Fault, Tear, Watchdog};

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

#[test]
fn log_switches_archive_and_reuse_groups_and_readers_cross_them() {
    let _watchdog = Watchdog::new(
        Duration::from_secs(120),
        "log_switches_archive_and_reuse_groups_and_readers_cross_them",
    );
    let disk = CrashDisk::new();
    let config = small_config(Path::new("/db"));
    let log = open_on(&disk, &config).unwrap();
    let mut expected = Vec::new();
    for n in 0..400u64 {
        let payload = payload_for(n, 100 + (n as usize * 131) % 5000);
        let scn = log.commit(&payload, IMMEDIATE_WAIT).unwrap();
        expected.push(RedoRecord { scn, payload });
    }
    let switches = log.metrics().snapshot().stat("redo log switches");
    assert!(switches > 10, "only {switches} switches");
    wait_until("archiving catches up", || log.archived_logs().len() as u64 >= switches - 1);
    // Every filled log is in the catalog, in order, and its archive is a valid closed log.
    let catalog = log.archived_logs();
    for (index, entry) in catalog.iter().enumerate() {
        let image = disk.contents(&entry.path).expect("archived file exists");
        assert_eq!(image.len() as u64, entry.size_bytes);
        let scan = format::scan_image(&image).unwrap();
        assert_eq!(scan.header.seq, entry.seq);
        assert_eq!(scan.end.map(|end| end.next_scn), Some(entry.next_scn));
        if index > 0 {
            assert_eq!(catalog[index - 1].next_scn, entry.first_scn, "archived logs chain");
        }
        assert!(entry.path.file_name().unwrap().to_str().unwrap().starts_with("1_"));
    }
    // Reading from SCN 1 crosses archived and online logs; from the middle too.
    assert_eq!(read_all(&log), expected);
    let middle: Vec<RedoRecord> =
        log.read_from_scn(Scn(250)).unwrap().map(|record| record.unwrap()).collect();
    assert_eq!(middle, expected[249..]);
    let by_seq: Vec<RedoRecord> =
        log.read_from_seq(catalog[3].seq).map(|record| record.unwrap()).collect();
    assert_eq!(by_seq.first().unwrap().scn, catalog[3].first_scn);
    assert_eq!(by_seq.last(), expected.last());
    // A reader caught up returns None, then continues when more redo is durable.
    let mut tail = log.read_from_scn(log.next_scn()).unwrap();
    assert!(tail.next_record().unwrap().is_none());
    let scn = log.commit(b"more", IMMEDIATE_WAIT).unwrap();
    assert_eq!(tail.next_record().unwrap().map(|record| record.scn), Some(scn));
    let states: Vec<GroupState> = log.groups().iter().map(|group| group.state).collect();
    assert_eq!(states.iter().filter(|&&state| state == GroupState::Current).count(), 1);
    let snapshot = log.metrics().snapshot();
    assert!(snapshot.wait("log file switch completion").is_some());
    assert!(snapshot.stat("archived logs") >= switches - 1);
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
fn limits_and_manual_switches() {
    let disk = CrashDisk::new();
    let config = small_config(Path::new("/db"));
    let log = open_on(&disk, &config).unwrap();
    let max = log.max_record_len();
    assert!(matches!(
        log.commit(&vec![0; max + 1], IMMEDIATE_WAIT),
        Err(RedoError::RecordTooLarge { .. })
    ));
    log.commit(&vec![1; max], IMMEDIATE_WAIT).unwrap();
    let before = log.durable_addr().seq;
    let after = log.switch_logfile().unwrap();
    assert_eq!(after, before.next());
    wait_until("the switched log is archived", || {
        log.archived_logs().iter().any(|entry| entry.seq == before)
    });
    // A switch of an empty log archives an empty log.
    let empty = log.switch_logfile().unwrap();
    log.switch_logfile().unwrap();
    wait_until("the empty log is archived", || {
        log.archived_logs().iter().any(|entry| entry.seq == empty)
    });
    let entry = log.archived_logs().into_iter().find(|entry| entry.seq == empty).unwrap();
    assert_eq!(entry.first_scn, entry.next_scn);
    assert_eq!(read_all(&log).len(), 1);
    assert!(matches!(log.advance_checkpoint(Scn(1_000)), Err(RedoError::Config { .. })));
    log.shutdown().unwrap();
}

#[test]
fn archive_lag_target_switches_an_idle_log() {
    let disk = CrashDisk::new();
    let config =
        RedoConfig { archive_lag_target: Duration::from_secs(1), ..small_config(Path::new("/db")) };
    let log = open_on(&disk, &config).unwrap();
    log.commit(b"one small commit, then silence", IMMEDIATE_WAIT).unwrap();
    let seq = log.durable_addr().seq;
    wait_until("archive_lag_target forces a switch and the log is archived", || {
        log.archived_logs().iter().any(|entry| entry.seq == seq)
    });
    log.shutdown().unwrap();
}

#[test]
fn a_failing_member_is_taken_out_and_the_group_goes_on() {
    let _watchdog = Watchdog::new(
        Duration::from_secs(120),
        "a_failing_member_is_taken_out_and_the_group_goes_on",
    );
    let disk = CrashDisk::new();
    let config = RedoConfig { members: 2, ..small_config(Path::new("/db")) };
    let log = open_on(&disk, &config).unwrap();
    log.commit(b"both members", IMMEDIATE_WAIT).unwrap();
    let current =
        log.groups().into_iter().find(|group| group.state == GroupState::Current).unwrap();
    let member_b = current.members[1].path.clone();
    disk.set_fault(&member_b, Some(Fault::SyncError));
    for n in 0..20u64 {
        log.commit(&payload_for(n, 1000), IMMEDIATE_WAIT).unwrap();
    }
    let group = log.groups().into_iter().find(|group| group.members[1].path == member_b).unwrap();
    assert!(matches!(group.members[1].state, MemberState::Failed(_)), "{:?}", group.members[1]);
    assert_eq!(group.members[0].state, MemberState::Valid);
    // If every member fails, the writer refuses further redo with a clear error.
    let member_a = group.members[0].path.clone();
    disk.set_fault(&member_a, Some(Fault::WriteError));
    // (The next write to that group fails: now, or when the group is reused.)
    let mut committed = 21;
    let error = (0..1000)
        .find_map(|_| match log.commit(&[0; 2000], IMMEDIATE_WAIT) {
            Ok(_) => {
                committed += 1;
                None
            }
            Err(error) => Some(error),
        })
        .expect("a write to a group with no good member fails");
    assert!(error.to_string().contains("injected I/O error"), "{error}");
    assert!(matches!(log.commit(b"y", IMMEDIATE_WAIT), Err(RedoError::WriterFailed(_))));
    assert!(log.status().writer_failure.is_some());
    log.shutdown().unwrap();
    // After a restart (the fault cleared), the stale member comes back at its group's reuse.
    disk.set_fault(&member_a, None);
    disk.set_fault(&member_b, None);
    let log = open_on(&disk, &config).unwrap();
    let records = read_all(&log);
    assert_eq!(records.len(), committed);
    for n in 0..40u64 {
        log.commit(&payload_for(n, 3000), IMMEDIATE_WAIT).unwrap();
    }
    assert!(
        log.groups()
            .iter()
            .all(|group| group.members.iter().all(|member| member.state == MemberState::Valid))
    );
    log.shutdown().unwrap();
}

#[test]
fn a_full_archive_disk_refuses_new_redo_and_resumes_when_space_returns() {
    let _watchdog = Watchdog::new(
        Duration::from_secs(120),
        "a_full_archive_disk_refuses_new_redo_and_resumes_when_space_returns",
    );
    let disk = CrashDisk::new();
    let config = small_config(Path::new("/db"));
    let log = open_on(&disk, &config).unwrap();
    log.commit(b"before", IMMEDIATE_WAIT).unwrap();
    // The log files are preallocated: only archiving needs space.
    disk.set_capacity(Some(disk.used_bytes() + 20_000));
    // A session commits until archiving fails: from then on new redo is refused with a clear
    // error, while the current log still has room for what was already accepted. (A commit
    // already waiting for a log switch that needs the unarchived group is told it is not
    // durable yet; its redo is written once space returns.)
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let committer = {
        let log = log.clone();
        let stop = stop.clone();
        thread::spawn(move || {
            let mut committed = 0u64;
            while !stop.load(Ordering::Acquire) {
                match log.commit(&payload_for(committed, 4000), IMMEDIATE_WAIT) {
                    Ok(_) => committed += 1,
                    Err(error) => return (committed, Some(error)),
                }
            }
            (committed, None)
        })
    };
    wait_until("the archiver reports the full disk", || log.archiver_stuck().is_some());
    let refused = log.append(b"new redo").unwrap_err();
    assert!(matches!(refused, RedoError::ArchiverStuck { .. }), "{refused}");
    assert!(refused.is_disk_full(), "{refused}");
    assert!(refused.to_string().contains("archiving of log sequence"), "{refused}");
    assert!(!log.status().archive_errors.is_empty());
    disk.set_capacity(None);
    wait_until("archiving resumes", || {
        log.archiver_stuck().is_none() && log.status().archive_errors.is_empty()
    });
    stop.store(true, Ordering::Release);
    let (committed, error) = committer.join().unwrap();
    assert!(committed > 0);
    let mut stalled = 0;
    if let Some(error) = error {
        assert!(
            matches!(error, RedoError::ArchiverStuck { .. } | RedoError::CommitStalled { .. }),
            "the only failure is a refusal or a stall: {error}"
        );
        stalled = u64::from(matches!(error, RedoError::CommitStalled { .. }));
    }
    for n in 0..50u64 {
        log.commit(&payload_for(n, 4000), IMMEDIATE_WAIT).unwrap();
    }
    assert_eq!(read_all(&log).len() as u64, 1 + committed + stalled + 50);
    log.shutdown().unwrap();
}

#[test]
fn an_async_commit_that_needs_a_log_switch_does_not_block_its_runtime() {
    let _watchdog = Watchdog::new(
        Duration::from_secs(60),
        "an_async_commit_that_needs_a_log_switch_does_not_block_its_runtime",
    );
    let disk = CrashDisk::new();
    // Two groups, and no checkpoint handler: a switch back into the first group waits until
    // the test advances the checkpoint, as it waits for a checkpoint or archiving that a full
    // disk holds up. The background writer stays idle unless woken: a long interval, and a
    // buffer that the records below never fill to a third.
    let config = RedoConfig {
        groups: 2,
        log_buffer_size: 1 << 20,
        batch_write_interval: Duration::from_secs(10),
        ..small_config(Path::new("/db"))
    };
    let log = Arc::new(RedoLog::open(config, Arc::new(disk.clone()), Metrics::new()).unwrap());
    let mut n = 0;
    while log.durable_addr().seq < LogSeq(2) {
        log.commit(&payload_for(n, 4000), IMMEDIATE_WAIT).unwrap();
        n += 1;
    }
    // More than the rest of the second log holds.
    let mut last = Scn(0);
    for n in 0..20 {
        last = log.append(&payload_for(1000 + n, 4000)).unwrap();
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let polled = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let waiter = log.commit_waiter(last, IMMEDIATE_WAIT).expect("WAIT waits");
        let commit = tokio::spawn({
            let polled = polled.clone();
            async move {
                polled.store(true, Ordering::Release);
                waiter.await
            }
        });
        // The runtime's only thread comes back here only if the commit, which needs the
        // switch, did not block it.
        while !polled.load(Ordering::Acquire) {
            tokio::task::yield_now().await;
        }
        tokio::task::yield_now().await;
        assert!(!commit.is_finished());
        assert_eq!(log.durable_addr().seq, LogSeq(2));
        log.advance_checkpoint(log.durable_scn()).unwrap();
        tokio::time::timeout(Duration::from_secs(20), commit).await.unwrap().unwrap().unwrap();
    });
    assert!(log.durable_scn() >= last);
    assert_eq!(log.durable_addr().seq, LogSeq(3));
    log.shutdown().unwrap();
}

#[test]
fn corruption_in_the_middle_of_a_log_is_reported_not_truncated() {
    let disk = CrashDisk::new();
    let config = RedoConfig {
        log_file_size: 1 << 20,
        log_buffer_size: 64 << 10,
        log_buffer_strands: 1,
        ..small_config(Path::new("/db"))
    };
    let log = open_on(&disk, &config).unwrap();
    for n in 0..100u64 {
        log.commit(&payload_for(n, 8000), IMMEDIATE_WAIT).unwrap();
    }
    log.shutdown().unwrap();
    drop(log);
    let member = config.member_path(0, 0);
    let mut bytes = disk.contents(&member).unwrap();
    // Flip a bit in the fifth unit: far more than one write before the end.
    bytes[4 * 4096 + 100] ^= 1;
    let file = disk.open(&member).unwrap();
    file.write_at(&bytes, 0).unwrap();
    file.sync_data().unwrap();
    let error = open_on(&disk, &config).unwrap_err();
    let text = error.to_string();
    assert!(text.contains("damaged") && text.contains("redo_01_a.log"), "{text}");
}

#[test]
fn logs_of_another_database_or_layout_are_refused() {
    let disk = CrashDisk::new();
    let config = small_config(Path::new("/db"));
    open_on(&disk, &config).unwrap().shutdown().unwrap();
    let other = RedoConfig { groups: 4, ..config.clone() };
    let error = RedoLog::open(other, Arc::new(disk.clone()), Metrics::new()).unwrap_err();
    assert!(error.to_string().contains("groups"), "{error}");
    disk.remove(&config.dir.join("control")).unwrap();
    let error = RedoLog::open(config, Arc::new(disk.clone()), Metrics::new()).unwrap_err();
    assert!(error.to_string().contains("control file"), "{error}");
}

#[test]
fn a_reader_continues_from_the_archive_when_its_group_is_reused() {
    let disk = CrashDisk::new();
    let config = small_config(Path::new("/db"));
    let log = open_on(&disk, &config).unwrap();
    let mut expected = Vec::new();
    for n in 0..20u64 {
        let payload = payload_for(n, 3000);
        expected.push(RedoRecord { scn: log.commit(&payload, IMMEDIATE_WAIT).unwrap(), payload });
    }
    let mut reader = log.read_from_scn(Scn(1)).unwrap();
    let mut got = vec![reader.next_record().unwrap().unwrap()];
    // Reuse every group several times while the reader holds the first log open.
    for n in 20..300u64 {
        let payload = payload_for(n, 3000);
        expected.push(RedoRecord { scn: log.commit(&payload, IMMEDIATE_WAIT).unwrap(), payload });
    }
    while let Some(record) = reader.next_record().unwrap() {
        got.push(record);
    }
    assert_eq!(got, expected);
    log.shutdown().unwrap();
}

/// The power-cut test. A workload commits from several threads while crash images are taken
/// at random writes and syncs: every image keeps what was synced and an arbitrary subset or
/// prefix of what was written after. Each image must open, and must read back every commit
/// acknowledged before the cut, nothing that was never appended, with no gap; and the engine
/// must accept new redo after it.
#[test]
fn power_cuts_lose_no_acknowledged_commit() {
    let _watchdog =
        Watchdog::new(Duration::from_secs(120), "power_cuts_lose_no_acknowledged_commit");
    let base_seed: u64 = std::env::var("REDOGUARD_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(rand::random);
    let rounds = 12;
    let mut images_checked = 0;
    for round in 0..rounds {
        let seed = base_seed.wrapping_add(round);
        let checked = std::panic::catch_unwind(|| power_cut_round(seed)).unwrap_or_else(|panic| {
            eprintln!("power-cut round failed; replay with REDOGUARD_SEED={seed}");
            std::panic::resume_unwind(panic)
        });
        images_checked += checked;
    }
    assert!(images_checked >= 1000, "only {images_checked} crash images checked");
    eprintln!("power cuts: {images_checked} crash images checked (base seed {base_seed})");
}

struct Image {
    acknowledged: Scn,
    disk: CrashDisk,
    tear: Tear,
}

fn power_cut_round(seed: u64) -> usize {
    let mut rng = StdRng::seed_from_u64(seed);
    let disk = CrashDisk::new();
    let members = rng.random_range(1..=2);
    let config = RedoConfig {
        members,
        log_buffer_strands: rng.random_range(1..=3),
        writer: if rng.random_bool(0.25) { WriterMode::Dedicated } else { WriterMode::Leader },
        ..small_config(Path::new("/db"))
    };
    let acknowledged = Arc::new(AtomicU64::new(0));
    let images: Arc<parking_lot::Mutex<Vec<Image>>> = Arc::default();
    let log = open_on(&disk, &config).unwrap();
    {
        let disk_for_hook = disk.clone();
        let acknowledged = acknowledged.clone();
        let images = images.clone();
        let hook_rng = parking_lot::Mutex::new(StdRng::seed_from_u64(seed ^ 0x5eed));
        disk.set_hook(Some(Arc::new(move || {
            let mut rng = hook_rng.lock();
            if !rng.random_bool(0.3) {
                return;
            }
            let tear = [Tear::Nothing, Tear::Sectors, Tear::Sectors, Tear::Prefix, Tear::Prefix]
                [rng.random_range(0..5)];
            // Acknowledged before the cut: read before the image is taken.
            let acknowledged = Scn(acknowledged.load(Ordering::Acquire));
            let disk = disk_for_hook.crash_image(&mut *rng, tear);
            images.lock().push(Image { acknowledged, disk, tear });
        })));
    }
    let appended: Arc<parking_lot::Mutex<BTreeMap<Scn, Vec<u8>>>> = Arc::default();
    let committers: Vec<_> = (0..3u64)
        .map(|committer| {
            let log = log.clone();
            let acknowledged = acknowledged.clone();
            let appended = appended.clone();
            let mut rng = StdRng::seed_from_u64(seed.wrapping_mul(31).wrapping_add(committer));
            thread::spawn(move || {
                for n in 0..60u64 {
                    let len = if rng.random_bool(0.1) {
                        rng.random_range(5_000..20_000)
                    } else {
                        rng.random_range(0..600)
                    };
                    let payload = payload_for(seed ^ (committer << 32) ^ n, len);
                    let options = match rng.random_range(0..10) {
                        0 => CommitOptions {
                            wait: CommitWait::NoWait,
                            logging: CommitLogging::Immediate,
                        },
                        1 => {
                            CommitOptions { wait: CommitWait::Wait, logging: CommitLogging::Batch }
                        }
                        _ => IMMEDIATE_WAIT,
                    };
                    let scn = log.append(&payload).unwrap();
                    appended.lock().insert(scn, payload);
                    log.complete_commit(scn, options).unwrap();
                    if options.wait == CommitWait::Wait {
                        acknowledged.fetch_max(scn.0, Ordering::AcqRel);
                    }
                }
            })
        })
        .collect();
    for committer in committers {
        committer.join().unwrap();
    }
    disk.set_hook(None);
    log.shutdown().unwrap();
    drop(log);
    let appended = appended.lock().clone();
    let images = std::mem::take(&mut *images.lock());
    let count = images.len();
    for (index, image) in images.into_iter().enumerate() {
        check_image(&config, image, &appended)
            .unwrap_or_else(|error| panic!("image {index} of {count}: {error}"));
    }
    count
}

fn check_image(
    config: &RedoConfig,
    image: Image,
    appended: &BTreeMap<Scn, Vec<u8>>,
) -> std::result::Result<(), String> {
    let log = open_on(&image.disk, config)
        .map_err(|error| format!("reopen failed ({:?} tear): {error}", image.tear))?;
    let records = log
        .read_from_scn(Scn(1))
        .map_err(|error| format!("reader: {error}"))?
        .collect::<Result<Vec<_>>>()
        .map_err(|error| format!("reading back ({:?} tear): {error}", image.tear))?;
    for (index, record) in records.iter().enumerate() {
        if record.scn != Scn(index as u64 + 1) {
            return Err(format!("record {index} has SCN {}: a gap or reordering", record.scn));
        }
        if appended.get(&record.scn) != Some(&record.payload) {
            return Err(format!(
                "record at SCN {} was never appended with these bytes",
                record.scn
            ));
        }
    }
    let last = records.last().map_or(Scn(0), |record| record.scn);
    if last < image.acknowledged {
        return Err(format!(
            "acknowledged commits lost ({:?} tear): read up to SCN {last}, acknowledged up to {}",
            image.tear, image.acknowledged
        ));
    }
    // And the database goes on.
    let scn = log
        .commit(b"after the power cut", IMMEDIATE_WAIT)
        .map_err(|error| format!("commit after reopen: {error}"))?;
    if scn != last.next() {
        return Err(format!("next SCN after reopen is {scn}, expected {}", last.next()));
    }
    log.shutdown().map_err(|error| error.to_string())?;
    Ok(())
}

#[test]
fn archived_file_names_sort_by_sequence() {
    let names: Vec<String> = [9u64, 10, 100]
        .iter()
        .map(|&seq| archiver::archive_file_name(RedoThread(1), LogSeq(seq)))
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert_eq!(names[0], "1_0000000009.arc");
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

/// A shipper that hands every write straight to an in-process standby (no network), as a
/// SYNC AFFIRM destination would.
struct Forward {
    standby: Arc<RedoLog>,
}

impl ship::Shipper for Forward {
    fn ship(&self, write: &Arc<ship::LogWrite>) -> Option<Box<dyn ship::ShipWait>> {
        self.standby
            .receive(write.seq, write.offset, write.kind, &write.bytes)
            .expect("the standby takes the primary's write");
        self.standby.sync_received().expect("sync");
        self.standby.note_primary_durable(write.durable_scn);
        None
    }
}

pub(crate) fn standby_config() -> RedoConfig {
    RedoConfig { groups: 4, ..small_config(Path::new("/standby")) }
}

fn wait_archived(log: &RedoLog, seqs: &[LogSeq]) {
    wait_until("the archiver catches up", || {
        let archived: Vec<LogSeq> = log.archived_logs().iter().map(|entry| entry.seq).collect();
        seqs.iter().all(|seq| archived.contains(seq))
    });
}

fn assert_archives_identical(
    primary: &RedoLog,
    primary_disk: &CrashDisk,
    standby: &RedoLog,
    standby_disk: &CrashDisk,
) -> usize {
    let primary_logs = primary.archived_logs();
    let seqs: Vec<LogSeq> = primary_logs.iter().map(|entry| entry.seq).collect();
    wait_archived(standby, &seqs);
    let standby_logs = standby.archived_logs();
    for entry in &primary_logs {
        let copy = standby_logs
            .iter()
            .find(|copy| copy.seq == entry.seq)
            .expect("archived on the standby");
        let ours = primary_disk.contents(&entry.path).unwrap();
        let theirs = standby_disk.contents(&copy.path).unwrap();
        assert!(ours == theirs, "archived log {} differs between primary and standby", entry.seq);
    }
    primary_logs.len()
}

#[test]
fn a_standby_fed_every_write_has_byte_identical_archives() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "byte-identical standby");
    let primary_disk = CrashDisk::new();
    let standby_disk = CrashDisk::new();
    let primary = open_on(&primary_disk, &small_config(Path::new("/db"))).unwrap();
    let standby = Arc::new(
        RedoLog::open_standby(standby_config(), Arc::new(standby_disk.clone()), Metrics::new())
            .unwrap(),
    );
    assert_eq!(standby.identity().database_id, DatabaseId(0), "a new standby has no identity");
    assert!(matches!(standby.append(b"x"), Err(RedoError::Standby)));
    assert!(
        matches!(standby.switch_logfile(), Err(RedoError::Refused(message)) if message.contains("switch logs on the primary")),
        "a standby's logs switch only with its primary's"
    );
    standby.adopt_identity(primary.identity().database_id).unwrap();
    primary.set_shipper(Some(Arc::new(Forward { standby: standby.clone() })));
    let mut expected = Vec::new();
    for n in 0..300u64 {
        let payload = payload_for(n, 50 + (n as usize * 97) % 4000);
        expected
            .push(RedoRecord { scn: primary.commit(&payload, IMMEDIATE_WAIT).unwrap(), payload });
    }
    primary.switch_logfile().unwrap();
    wait_until("the primary archives", || primary.archived_logs().len() >= 5);
    let compared = assert_archives_identical(&primary, &primary_disk, &standby, &standby_disk);
    assert!(compared >= 5, "{compared} logs compared");
    // The standby reads the same records, from its standby logs and archive.
    let records: Vec<RedoRecord> =
        standby.read_from_scn(Scn(1)).unwrap().map(|record| record.unwrap()).collect();
    assert_eq!(records, expected);
    assert_eq!(standby.confirmed_scn(), primary.durable_scn());
    // Another database's primary is refused.
    assert!(matches!(standby.adopt_identity(DatabaseId(42)), Err(RedoError::Refused(_))));
    primary.shutdown().unwrap();
    standby.shutdown().unwrap();
}

#[test]
fn a_late_standby_catches_up_from_online_and_archived_logs() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "late standby");
    let primary_disk = CrashDisk::new();
    let standby_disk = CrashDisk::new();
    let primary = open_on(&primary_disk, &small_config(Path::new("/db"))).unwrap();
    for n in 0..200u64 {
        primary.commit(&payload_for(n, 3000), IMMEDIATE_WAIT).unwrap();
    }
    let standby = Arc::new(
        RedoLog::open_standby(standby_config(), Arc::new(standby_disk.clone()), Metrics::new())
            .unwrap(),
    );
    standby.adopt_identity(primary.identity().database_id).unwrap();
    let position = standby.standby_position();
    assert_eq!(position.complete_through_seq, LogSeq(0));
    assert_eq!(position.next, RedoAddr { seq: LogSeq(1), offset: 0 });
    // The first logs come whole (gap resolution, as archive chunks), the rest as writes.
    let online_oldest = primary.groups().iter().filter_map(|group| group.seq).min().unwrap();
    for seq in 1..online_oldest.0 {
        let extent = primary.log_extent(LogSeq(seq)).expect("archived");
        let total = extent.readable_end;
        let mut offset = 0;
        while offset < total {
            let len = (total - offset).min(5000);
            let bytes = primary.read_log_bytes(LogSeq(seq), offset, len as usize).unwrap();
            let complete =
                standby.receive_archive_chunk(LogSeq(seq), offset, total, &bytes).unwrap();
            offset += len;
            assert_eq!(complete, offset == total);
        }
    }
    assert_eq!(standby.standby_position().complete_through_seq, online_oldest.prev_seq());
    let mut cursor = ship::ShipCursor::new(RedoAddr { seq: online_oldest, offset: 0 });
    while let ship::Shipment::Write { seq, offset, kind, bytes } =
        cursor.next_shipment(&primary, 20_000).unwrap()
    {
        standby.receive(seq, offset, kind, &bytes).unwrap();
    }
    standby.sync_received().unwrap();
    // And from there, live.
    primary.set_shipper(Some(Arc::new(Forward { standby: standby.clone() })));
    for n in 200..260u64 {
        primary.commit(&payload_for(n, 3000), IMMEDIATE_WAIT).unwrap();
    }
    primary.switch_logfile().unwrap();
    wait_until("the primary archives", || {
        primary.archived_logs().iter().any(|entry| entry.seq >= LogSeq(online_oldest.0 + 3))
    });
    assert_archives_identical(&primary, &primary_disk, &standby, &standby_disk);
    let records = standby.read_from_scn(Scn(1)).unwrap().collect::<Result<Vec<_>>>().unwrap().len();
    assert_eq!(records, 260);
    // A restarted standby resumes where it was.
    let before = standby.standby_position();
    standby.shutdown().unwrap();
    drop(standby);
    let standby =
        RedoLog::open_standby(standby_config(), Arc::new(standby_disk.clone()), Metrics::new())
            .unwrap();
    assert_eq!(standby.standby_position(), before);
    standby.shutdown().unwrap();
    primary.shutdown().unwrap();
}

#[test]
fn a_standby_refuses_garbage_and_writes_nothing() {
    let primary_disk = CrashDisk::new();
    let primary = open_on(&primary_disk, &small_config(Path::new("/db"))).unwrap();
    primary.commit(&payload_for(1, 2000), IMMEDIATE_WAIT).unwrap();
    let standby_disk = CrashDisk::new();
    let standby =
        RedoLog::open_standby(standby_config(), Arc::new(standby_disk.clone()), Metrics::new())
            .unwrap();
    // Before adopting the primary's identity, its logs are another database's.
    let header = primary.read_log_bytes(LogSeq(1), 0, 4096).unwrap();
    let refused = standby.receive(LogSeq(1), 0, ship::WriteKind::OpenHeader, &header).unwrap_err();
    assert!(refused.to_string().contains("belongs to database"), "{refused}");
    standby.adopt_identity(primary.identity().database_id).unwrap();
    standby.receive(LogSeq(1), 0, ship::WriteKind::OpenHeader, &header).unwrap();
    let units = primary.read_log_bytes(LogSeq(1), 8192, 4096).unwrap();
    let members = [standby_config().member_path(0, 0)];
    let before = standby_disk.contents(&members[0]).unwrap();
    // A flipped bit, units of another log, units for another place, a gap, a bad header.
    let mut flipped = units.clone();
    flipped[100] ^= 1;
    for (seq, offset, bytes, why) in [
        (1u64, 8192u64, flipped, "checksum"),
        (2, 8192, units.clone(), "has not begun"),
        (1, 12288, units.clone(), "holds that log up to"),
        (1, 8192, vec![0u8; 4096], "no redo unit"),
    ] {
        let error =
            standby.receive(LogSeq(seq), offset, ship::WriteKind::Units, &bytes).unwrap_err();
        assert!(error.to_string().contains(why), "{why}: {error}");
    }
    assert!(
        standby.receive(LogSeq(1), 4096, ship::WriteKind::ClosedHeader, &vec![7u8; 4096]).is_err()
    );
    assert_eq!(
        standby_disk.contents(&members[0]).unwrap(),
        before,
        "nothing refused reached the standby log"
    );
    standby.receive(LogSeq(1), 8192, ship::WriteKind::Units, &units).unwrap();
    standby.shutdown().unwrap();
    primary.shutdown().unwrap();
}

#[test]
fn a_primary_that_lost_its_tail_makes_the_standby_drop_it() {
    let primary_disk = CrashDisk::new();
    let primary = open_on(&primary_disk, &small_config(Path::new("/db"))).unwrap();
    let standby =
        RedoLog::open_standby(standby_config(), Arc::new(CrashDisk::new()), Metrics::new())
            .unwrap();
    standby.adopt_identity(primary.identity().database_id).unwrap();
    for n in 0..3u64 {
        primary.commit(&payload_for(n, 1000), IMMEDIATE_WAIT).unwrap();
    }
    let mut cursor = ship::ShipCursor::new(RedoAddr { seq: LogSeq(1), offset: 0 });
    while let ship::Shipment::Write { seq, offset, kind, bytes } =
        cursor.next_shipment(&primary, 1 << 20).unwrap()
    {
        standby.receive(seq, offset, kind, &bytes).unwrap();
    }
    standby.sync_received().unwrap();
    // The primary "crashed" after the first two writes only: it closes the log there.
    let header =
        match format::decode_header(&primary.read_log_bytes(LogSeq(1), 0, 4096).unwrap(), 0)
            .unwrap()
        {
            format::HeaderBlock::Open(header) => header,
            other => panic!("{other:?}"),
        };
    let end = format::LogEnd { next_scn: Scn(3), next_time_us: 1, end_offset: 8192 + 2 * 4096 };
    let mut closed = vec![0u8; 4096];
    format::encode_header(&mut closed, &format::HeaderBlock::Closed(header, end));
    let received =
        standby.receive(LogSeq(1), 4096, ship::WriteKind::ClosedHeader, &closed).unwrap();
    assert_eq!(received.closed, Some(end));
    assert_eq!(standby.take_divergence(), Some(Scn(3)));
    let records: Vec<Scn> =
        standby.read_from_scn(Scn(1)).unwrap().map(|record| record.unwrap().scn).collect();
    assert_eq!(records, vec![Scn(1), Scn(2)], "nothing past the primary's end is read");
    standby.shutdown().unwrap();
    primary.shutdown().unwrap();
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
