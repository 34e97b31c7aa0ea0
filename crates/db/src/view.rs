//! A transaction's view of the rows: its own changes (an overlay) over the cache layers and
//! the data files, with point reads and ranges merged across all of them.
//!
//! The same view serves the three places that turn changes into rows: a primary's
//! transaction (which also records the changes it makes, as redo), crash recovery, and a
//! standby's apply. In the last two it is *exact*: it reads the data files whenever the cache
//! does not know a row, so the number of keys it reports is exact. A primary's plain SET does
//! not read a key no layer knows (`key_count`): the checkpoint that writes it learns the rest.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use parking_lot::RwLock;

use crate::cache::{Cache, Lookup, RowChange};
use crate::change::Change;
use crate::layout::{self, KeyRow, Namespace};
use crate::store::Store;
use crate::{DbError, Result, effects};

/// Entries of one source of a range: rows in range order, `None` a deletion.
type Entries = Vec<(Bytes, Option<Bytes>)>;

/// What lies under a transaction's own changes.
pub(crate) trait Base {
    /// What the cache layers know of a row (never the data files).
    fn known(&self, namespace: Namespace, row: &Bytes) -> Lookup;
    /// A row, from the cache layers or the data files.
    fn get(&self, namespace: Namespace, row: &Bytes) -> Result<Option<Bytes>>;
    /// Up to `limit` entries of each source in `(lower, upper)`, newest first, the data files
    /// last (all `Some`).
    fn range(
        &self,
        namespace: Namespace,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entries>>;
}

/// The base of a running database: its cache (locked for each read) and data files.
pub(crate) struct Live<'a> {
    pub(crate) cache: &'a RwLock<Cache>,
    pub(crate) store: &'a Store,
}

impl Base for Live<'_> {
    fn known(&self, namespace: Namespace, row: &Bytes) -> Lookup {
        self.cache.read().lookup_bytes(namespace, row)
    }

    fn get(&self, namespace: Namespace, row: &Bytes) -> Result<Option<Bytes>> {
        match self.cache.read().lookup_bytes(namespace, row) {
            Lookup::Known(value) => Ok(value),
            Lookup::Store => self.store.get_row(namespace, row),
        }
    }

    fn range(
        &self,
        namespace: Namespace,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entries>> {
        // Both under the cache's lock: a checkpoint lets go of what it wrote only after its
        // commit, so the layers and the data files read here agree.
        let cache = self.cache.read();
        let mut sources = cache.layers_range(namespace, lower, upper, reverse, limit);
        let stored = self.store.range(namespace, lower, upper, reverse, limit)?;
        sources.push(stored.into_iter().map(|(key, value)| (key, Some(value))).collect());
        Ok(sources)
    }
}

/// The base of crash recovery: a cache being built, not yet shared.
pub(crate) struct Fixed<'a> {
    pub(crate) cache: &'a Cache,
    pub(crate) store: &'a Store,
}

impl Base for Fixed<'_> {
    fn known(&self, namespace: Namespace, row: &Bytes) -> Lookup {
        self.cache.lookup_bytes(namespace, row)
    }

    fn get(&self, namespace: Namespace, row: &Bytes) -> Result<Option<Bytes>> {
        match self.cache.lookup_bytes(namespace, row) {
            Lookup::Known(value) => Ok(value),
            Lookup::Store => self.store.get_row(namespace, row),
        }
    }

    fn range(
        &self,
        namespace: Namespace,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entries>> {
        let mut sources = self.cache.layers_range(namespace, lower, upper, reverse, limit);
        let stored = self.store.range(namespace, lower, upper, reverse, limit)?;
        sources.push(stored.into_iter().map(|(key, value)| (key, Some(value))).collect());
        Ok(sources)
    }
}

/// What one transaction (or one applied record) did, for the cache and the key count.
pub(crate) struct Outcome {
    /// The changes recorded (a primary's: its redo).
    pub(crate) changes: Vec<Change>,
    /// Every row it changed, its final value.
    pub(crate) rows: Vec<RowChange>,
    /// How it changed the number of keys, counting unresolved keys as new.
    pub(crate) key_delta: i64,
    /// Keys it set without knowing whether the data files held them (`key_count`).
    pub(crate) unresolved: Vec<Bytes>,
    /// The keys it changed (for WATCH and blocked pops), or `None` after a FLUSHALL (all).
    pub(crate) touched: Option<Vec<Bytes>>,
}

