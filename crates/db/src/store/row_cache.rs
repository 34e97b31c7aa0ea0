//! The data files' key rows, kept in memory as the data files hold them: what a GET, or a write
//! that looks up the row it replaces, reads when no cache layer knows the key, found without a
//! search of redb's tree.
//!
//! Why: a point read of the data files descends redb's B-tree, and every level is a page from
//! redb's page cache (a mutex, a hash lookup and an `Arc` each) or, when the cache misses, a
//! `pread` into a new zeroed buffer. Under GET at 50 clients over a million keys that was about
//! a quarter of the sessions' worker's CPU, the part by which a GET cost more than Redis's
//! (`docs/bench/README.md`, "A row cache in front of the data files"). A row found here costs
//! one hash lookup and no copy.
//!
//! *Invariant*: a row held here is the row the data files hold at their last committed
//! checkpoint. Kept by the two places that put rows here:
//! - a checkpoint, once its commit is durable and the store's kept reader is dropped (which
//!   moves the reader's generation), replaces every row it holds that the checkpoint wrote
//!   and removes every one it deleted;
//! - a read that searched the data files puts what it found only if the generation it read at
//!   is still the store's, checked under the reader's lock, which the checkpoint takes to move
//!   it. A read of an older view therefore either puts its row before the checkpoint moves the
//!   generation (and the checkpoint then replaces it) or not at all.
//!
//! Only reads fill it: a checkpoint does not add the rows it wrote. Copying and keeping every
//! row a checkpoint writes cost a durable SET at 50 clients more than a GET gained (the
//! checkpointer's CPU a third higher, `docs/bench/README.md`); a row a write replaced is
//! replaced here only if a read had brought it in.
//!
//! So a row here is older than the data files' only between a checkpoint's commit and its
//! return, and the cache's flushing layer, which every read asks first, holds the newer one
//! until the checkpoint has returned.
//!
//! Nothing else writes the data files while the store is open (`Store::checkpoint_paced` is
//! their only writer). Only key rows (`Namespace::Keys`): an element row can also leave the
//! data files by the checkpoint's garbage collection, which does not name the rows it removes.
//! Rows it does not know are not cached as absent: the row filter rules most of those out.
//!
//! Bounded by `[db] row_cache_size` (0: none), weighed by the bytes of key and row plus
//! `ENTRY_OVERHEAD_BYTES`; `quick_cache`'s S3-FIFO decides what goes (a row read once goes
//! before one read again). Every row is a copy of its own, never a view of a cache layer's
//! chunk or of a redb page, so that a row kept here pins nothing else.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use quick_cache::Weighter;
use quick_cache::sync::Cache;

use crate::cache::Key;

/// Memory charged per row beyond its key and its bytes: the two `Bytes` headers, their
/// allocations' headers, and the cache's own entry.
const ENTRY_OVERHEAD_BYTES: u64 = 112;

/// The weight `quick_cache` counts against the capacity: the row's memory in bytes.
#[derive(Debug, Clone, Copy)]
struct RowBytes;

impl Weighter<Bytes, Bytes> for RowBytes {
    fn weight(&self, key: &Bytes, row: &Bytes) -> u64 {
        key.len() as u64 + row.len() as u64 + ENTRY_OVERHEAD_BYTES
    }
}

/// Key rows of the data files, by key (see the module's invariant).
pub(crate) struct RowCache {
    rows: Option<Cache<Bytes, Bytes, RowBytes>>,
    /// Lookups answered here, and not, since the open.
    hits: AtomicU64,
    misses: AtomicU64,
}

/// What the row cache holds and answered, for the status.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowCacheStatus {
    /// Its bound (`[db] row_cache_size`; 0: no row cache).
    pub capacity: u64,
    /// Memory of the rows it holds, as weighed.
    pub bytes: u64,
    pub rows: u64,
    /// Lookups of a key row that no cache layer knew, answered here since the open.
    pub hits: u64,
    /// The same, searched in the data files.
    pub misses: u64,
}

impl std::fmt::Debug for RowCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowCache").field("bytes", &self.bytes()).finish()
    }
}

