//! Transactions: a write transaction's ops run under the write lock against its own view (an
//! overlay over the cache layers and the data files), its changes appended to the redo log as
//! one record; reads run against a consistent view without the write lock.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use keyspace::{Op, OpResult};
use redo::{RedoError, Role};

use crate::arena;
use crate::cache::RowChange;
use crate::change::{self, Change};
use crate::layout::Namespace;
use crate::ops::{self, Context};
use crate::view::{Fixed, Live, Outcome, View};
use crate::watch::WatchState;
use crate::{DbError, Executed, Inner, Result};

impl Inner {
    pub(crate) fn now_ms(&self) -> u64 {
        self.clock.read().now_ms()
    }

    /// A string key's value as GET sees it (`None`: no such key, past its deadline, or not a
    /// string).
    pub(crate) fn read(&self, key: &[u8]) -> Result<Option<Bytes>> {
        match self.read_ops(&[Op::Get { key: Bytes::copy_from_slice(key) }])?.pop() {
            Some(OpResult::Value(value)) => Ok(Some(value)),
            _ => Ok(None),
        }
    }

    /// Runs read-only `ops` against one consistent view of the key space (the cache held
    /// still for their duration; no write lock).
    pub(crate) fn read_ops(&self, ops: &[Op]) -> Result<Vec<OpResult>> {
        debug_assert!(!ops.iter().any(Op::is_write));
        let now = self.now_ms();
        // (`random` before `cache`: the lock order.)
        let mut random = self.random.lock();
        let cache = self.cache.read();
        let base = Fixed { cache: &cache, store: &self.store };
        let mut view = View::transaction(&base, &self.next_collection_id, now, false);
        let mut cx =
            Context { limits: self.config.limits, random: &mut random, cursors: &self.cursors };
        ops.iter().map(|op| ops::run(&mut view, op, &mut cx)).collect()
    }

    pub(crate) fn writes_refused(&self) -> Option<String> {
        if let Some(error) = &self.checkpoint.lock().last_error {
            return Some(format!(
                "checkpoint failed ({error}); writes resume once a checkpoint succeeds"
            ));
        }
        self.redo
            .archiver_stuck()
            .map(|(seq, reason)| format!("archiving of log sequence {seq} is failing ({reason})"))
    }

    /// Runs `ops` as one transaction. With `watcher`, it runs only if none of the keys that
    /// connection watches changed since (else `watch_failed`, nothing run).
    pub(crate) fn execute(&self, ops: &[Op], watcher: Option<u64>) -> Result<Executed> {
        let writes = ops.iter().any(Op::is_write);
        if writes {
            self.check_writes()?;
            self.wait_for_memory();
        }
        let write = self.write.lock();
        if let Some(id) = watcher
            && !self.watch_holds(id)?
        {
            self.watches.lock().unwatch(id);
            return Ok(Executed { results: Vec::new(), scn: None, watch_failed: true });
        }
        let now = self.now_ms();
        let base = Live { cache: &self.cache, store: &self.store };
        let mut view = View::transaction(
            &base,
            &self.next_collection_id,
            now,
            writes && self.role == Role::Primary,
        );
        let mut results = Vec::with_capacity(ops.len());
        {
            let mut random = self.random.lock();
            let mut cx =
                Context { limits: self.config.limits, random: &mut random, cursors: &self.cursors };
            for op in ops {
                results.push(ops::run(&mut view, op, &mut cx)?);
            }
        }
        let expired = view.expired;
        let flushes = ops.iter().any(|op| matches!(op, Op::FlushAll));
        let existed_before_flush = if flushes { self.watched_existing(&base)? } else { Vec::new() };
        let outcome = view.finish();
        if let Some(id) = watcher {
            self.watches.lock().unwatch(id);
        }
        let scn = self.commit_outcome(outcome, existed_before_flush)?;
        drop(write);
        if expired > 0 {
            self.expired_keys.fetch_add(expired, Ordering::Relaxed);
        }
        Ok(Executed { results, scn, watch_failed: false })
    }

    /// Why a write cannot start now, if it cannot.
    pub(crate) fn check_writes(&self) -> Result<()> {
        if self.role == Role::Standby {
            return Err(DbError::ReadOnly);
        }
        if self.shut_down.load(Ordering::Acquire) {
            return Err(DbError::Shutdown);
        }
        if let Some(reason) = self.writes_refused() {
            return Err(DbError::WritesRefused { reason });
        }
        Ok(())
    }

