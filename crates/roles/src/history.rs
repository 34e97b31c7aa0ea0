//! The incarnation history: where each incarnation of a database began.
//!
//! Incarnation 1 is the database as created. Every failover opens a new incarnation at the
//! point the new primary's redo ended (its *branch*): the first log sequence and SCN of the
//! new incarnation, and where the last log of the old one ends on this branch. The history is
//! what a standby compares its own position with to know whether it can follow a primary of
//! a newer incarnation (see `follow`), and what a reinstate uses to find where a failed-over
//! primary's divergent redo begins.
//!
//! It is kept in `<redo dir>/incarnations`, replaced durably as a whole on every change:
//!
//! ```text
//! // Format (little-endian):
//! // { magic: u32 "RGIH" | crc32c: u32 (over the rest) | version: u16 | count: u16
//! // | records: count × { incarnation: u32 | first_seq: u64 | first_scn: u64
//! //   | prev_end_offset: u64 | prev_closed_here: u8 | created_us: u64
//! //   | member_len: u8 | member: [u8; member_len] } }
//! ```
//!
//! Records are consecutive from incarnation 2 (a file that is not is refused as corrupt). A
//! new incarnation is written here *before* the control file names it, so that a crash in
//! between leaves a record for an incarnation the database never entered: `load` with the
//! control file's incarnation drops such records.

use std::path::{Path, PathBuf};

use redo::storage::{self, Storage};
use redo::{Incarnation, LogSeq, RedoAddr, Scn};
use serde::{Deserialize, Serialize};

const MAGIC: u32 = u32::from_le_bytes(*b"RGIH");
const VERSION: u16 = 1;
/// Longest member name (the configuration refuses longer ones).
pub const MEMBER_NAME_MAX: usize = 64;
/// Most records a history holds (a failover a day for 170 years).
pub const RECORDS_MAX: usize = u16::MAX as usize;

/// Where one incarnation began.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Branch {
    pub incarnation: Incarnation,
    /// The first log of the new incarnation.
    pub first_seq: LogSeq,
    /// The first SCN the new incarnation gives: every SCN below it comes from the parent.
    pub first_scn: Scn,
    /// Where the parent's last log (`first_seq - 1`) ends on this branch.
    pub prev_end_offset: u64,
    /// Whether the new primary closed that log itself (it was open there, being received):
    /// then only a member holding it *open*, up to `prev_end_offset` at most, is on this
    /// branch; one holding it closed (by the old primary) is not, even at the same end.
    pub prev_closed_here: bool,
    pub created_us: u64,
    /// The member that opened the incarnation.
    pub member: String,
}

impl Branch {
    /// The incarnation it branched from.
    pub fn parent(&self) -> Incarnation {
        Incarnation(self.incarnation.0 - 1)
    }

    /// The last position of the parent's redo on this branch, as a standby's "next byte
    /// needed" counts it: the parent's last log up to `prev_end_offset`, or (if it was
    /// closed before the branch) the beginning of the next log.
    pub fn parent_end(&self) -> RedoAddr {
        if self.prev_closed_here {
            RedoAddr { seq: self.first_seq.prev_seq(), offset: self.prev_end_offset }
        } else {
            RedoAddr { seq: self.first_seq, offset: 0 }
        }
    }

    pub fn to_wire(&self) -> proto::IncarnationRecord {
        proto::IncarnationRecord {
            incarnation: self.incarnation.0,
            parent: self.incarnation.0 - 1,
            first_seq: self.first_seq.0,
            first_scn: self.first_scn.0,
            prev_end_offset: self.prev_end_offset,
            prev_closed_here: self.prev_closed_here,
            created_us: self.created_us,
            member: self.member.clone(),
        }
    }

    /// From the wire (`proto` has checked that the records are consecutive and branch from
    /// their predecessor).
    pub fn from_wire(record: &proto::IncarnationRecord) -> Branch {
        Branch {
            incarnation: Incarnation(record.incarnation),
            first_seq: LogSeq(record.first_seq),
            first_scn: Scn(record.first_scn),
            prev_end_offset: record.prev_end_offset,
            prev_closed_here: record.prev_closed_here,
            created_us: record.created_us,
            member: record.member.chars().take(MEMBER_NAME_MAX).collect(),
        }
    }
}

