//! The number of keys (DBSIZE), kept without a read of the data files on every write.
//!
//! A plain SET (or MSET) of a key that no in-memory layer knows does not look up whether the
//! data files hold it: its write counts it as a new key and records it here as *unresolved*,
//! with the SCN of its redo. What the data files said is learnt later, by whichever comes
//! first:
//!
//! - the checkpoint that writes the key: its insert into the data files returns the old value
//!   anyway, so it learns it for free, and resolves its keys before its commit
//!   (`Store::checkpoint` calls back between its writes and its commit);
//! - a reader of the count (DBSIZE, INFO, status), which looks the keys up itself.
//!
//! Once the data files held most keys, that lookup was the largest cost of a durable SET
//! after the network (a tree search of the data files' page cache per write).
//!
//! *Why a lookup at any later time still answers for the moment of the write.* A key is
//! unresolved only if no layer knew it at its write: the data files then held its latest
//! state. Only the checkpoint that writes this change (the first whose SCN is at or above the
//! entry's) can change what the data files hold for the key, and that checkpoint resolves and
//! removes the entry, under this lock, *before* its commit. So while an entry is here, no
//! commit has changed its key in the data files, and any read of them answers as at the write.
//! A reader therefore looks keys up without holding this lock, and keeps its answers only for
//! the entries still here when it takes the lock again.
//!
//! *A reader answers for the moment it began.* It notes the count and the entries unresolved
//! then, and resolves those only (whoever else resolves some of them meanwhile): the answer is
//! the count at that moment less how many of them had existed. It never chases the writes
//! made since, so it ends however fast they come. A checkpoint copies and resolves its
//! entries a chunk at a time, so that writers, which take this lock, never wait long.
//!
//! Entries are in SCN order (writes push them under the write lock, in commit order) and leave
//! from the front only, so a range of them is named by absolute indexes.
//!
//! *Lock order*: this lock is a leaf. Nothing else is taken while it is held; in particular the
//! data files are never read under it, so a checkpoint may take it while it holds them open.

use std::collections::VecDeque;

use bytes::Bytes;
use redo::Scn;

/// Unresolved keys a reader of the count looks up between two takings of the lock.
pub(crate) const RESOLVE_CHUNK: usize = 4096;

#[derive(Debug, Default)]
pub(crate) struct KeyCount {
    /// The number of keys if every unresolved key was new.
    counted: i64,
    /// Keys written without knowing whether the data files held them, oldest first, with the
    /// SCN of the write.
    unresolved: VecDeque<(Scn, Bytes)>,
    /// How many entries have left the front so far: the index of `unresolved[0]`.
    removed: u64,
    /// How many of the entries that left had existed.
    existed_total: u64,
    /// Indexes readers wait for: (readers, `existed_total` once `removed` reached it).
    marks: std::collections::BTreeMap<u64, (usize, Option<u64>)>,
}

impl KeyCount {
    pub(crate) fn new(keys: i64) -> KeyCount {
        KeyCount { counted: keys, ..KeyCount::default() }
    }

    /// A write that changed the number of keys by `delta`, known exactly.
    pub(crate) fn add(&mut self, delta: i64) {
        self.counted += delta;
    }

    /// A write (redo at `scn`) set `key`, which no layer knew: counted as new until resolved.
    pub(crate) fn add_unresolved(&mut self, scn: Scn, key: Bytes) {
        debug_assert!(self.unresolved.back().is_none_or(|(last, _)| *last <= scn));
        self.counted += 1;
        self.unresolved.push_back((scn, key));
    }

    /// The number of keys, if nothing is unresolved.
    pub(crate) fn exact(&self) -> Option<i64> {
        self.unresolved.is_empty().then_some(self.counted)
    }

    /// The number of keys if every unresolved key was new (an upper bound).
    pub(crate) fn at_most(&self) -> i64 {
        self.counted
    }

    #[cfg(test)]
    pub(crate) fn unresolved(&self) -> usize {
        self.unresolved.len()
    }

    /// The unresolved entries a checkpoint that brings the data files to `scn` writes: every
    /// one at or below it (all durable and promoted, so in that checkpoint's changes), as the
    /// range of their indexes. Their keys are copied a chunk at a time (`keys`), so
    /// that writers never wait for a whole checkpoint's worth of copying.
    pub(crate) fn batch(&self, scn: Scn) -> (u64, u64) {
        let count = self.unresolved.partition_point(|(entry, _)| *entry <= scn);
        (self.removed, self.removed + count as u64)
    }

    /// Up to `limit` keys of the entries from index `from` (or the front, if those left) to
    /// `end`, with their indexes; empty once none is left below `end`. For a checkpoint's
    /// batch, and for a reader (from the front).
    pub(crate) fn keys(&self, from: u64, end: u64, limit: usize) -> Vec<(Bytes, u64)> {
        let from = from.max(self.removed);
        let skip = ((from - self.removed) as usize).min(self.unresolved.len());
        let take = (end.saturating_sub(from) as usize).min(limit).min(self.unresolved.len() - skip);
        // (`range`: no walk over the entries before `from`.)
        self.unresolved
            .range(skip..skip + take)
            .enumerate()
            .map(|(offset, (_, key))| (key.clone(), from + offset as u64))
            .collect()
    }

