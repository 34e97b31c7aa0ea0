//! The primary's key-value database, whose every change is redo.
//!
//! A write transaction (one write command, or a MULTI/EXEC block) runs under one lock: it
//! reads the current state, appends its changes to the redo log as one record (getting its
//! commit SCN), and makes them visible in memory. The session then waits for the commit as its
//! options say. Data files are written only by checkpoints, which make them durable up to an
//! SCN and record that SCN with them; crash recovery opens the data files at their checkpoint
//! and replays the redo after it. See `cache` for the layers between a session and the data
//! files, and why a checkpoint never waits for the log writer.
//!
//! *Architecture Invariant*: the database never sees a socket or a protocol; the server maps
//! commands to `Op`s and `OpResult`s to replies.

pub mod cache;
pub mod change;
pub mod config;
pub mod copy;
pub mod error;
pub mod ops;
pub mod store;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex, RwLock};
use redo::storage::Storage;
use redo::{CommitOptions, DatabaseId, RedoConfig, RedoError, RedoLog, RedoStatus, Role, Scn};
use serde::{Deserialize, Serialize};
use stats::{Metrics, Statistic, WaitEvent};

use cache::{Cache, Lookup};
use change::Change;
pub use config::DbConfig;
pub use error::DbError;
pub use ops::{Op, OpResult, SetCondition};
use store::Store;

pub type Result<T, E = DbError> = std::result::Result<T, E>;

/// What a transaction did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Executed {
    pub results: Vec<OpResult>,
    /// The commit SCN, if the transaction changed anything (its commit must then be
    /// completed with `Database::commit`).
    pub scn: Option<Scn>,
}

/// The database for a person or a monitoring system.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DbStatus {
    /// The data files hold every change up to this SCN.
    pub checkpoint_scn: Scn,
    pub checkpoints: u64,
    /// Microseconds since the Unix epoch of the last completed checkpoint.
    pub last_checkpoint_us: Option<u64>,
    pub last_checkpoint_error: Option<String>,
    /// Every change at or below this SCN is durable and out of the pending layer.
    pub promoted_scn: Scn,
    pub keys: u64,
    /// Changes not yet in the data files, in bytes (pending + dirty + being written).
    pub unwritten_bytes: u64,
    pub data_file: String,
    /// Records replayed by crash recovery when the database was opened.
    pub recovered_records: u64,
    pub role: Role,
    /// The highest SCN applied to the key space.
    pub applied_scn: Scn,
    pub redo: RedoStatus,
}

#[derive(Debug, Default)]
struct CheckpointState {
    requested: bool,
    last_error: Option<String>,
    last_scn: Scn,
    last_at_us: Option<u64>,
    count: u64,
}

/// SCAN cursors handed out: cursor → the last key returned. Bounded; the oldest are
/// forgotten (a client that comes back with one gets "invalid cursor").
#[derive(Debug, Default)]
struct Cursors {
    next: u64,
    keys: BTreeMap<u64, Bytes>,
    order: VecDeque<u64>,
}

const CURSORS_MAX: usize = 16_384;

struct Waits {
    free_buffer: Arc<WaitEvent>,
    checkpoint_write: Arc<WaitEvent>,
}

struct Stats {
    checkpoints: Arc<Statistic>,
    checkpoint_keys: Arc<Statistic>,
    recovery_records: Arc<Statistic>,
    applied_records: Arc<Statistic>,
}

/// Decodes a redo record's change vectors.
fn decode_record(scn: Scn, payload: Vec<u8>) -> Result<Vec<Change>> {
    change::decode(&Bytes::from(payload))
        .map_err(|error| DbError::Corrupt { scn, reason: error.to_string() })
}

/// How applying `changes` changes the number of keys.
fn key_delta(cache: &Cache, store: &Store, changes: &[Change]) -> Result<i64> {
    let mut delta = 0i64;
    let mut seen: BTreeMap<&Bytes, bool> = BTreeMap::new();
    for change in changes {
        let existed = match seen.get(change.key()) {
            Some(exists) => *exists,
            None => match cache.lookup_bytes(change.key()) {
                Lookup::Known(value) => value.is_some(),
                Lookup::Store => store.get(change.key())?.is_some(),
            },
        };
        let exists = change.value().is_some();
        delta += i64::from(exists) - i64::from(existed);
        seen.insert(change.key(), exists);
    }
    Ok(delta)
}