/// Why a history cannot be read or written.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("incarnation history {path}: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("incarnation history {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// A database's incarnation history (records for incarnations 2 and up, oldest first).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncarnationHistory {
    pub branches: Vec<Branch>,
}

impl IncarnationHistory {
    /// The file's place in a redo directory.
    pub fn path(redo_dir: &Path) -> PathBuf {
        redo_dir.join("incarnations")
    }

    /// Reads the history of a database whose control file says it is in `current` (no file:
    /// none yet). Records beyond `current` were written by a failover that crashed before it
    /// made the control file name them: they are dropped (and the file rewritten).
    pub fn load(
        storage: &dyn Storage,
        redo_dir: &Path,
        current: Incarnation,
    ) -> Result<IncarnationHistory, HistoryError> {
        let path = Self::path(redo_dir);
        if !storage.exists(&path) {
            return Ok(IncarnationHistory::default());
        }
        let bytes = storage::read_all(storage, &path)
            .map_err(|source| HistoryError::Io { path: path.clone(), source })?;
        let mut history = Self::decode(&bytes)
            .map_err(|reason| HistoryError::Corrupt { path: path.clone(), reason })?;
        if history.branches.iter().any(|branch| branch.incarnation > current) {
            history.branches.retain(|branch| branch.incarnation <= current);
            history.save(storage, redo_dir)?;
        }
        Ok(history)
    }

    /// Replaces the file durably.
    pub fn save(&self, storage: &dyn Storage, redo_dir: &Path) -> Result<(), HistoryError> {
        let path = Self::path(redo_dir);
        storage::replace_durably(storage, &path, &self.encode())
            .map_err(|source| HistoryError::Io { path, source })
    }

    /// The newest incarnation it knows (1 when there is no record).
    pub fn newest(&self) -> Incarnation {
        self.branches.last().map_or(Incarnation(1), |branch| branch.incarnation)
    }

    /// The record of incarnation `incarnation`, if it is one of these.
    pub fn branch(&self, incarnation: Incarnation) -> Option<&Branch> {
        self.branches.iter().find(|branch| branch.incarnation == incarnation)
    }

    /// Adds the record of the next incarnation (refused unless it is the next one).
    pub fn push(&mut self, branch: Branch) -> Result<(), String> {
        if branch.incarnation.0 != self.newest().0 + 1 {
            return Err(format!(
                "incarnation {} does not follow incarnation {}",
                branch.incarnation,
                self.newest()
            ));
        }
        if self.branches.len() >= RECORDS_MAX {
            return Err(format!("more than {RECORDS_MAX} incarnations"));
        }
        self.branches.push(branch);
        Ok(())
    }