/// How many rows read from the base a view remembers (see `View::reads`).
const REMEMBERED_READS: usize = 16;

pub(crate) struct View<'a> {
    base: &'a dyn Base,
    overlay: [BTreeMap<Bytes, Option<Bytes>>; Namespace::COUNT],
    /// The first rows read from the base, with what was read: a command reads a row and the
    /// effects of the change it records read the same row again (does the field exist? the
    /// member's score?), which was a second search of every cache layer and of the data files
    /// per element written. Bounded, so that a large transaction does not search a long list;
    /// what a base read once it holds for the view's life (a primary's write transaction holds
    /// the write lock, and what promotion and checkpoints move between layers keeps its value).
    reads: RefCell<Vec<(Namespace, Bytes, Option<Bytes>)>>,
    /// Whether to remember reads at all: not in a read-only transaction, which records no
    /// change to read its rows again (and whose one read would cost the list's allocation).
    remember: bool,
    /// Whether each key row changed here existed before (`None`: not known, not read).
    existed: BTreeMap<Bytes, Option<bool>>,
    /// Read the data files for whatever the cache does not know (recovery, apply).
    exact: bool,
    /// The clock, for hiding keys past their deadline; `None` in recovery and apply, which
    /// never decide that a key expired.
    pub(crate) now_ms: Option<u64>,
    /// A primary's write transaction: a key found past its deadline is deleted (and the
    /// deletion logged) rather than only hidden.
    delete_expired: bool,
    changes: Vec<Change>,
    flushed: bool,
    /// The next collection id to hand out, raised by every id a change names.
    ids: &'a AtomicU64,
    /// Keys found past their deadline and deleted by this transaction.
    pub(crate) expired: u64,
}

