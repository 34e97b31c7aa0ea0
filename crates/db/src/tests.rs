//! Database tests: Redis semantics, scans across layers, restarts, a full disk, and power
//! cuts (including in the middle of a checkpoint) checked against a model.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use redo::crashdisk::{CrashDisk, Fault, Tear, Watchdog};
use redo::{CommitLogging, CommitOptions, CommitWait};

use super::*;

pub(crate) const WAIT: CommitOptions =
    CommitOptions { wait: CommitWait::Wait, logging: CommitLogging::Immediate };

fn b(text: &str) -> Bytes {
    Bytes::copy_from_slice(text.as_bytes())
}

/// A file system that hands every call to `inner`, and the data file (`kv.redb`) through
/// `wrap` when it is opened or created: how a test slows or watches the data file's I/O.
pub(crate) struct WrappedDataFile {
    pub(crate) inner: Arc<dyn redo::storage::Storage>,
    #[allow(clippy::type_complexity)]
    pub(crate) wrap: Box<
        dyn Fn(Box<dyn redo::storage::StorageFile>) -> Box<dyn redo::storage::StorageFile>
            + Send
            + Sync,
    >,
}

/// A file that hands every call to `file`, calling `before_read` before each read and
/// `on_writeback` at each writeback started: what `WrappedDataFile` wraps the data file in.
pub(crate) struct HookedFile {
    pub(crate) file: Box<dyn redo::storage::StorageFile>,
    pub(crate) before_read: Arc<dyn Fn() + Send + Sync>,
    pub(crate) on_writeback: Arc<dyn Fn() + Send + Sync>,
}

impl std::fmt::Debug for HookedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookedFile").field("file", &self.file).finish_non_exhaustive()
    }
}

impl redo::storage::StorageFile for HookedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        (self.before_read)();
        self.file.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.file.write_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
    fn len(&self) -> std::io::Result<u64> {
        self.file.len()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.file.set_len(len)
    }
    fn start_writeback(&self, offset: u64, len: u64) -> std::io::Result<()> {
        (self.on_writeback)();
        self.file.start_writeback(offset, len)
    }
}

impl std::fmt::Debug for WrappedDataFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WrappedDataFile").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl WrappedDataFile {
    fn wrapped(
        &self,
        path: &Path,
        file: Box<dyn redo::storage::StorageFile>,
    ) -> Box<dyn redo::storage::StorageFile> {
        if path.ends_with("kv.redb") { (self.wrap)(file) } else { file }
    }
}

impl redo::storage::Storage for WrappedDataFile {
    fn create_log(
        &self,
        path: &Path,
        len: u64,
    ) -> std::io::Result<Box<dyn redo::storage::StorageFile>> {
        self.inner.create_log(path, len)
    }
    fn open_log(&self, path: &Path) -> std::io::Result<Box<dyn redo::storage::StorageFile>> {
        self.inner.open_log(path)
    }
    fn open(&self, path: &Path) -> std::io::Result<Box<dyn redo::storage::StorageFile>> {
        Ok(self.wrapped(path, self.inner.open(path)?))
    }
    fn create(&self, path: &Path) -> std::io::Result<Box<dyn redo::storage::StorageFile>> {
        Ok(self.wrapped(path, self.inner.create(path)?))
    }
    fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        self.inner.rename(from, to)
    }
    fn remove(&self, path: &Path) -> std::io::Result<()> {
        self.inner.remove(path)
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn create_dir_all(&self, dir: &Path) -> std::io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn list_dir(&self, dir: &Path) -> std::io::Result<Vec<std::path::PathBuf>> {
        self.inner.list_dir(dir)
    }
}

pub(crate) fn configs(root: &Path) -> (DbConfig, RedoConfig) {
    let db = DbConfig {
        checkpoint_interval: Duration::from_millis(200),
        checkpoint_retry_interval: Duration::from_millis(20),
        ..DbConfig::default()
    }
    .resolve(root);
    let redo = RedoConfig {
        log_file_size: 64 << 10,
        log_buffer_size: 256 << 10,
        groups: 3,
        archive_retry_interval: Duration::from_millis(20),
        batch_write_interval: Duration::from_millis(2),
        ..RedoConfig::default()
    }
    .resolve(root);
    (db, redo)
}

