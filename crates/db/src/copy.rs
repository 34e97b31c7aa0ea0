//! The data files of a new standby, written from a copy of its primary's (see
//! `transport::copy`): the pairs arrive in key order, in chunks, each committed to the new data
//! file; the last commit records the copy's checkpoint SCN and the database's identity, so that
//! the data files say "the database at SCN C" only once every pair is in them.
//!
//! A marker file beside the data file says a copy is under way: a server that finds it refuses
//! to open the database (an interrupted copy is not a database) until the copy is made again.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use redo::storage::Storage;
use redo::{DatabaseId, Scn};

use crate::cache::Layer;
use crate::config::DbConfig;
use crate::error::DbError;
use crate::store::{self, Store};

/// The marker of a copy under way, in the data directory.
pub fn copy_marker(config: &DbConfig) -> PathBuf {
    config.dir.join("copy-in-progress")
}

/// Writes a new standby's data files from a copy.
pub struct CopyWriter {
    store: Store,
    marker: PathBuf,
    storage: Arc<dyn Storage>,
}

impl CopyWriter {
    /// Creates the data file (which must not exist) and the marker.
    pub fn create(config: &DbConfig, storage: &Arc<dyn Storage>) -> Result<CopyWriter, DbError> {
        let path = config.data_file();
        let io = |what: &str, path: &Path| {
            let path = path.to_path_buf();
            let what = what.to_string();
            move |error: std::io::Error| DbError::Store { path, reason: format!("{what}: {error}") }
        };
        if storage.exists(&path) {
            return Err(DbError::Mismatch(format!(
                "{} exists: a copy goes into an empty data directory",
                path.display()
            )));
        }
        storage.create_dir_all(&config.dir).map_err(io("create", &config.dir))?;
        let marker = copy_marker(config);
        let file = storage.create(&marker).map_err(io("create", &marker))?;
        file.sync_data().map_err(io("sync", &marker))?;
        storage.sync_dir(&config.dir).map_err(io("sync", &config.dir))?;
        // No row filter and no row cache: nothing reads this store.
        let sizes = store::Sizes { cache_bytes: config.cache_size, ..store::Sizes::default() };
        let store = Store::open(storage, &path, sizes)?;
        Ok(CopyWriter { store, marker, storage: storage.clone() })
    }

    /// Commits a chunk of pairs (durably; not yet a database): rows as a snapshot reads them,
    /// each key led by its table's byte (`store::StoreSnapshot::next_entries`).
    pub fn write(
        &self,
        entries: Vec<(Vec<u8>, Vec<u8>)>,
        database_id: DatabaseId,
    ) -> Result<(), DbError> {
        let rows = store::untag(entries)
            .map_err(|reason| DbError::Store { path: self.store.path().to_path_buf(), reason })?;
        self.store.checkpoint(&Layer::from_rows(rows), Scn::ZERO, database_id, &[], &mut |_| {})
    }

    /// Records the copy's checkpoint SCN, then removes the marker: the data files are the
    /// database at `checkpoint_scn` from now on. Returns the number of keys.
    pub fn finish(self, checkpoint_scn: Scn, database_id: DatabaseId) -> Result<u64, DbError> {
        self.store.checkpoint(&Layer::default(), checkpoint_scn, database_id, &[], &mut |_| {})?;
        let keys = self.store.key_count()?;
        drop(self.store);
        let fail = |error: std::io::Error| DbError::Store {
            path: self.marker.clone(),
            reason: format!("remove the copy marker: {error}"),
        };
        self.storage.remove(&self.marker).map_err(fail)?;
        self.storage.sync_dir(self.marker.parent().unwrap_or(Path::new("."))).map_err(fail)?;
        Ok(keys)
    }
}