impl<'a> View<'a> {
    pub(crate) fn new(base: &'a dyn Base, ids: &'a AtomicU64, exact: bool) -> View<'a> {
        View {
            base,
            overlay: Default::default(),
            reads: RefCell::new(Vec::new()),
            remember: true,
            existed: BTreeMap::new(),
            exact,
            now_ms: None,
            delete_expired: false,
            changes: Vec::new(),
            flushed: false,
            ids,
            expired: 0,
        }
    }

    /// A primary's transaction at `now_ms`; `write`: it may change the key space.
    pub(crate) fn transaction(
        base: &'a dyn Base,
        ids: &'a AtomicU64,
        now_ms: u64,
        write: bool,
    ) -> View<'a> {
        View {
            now_ms: Some(now_ms),
            delete_expired: write,
            remember: write,
            ..View::new(base, ids, false)
        }
    }

    pub(crate) fn is_exact(&self) -> bool {
        self.exact
    }

    /// A new collection id (a primary's).
    pub(crate) fn new_id(&self) -> u64 {
        self.ids.fetch_add(1, Ordering::AcqRel)
    }

    /// An id a change names is taken: none handed out later may equal it.
    pub(crate) fn raise_ids(&self, id: u64) {
        self.ids.fetch_max(id.saturating_add(1), Ordering::AcqRel);
    }

    pub(crate) fn get(&self, namespace: Namespace, row: &Bytes) -> Result<Option<Bytes>> {
        if let Some(value) = self.overlay[namespace.index()].get(row) {
            return Ok(value.clone());
        }
        if let Some(value) = self.remembered(namespace, row) {
            return Ok(value);
        }
        let value = self.base.get(namespace, row)?;
        if !self.remember {
            return Ok(value);
        }
        let mut reads = self.reads.borrow_mut();
        if reads.len() < REMEMBERED_READS {
            reads.push((namespace, row.clone(), value.clone()));
        }
        Ok(value)
    }

    /// A row this view read from the base before, if it remembers it.
    fn remembered(&self, namespace: Namespace, row: &Bytes) -> Option<Option<Bytes>> {
        self.reads
            .borrow()
            .iter()
            .find(|(space, read, _)| *space == namespace && read == row)
            .map(|(_, _, value)| value.clone())
    }

    /// What the overlay or the cache know of a row; `None` if only the data files do.
    pub(crate) fn known(&self, namespace: Namespace, row: &Bytes) -> Option<Option<Bytes>> {
        match self.overlay[namespace.index()].get(row) {
            Some(value) => Some(value.clone()),
            None if let Some(value) = self.remembered(namespace, row) => Some(value),
            None => match self.base.known(namespace, row) {
                Lookup::Known(value) => Some(value),
                Lookup::Store => None,
            },
        }
    }

    pub(crate) fn put(&mut self, namespace: Namespace, row: Bytes, value: Option<Bytes>) {
        debug_assert_ne!(namespace, Namespace::Keys, "key rows go through write_key");
        self.overlay[namespace.index()].insert(row, value);
    }

    /// A key's row as it is, deadline or not (for the effects of changes).
    pub(crate) fn raw_key(&self, key: &Bytes) -> Result<Option<KeyRow>> {
        self.get(Namespace::Keys, key)?.map(|row| decode_key_row(key, &row)).transpose()
    }

    /// A key's row that the change being replayed replaces whole (a standby's or recovery's
    /// SET): read as `raw_key` reads it, but neither looked for among nor added to the
    /// remembered reads. Nothing reads it again (the overlay holds its new row from now on),
    /// and a record of hundreds of SETs (an MSET) would otherwise fill the remembered reads
    /// that every later read of the record scans, for nothing. What the base holds does not
    /// change for the view's life, so skipping the remembered reads changes no answer.
    pub(crate) fn replaced_key(&self, key: &Bytes) -> Result<Option<KeyRow>> {
        let row = match self.overlay[Namespace::Keys.index()].get(key) {
            Some(row) => row.clone(),
            None => self.base.get(Namespace::Keys, key)?,
        };
        row.map(|row| decode_key_row(key, &row)).transpose()
    }

    /// A key's row if the overlay or the cache know it (`Some(None)`: known absent).
    pub(crate) fn known_key(&self, key: &Bytes) -> Result<Option<Option<KeyRow>>> {
        match self.known(Namespace::Keys, key) {
            Some(Some(row)) => Ok(Some(Some(decode_key_row(key, &row)?))),
            Some(None) => Ok(Some(None)),
            None => Ok(None),
        }
    }

    /// A key's row as a command sees it: a key past its deadline is not there (and in a
    /// primary's write transaction it is deleted, the deletion logged, as Redis does).
    pub(crate) fn key(&mut self, key: &Bytes) -> Result<Option<KeyRow>> {
        let Some(row) = self.raw_key(key)? else { return Ok(None) };
        match self.now_ms {
            Some(now) if row.expired(now) => {
                if self.delete_expired {
                    self.expired += 1;
                    self.record(Change::Delete { key: key.clone() })?;
                }
                Ok(None)
            }
            _ => Ok(Some(row)),
        }
    }

    /// Sets a key's row, with its expires entry; `old` is what the key held, if known.
    pub(crate) fn write_key(
        &mut self,
        key: &Bytes,
        new: Option<&KeyRow>,
        encoded: Option<Bytes>,
        old: Option<Option<&KeyRow>>,
    ) -> Result<()> {
        if !self.existed.contains_key(key) {
            let existed = old.map(|old| old.is_some());
            self.existed.insert(key.clone(), existed);
        }
        if new.is_none() && self.existed.get(key) == Some(&None) {
            // Set without knowing and now deleted: what it replaced decides the count.
            let stored = self.base.get(Namespace::Keys, key)?.is_some();
            self.existed.insert(key.clone(), Some(stored));
        }
        let new_deadline = new.map_or(0, |row| row.expires_at);
        if let Some(Some(old)) = old
            && old.expires_at != 0
            && old.expires_at != new_deadline
        {
            self.put(Namespace::Expires, layout::expires_row(old.expires_at, key), None);
        }
        let old_deadline = old.map(|old| old.map_or(0, |old| old.expires_at));
        if new_deadline != 0 && old_deadline != Some(new_deadline) {
            self.put(
                Namespace::Expires,
                layout::expires_row(new_deadline, key),
                Some(Bytes::new()),
            );
        }
        let value = match (new, encoded) {
            (_, Some(encoded)) => Some(encoded),
            (Some(row), None) => Some(row.encode()),
            (None, None) => None,
        };
        self.overlay[Namespace::Keys.index()].insert(key.clone(), value);
        Ok(())
    }

    /// Records a change (a primary's redo) and makes its effects visible to what follows.
    pub(crate) fn record(&mut self, change: Change) -> Result<()> {
        effects::apply(self, &change)?;
        self.changes.push(change);
        Ok(())
    }

    /// Applies a change read from the redo (recovery, a standby's apply).
    pub(crate) fn replay(&mut self, change: &Change) -> Result<()> {
        effects::apply(self, change)
    }

    pub(crate) fn note_flush(&mut self) {
        self.flushed = true;
    }

    /// Up to `limit` live rows of `namespace` within `(lower, upper)`, in key order
    /// (descending if `reverse`), merged across the overlay, the cache and the data files.
    pub(crate) fn range(
        &self,
        namespace: Namespace,
        lower: Bound<Bytes>,
        upper: Bound<Bytes>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>> {
        let mut out = Vec::new();
        let (mut lower, mut upper) = (lower, upper);
        while out.len() < limit {
            let chunk = (limit - out.len()).clamp(32, 4096);
            let (low, high) = (as_ref(&lower), as_ref(&upper));
            if !crate::cache::bounds_ordered(low, high) {
                break;
            }
            let overlay: Entries = {
                let entries = self.overlay[namespace.index()].range::<[u8], _>((low, high));
                let pick = |(key, value): (&Bytes, &Option<Bytes>)| (key.clone(), value.clone());
                if reverse {
                    entries.rev().take(chunk).map(pick).collect()
                } else {
                    entries.take(chunk).map(pick).collect()
                }
            };
            let mut sources = vec![overlay];
            sources.extend(self.base.range(namespace, low, high, reverse, chunk)?);
            // A source cut at `chunk` entries may hold more past its last one: the merge is
            // complete only up to the nearest such last key.
            let bound: Option<Bytes> = sources
                .iter()
                .filter(|entries| entries.len() >= chunk)
                .map(|entries| entries.last().expect("non-empty").0.clone())
                .reduce(|a, b| if reverse { a.max(b) } else { a.min(b) });
            let mut positions = vec![0usize; sources.len()];
            loop {
                let next = sources
                    .iter()
                    .zip(&positions)
                    .filter_map(|(entries, &at)| entries.get(at).map(|entry| &entry.0))
                    .reduce(|a, b| if (a < b) != reverse { a } else { b })
                    .cloned();
                let Some(key) = next else { break };
                if bound
                    .as_ref()
                    .is_some_and(|bound| if reverse { key < *bound } else { key > *bound })
                {
                    break;
                }
                // The newest source holding the row decides its value.
                let mut value = None;
                let mut decided = false;
                for (entries, at) in sources.iter().zip(positions.iter_mut()) {
                    if entries.get(*at).is_some_and(|entry| entry.0 == key) {
                        if !decided {
                            value = entries[*at].1.clone();
                            decided = true;
                        }
                        *at += 1;
                    }
                }
                if let Some(value) = value {
                    out.push((key, value));
                    if out.len() == limit {
                        return Ok(out);
                    }
                }
            }
            let Some(bound) = bound else { break };
            if reverse {
                upper = Bound::Excluded(bound);
            } else {
                lower = Bound::Excluded(bound);
            }
        }
        Ok(out)
    }

    /// What the transaction did, for the cache and the key count.
    pub(crate) fn finish(self) -> Outcome {
        let mut key_delta = 0i64;
        let mut unresolved = Vec::new();
        let keys = &self.overlay[Namespace::Keys.index()];
        for (key, existed) in &self.existed {
            let exists = keys.get(key).is_some_and(Option::is_some);
            key_delta += i64::from(exists) - i64::from(*existed == Some(true));
            if existed.is_none() && exists {
                unresolved.push(key.clone());
            }
        }
        let touched = (!self.flushed).then(|| self.existed.keys().cloned().collect());
        let mut rows = Vec::new();
        for (namespace, overlay) in Namespace::ALL.into_iter().zip(self.overlay) {
            for (row, value) in overlay {
                rows.push(RowChange::new(namespace, row, value));
            }
        }
        Outcome { changes: self.changes, rows, key_delta, unresolved, touched }
    }
}

fn as_ref(bound: &Bound<Bytes>) -> Bound<&[u8]> {
    match bound {
        Bound::Included(key) => Bound::Included(key.as_ref()),
        Bound::Excluded(key) => Bound::Excluded(key.as_ref()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

pub(crate) fn decode_key_row(key: &Bytes, row: &Bytes) -> Result<KeyRow> {
    KeyRow::decode(row).map_err(|error| DbError::Store {
        path: std::path::PathBuf::from("kv"),
        reason: format!("key {:?}: {error}", String::from_utf8_lossy(key)),
    })
}