pub(crate) fn open(disk: &CrashDisk) -> Result<Database> {
    let (db, redo) = configs(Path::new("/db"));
    Database::open(db, redo, Arc::new(disk.clone()), Metrics::new())
}

pub(crate) fn set(key: &str, value: &str) -> Op {
    Op::set(b(key), b(value), SetCondition::Always)
}

pub(crate) fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn commands_behave_as_in_redis() {
    let disk = CrashDisk::new();
    let db = open(&disk).unwrap();
    let run = |ops: Vec<Op>| db.transact(&ops, WAIT).unwrap().results;
    assert_eq!(run(vec![set("a", "1")]), vec![OpResult::Ok]);
    assert_eq!(run(vec![Op::set(b("a"), b("2"), SetCondition::IfAbsent)]), vec![OpResult::Nil]);
    assert_eq!(run(vec![Op::set(b("b"), b("2"), SetCondition::IfPresent)]), vec![OpResult::Nil]);
    assert_eq!(run(vec![Op::set(b("a"), b("3"), SetCondition::IfPresent)]), vec![OpResult::Ok]);
    assert_eq!(run(vec![Op::IncrBy { key: b("a"), increment: 10 }]), vec![OpResult::Integer(13)]);
    assert_eq!(run(vec![Op::IncrBy { key: b("n"), increment: -1 }]), vec![OpResult::Integer(-1)]);
    assert_eq!(
        run(vec![set("s", "abc"), Op::IncrBy { key: b("s"), increment: 1 }]),
        vec![OpResult::Ok, OpResult::Error(ops::NOT_AN_INTEGER.into())]
    );
    assert_eq!(
        run(vec![set("m", &i64::MAX.to_string()), Op::IncrBy { key: b("m"), increment: 1 }])[1],
        OpResult::Error(ops::OVERFLOW.into())
    );
    assert_eq!(
        run(vec![Op::MSet { pairs: vec![(b("x"), b("1")), (b("y"), b("2"))] }]),
        vec![OpResult::Ok]
    );
    assert_eq!(
        run(vec![Op::MGet { keys: vec![b("x"), b("nope"), b("y")] }]),
        vec![OpResult::Values(vec![Some(b("1")), None, Some(b("2"))])]
    );
    assert_eq!(
        run(vec![Op::Exists { keys: vec![b("x"), b("x"), b("nope")] }]),
        vec![OpResult::Integer(2)]
    );
    assert_eq!(
        run(vec![Op::Del { keys: vec![b("x"), b("nope"), b("y")] }]),
        vec![OpResult::Integer(2)]
    );
    // A transaction sees its own changes, in order; a read-only one writes no redo.
    assert_eq!(
        run(vec![
            set("t", "1"),
            Op::Get { key: b("t") },
            Op::Del { keys: vec![b("t")] },
            Op::Get { key: b("t") }
        ]),
        vec![OpResult::Ok, OpResult::Value(b("1")), OpResult::Integer(1), OpResult::Nil]
    );
    assert_eq!(db.execute(&[Op::Get { key: b("a") }]).unwrap().scn, None);
    assert_eq!(db.dbsize().unwrap(), 4, "a, n, s, m and nothing else");
    // Too large for one redo record: refused, nothing changed.
    let huge = Bytes::from(vec![0u8; db.redo().max_record_len() + 1]);
    assert!(matches!(
        db.execute(&[Op::set(b("huge"), huge, SetCondition::Always)]),
        Err(DbError::TooLarge { .. })
    ));
    assert_eq!(db.get(b"huge").unwrap(), None);
    db.shutdown().unwrap();
}

