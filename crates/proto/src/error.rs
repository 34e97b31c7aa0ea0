//! Errors: why a peer is refused or a connection ends (`ErrorMessage`, on the wire), and why
//! bytes do not decode (`ProtoError`).

use std::fmt;

use crate::message::Kind;

/// Why a peer is refused or a connection ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum ErrorCode {
    VersionMismatch = 1,
    WrongDatabase = 2,
    /// The member is not a standby that can take this redo: it is a primary (its own
    /// incarnation and member name are in the error), or a copy was asked of a standby.
    NotAStandby = 3,
    LayoutMismatch = 4,
    Malformed = 5,
    Busy = 6,
    Internal = 7,
    ShuttingDown = 8,
    /// The sender knows a newer incarnation than the hello's: the hello's primary has been
    /// failed over and must stop taking writes (it is *fenced*). The error names the newer
    /// incarnation and, when known, the member that is primary in it.
    NewerIncarnation = 9,
    /// The standby holds redo past the point where the primary's incarnation began (a
    /// failover left it on the old branch): it must be reinstated before it can follow.
    Diverged = 10,
    /// The peer did not prove who it claims to be (its TLS certificate is not for that name),
    /// or that name may not do what it asked (not a member of this configuration, say).
    Unauthenticated = 11,
}

impl ErrorCode {
    pub(crate) fn from_u16(value: u16) -> ErrorCode {
        match value {
            1 => ErrorCode::VersionMismatch,
            2 => ErrorCode::WrongDatabase,
            3 => ErrorCode::NotAStandby,
            4 => ErrorCode::LayoutMismatch,
            5 => ErrorCode::Malformed,
            6 => ErrorCode::Busy,
            8 => ErrorCode::ShuttingDown,
            9 => ErrorCode::NewerIncarnation,
            10 => ErrorCode::Diverged,
            11 => ErrorCode::Unauthenticated,
            _ => ErrorCode::Internal,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// An `Error` message: a code, text for a person, and (for role errors) the incarnation and
/// the member the sender knows as primary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorMessage {
    pub code: ErrorCode,
    pub message: String,
    /// For `NewerIncarnation`, `NotAStandby`, `Diverged`: the sender's incarnation; else 0.
    pub incarnation: u32,
    /// For the same codes: the member the sender knows as primary (empty if none).
    pub primary: String,
}

impl ErrorMessage {
    /// An error with no role information.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ErrorMessage {
        ErrorMessage { code, message: message.into(), incarnation: 0, primary: String::new() }
    }
}

/// A frame or a message that cannot be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("not a redoguard redo transport frame (bad magic {0:#010x})")]
    Magic(u32),
    #[error("frame of {length} bytes exceeds the limit of {max}")]
    TooLong { length: usize, max: usize },
    #[error("frame checksum mismatch")]
    Checksum,
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    #[error("malformed {kind:?} message: {reason}")]
    Malformed { kind: Kind, reason: String },
    /// A compressed frame that does not decompress to what it claims (a lying length, a
    /// decompression bomb, corrupt data): nothing of it is used.
    #[error("compressed {kind:?} frame refused: {reason}")]
    Compressed { kind: Kind, reason: String },
}
