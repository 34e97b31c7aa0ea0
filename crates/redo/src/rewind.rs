//! Taking the newest logs out of a database that is not open: what a reinstate does to a
//! failed-over primary (or a standby left on the old branch), whose redo past the failover
//! point must never be applied again and must not be lost either.
//!
//! Every log from a sequence on is *set aside*: its bytes are copied into a directory the
//! DBA can inspect; an online group that holds one is cleared (its header blocks zeroed and
//! synced: it reads as never used); an archived copy is moved into that directory and taken
//! out of the catalog. The logs before it are untouched, so the database is left with a redo
//! stream that ends where the new primary's branch begins.

use std::path::{Path, PathBuf};

use crate::catalog::ArchiveCatalog;
use crate::config::RedoConfig;
use crate::error::Result;
use crate::format::{self, HeaderBlock};
use crate::online_log::{SETTLE_FAILED, io_error};
use crate::storage::Storage;
use crate::types::LogSeq;

/// What `set_aside_logs` did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAside {
    /// The logs taken out, in sequence order.
    pub logs: Vec<LogSeq>,
    /// The files written into the set-aside directory.
    pub files: Vec<PathBuf>,
}

/// Sets aside every log from `from` on of the (closed) database `config` describes, into the
/// directory `aside` (created).
pub fn set_aside_logs(
    config: &RedoConfig,
    storage: &dyn Storage,
    from: LogSeq,
    aside: &Path,
) -> Result<SetAside> {
    storage.create_dir_all(aside).map_err(io_error("create", aside))?;
    let mut done = SetAside::default();
    let block = config.block_size as usize;
    // Every member opened and settled before any is cleared: a device that fails fails the
    // rewind before it has changed anything.
    let mut groups = Vec::with_capacity(config.groups as usize);
    for group in 0..config.groups {
        let mut members = Vec::with_capacity(config.members as usize);
        for member in 0..config.members {
            let path = config.member_path(group, member);
            if !storage.exists(&path) {
                continue;
            }
            let file = storage.open_log(&path).map_err(io_error("open", &path))?;
            file.settle().map_err(io_error(SETTLE_FAILED, &path))?;
            members.push((path, file));
        }
        groups.push(members);
    }
    for members in groups {
        let mut cleared = false;
        for (path, file) in members {
            let mut header = vec![0u8; block];
            file.read_at(&mut header, 0).map_err(io_error("read the header of", &path))?;
            let Ok(HeaderBlock::Open(opened) | HeaderBlock::Closed(opened, _)) =
                format::decode_header(&header, 0)
            else {
                continue;
            };
            if opened.seq < from {
                continue;
            }
            if !cleared {
                // One copy of the log's bytes (the first member that holds it).
                let copy =
                    aside.join(format!("online_{}_{:010}.log", opened.thread.0, opened.seq.0));
                copy_file(storage, &path, &copy)?;
                done.files.push(copy);
                done.logs.push(opened.seq);
                cleared = true;
            }
            file.write_at(&vec![0u8; 2 * block], 0).map_err(io_error("clear", &path))?;
            file.sync_data().map_err(io_error("sync", &path))?;
            tracing::warn!(seq = %opened.seq, member = %path.display(), "rewind: online log set aside and cleared");
        }
    }
    let catalog = ArchiveCatalog::open(storage, &config.dir.join("archive_catalog"))?;
    let removed = catalog.retain(storage, |entry| entry.seq < from)?;
    for entry in removed {
        if storage.exists(&entry.path) {
            let name = entry.path.file_name().map(|name| name.to_os_string()).unwrap_or_default();
            let mut target = aside.join(&name);
            if storage.exists(&target) {
                // Another archive destination's copy of the same log.
                target = aside.join(format!("{}.{}", name.to_string_lossy(), done.files.len()));
            }
            storage.rename(&entry.path, &target).map_err(io_error("move", &entry.path))?;
            if let Some(dir) = entry.path.parent() {
                storage.sync_dir(dir).map_err(io_error("sync", dir))?;
            }
            done.files.push(target);
        }
        if !done.logs.contains(&entry.seq) {
            done.logs.push(entry.seq);
        }
        tracing::warn!(seq = %entry.seq, "rewind: archived log set aside");
    }
    storage.sync_dir(aside).map_err(io_error("sync", aside))?;
    done.logs.sort();
    Ok(done)
}

fn copy_file(storage: &dyn Storage, from: &Path, to: &Path) -> Result<()> {
    let bytes = crate::storage::read_all(storage, from).map_err(io_error("read", from))?;
    let file = storage.create(to).map_err(io_error("create", to))?;
    file.write_at(&bytes, 0).map_err(io_error("write", to))?;
    file.sync_data().map_err(io_error("sync", to))?;
    Ok(())
}
