//! Errors of the database, as the server branches on them.

use std::path::PathBuf;

use redo::{RedoError, Scn};

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error(transparent)]
    Redo(#[from] RedoError),

    #[error("data file {path}: {reason}")]
    Store { path: PathBuf, reason: String },

    #[error("redo record at SCN {scn} is not a valid change vector: {reason}")]
    Corrupt { scn: Scn, reason: String },

    #[error("writes are refused: {reason}")]
    WritesRefused { reason: String },

    #[error(
        "transaction too large: {len} bytes of redo; the maximum is {max} (a log buffer strand, or a log file)"
    )]
    TooLarge { len: usize, max: usize },

    #[error("invalid database configuration: {field}: {reason}")]
    Config { field: &'static str, reason: String },

    #[error("{0}")]
    Mismatch(String),

    #[error("the database is shut down")]
    Shutdown,

    #[error("invalid cursor")]
    InvalidCursor,

    #[error("this database is a standby: it is read-only")]
    ReadOnly,
}

impl DbError {
    /// Whether the cause is a full file system.
    pub fn is_disk_full(&self) -> bool {
        match self {
            DbError::Redo(error) => error.is_disk_full(),
            DbError::Store { reason, .. } | DbError::WritesRefused { reason } => {
                reason.contains("No space left") || reason.contains("Disk quota")
            }
            _ => false,
        }
    }
}