/// Lock order: `checkpoint_running` → `write` → `cache` → `checkpoint` → `cursors`; a
/// thread holding one may only take those after it (most paths hold one at a time).
struct Inner {
    config: DbConfig,
    redo: RedoLog,
    store: Store,
    role: Role,
    /// The highest SCN applied to the key space (on a primary: executed).
    applied_scn: AtomicU64,
    cache: RwLock<Cache>,
    /// Serialises write transactions; holds the number of keys.
    write: Mutex<i64>,
    checkpoint: Mutex<CheckpointState>,
    checkpoint_changed: Condvar,
    /// One checkpoint at a time.
    checkpoint_running: Mutex<()>,
    cursors: Mutex<Cursors>,
    shut_down: AtomicBool,
    /// Set on a database that must not write its data files past where they are (a fenced
    /// primary, whose changes past a failover point a reinstate may have to rewind).
    checkpoints_suspended: AtomicBool,
    recovered_records: AtomicU64,
    waits: Waits,
    stats: Stats,
}

/// The database. Cheap to share: wrap it in an `Arc`.
pub struct Database {
    inner: Arc<Inner>,
    /// The checkpointer, and on a standby the apply thread.
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database").field("data_file", &self.inner.store.path()).finish()
    }
}

impl Database {
    /// Opens the database (creating it if the directories hold none): opens the redo log,
    /// opens the data files at their checkpoint and replays every redo record after it.
    pub fn open(
        config: DbConfig,
        redo_config: RedoConfig,
        storage: Arc<dyn Storage>,
        metrics: Arc<Metrics>,
    ) -> Result<Database> {
        config.validate()?;
        let redo = RedoLog::open(redo_config, storage.clone(), metrics.clone())?;
        Database::open_with(config, redo, &storage, &metrics, false)
    }

    /// Opens a standby database: its standby logs receive the primary's redo (see
    /// `redo::standby`), and an apply thread applies it in SCN order, in real time, from the
    /// data files' checkpoint on. The standby serves reads; writes are refused.
    pub fn open_standby(
        config: DbConfig,
        redo_config: RedoConfig,
        storage: Arc<dyn Storage>,
        metrics: Arc<Metrics>,
    ) -> Result<Database> {
        config.validate()?;
        let redo = RedoLog::open_standby(redo_config, storage.clone(), metrics.clone())?;
        Database::open_with(config, redo, &storage, &metrics, false)
    }

    /// Opens the database over a redo log already open (in its role): the data files at
    /// their checkpoint, crash recovery on a primary, real-time apply on a standby.
    /// With `suspend_checkpoints`, the data files stay at their checkpoint (see
    /// `suspend_checkpoints`) from the start.
    pub fn open_with_redo(
        config: DbConfig,
        redo: RedoLog,
        storage: &Arc<dyn Storage>,
        metrics: &Arc<Metrics>,
        suspend_checkpoints: bool,
    ) -> Result<Database> {
        config.validate()?;
        Database::open_with(config, redo, storage, metrics, suspend_checkpoints)
    }

