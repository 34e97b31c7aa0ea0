//! A consistent view of the data files (a redb read transaction), read in key order while
//! checkpoints go on: what a copy of the database (a new standby's instantiation) sends.

use std::ops::Bound;
use std::path::PathBuf;

use bytes::Bytes;
use redb::{ReadableDatabase, ReadableTableMetadata};
use redo::{DatabaseId, Scn};

use super::{Changed, KV, META, META_CHECKPOINT_SCN, META_DATABASE_ID, Store, TABLES, store_error};
use crate::error::DbError;
use crate::layout::Namespace;

/// Pairs in key order, each key led by the byte of its namespace (`Namespace as u8`): rows of
/// every table, keys first.
pub type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// One consistent view of the data files (a redb read transaction): the key space at one
/// checkpoint, read in key order, while checkpoints go on writing newer ones.
pub struct StoreSnapshot {
    transaction: redb::ReadTransaction,
    path: PathBuf,
    pub checkpoint_scn: Scn,
    pub database_id: Option<DatabaseId>,
    pub keys: u64,
    /// Bytes of keys and values the view holds (redb's count of stored bytes, every table).
    pub bytes: u64,
    /// The table being read, and the last key read of it.
    table: usize,
    after: Option<Vec<u8>>,
}

impl StoreSnapshot {
    /// The next pairs in key order, about `max_bytes` of them (at least one); empty once all
    /// were read.
    pub fn next_entries(&mut self, max_bytes: usize) -> Result<Pairs, DbError> {
        let fail = store_error(&self.path, "read a snapshot");
        let mut out = Vec::new();
        let mut bytes = 0usize;
        while self.table < Namespace::COUNT {
            let table =
                self.transaction.open_table(TABLES[self.table]).map_err(|error| fail(&error))?;
            let lower = match &self.after {
                Some(key) => Bound::Excluded(key.as_slice()),
                None => Bound::Unbounded,
            };
            let range =
                table.range::<&[u8]>((lower, Bound::Unbounded)).map_err(|error| fail(&error))?;
            for entry in range {
                let (key, value) = entry.map_err(|error| fail(&error))?;
                bytes += 1 + key.value().len() + value.value().len();
                let mut tagged = Vec::with_capacity(1 + key.value().len());
                tagged.push(self.table as u8);
                tagged.extend_from_slice(key.value());
                self.after = Some(key.value().to_vec());
                out.push((tagged, value.value().to_vec()));
                if bytes >= max_bytes {
                    return Ok(out);
                }
            }
            self.table += 1;
            self.after = None;
        }
        Ok(out)
    }
}

/// Turns a snapshot's tagged pairs back into rows per namespace (for a copy's writer).
pub fn untag(pairs: Pairs) -> Result<[Changed; Namespace::COUNT], String> {
    let mut rows: [Changed; Namespace::COUNT] = Default::default();
    for (key, value) in pairs {
        let Some((&tag, key)) = key.split_first() else {
            return Err("an empty key in a copy".into());
        };
        let Some(namespace) = Namespace::ALL.get(tag as usize) else {
            return Err(format!("a row of unknown table {tag} in a copy (from a newer primary?)"));
        };
        rows[namespace.index()]
            .insert(Bytes::copy_from_slice(key).into(), Some(Bytes::from(value)));
    }
    Ok(rows)
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
            let mut bytes = 0;
            for definition in TABLES {
                let table = transaction.open_table(definition).map_err(|error| fail(&error))?;
                bytes += table.stats().map_err(|error| fail(&error))?.stored_bytes();
            }
            (
                Scn(get(META_CHECKPOINT_SCN)?.unwrap_or(0)),
                get(META_DATABASE_ID)?.map(DatabaseId),
                table.len().map_err(|error| fail(&error))?,
                bytes,
            )
        };
        Ok(StoreSnapshot {
            transaction,
            path: self.path.clone(),
            checkpoint_scn,
            database_id,
            keys,
            bytes,
            table: 0,
            after: None,
        })
    }
}