    /// What the data files held for the entries `start..end` (`existed[i - start]` for entry
    /// `i`), as learnt without this lock: applied to those still here, which leave. Entries
    /// that left meanwhile were resolved by someone else.
    pub(crate) fn resolve(&mut self, start: u64, end: u64, existed: &[bool]) {
        debug_assert_eq!(existed.len() as u64, end - start);
        debug_assert!(start <= self.removed, "entries only leave");
        let from = self.removed.max(start);
        for index in from..end {
            let (_, _) = self.unresolved.pop_front().expect("an entry below `end` is here");
            if existed[(index - start) as usize] {
                self.counted -= 1;
                self.existed_total += 1;
            }
            if let Some((_, at)) = self.marks.get_mut(&(index + 1)) {
                *at = Some(self.existed_total);
            }
        }
        self.removed = self.removed.max(end);
    }
}

impl crate::Inner {
    /// The number of keys as at the call: the keys unresolved then are resolved first (by this
    /// reader, looking them up in the data files a chunk at a time without this lock, or by a
    /// checkpoint meanwhile; see the module's argument).
    pub(crate) fn dbsize(&self) -> crate::Result<u64> {
        // The count as at this moment: what is unresolved now is resolved (by this reader or
        // a checkpoint), and the count then corrected by how many of those had existed.
        let (counted, existed_before, target) = {
            let mut count = self.key_count.lock();
            if let Some(keys) = count.exact() {
                return Ok(keys.max(0) as u64);
            }
            let target = count.removed + count.unresolved.len() as u64;
            count.marks.entry(target).or_insert((0, None)).0 += 1;
            (count.counted, count.existed_total, target)
        };
        let resolved: crate::Result<()> = (|| {
            while self.resolve_front(target)? {}
            Ok(())
        })();
        let mut count = self.key_count.lock();
        let (readers, at) = *count.marks.get(&target).expect("marked");
        if readers == 1 {
            count.marks.remove(&target);
        } else {
            count.marks.get_mut(&target).expect("marked").0 -= 1;
        }
        resolved?;
        let existed = at.expect("every entry below the mark left") - existed_before;
        Ok((counted - existed as i64).max(0) as u64)
    }

    /// Looks up a chunk from the front, below `target`; false if there was none.
    fn resolve_front(&self, target: u64) -> crate::Result<bool> {
        let keys = self.key_count.lock().keys(0, target, RESOLVE_CHUNK);
        let Some(&(_, start)) = keys.first() else { return Ok(false) };
        let existed = keys
            .iter()
            .map(|(key, _)| Ok(self.store.get(key)?.is_some()))
            .collect::<crate::Result<Vec<bool>>>()?;
        self.key_count.lock().resolve(start, start + keys.len() as u64, &existed);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> Bytes {
        Bytes::copy_from_slice(name.as_bytes())
    }

    #[test]
    fn unresolved_keys_count_once_resolved_whoever_resolves_them() {
        let mut count = KeyCount::new(10);
        count.add_unresolved(Scn(1), key("a"));
        count.add_unresolved(Scn(2), key("b"));
        count.add(1);
        count.add_unresolved(Scn(3), key("c"));
        assert_eq!(count.exact(), None);
        assert_eq!(count.at_most(), 14);
        // A checkpoint to SCN 2 takes a and b.
        let (start, end) = count.batch(Scn(2));
        assert_eq!((start, end), (0, 2));
        assert_eq!(count.keys(start, end, 1), vec![(key("a"), 0)]);
        assert_eq!(count.keys(1, end, 10), vec![(key("b"), 1)]);
        // A reader resolves a (it existed) before the checkpoint's callback.
        assert_eq!(count.keys(0, u64::MAX, 1), vec![(key("a"), 0)]);
        count.resolve(0, 1, &[true]);
        // The checkpoint learnt a existed and b did not: only b is still here to apply.
        assert_eq!(count.keys(start, end, 10), vec![(key("b"), 1)]);
        count.resolve(start, end, &[true, false]);
        assert_eq!(count.unresolved(), 1);
        assert_eq!(count.at_most(), 13);
        assert_eq!(count.keys(0, u64::MAX, 10), vec![(key("c"), 2)]);
        count.resolve(2, 3, &[true]);
        assert_eq!(count.exact(), Some(12));
    }

    #[test]
    fn a_reader_answer_for_entries_a_checkpoint_resolved_meanwhile_is_dropped() {
        let mut count = KeyCount::new(0);
        for scn in 1..=4 {
            count.add_unresolved(Scn(scn), key(&format!("k{scn}")));
        }
        let keys = count.keys(0, u64::MAX, 4);
        let start = keys[0].1;
        // Meanwhile a checkpoint to SCN 2 resolved the first two (neither existed).
        let (batch_start, batch_end) = count.batch(Scn(2));
        count.resolve(batch_start, batch_end, &[false, false]);
        // The reader's answers for them (read after that commit: "existed") are not applied.
        count.resolve(start, start + keys.len() as u64, &[true, true, false, true]);
        assert_eq!(count.exact(), Some(3));
    }
}
