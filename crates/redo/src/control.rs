//! The control file: the redo engine's small persistent state (identity, log layout,
//! checkpoint), replaced durably as a whole on every change.

use std::path::{Path, PathBuf};

use crate::error::{RedoError, Result};
use crate::format::FormatError;
use crate::storage::{self, Storage};
use crate::types::{DatabaseId, Incarnation, RedoThread, Scn};

const MAGIC: u32 = u32::from_le_bytes(*b"RGCF");
const VERSION: u16 = 1;
const LEN: usize = 72;

// Format (little-endian, 72 bytes):
// { magic: u32 "RGCF" | crc32c: u32 (over bytes 8..72) | version: u16 | thread: u16
// | incarnation: u32 | database_id: u64 | checkpoint_scn: u64 | created_us: u64
// | block_size: u32 | groups: u32 | members: u32 | reserved: u32 | log_file_size: u64
// | write_bytes_max: u64 }

/// What the control file records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlData {
    pub database_id: DatabaseId,
    pub incarnation: Incarnation,
    pub thread: RedoThread,
    /// Every record with an SCN at or below this is in the data files durably.
    pub checkpoint_scn: Scn,
    pub created_us: u64,
    pub block_size: u32,
    pub groups: u32,
    pub members: u32,
    pub log_file_size: u64,
    /// The largest single log write any run of this database could have issued: redo found
    /// valid further than this past the end of redo is corruption, not a torn last write.
    pub write_bytes_max: u64,
}

impl ControlData {
    pub fn encode(&self) -> [u8; LEN] {
        let mut bytes = [0u8; LEN];
        bytes[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        bytes[8..10].copy_from_slice(&VERSION.to_le_bytes());
        bytes[10..12].copy_from_slice(&self.thread.0.to_le_bytes());
        bytes[12..16].copy_from_slice(&self.incarnation.0.to_le_bytes());
        bytes[16..24].copy_from_slice(&self.database_id.0.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.checkpoint_scn.0.to_le_bytes());
        bytes[32..40].copy_from_slice(&self.created_us.to_le_bytes());
        bytes[40..44].copy_from_slice(&self.block_size.to_le_bytes());
        bytes[44..48].copy_from_slice(&self.groups.to_le_bytes());
        bytes[48..52].copy_from_slice(&self.members.to_le_bytes());
        bytes[56..64].copy_from_slice(&self.log_file_size.to_le_bytes());
        bytes[64..72].copy_from_slice(&self.write_bytes_max.to_le_bytes());
        let crc = crc32c::crc32c(&bytes[8..]);
        bytes[4..8].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    pub fn decode(bytes: &[u8]) -> Result<ControlData, FormatError> {
        let error = |reason: &str| FormatError { offset: 0, reason: reason.to_string() };
        if bytes.len() != LEN {
            return Err(error(&format!("control file is {} bytes, expected {LEN}", bytes.len())));
        }
        let u16_at = |at: usize| u16::from_le_bytes(bytes[at..at + 2].try_into().expect("2 bytes"));
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        if u32_at(0) != MAGIC {
            return Err(error("not a redoguard control file (bad magic)"));
        }
        if u32_at(4) != crc32c::crc32c(&bytes[8..]) {
            return Err(error("control file checksum mismatch"));
        }
        if u16_at(8) != VERSION {
            return Err(error(&format!(
                "control file version {}; this build reads {VERSION}",
                u16_at(8)
            )));
        }
        Ok(ControlData {
            thread: RedoThread(u16_at(10)),
            incarnation: Incarnation(u32_at(12)),
            database_id: DatabaseId(u64_at(16)),
            checkpoint_scn: Scn(u64_at(24)),
            created_us: u64_at(32),
            block_size: u32_at(40),
            groups: u32_at(44),
            members: u32_at(48),
            log_file_size: u64_at(56),
            write_bytes_max: u64_at(64),
        })
    }
}

/// The control file on disk.
#[derive(Debug)]
pub struct ControlFile {
    path: PathBuf,
}

impl ControlFile {
    pub fn new(dir: &Path) -> ControlFile {
        ControlFile { path: dir.join("control") }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn exists(&self, storage: &dyn Storage) -> bool {
        storage.exists(&self.path)
    }

    pub fn read(&self, storage: &dyn Storage) -> Result<ControlData> {
        let bytes = storage::read_all(storage, &self.path)
            .map_err(|error| RedoError::io("read", &self.path, error))?;
        ControlData::decode(&bytes).map_err(|error| RedoError::corrupt(&self.path, error))
    }

    /// Replaces the control file durably (see `storage::replace_durably`).
    pub fn write(&self, storage: &dyn Storage, data: &ControlData) -> Result<()> {
        storage::replace_durably(storage, &self.path, &data.encode())
            .map_err(|error| RedoError::io("write", &self.path, error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let data = ControlData {
            database_id: DatabaseId(0xfeed),
            incarnation: Incarnation(2),
            thread: RedoThread(1),
            checkpoint_scn: Scn(12345),
            created_us: 99,
            block_size: 4096,
            groups: 3,
            members: 2,
            log_file_size: 64 << 20,
            write_bytes_max: 16 << 20,
        };
        let bytes = data.encode();
        assert_eq!(ControlData::decode(&bytes), Ok(data));
        for at in 0..LEN {
            let mut damaged = bytes;
            damaged[at] ^= 0x40;
            assert!(ControlData::decode(&damaged).is_err(), "byte {at}");
        }
        assert!(ControlData::decode(&bytes[..10]).is_err());
    }
}