impl RowCache {
    /// A cache of at most `capacity` bytes (0: none; every lookup misses).
    pub(crate) fn new(capacity: u64) -> RowCache {
        // A row of a short key and a small value weighs about 160 bytes.
        let rows = usize::try_from(capacity / 160).unwrap_or(usize::MAX).max(16);
        RowCache {
            rows: (capacity > 0).then(|| Cache::with_weighter(rows, capacity, RowBytes)),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<Bytes> {
        let row = self.rows.as_ref()?.get(key);
        let counter = if row.is_some() { &self.hits } else { &self.misses };
        counter.fetch_add(1, Ordering::Relaxed);
        row
    }

    /// Keeps `row`, read from the data files as its own copy (not a view of a redb page or of
    /// a cache layer's chunk), as their row of `key`.
    pub(crate) fn put(&self, key: Bytes, row: Bytes) {
        if let Some(rows) = &self.rows {
            rows.insert(key, row);
        }
    }

    /// What a committed checkpoint wrote: the rows kept that it wrote are replaced, those it
    /// deleted leave; the others stay out.
    pub(crate) fn written<'a>(&self, rows: impl IntoIterator<Item = (&'a Key, &'a Option<Bytes>)>) {
        let Some(cache) = &self.rows else { return };
        for (key, row) in rows {
            match row {
                // (If it leaves between the two, the replace does nothing: it stays out.)
                Some(row) if cache.contains_key(key.as_ref()) => {
                    let _ = cache.replace(
                        Bytes::copy_from_slice(key.as_ref()),
                        Bytes::copy_from_slice(row),
                        true,
                    );
                }
                Some(_) => {}
                None => {
                    cache.remove(key.as_ref());
                }
            }
        }
    }

    /// Forgets every row (the store is closed).
    pub(crate) fn clear(&self) {
        if let Some(rows) = &self.rows {
            rows.clear();
        }
    }

    /// The memory the rows kept take, as weighed.
    fn bytes(&self) -> u64 {
        self.rows.as_ref().map_or(0, Cache::weight)
    }

    pub(crate) fn status(&self) -> RowCacheStatus {
        RowCacheStatus {
            capacity: self.rows.as_ref().map_or(0, Cache::capacity),
            bytes: self.bytes(),
            rows: self.rows.as_ref().map_or(0, Cache::len) as u64,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_replaces_and_removes_rows() {
        let cache = RowCache::new(1 << 20);
        cache.put(Bytes::from_static(b"a"), Bytes::from_static(b"1"));
        cache.put(Bytes::from_static(b"b"), Bytes::from_static(b"2"));
        let written: Vec<(Key, Option<Bytes>)> = vec![
            (Key::new(Bytes::from_static(b"a")), Some(Bytes::from_static(b"one"))),
            (Key::new(Bytes::from_static(b"b")), None),
            (Key::new(Bytes::from_static(b"c")), Some(Bytes::from_static(b"three"))),
        ];
        cache.written(written.iter().map(|(key, row)| (key, row)));
        assert_eq!(cache.get(b"a").as_deref(), Some(&b"one"[..]));
        assert_eq!(cache.get(b"b"), None);
        // Not brought in by a read: not added by the checkpoint.
        assert_eq!(cache.get(b"c"), None);
        let status = cache.status();
        assert_eq!((status.rows, status.hits, status.misses), (1, 1, 2));
    }

    #[test]
    fn it_stays_within_its_capacity() {
        let capacity = 64 << 10;
        let cache = RowCache::new(capacity);
        for index in 0..10_000u32 {
            cache.put(Bytes::from(format!("key:{index}")), Bytes::from(vec![7u8; 100]));
        }
        let status = cache.status();
        assert!(status.bytes <= capacity, "{} bytes kept", status.bytes);
        assert!(status.rows > 100, "{} rows kept", status.rows);
    }

    #[test]
    fn none_keeps_nothing() {
        let cache = RowCache::new(0);
        cache.put(Bytes::from_static(b"a"), Bytes::from_static(b"1"));
        assert_eq!(cache.get(b"a"), None);
        assert_eq!(cache.status(), RowCacheStatus::default());
    }
}