    /// The newest records, as a hello carries them.
    pub fn to_wire(&self) -> Vec<proto::IncarnationRecord> {
        let newest = &self.branches[self.branches.len().saturating_sub(proto::HISTORY_MAX)..];
        newest.iter().map(Branch::to_wire).collect()
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![0u8; 12];
        out[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        out[8..10].copy_from_slice(&VERSION.to_le_bytes());
        out[10..12].copy_from_slice(&(self.branches.len() as u16).to_le_bytes());
        for branch in &self.branches {
            out.extend_from_slice(&branch.incarnation.0.to_le_bytes());
            out.extend_from_slice(&branch.first_seq.0.to_le_bytes());
            out.extend_from_slice(&branch.first_scn.0.to_le_bytes());
            out.extend_from_slice(&branch.prev_end_offset.to_le_bytes());
            out.push(u8::from(branch.prev_closed_here));
            out.extend_from_slice(&branch.created_us.to_le_bytes());
            let name = &branch.member.as_bytes()[..branch.member.len().min(MEMBER_NAME_MAX)];
            out.push(name.len() as u8);
            out.extend_from_slice(name);
        }
        let crc = crc32c::crc32c(&out[8..]);
        out[4..8].copy_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<IncarnationHistory, String> {
        if bytes.len() < 12 {
            return Err(format!("{} bytes is too short for a history", bytes.len()));
        }
        let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
        if u32_at(0) != MAGIC {
            return Err("not an incarnation history (bad magic)".into());
        }
        if u32_at(4) != crc32c::crc32c(&bytes[8..]) {
            return Err("checksum mismatch".into());
        }
        if u16_at(8) != VERSION {
            return Err(format!("version {}; this build reads {VERSION}", u16_at(8)));
        }
        let count = u16_at(10) as usize;
        let mut at = 12;
        let mut take = |len: usize| -> Result<&[u8], String> {
            let slice = bytes.get(at..at + len).ok_or("truncated")?;
            at += len;
            Ok(slice)
        };
        let mut history = IncarnationHistory::default();
        for _ in 0..count {
            let u64_of = |slice: &[u8]| u64::from_le_bytes(slice.try_into().expect("8"));
            let incarnation = Incarnation(u32::from_le_bytes(take(4)?.try_into().expect("4")));
            let first_seq = LogSeq(u64_of(take(8)?));
            let first_scn = Scn(u64_of(take(8)?));
            let prev_end_offset = u64_of(take(8)?);
            let prev_closed_here = match take(1)?[0] {
                0 => false,
                1 => true,
                other => return Err(format!("{other} is not a boolean")),
            };
            let created_us = u64_of(take(8)?);
            let len = take(1)?[0] as usize;
            let member = String::from_utf8(take(len)?.to_vec())
                .map_err(|_| "member name is not UTF-8".to_string())?;
            history.push(Branch {
                incarnation,
                first_seq,
                first_scn,
                prev_end_offset,
                prev_closed_here,
                created_us,
                member,
            })?;
        }
        if at != bytes.len() {
            return Err(format!("{} bytes after the last record", bytes.len() - at));
        }
        Ok(history)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn branch(incarnation: u32) -> Branch {
        Branch {
            incarnation: Incarnation(incarnation),
            first_seq: LogSeq(10 + u64::from(incarnation)),
            first_scn: Scn(1000 * u64::from(incarnation)),
            prev_end_offset: 65536,
            prev_closed_here: incarnation.is_multiple_of(2),
            created_us: 7,
            member: format!("member{incarnation}"),
        }
    }

    #[test]
    fn round_trip_and_any_damage_is_refused() {
        let mut history = IncarnationHistory::default();
        for incarnation in 2..6 {
            history.push(branch(incarnation)).unwrap();
        }
        let bytes = history.encode();
        assert_eq!(IncarnationHistory::decode(&bytes).unwrap(), history);
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert!(IncarnationHistory::decode(&damaged).is_err(), "byte {at}");
        }
        for cut in 0..bytes.len() {
            assert!(IncarnationHistory::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
    }

    #[test]
    fn only_the_next_incarnation_can_be_added() {
        let mut history = IncarnationHistory::default();
        assert!(history.push(branch(3)).is_err());
        history.push(branch(2)).unwrap();
        assert!(history.push(branch(2)).is_err());
        assert_eq!(history.newest(), Incarnation(2));
    }

    #[test]
    fn records_of_an_incarnation_never_entered_are_dropped_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let storage = redo::OsStorage::default();
        let mut history = IncarnationHistory::default();
        history.push(branch(2)).unwrap();
        history.push(branch(3)).unwrap();
        history.save(&storage, dir.path()).unwrap();
        let loaded = IncarnationHistory::load(&storage, dir.path(), Incarnation(2)).unwrap();
        assert_eq!(loaded.newest(), Incarnation(2));
        // And the file was rewritten.
        let again = IncarnationHistory::load(&storage, dir.path(), Incarnation(3)).unwrap();
        assert_eq!(again.newest(), Incarnation(2));
    }

    #[test]
    fn the_parent_end_is_inside_the_last_log_when_the_new_primary_closed_it() {
        let closed_here = Branch { prev_closed_here: true, ..branch(2) };
        assert_eq!(closed_here.parent_end(), RedoAddr { seq: LogSeq(11), offset: 65536 });
        let closed_before = Branch { prev_closed_here: false, ..branch(2) };
        assert_eq!(closed_before.parent_end(), RedoAddr { seq: LogSeq(12), offset: 0 });
    }
}
