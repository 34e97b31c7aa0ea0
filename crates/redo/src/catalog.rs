//! The archive catalog: one entry per archived log and destination, appended durably.
//!
//! It is what a DBA queries for redo history (how much redo per hour, the peak rate of a
//! log) and what readers use to find a log that is no longer online.

use std::path::{Path, PathBuf};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::error::{RedoError, Result};
use crate::storage::{Storage, StorageFile};
use crate::types::{LogSeq, RedoThread, Scn};

// Format of the catalog file: a sequence of entries, each
// { len: u32 (of body) | crc32c: u32 (of body) | body: [u8; len] }
// body: { thread: u16 | reserved: u16 | reserved: u32 | seq: u64 | first_scn: u64
//       | next_scn: u64 | first_time_us: u64 | next_time_us: u64 | size_bytes: u64
//       | completed_us: u64 | path: utf-8 [len - 64] }
// A torn last entry (a crash during an append) is dropped and the file cut back to the last
// whole entry when the catalog is opened.

const BODY_FIXED_LEN: usize = 64;
const PATH_LEN_MAX: usize = 4096;

/// One archived copy of one log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedLog {
    pub thread: RedoThread,
    pub seq: LogSeq,
    pub first_scn: Scn,
    /// First SCN of the next log: this log holds `first_scn..next_scn`.
    pub next_scn: Scn,
    pub first_time_us: u64,
    pub next_time_us: u64,
    /// Bytes of the archived file (headers and redo units up to the end of redo).
    pub size_bytes: u64,
    /// When the copy was complete and durable.
    pub completed_us: u64,
    /// The archived file.
    pub path: PathBuf,
}

impl ArchivedLog {
    /// Redo generation rate while this log was current, in bytes per second: the figure a DBA
    /// sizes a network for (its maximum over the catalog is the peak redo rate).
    pub fn bytes_per_s(&self) -> f64 {
        let seconds = self.next_time_us.saturating_sub(self.first_time_us) as f64 / 1e6;
        if seconds <= 0.0 { 0.0 } else { self.size_bytes as f64 / seconds }
    }

    fn encode(&self) -> Vec<u8> {
        let path = self.path.to_string_lossy();
        let mut body = Vec::with_capacity(BODY_FIXED_LEN + path.len());
        body.extend_from_slice(&self.thread.0.to_le_bytes());
        body.extend_from_slice(&[0u8; 6]);
        for value in [
            self.seq.0,
            self.first_scn.0,
            self.next_scn.0,
            self.first_time_us,
            self.next_time_us,
            self.size_bytes,
            self.completed_us,
        ] {
            body.extend_from_slice(&value.to_le_bytes());
        }
        body.extend_from_slice(path.as_bytes());
        let mut entry = Vec::with_capacity(8 + body.len());
        entry.extend_from_slice(&(body.len() as u32).to_le_bytes());
        entry.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        entry.extend_from_slice(&body);
        entry
    }

    /// Decodes the entry at the start of `bytes`: `None` if it is torn or damaged.
    fn decode(bytes: &[u8]) -> Option<(ArchivedLog, usize)> {
        let len = u32::from_le_bytes(bytes.get(0..4)?.try_into().ok()?) as usize;
        if !(BODY_FIXED_LEN..=BODY_FIXED_LEN + PATH_LEN_MAX).contains(&len) {
            return None;
        }
        let crc = u32::from_le_bytes(bytes.get(4..8)?.try_into().ok()?);
        let body = bytes.get(8..8 + len)?;
        if crc32c::crc32c(body) != crc {
            return None;
        }
        let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
        let path = std::str::from_utf8(&body[BODY_FIXED_LEN..]).ok()?;
        Some((
            ArchivedLog {
                thread: RedoThread(u16::from_le_bytes([body[0], body[1]])),
                seq: LogSeq(u64_at(8)),
                first_scn: Scn(u64_at(16)),
                next_scn: Scn(u64_at(24)),
                first_time_us: u64_at(32),
                next_time_us: u64_at(40),
                size_bytes: u64_at(48),
                completed_us: u64_at(56),
                path: PathBuf::from(path),
            },
            8 + len,
        ))
    }
}

