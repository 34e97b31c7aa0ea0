//! Applying redo to the key space: decoding a record's changes (shared with crash
//! recovery), and a standby's real-time apply, which drops again what its primary lost. The
//! records come read and decoded from `read_ahead`'s thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use redo::Scn;

use crate::change::{self, Change};
use crate::read_ahead::{Ahead, Decoded, Next, ReadAhead};
use crate::view::{Base, Fixed, Outcome, View};
use crate::{DbError, Inner, Result};

/// Decodes a redo record's change vectors.
pub(crate) fn decode_record(scn: Scn, payload: Vec<u8>) -> Result<Vec<Change>> {
    change::decode(&Bytes::from(payload))
        .map_err(|error| DbError::Corrupt { scn, reason: error.to_string() })
}

/// The rows a record's changes change, exactly (reading the data files where the cache does
/// not know a row), as crash recovery and a standby's apply need them.
pub(crate) fn replay(
    base: &dyn Base,
    ids: &AtomicU64,
    scn: Scn,
    changes: &[Change],
) -> Result<Outcome> {
    let mut view = View::new(base, ids, true);
    for change in changes {
        view.replay(change).map_err(|error| match error {
            DbError::Mismatch(reason) => DbError::Corrupt { scn, reason },
            other => other,
        })?;
    }
    Ok(view.finish())
}

impl Inner {
    /// A standby's real-time apply: reads redo in SCN order from the standby logs and the
    /// archive as it becomes durable here, and applies it to the key space. Applied changes
    /// are visible at once; they reach the data files (a checkpoint) only once the primary has
    /// confirmed them durable, so that redo the primary lost in a crash (and this standby
    /// received) can be dropped again.
    pub(crate) fn apply_loop(self: Arc<Inner>) {
        let mut next = Scn(self.applied_scn.load(Ordering::Acquire)).next();
        let mut ahead = ReadAhead::start(&self, next);
        // Whether the read-ahead had caught up when it last handed something over: a wait
        // after that is for redo to arrive (idle), one before it for the reading ("apply redo
        // read").
        let mut caught_up = true;
        while !self.shut_down.load(Ordering::Acquire) {
            let got = match ahead.try_next() {
                Some(got) => got,
                None => {
                    let started = Instant::now();
                    let got = ahead.next(Duration::from_millis(100));
                    if !caught_up && matches!(got, Next::Ahead(Ahead::Records(_))) {
                        self.waits.apply_read.record_since(started);
                    }
                    got
                }
            };
            caught_up = matches!(got, Next::Ahead(Ahead::CaughtUp) | Next::Idle);
            // After the read, before the apply: a record read after the receiver marked a
            // divergence is dropped here, never applied (`read_ahead`).
            if let Some(diverged) = self.redo.take_divergence() {
                self.drop_applied_from(diverged);
                next = next.min(diverged);
                ahead.stop();
                ahead = ReadAhead::start(&self, next);
                continue;
            }
            match got {
                Next::Ahead(Ahead::Records(records)) => {
                    for Decoded { scn, size, changes } in &records {
                        self.wait_for_apply_memory();
                        // The wait ends at shutdown too: nothing more is applied then.
                        if self.shut_down.load(Ordering::Acquire) {
                            break;
                        }
                        if let Err(error) = self.apply_record(*scn, *size, changes) {
                            tracing::error!(%error, %scn, "apply failed; it stops here until the standby is restarted");
                            return;
                        }
                        next = scn.next();
                    }
                    // Freed by the thread that allocated it (`read_ahead`).
                    ahead.spent(records);
                }
                Next::Ahead(Ahead::CaughtUp) => self.promote(),
                Next::Ahead(Ahead::Failed { scn, error }) => {
                    tracing::error!(%error, %scn, "apply failed; it stops here until the standby is restarted");
                    return;
                }
                Next::Idle => {}
                Next::Ended => {
                    tracing::error!(%next, "apply: the redo read-ahead ended; apply stops here until the standby is restarted");
                    return;
                }
            }
        }
    }

    fn apply_record(&self, scn: Scn, size: u64, changes: &[Change]) -> Result<()> {
        let write = self.write.lock();
        // The cache held still for the whole record, as a read transaction holds it: one read
        // lock per record instead of one per row read (an MSET reads hundreds). Promotion and a
        // checkpoint's start and end, which take it to write, wait for one record at most.
        let outcome = {
            let cache = self.cache.try_read().unwrap_or_else(|| {
                let started = Instant::now();
                let cache = self.cache.read();
                self.waits.apply_cache.record_since(started);
                cache
            });
            let base = Fixed { cache: &cache, store: &self.store };
            replay(&base, &self.next_collection_id, scn, changes)?
        };
        let flushed = outcome.touched.is_none();
        let existed_before_flush = Vec::new();
        self.note_touched(&outcome.rows, outcome.touched.as_deref(), &existed_before_flush);
        if flushed {
            tracing::info!(%scn, "apply: FLUSHALL");
        }
        // Read before the cache is taken: the receiver raises it as heartbeats arrive.
        let confirmed = self.redo.confirmed_scn();
        let mut cache = self.cache.try_write().unwrap_or_else(|| {
            let started = Instant::now();
            let cache = self.cache.write();
            self.waits.apply_cache.record_since(started);
            cache
        });
        // Redo the primary has confirmed durable can never be dropped again: its rows go
        // straight to the dirty layer, as crash recovery's do, once nothing older is pending.
        // Through the pending layer, every row was moved again by a promotion, all of a
        // backlog's at once under the cache's write lock, while apply waited for it ("apply
        // cache lock": a third of a batch apply's time, docs/bench/README.md).
        if cache.oldest_pending().is_some_and(|oldest| oldest <= confirmed) {
            cache.promote(confirmed);
        }
        let direct = scn <= confirmed && cache.oldest_pending().is_none();
        if direct {
            cache.apply_durable(scn, outcome.rows);
        } else {
            cache.add_pending(scn, outcome.rows, outcome.key_delta);
        }
        let unwritten = cache.unwritten_bytes() as u64;
        drop(cache);
        if direct && unwritten >= self.config.checkpoint_dirty_bytes {
            self.request_checkpoint();
        }
        self.key_count.lock().add(outcome.key_delta);
        drop(write);
        self.applied_scn.store(scn.0, Ordering::Release);
        self.stats.applied_records.incr();
        self.stats.applied_size.add(size);
        Ok(())
    }

    /// Drops everything applied from `scn` on (still in the pending layer: the primary never
    /// confirmed it).
    fn drop_applied_from(&self, scn: Scn) {
        let _write = self.write.lock();
        let delta = self.cache.write().discard_pending_from(scn);
        // A standby applies with exact deltas: it never has unresolved keys.
        self.key_count.lock().add(-delta);
        let applied = self.applied_scn.load(Ordering::Acquire);
        if applied >= scn.0 {
            self.applied_scn.store(scn.0 - 1, Ordering::Release);
        }
        tracing::warn!(from_scn = %scn, "apply: dropped redo the primary lost in a crash");
    }
}
