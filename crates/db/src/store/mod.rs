//! The data files: the key space at the last checkpoint, kept by redb on the redo engine's
//! storage seam (so that a power cut in the middle of a checkpoint can be simulated).
//!
//! The data files are never the durability mechanism; the redo log is. They are written only
//! by checkpoints, each one redb write transaction committed durably that holds the changed
//! rows *and* the checkpoint SCN, so the two can never disagree after a crash.
//!
//! One table per namespace of `layout` (`kv` for keys, `elements`, `expires`, `garbage`), and
//! `meta`. A checkpoint learns what each key row it writes replaced (redb's insert returns it
//! anyway): the data files' count of keys (`key_count`), and what a write that did not read
//! the key could not know: the replaced row's expires entry, and a replaced collection's id,
//! whose elements become garbage. It then removes garbage elements, a bounded number per
//! checkpoint (`GARBAGE_ROWS_PER_CHECKPOINT_MAX`), so a DEL of a large collection costs one
//! row in the redo and its elements go in the background.
//!
//! `backend`: redb's storage on the seam; `garbage`: what a checkpoint learns and the garbage
//! it removes; `row_cache`: the data files' key rows in memory, for point reads;
//! `snapshot`: a consistent view read in key order (a copy's source).

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use parking_lot::{MappedRwLockReadGuard, RwLock, RwLockReadGuard};
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use redo::storage::Storage;
use redo::{DatabaseId, Scn};

use crate::cache::Layer;
use crate::error::DbError;
use crate::layout::{self, Namespace};
use crate::row_filter::{self, RowFilter};

mod backend;
mod garbage;
mod row_cache;
mod snapshot;

use backend::{BackendFlags, open_database};
use garbage::{Learnt, collect_garbage};
use row_cache::RowCache;
pub use row_cache::RowCacheStatus;
pub use snapshot::{Pairs, StoreSnapshot, untag};

type Table = TableDefinition<'static, &'static [u8], &'static [u8]>;
const KV: Table = TableDefinition::new("kv");
const ELEMENTS: Table = TableDefinition::new("elements");
const EXPIRES: Table = TableDefinition::new("expires");
const GARBAGE: Table = TableDefinition::new("garbage");
/// The table of each namespace, in `Namespace::ALL` order.
const TABLES: [Table; Namespace::COUNT] = [KV, ELEMENTS, EXPIRES, GARBAGE];
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const META_CHECKPOINT_SCN: &str = "checkpoint_scn";
const META_DATABASE_ID: &str = "database_id";
/// The layout of the rows (`layout`): 2 since typed key rows; files without it hold version
/// 1's plain string values in `kv`, which opening migrates.
const META_LAYOUT: &str = "layout";
const LAYOUT: u64 = 2;

/// Garbage element rows a checkpoint removes at most (a DEL of a collection of millions is
/// spread over checkpoints, each bounded in time).
pub const GARBAGE_ROWS_PER_CHECKPOINT_MAX: usize = 65_536;

/// Rows the row filter's builder reads per read transaction (about a millisecond, holding
/// the data file's read lock, which a reopen or shutdown waits for).
const FILTER_SCAN_ROWS: usize = 4_096;

/// What the data files say about themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub checkpoint_scn: Scn,
    pub database_id: Option<DatabaseId>,
}

/// A changed row to write at a checkpoint: the new value, or `None` to delete it.
pub type Changed = std::collections::BTreeMap<crate::cache::Key, Option<Bytes>>;

/// The tables of one read transaction, one per namespace.
type KeptTables = [redb::ReadOnlyTable<&'static [u8], &'static [u8]>; Namespace::COUNT];

/// The memory a store may take.
#[derive(Debug, Clone, Copy, Default)]
pub struct Sizes {
    /// redb's page cache.
    pub cache_bytes: u64,
    /// The row filter, at most (`row_filter`).
    pub row_filter_max: u64,
    /// The row cache, at most (`row_cache`).
    pub row_cache_bytes: u64,
}

