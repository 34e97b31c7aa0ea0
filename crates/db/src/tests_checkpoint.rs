//! When checkpoints run, and how hard: paced checkpoints (`checkpoint_completion_target`),
//! spread over time when nobody waits, hurried as soon as somebody does, and still one durable
//! transaction; a checkpoint started by every log switch, before the log writer needs the group;
//! the checkpointer's lower CPU priority (`checkpoint_nice`) until somebody needs its
//! checkpoint; and its pages handed to the device as it goes, unless somebody waits for it.

use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use redo::crashdisk::Watchdog;

use super::*;
use crate::tests::WAIT;

fn open_paced(root: &Path, metrics: Arc<Metrics>) -> Database {
    let db = DbConfig {
        // Only what the test asks for, or the dirty threshold, starts a checkpoint.
        checkpoint_interval: Duration::from_secs(60),
        checkpoint_dirty_bytes: 1 << 20,
        dirty_bytes_max: 64 << 20,
        checkpoint_completion_target: 0.9,
        ..DbConfig::default()
    }
    .resolve(root);
    let redo =
        RedoConfig { log_file_size: 64 << 20, groups: 3, ..RedoConfig::default() }.resolve(root);
    Database::open(db, redo, Arc::new(redo::OsStorage::default()), metrics).unwrap()
}

/// Writes `count` keys of 100 bytes named `prefix:N`, 100 to a transaction.
fn write_keys(db: &Database, prefix: &str, count: usize) {
    let value = Bytes::from(vec![b'v'; 100]);
    for chunk in 0..count / 100 {
        let ops: Vec<Op> = (0..100)
            .map(|i| {
                Op::set(
                    Bytes::from(format!("{prefix}:{}", chunk * 100 + i)),
                    value.clone(),
                    keyspace::SetCondition::Always,
                )
            })
            .collect();
        db.transact(&ops, WAIT).unwrap();
    }
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_paced_checkpoint_hurries_when_somebody_waits_for_it_and_keeps_every_write() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "paced checkpoint hurries");
    let dir = tempfile::tempdir().unwrap();
    let metrics = Metrics::new();
    let db = open_paced(dir.path(), metrics.clone());
    let completed = || metrics.snapshot().stat("checkpoints completed");
    // Under the dirty threshold (1 MiB): only the test's asks start the checkpointer's.
    // The first one has no cadence to spread over: it runs at once.
    write_keys(&db, "first", 4_000);
    db.inner.request_checkpoint();
    wait_until("the first checkpoint", || completed() >= 1);
    // The second one spreads its rows over 0.9 × the time since the first began (≥ 3 s)...
    thread::sleep(Duration::from_secs(3));
    write_keys(&db, "second", 4_000);
    db.inner.request_checkpoint();
    wait_until("the second checkpoint to be running", || db.inner.checkpoint_running.is_locked());
    let running_since = Instant::now();
    // ... unless somebody waits for it: a checkpoint asked for now runs at once after it.
    let scn = db.checkpoint().unwrap();
    let took = running_since.elapsed();
    assert_eq!(metrics.snapshot().stat("checkpoints hurried"), 1);
    assert!(
        took < Duration::from_millis(2_500),
        "a checkpoint somebody waited for took {took:?}: the paced one did not hurry"
    );
    assert!(scn >= db.inner.checkpoint.lock().last_scn);
    // Nothing lost on the way: reopened, every key reads back.
    db.shutdown().unwrap();
    drop(db);
    let db = open_paced(dir.path(), Metrics::new());
    for (prefix, count) in [("first", 4_000), ("second", 4_000)] {
        for i in [0, count / 2, count - 1] {
            let key = Bytes::from(format!("{prefix}:{i}"));
            assert_eq!(db.get(&key).unwrap().map(|v| v.len()), Some(100), "{prefix}:{i}");
        }
    }
}

#[test]
fn a_log_switch_starts_a_checkpoint_before_the_log_writer_needs_its_group() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "checkpoint at a log switch");
    let dir = tempfile::tempdir().unwrap();
    let metrics = Metrics::new();
    let db = open_paced(dir.path(), metrics.clone());
    let completed = || metrics.snapshot().stat("checkpoints completed");
    write_keys(&db, "a", 1_000);
    // A first checkpoint the checkpointer ran itself (the dirty threshold is far).
    db.inner.request_checkpoint();
    wait_until("the first checkpoint", || completed() >= 1);
    write_keys(&db, "b", 1_000);
    let before = completed();
    db.inner.redo.switch_logfile().unwrap();
    // Nothing asked for it (under the dirty threshold, before the interval): the switch did.
    wait_until("a checkpoint after the log switch", || completed() > before);
}

/// The first log switch after the database opens starts a checkpoint as every later one
/// does, before the log writer needs the group: fresh, and again after a reopen.
#[test]
fn the_first_log_switch_after_an_open_starts_a_checkpoint() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "first checkpoint at a log switch");
    let dir = tempfile::tempdir().unwrap();
    for round in 0..2 {
        let metrics = Metrics::new();
        let db = open_paced(dir.path(), metrics.clone());
        let completed = || metrics.snapshot().stat("checkpoints completed");
        write_keys(&db, &format!("round{round}:a"), 1_000);
        thread::sleep(Duration::from_millis(300));
        let before = completed();
        assert_eq!(before, 0, "nothing checkpoints before a log switch");
        write_keys(&db, &format!("round{round}:b"), 1_000);
        db.inner.redo.switch_logfile().unwrap();
        // Nothing asked for it (under the dirty threshold, before the interval): the switch did.
        wait_until("a checkpoint after the first log switch", || completed() > before);
        db.shutdown().unwrap();
    }
}

