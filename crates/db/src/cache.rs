//! The in-memory layers over the data files, newest first:
//!
//! - *pending*: changes whose redo is in the log buffer but not yet durable. Other sessions
//!   see them at once (as in the reference, a commit is visible when its redo is in the log
//!   buffer; the committing session's reply waits for durability).
//! - *dirty*: changes whose redo is durable, not yet in the data files.
//! - *flushing*: dirty changes being written by a checkpoint.
//! - the data files (`Store`).
//!
//! *Architecture Invariant*: only changes whose redo is durable ever leave *pending*, so a
//! checkpoint never writes a change to the data files before its redo is on disk (the
//! write-ahead rule), and a checkpoint never has to wait for the log writer, which may itself
//! be waiting for that checkpoint to free a log group.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use bytes::Bytes;
use redo::Scn;

use crate::key_filter::KeyFilter;
use crate::layout::Namespace;
use crate::store::Changed;

/// Memory charged per entry beyond its key and value (tree node, `Bytes` headers).
const ENTRY_OVERHEAD_BYTES: usize = 64;

/// Memory charged per durable entry beyond `ENTRY_OVERHEAD_BYTES`: its key's inline prefix.
const KEY_PREFIX_BYTES: usize = 32;

fn entry_bytes(key: &Bytes, value: &Option<Bytes>) -> usize {
    ENTRY_OVERHEAD_BYTES + key.len() + value.as_ref().map_or(0, Bytes::len)
}

fn durable_entry_bytes(key: &Bytes, value: &Option<Bytes>) -> usize {
    entry_bytes(key, value) + KEY_PREFIX_BYTES
}

/// A key of a durable layer's tree: its bytes, with the first 31 of them also held inline as
/// two big-endian integers, and in the last of their 32 bytes the key's length (`LONG` for a
/// key longer than 31 bytes). Ordered exactly as the bytes are: a shorter key's padding zeroes
/// sort before any byte it lacks; on equal padded bytes the shorter key (the other's prefix)
/// sorts first, and a `LONG` key after every shorter one; only two long keys with the same
/// first 31 bytes fall back to the bytes.
///
/// Why: every write looks its key up in each layer and then inserts it into the dirty one, and
/// with hundreds of thousands of keys dirty each tree search made ~40 calls to memcmp, each
/// through a pointer to the key's own allocation: the largest user-space cost of a durable SET
/// at 50 clients. With the prefix inline, a search compares integers within the node. With the
/// length in it, a key of up to 31 bytes (most keys) is found without reading its bytes at
/// all: the memcmp that confirmed an equal prefix, a cache miss on the found key's allocation,
/// was 13 % of a standby's batch apply (`docs/bench/README.md`, "bench apply"). 32 bytes, not
/// 16: a collection's element rows all start with the collection's 8-byte id, and element
/// names often share their next 8 bytes (`field:`, `element:`, `user:`), so with 16 a search
/// of a big hash, set or sorted set compared every element's bytes through their pointers
/// again (memcmp was 11 % of a durable HSET's CPU at 50 clients).
#[derive(Debug, Clone)]
pub struct Key {
    prefix: (u128, u128),
    bytes: Bytes,
}

/// Bytes of a key held inline in `Key::prefix`.
pub(crate) const INLINE: usize = 31;

/// `Key::prefix`'s length byte for a key longer than `INLINE`.
const LONG: u8 = u8::MAX;

impl Key {
    pub fn new(bytes: Bytes) -> Key {
        let mut head = [0u8; 32];
        let len = bytes.len().min(INLINE);
        head[..len].copy_from_slice(&bytes[..len]);
        head[INLINE] = if bytes.len() <= INLINE { bytes.len() as u8 } else { LONG };
        let (high, low) = head.split_at(16);
        let high = u128::from_be_bytes(high.try_into().expect("16 bytes"));
        let low = u128::from_be_bytes(low.try_into().expect("16 bytes"));
        Key { prefix: (high, low), bytes }
    }

    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The inline prefix: the first 31 bytes and the length byte.
    pub(crate) fn prefix(&self) -> (u128, u128) {
        self.prefix
    }