#[test]
fn data_survives_restarts_with_and_without_a_checkpoint() {
    let disk = CrashDisk::new();
    {
        let db = open(&disk).unwrap();
        db.transact(&[set("checkpointed", "yes")], WAIT).unwrap();
        db.checkpoint().unwrap();
        db.transact(
            &[set("only in redo", "yes"), Op::IncrBy { key: b("counter"), increment: 5 }],
            WAIT,
        )
        .unwrap();
        // No shutdown: the handle is leaked like a killed process's (its threads stop at drop).
        let scn = db.status().redo.durable_scn;
        assert_eq!(scn, Scn(2));
        std::mem::forget(db);
    }
    // A power cut with nothing lost: the disk as synced.
    let image = disk.crash_image(&mut StdRng::seed_from_u64(1), Tear::Nothing);
    let db = open(&image).unwrap();
    assert_eq!(db.get(b"checkpointed").unwrap(), Some(b("yes")));
    assert_eq!(db.get(b"only in redo").unwrap(), Some(b("yes")));
    assert_eq!(db.get(b"counter").unwrap(), Some(b("5")));
    assert_eq!(db.dbsize().unwrap(), 3);
    assert_eq!(db.status().recovered_records, 1);
    db.shutdown().unwrap();
    // After a clean shutdown nothing is left to replay.
    let db = open(&image).unwrap();
    assert_eq!(db.status().recovered_records, 0);
    assert_eq!(db.get(b"counter").unwrap(), Some(b("5")));
    db.shutdown().unwrap();
}

#[test]
fn redo_of_another_database_is_refused() {
    let disk = CrashDisk::new();
    open(&disk).unwrap().shutdown().unwrap();
    // Replace the redo log with another database's.
    let other = CrashDisk::new();
    open(&other).unwrap().shutdown().unwrap();
    let mut rng = StdRng::seed_from_u64(0);
    let mixed = other.crash_image(&mut rng, Tear::Nothing);
    let data = disk.contents(Path::new("/db/data/kv.redb")).unwrap();
    let file = mixed.open(Path::new("/db/data/kv.redb")).unwrap();
    file.set_len(0).unwrap();
    file.write_at(&data, 0).unwrap();
    file.sync_data().unwrap();
    let error = open(&mixed).unwrap_err();
    assert!(error.to_string().contains("belong to database"), "{error}");
}

#[test]
fn a_full_disk_refuses_writes_clearly_and_they_resume_when_space_returns() {
    let _watchdog = Watchdog::new(
        Duration::from_secs(120),
        "a_full_disk_refuses_writes_clearly_and_they_resume_when_space_returns",
    );
    let disk = CrashDisk::new();
    let db = open(&disk).unwrap();
    db.transact(&[set("before", "1")], WAIT).unwrap();
    db.checkpoint().unwrap();
    disk.set_capacity(Some(disk.used_bytes() + 4096));
    // Writes go on (into the redo log, preallocated) until archiving or a checkpoint runs out
    // of space; then new writes are refused with a message that says why.
    let db = Arc::new(db);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let db = db.clone();
        let stop = stop.clone();
        thread::spawn(move || {
            let big = "v".repeat(20_000);
            let mut n = 0;
            while !stop.load(Ordering::Acquire) {
                match db.transact(&[set(&format!("key{n}"), &big)], WAIT) {
                    Ok(_) => n += 1,
                    Err(error) => return Some(error),
                }
                if n % 10 == 9 {
                    let _ = db.checkpoint();
                }
            }
            None
        })
    };
    wait_until("writes are refused", || db.writes_refused().is_some());
    let refused = db.execute(&[set("new", "1")]).unwrap_err();
    assert!(matches!(refused, DbError::WritesRefused { .. }), "{refused}");
    assert!(refused.is_disk_full(), "{refused}");
    // Reads go on.
    assert_eq!(db.get(b"before").unwrap(), Some(b("1")));
    disk.set_capacity(None);
    // (The switch the failure held up goes on a moment after it clears: until then a commit
    // is told it is not durable yet.)
    wait_until("writes are accepted again", || {
        db.writes_refused().is_none() && db.redo().stalled().is_none()
    });
    stop.store(true, Ordering::Release);
    if let Some(error) = writer.join().unwrap() {
        // Refused, or (a commit whose log switch the full archive held up) told at once that
        // it is not durable yet: its redo is written once space returns.
        assert!(
            matches!(
                error,
                DbError::WritesRefused { .. }
                    | DbError::Redo(redo::RedoError::CommitStalled { .. })
            ),
            "the only failure is a refusal or a stall: {error}"
        );
        assert!(error.is_disk_full(), "{error}");
    }
    db.transact(&[set("after", "1")], WAIT).unwrap();
    db.shutdown().unwrap();
    let db = open(&disk).unwrap();
    assert_eq!(db.get(b"after").unwrap(), Some(b("1")));
    db.shutdown().unwrap();
}