    /// Whether connection `id`'s watched keys are as they were (under the write lock).
    fn watch_holds(&self, id: u64) -> Result<bool> {
        let (state, live) = {
            let watches = self.watches.lock();
            (watches.state(id), watches.live_keys(id))
        };
        match state {
            WatchState::Dirty | WatchState::Unknown => return Ok(false),
            WatchState::Clean => {}
        }
        // A watched key that reached its deadline since is a change.
        let now = self.now_ms();
        let base = Live { cache: &self.cache, store: &self.store };
        let view = View::new(&base, &self.next_collection_id, false);
        for key in live {
            if view.raw_key(&key)?.is_some_and(|row| row.expired(now)) {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// The watched keys that exist now (before a FLUSHALL).
    fn watched_existing(&self, base: &Live) -> Result<Vec<Bytes>> {
        let keys = self.watches.lock().all_keys();
        let view = View::new(base, &self.next_collection_id, false);
        let mut existing = Vec::new();
        for key in keys {
            if view.raw_key(&key)?.is_some() {
                existing.push(key);
            }
        }
        Ok(existing)
    }

    /// Appends a transaction's changes as one redo record and makes them visible; `None` if it
    /// changed nothing. Called under the write lock.
    pub(crate) fn commit_outcome(
        &self,
        outcome: Outcome,
        existed_before_flush: Vec<Bytes>,
    ) -> Result<Option<redo::Scn>> {
        if outcome.changes.is_empty() {
            return Ok(None);
        }
        let len = change::encoded_len(&outcome.changes);
        let max = self.redo.max_record_len();
        if len > max {
            return Err(DbError::TooLarge { len, max });
        }
        // A lone SET's payload is what the cache keeps (`keep`): a chunk's rows. Any other
        // payload is dropped once the redo log has it, so it gets its own allocation and
        // leaves no hole in a chunk whose rows live on.
        let payload = if matches!(outcome.changes[..], [Change::String { .. }]) {
            arena::build(len, |out| change::encode(&outcome.changes, out))
        } else {
            let mut payload = Vec::with_capacity(len);
            change::encode(&outcome.changes, &mut payload);
            Bytes::from(payload)
        };
        let rows = keep(outcome.rows, &outcome.changes, &payload);
        let scn = self.redo.append(&payload).map_err(|error| match error {
            RedoError::ArchiverStuck { .. } => DbError::WritesRefused { reason: error.to_string() },
            RedoError::RecordTooLarge { len, max } => DbError::TooLarge { len, max },
            error => DbError::Redo(error),
        })?;
        {
            // Before the changes reach the cache: a checkpoint that writes them (it can only
            // once they are there) then finds their unresolved keys here (`key_count`).
            let mut count = self.key_count.lock();
            count.add(outcome.key_delta - outcome.unresolved.len() as i64);
            for key in outcome.unresolved {
                // Into this thread's chunk (`arena`), not an allocation of its own: the
                // checkpoint that resolves it drops it on its own thread, where glibc's `free`
                // of another thread's allocation was a tenth of its CPU under blind SETs.
                count.add_unresolved(scn, arena::copy(&key));
            }
        }
        self.note_touched(&rows, outcome.touched.as_deref(), &existed_before_flush);
        self.cache.write().add_pending(scn, rows, outcome.key_delta);
        self.applied_scn.store(scn.0, Ordering::Release);
        self.redo.count_commit();
        Ok(Some(scn))
    }

    /// Tells the watchers (and the waiting pops) which keys changed.
    pub(crate) fn note_touched(
        &self,
        rows: &[RowChange],
        touched: Option<&[Bytes]>,
        existed_before_flush: &[Bytes],
    ) {
        {
            let mut watches = self.watches.lock();
            if !watches.is_empty() {
                match touched {
                    Some(keys) => {
                        for key in keys {
                            let exists = rows.iter().any(|row| {
                                row.namespace == Namespace::Keys
                                    && row.row == *key
                                    && row.value.is_some()
                            });
                            watches.touch(key, exists);
                        }
                    }
                    None => watches.touch_all(|key| existed_before_flush.contains(key)),
                }
            }
        }
        self.keys_changed.send_modify(|generation| *generation += 1);
    }
}

/// What the cache keeps of a transaction's rows, whose keys and values may be the request's
/// own bytes (parts of a larger buffer): a lone plain SET's key and row become two views of the
/// payload, which it then owns alone, so that its keep costs no allocation; anything else gets
/// its own copy, so that each can be freed as soon as the row is written again.
fn keep(rows: Vec<RowChange>, changes: &[Change], payload: &Bytes) -> Vec<RowChange> {
    let lone = match changes {
        [Change::String { .. }] => change::lone_string_views(payload),
        _ => None,
    };
    rows.into_iter()
        .map(|change| match &lone {
            Some((key, row)) if change.namespace == Namespace::Keys && change.row == *key => {
                RowChange::new(Namespace::Keys, key.clone(), Some(row.clone()))
            }
            _ => RowChange::new(
                change.namespace,
                arena::copy(&change.row),
                change.value.map(|value| arena::copy(&value)),
            ),
        })
        .collect()
}
