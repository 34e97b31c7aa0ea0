//! The control file: the redo engine's small persistent state (identity, log layout,
//! checkpoint), replaced durably as a whole on every change.

use std::path::{Path, PathBuf};

use crate::Role;
use crate::error::{RedoError, Result};
use crate::format::FormatError;
use crate::storage::{self, Storage};
use crate::types::{DatabaseId, Incarnation, LogSeq, RedoThread, Scn};

const MAGIC: u32 = u32::from_le_bytes(*b"RGCF");
const VERSION: u16 = 2;
const LEN_V1: usize = 72;
const LEN: usize = 256;
/// Longest member name kept (the configuration refuses longer ones).
pub const NAME_MAX: usize = 64;

// Format, version 2 (little-endian, 256 bytes):
// { magic: u32 "RGCF" | crc32c: u32 (over bytes 8..256) | version: u16 | thread: u16
// | incarnation: u32 | database_id: u64 | checkpoint_scn: u64 | created_us: u64
// | block_size: u32 | groups: u32 | members: u32 | role: u8 (1 primary, 2 standby)
// | flags: u8 (bit 0: followed) | reserved: u16 | log_file_size: u64 | write_bytes_max: u64
// | base_seq: u64 | fenced_incarnation: u32 | sealed_below: u32
// | member_len: u8 | member: [u8; 64] | fenced_by_len: u8 | fenced_by: [u8; 64]
// | reserved: zeros to 256 }
// Version 1 was the first 72 bytes (role, flags and everything after write_bytes_max
// absent); it is read with the role the caller expects and rewritten as version 2.

/// A newer incarnation this database knows it is not part of.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fence {
    pub incarnation: Incarnation,
    /// The member that is primary in it, if known.
    pub by: String,
}

/// What the control file records: who the database is, its role, and its log layout.
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The role the database holds: state of the database, kept across restarts.
    pub role: Role,
    /// A primary that some standby has followed in this role, that served a copy for a new
    /// standby, or that a switchover or a failover made primary (a standby may be failed over
    /// to at any time): after a restart it takes no write until its standbys have confirmed
    /// that no newer incarnation exists.
    pub followed: bool,
    /// A standby built from a copy of its primary's data: logs before this one were never
    /// received and are not needed (0: none).
    pub base_seq: LogSeq,
    /// A newer incarnation this database is not part of: it takes no write (a primary) and
    /// no redo (a standby) until it is reinstated.
    pub fenced: Option<Fence>,
    /// A relay sealed by a failover target (`RelaySeal`, docs/roles.md, "Failover through a
    /// far sync"): it takes no redo of an incarnation below this one, from anyone, ever again
    /// (0: not sealed). On disk before the seal is answered, so that a restart of the relay
    /// cannot let the old primary acknowledge through it again.
    pub sealed_below: Incarnation,
    /// The configuration member this database is (empty: not named yet).
    pub member: String,
}

fn put_name(bytes: &mut [u8], at: usize, name: &str) {
    let mut end = name.len().min(NAME_MAX);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    bytes[at] = end as u8;
    bytes[at + 1..at + 1 + end].copy_from_slice(&name.as_bytes()[..end]);
}