#[test]
fn a_checkpoint_that_failed_to_write_the_data_file_succeeds_on_retry() {
    let _watchdog = Watchdog::new(
        Duration::from_secs(60),
        "a_checkpoint_that_failed_to_write_the_data_file_succeeds_on_retry",
    );
    let disk = CrashDisk::new();
    let db = open(&disk).unwrap();
    db.transact(&[set("before", "1")], WAIT).unwrap();
    db.checkpoint().unwrap();
    db.transact(&[set("during", "1")], WAIT).unwrap();
    // As a full disk does: a write of the data file fails. redb then refuses every later
    // operation until the file is reopened.
    let data_file = Path::new("/db/data/kv.redb");
    disk.set_fault(data_file, Some(Fault::WriteError));
    db.checkpoint().unwrap_err();
    assert!(db.writes_refused().is_some());
    disk.set_fault(data_file, None);
    wait_until("writes are accepted again", || db.writes_refused().is_none());
    db.transact(&[set("after", "1")], WAIT).unwrap();
    db.checkpoint().unwrap();
    db.shutdown().unwrap();
    let db = open(&disk).unwrap();
    for key in ["before", "during", "after"] {
        assert_eq!(db.get(key.as_bytes()).unwrap(), Some(b("1")), "{key}");
    }
    db.shutdown().unwrap();
}

#[test]
fn a_failed_sync_of_the_data_file_keeps_writes_refused() {
    let _watchdog = Watchdog::new(
        Duration::from_secs(60),
        "a_failed_sync_of_the_data_file_keeps_writes_refused",
    );
    let disk = CrashDisk::new();
    let db = open(&disk).unwrap();
    db.transact(&[set("before", "1")], WAIT).unwrap();
    // The kernel may drop pages it failed to write and still serve them from its cache: a
    // file whose sync failed is not trusted again until a restart.
    let data_file = Path::new("/db/data/kv.redb");
    disk.set_fault(data_file, Some(Fault::SyncError));
    db.checkpoint().unwrap_err();
    disk.set_fault(data_file, None);
    db.checkpoint().unwrap_err();
    assert!(db.writes_refused().is_some());
    drop(db);
    let db = open(&disk).unwrap();
    assert_eq!(db.get(b"before").unwrap(), Some(b("1")));
    db.transact(&[set("after", "1")], WAIT).unwrap();
    db.shutdown().unwrap();
}

#[test]
fn a_checkpoint_that_failed_to_update_the_control_file_succeeds_on_retry() {
    let _watchdog = Watchdog::new(
        Duration::from_secs(60),
        "a_checkpoint_that_failed_to_update_the_control_file_succeeds_on_retry",
    );
    let disk = CrashDisk::new();
    let db = open(&disk).unwrap();
    db.transact(&[set("before", "1")], WAIT).unwrap();
    // The data file takes the checkpoint; telling the redo log fails (the control file is
    // replaced through a temporary file, which cannot be written).
    let temporary = Path::new("/db/redo/control.tmp");
    disk.set_fault(temporary, Some(Fault::WriteError));
    db.checkpoint().unwrap_err();
    assert!(db.writes_refused().is_some());
    disk.set_fault(temporary, None);
    wait_until("writes are accepted again", || db.writes_refused().is_none());
    let scn = db.transact(&[set("after", "1")], WAIT).unwrap().scn.unwrap();
    assert_eq!(db.checkpoint().unwrap(), scn);
    assert_eq!(db.redo().checkpoint_scn(), scn);
    db.shutdown().unwrap();
}

