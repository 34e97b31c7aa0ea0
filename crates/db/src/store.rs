//! The data files: the key space at the last checkpoint, kept by redb on the redo engine's
//! storage seam (so that a power cut in the middle of a checkpoint can be simulated).
//!
//! The data files are never the durability mechanism; the redo log is. They are written only
//! by checkpoints, each one redb write transaction committed durably that holds the changed
//! keys *and* the checkpoint SCN, so the two can never disagree after a crash.

use std::io;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use parking_lot::{MappedRwLockReadGuard, RwLock, RwLockReadGuard};
use redb::{ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use redo::storage::{Storage, StorageFile};
use redo::{DatabaseId, Scn};

use crate::error::DbError;

const KV: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
const META_CHECKPOINT_SCN: &str = "checkpoint_scn";
const META_DATABASE_ID: &str = "database_id";

/// redb's view of one of our storage files.
#[derive(Debug)]
struct SeamBackend {
    file: Box<dyn StorageFile>,
    /// Set for good when a sync fails (see `Store::checkpoint`).
    sync_failed: Arc<AtomicBool>,
}

impl redb::StorageBackend for SeamBackend {
    fn len(&self) -> Result<u64, io::Error> {
        self.file.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), io::Error> {
        self.file.read_at(out, offset)
    }

    fn set_len(&self, len: u64) -> Result<(), io::Error> {
        self.file.set_len(len)
    }

    fn sync_data(&self) -> Result<(), io::Error> {
        let synced = self.file.sync_data();
        if synced.is_err() {
            self.sync_failed.store(true, Ordering::Release);
        }
        synced
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.file.write_at(data, offset)
    }
}

/// What the data files say about themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    pub checkpoint_scn: Scn,
    pub database_id: Option<DatabaseId>,
}

/// A changed key to write at a checkpoint: the new value, or `None` to delete it.
pub type Changed = std::collections::BTreeMap<crate::cache::Key, Option<Bytes>>;

