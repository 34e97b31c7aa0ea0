//! The data files' storage under redb: redb's `StorageBackend` on one file of the redo
//! engine's storage seam (so that a power cut in the middle of a checkpoint can be simulated),
//! with what the `Store` and the backend share (a failed sync, the paced writeback).

use std::io;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use redo::storage::{Storage, StorageFile};

use super::store_error;
use crate::error::DbError;

/// redb's view of one of our storage files.
#[derive(Debug)]
pub(super) struct SeamBackend {
    file: Box<dyn StorageFile>,
    flags: Arc<BackendFlags>,
    /// The pages written since their writeback was last started.
    writeback: redo::storage::Writeback,
}

/// What a `Store` and redb's backend of its file share.
#[derive(Debug, Default)]
pub(super) struct BackendFlags {
    /// Set for good when a sync fails (see `Store::checkpoint`).
    pub(super) sync_failed: AtomicBool,
    /// Whether the pages written now go to the disk as they are written, rather than all at
    /// the commit's sync (`redo::storage::WRITEBACK_AFTER` says why): while a checkpoint that
    /// nobody waits for writes them (`Store::pace_writeback`).
    pub(super) pace_writeback: AtomicBool,
    /// Every how many bytes written (`[db] checkpoint_flush_after`; 0: never).
    pub(super) flush_after: std::sync::atomic::AtomicU64,
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
            self.flags.sync_failed.store(true, Ordering::Release);
        }
        synced
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), io::Error> {
        self.file.write_at(data, offset)?;
        if self.flags.pace_writeback.load(Ordering::Relaxed) {
            let after = self.flags.flush_after.load(Ordering::Relaxed);
            self.writeback.wrote(&*self.file, offset, data.len() as u64, after);
        }
        Ok(())
    }
}

/// Opens (creating it if missing) the redb file at `path` on `storage`.
pub(super) fn open_database(
    storage: &Arc<dyn Storage>,
    path: &Path,
    cache_bytes: u64,
    flags: &Arc<BackendFlags>,
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
        .create_with_backend(SeamBackend {
            file,
            flags: flags.clone(),
            writeback: Default::default(),
        })
        .map_err(|error| fail(&error))
}