/// The checkpointer's thread (`checkpoint_nice`): below the sessions for a checkpoint nobody
/// waits for, its own priority again for one the log writer needs; and on Linux its nice value
/// says so.
#[test]
fn the_checkpointer_yields_the_cpu_to_the_sessions_until_somebody_needs_its_checkpoint() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "checkpointer priority");
    let dir = tempfile::tempdir().unwrap();
    let metrics = Metrics::new();
    let db = DbConfig {
        checkpoint_interval: Duration::from_secs(60),
        checkpoint_nice: 7,
        ..DbConfig::default()
    }
    .resolve(dir.path());
    let redo = RedoConfig::default().resolve(dir.path());
    let db =
        Database::open(db, redo, Arc::new(redo::OsStorage::default()), metrics.clone()).unwrap();
    let completed = || metrics.snapshot().stat("checkpoints completed");
    assert!(!db.inner.checkpoint.lock().lowered, "nothing lowered before a checkpoint");
    write_keys(&db, "routine", 1_000);
    db.inner.request_checkpoint();
    wait_until("a routine checkpoint", || completed() >= 1);
    // Lowered if the OS lets a thread lower its own priority (Linux: always).
    #[cfg(target_os = "linux")]
    assert!(db.inner.checkpoint.lock().lowered, "a routine checkpoint runs below the sessions");
    write_keys(&db, "needed", 1_000);
    // What the log writer asks for at a log switch that needs a group back.
    db.inner.request_urgent_checkpoint();
    wait_until("the checkpoint the log writer needs", || completed() >= 2);
    // Taking the priority back needs root or CAP_SYS_NICE (CI runs as root).
    // SAFETY: geteuid has no preconditions.
    if cfg!(target_os = "linux") && unsafe { libc::geteuid() } == 0 {
        assert!(
            !db.inner.checkpoint.lock().lowered,
            "a checkpoint somebody waits for runs at the checkpointer's own priority"
        );
    }
    db.shutdown().unwrap();
}

/// A checkpoint nobody waits for hands its pages to the device as it writes them
/// (`redo::storage::Writeback`, `[db] checkpoint_flush_after`); one somebody waits for writes
/// them all at its commit, and so does every one with `checkpoint_flush_after = 0`.
#[test]
fn only_a_checkpoint_nobody_waits_for_hands_its_pages_to_the_device_as_it_goes() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "checkpoint writeback");
    let dir = tempfile::tempdir().unwrap();
    let metrics = Metrics::new();
    let started = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counted = started.clone();
    let count: Arc<dyn Fn() + Send + Sync> =
        Arc::new(move || _ = counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let storage = crate::tests::WrappedDataFile {
        inner: Arc::new(redo::OsStorage::default()),
        wrap: Box::new(move |file| {
            Box::new(crate::tests::HookedFile {
                file,
                before_read: Arc::new(|| {}),
                on_writeback: count.clone(),
            })
        }),
    };
    let db = DbConfig { checkpoint_interval: Duration::from_secs(60), ..DbConfig::default() }
        .resolve(dir.path());
    let redo = RedoConfig::default().resolve(dir.path());
    let db = Database::open(db, redo, Arc::new(storage), metrics.clone()).unwrap();
    let completed = || metrics.snapshot().stat("checkpoints completed");
    let started_now = || started.load(std::sync::atomic::Ordering::Relaxed);
    // Leaves of about 10 MiB, more than twice redo::storage::WRITEBACK_AFTER.
    write_keys(&db, "waited", 60_000);
    let before = completed();
    db.checkpoint().unwrap();
    assert!(completed() > before);
    assert_eq!(started_now(), 0, "a checkpoint somebody waited for started a writeback");
    // One the checkpointer runs, but that somebody waits for (a log switch needing its group).
    write_keys(&db, "urgent", 60_000);
    let before = completed();
    db.inner.request_urgent_checkpoint();
    wait_until("the urgent checkpoint", || completed() > before);
    assert_eq!(started_now(), 0, "a checkpoint the log writer waited for started a writeback");
    write_keys(&db, "routine", 60_000);
    let before = completed();
    db.inner.request_checkpoint();
    wait_until("the checkpointer's own checkpoint", || completed() > before);
    assert!(started_now() >= 1, "the checkpointer's own checkpoint started no writeback");
    // `checkpoint_flush_after = 0`: never.
    db.inner.store.set_flush_after(0);
    let started_before = started_now();
    write_keys(&db, "unflushed", 60_000);
    let before = completed();
    db.inner.request_checkpoint();
    wait_until("the checkpointer's next checkpoint", || completed() > before);
    assert_eq!(started_now(), started_before, "a writeback started with checkpoint_flush_after 0");
    db.shutdown().unwrap();
}
