//! SCAN and KEYS: a merge of the cache layers and the data files in key order, and the
//! cursors handed out to clients.

use std::collections::{BTreeMap, VecDeque};

use bytes::Bytes;

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

impl Database {
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
}

impl Inner {
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