fn get_name(bytes: &[u8], at: usize) -> Result<String, &'static str> {
    let len = bytes[at] as usize;
    if len > NAME_MAX {
        return Err("a name longer than 64 bytes");
    }
    String::from_utf8(bytes[at + 1..at + 1 + len].to_vec()).map_err(|_| "a name that is not UTF-8")
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
        bytes[52] = match self.role {
            Role::Primary => 1,
            Role::Standby => 2,
        };
        bytes[53] = u8::from(self.followed);
        bytes[56..64].copy_from_slice(&self.log_file_size.to_le_bytes());
        bytes[64..72].copy_from_slice(&self.write_bytes_max.to_le_bytes());
        bytes[72..80].copy_from_slice(&self.base_seq.0.to_le_bytes());
        if let Some(fence) = &self.fenced {
            bytes[80..84].copy_from_slice(&fence.incarnation.0.to_le_bytes());
            put_name(&mut bytes, 153, &fence.by);
        }
        bytes[84..88].copy_from_slice(&self.sealed_below.0.to_le_bytes());
        put_name(&mut bytes, 88, &self.member);
        let crc = crc32c::crc32c(&bytes[8..]);
        bytes[4..8].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Decodes a control file; a version 1 file takes `v1_role` (it did not record one).
    pub fn decode(bytes: &[u8], v1_role: Role) -> Result<ControlData, FormatError> {
        let error = |reason: &str| FormatError { offset: 0, reason: reason.to_string() };
        if bytes.len() < 10 {
            return Err(error(&format!("control file is {} bytes, expected {LEN}", bytes.len())));
        }
        let u16_at = |at: usize| u16::from_le_bytes(bytes[at..at + 2].try_into().expect("2 bytes"));
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        if u32_at(0) != MAGIC {
            return Err(error("not a redoguard control file (bad magic)"));
        }
        let version = u16_at(8);
        let expected = match version {
            1 => LEN_V1,
            VERSION => LEN,
            other => {
                return Err(error(&format!(
                    "control file version {other}; this build reads 1 and {VERSION}"
                )));
            }
        };
        if bytes.len() != expected {
            return Err(error(&format!(
                "control file version {version} is {} bytes, expected {expected}",
                bytes.len()
            )));
        }
        if u32_at(4) != crc32c::crc32c(&bytes[8..]) {
            return Err(error("control file checksum mismatch"));
        }
        let mut data = ControlData {
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
            role: v1_role,
            followed: false,
            base_seq: LogSeq(0),
            fenced: None,
            sealed_below: Incarnation(0),
            member: String::new(),
        };
        if version == 1 {
            return Ok(data);
        }
        data.role = match bytes[52] {
            1 => Role::Primary,
            2 => Role::Standby,
            other => return Err(error(&format!("unknown role {other}"))),
        };
        data.followed = bytes[53] & 1 != 0;
        data.base_seq = LogSeq(u64_at(72));
        // Zero in files written before seals existed (the bytes were reserved, zeros).
        data.sealed_below = Incarnation(u32_at(84));
        data.member = get_name(bytes, 88).map_err(error)?;
        let fenced = u32_at(80);
        if fenced != 0 {
            data.fenced = Some(Fence {
                incarnation: Incarnation(fenced),
                by: get_name(bytes, 153).map_err(error)?,
            });
        }
        Ok(data)
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

    /// Reads the control file (a version 1 file, which recorded no role, takes `v1_role`).
    pub fn read(&self, storage: &dyn Storage, v1_role: Role) -> Result<ControlData> {
        let bytes = storage::read_all(storage, &self.path)
            .map_err(|error| RedoError::io("read", &self.path, error))?;
        ControlData::decode(&bytes, v1_role).map_err(|error| RedoError::corrupt(&self.path, error))
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
            role: Role::Standby,
            followed: true,
            base_seq: LogSeq(42),
            fenced: Some(Fence { incarnation: Incarnation(3), by: "wést".into() }),
            sealed_below: Incarnation(3),
            member: "east".into(),
        };
        let bytes = data.encode();
        assert_eq!(ControlData::decode(&bytes, Role::Primary), Ok(data.clone()));
        for at in 0..LEN {
            let mut damaged = bytes;
            damaged[at] ^= 0x40;
            assert!(ControlData::decode(&damaged, Role::Primary).is_err(), "byte {at}");
        }
        assert!(ControlData::decode(&bytes[..10], Role::Primary).is_err());
        let unfenced = ControlData {
            fenced: None,
            sealed_below: Incarnation(0),
            member: String::new(),
            ..data
        };
        assert_eq!(ControlData::decode(&unfenced.encode(), Role::Primary), Ok(unfenced));
    }

    #[test]
    fn a_version_1_file_is_read_with_the_expected_role() {
        // The layout of version 1: the first 72 bytes, version 1, its own checksum.
        let data = ControlData {
            database_id: DatabaseId(9),
            incarnation: Incarnation(1),
            thread: RedoThread(1),
            checkpoint_scn: Scn(5),
            created_us: 1,
            block_size: 4096,
            groups: 3,
            members: 1,
            log_file_size: 1 << 20,
            write_bytes_max: 1 << 16,
            role: Role::Primary,
            followed: false,
            base_seq: LogSeq(0),
            fenced: None,
            sealed_below: Incarnation(0),
            member: String::new(),
        };
        let mut v1 = data.encode()[..LEN_V1].to_vec();
        v1[8..10].copy_from_slice(&1u16.to_le_bytes());
        v1[52] = 0;
        let crc = crc32c::crc32c(&v1[8..]);
        v1[4..8].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            ControlData::decode(&v1, Role::Standby),
            Ok(ControlData { role: Role::Standby, ..data })
        );
    }
}