/// The key table as one read transaction sees it.
type KvTable = redb::ReadOnlyTable<&'static [u8], &'static [u8]>;

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
    reader: parking_lot::Mutex<(u64, Option<Arc<KvTable>>)>,
    path: PathBuf,
    storage: Arc<dyn Storage>,
    cache_bytes: u64,
    sync_failed: Arc<AtomicBool>,
    /// Closed for good (shutdown).
    closed: AtomicBool,
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
    /// Opens the data file at `path`, creating it if missing.
    pub fn open(
        storage: &Arc<dyn Storage>,
        path: &Path,
        cache_bytes: u64,
    ) -> Result<Store, DbError> {
        let sync_failed = Arc::new(AtomicBool::new(false));
        let db = open_database(storage, path, cache_bytes, &sync_failed)?;
        // Make sure both tables exist, so that readers never see "no such table".
        let fail = store_error(path, "initialise");
        let transaction = db.begin_write().map_err(|error| fail(&error))?;
        transaction.open_table(KV).map_err(|error| fail(&error))?;
        transaction.open_table(META).map_err(|error| fail(&error))?;
        transaction.commit().map_err(|error| fail(&error))?;
        Ok(Store {
            db: RwLock::new(Some(db)),
            reader: parking_lot::Mutex::new((0, None)),
            path: path.to_path_buf(),
            storage: storage.clone(),
            cache_bytes,
            sync_failed,
            closed: AtomicBool::new(false),
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
        let mut db = self.db.write();
        // No reader holds a table now (they hold `db`'s read lock while they do).
        self.drop_reader();
        let database = db.take();
        drop(db);
        drop(database);
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
        if db.is_none() {
            *db = Some(open_database(
                &self.storage,
                &self.path,
                self.cache_bytes,
                &self.sync_failed,
            )?);
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

    pub fn get(&self, key: &[u8]) -> Result<Option<Bytes>, DbError> {
        let fail = store_error(&self.path, "read");
        let db = self.database("read")?;
        let (generation, kept) = {
            let reader = self.reader.lock();
            (reader.0, reader.1.clone())
        };
        let table = match kept {
            Some(table) => table,
            None => {
                let transaction = db.begin_read().map_err(|error| fail(&error))?;
                let table = Arc::new(transaction.open_table(KV).map_err(|error| fail(&error))?);
                let mut reader = self.reader.lock();
                // Not if a checkpoint dropped the kept table meanwhile: this one may be older.
                if reader.0 == generation && reader.1.is_none() {
                    reader.1 = Some(table.clone());
                }
                table
            }
        };
        let value = table.get(key).map_err(|error| fail(&error))?;
        let value = value.map(|value| Bytes::copy_from_slice(value.value()));
        drop(table);
        drop(db);
        Ok(value)
    }

    /// Number of keys in the data files.
    pub fn key_count(&self) -> Result<u64, DbError> {
        let fail = store_error(&self.path, "count");
        let db = self.database("count")?;
        let transaction = db.begin_read().map_err(|error| fail(&error))?;
        let table = transaction.open_table(KV).map_err(|error| fail(&error))?;
        table.len().map_err(|error| fail(&error))
    }

    /// Up to `limit` keys and values after `after` (exclusive), in key order.
    pub fn range(
        &self,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Bytes, Bytes)>, DbError> {
        let fail = store_error(&self.path, "scan");
        let db = self.database("scan")?;
        let transaction = db.begin_read().map_err(|error| fail(&error))?;
        let table = transaction.open_table(KV).map_err(|error| fail(&error))?;
        let lower = match after {
            Some(key) => Bound::Excluded(key),
            None => Bound::Unbounded,
        };
        let range =
            table.range::<&[u8]>((lower, Bound::Unbounded)).map_err(|error| fail(&error))?;
        let mut out = Vec::new();
        for entry in range.take(limit) {
            let (key, value) = entry.map_err(|error| fail(&error))?;
            out.push((Bytes::copy_from_slice(key.value()), Bytes::copy_from_slice(value.value())));
        }
        Ok(out)
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
        changed: &Changed,
        scn: Scn,
        database_id: DatabaseId,
        unresolved: &[crate::cache::Key],
        before_commit: &mut dyn FnMut(&[bool]),
    ) -> Result<(), DbError> {
        if self.db.read().is_none() && !self.sync_failed.load(Ordering::Acquire) {
            self.reopen()?;
        }
        let written = self.write_checkpoint(changed, scn, database_id, unresolved, before_commit);
        // Committed or not, reads see the data files as they are from now on (the caller lets
        // the cache go of what was written only after this returns).
        self.drop_reader();
        if written.is_err() && !self.sync_failed.load(Ordering::Acquire) {
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
        changed: &Changed,
        scn: Scn,
        database_id: DatabaseId,
        unresolved: &[crate::cache::Key],
        before_commit: &mut dyn FnMut(&[bool]),
    ) -> Result<(), DbError> {
        let fail = store_error(&self.path, "checkpoint");
        let db = self.database("checkpoint")?;
        let transaction = db.begin_write().map_err(|error| fail(&error))?;
        {
            let mut table = transaction.open_table(KV).map_err(|error| fail(&error))?;
            // Both in key order: walked together, each unresolved key meets its own write.
            let mut existed = Vec::with_capacity(unresolved.len());
            let mut next = unresolved.iter().peekable();
            for (key, value) in changed {
                // An unresolved key that is not among the changes (never expected: each is
                // the key of one of them) is looked up before the writes after it.
                while let Some(lone) = next.next_if(|lone| *lone < key) {
                    existed.push(table.get(lone.as_ref()).map_err(|error| fail(&error))?.is_some());
                }
                let replaced = match value {
                    Some(value) => table
                        .insert(key.as_ref(), value.as_ref())
                        .map_err(|error| fail(&error))?
                        .is_some(),
                    None => table.remove(key.as_ref()).map_err(|error| fail(&error))?.is_some(),
                };
                if next.next_if(|lone| *lone == key).is_some() {
                    existed.push(replaced);
                }
            }
            for lone in next {
                existed.push(table.get(lone.as_ref()).map_err(|error| fail(&error))?.is_some());
            }
            before_commit(&existed);
            let mut meta = transaction.open_table(META).map_err(|error| fail(&error))?;
            meta.insert(META_CHECKPOINT_SCN, scn.0).map_err(|error| fail(&error))?;
            meta.insert(META_DATABASE_ID, database_id.0).map_err(|error| fail(&error))?;
        }
        transaction.commit().map_err(|error| fail(&error))
    }
}

/// Key-value pairs, in key order.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// One consistent view of the data files (a redb read transaction): the key space at one
/// checkpoint, read in key order, while checkpoints go on writing newer ones.
pub struct StoreSnapshot {
    transaction: redb::ReadTransaction,
    path: PathBuf,
    pub checkpoint_scn: Scn,
    pub database_id: Option<DatabaseId>,
    pub keys: u64,
    /// Bytes of keys and values the view holds (redb's count of stored bytes).
    pub bytes: u64,
    after: Option<Vec<u8>>,
}

impl StoreSnapshot {
    /// The next pairs in key order, about `max_bytes` of them (at least one); empty once all
    /// were read.
    pub fn next_entries(&mut self, max_bytes: usize) -> Result<Pairs, DbError> {
        let fail = store_error(&self.path, "read a snapshot");
        let table = self.transaction.open_table(KV).map_err(|error| fail(&error))?;
        let lower = match &self.after {
            Some(key) => Bound::Excluded(key.as_slice()),
            None => Bound::Unbounded,
        };
        let range =
            table.range::<&[u8]>((lower, Bound::Unbounded)).map_err(|error| fail(&error))?;
        let mut out = Vec::new();
        let mut bytes = 0usize;
        for entry in range {
            let (key, value) = entry.map_err(|error| fail(&error))?;
            bytes += key.value().len() + value.value().len();
            out.push((key.value().to_vec(), value.value().to_vec()));
            if bytes >= max_bytes {
                break;
            }
        }
        if let Some((key, _)) = out.last() {
            self.after = Some(key.clone());
        }
        Ok(out)
    }
}

impl Store {
    /// A consistent view of the data files as of their last checkpoint.
    pub fn snapshot(&self) -> Result<StoreSnapshot, DbError> {
        let fail = store_error(&self.path, "take a snapshot");
        let db = self.database("take a snapshot")?;
        let transaction = db.begin_read().map_err(|error| fail(&error))?;
        let (checkpoint_scn, database_id, keys, bytes) = {
            let meta = transaction.open_table(META).map_err(|error| fail(&error))?;
            let get = |key: &str| -> Result<Option<u64>, DbError> {
                Ok(meta.get(key).map_err(|error| fail(&error))?.map(|value| value.value()))
            };
            let table = transaction.open_table(KV).map_err(|error| fail(&error))?;
            let stats = table.stats().map_err(|error| fail(&error))?;
            (
                Scn(get(META_CHECKPOINT_SCN)?.unwrap_or(0)),
                get(META_DATABASE_ID)?.map(DatabaseId),
                table.len().map_err(|error| fail(&error))?,
                stats.stored_bytes(),
            )
        };
        Ok(StoreSnapshot {
            transaction,
            path: self.path.clone(),
            checkpoint_scn,
            database_id,
            keys,
            bytes,
            after: None,
        })
    }
}

/// Opens (creating it if missing) the redb file at `path` on `storage`.
fn open_database(
    storage: &Arc<dyn Storage>,
    path: &Path,
    cache_bytes: u64,
    sync_failed: &Arc<AtomicBool>,
) -> Result<redb::Database, DbError> {
    let fail = store_error(path, "open");
    let dir = path.parent().unwrap_or(Path::new("."));
    storage.create_dir_all(dir).map_err(|error| fail(&error))?;
    let file = if storage.exists(path) {
        storage.open(path).map_err(|error| fail(&error))?
    } else {
        let file = storage.create(path).map_err(|error| fail(&error))?;
        storage.sync_dir(dir).map_err(|error| fail(&error))?;
        file
    };
    redb::Database::builder()
        .set_cache_size(cache_bytes as usize)
        .create_with_backend(SeamBackend { file, sync_failed: sync_failed.clone() })
        .map_err(|error| fail(&error))
}
