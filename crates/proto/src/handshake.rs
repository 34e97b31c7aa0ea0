//! A standby's first checks of a primary's hello: protocol versions, database and log
//! layout. (Whether it may follow the primary's incarnation is decided by the `roles` crate,
//! which knows the standby's history.)

use crate::error::{ErrorCode, ErrorMessage};
use crate::message::Hello;
use crate::{PROTOCOL_VERSION, PROTOCOL_VERSION_MIN};

/// Who the local side is, for the handshake's checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalIdentity {
    /// 0 for a standby that has no database yet.
    pub database_id: u64,
    pub block_size: u32,
    pub log_file_size: u64,
}

/// A standby's decision about a primary's hello: `Ok` to accept (adopting the primary's
/// database if it has none), or the error to send before closing.
pub fn check_hello(hello: &Hello, local: &LocalIdentity) -> Result<(), ErrorMessage> {
    if hello.version < PROTOCOL_VERSION_MIN || hello.version_min > PROTOCOL_VERSION {
        return Err(ErrorMessage::new(
            ErrorCode::VersionMismatch,
            format!(
                "protocol version {} (accepting {}..={}) is not compatible with this standby's {}..={}",
                hello.version,
                hello.version_min,
                hello.version,
                PROTOCOL_VERSION_MIN,
                PROTOCOL_VERSION
            ),
        ));
    }
    if local.database_id != 0 && hello.database_id != local.database_id {
        return Err(ErrorMessage::new(
            ErrorCode::WrongDatabase,
            format!(
                "this standby protects database {:016x}; a primary of database {:016x} was refused",
                local.database_id, hello.database_id
            ),
        ));
    }
    if hello.block_size != local.block_size || hello.log_file_size != local.log_file_size {
        return Err(ErrorMessage::new(
            ErrorCode::LayoutMismatch,
            format!(
                "the primary's logs have block size {} and size {}; this standby's logs have {} and {}: configure the same redo.block_size and redo.log_file_size on both",
                hello.block_size, hello.log_file_size, local.block_size, local.log_file_size
            ),
        ));
    }
    Ok(())
}
