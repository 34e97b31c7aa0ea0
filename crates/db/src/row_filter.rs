//! A filter of every key and element row in the data files, so that a lookup of a row they do
//! not hold skips the search of their B-tree.
//!
//! Why: a write of a new hash field, set member or sorted-set member must know whether the row
//! exists (HSET's and SADD's replies count the new ones; a ZADD replaces the old score's row).
//! When no cache layer holds it, that was a search of redb's tree: a walk of pages through
//! redb's page cache with a key comparison at each level. Profiled with the server on one CPU
//! under `redis-benchmark -c 50 -r 1000000`: 18–35 % of the user-space CPU of the sessions'
//! worker on an HSET, ZADD or SADD over a data file of a few million rows; 12.4 % of the
//! worker's whole CPU (kernel included) on the third round of HSETs after three of SETs, 4.9 %
//! with this filter. Most such rows do not exist, and the filter says so from one cache line.
//!
//! A split-block Bloom filter, like the cache layers' (`key_filter`), with atomic words: the
//! checkpointer sets bits while sessions test them. About 1.5 bytes a row, for ~1 % false
//! positives when full; a false positive costs the search it would have cost anyway, and a
//! row is never reported absent once inserted. Deleted rows stay in (their bits are shared), so
//! the count of rows it holds only grows; when it passes the filter's capacity a new filter is
//! built in the background from the data files, for twice the rows they hold, bounded by
//! `[db] row_filter_max` (while it is built the old one answers: twice that at most).
//!
//! Why it never says "absent" of a row the data files hold (the invariant):
//! - The data files change only by a checkpoint's write transaction (`Store::write_checkpoint`),
//!   which holds `writer` from before its first insert to after its commit, and sets the
//!   bits of every key and element row it adds (one the data files did not hold: a row's
//!   bits depend on its name alone, so replacing the value of a row they hold changes nothing
//!   a filter answers), in every filter registered (answering or being built), before its
//!   commit.
//! - A build registers its filter under `writer`, so every checkpoint that does not set its
//!   bits has committed before the registration; it then reads the data files, in chunks, each
//!   from a read transaction begun after the registration. A row the data files hold at the end
//!   of the build was either there since the registration (then its chunk read it) or added
//!   by a checkpoint after it (which set its bits).
//! - Only then does the filter answer lookups, and checkpoints go on setting its bits.
//!
//! Until a filter is built (at open: about a second per million rows, at a low CPU priority),
//! every lookup searches the data files as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};

use crate::key_filter::{SALT, bit, finish, mix};
use crate::layout::Namespace;

/// Bits per row: about 1 % false positives at capacity.
const BITS_PER_ROW: u64 = 12;

/// Rows a filter holds at least (6 MiB): a benchmark's few million rows need no rebuild.
const MIN_CAPACITY: u64 = 4 << 20;

/// Whether rows of `namespace` are in the filter: keys and elements, which writes look up.
pub(crate) fn filtered(namespace: Namespace) -> bool {
    matches!(namespace, Namespace::Keys | Namespace::Elements)
}

/// One filter: a fixed number of 256-bit blocks.
pub(crate) struct Filter {
    words: Box<[AtomicU32]>,
    blocks: u64,
    capacity: u64,
    /// Rows inserted, counting a row again when a later checkpoint inserts it anew after a
    /// delete: an upper bound of the distinct rows it holds.
    rows: AtomicU64,
}

impl Filter {
    fn new(capacity: u64) -> Filter {
        let blocks = (capacity * BITS_PER_ROW).div_ceil(256).max(1);
        Filter {
            words: zeroed_words(blocks as usize * 8),
            blocks,
            capacity,
            rows: AtomicU64::new(0),
        }
    }

    fn block(&self, hash: u64) -> usize {
        // The high half picks the block (a multiply-shift, no division), the low half the bits.
        ((((hash >> 32) * self.blocks) >> 32) * 8) as usize
    }

    /// Sets the row's bits. `Relaxed`: a lookup that must see them is ordered after this by a
    /// lock (the checkpoint's commit, then the cache's, before the cache lets go of the row).
    pub(crate) fn insert(&self, hash: u64) {
        let block = &self.words[self.block(hash)..][..8];
        for (word, salt) in block.iter().zip(SALT) {
            word.fetch_or(bit(hash as u32, salt), Ordering::Relaxed);
        }
    }

    fn may_contain(&self, hash: u64) -> bool {
        let block = &self.words[self.block(hash)..][..8];
        block.iter().zip(SALT).all(|(word, salt)| {
            let bit = bit(hash as u32, salt);
            word.load(Ordering::Relaxed) & bit == bit
        })
    }

    /// Counts rows that a checkpoint inserted and the data files did not hold.
    pub(crate) fn add_rows(&self, rows: u64) {
        self.rows.fetch_add(rows, Ordering::Relaxed);
    }

