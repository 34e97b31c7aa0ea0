//! Log switches and archiving: groups archived and reused, readers across archived and online
//! logs, manual and `archive_lag_target` switches, a failing member, a full archive disk, and
//! an async commit that waits for a switch.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use crate::crashdisk::{CrashDisk, Fault, Watchdog};
use crate::tests::{IMMEDIATE_WAIT, open_on, payload_for, read_all, small_config, wait_until};
use crate::*;

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
    // Archiving is done, but the stall ends only when the log switch that waited for it goes
    // through: until then a commit is told it is not durable yet (and its redo, accepted, is
    // written with the switch). So a session retries until its first commit succeeds; after
    // that, none stalls again.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut late_stalls = 0u64;
    for n in 0..50u64 {
        loop {
            match log.commit(&payload_for(n, 4000), IMMEDIATE_WAIT) {
                Ok(_) => break,
                Err(RedoError::CommitStalled { .. })
                    if n == 0 && std::time::Instant::now() < deadline =>
                {
                    late_stalls += 1;
                    thread::sleep(Duration::from_millis(10));
                }
                Err(error) => panic!("commit {n} after archiving resumed: {error}"),
            }
        }
    }
    assert_eq!(read_all(&log).len() as u64, 1 + committed + stalled + late_stalls + 50);
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
