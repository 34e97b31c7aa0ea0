//! Archive retention: deleting the archived logs nobody needs any more, so that the archive
//! does not grow without bound.
//!
//! Who needs a log is the caller's to say (the server knows its standbys and its own apply and
//! checkpoint): `delete_archived` is told the first log still needed and deletes archived logs
//! before it once they are older than `archive_keep_min`, or sooner, oldest first, while the
//! archive is over `archive_max_bytes`. A log still needed is never deleted. The catalog is
//! rewritten first (durably), then the files removed, so that a crash in between leaves files
//! the catalog does not name, never a catalog naming missing files.

use serde::{Deserialize, Serialize};

use crate::error::{RedoError, Result};
use crate::types::{LogSeq, now_unix_us};

/// What one pass of retention did and left.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetentionPass {
    /// The first log still needed: logs before it were deletable.
    pub needed_from: LogSeq,
    pub deleted_logs: u64,
    pub deleted_bytes: u64,
    /// What the archive holds after the pass.
    pub kept_logs: u64,
    pub kept_bytes: u64,
    /// Logs no longer needed but younger than `archive_keep_min` (kept for now).
    pub kept_young: u64,
}

impl crate::RedoLog {
    /// Deletes archived logs before `needed_from` that retention lets go (see the module).
    pub fn delete_archived(&self, needed_from: LogSeq) -> Result<RetentionPass> {
        let shared = &self.shared;
        let config = &shared.config;
        let entries = shared.catalog.entries();
        let now = now_unix_us();
        let keep_min_us = u64::try_from(config.archive_keep_min.as_micros()).unwrap_or(u64::MAX);
        let total: u64 = entries.iter().map(|entry| entry.size_bytes).sum();
        let mut over = if config.archive_max_bytes == 0 {
            0
        } else {
            total.saturating_sub(config.archive_max_bytes)
        };
        // Oldest first: what to delete.
        let mut candidates: Vec<_> =
            entries.iter().filter(|entry| entry.seq < needed_from).collect();
        candidates.sort_by_key(|entry| (entry.seq, entry.completed_us));
        let mut doomed = std::collections::BTreeSet::new();
        let mut kept_young = 0;
        for entry in candidates {
            let old_enough = now.saturating_sub(entry.completed_us) >= keep_min_us;
            if old_enough || over > 0 {
                over = over.saturating_sub(entry.size_bytes);
                doomed.insert((entry.seq, entry.path.clone()));
            } else {
                kept_young += 1;
            }
        }
        let removed = if doomed.is_empty() {
            Vec::new()
        } else {
            shared.catalog.retain(shared.storage.as_ref(), |entry| {
                !doomed.contains(&(entry.seq, entry.path.clone()))
            })?
        };
        let mut pass = RetentionPass { needed_from, kept_young, ..RetentionPass::default() };
        let mut dirs = std::collections::BTreeSet::new();
        for entry in &removed {
            match shared.storage.remove(&entry.path) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(RedoError::io("delete", &entry.path, error)),
            }
            if let Some(dir) = entry.path.parent() {
                dirs.insert(dir.to_path_buf());
            }
            pass.deleted_logs += 1;
            pass.deleted_bytes += entry.size_bytes;
        }
        for dir in dirs {
            shared.storage.sync_dir(&dir).map_err(|error| RedoError::io("sync", &dir, error))?;
        }
        if pass.deleted_logs > 0 {
            tracing::info!(logs = pass.deleted_logs, bytes = pass.deleted_bytes, needed_from = %needed_from, "archive retention: deleted archived logs no longer needed");
        }
        let kept = shared.catalog.entries();
        pass.kept_logs = kept.len() as u64;
        pass.kept_bytes = kept.iter().map(|entry| entry.size_bytes).sum();
        Ok(pass)
    }
}