    fn full(&self) -> bool {
        self.rows.load(Ordering::Relaxed) > self.capacity
    }

    fn bytes(&self) -> u64 {
        self.blocks * 32
    }
}

/// `n` words of zeros, allocated zeroed: the kernel's zero pages until first written. Rows
/// land in random blocks, so a few thousand rows touch every page of a 6 MiB filter; only a
/// database with fewer (each test's) keeps most of it unallocated.
fn zeroed_words(n: usize) -> Box<[AtomicU32]> {
    const { assert!(std::mem::align_of::<AtomicU32>() == std::mem::align_of::<u32>()) };
    let words: Box<[u32]> = vec![0u32; n].into_boxed_slice();
    // SAFETY: `AtomicU32` has the same size and bit validity as `u32` and (asserted above) the
    // same alignment, so the slice is a valid `[AtomicU32]`; the box owns it alone.
    unsafe { Box::from_raw(Box::into_raw(words) as *mut [AtomicU32]) }
}

/// A 64-bit hash of a row of `namespace`.
pub(crate) fn hash(namespace: Namespace, row: &[u8]) -> u64 {
    let mut hash = mix(namespace.index() as u64 ^ 0x9e37_79b9_7f4a_7c15, row.len() as u64);
    let mut chunks = row.chunks_exact(8);
    for chunk in &mut chunks {
        hash = mix(hash, u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        let mut word = [0u8; 8];
        word[..tail.len()].copy_from_slice(tail);
        hash = mix(hash, u64::from_le_bytes(word));
    }
    finish(hash)
}

/// Reads a chunk of a namespace's rows for a build (`RowFilter::run_builder`).
pub(crate) type Scan<'a> =
    dyn FnMut(Namespace, &mut Option<Vec<u8>>, &mut dyn FnMut(&[u8])) -> Option<bool> + 'a;

/// The filters a checkpoint sets its rows' bits in, and the lock it holds until its commit.
pub(crate) struct Writing<'a> {
    _writer: MutexGuard<'a, Registered>,
    pub(crate) filters: Vec<Arc<Filter>>,
}

#[derive(Default)]
struct Registered {
    /// A filter being built (its bits set by checkpoints already).
    building: Option<Arc<Filter>>,
}

#[derive(Default)]
struct Wanted {
    /// A build is wanted (at open, and when the answering filter is full).
    build: bool,
    stop: bool,
}

/// What the row filter is now, for the status.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RowFilterStatus {
    /// Memory of the answering filter.
    pub bytes: u64,
    /// Rows it has room for (about 1 % false positives when it holds this many).
    pub capacity: u64,
    /// Rows it holds, at most (deleted rows stay in until it is built again).
    pub rows: u64,
    /// Lookups it answered "absent" without a search of the data files, since the open.
    pub ruled_out: u64,
}

/// The data files' filter, and what builds it.
pub(crate) struct RowFilter {
    /// Lookups answered "absent" (`RowFilterStatus::ruled_out`).
    ruled_out: AtomicU64,
    /// At most this much memory for one filter (0: no filter at all).
    max_bytes: u64,
    /// The filter answering lookups, once one is built.
    answering: RwLock<Option<Arc<Filter>>>,
    /// Held by a checkpoint from before its first insert to after its commit.
    writer: Mutex<Registered>,
    wanted: Mutex<Wanted>,
    wake: Condvar,
}

impl RowFilter {
    pub(crate) fn new(max_bytes: u64) -> RowFilter {
        RowFilter {
            ruled_out: AtomicU64::new(0),
            max_bytes,
            answering: RwLock::new(None),
            writer: Mutex::new(Registered::default()),
            wanted: Mutex::new(Wanted { build: max_bytes > 0, stop: false }),
            wake: Condvar::new(),
        }
    }

    /// True when the data files certainly do not hold `row` of `namespace`.
    pub(crate) fn rules_out(&self, namespace: Namespace, row: &[u8]) -> bool {
        if !filtered(namespace) {
            return false;
        }
        let ruled_out = match &*self.answering.read() {
            Some(filter) => !filter.may_contain(hash(namespace, row)),
            None => false,
        };
        if ruled_out {
            self.ruled_out.fetch_add(1, Ordering::Relaxed);
        }
        ruled_out
    }

    /// The answering filter, if one is built.
    pub(crate) fn status(&self) -> Option<RowFilterStatus> {
        self.answering.read().as_ref().map(|filter| RowFilterStatus {
            bytes: filter.bytes(),
            capacity: filter.capacity,
            rows: filter.rows.load(Ordering::Relaxed),
            ruled_out: self.ruled_out.load(Ordering::Relaxed),
        })
    }