    /// Whether the prefix holds the whole key (then an equal prefix is an equal key).
    fn inline(&self) -> bool {
        self.prefix.1 as u8 != LONG
    }
}

impl From<Bytes> for Key {
    fn from(bytes: Bytes) -> Key {
        Key::new(bytes)
    }
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.prefix == other.prefix && (self.inline() || self.bytes == other.bytes)
    }
}

impl Eq for Key {}

impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Key {
    fn cmp(&self, other: &Key) -> std::cmp::Ordering {
        self.prefix.cmp(&other.prefix).then_with(|| {
            // Equal prefixes: both inline (the same key) or both long.
            if self.inline() { std::cmp::Ordering::Equal } else { self.bytes.cmp(&other.bytes) }
        })
    }
}

/// One changed row: its namespace, its key, and its new value (`None`: deleted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowChange {
    pub namespace: Namespace,
    pub row: Bytes,
    pub value: Option<Bytes>,
}

impl RowChange {
    pub fn new(namespace: Namespace, row: Bytes, value: Option<Bytes>) -> RowChange {
        RowChange { namespace, row, value }
    }
}

/// A durable layer: changed rows of each namespace, in key order (for SCAN, ranges and the
/// checkpoint's writes), and a filter of them that rules out most rows it does not hold
/// without a search of the tree.
#[derive(Debug, Default, Clone)]
pub struct Layer {
    rows: [Changed; Namespace::COUNT],
    filter: KeyFilter,
}

impl Layer {
    pub fn get(&self, namespace: Namespace, key: &Key) -> Option<&Option<Bytes>> {
        if !self.filter.may_contain(namespace, key) {
            return None;
        }
        self.rows[namespace.index()].get(key)
    }

    /// Sets a row's value; returns the one it replaces.
    fn insert(
        &mut self,
        namespace: Namespace,
        key: Key,
        value: Option<Bytes>,
    ) -> Option<Option<Bytes>> {
        let rows = &mut self.rows[namespace.index()];
        match rows.entry(key) {
            Entry::Occupied(mut row) => Some(std::mem::replace(row.get_mut(), value)),
            Entry::Vacant(row) => {
                self.filter.insert(namespace, row.key());
                row.insert(value);
                None
            }
        }
    }

    /// The changed rows of one namespace in key order (what a checkpoint writes).
    pub fn rows(&self, namespace: Namespace) -> &Changed {
        &self.rows[namespace.index()]
    }

    /// Changed rows, all namespaces.
    pub fn len(&self) -> usize {
        self.rows.iter().map(Changed::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.iter().all(Changed::is_empty)
    }

    /// An empty layer whose filter holds `rows` rows before it grows a second part.
    fn with_capacity(rows: usize) -> Layer {
        Layer { rows: Default::default(), filter: KeyFilter::with_capacity(rows) }
    }

    /// A layer of changed keys only (a copy's chunk, a migration).
    pub fn from_keys(keys: Changed) -> Layer {
        let mut rows: [Changed; Namespace::COUNT] = Default::default();
        rows[Namespace::Keys.index()] = keys;
        Layer::from_rows(rows)
    }

    /// A layer of changed rows of every namespace.
    pub fn from_rows(rows: [Changed; Namespace::COUNT]) -> Layer {
        let mut filter = KeyFilter::with_capacity(rows.iter().map(Changed::len).sum());
        for (namespace, rows) in Namespace::ALL.into_iter().zip(&rows) {
            for key in rows.keys() {
                filter.insert(namespace, key);
            }
        }
        Layer { rows, filter }
    }
}

/// What the in-memory layers know of a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The row's value (or `None`: deleted) is known here.
    Known(Option<Bytes>),
    /// Not changed since the last checkpoint: ask the data files.
    Store,
}