pub struct Store {
    /// `None` while closed after a failed checkpoint, until it is reopened.
    db: RwLock<Option<redb::Database>>,
    /// The key table in a read transaction kept open from one checkpoint to the next: a point
    /// read (a GET, or a conditional write looking up whether its key exists, when no cache
    /// layer knows) then costs no transaction and no table opening. Only checkpoints change
    /// the data files; each drops it once its commit is durable, before the cache lets go of
    /// what it wrote, so no read ever sees the data files older than the cache assumes. Used
    /// and dropped only under `db`'s lock, so it never outlives the database it reads. The
    /// number counts the times it was dropped: a table opened before a drop is never kept
    /// after it.
    reader: parking_lot::Mutex<(u64, Option<Arc<KeptTables>>)>,
    path: PathBuf,
    storage: Arc<dyn Storage>,
    cache_bytes: u64,
    flags: Arc<BackendFlags>,
    /// Closed for good (shutdown).
    closed: AtomicBool,
    /// Whether the garbage table may hold ids (a checkpoint with nothing else to write still
    /// removes garbage then).
    garbage_pending: AtomicBool,
    /// A far sync's empty key space (`without_data_files`): never on disk, never reopened.
    in_memory: bool,
    /// Which key and element rows the data files certainly do not hold (`row_filter`).
    row_filter: RowFilter,
    /// Key rows the data files hold, in memory (`row_cache`).
    row_cache: RowCache,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

fn store_error(path: &Path, what: &str) -> impl Fn(&dyn std::fmt::Display) -> DbError {
    let path = path.to_path_buf();
    let what = what.to_string();
    move |error| DbError::Store { path: path.clone(), reason: format!("{what}: {error}") }
}

impl Store {
    /// Opens the data file at `path`, creating it if missing, with redb's page cache of
    /// `sizes.cache_bytes`. Its row filter takes at most `sizes.row_filter_max` bytes (0:
    /// none); it answers once `run_row_filter_builder` built it. Its row cache holds at most
    /// `sizes.row_cache_bytes` (0: none).
    pub fn open(storage: &Arc<dyn Storage>, path: &Path, sizes: Sizes) -> Result<Store, DbError> {
        let flags = Arc::new(BackendFlags::default());
        let db = open_database(storage, path, sizes.cache_bytes, &flags)?;
        Store::initialised(db, storage, path, sizes, flags, false)
    }

    /// The key space of a far sync, which has no data files: empty tables in memory that
    /// nothing writes (a far sync neither applies redo nor checkpoints) and no client reads
    /// (its RESP port refuses the key space). Nothing of it is ever on disk.
    pub fn without_data_files(storage: &Arc<dyn Storage>) -> Result<Store, DbError> {
        let path = Path::new("(none: a far sync has no data files)");
        let db = redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(|error| store_error(path, "open")(&error))?;
        Store::initialised(db, storage, path, Sizes::default(), Arc::default(), true)
    }

