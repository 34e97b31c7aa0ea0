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
//! The key space is Redis's: strings, hashes, lists, sets and sorted sets, keys with
//! deadlines. Its layout in rows (`layout`) gives every element of a collection a row of its
//! own, so that a change to one element is a change to one row in the redo, the cache and the
//! data files, whatever the collection's size.
//!
//! *Architecture Invariant*: the database never sees a socket or a protocol; the server maps
//! commands to `Op`s and `OpResult`s to replies.

mod apply;
mod arena;
pub mod cache;
pub mod change;
mod checkpoint;
pub mod clock;
pub mod config;
pub mod copy;
pub mod divergent;
mod effects;
pub mod error;
mod expire;
mod key_count;
mod key_filter;
pub mod layout;
mod open;
pub mod ops;
mod priority;
mod read_ahead;
mod row_filter;
mod scan;
pub mod store;
mod transaction;
mod view;
pub mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex, RwLock};
use redo::storage::Storage;
use redo::{CommitOptions, DatabaseId, RedoConfig, RedoLog, RedoStatus, Role, Scn};
use serde::{Deserialize, Serialize};
use stats::{Metrics, Statistic, WaitEvent};

use cache::Cache;
use checkpoint::CheckpointState;
pub use clock::{Clock, ManualClock, SystemClock};
pub use config::{DataLimits, DbConfig};
pub use error::DbError;
pub use expire::ExpireCycle;
use key_count::KeyCount;
pub use keyspace::{KeyType, Op, OpResult, SetCondition};
use open::Opening;
pub use row_filter::RowFilterStatus;
use scan::Cursors;
pub use store::RowCacheStatus;
use store::Store;
pub use watch::WatchState;

pub type Result<T, E = DbError> = std::result::Result<T, E>;

/// What a transaction did.
#[derive(Debug, Clone, PartialEq)]
pub struct Executed {
    pub results: Vec<OpResult>,
    /// The commit SCN, if the transaction changed anything (its commit must then be
    /// completed with `Database::commit`).
    pub scn: Option<Scn>,
    /// A key the transaction's connection watched changed: nothing ran (EXEC's null reply).
    pub watch_failed: bool,
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
    /// The data files' row filter (`[db] row_filter_max`), once one is built.
    #[serde(default)]
    pub row_filter: Option<RowFilterStatus>,
    /// The data files' key rows in memory (`[db] row_cache_size`).
    #[serde(default)]
    pub row_cache: RowCacheStatus,
}

struct Waits {
    free_buffer: Arc<WaitEvent>,
    checkpoint_write: Arc<WaitEvent>,
    /// A standby's apply waited for the read-ahead to read and decode redo that was there
    /// (never counted when apply had caught up with the redo: that is idle, not a wait).
    apply_read: Arc<WaitEvent>,
    /// A standby's apply waited for the key space's cache, which another thread held to
    /// change it (promotion, a checkpoint's start or end).
    apply_cache: Arc<WaitEvent>,
}

struct Stats {
    checkpoints: Arc<Statistic>,
    /// Paced checkpoints that stopped pacing because they were needed sooner.
    checkpoints_hurried: Arc<Statistic>,
    checkpoint_keys: Arc<Statistic>,
    recovery_records: Arc<Statistic>,
    applied_records: Arc<Statistic>,
    /// Bytes of the records real-time apply applied, counted as "redo size" counts them
    /// (record headers included), so a standby's apply rate reads against its primary's.
    applied_size: Arc<Statistic>,
}