/// The pending layer's index: a row's latest pending value and how many pending changes touch
/// it. Keyed by `Key` as the durable layers are: every write and every apply looks its row up
/// here first, and with plain `Bytes` keys each step of that search was a call to memcmp
/// through the key's pointer (26 % of a standby's apply CPU on the batch workload, 2026-11-28).
type PendingIndex = BTreeMap<Key, (Option<Bytes>, usize)>;

#[derive(Debug, Default)]
pub struct Cache {
    /// Not yet durable (or on a standby, not yet confirmed by the primary), in SCN order,
    /// with how each changed the number of keys.
    pending: VecDeque<(Scn, Vec<RowChange>, i64)>,
    /// Latest pending value per row, and how many pending changes touch it.
    pending_index: [PendingIndex; Namespace::COUNT],
    pending_bytes: usize,
    /// Durable, not yet checkpointed.
    dirty: Layer,
    dirty_bytes: usize,
    /// Being written by a checkpoint.
    flushing: Option<Arc<Layer>>,
    flushing_bytes: usize,
    /// Every change at or below this SCN has left *pending*.
    promoted_scn: Scn,
}

impl Cache {
    pub fn new(promoted_scn: Scn) -> Cache {
        Cache { promoted_scn, ..Cache::default() }
    }

    pub fn lookup(&self, namespace: Namespace, key: &[u8]) -> Lookup {
        self.lookup_with(namespace, || Bytes::copy_from_slice(key))
    }

    /// `lookup` of a row the caller holds as `Bytes` (no copy of it is made).
    pub fn lookup_bytes(&self, namespace: Namespace, key: &Bytes) -> Lookup {
        self.lookup_with(namespace, || key.clone())
    }

    fn lookup_with(&self, namespace: Namespace, owned: impl FnOnce() -> Bytes) -> Lookup {
        let pending = &self.pending_index[namespace.index()];
        let in_dirty = !self.dirty.rows(namespace).is_empty();
        let in_flushing =
            self.flushing.as_ref().is_some_and(|layer| !layer.rows(namespace).is_empty());
        if pending.is_empty() && !in_dirty && !in_flushing {
            return Lookup::Store;
        }
        let key = Key::new(owned());
        if let Some((value, _)) = pending.get(&key) {
            return Lookup::Known(value.clone());
        }
        if let Some(value) = self.dirty.get(namespace, &key) {
            return Lookup::Known(value.clone());
        }
        if let Some(value) =
            self.flushing.as_ref().and_then(|flushing| flushing.get(namespace, &key))
        {
            return Lookup::Known(value.clone());
        }
        Lookup::Store
    }

    fn index_pending(&mut self, changes: &[RowChange]) {
        for change in changes {
            self.pending_bytes += entry_bytes(&change.row, &change.value);
            let entry = self.pending_index[change.namespace.index()]
                .entry(Key::new(change.row.clone()))
                .or_insert((None, 0));
            entry.0 = change.value.clone();
            entry.1 += 1;
        }
    }

    /// Adds the changes of a transaction whose redo got `scn` and is not yet durable.
    pub fn add_pending(&mut self, scn: Scn, changes: Vec<RowChange>, key_delta: i64) {
        debug_assert!(self.pending.back().is_none_or(|(last, _, _)| *last < scn));
        self.index_pending(&changes);
        self.pending.push_back((scn, changes, key_delta));
    }

    /// SCN of the oldest pending transaction.
    pub fn oldest_pending(&self) -> Option<Scn> {
        self.pending.front().map(|(scn, _, _)| *scn)
    }

    /// Moves every pending transaction at or below `durable` into *dirty*, in SCN order.
    pub fn promote(&mut self, durable: Scn) {
        while let Some((scn, _, _)) = self.pending.front() {
            if *scn > durable {
                break;
            }
            let (scn, changes, _) = self.pending.pop_front().expect("front exists");
            for change in changes {
                self.pending_bytes -= entry_bytes(&change.row, &change.value);
                let key = Key::new(change.row);
                let index = &mut self.pending_index[change.namespace.index()];
                if let Some(entry) = index.get_mut(&key) {
                    entry.1 -= 1;
                    if entry.1 == 0 {
                        index.remove(&key);
                    }
                }
                self.put_dirty_key(change.namespace, key, change.value);
            }
            // Never beyond the last transaction actually promoted: the next one may have its
            // SCN (even a durable one) and not be in `pending` yet.
            self.promoted_scn = scn;
        }
    }