#[test]
fn async_commits_from_tokio_tasks() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "async_commits_from_tokio_tasks");
    let dir = tempfile::tempdir().unwrap();
    let (db_config, redo_config) = configs(dir.path());
    let redo_config = RedoConfig { log_file_size: 8 << 20, ..redo_config };
    let db = Arc::new(
        Database::open(
            db_config,
            redo_config,
            Arc::new(redo::OsStorage::default()),
            Metrics::new(),
        )
        .unwrap(),
    );
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..32)
            .map(|task| {
                let db = db.clone();
                tokio::spawn(async move {
                    for _ in 0..50 {
                        let executed = db
                            .execute(&[
                                Op::IncrBy { key: b("counter"), increment: 1 },
                                Op::IncrBy { key: b(&format!("task{task}")), increment: 1 },
                            ])
                            .unwrap();
                        db.commit(executed.scn.unwrap(), WAIT).await.unwrap();
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    assert_eq!(db.get(b"counter").unwrap(), Some(b("1600")));
    db.shutdown().unwrap();
}

/// A model of the key space: the operations of each transaction by SCN, replayed in order.
pub(crate) fn model_apply(state: &mut BTreeMap<Bytes, Bytes>, ops: &[Op]) {
    for op in ops {
        match op {
            Op::Set { key, value, condition, .. } => {
                let exists = state.contains_key(key);
                let applies = match condition {
                    SetCondition::Always => true,
                    SetCondition::IfAbsent => !exists,
                    SetCondition::IfPresent => exists,
                };
                if applies {
                    state.insert(key.clone(), value.clone());
                }
            }
            Op::MSet { pairs } => {
                for (key, value) in pairs {
                    state.insert(key.clone(), value.clone());
                }
            }
            Op::Del { keys } => {
                for key in keys {
                    state.remove(key);
                }
            }
            Op::IncrBy { key, increment } => {
                let current: Option<i64> =
                    state.get(key).map_or(Some(0), |value| keyspace::number::parse_integer(value));
                if let Some(new) = current.and_then(|value| value.checked_add(*increment)) {
                    state.insert(key.clone(), Bytes::from(new.to_string()));
                }
            }
            Op::Get { .. } | Op::MGet { .. } | Op::Exists { .. } => {}
            other => unreachable!("the model knows no {other:?}"),
        }
    }
}

fn random_transaction(rng: &mut StdRng, thread: u64, n: u64) -> Vec<Op> {
    let key = |rng: &mut StdRng| b(&format!("k{}", rng.random_range(0..40)));
    let count = if rng.random_bool(0.2) { rng.random_range(2..6) } else { 1 };
    (0..count)
        .map(|index| match rng.random_range(0..10) {
            0..=3 => Op::set(
                key(rng),
                b(&format!("t{thread}n{n}i{index}{}", "x".repeat(rng.random_range(0..300)))),
                SetCondition::Always,
            ),
            4 => Op::set(key(rng), b("nx"), SetCondition::IfAbsent),
            5 => Op::Del { keys: vec![key(rng), key(rng)] },
            6 => Op::MSet {
                pairs: (0..3).map(|_| (key(rng), b(&format!("m{thread}.{n}")))).collect(),
            },
            _ => Op::IncrBy {
                key: b(&format!("c{}", rng.random_range(0..5))),
                increment: rng.random_range(-3..10),
            },
        })
        .collect()
}

pub(crate) fn full_state(db: &Database) -> BTreeMap<Bytes, Bytes> {
    db.keys(&|_| true)
        .unwrap()
        .into_iter()
        .map(|key| {
            let value = db.get(&key).unwrap().expect("a listed key has a value");
            (key, value)
        })
        .collect()
}

/// Power cuts while transactions commit and checkpoints run: every image must open, hold
/// exactly the state after some prefix of the transactions (all of a transaction or none
/// of it) that includes every acknowledged one, and accept writes.
#[test]
fn power_cuts_during_commits_and_checkpoints_lose_nothing_acknowledged() {
    let _watchdog = Watchdog::new(
        Duration::from_secs(120),
        "power_cuts_during_commits_and_checkpoints_lose_nothing_acknowledged",
    );
    let seed: u64 = std::env::var("REDOGUARD_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
        .unwrap_or_else(rand::random);
    let result = std::panic::catch_unwind(|| {
        let mut images = 0;
        let mut mid_checkpoint = 0;
        for round in 0..4 {
            let (taken, during_checkpoint) = power_cut_round(seed.wrapping_add(round));
            images += taken;
            mid_checkpoint += during_checkpoint;
        }
        (images, mid_checkpoint)
    });
    match result {
        Ok((images, mid_checkpoint)) => {
            assert!(images >= 300, "only {images} crash images");
            assert!(
                mid_checkpoint >= 10,
                "only {mid_checkpoint} images cut a checkpoint's data file writes"
            );
            eprintln!(
                "db power cuts: {images} images checked, {mid_checkpoint} in the middle of a checkpoint (seed {seed})"
            );
        }
        Err(panic) => {
            eprintln!("replay with REDOGUARD_SEED={seed}");
            std::panic::resume_unwind(panic);
        }
    }
}

/// Returns the number of images checked, and how many of them cut the data file's writes
/// before their sync (a power cut in the middle of a checkpoint).
fn power_cut_round(seed: u64) -> (usize, usize) {
    let disk = CrashDisk::new();
    let db = Arc::new(open(&disk).unwrap());
    let acknowledged = Arc::new(AtomicU64::new(0));
    let images: Arc<parking_lot::Mutex<Vec<(Scn, CrashDisk)>>> = Arc::default();
    let mid_checkpoint = Arc::new(AtomicU64::new(0));
    {
        let hook_disk = disk.clone();
        let acknowledged = acknowledged.clone();
        let images = images.clone();
        let mid_checkpoint = mid_checkpoint.clone();
        let rng = parking_lot::Mutex::new(StdRng::seed_from_u64(seed ^ 0xc0ffee));
        disk.set_hook(Some(Arc::new(move || {
            let mut rng = rng.lock();
            if rng.random_bool(0.15) {
                let tear = [Tear::Sectors, Tear::Prefix, Tear::Nothing][rng.random_range(0..3)];
                let acknowledged = Scn(acknowledged.load(Ordering::Acquire));
                if tear != Tear::Nothing
                    && hook_disk.unsynced_changes(Path::new("/db/data/kv.redb")) > 0
                {
                    mid_checkpoint.fetch_add(1, Ordering::Relaxed);
                }
                let image = hook_disk.crash_image(&mut *rng, tear);
                images.lock().push((acknowledged, image));
            }
        })));
    }
    let transactions: Arc<parking_lot::Mutex<BTreeMap<Scn, Vec<Op>>>> = Arc::default();
    let workers: Vec<_> = (0..2u64)
        .map(|thread_index| {
            let db = db.clone();
            let acknowledged = acknowledged.clone();
            let transactions = transactions.clone();
            thread::spawn(move || {
                let mut rng =
                    StdRng::seed_from_u64(seed.wrapping_mul(7).wrapping_add(thread_index));
                for n in 0..120 {
                    let ops = random_transaction(&mut rng, thread_index, n);
                    let executed = db.execute(&ops).unwrap();
                    if let Some(scn) = executed.scn {
                        transactions.lock().insert(scn, ops);
                        db.commit_blocking(scn, WAIT).unwrap();
                        acknowledged.fetch_max(scn.0, Ordering::AcqRel);
                    }
                    if rng.random_bool(0.05) {
                        let _ = db.checkpoint();
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    disk.set_hook(None);
    db.shutdown().unwrap();
    let transactions = transactions.lock().clone();
    let images = std::mem::take(&mut *images.lock());
    let count = images.len();
    for (index, (acknowledged, image)) in images.into_iter().enumerate() {
        let reopened = open(&image)
            .unwrap_or_else(|error| panic!("image {index}/{count}: reopen failed: {error}"));
        let recovered = reopened.redo().next_scn().prev();
        assert!(
            recovered >= acknowledged,
            "image {index}: recovered up to SCN {recovered}, acknowledged {acknowledged}"
        );
        let mut model = BTreeMap::new();
        for (_, ops) in transactions.range(..=recovered) {
            model_apply(&mut model, ops);
        }
        let state = full_state(&reopened);
        assert_eq!(
            state, model,
            "image {index}: state differs from the first {recovered} transactions"
        );
        assert_eq!(reopened.dbsize().unwrap(), model.len() as u64, "image {index}: key count");
        reopened.transact(&[set("after", "crash")], WAIT).unwrap();
        reopened.shutdown().unwrap();
    }
    (count, mid_checkpoint.load(Ordering::Relaxed) as usize)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// SCAN and KEYS see exactly the model's keys, whatever layer each key is in.
    #[test]
    fn scans_merge_every_layer(steps in prop::collection::vec((0u8..4, 0u16..200), 1..200), count in 1usize..20) {
        let disk = CrashDisk::new();
        let db = open(&disk).unwrap();
        let mut model: BTreeMap<Bytes, Bytes> = BTreeMap::new();
        for (action, key) in steps {
            let key = b(&format!("key{key:03}"));
            match action {
                0 | 1 => {
                    db.transact(&[Op::set(key.clone(), b("v"), SetCondition::Always)], WAIT).unwrap();
                    model.insert(key, b("v"));
                }
                2 => {
                    db.transact(&[Op::Del { keys: vec![key.clone()] }], WAIT).unwrap();
                    model.remove(&key);
                }
                _ => {
                    db.checkpoint().unwrap();
                }
            }
        }
        let listed = db.keys(&|_| true).unwrap();
        prop_assert_eq!(&listed, &model.keys().cloned().collect::<Vec<_>>());
        let mut scanned = Vec::new();
        let mut cursor = 0;
        loop {
            let (next, mut keys) = db.scan(cursor, count, &|key| key.ends_with(b"7") || key.ends_with(b"3"), None).unwrap();
            scanned.append(&mut keys);
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let expected: Vec<Bytes> = model.keys().filter(|key| key.ends_with(b"7") || key.ends_with(b"3")).cloned().collect();
        prop_assert_eq!(scanned, expected);
        prop_assert_eq!(db.dbsize().unwrap(), model.len() as u64);
        prop_assert!(matches!(db.scan(987_654_321, 10, &|_| true, None), Err(DbError::InvalidCursor)));
        db.shutdown().unwrap();
    }
}

/// Hands every primary log write to an in-process standby, as a SYNC AFFIRM destination.
pub(crate) struct Forward {
    pub(crate) standby: Arc<Database>,
}

impl redo::ship::Shipper for Forward {
    fn ship(&self, write: &Arc<redo::ship::LogWrite>) -> Option<Box<dyn redo::ship::ShipWait>> {
        let redo = self.standby.redo();
        redo.receive(write.seq, write.offset, write.kind, &write.bytes).expect("standby receives");
        redo.sync_received().expect("standby syncs");
        redo.note_primary_durable(write.durable_scn);
        None
    }
}

pub(crate) fn open_standby(disk: &CrashDisk) -> Result<Database> {
    let (db, redo) = configs(Path::new("/standby"));
    Database::open_standby(
        db,
        RedoConfig { groups: 4, ..redo },
        Arc::new(disk.clone()),
        Metrics::new(),
    )
}

#[test]
fn a_standby_applies_in_real_time_serves_reads_and_refuses_writes() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "standby apply");
    let primary_disk = CrashDisk::new();
    let standby_disk = CrashDisk::new();
    let primary = open(&primary_disk).unwrap();
    let standby = Arc::new(open_standby(&standby_disk).unwrap());
    assert_eq!(standby.role(), Role::Standby);
    standby.redo().adopt_identity(primary.database_id()).unwrap();
    primary.redo().set_shipper(Some(Arc::new(Forward { standby: standby.clone() })));
    let mut model = BTreeMap::new();
    let mut rng = StdRng::seed_from_u64(11);
    for n in 0..400u64 {
        let ops = random_transaction(&mut rng, 0, n);
        let executed = primary.transact(&ops, WAIT).unwrap();
        if executed.scn.is_some() {
            model_apply(&mut model, &ops);
        }
        if n % 97 == 0 {
            primary.checkpoint().unwrap();
        }
    }
    let last = primary.redo().durable_scn();
    wait_until("the standby applies everything", || standby.applied_scn() >= last);
    assert_eq!(full_state(&standby), model);
    assert_eq!(standby.dbsize().unwrap(), model.len() as u64);
    assert!(matches!(standby.execute(&[set("x", "1")]), Err(DbError::ReadOnly)));
    // Reads are fine, and so is a checkpoint of what the primary confirmed.
    assert_eq!(
        standby.execute(&[Op::Get { key: b("nothing") }]).unwrap().results,
        vec![OpResult::Nil]
    );
    primary.transact(&[set("last", "1")], WAIT).unwrap();
    wait_until("the standby applies the last commit", || standby.get(b"last").unwrap().is_some());
    let checkpointed = standby.checkpoint().unwrap();
    assert!(checkpointed <= standby.redo().confirmed_scn());
    assert!(
        checkpointed >= last,
        "checkpointed {checkpointed}, confirmed {}",
        standby.redo().confirmed_scn()
    );
    // A restarted standby comes back to the same state, from its data files and logs.
    primary.redo().set_shipper(None);
    standby.shutdown().unwrap();
    drop(standby);
    let standby = open_standby(&standby_disk).unwrap();
    wait_until("the restarted standby applies its logs", || standby.applied_scn() >= last.next());
    model.insert(b("last"), b("1"));
    assert_eq!(full_state(&standby), model);
    standby.shutdown().unwrap();
    primary.shutdown().unwrap();
}

/// Runs `work` on `db` over and over in a thread until `stop`; the thread returns how many
/// times it ran.
pub(crate) fn repeat_until(
    stop: &Arc<std::sync::atomic::AtomicBool>,
    db: Arc<Database>,
    work: impl Fn(&Database) + Send + 'static,
) -> thread::JoinHandle<u64> {
    let stop = stop.clone();
    thread::spawn(move || {
        let mut count = 0u64;
        while !stop.load(Ordering::Acquire) {
            work(&db);
            count += 1;
        }
        count
    })
}

/// Writes and reads while checkpoints run back to back, one key space small enough that most
/// writes find their key in the data files: every read and the key count agree with a model
/// after every transaction. A read of the data files must never see them older than the cache
/// assumes (the store keeps one read transaction between checkpoints, and drops it at each).
#[test]
fn reads_and_the_key_count_stay_exact_while_checkpoints_run() {
    let _watchdog = Watchdog::new(Duration::from_secs(120), "the reads during checkpoints test");
    let disk = CrashDisk::new();
    let db = Arc::new(open(&disk).unwrap());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checkpoints = repeat_until(&stop, db.clone(), |db| {
        db.checkpoint().unwrap();
    });
    let mut rng = StdRng::seed_from_u64(7);
    let mut model: BTreeMap<Bytes, Bytes> = BTreeMap::new();
    for n in 0..6000u64 {
        let key = Bytes::from(format!("key:{}", rng.random_range(0..300u32)));
        let ops = if rng.random_range(0..4) == 0 {
            vec![Op::Del { keys: vec![key.clone()] }]
        } else {
            vec![Op::set(key.clone(), Bytes::from(format!("v{n}")), SetCondition::Always)]
        };
        db.transact(&ops, WAIT).unwrap();
        model_apply(&mut model, &ops);
        assert_eq!(db.get(&key).unwrap(), model.get(&key).cloned(), "transaction {n}: {key:?}");
        assert_eq!(db.dbsize().unwrap(), model.len() as u64, "transaction {n}: the key count");
    }
    stop.store(true, Ordering::Release);
    let checkpoints = checkpoints.join().unwrap();
    assert!(checkpoints >= 10, "only {checkpoints} checkpoints ran");
    assert_eq!(full_state(&db), model);
    db.shutdown().unwrap();
}
