//! SCAN and KEYS: a merge of the cache layers and the data files in key order, and the
//! cursors handed out to clients.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;

use bytes::Bytes;
use keyspace::KeyType;

use crate::layout::{self, Namespace};
use crate::view::{Live, View};
use crate::{Database, DbError, Inner, Result};

/// SCAN cursors handed out: cursor → the last key returned. Bounded; the oldest are
/// forgotten (a client that comes back with one gets "invalid cursor").
#[derive(Debug, Default)]
pub(crate) struct Cursors {
    pub(crate) next: u64,
    pub(crate) keys: BTreeMap<u64, Bytes>,
    pub(crate) order: VecDeque<u64>,
}

const CURSORS_MAX: usize = 16_384;

impl Cursors {
    /// A new cursor that resumes after `last`; the oldest is forgotten past `CURSORS_MAX`.
    pub(crate) fn issue(&mut self, last: Bytes) -> u64 {
        let id = self.next;
        self.next += 1;
        self.keys.insert(id, last);
        self.order.push_back(id);
        if self.order.len() > CURSORS_MAX
            && let Some(oldest) = self.order.pop_front()
        {
            self.keys.remove(&oldest);
        }
        id
    }
}

impl Database {
    /// Up to `count` keys after SCAN cursor `cursor` (0: from the start) that `matches` (and are
    /// of type `kind`, if given), and the next cursor (0: the end). Keys past their deadline
    /// are not returned.
    pub fn scan(
        &self,
        cursor: u64,
        count: usize,
        matches: &dyn Fn(&[u8]) -> bool,
        kind: Option<KeyType>,
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
        let (keys, last) = self.inner.scan_after(after, count.max(1), matches, kind)?;
        let next = match last {
            None => 0,
            Some(last) => self.inner.cursors.lock().issue(last),
        };
        Ok((next, keys))
    }

    /// Every key that `matches`, in key order.
    pub fn keys(&self, matches: &dyn Fn(&[u8]) -> bool) -> Result<Vec<Bytes>> {
        let mut all = Vec::new();
        let mut after: Option<Bytes> = None;
        loop {
            let (mut keys, last) = self.inner.scan_after(after, 4096, matches, None)?;
            all.append(&mut keys);
            match last {
                Some(last) => after = Some(last),
                None => return Ok(all),
            }
        }
    }
}

impl Inner {
    /// Up to `count` keys after `after` in key order, those that `matches` and are live (and of
    /// `kind`), and the last key examined (`None` once the key space is exhausted).
    fn scan_after(
        &self,
        after: Option<Bytes>,
        count: usize,
        matches: &dyn Fn(&[u8]) -> bool,
        kind: Option<KeyType>,
    ) -> Result<(Vec<Bytes>, Option<Bytes>)> {
        let base = Live { cache: &self.cache, store: &self.store };
        let view = View::new(&base, &self.next_collection_id, false);
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        let rows = view.range(Namespace::Keys, lower, Bound::Unbounded, false, count)?;
        let last = (rows.len() == count).then(|| rows.last().map(|(key, _)| key.clone())).flatten();
        let now = self.now_ms();
        let mut keys = Vec::new();
        for (key, row) in rows {
            let (row_kind, expires_at) =
                layout::decode_header(&row).map_err(|error| DbError::Store {
                    path: "kv".into(),
                    reason: format!("key {:?}: {error}", String::from_utf8_lossy(&key)),
                })?;
            if expires_at != 0 && expires_at <= now {
                continue;
            }
            if kind.is_some_and(|kind| kind != row_kind) || !matches(&key) {
                continue;
            }
            keys.push(key);
        }
        Ok((keys, last))
    }
}