#[derive(Debug)]
struct CatalogState {
    file: Box<dyn StorageFile>,
    end: u64,
    entries: Vec<ArchivedLog>,
}

/// The catalog file and its entries in memory.
#[derive(Debug)]
pub struct ArchiveCatalog {
    path: PathBuf,
    state: Mutex<CatalogState>,
}

impl ArchiveCatalog {
    /// Opens (or creates) the catalog, dropping a torn last entry.
    pub fn open(storage: &dyn Storage, path: &Path) -> Result<ArchiveCatalog> {
        let io = |op, error| RedoError::io(op, path, error);
        let file = if storage.exists(path) {
            storage.open(path).map_err(|error| io("open", error))?
        } else {
            let file = storage.create(path).map_err(|error| io("create", error))?;
            file.sync_data().map_err(|error| io("sync", error))?;
            storage
                .sync_dir(path.parent().unwrap_or(Path::new(".")))
                .map_err(|error| io("sync the directory of", error))?;
            file
        };
        let len = file.len().map_err(|error| io("stat", error))?;
        let mut bytes = vec![0u8; len as usize];
        file.read_at(&mut bytes, 0).map_err(|error| io("read", error))?;
        let mut entries = Vec::new();
        let mut at = 0usize;
        while let Some((entry, used)) = ArchivedLog::decode(&bytes[at..]) {
            entries.push(entry);
            at += used;
        }
        if at < bytes.len() {
            tracing::warn!(catalog = %path.display(), valid_bytes = at, file_bytes = bytes.len(), "dropping a torn entry at the end of the archive catalog");
            file.set_len(at as u64).map_err(|error| io("truncate", error))?;
            file.sync_data().map_err(|error| io("sync", error))?;
        }
        Ok(ArchiveCatalog {
            path: path.to_path_buf(),
            state: Mutex::new(CatalogState { file, end: at as u64, entries }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `entry` durably.
    pub fn append(&self, entry: ArchivedLog) -> Result<()> {
        let bytes = entry.encode();
        let mut state = self.state.lock();
        let end = state.end;
        let result = state.file.write_at(&bytes, end).and_then(|()| state.file.sync_data());
        if let Err(error) = result {
            // Cut back whatever part of the entry reached the file, so the next append starts
            // at a clean boundary (a failed sync leaves the state unknown: the next open
            // drops a torn entry anyway).
            let _ = state.file.set_len(end);
            return Err(RedoError::io("append to", &self.path, error));
        }
        state.end += bytes.len() as u64;
        state.entries.push(entry);
        Ok(())
    }

    /// Keeps only the entries `keep` accepts: the catalog is rewritten durably without the
    /// others (which are returned). Their files are the caller's to remove or move.
    pub fn retain(
        &self,
        storage: &dyn Storage,
        keep: impl Fn(&ArchivedLog) -> bool,
    ) -> Result<Vec<ArchivedLog>> {
        let mut state = self.state.lock();
        let (kept, removed): (Vec<ArchivedLog>, Vec<ArchivedLog>) =
            state.entries.iter().cloned().partition(|entry| keep(entry));
        if removed.is_empty() {
            return Ok(removed);
        }
        let bytes: Vec<u8> = kept.iter().flat_map(ArchivedLog::encode).collect();
        crate::storage::replace_durably(storage, &self.path, &bytes)
            .map_err(|error| RedoError::io("rewrite", &self.path, error))?;
        state.file =
            storage.open(&self.path).map_err(|error| RedoError::io("open", &self.path, error))?;
        state.end = bytes.len() as u64;
        state.entries = kept;
        Ok(removed)
    }

    /// Every entry, in the order they were appended.
    pub fn entries(&self) -> Vec<ArchivedLog> {
        self.state.lock().entries.clone()
    }

    /// The archived copies of `seq`.
    pub fn find(&self, seq: LogSeq) -> Vec<ArchivedLog> {
        self.state.lock().entries.iter().filter(|entry| entry.seq == seq).cloned().collect()
    }

    /// Whether `seq` has been archived to `dest` (a directory).
    pub fn has(&self, seq: LogSeq, dest: &Path) -> bool {
        self.state
            .lock()
            .entries
            .iter()
            .any(|entry| entry.seq == seq && entry.path.parent() == Some(dest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crashdisk::CrashDisk;

    fn entry(seq: u64) -> ArchivedLog {
        ArchivedLog {
            thread: RedoThread(1),
            seq: LogSeq(seq),
            first_scn: Scn(seq * 100),
            next_scn: Scn(seq * 100 + 100),
            first_time_us: 1_000_000 * seq,
            next_time_us: 1_000_000 * seq + 2_000_000,
            size_bytes: 8 << 20,
            completed_us: 1_000_000 * seq + 2_500_000,
            path: PathBuf::from(format!("/arch/1_{seq:010}.arc")),
        }
    }

    #[test]
    fn entries_persist_and_a_torn_tail_is_dropped() {
        let disk = CrashDisk::new();
        disk.create_dir_all(Path::new("/r")).unwrap();
        let path = Path::new("/r/archive_catalog");
        let catalog = ArchiveCatalog::open(&disk, path).unwrap();
        catalog.append(entry(1)).unwrap();
        catalog.append(entry(2)).unwrap();
        assert_eq!(catalog.entries()[1].bytes_per_s(), 4.0 * 1024.0 * 1024.0);
        assert!(catalog.has(LogSeq(2), Path::new("/arch")));
        assert!(!catalog.has(LogSeq(3), Path::new("/arch")));
        // A torn third entry: half of it reached the file.
        let half = entry(3).encode();
        let file = disk.open(path).unwrap();
        let len = file.len().unwrap();
        file.write_at(&half[..half.len() / 2], len).unwrap();
        drop(catalog);
        let reopened = ArchiveCatalog::open(&disk, path).unwrap();
        assert_eq!(reopened.entries(), vec![entry(1), entry(2)]);
        reopened.append(entry(3)).unwrap();
        let again = ArchiveCatalog::open(&disk, path).unwrap();
        assert_eq!(again.entries(), vec![entry(1), entry(2), entry(3)]);
        assert_eq!(again.find(LogSeq(3)), vec![entry(3)]);
    }

    #[test]
    fn entries_taken_out_stay_out_and_appends_go_on() {
        let disk = CrashDisk::new();
        disk.create_dir_all(Path::new("/r")).unwrap();
        let path = Path::new("/r/archive_catalog");
        let catalog = ArchiveCatalog::open(&disk, path).unwrap();
        for seq in 1..=4 {
            catalog.append(entry(seq)).unwrap();
        }
        let removed = catalog.retain(&disk, |entry| entry.seq.0 % 2 == 0).unwrap();
        assert_eq!(removed, vec![entry(1), entry(3)]);
        catalog.append(entry(5)).unwrap();
        assert_eq!(catalog.entries(), vec![entry(2), entry(4), entry(5)]);
        assert_eq!(
            ArchiveCatalog::open(&disk, path).unwrap().entries(),
            vec![entry(2), entry(4), entry(5)]
        );
    }

    #[test]
    fn a_full_disk_fails_the_append_and_loses_nothing() {
        let disk = CrashDisk::new();
        disk.create_dir_all(Path::new("/r")).unwrap();
        let path = Path::new("/r/archive_catalog");
        let catalog = ArchiveCatalog::open(&disk, path).unwrap();
        catalog.append(entry(1)).unwrap();
        disk.set_capacity(Some(disk.contents(path).unwrap().len() as u64 + 10));
        assert!(catalog.append(entry(2)).unwrap_err().is_disk_full());
        disk.set_capacity(None);
        catalog.append(entry(2)).unwrap();
        assert_eq!(ArchiveCatalog::open(&disk, path).unwrap().entries(), vec![entry(1), entry(2)]);
    }
}
