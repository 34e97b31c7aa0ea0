//! Errors of the redo engine, as callers branch on them.

use std::io;
use std::path::PathBuf;

use crate::types::{LogSeq, Scn};

#[derive(Debug, thiserror::Error)]
pub enum RedoError {
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("corrupt redo in {file} at offset {offset}: {reason}")]
    Corrupt { file: PathBuf, offset: u64, reason: String },

    #[error(
        "redo record of {len} bytes is larger than the maximum of {max} bytes (the smaller of one log buffer strand and one log file)"
    )]
    RecordTooLarge { len: usize, max: usize },

    #[error("invalid redo configuration: {field}: {reason}")]
    Config { field: &'static str, reason: String },

    #[error("the log files do not match the configuration: {0}")]
    Layout(String),

    /// The log writer refuses further redo: a write or sync failed (fsync errors are not
    /// retryable), or the redo shipped could not be protected as the protection mode requires
    /// (the database was fenced or is stopping). No commit waiting then is acknowledged.
    #[error("the log writer refuses further redo: {0}")]
    WriterFailed(String),

    #[error("the redo log is shut down")]
    Shutdown,

    #[error("this database is a standby: it takes redo only from its primary")]
    Standby,

    #[error("redo refused by this standby: {0}")]
    Refused(String),

    #[error(
        "redo at SCN {scn} is no longer available: the oldest log that can still be read starts at SCN {oldest}"
    )]
    ScnNotAvailable { scn: Scn, oldest: Scn },

    #[error("log sequence {seq} is neither online nor archived")]
    LogNotAvailable { seq: LogSeq },

    #[error(
        "archiving of log sequence {seq} is failing ({reason}); new redo is refused until it succeeds"
    )]
    ArchiverStuck { seq: LogSeq, reason: String },

    #[error(
        "commit of SCN {scn} is not durable yet: {reason}; its redo is kept in the log buffer and written once that succeeds (space returns), unless the database stops first; new writes are refused until then"
    )]
    CommitStalled { scn: Scn, reason: String },
}

impl RedoError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> RedoError {
        RedoError::Io { op, path: path.into(), source }
    }

    pub(crate) fn corrupt(
        file: impl Into<PathBuf>,
        error: crate::format::FormatError,
    ) -> RedoError {
        RedoError::Corrupt { file: file.into(), offset: error.offset, reason: error.reason }
    }

    /// Whether the cause is a full file system (ENOSPC or EDQUOT).
    pub fn is_disk_full(&self) -> bool {
        match self {
            RedoError::Io { source, .. } => is_disk_full(source),
            RedoError::ArchiverStuck { reason, .. } | RedoError::CommitStalled { reason, .. } => {
                reason.contains("No space left") || reason.contains("Disk quota")
            }
            _ => false,
        }
    }
}

pub(crate) fn is_disk_full(error: &io::Error) -> bool {
    matches!(error.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
        || error.kind() == io::ErrorKind::StorageFull
}

pub type Result<T, E = RedoError> = std::result::Result<T, E>;