/// Lock order: `checkpoint_running` → `write` → `random` → `cache` → `checkpoint` → `cursors`
/// → `watches` → `key_count`; a thread holding one may only take those after it (most paths
/// hold one at a time). `key_count` is a leaf: nothing, not even a read of the data files,
/// happens under it. `clock` is read for an instant and nothing is taken under it.
struct Inner {
    config: DbConfig,
    redo: RedoLog,
    store: Store,
    role: Role,
    /// The highest SCN applied to the key space (on a primary: executed).
    applied_scn: AtomicU64,
    cache: RwLock<Cache>,
    /// Serialises write transactions.
    write: Mutex<()>,
    /// The number of keys, some perhaps not yet resolved (`key_count`).
    key_count: Mutex<KeyCount>,
    checkpoint: Mutex<CheckpointState>,
    checkpoint_changed: Condvar,
    /// One checkpoint at a time.
    checkpoint_running: Mutex<()>,
    cursors: Mutex<Cursors>,
    /// The next collection id a primary hands out (`layout`): above every id the data files
    /// and the redo name.
    next_collection_id: AtomicU64,
    clock: RwLock<Arc<dyn Clock>>,
    watches: Mutex<watch::Watches>,
    random: Mutex<ops::Random>,
    /// Keys deleted because their deadline passed (INFO's `expired_keys`).
    expired_keys: AtomicU64,
    /// Moves on with every committed or applied change, for sessions waiting for a key to
    /// change (blocked pops).
    keys_changed: tokio::sync::watch::Sender<u64>,
    shut_down: AtomicBool,
    /// Set on a database that must not write its data files past where they are (a fenced
    /// primary, whose changes past a failover point a reinstate may have to rewind).
    checkpoints_suspended: AtomicBool,
    recovered_records: AtomicU64,
    /// A far sync's (`Database::open_far_sync`): no data files, no apply, no checkpoint.
    far_sync: bool,
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
        Database::open_with(
            config,
            redo,
            &storage,
            &metrics,
            Opening::Database { suspend_checkpoints: false },
        )
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
        Database::open_with(
            config,
            redo,
            &storage,
            &metrics,
            Opening::Database { suspend_checkpoints: false },
        )
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
        Database::open_with(
            config,
            redo,
            storage,
            metrics,
            Opening::Database { suspend_checkpoints },
        )
    }

    /// Opens a far sync over its redo log, already open as a standby's: what it receives goes
    /// into its standby logs and archive (see `redo::standby`), and that is all. No data file
    /// is opened or created, nothing is replayed at a restart or applied (no apply thread, no
    /// checkpointer): its applied SCN stays where it is, and its key space is an empty one that
    /// the server lets no client read (Data Guard's far sync: mounted, never opened).
    pub fn open_far_sync(
        config: DbConfig,
        redo: RedoLog,
        storage: &Arc<dyn Storage>,
        metrics: &Arc<Metrics>,
    ) -> Result<Database> {
        config.validate()?;
        Database::open_with(config, redo, storage, metrics, Opening::FarSync)
    }

    /// Whether this is a far sync's (`open_far_sync`): no data files, no apply.
    pub fn is_far_sync(&self) -> bool {
        self.inner.far_sync
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

    /// The value of string `key` (`None`: no such key, past its deadline, or not a string).
    pub fn get(&self, key: &[u8]) -> Result<Option<Bytes>> {
        self.inner.read(key)
    }

    /// Runs read-only `ops` against one consistent view, without the write lock (a lone read;
    /// every read on a standby).
    pub fn read(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        self.inner.read_ops(ops)
    }

    /// The clock that decides expiry (the system's, unless a test sets its own).
    pub fn set_clock(&self, clock: Arc<dyn Clock>) {
        *self.inner.clock.write() = clock;
    }

    pub fn now_ms(&self) -> u64 {
        self.inner.now_ms()
    }

    /// WATCH: connection `id` watches `keys` until its EXEC, DISCARD or UNWATCH.
    pub fn watch(&self, id: u64, keys: &[Bytes]) -> Result<std::result::Result<(), usize>> {
        let now = self.inner.now_ms();
        let mut watched = Vec::with_capacity(keys.len());
        {
            let _write = self.inner.write.lock();
            let base = view::Live { cache: &self.inner.cache, store: &self.inner.store };
            let view = view::View::new(&base, &self.inner.next_collection_id, false);
            for key in keys {
                let expired = view.raw_key(key)?.is_some_and(|row| row.expired(now));
                watched.push((key.clone(), expired));
            }
            Ok(self.inner.watches.lock().watch(id, &watched))
        }
    }

    /// UNWATCH (and what EXEC, DISCARD and a closed connection do).
    pub fn unwatch(&self, id: u64) {
        self.inner.watches.lock().unwatch(id);
    }

    /// Keys deleted because their deadline passed, since the database opened.
    pub fn expired_keys(&self) -> u64 {
        self.inner.expired_keys.load(Ordering::Relaxed)
    }

    /// A receiver that sees a new value after every committed or applied change (blocked pops
    /// wait on it, then try again).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.keys_changed.subscribe()
    }

    /// Number of keys. Looks up in the data files the keys written since the last checkpoint
    /// that no layer knew at their write and no reader has looked up yet (`key_count`).
    pub fn dbsize(&self) -> Result<u64> {
        self.inner.dbsize()
    }

    /// `dbsize`, or if the data files cannot be read (closed after a failed checkpoint, which
    /// also refuses writes), the count as if every key written since was new (an upper
    /// bound), with a warning: for INFO and status, which must answer.
    pub fn dbsize_or_bound(&self) -> u64 {
        self.dbsize().unwrap_or_else(|error| {
            tracing::warn!(%error, "the number of keys is an upper bound");
            self.inner.key_count.lock().at_most().max(0) as u64
        })
    }

    /// Runs `ops` as one transaction: atomically, in order, each seeing the effects of the
    /// ones before it. If anything changed, its redo has been appended (`scn` is set) and the
    /// changes are visible; complete the commit with `commit`.
    pub fn execute(&self, ops: &[Op]) -> Result<Executed> {
        self.inner.execute(ops, None)
    }

    /// `execute` as EXEC after WATCH: nothing runs (`watch_failed`) if a key connection `id`
    /// watches changed since it watched it; the connection's watches end either way.
    pub fn execute_watched(&self, ops: &[Op], id: u64) -> Result<Executed> {
        self.inner.execute(ops, Some(id))
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
        // "log buffer space" (and a log switch's reason), recorded when it ends (dropped).
        let mut buffer_wait: Option<redo::BufferSpaceWait> = None;
        loop {
            let memory = inner.cache.read().unwritten_bytes() < limit;
            let buffer = !inner.redo.log_buffer_nearly_full();
            if buffer {
                buffer_wait = None;
            } else if buffer_wait.is_none() {
                buffer_wait = Some(inner.redo.buffer_space_wait());
            }
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

    pub fn status(&self) -> DbStatus {
        let inner = &self.inner;
        // One lock at a time: see the lock order in `Inner`.
        let keys = self.dbsize_or_bound();
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
            row_filter: inner.store.row_filter_status(),
            row_cache: inner.store.row_cache_status(),
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
        // Waited for (a role change closes the database this way): a checkpoint running now
        // hurries, at the checkpointer's own priority, its pages at once.
        inner.mark_urgent(&mut inner.checkpoint.lock());
        let checkpointed =
            if checkpoint { inner.run_checkpoint_locked().map(|_| ()) } else { Ok(()) };
        {
            let _state = inner.checkpoint.lock();
            inner.checkpoint_changed.notify_all();
        }
        inner.store.stop_row_filter_builder();
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

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_apply;
#[cfg(test)]
mod tests_checkpoint;
#[cfg(test)]
mod tests_far_sync;
#[cfg(test)]
mod tests_key_count;
#[cfg(test)]
mod tests_row_cache;
#[cfg(test)]
mod tests_row_filter;
#[cfg(test)]
mod tests_types;