    /// For a checkpoint: the filters to set its rows' bits in, holding off a build's
    /// registration until it is dropped (after the checkpoint's commit).
    pub(crate) fn writing(&self) -> Writing<'_> {
        let writer = self.writer.lock();
        let mut filters: Vec<Arc<Filter>> = self.answering.read().iter().cloned().collect();
        filters.extend(writer.building.iter().cloned());
        Writing { _writer: writer, filters }
    }

    /// After a checkpoint: asks for a larger filter if the answering one is full.
    pub(crate) fn checkpointed(&self) {
        let full = self.answering.read().as_ref().is_some_and(|filter| filter.full());
        if full {
            self.want_build();
        }
    }

    pub(crate) fn want_build(&self) {
        let mut wanted = self.wanted.lock();
        if !wanted.build {
            wanted.build = true;
            self.wake.notify_all();
        }
    }

    /// Ends `run_builder` (at shutdown).
    pub(crate) fn stop(&self) {
        self.wanted.lock().stop = true;
        self.wake.notify_all();
    }

    fn stopped(&self) -> bool {
        self.wanted.lock().stop
    }

    /// After a build that could not read the data files: wants another in a second (unless
    /// stopped meanwhile).
    fn retry_later(&self) {
        let mut wanted = self.wanted.lock();
        if !wanted.stop {
            self.wake.wait_for(&mut wanted, Duration::from_secs(1));
            wanted.build = true;
        }
    }

    /// Waits until a build is wanted; false once stopped.
    fn next_build(&self) -> bool {
        let mut wanted = self.wanted.lock();
        loop {
            if wanted.stop {
                return false;
            }
            if wanted.build {
                wanted.build = false;
                return true;
            }
            // `want_build` and `stop` change `wanted` under its lock and then notify.
            self.wake.wait(&mut wanted);
        }
    }

    /// The capacity, in rows, of a filter for `rows` rows now in the data files: room for
    /// twice as many (and at least `MIN_CAPACITY`), within `max_bytes`.
    fn capacity_for(&self, rows: u64) -> u64 {
        let wanted = rows.saturating_mul(2).max(MIN_CAPACITY);
        let most = self.max_bytes.saturating_mul(8) / BITS_PER_ROW;
        wanted.min(most).max(1)
    }

    /// The builder thread's loop: builds a filter at open and whenever the answering one is
    /// full, until `stop`. `rows` counts the rows now in the data files; `scan` reads a
    /// chunk of them from a read transaction it begins, in key order, from after the last it
    /// gave, calling its argument with each row: `Some(false)` when it has read them all,
    /// `None` when it could not read (the data file closed after a failed checkpoint: the build
    /// is tried again a second later).
    pub(crate) fn run_builder(&self, rows: &dyn Fn() -> Option<u64>, scan: &mut Scan<'_>) {
        while self.next_build() {
            let Some(now) = rows() else {
                self.retry_later();
                continue;
            };
            if let Some(answering) = &*self.answering.read() {
                // Asked for before the last build was published: that one has room.
                if !answering.full() {
                    continue;
                }
                // A new one would be over three quarters full at once (the rows live now are
                // near what `max_bytes` allows): the full one answers on, with more false
                // positives, until deletes leave room for one that stays useful a while.
                if now.saturating_mul(4) > self.capacity_for(now).saturating_mul(3) {
                    continue;
                }
            }
            let started = std::time::Instant::now();
            let filter = Arc::new(Filter::new(self.capacity_for(now)));
            self.writer.lock().building = Some(filter.clone());
            let mut inserted = 0u64;
            let mut read = Some(true);
            'namespaces: for namespace in [Namespace::Keys, Namespace::Elements] {
                let mut after = None;
                loop {
                    if self.stopped() {
                        read = None;
                        break 'namespaces;
                    }
                    read = scan(namespace, &mut after, &mut |row| {
                        filter.insert(hash(namespace, row));
                        inserted += 1;
                    });
                    match read {
                        Some(true) => {}
                        Some(false) => break,
                        None => break 'namespaces,
                    }
                }
            }
            let mut writer = self.writer.lock();
            writer.building = None;
            if read.is_none() {
                drop(writer);
                self.retry_later();
                continue;
            }
            filter.add_rows(inserted);
            let (capacity, bytes) = (filter.capacity, filter.bytes());
            *self.answering.write() = Some(filter);
            drop(writer);
            tracing::info!(
                rows = inserted,
                capacity,
                bytes,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "the data files' row filter is built"
            );
        }
    }

    /// Whether a filter answers lookups (for tests).
    #[cfg(test)]
    pub(crate) fn answering(&self) -> bool {
        self.answering.read().is_some()
    }

    /// Whether the answering filter may hold `row` (for tests).
    #[cfg(test)]
    pub(crate) fn may_contain(&self, namespace: Namespace, row: &[u8]) -> bool {
        self.answering
            .read()
            .as_ref()
            .is_some_and(|filter| filter.may_contain(hash(namespace, row)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_inserted_is_never_ruled_out_and_most_others_are() {
        let filter = Filter::new(100_000);
        for n in 0..100_000u32 {
            filter.insert(hash(Namespace::Elements, format!("member:{n}").as_bytes()));
        }
        for n in 0..100_000u32 {
            assert!(
                filter.may_contain(hash(Namespace::Elements, format!("member:{n}").as_bytes()))
            );
        }
        let false_positives = (100_000..200_000u32)
            .filter(|n| {
                filter.may_contain(hash(Namespace::Elements, format!("member:{n}").as_bytes()))
            })
            .count();
        assert!(false_positives < 2_000, "{false_positives} false positives in 100 000");
        // Another namespace's row of the same bytes is another row.
        let other = (0..100_000u32)
            .filter(|n| filter.may_contain(hash(Namespace::Keys, format!("member:{n}").as_bytes())))
            .count();
        assert!(other < 2_000, "{other} rows of another namespace said present");
    }

    #[test]
    fn the_capacity_is_twice_the_rows_within_the_memory_allowed() {
        let filter = RowFilter::new(256 << 20);
        assert_eq!(filter.capacity_for(10), MIN_CAPACITY);
        assert_eq!(filter.capacity_for(10_000_000), 20_000_000);
        assert_eq!(filter.capacity_for(1 << 40), (256u64 << 20) * 8 / BITS_PER_ROW);
        assert!(Filter::new(filter.capacity_for(1 << 40)).bytes() <= (256 << 20) + 32);
    }

    #[test]
    fn without_a_filter_nothing_is_ruled_out() {
        let filter = RowFilter::new(0);
        assert!(!filter.rules_out(Namespace::Keys, b"key"));
        assert!(!filter.next_build_wanted());
    }

    #[test]
    fn a_full_filter_is_built_again_from_the_live_rows_and_a_stale_request_builds_nothing() {
        use std::sync::atomic::AtomicUsize;
        // 8 192 rows at most: the live rows stay 1 000 while 9 000 new ones replace old ones.
        let filter = Arc::new(RowFilter::new(12 << 10));
        let live = Arc::new(Mutex::new((0..1000u32).collect::<Vec<_>>()));
        let builds = Arc::new(AtomicUsize::new(0));
        let builder = {
            let (filter, live, builds) = (filter.clone(), live.clone(), builds.clone());
            std::thread::spawn(move || {
                let rows = || Some(live.lock().len() as u64);
                let mut scan = |namespace: Namespace,
                                _after: &mut Option<Vec<u8>>,
                                each: &mut dyn FnMut(&[u8])| {
                    if namespace == Namespace::Keys {
                        builds.fetch_add(1, Ordering::SeqCst);
                        for n in live.lock().iter() {
                            each(format!("key:{n}").as_bytes());
                        }
                    }
                    Some(false)
                };
                filter.run_builder(&rows, &mut scan);
            })
        };
        let wait = |what: &str, done: &dyn Fn() -> bool| {
            let deadline = std::time::Instant::now() + Duration::from_secs(20);
            while !done() {
                assert!(std::time::Instant::now() < deadline, "timed out waiting until {what}");
                std::thread::sleep(Duration::from_millis(2));
            }
        };
        wait("the first build", &|| filter.answering());
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        // A request while the filter has room builds nothing.
        filter.want_build();
        wait("the request is taken", &|| !filter.next_build_wanted());
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        // Churn: checkpoints insert 9 000 new rows and delete as many old ones.
        for n in 1000..10_000u32 {
            let writing = filter.writing();
            for target in &writing.filters {
                target.insert(hash(Namespace::Keys, format!("key:{n}").as_bytes()));
                target.add_rows(1);
            }
            drop(writing);
            let mut live = live.lock();
            live.remove(0);
            live.push(n);
        }
        filter.checkpointed();
        wait("a build from the live rows", &|| {
            builds.load(Ordering::SeqCst) == 2 && !filter.answering.read().as_ref().unwrap().full()
        });
        for n in 9000..10_000u32 {
            assert!(filter.may_contain(Namespace::Keys, format!("key:{n}").as_bytes()));
        }
        let old = (0..1000u32)
            .filter(|n| filter.may_contain(Namespace::Keys, format!("key:{n}").as_bytes()))
            .count();
        assert!(old < 100, "{old} of 1 000 deleted rows still in");
        filter.stop();
        builder.join().unwrap();
    }

    impl RowFilter {
        fn next_build_wanted(&self) -> bool {
            self.wanted.lock().build
        }
    }
}