    /// Drops every pending transaction at or above `scn` (a standby's redo the primary lost);
    /// returns how they had changed the number of keys.
    pub fn discard_pending_from(&mut self, scn: Scn) -> i64 {
        let mut delta = 0;
        while self.pending.back().is_some_and(|(last, _, _)| *last >= scn) {
            let (_, _, key_delta) = self.pending.pop_back().expect("back exists");
            delta += key_delta;
        }
        // Rebuild the index from what remains.
        self.pending_index = Default::default();
        self.pending_bytes = 0;
        let pending = std::mem::take(&mut self.pending);
        for (_, changes, _) in &pending {
            self.index_pending(changes);
        }
        self.pending = pending;
        delta
    }

    /// Applies durable changes directly (recovery, and a standby's apply of redo its primary
    /// confirmed durable), with nothing pending before them.
    pub fn apply_durable(&mut self, scn: Scn, changes: Vec<RowChange>) {
        debug_assert!(
            self.pending.is_empty(),
            "durable changes are applied only when nothing is pending"
        );
        for change in changes {
            self.put_dirty(change.namespace, change.row, change.value);
        }
        self.promoted_scn = self.promoted_scn.max(scn);
    }

    fn put_dirty(&mut self, namespace: Namespace, key: Bytes, value: Option<Bytes>) {
        self.put_dirty_key(namespace, Key::new(key), value);
    }

    fn put_dirty_key(&mut self, namespace: Namespace, key: Key, value: Option<Bytes>) {
        self.dirty_bytes += durable_entry_bytes(key.bytes(), &value);
        let bytes = key.bytes().clone();
        if let Some(old) = self.dirty.insert(namespace, key, value) {
            self.dirty_bytes -= durable_entry_bytes(&bytes, &old);
        }
    }

    pub fn promoted_scn(&self) -> Scn {
        self.promoted_scn
    }

    /// Whether anything is waiting for a checkpoint.
    pub fn has_dirty(&self) -> bool {
        !self.dirty.is_empty() || self.flushing.is_some()
    }

    /// Bytes of durable changes no checkpoint has begun to write.
    pub fn dirty_bytes(&self) -> usize {
        self.dirty_bytes
    }

    /// Bytes of durable changes not yet in the data files: what checkpoints free.
    pub fn checkpointable_bytes(&self) -> usize {
        self.dirty_bytes + self.flushing_bytes
    }

    /// Bytes of changes not yet in the data files.
    pub fn unwritten_bytes(&self) -> usize {
        self.pending_bytes + self.dirty_bytes + self.flushing_bytes
    }

    pub fn dirty_keys(&self) -> usize {
        self.dirty.rows(Namespace::Keys).len()
    }

    /// Starts a checkpoint: *dirty* becomes *flushing* (merged into what a failed checkpoint
    /// left there). Returns the changes to write and the SCN they bring the data files to.
    pub fn begin_checkpoint(&mut self) -> (Arc<Layer>, Scn) {
        // The next dirty layer will likely take as many rows as this one did: its filter is
        // sized for them, one part to ask instead of a chain of growing ones.
        let rows = self.dirty.len();
        let dirty = std::mem::replace(&mut self.dirty, Layer::with_capacity(rows));
        let flushing = match self.flushing.take() {
            // What a failed checkpoint left, with the newer changes over it: counted again,
            // as a row in both is charged once.
            Some(previous) => {
                let mut flushing =
                    Arc::try_unwrap(previous).unwrap_or_else(|shared| (*shared).clone());
                for (namespace, rows) in Namespace::ALL.into_iter().zip(dirty.rows) {
                    for (key, value) in rows {
                        flushing.insert(namespace, key, value);
                    }
                }
                self.flushing_bytes = flushing
                    .rows
                    .iter()
                    .flat_map(|rows| rows.iter())
                    .map(|(key, value)| durable_entry_bytes(key.bytes(), value))
                    .sum();
                flushing
            }
            // The usual case: the dirty layer, moved whole (no work under the lock).
            None => {
                self.flushing_bytes = self.dirty_bytes;
                dirty
            }
        };
        self.dirty_bytes = 0;
        let flushing = Arc::new(flushing);
        self.flushing = Some(flushing.clone());
        (flushing, self.promoted_scn)
    }

