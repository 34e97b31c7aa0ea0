//! WATCH: optimistic transactions. A connection watches keys; any change to one of them
//! before its EXEC (by another connection, by expiry, by FLUSHALL) makes that EXEC fail, as in
//! Redis. Changes are noted under the write lock, in the same critical section as the
//! transaction that made them, so an EXEC checked under that lock sees every change made before
//! it and none after.
//!
//! As Redis 7.0 does: a key that was already past its deadline when it was watched does not
//! fail the EXEC by being deleted (logically nothing changed); a watched key that reaches its
//! deadline before the EXEC does.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

/// Keys one connection watches, at most (Redis has no limit; this bounds what one client can
/// make the server keep).
pub const WATCHED_KEYS_MAX: usize = 1 << 20;

#[derive(Debug, Default)]
struct Watcher {
    /// Each key, and whether it was past its deadline when watched.
    keys: BTreeMap<Bytes, bool>,
    dirty: bool,
}

/// What an EXEC finds of its connection's watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchState {
    /// The connection watches nothing here (never did, or the database was reopened since).
    Unknown,
    Clean,
    /// A watched key changed: the EXEC fails.
    Dirty,
}

#[derive(Debug, Default)]
pub(crate) struct Watches {
    by_key: HashMap<Bytes, Vec<u64>>,
    watchers: HashMap<u64, Watcher>,
}

impl Watches {
    pub(crate) fn is_empty(&self) -> bool {
        self.watchers.is_empty()
    }

    /// Watches `keys` for connection `id`; `expired` says which were past their deadline.
    pub(crate) fn watch(&mut self, id: u64, keys: &[(Bytes, bool)]) -> Result<(), usize> {
        let watcher = self.watchers.entry(id).or_default();
        if watcher.keys.len() + keys.len() > WATCHED_KEYS_MAX {
            return Err(WATCHED_KEYS_MAX);
        }
        for (key, expired) in keys {
            if watcher.keys.contains_key(key) {
                continue;
            }
            watcher.keys.insert(key.clone(), *expired);
            self.by_key.entry(key.clone()).or_default().push(id);
        }
        Ok(())
    }

    pub(crate) fn unwatch(&mut self, id: u64) {
        let Some(watcher) = self.watchers.remove(&id) else { return };
        for key in watcher.keys.keys() {
            if let Some(ids) = self.by_key.get_mut(key) {
                ids.retain(|other| *other != id);
                if ids.is_empty() {
                    self.by_key.remove(key);
                }
            }
        }
    }

    /// `key` was changed; `exists` says whether it exists after the change.
    pub(crate) fn touch(&mut self, key: &Bytes, exists: bool) {
        let Some(ids) = self.by_key.get(key) else { return };
        for id in ids {
            let Some(watcher) = self.watchers.get_mut(id) else { continue };
            match watcher.keys.get_mut(key) {
                // A key watched past its deadline and now deleted: logically no change.
                Some(expired) if *expired && !exists => *expired = false,
                _ => watcher.dirty = true,
            }
        }
    }

    /// Every key went (FLUSHALL); `existed` says whether a key existed before.
    pub(crate) fn touch_all(&mut self, existed: impl Fn(&Bytes) -> bool) {
        for watcher in self.watchers.values_mut() {
            for (key, expired) in watcher.keys.iter_mut() {
                if !existed(key) {
                    continue;
                }
                if *expired {
                    *expired = false;
                } else {
                    watcher.dirty = true;
                }
            }
        }
    }

    /// The keys connection `id` watches that were live when watched.
    pub(crate) fn live_keys(&self, id: u64) -> Vec<Bytes> {
        self.watchers.get(&id).map_or_else(Vec::new, |watcher| {
            watcher
                .keys
                .iter()
                .filter(|(_, expired)| !**expired)
                .map(|(key, _)| key.clone())
                .collect()
        })
    }

    pub(crate) fn all_keys(&self) -> Vec<Bytes> {
        self.by_key.keys().cloned().collect()
    }

    pub(crate) fn state(&self, id: u64) -> WatchState {
        match self.watchers.get(&id) {
            None => WatchState::Unknown,
            Some(watcher) if watcher.dirty => WatchState::Dirty,
            Some(_) => WatchState::Clean,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Bytes {
        Bytes::copy_from_slice(name.as_bytes())
    }

    #[test]
    fn a_change_to_a_watched_key_makes_its_watchers_dirty() {
        let mut watches = Watches::default();
        watches.watch(1, &[(key("a"), false)]).unwrap();
        watches.watch(2, &[(key("b"), false)]).unwrap();
        watches.touch(&key("a"), true);
        assert_eq!(watches.state(1), WatchState::Dirty);
        assert_eq!(watches.state(2), WatchState::Clean);
        watches.unwatch(1);
        assert_eq!(watches.state(1), WatchState::Unknown);
        watches.touch(&key("a"), true);
        assert_eq!(watches.state(2), WatchState::Clean);
    }

    #[test]
    fn a_stale_key_deleted_is_no_change() {
        let mut watches = Watches::default();
        watches.watch(1, &[(key("x"), true)]).unwrap();
        watches.touch(&key("x"), false);
        assert_eq!(watches.state(1), WatchState::Clean);
        watches.touch(&key("x"), true);
        assert_eq!(watches.state(1), WatchState::Dirty);
    }
}
