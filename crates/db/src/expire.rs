//! Active expiry: a primary deletes keys whose deadline passed even if no client touches them,
//! a few at a time, each deletion logged as redo like any other (a standby never deletes by its
//! own clock). The server drives it (through the write gate, like every write) in steps bounded
//! in keys and in the index entries they examine, so that one step never holds the write lock
//! for long however many keys are due.

use std::ops::Bound;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use redo::Scn;

use crate::layout::{self, Namespace};
use crate::view::{Live, View};
use crate::{Database, DbError, Result};

/// Index entries one step examines at most, per key it may delete (stale entries, whose key
/// changed its deadline, are skipped: the checkpoint removes them).
const EXAMINED_PER_KEY_MAX: usize = 16;

/// What one step of active expiry did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExpireCycle {
    /// Keys deleted.
    pub expired: u64,
    /// The SCN of their deletion's redo (complete it with `Database::commit`).
    pub scn: Option<Scn>,
    /// The step stopped at its bound: more keys may be due.
    pub more: bool,
}

impl Database {
    /// Deletes up to `keys_max` keys whose deadline has passed, in one transaction.
    pub fn expire_step(&self, keys_max: usize) -> Result<ExpireCycle> {
        let inner = &self.inner;
        inner.check_writes()?;
        let keys_max = keys_max.max(1);
        let write = inner.write.lock();
        let now = inner.now_ms();
        let base = Live { cache: &inner.cache, store: &inner.store };
        // Due entries, oldest deadline first: those whose key still has that deadline.
        let due = {
            let view = View::new(&base, &inner.next_collection_id, false);
            let upper = Bound::Excluded(layout::expires_row(now.saturating_add(1), b""));
            let mut lower = Bound::Unbounded;
            let mut due: Vec<Bytes> = Vec::new();
            let mut examined = 0usize;
            let mut more = false;
            'scan: loop {
                let entries =
                    view.range(Namespace::Expires, lower.clone(), upper.clone(), false, 256)?;
                let Some((last, _)) = entries.last() else { break };
                lower = Bound::Excluded(last.clone());
                for (entry, _) in entries {
                    examined += 1;
                    let (deadline, key) = layout::split_expires_row(&entry).map_err(|error| {
                        DbError::Store { path: "expires".into(), reason: error.to_string() }
                    })?;
                    if view
                        .raw_key(&key)?
                        .is_some_and(|row| row.expires_at == deadline && row.expired(now))
                    {
                        due.push(key);
                    }
                    if due.len() >= keys_max || examined >= keys_max * EXAMINED_PER_KEY_MAX {
                        more = true;
                        break 'scan;
                    }
                }
            }
            (due, more)
        };
        let (due, more) = due;
        if due.is_empty() {
            return Ok(ExpireCycle { expired: 0, scn: None, more });
        }
        let mut view = View::transaction(&base, &inner.next_collection_id, now, true);
        for key in &due {
            // Deletes it (logging the deletion) since it is past its deadline.
            view.key(key)?;
        }
        let expired = view.expired;
        let outcome = view.finish();
        let scn = inner.commit_outcome(outcome, Vec::new())?;
        drop(write);
        inner.expired_keys.fetch_add(expired, Ordering::Relaxed);
        Ok(ExpireCycle { expired, scn, more })
    }
}