    /// The checkpoint that wrote `written` is durable.
    pub fn end_checkpoint(&mut self, written: &Arc<Layer>) {
        if self.flushing.as_ref().is_some_and(|flushing| Arc::ptr_eq(flushing, written)) {
            self.flushing = None;
            self.flushing_bytes = 0;
        }
    }

    /// Rows of `namespace` within `(lower, upper)` of every in-memory layer, at most `limit`
    /// of each, newest layer first, each in key order (descending if `reverse`): the caller
    /// merges them with the data files.
    pub fn layers_range(
        &self,
        namespace: Namespace,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Vec<Vec<(Bytes, Option<Bytes>)>> {
        let key_bound = |bound: Bound<&[u8]>| -> Bound<Key> {
            match bound {
                Bound::Included(key) => Bound::Included(Key::new(Bytes::copy_from_slice(key))),
                Bound::Excluded(key) => Bound::Excluded(Key::new(Bytes::copy_from_slice(key))),
                Bound::Unbounded => Bound::Unbounded,
            }
        };
        let (lower_key, upper_key) = (key_bound(lower), key_bound(upper));
        let range = |map: &Changed| -> Vec<(Bytes, Option<Bytes>)> {
            if !bounds_ordered(lower, upper) {
                return Vec::new();
            }
            let entries = map.range((lower_key.as_ref(), upper_key.as_ref()));
            let pick = |(key, value): (&Key, &Option<Bytes>)| (key.bytes().clone(), value.clone());
            if reverse {
                entries.rev().take(limit).map(pick).collect()
            } else {
                entries.take(limit).map(pick).collect()
            }
        };
        let pending = if bounds_ordered(lower, upper) {
            let entries = self.pending_index[namespace.index()]
                .range((lower_key.as_ref(), upper_key.as_ref()));
            let pick = |(key, (value, _)): (&Key, &(Option<Bytes>, usize))| {
                (key.bytes().clone(), value.clone())
            };
            if reverse {
                entries.rev().take(limit).map(pick).collect()
            } else {
                entries.take(limit).map(pick).collect()
            }
        } else {
            Vec::new()
        };
        let mut layers = vec![pending, range(self.dirty.rows(namespace))];
        if let Some(flushing) = &self.flushing {
            layers.push(range(flushing.rows(namespace)));
        }
        layers
    }
}

/// Whether a range is not empty by its bounds alone (a BTreeMap panics on inverted ones).
pub fn bounds_ordered(lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
    match (lower, upper) {
        (Bound::Included(low), Bound::Included(high)) => low <= high,
        (Bound::Included(low), Bound::Excluded(high))
        | (Bound::Excluded(low), Bound::Included(high)) => low < high,
        (Bound::Excluded(low), Bound::Excluded(high)) => low < high,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &str, value: &str) -> RowChange {
        RowChange::new(
            Namespace::Keys,
            Bytes::copy_from_slice(key.as_bytes()),
            Some(Bytes::copy_from_slice(value.as_bytes())),
        )
    }

    fn key(key: &str) -> Key {
        Key::new(Bytes::copy_from_slice(key.as_bytes()))
    }

    proptest::proptest! {
        /// Keys order exactly as their bytes do, whatever their lengths, zero bytes and shared
        /// prefixes (the inline prefix pads short keys with zeroes).
        #[test]
        fn keys_order_as_their_bytes(
            a in proptest::collection::vec(proptest::prop_oneof![proptest::strategy::Just(0u8), proptest::prelude::any::<u8>()], 0..72),
            b in proptest::collection::vec(proptest::prop_oneof![proptest::strategy::Just(0u8), proptest::prelude::any::<u8>()], 0..72),
            shared in 0usize..48,
        ) {
            // Often a common start, so that the prefix is equal and the bytes decide.
            let mut b = b;
            let common = shared.min(a.len());
            b.splice(0..0, a[..common].iter().copied());
            let (left, right) = (Key::new(Bytes::from(a.clone())), Key::new(Bytes::from(b.clone())));
            proptest::prop_assert_eq!(left.cmp(&right), a.cmp(&b));
            proptest::prop_assert_eq!(left == right, a == b);
        }
    }

    #[test]
    fn short_keys_and_zero_bytes_order_as_bytes() {
        let mut keys: Vec<&[u8]> = vec![
            b"",
            b"\0",
            b"a",
            b"a\0",
            b"a\0\0",
            b"ab",
            b"b",
            b"key:0000000000000001",
            b"key:000000000000001",
        ];
        keys.sort();
        let mut sorted: Vec<Key> =
            keys.iter().map(|k| Key::new(Bytes::copy_from_slice(k))).collect();
        sorted.reverse();
        sorted.sort();
        assert_eq!(
            sorted.iter().map(|k| k.bytes().to_vec()).collect::<Vec<_>>(),
            keys.iter().map(|k| k.to_vec()).collect::<Vec<_>>()
        );
    }

    fn known(value: &str) -> Lookup {
        Lookup::Known(Some(Bytes::copy_from_slice(value.as_bytes())))
    }

    const K: Namespace = Namespace::Keys;

    #[test]
    fn layers_shadow_in_order_and_promotion_keeps_scn_order() {
        let mut cache = Cache::new(Scn(0));
        cache.add_pending(Scn(1), vec![put("a", "1")], 0);
        cache.add_pending(Scn(2), vec![put("a", "2"), put("b", "1")], 0);
        cache.add_pending(Scn(3), vec![RowChange::new(K, Bytes::from_static(b"b"), None)], 0);
        assert_eq!(cache.lookup(K, b"a"), known("2"));
        assert_eq!(cache.lookup(K, b"b"), Lookup::Known(None));
        assert_eq!(cache.lookup(K, b"c"), Lookup::Store);
        assert_eq!(cache.lookup(Namespace::Elements, b"a"), Lookup::Store);
        cache.promote(Scn(1));
        assert_eq!(cache.promoted_scn(), Scn(1));
        // a's latest value is still the pending one.
        assert_eq!(cache.lookup(K, b"a"), known("2"));
        let (flushing, scn) = cache.begin_checkpoint();
        assert_eq!(scn, Scn(1));
        assert_eq!(
            flushing.get(K, &key("a")),
            Some(&Some(Bytes::from_static(b"1"))),
            "only durable changes are checkpointed"
        );
        assert_eq!(flushing.len(), 1);
        cache.promote(Scn(3));
        assert_eq!(cache.lookup(K, b"b"), Lookup::Known(None));
        assert_eq!(cache.lookup(K, b"a"), known("2"));
        cache.end_checkpoint(&flushing);
        assert_eq!(cache.lookup(K, b"a"), known("2"));
        let (second, scn) = cache.begin_checkpoint();
        assert_eq!(scn, Scn(3));
        assert_eq!(second.len(), 2);
        cache.end_checkpoint(&second);
        assert_eq!(cache.lookup(K, b"a"), Lookup::Store);
        assert_eq!(cache.unwritten_bytes(), 0);
    }

    #[test]
    fn a_failed_checkpoint_is_merged_into_the_next() {
        let mut cache = Cache::new(Scn(0));
        cache.add_pending(Scn(1), vec![put("a", "1"), put("b", "1")], 0);
        cache.promote(Scn(1));
        let (_failed, _) = cache.begin_checkpoint();
        cache.add_pending(Scn(2), vec![put("a", "2"), put("c", "2")], 0);
        cache.promote(Scn(2));
        let (retry, scn) = cache.begin_checkpoint();
        assert_eq!(scn, Scn(2));
        assert_eq!(retry.get(K, &key("a")), Some(&Some(Bytes::from_static(b"2"))));
        assert_eq!(retry.get(K, &key("b")), Some(&Some(Bytes::from_static(b"1"))));
        // A row only the newer changes had is found in the merged layer (its filter too).
        assert_eq!(retry.get(K, &key("c")), Some(&Some(Bytes::from_static(b"2"))));
        assert_eq!(cache.lookup(K, b"c"), Lookup::Known(Some(Bytes::from_static(b"2"))));
    }

    proptest::proptest! {
        /// Whatever the layers a row went through (pending, dirty, flushing, a failed
        /// checkpoint merged into the next), a lookup finds its latest value: the layers'
        /// filters never hide a row they hold. Rows of every namespace, short keys and keys
        /// longer than the inline prefix that share it.
        #[test]
        fn a_lookup_finds_the_latest_value_through_every_layer(
            steps in proptest::collection::vec((0u8..6, 0usize..4, 0u16..300, proptest::option::of(0u8..8)), 1..400)
        ) {
            let mut cache = Cache::new(Scn(0));
            let mut model = BTreeMap::new();
            let mut scn = 0;
            let mut flushing = None;
            let row = |number: u16| -> Bytes {
                if number.is_multiple_of(2) {
                    Bytes::from(format!("k{number}"))
                } else {
                    Bytes::from(format!("a shared prefix of thirty-one b{number}"))
                }
            };
            for (action, namespace, number, value) in steps {
                let namespace = Namespace::ALL[namespace];
                match action {
                    0..=2 => {
                        scn += 1;
                        let value = value.map(|value| Bytes::from(vec![value]));
                        model.insert((namespace, row(number)), (value.clone(), scn));
                        cache.add_pending(Scn(scn), vec![RowChange::new(namespace, row(number), value)], 0);
                    }
                    3 => cache.promote(Scn(scn)),
                    4 => flushing = Some(cache.begin_checkpoint()),
                    // A checkpoint that succeeded: the rows it wrote, those whose latest change
                    // is at or below its SCN, leave the cache (the data files have them).
                    _ => if let Some((written, written_scn)) = flushing.take() {
                        cache.end_checkpoint(&written);
                        model.retain(|_, (_, scn)| Scn(*scn) > written_scn);
                    }
                }
                for ((namespace, row), (value, _)) in &model {
                    proptest::prop_assert_eq!(cache.lookup(*namespace, row), Lookup::Known(value.clone()));
                }
            }
        }
    }

    #[test]
    fn ranges_go_either_way_and_never_panic_on_inverted_bounds() {
        let mut cache = Cache::new(Scn(0));
        cache.add_pending(Scn(1), vec![put("a", "1"), put("b", "2"), put("c", "3")], 0);
        let keys = |layers: Vec<Vec<(Bytes, Option<Bytes>)>>| -> Vec<Bytes> {
            layers[0].iter().map(|(key, _)| key.clone()).collect()
        };
        let forward =
            cache.layers_range(K, Bound::Included(b"a"), Bound::Excluded(b"c"), false, 10);
        assert_eq!(keys(forward), vec![Bytes::from("a"), Bytes::from("b")]);
        let backward = cache.layers_range(K, Bound::Unbounded, Bound::Unbounded, true, 2);
        assert_eq!(keys(backward), vec![Bytes::from("c"), Bytes::from("b")]);
        let inverted =
            cache.layers_range(K, Bound::Included(b"c"), Bound::Excluded(b"a"), false, 10);
        assert!(inverted.iter().all(Vec::is_empty));
    }
}