    fn open_with(
        config: DbConfig,
        redo: RedoLog,
        storage: &Arc<dyn Storage>,
        metrics: &Arc<Metrics>,
        suspend_checkpoints: bool,
    ) -> Result<Database> {
        let role = redo.role();
        let marker = copy::copy_marker(&config);
        if storage.exists(&marker) {
            return Err(DbError::Mismatch(format!(
                "{} says a copy from the primary was interrupted: these data files are not a database; start the standby again with --from PRIMARY to make the copy again",
                marker.display()
            )));
        }
        let store = Store::open(storage, &config.data_file(), config.cache_size)?;
        let identity = redo.identity();
        let meta = store.meta()?;
        match meta.database_id {
            // (A new standby has no identity yet: its first checkpoint stamps the data files.)
            Some(id) if identity.database_id.0 != 0 && id != identity.database_id => {
                return Err(DbError::Mismatch(format!(
                    "the data files {} belong to database {id}, the redo log to database {}",
                    store.path().display(),
                    identity.database_id
                )));
            }
            Some(_) => {}
            None if identity.database_id.0 != 0 => store.checkpoint(
                &store::Changed::new(),
                meta.checkpoint_scn,
                identity.database_id,
            )?,
            None => {}
        }
        let next_scn = redo.next_scn();
        if role == Role::Primary && meta.checkpoint_scn >= next_scn {
            return Err(DbError::Mismatch(format!(
                "the data files are checkpointed at SCN {} but the redo log ends before SCN {next_scn}: the redo log was lost or belongs to another copy",
                meta.checkpoint_scn
            )));
        }
        let mut cache = Cache::new(meta.checkpoint_scn);
        let mut keys = store.key_count()? as i64;
        let mut records = 0u64;
        if role == Role::Primary {
            // Crash recovery: the data files at their checkpoint, plus every record after it.
            let started = Instant::now();
            let mut redo_bytes = 0u64;
            let mut reader = redo.read_from_scn(meta.checkpoint_scn.next())?;
            while let Some(record) = reader.next_record()? {
                redo_bytes += record.payload.len() as u64;
                let changes = decode_record(record.scn, record.payload)?;
                keys += key_delta(&cache, &store, &changes)?;
                cache.apply_durable(record.scn, changes);
                records += 1;
            }
            if records > 0 {
                tracing::info!(
                    records,
                    redo_bytes,
                    from_scn = %meta.checkpoint_scn.next(),
                    to_scn = %cache.promoted_scn(),
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "crash recovery: replayed redo after the last checkpoint"
                );
            }
        }
        let inner = Arc::new(Inner {
            role,
            applied_scn: AtomicU64::new(cache.promoted_scn().0),
            cache: RwLock::new(cache),
            write: Mutex::new(keys),
            checkpoint: Mutex::new(CheckpointState {
                last_scn: meta.checkpoint_scn,
                ..CheckpointState::default()
            }),
            checkpoint_changed: Condvar::new(),
            checkpoint_running: Mutex::new(()),
            cursors: Mutex::new(Cursors { next: 1, ..Cursors::default() }),
            shut_down: AtomicBool::new(false),
            checkpoints_suspended: AtomicBool::new(suspend_checkpoints),
            recovered_records: AtomicU64::new(records),
            waits: Waits {
                free_buffer: metrics.wait("free buffer waits"),
                checkpoint_write: metrics.wait("db file parallel write"),
            },
            stats: Stats {
                checkpoints: metrics.stat("checkpoints completed"),
                checkpoint_keys: metrics.stat("checkpoint keys written"),
                recovery_records: metrics.stat("recovery redo records applied"),
                applied_records: metrics.stat("apply redo records applied"),
            },
            config,
            redo,
            store,
        });
        inner.stats.recovery_records.add(records);
        // When a log switch needs a group back, the log writer asks for a checkpoint.
        let weak = Arc::downgrade(&inner);
        inner.redo.set_checkpoint_handler(Arc::new(move |_needed| {
            if let Some(inner) = weak.upgrade() {
                inner.request_checkpoint();
            }
        }));
        let spawn = |name: &str, work: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new().name(name.to_string()).spawn(work).map_err(|error| {
                DbError::Redo(RedoError::Io {
                    op: "start thread",
                    path: name.into(),
                    source: error,
                })
            })
        };
        let mut threads = Vec::new();
        let checkpointer = inner.clone();
        threads.push(spawn("db-ckpt", Box::new(move || checkpointer.checkpointer()))?);
        if role == Role::Standby {
            let applier = inner.clone();
            threads.push(spawn("db-apply", Box::new(move || applier.apply_loop()))?);
        }
        Ok(Database { inner, threads: Mutex::new(threads) })
    }

    pub fn redo(&self) -> &RedoLog {
        &self.inner.redo
    }

    /// A consistent view of the data files as of their last checkpoint (for a copy to a new
    /// standby): redo after its checkpoint SCN brings it forward.
    pub fn snapshot(&self) -> Result<store::StoreSnapshot> {
        self.inner.store.snapshot()
    }

    pub fn database_id(&self) -> DatabaseId {
        self.inner.redo.identity().database_id
    }

    pub fn role(&self) -> Role {
        self.inner.role
    }

    /// The highest SCN applied to the key space (on a standby: by real-time apply).
    pub fn applied_scn(&self) -> Scn {
        Scn(self.inner.applied_scn.load(Ordering::Acquire))
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.inner.read(key)
    }

    /// Number of keys.
    pub fn dbsize(&self) -> u64 {
        (*self.inner.write.lock()).max(0) as u64
    }

    /// Runs `ops` as one transaction: atomically, in order, each seeing the effects of the
    /// ones before it. If anything changed, its redo has been appended (`scn` is set) and the
    /// changes are visible; complete the commit with `commit`.
    pub fn execute(&self, ops: &[Op]) -> Result<Executed> {
        self.inner.execute(ops)
    }

    /// Waits, without holding a thread, while a write would have to wait inside `execute`:
    /// for memory (too much changed and not yet checkpointed: "free buffer waits") or for
    /// space in the log buffer. For sessions served by tokio tasks, so that a full cache or
    /// log buffer never holds a runtime worker; `execute` still waits itself for what another
    /// session took meanwhile.
    pub async fn room_for_writes(&self) {
        let inner = &self.inner;
        let limit = inner.config.dirty_bytes_max as usize;
        let mut started = None;
        loop {
            let memory = inner.cache.read().unwritten_bytes() < limit;
            let buffer = !inner.redo.log_buffer_nearly_full();
            if (memory && buffer)
                || inner.shut_down.load(Ordering::Acquire)
                || inner.checkpoint.lock().last_error.is_some()
            {
                break;
            }
            if !memory {
                started.get_or_insert_with(Instant::now);
                inner.promote();
                inner.request_checkpoint();
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if let Some(started) = started {
            inner.waits.free_buffer.record_since(started);
        }
    }

    /// Completes the commit of `scn` as `options` say (for WAIT: once its redo is durable).
    pub async fn commit(&self, scn: Scn, options: CommitOptions) -> Result<()> {
        if let Some(waiter) = self.inner.redo.commit_waiter(scn, options) {
            waiter.await?;
        }
        self.inner.promote();
        Ok(())
    }

    /// `commit` for threads.
    pub fn commit_blocking(&self, scn: Scn, options: CommitOptions) -> Result<()> {
        self.inner.redo.complete_commit(scn, options)?;
        self.inner.promote();
        Ok(())
    }

    /// `execute` then `commit_blocking`: a whole transaction from a thread.
    pub fn transact(&self, ops: &[Op], options: CommitOptions) -> Result<Executed> {
        let executed = self.execute(ops)?;
        if let Some(scn) = executed.scn {
            self.commit_blocking(scn, options)?;
        }
        Ok(executed)
    }

    /// The SCN the data files hold (their last completed checkpoint).
    pub fn checkpoint_scn(&self) -> Scn {
        self.inner.checkpoint.lock().last_scn
    }

    /// From now on no checkpoint writes the data files (not even at shutdown): they stay the
    /// database at `checkpoint_scn`. For a primary that has been failed over, so that a
    /// reinstate can rewind it to the failover point without undoing a checkpoint.
    pub fn suspend_checkpoints(&self) {
        if !self.inner.checkpoints_suspended.swap(true, Ordering::AcqRel) {
            tracing::warn!(checkpoint_scn = %self.checkpoint_scn(), "checkpoints suspended: the data files stay as they are");
        }
    }

    /// Checkpoints now; returns the SCN the data files hold.
    pub fn checkpoint(&self) -> Result<Scn> {
        self.inner.run_checkpoint()
    }

    /// Up to `count` keys after SCAN cursor `cursor` (0: from the start) that `matches`,
    /// and the next cursor (0: the end).
    pub fn scan(
        &self,
        cursor: u64,
        count: usize,
        matches: &dyn Fn(&[u8]) -> bool,
    ) -> Result<(u64, Vec<Bytes>)> {
        let after = if cursor == 0 {
            None
        } else {
            Some(
                self.inner
                    .cursors
                    .lock()
                    .keys
                    .get(&cursor)
                    .cloned()
                    .ok_or(DbError::InvalidCursor)?,
            )
        };
        let (keys, last) = self.inner.scan_after(after.as_deref(), count.max(1), matches)?;
        let next = match last {
            None => 0,
            Some(last) => {
                let mut cursors = self.inner.cursors.lock();
                let id = cursors.next;
                cursors.next += 1;
                cursors.keys.insert(id, last);
                cursors.order.push_back(id);
                if cursors.order.len() > CURSORS_MAX
                    && let Some(oldest) = cursors.order.pop_front()
                {
                    cursors.keys.remove(&oldest);
                }
                id
            }
        };
        Ok((next, keys))
    }

    /// Every key that `matches`, in key order.
    pub fn keys(&self, matches: &dyn Fn(&[u8]) -> bool) -> Result<Vec<Bytes>> {
        let mut all = Vec::new();
        let mut after: Option<Bytes> = None;
        loop {
            let (mut keys, last) = self.inner.scan_after(after.as_deref(), 4096, matches)?;
            all.append(&mut keys);
            match last {
                Some(last) => after = Some(last),
                None => return Ok(all),
            }
        }
    }

    pub fn status(&self) -> DbStatus {
        let inner = &self.inner;
        // One lock at a time: see the lock order in `Inner`.
        let keys = self.dbsize();
        let (promoted_scn, unwritten_bytes) = {
            let cache = inner.cache.read();
            (cache.promoted_scn(), cache.unwritten_bytes() as u64)
        };
        let checkpoint = inner.checkpoint.lock();
        DbStatus {
            checkpoint_scn: checkpoint.last_scn,
            checkpoints: checkpoint.count,
            last_checkpoint_us: checkpoint.last_at_us,
            last_checkpoint_error: checkpoint.last_error.clone(),
            promoted_scn,
            keys,
            unwritten_bytes,
            data_file: inner.store.path().display().to_string(),
            recovered_records: inner.recovered_records.load(Ordering::Relaxed),
            role: inner.role,
            applied_scn: self.applied_scn(),
            redo: inner.redo.status(),
        }
    }

    /// Why writes are refused right now, if they are.
    pub fn writes_refused(&self) -> Option<String> {
        self.inner.writes_refused()
    }

    /// Makes everything committed durable in the data files and stops: flushes the redo,
    /// checkpoints, stops the checkpointer and the redo engine.
    pub fn shutdown(&self) -> Result<()> {
        self.shutdown_with(true)
    }

    /// Shuts down without the final checkpoint: the next open replays the redo after the last
    /// one (crash recovery), which costs less than writing the data files now when the
    /// database is about to open again at once (a failover).
    pub fn shutdown_without_checkpoint(&self) -> Result<()> {
        self.shutdown_with(false)
    }

    fn shutdown_with(&self, checkpoint: bool) -> Result<()> {
        let inner = &self.inner;
        if inner.shut_down.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // A fenced primary flushes nothing: what it has not made durable is its divergent
        // tail, which no commit may be acknowledged from (its redo log refuses it anyway).
        let fenced = inner.redo.control().fenced.is_some();
        let flushed = if fenced { Ok(()) } else { inner.redo.flush().map(|_| ()) };
        inner.promote();
        let checkpointed =
            if checkpoint { inner.run_checkpoint_locked().map(|_| ()) } else { Ok(()) };
        {
            let _state = inner.checkpoint.lock();
            inner.checkpoint_changed.notify_all();
        }
        for handle in self.threads.lock().drain(..) {
            let _ = handle.join();
        }
        let stopped = inner.redo.shutdown();
        inner.store.close();
        flushed?;
        checkpointed?;
        stopped?;
        Ok(())
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

impl Inner {
    fn read(&self, key: &[u8]) -> Result<Option<Bytes>> {
        match self.cache.read().lookup(key) {
            Lookup::Known(value) => Ok(value),
            Lookup::Store => self.store.get(key),
        }
    }

    /// `read` of a key held as `Bytes` (a transaction's).
    fn read_bytes(&self, key: &Bytes) -> Result<Option<Bytes>> {
        match self.cache.read().lookup_bytes(key) {
            Lookup::Known(value) => Ok(value),
            Lookup::Store => self.store.get(key),
        }
    }

    fn writes_refused(&self) -> Option<String> {
        if let Some(error) = &self.checkpoint.lock().last_error {
            return Some(format!(
                "checkpoint failed ({error}); writes resume once a checkpoint succeeds"
            ));
        }
        self.redo
            .archiver_stuck()
            .map(|(seq, reason)| format!("archiving of log sequence {seq} is failing ({reason})"))
    }

    fn execute(&self, ops: &[Op]) -> Result<Executed> {
        let writes = ops.iter().any(Op::is_write);
        if writes {
            if self.role == Role::Standby {
                return Err(DbError::ReadOnly);
            }
            if self.shut_down.load(Ordering::Acquire) {
                return Err(DbError::Shutdown);
            }
            if let Some(reason) = self.writes_refused() {
                return Err(DbError::WritesRefused { reason });
            }
            self.wait_for_memory();
        }
        let mut keys = self.write.lock();
        // The transaction's own changes, over everything committed before it.
        let mut overlay: BTreeMap<Bytes, Option<Bytes>> = BTreeMap::new();
        let mut changes = Vec::new();
        let mut results = Vec::with_capacity(ops.len());
        let mut key_delta = 0i64;
        let view =
            |overlay: &BTreeMap<Bytes, Option<Bytes>>, key: &Bytes| -> Result<Option<Bytes>> {
                match overlay.get(key) {
                    Some(value) => Ok(value.clone()),
                    None => self.read_bytes(key),
                }
            };
        let mut change = |overlay: &mut BTreeMap<Bytes, Option<Bytes>>,
                          key: &Bytes,
                          value: Option<Bytes>,
                          existed: bool| {
            key_delta += i64::from(value.is_some()) - i64::from(existed);
            let key = Bytes::copy_from_slice(key);
            overlay.insert(key.clone(), value.clone());
            changes.push(match value {
                Some(value) => Change::Put { key, value },
                None => Change::Delete { key },
            });
        };
        for op in ops {
            results.push(match op {
                Op::Get { key } => view(&overlay, key)?.map_or(OpResult::Nil, OpResult::Value),
                Op::MGet { keys } => OpResult::Values(
                    keys.iter().map(|key| view(&overlay, key)).collect::<Result<_>>()?,
                ),
                Op::Exists { keys } => {
                    let mut count = 0;
                    for key in keys {
                        count += i64::from(view(&overlay, key)?.is_some());
                    }
                    OpResult::Integer(count)
                }
                Op::Set { key, value, condition } => {
                    let existed = view(&overlay, key)?.is_some();
                    let applies = match condition {
                        SetCondition::Always => true,
                        SetCondition::IfAbsent => !existed,
                        SetCondition::IfPresent => existed,
                    };
                    if applies {
                        change(&mut overlay, key, Some(Bytes::copy_from_slice(value)), existed);
                        OpResult::Ok
                    } else {
                        OpResult::Nil
                    }
                }
                Op::MSet { pairs } => {
                    for (key, value) in pairs {
                        let existed = view(&overlay, key)?.is_some();
                        change(&mut overlay, key, Some(Bytes::copy_from_slice(value)), existed);
                    }
                    OpResult::Ok
                }
                Op::Del { keys } => {
                    let mut deleted = 0;
                    for key in keys {
                        if view(&overlay, key)?.is_some() {
                            change(&mut overlay, key, None, true);
                            deleted += 1;
                        }
                    }
                    OpResult::Integer(deleted)
                }
                Op::IncrBy { key, increment } => {
                    let current = view(&overlay, key)?;
                    let existed = current.is_some();
                    match current.as_deref().map_or(Some(0), ops::parse_integer) {
                        None => OpResult::Error(ops::NOT_AN_INTEGER.to_string()),
                        Some(value) => match value.checked_add(*increment) {
                            None => OpResult::Error(ops::OVERFLOW.to_string()),
                            Some(new) => {
                                change(
                                    &mut overlay,
                                    key,
                                    Some(Bytes::from(new.to_string())),
                                    existed,
                                );
                                OpResult::Integer(new)
                            }
                        },
                    }
                }
            });
        }
        if changes.is_empty() {
            return Ok(Executed { results, scn: None });
        }
        let len = change::encoded_len(&changes);
        let max = self.redo.max_record_len();
        if len > max {
            return Err(DbError::TooLarge { len, max });
        }
        let mut payload = Vec::with_capacity(len);
        change::encode(&changes, &mut payload);
        let scn = self.redo.append(&payload).map_err(|error| match error {
            RedoError::ArchiverStuck { .. } => DbError::WritesRefused { reason: error.to_string() },
            RedoError::RecordTooLarge { len, max } => DbError::TooLarge { len, max },
            error => DbError::Redo(error),
        })?;
        self.cache.write().add_pending(scn, changes, key_delta);
        *keys += key_delta;
        self.applied_scn.store(scn.0, Ordering::Release);
        drop(keys);
        self.redo.count_commit();
        Ok(Executed { results, scn: Some(scn) })
    }

    /// Moves changes whose redo is now durable out of the pending layer.
    fn promote(&self) {
        // Only what can never be rolled back: durable here (primary), or confirmed durable by
        // the primary (standby).
        let durable = self.redo.confirmed_scn();
        if self.cache.read().oldest_pending().is_none_or(|oldest| oldest > durable) {
            return;
        }
        let unwritten = {
            let mut cache = self.cache.write();
            cache.promote(durable);
            cache.unwritten_bytes() as u64
        };
        if unwritten >= self.config.checkpoint_dirty_bytes {
            self.request_checkpoint();
        }
    }

    /// Waits while too much is changed and not yet checkpointed ("free buffer waits").
    fn wait_for_memory(&self) {
        let limit = self.config.dirty_bytes_max as usize;
        if self.cache.read().unwritten_bytes() < limit {
            return;
        }
        let started = Instant::now();
        self.promote();
        while self.cache.read().unwritten_bytes() >= limit
            && !self.shut_down.load(Ordering::Acquire)
        {
            let mut state = self.checkpoint.lock();
            if state.last_error.is_some() {
                break;
            }
            state.requested = true;
            self.checkpoint_changed.notify_all();
            self.checkpoint_changed.wait_for(&mut state, Duration::from_millis(50));
            drop(state);
            self.promote();
        }
        self.waits.free_buffer.record_since(started);
    }

    fn request_checkpoint(&self) {
        let mut state = self.checkpoint.lock();
        if !state.requested {
            state.requested = true;
            self.checkpoint_changed.notify_all();
        }
    }

    fn run_checkpoint(&self) -> Result<Scn> {
        if self.shut_down.load(Ordering::Acquire) {
            return Err(DbError::Shutdown);
        }
        self.run_checkpoint_locked()
    }

    /// Writes every durable change to the data files, with its SCN, in one durable
    /// transaction, then lets the redo log reuse what that covers.
    fn run_checkpoint_locked(&self) -> Result<Scn> {
        let _running = self.checkpoint_running.lock();
        if self.checkpoints_suspended.load(Ordering::Acquire) {
            return Ok(self.checkpoint.lock().last_scn);
        }
        self.promote();
        let last_scn = self.checkpoint.lock().last_scn;
        let (changed, scn) = {
            let mut cache = self.cache.write();
            if !cache.has_dirty() {
                let scn = last_scn;
                drop(cache);
                // Nothing new for the data files, but the redo log may not know yet (telling
                // it may be what failed last time).
                if scn > self.redo.checkpoint_scn() {
                    self.redo.advance_checkpoint(scn)?;
                }
                let mut state = self.checkpoint.lock();
                if state.last_error.take().is_some() {
                    tracing::info!(%scn, "checkpoint succeeded again; writes are accepted");
                    self.checkpoint_changed.notify_all();
                }
                drop(state);
                self.redo.note_checkpoint_failure(None);
                return Ok(scn);
            }
            cache.begin_checkpoint()
        };
        let started = Instant::now();
        let written =
            self.store.checkpoint(changed.changes(), scn, self.redo.identity().database_id);
        self.waits.checkpoint_write.record_since(started);
        let result = written.and_then(|()| {
            self.cache.write().end_checkpoint(&changed);
            // The data files hold everything up to `scn` durably, even if telling the redo
            // log fails below: a retry, with nothing left to write, tells it again.
            self.checkpoint.lock().last_scn = scn;
            // Older logs may be reused.
            self.redo.advance_checkpoint(scn).map_err(DbError::from)
        });
        let mut state = self.checkpoint.lock();
        match &result {
            Ok(()) => {
                if state.last_error.take().is_some() {
                    tracing::info!(%scn, "checkpoint succeeded again; writes are accepted");
                }
                state.last_scn = scn;
                state.last_at_us = Some(redo::types::now_unix_us());
                state.count += 1;
                self.stats.checkpoints.incr();
                self.stats.checkpoint_keys.add(changed.len() as u64);
            }
            Err(error) => {
                if state.last_error.is_none() {
                    tracing::error!(%error, "checkpoint failed; writes are refused until one succeeds");
                }
                state.last_error = Some(error.to_string());
            }
        }
        let failure = state.last_error.clone();
        self.checkpoint_changed.notify_all();
        drop(state);
        self.redo.note_checkpoint_failure(failure);
        result.map(|()| scn)
    }

    /// The checkpointer thread: every `checkpoint_interval`, when asked (by the log writer or
    /// the dirty-data threshold), and every `checkpoint_retry_interval` after a failure.
    fn checkpointer(self: Arc<Inner>) {
        let mut last = Instant::now();
        loop {
            {
                let mut state = self.checkpoint.lock();
                let wait = if state.last_error.is_some() {
                    self.config.checkpoint_retry_interval
                } else {
                    self.config
                        .checkpoint_interval
                        .saturating_sub(last.elapsed())
                        .max(Duration::from_millis(10))
                };
                if !state.requested && !self.shut_down.load(Ordering::Acquire) {
                    self.checkpoint_changed
                        .wait_for(&mut state, wait.min(Duration::from_millis(200)));
                }
                if self.shut_down.load(Ordering::Acquire) {
                    return;
                }
                let due = state.requested
                    || state.last_error.is_some()
                        && last.elapsed() >= self.config.checkpoint_retry_interval
                    || last.elapsed() >= self.config.checkpoint_interval;
                if !due {
                    drop(state);
                    // Commits made with NOWAIT never promote themselves.
                    self.promote();
                    continue;
                }
                state.requested = false;
            }
            last = Instant::now();
            let _ = self.run_checkpoint();
        }
    }

    /// A standby's real-time apply: reads redo in SCN order from the standby logs and the
    /// archive as it becomes durable here, and applies it to the key space. Applied changes
    /// are visible at once; they reach the data files (a checkpoint) only once the primary has
    /// confirmed them durable, so that redo the primary lost in a crash (and this standby
    /// received) can be dropped again.
    fn apply_loop(self: Arc<Inner>) {
        let mut next = Scn(self.applied_scn.load(Ordering::Acquire)).next();
        let mut reader = None;
        while !self.shut_down.load(Ordering::Acquire) {
            if let Some(diverged) = self.redo.take_divergence() {
                self.drop_applied_from(diverged);
                next = next.min(diverged);
                reader = None;
            }
            if reader.is_none() {
                match self.redo.read_from_scn(next) {
                    Ok(opened) => reader = Some(opened),
                    Err(error) => {
                        tracing::warn!(%error, %next, "apply: cannot read redo yet");
                        self.redo
                            .wait_for_redo(self.redo.durable_addr(), Duration::from_millis(200));
                        continue;
                    }
                }
            }
            let seen = self.redo.durable_addr();
            match reader.as_mut().expect("opened").next_record() {
                Ok(Some(record)) => {
                    let scn = record.scn;
                    if let Err(error) = self.apply_record(scn, record.payload) {
                        tracing::error!(%error, %scn, "apply failed; it stops here until the standby is restarted");
                        return;
                    }
                    next = scn.next();
                }
                Ok(None) => {
                    self.promote();
                    self.redo.wait_for_redo(seen, Duration::from_millis(100));
                }
                Err(error) => {
                    tracing::warn!(%error, %next, "apply: reading redo failed; retrying");
                    reader = None;
                    self.redo.wait_for_redo(seen, Duration::from_millis(200));
                }
            }
        }
    }

    fn apply_record(&self, scn: Scn, payload: Vec<u8>) -> Result<()> {
        let changes = decode_record(scn, payload)?;
        let mut keys = self.write.lock();
        let delta = {
            let cache = self.cache.read();
            key_delta(&cache, &self.store, &changes)?
        };
        self.cache.write().add_pending(scn, changes, delta);
        *keys += delta;
        drop(keys);
        self.applied_scn.store(scn.0, Ordering::Release);
        self.stats.applied_records.incr();
        Ok(())
    }

    /// Drops everything applied from `scn` on (still in the pending layer: the primary never
    /// confirmed it).
    fn drop_applied_from(&self, scn: Scn) {
        let mut keys = self.write.lock();
        let delta = self.cache.write().discard_pending_from(scn);
        *keys -= delta;
        let applied = self.applied_scn.load(Ordering::Acquire);
        if applied >= scn.0 {
            self.applied_scn.store(scn.0 - 1, Ordering::Release);
        }
        tracing::warn!(from_scn = %scn, "apply: dropped redo the primary lost in a crash");
    }

    /// Up to `count` live keys after `after` in key order, those that `matches`, and the last
    /// key examined (`None` once the key space is exhausted).
    fn scan_after(
        &self,
        after: Option<&[u8]>,
        count: usize,
        matches: &dyn Fn(&[u8]) -> bool,
    ) -> Result<(Vec<Bytes>, Option<Bytes>)> {
        let (layers, stored) = {
            let cache = self.cache.read();
            (cache.layers_after(after, count), self.store.range(after, count)?)
        };
        // Each source: its entries in key order, and whether it was cut at `count`.
        type Source = (Vec<(Bytes, Option<Bytes>)>, bool);
        let mut sources: Vec<Source> = layers
            .into_iter()
            .map(|layer| {
                let truncated = layer.len() >= count;
                (layer, truncated)
            })
            .collect();
        let stored_truncated = stored.len() >= count;
        sources.push((
            stored.into_iter().map(|(key, value)| (key, Some(value))).collect(),
            stored_truncated,
        ));
        // A source cut at `count` entries may hold more keys past its last one: merged
        // output can only go up to the smallest such last key.
        let bound: Option<Bytes> = sources
            .iter()
            .filter(|(entries, truncated)| *truncated && !entries.is_empty())
            .map(|(entries, _)| entries.last().expect("non-empty").0.clone())
            .min();
        let mut positions = vec![0usize; sources.len()];
        let mut keys = Vec::new();
        let mut examined = 0usize;
        let mut last: Option<Bytes> = None;
        loop {
            let next = sources
                .iter()
                .zip(&positions)
                .filter_map(|((entries, _), &at)| entries.get(at).map(|entry| &entry.0))
                .min()
                .cloned();
            let Some(key) = next else {
                // Every source exhausted within its range.
                return Ok((keys, if bound.is_some() { last } else { None }));
            };
            if bound.as_ref().is_some_and(|bound| key > *bound) || examined >= count {
                // `last` is set: a truncated source's last key bounds its first, and
                // `examined` only grows with `last`.
                return Ok((keys, last));
            }
            // The newest layer holding the key decides its value.
            let mut value = None;
            let mut decided = false;
            for ((entries, _), at) in sources.iter().zip(positions.iter_mut()) {
                if entries.get(*at).is_some_and(|entry| entry.0 == key) {
                    if !decided {
                        value = entries[*at].1.clone();
                        decided = true;
                    }
                    *at += 1;
                }
            }
            if value.is_some() {
                examined += 1;
                if matches(&key) {
                    keys.push(key.clone());
                }
            }
            last = Some(key);
        }
    }
}

#[cfg(test)]
mod tests;