    fn initialised(
        db: redb::Database,
        storage: &Arc<dyn Storage>,
        path: &Path,
        sizes: Sizes,
        flags: Arc<BackendFlags>,
        in_memory: bool,
    ) -> Result<Store, DbError> {
        // Make sure every table exists, so that readers never see "no such table", and that the
        // rows are of this layout.
        let fail = store_error(path, "initialise");
        let transaction = db.begin_write().map_err(|error| fail(&error))?;
        let garbage_pending;
        {
            for table in TABLES {
                transaction.open_table(table).map_err(|error| fail(&error))?;
            }
            let mut meta = transaction.open_table(META).map_err(|error| fail(&error))?;
            let layout = meta.get(META_LAYOUT).map_err(|error| fail(&error))?.map(|v| v.value());
            match layout {
                Some(LAYOUT) => {}
                Some(other) => {
                    return Err(fail(&format!(
                        "the data files are of layout {other}; this version reads layout {LAYOUT} (and migrates 1)"
                    )));
                }
                None => {
                    let migrated =
                        migrate_plain_strings(&transaction).map_err(|error| fail(&error))?;
                    if migrated > 0 {
                        tracing::info!(path = %path.display(), keys = migrated, "data files migrated from layout 1 (plain strings) to layout {LAYOUT}");
                    }
                    meta.insert(META_LAYOUT, LAYOUT).map_err(|error| fail(&error))?;
                }
            }
            let garbage = transaction.open_table(GARBAGE).map_err(|error| fail(&error))?;
            garbage_pending = !garbage.is_empty().map_err(|error| fail(&error))?;
        }
        transaction.commit().map_err(|error| fail(&error))?;
        Ok(Store {
            db: RwLock::new(Some(db)),
            reader: parking_lot::Mutex::new((0, None)),
            path: path.to_path_buf(),
            storage: storage.clone(),
            cache_bytes: sizes.cache_bytes,
            flags,
            closed: AtomicBool::new(false),
            garbage_pending: AtomicBool::new(garbage_pending),
            in_memory,
            row_filter: RowFilter::new(sizes.row_filter_max),
            row_cache: RowCache::new(sizes.row_cache_bytes),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open data file, or an error saying it is closed after a failed checkpoint.
    fn database(&self, what: &str) -> Result<MappedRwLockReadGuard<'_, redb::Database>, DbError> {
        RwLockReadGuard::try_map(self.db.read(), Option::as_ref).map_err(|_| {
            store_error(&self.path, what)(
                &"closed after a failed checkpoint; it is reopened when a checkpoint is retried",
            )
        })
    }

    /// Closes the data file now (at shutdown), rather than when the last reference to this
    /// store goes: a role change opens the same file again at once, and two open instances
    /// of it (the old one writing its allocator state when it is finally dropped) would
    /// corrupt it. Waits for readers; afterwards every use is an error and nothing reopens
    /// it.
    pub fn close(&self) {
        self.closed.store(true, std::sync::atomic::Ordering::Release);
        self.row_filter.stop();
        let mut db = self.db.write();
        // No reader holds a table now (they hold `db`'s read lock while they do).
        self.drop_reader();
        let database = db.take();
        drop(db);
        drop(database);
        self.row_cache.clear();
    }

    /// Drops the kept read transaction (`reader`); the next read opens one on the data files
    /// as they are now.
    fn drop_reader(&self) {
        let mut reader = self.reader.lock();
        reader.0 += 1;
        reader.1 = None;
    }

    /// Reopens the data file if a failed checkpoint closed it.
    fn reopen(&self) -> Result<(), DbError> {
        let mut db = self.db.write();
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(store_error(&self.path, "reopen")(&"the database is shut down"));
        }
        if self.in_memory {
            return Err(store_error(&self.path, "reopen")(&"a far sync has no data files"));
        }
        if db.is_none() {
            *db = Some(open_database(&self.storage, &self.path, self.cache_bytes, &self.flags)?);
            tracing::info!(path = %self.path.display(), "data file reopened after a failed checkpoint");
        }
        Ok(())
    }

    pub fn meta(&self) -> Result<Meta, DbError> {
        let fail = store_error(&self.path, "read the checkpoint");
        let db = self.database("read the checkpoint")?;
        let transaction = db.begin_read().map_err(|error| fail(&error))?;
        let table = transaction.open_table(META).map_err(|error| fail(&error))?;
        let get = |key: &str| -> Result<Option<u64>, DbError> {
            Ok(table.get(key).map_err(|error| fail(&error))?.map(|value| value.value()))
        };
        Ok(Meta {
            checkpoint_scn: Scn(get(META_CHECKPOINT_SCN)?.unwrap_or(0)),
            database_id: get(META_DATABASE_ID)?.map(DatabaseId),
        })
    }

    /// Runs `read` on the kept read transaction's tables (opened now if none is kept).
    fn with_tables<T>(
        &self,
        what: &str,
        read: impl FnOnce(&KeptTables) -> Result<T, redb::StorageError>,
    ) -> Result<T, DbError> {
        self.with_tables_at(what, read).map(|(result, _)| result)
    }

    /// `with_tables`, and the reader's generation the tables were taken at: no checkpoint
    /// committed since then if the generation is still the store's.
    fn with_tables_at<T>(
        &self,
        what: &str,
        read: impl FnOnce(&KeptTables) -> Result<T, redb::StorageError>,
    ) -> Result<(T, u64), DbError> {
        let fail = store_error(&self.path, what);
        let db = self.database(what)?;
        let (generation, kept) = {
            let reader = self.reader.lock();
            (reader.0, reader.1.clone())
        };
        let tables = match kept {
            Some(tables) => tables,
            None => {
                let transaction = db.begin_read().map_err(|error| fail(&error))?;
                let open = |table| transaction.open_table(table).map_err(|error| fail(&error));
                let tables = Arc::new([open(KV)?, open(ELEMENTS)?, open(EXPIRES)?, open(GARBAGE)?]);
                let mut reader = self.reader.lock();
                // Not if a checkpoint dropped the kept tables meanwhile: these may be older.
                if reader.0 == generation && reader.1.is_none() {
                    reader.1 = Some(tables.clone());
                }
                tables
            }
        };
        let result = read(&tables).map_err(|error| fail(&error));
        drop(tables);
        drop(db);
        Ok((result?, generation))
    }

    /// A key's row (`Namespace::Keys`), or any other namespace's.
    pub fn get(&self, key: &[u8]) -> Result<Option<Bytes>, DbError> {
        self.get_row(Namespace::Keys, key)
    }

    pub fn get_row(&self, namespace: Namespace, key: &[u8]) -> Result<Option<Bytes>, DbError> {
        if self.row_filter.rules_out(namespace, key) {
            // Still an error while the data file is closed, as a search would be.
            drop(self.database("read")?);
            return Ok(None);
        }
        let cached = namespace == Namespace::Keys;
        if cached && let Some(row) = self.row_cache.get(key) {
            drop(self.database("read")?);
            return Ok(Some(row));
        }
        let (row, generation) = self.search_row(namespace, key)?;
        if cached && let Some(row) = &row {
            self.keep_row(key, row, generation);
        }
        Ok(row)
    }

    /// A row as the data files' tree holds it, and the reader's generation it was read at.
    pub(crate) fn search_row(
        &self,
        namespace: Namespace,
        key: &[u8],
    ) -> Result<(Option<Bytes>, u64), DbError> {
        self.with_tables_at("read", |tables| {
            let value = tables[namespace.index()].get(key)?;
            Ok(value.map(|value| Bytes::copy_from_slice(value.value())))
        })
    }

    /// Puts a key row read at `generation` into the row cache, unless a checkpoint has
    /// committed since: under the reader's lock, which the checkpoint takes to move the
    /// generation before it replaces what it wrote (`row_cache`, the invariant).
    pub(crate) fn keep_row(&self, key: &[u8], row: &Bytes, generation: u64) {
        let key = Bytes::copy_from_slice(key);
        let reader = self.reader.lock();
        if reader.0 == generation {
            self.row_cache.put(key, row.clone());
        }
    }

    /// Number of keys in the data files.
    pub fn key_count(&self) -> Result<u64, DbError> {
        self.with_tables("count", |tables| tables[Namespace::Keys.index()].len())
    }

    /// Up to `limit` rows of `namespace` within `(lower, upper)`, in key order (descending if
    /// `reverse`).
    pub fn range(
        &self,
        namespace: Namespace,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, DbError> {
        if !crate::cache::bounds_ordered(lower, upper) {
            return Ok(Vec::new());
        }
        self.with_tables("scan", |tables| {
            let range = tables[namespace.index()].range::<&[u8]>((lower, upper))?;
            let entries: Box<dyn Iterator<Item = _>> =
                if reverse { Box::new(range.rev()) } else { Box::new(range) };
            let mut out = Vec::new();
            for entry in entries.take(limit) {
                let (key, value) = entry?;
                out.push((
                    Bytes::copy_from_slice(key.value()),
                    Bytes::copy_from_slice(value.value()),
                ));
            }
            Ok(out)
        })
    }

    /// The highest collection id the data files know (in elements or garbage), or 0.
    pub fn max_collection_id(&self) -> Result<u64, DbError> {
        self.with_tables("read the collection ids", |tables| {
            let mut max = 0u64;
            for namespace in [Namespace::Elements, Namespace::Garbage] {
                if let Some((key, _)) = tables[namespace.index()].last()? {
                    let key = key.value();
                    if key.len() >= 8 {
                        max = max.max(u64::from_be_bytes(key[..8].try_into().expect("8 bytes")));
                    }
                }
            }
            Ok(max)
        })
    }

    /// Whether garbage elements may be waiting for a checkpoint to remove them.
    pub fn garbage_pending(&self) -> bool {
        self.garbage_pending.load(Ordering::Acquire)
    }

    /// Writes `changed` and the checkpoint SCN in one transaction, durably (redb syncs the
    /// data and then its commit slot). Returns once both are on disk.
    ///
    /// `unresolved` are keys of `changed`, in key order, whose writes did not learn whether the
    /// data files held them (`key_count`): between its writes and its commit, the checkpoint
    /// calls `before_commit` with that, for each of them (what its own writes replaced).
    ///
    /// After an I/O error redb refuses every later operation ("Previous I/O error"), so a
    /// checkpoint that failed on a full disk would fail on every retry, and writes would stay
    /// refused after space returns. A failed write or resize leaves what a crash would (redb
    /// commits through copy-on-write pages and a commit slot: reopened, the file is at the
    /// last checkpoint), and the changes stay in memory for the retry: so the file is closed
    /// and reopened. Not after a failed sync: the kernel may have dropped the pages it could
    /// not write yet still serve them from its cache, so the file is trusted again only after
    /// a restart (fsync errors are not retryable).
    pub fn checkpoint(
        &self,
        changed: &Layer,
        scn: Scn,
        database_id: DatabaseId,
        unresolved: &[crate::cache::Key],
        before_commit: &mut dyn FnMut(&[bool]),
    ) -> Result<(), DbError> {
        self.checkpoint_paced(changed, scn, database_id, unresolved, before_commit, &mut || {})
    }

    /// Whether the pages a checkpoint writes from now on go to the disk as they are written
    /// (the checkpointer's, while nobody waits for its checkpoint), or all at its commit's
    /// sync (when somebody waits: then the sooner it ends, the better).
    pub(crate) fn pace_writeback(&self, on: bool) {
        self.flags.pace_writeback.store(on, Ordering::Relaxed);
    }

    /// Every how many bytes a checkpoint nobody waits for hands its pages to the device
    /// (`[db] checkpoint_flush_after`; 0: never, all at its commit).
    pub(crate) fn set_flush_after(&self, bytes: u64) {
        self.flags.flush_after.store(bytes, Ordering::Relaxed);
    }

    /// `checkpoint`, calling `pace` after each row it writes: the checkpointer spreads its
    /// writes over time by sleeping there (`checkpoint_completion_target`). One transaction
    /// all the same, committed durably at the end: readers see the data files as they were
    /// until then, and a crash in between leaves them at the previous checkpoint.
    pub fn checkpoint_paced(
        &self,
        changed: &Layer,
        scn: Scn,
        database_id: DatabaseId,
        unresolved: &[crate::cache::Key],
        before_commit: &mut dyn FnMut(&[bool]),
        pace: &mut dyn FnMut(),
    ) -> Result<(), DbError> {
        if self.db.read().is_none() && !self.flags.sync_failed.load(Ordering::Acquire) {
            self.reopen()?;
        }
        let written =
            self.write_checkpoint(changed, scn, database_id, unresolved, before_commit, pace);
        // Committed or not, reads see the data files as they are from now on (the caller lets
        // the cache go of what was written only after this returns).
        self.drop_reader();
        if written.is_ok() {
            // After the generation moved: no read of the older view puts a row from now on.
            self.row_cache.written(changed.rows(Namespace::Keys));
        }
        if written.is_err() && !self.flags.sync_failed.load(Ordering::Acquire) {
            let mut db = self.db.write();
            // Under `db`'s lock: a read may have kept a table of this instance since the drop
            // above, and none may outlive it.
            self.drop_reader();
            *db = None;
            drop(db);
            // At once if it can (so that reads of the data file go on), else at the retry.
            let _ = self.reopen();
        }
        written
    }

    fn write_checkpoint(
        &self,
        changed: &Layer,
        scn: Scn,
        database_id: DatabaseId,
        unresolved: &[crate::cache::Key],
        before_commit: &mut dyn FnMut(&[bool]),
        pace: &mut dyn FnMut(),
    ) -> Result<(), DbError> {
        let fail = store_error(&self.path, "checkpoint");
        let db = self.database("checkpoint")?;
        let transaction = db.begin_write().map_err(|error| fail(&error))?;
        // Held to after the commit: a filter being built registers only between checkpoints.
        let filters = self.row_filter.writing();
        let set_bits = |namespace: Namespace, row: &[u8]| {
            let hash = row_filter::hash(namespace, row);
            for filter in &filters.filters {
                filter.insert(hash);
            }
        };
        // Rows written that the data files did not hold.
        let mut new_rows = 0u64;
        let garbage_left;
        {
            let mut table = transaction.open_table(KV).map_err(|error| fail(&error))?;
            // What the replaced rows tell, for what their writes did not read.
            let mut learnt = Learnt::default();
            // Both in key order: walked together, each unresolved key meets its own write.
            let mut existed = Vec::with_capacity(unresolved.len());
            let mut next = unresolved.iter().peekable();
            for (key, value) in changed.rows(Namespace::Keys) {
                // An unresolved key that is not among the changes (never expected: each is
                // the key of one of them) is looked up before the writes after it.
                while let Some(lone) = next.next_if(|lone| *lone < key) {
                    existed.push(table.get(lone.as_ref()).map_err(|error| fail(&error))?.is_some());
                }
                let replaced = match value {
                    Some(value) => table.insert(key.as_ref(), value.as_ref()),
                    None => table.remove(key.as_ref()),
                }
                .map_err(|error| fail(&error))?;
                // Only a row the data files did not hold: one they held is in every filter
                // already (`row_filter`, the invariant).
                if value.is_some() && replaced.is_none() {
                    set_bits(Namespace::Keys, key.as_ref());
                    new_rows += 1;
                }
                let replaced = replaced
                    .map(|old| learnt.replaced(key.as_ref(), old.value(), value.as_deref()));
                if let Some(new) = value {
                    learnt.written(new);
                }
                if next.next_if(|lone| *lone == key).is_some() {
                    existed.push(replaced.is_some());
                }
                pace();
            }
            for lone in next {
                existed.push(table.get(lone.as_ref()).map_err(|error| fail(&error))?.is_some());
            }
            drop(table);
            for namespace in [Namespace::Elements, Namespace::Expires, Namespace::Garbage] {
                let mut table = transaction
                    .open_table(TABLES[namespace.index()])
                    .map_err(|error| fail(&error))?;
                let filtered = row_filter::filtered(namespace);
                for (key, value) in changed.rows(namespace) {
                    let new = match value {
                        Some(value) => {
                            table.insert(key.as_ref(), value.as_ref()).map(|old| old.is_none())
                        }
                        None => table.remove(key.as_ref()).map(|_| false),
                    }
                    .map_err(|error| fail(&error))?;
                    if new && filtered {
                        set_bits(namespace, key.as_ref());
                        new_rows += 1;
                    }
                    pace();
                }
            }
            {
                let mut expires = transaction.open_table(EXPIRES).map_err(|error| fail(&error))?;
                for stale in &learnt.stale_expires {
                    expires.remove(stale.as_ref()).map_err(|error| fail(&error))?;
                }
                let mut garbage = transaction.open_table(GARBAGE).map_err(|error| fail(&error))?;
                for id in learnt.dropped_ids.difference(&learnt.written_ids) {
                    garbage
                        .insert(layout::garbage_row(*id).as_ref(), &[][..])
                        .map_err(|error| fail(&error))?;
                }
            }
            garbage_left = collect_garbage(&transaction, GARBAGE_ROWS_PER_CHECKPOINT_MAX)
                .map_err(|error| fail(&error))?;
            before_commit(&existed);
            let mut meta = transaction.open_table(META).map_err(|error| fail(&error))?;
            meta.insert(META_CHECKPOINT_SCN, scn.0).map_err(|error| fail(&error))?;
            meta.insert(META_DATABASE_ID, database_id.0).map_err(|error| fail(&error))?;
        }
        transaction.commit().map_err(|error| fail(&error))?;
        for filter in &filters.filters {
            filter.add_rows(new_rows);
        }
        drop(filters);
        self.row_filter.checkpointed();
        self.garbage_pending.store(garbage_left, Ordering::Release);
        Ok(())
    }

    /// Builds the row filter at open, and a larger one whenever it is full, until the store
    /// closes (`Store::close`): the loop of the database's thread `db-filter`.
    pub fn run_row_filter_builder(&self) {
        let rows = || {
            self.with_tables("count rows", |tables| {
                Ok(tables[Namespace::Keys.index()].len()?
                    + tables[Namespace::Elements.index()].len()?)
            })
            .ok()
        };
        let mut scan = |namespace: Namespace,
                        after: &mut Option<Vec<u8>>,
                        each: &mut dyn FnMut(&[u8])|
         -> Option<bool> {
            // A read transaction of its own, begun now (not the kept one, which may be older
            // than the filter's registration: see `row_filter`).
            let db = self.database("build the row filter").ok()?;
            let transaction = db.begin_read().ok()?;
            let table = transaction.open_table(TABLES[namespace.index()]).ok()?;
            let lower = match after.as_deref() {
                Some(key) => Bound::Excluded(key),
                None => Bound::Unbounded,
            };
            let mut range = table.range::<&[u8]>((lower, Bound::Unbounded)).ok()?;
            let mut last = None;
            for entry in range.by_ref().take(FILTER_SCAN_ROWS) {
                let (key, _) = entry.ok()?;
                each(key.value());
                last = Some(key);
            }
            let more = range.next().is_some();
            if let Some(last) = last {
                *after = Some(last.value().to_vec());
            }
            Some(more)
        };
        self.row_filter.run_builder(&rows, &mut scan);
    }

    /// The row filter, once one is built.
    pub fn row_filter_status(&self) -> Option<row_filter::RowFilterStatus> {
        self.row_filter.status()
    }

    /// What the row cache holds and answered.
    pub fn row_cache_status(&self) -> RowCacheStatus {
        self.row_cache.status()
    }

    /// Stops `run_row_filter_builder` (at shutdown).
    pub fn stop_row_filter_builder(&self) {
        self.row_filter.stop();
    }

    #[cfg(test)]
    pub(crate) fn row_filter(&self) -> &RowFilter {
        &self.row_filter
    }
}

/// Rewrites version 1's plain string values in `kv` as string key rows (layout 2). Returns how
/// many it rewrote.
fn migrate_plain_strings(transaction: &redb::WriteTransaction) -> Result<u64, redb::Error> {
    let mut table = transaction.open_table(KV)?;
    let rows: Vec<(Vec<u8>, Vec<u8>)> = table
        .range::<&[u8]>(..)?
        .map(|entry| entry.map(|(key, value)| (key.value().to_vec(), value.value().to_vec())))
        .collect::<Result<_, _>>()?;
    for (key, value) in &rows {
        table.insert(key.as_slice(), layout::encode_string_row(value, 0).as_ref())?;
    }
    Ok(rows.len() as u64)
}
