//! Applying redo to the key space: decoding a record's changes (shared with crash
//! recovery), and a standby's real-time apply, which drops again what its primary lost.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use redo::Scn;

use crate::cache::{Cache, Lookup};
use crate::change::{self, Change};
use crate::store::Store;
use crate::{DbError, Inner, Result};

/// Decodes a redo record's change vectors.
pub(crate) fn decode_record(scn: Scn, payload: Vec<u8>) -> Result<Vec<Change>> {
    change::decode(&Bytes::from(payload))
        .map_err(|error| DbError::Corrupt { scn, reason: error.to_string() })
}

/// How applying `changes` changes the number of keys.
pub(crate) fn key_delta(cache: &Cache, store: &Store, changes: &[Change]) -> Result<i64> {
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

impl Inner {
    /// A standby's real-time apply: reads redo in SCN order from the standby logs and the
    /// archive as it becomes durable here, and applies it to the key space. Applied changes
    /// are visible at once; they reach the data files (a checkpoint) only once the primary has
    /// confirmed them durable, so that redo the primary lost in a crash (and this standby
    /// received) can be dropped again.
    pub(crate) fn apply_loop(self: Arc<Inner>) {
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
        let write = self.write.lock();
        let delta = {
            let cache = self.cache.read();
            key_delta(&cache, &self.store, &changes)?
        };
        self.cache.write().add_pending(scn, changes, delta);
        self.key_count.lock().add(delta);
        drop(write);
        self.applied_scn.store(scn.0, Ordering::Release);
        self.stats.applied_records.incr();
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
