//! Online log groups: N groups of M mirrored member files, reused round-robin, and the
//! recovery scan that finds the true end of redo when they are opened.

use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::catalog::ArchiveCatalog;
use crate::config::RedoConfig;
use crate::error::{RedoError, Result};
use crate::format::{self, HeaderBlock, LogEnd, LogHeader, RedoScanner, ScanStep};
use crate::storage::{Storage, StorageFile};
use crate::types::{LogSeq, Scn};

/// State of a group, as a DBA knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum GroupState {
    /// Being written.
    Current,
    /// Switched away from, and still needed: not yet archived or not yet checkpointed.
    Active,
    /// Archived and checkpointed: may be reused.
    Inactive,
    /// Never written.
    Unused,
}

/// State of one member file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "reason")]
pub enum MemberState {
    /// Written with every write of its group.
    Valid,
    /// Out of date (it failed earlier, or did not match its group when the logs were opened);
    /// it is written again from the next reuse of its group.
    Stale(String),
    /// An I/O error took it out; it is retried at the next reuse of its group.
    Failed(String),
}

#[derive(Debug)]
pub(crate) struct Member {
    pub path: PathBuf,
    pub file: Option<Arc<dyn StorageFile>>,
    pub state: MemberState,
}

/// What is known about the log a group holds.
#[derive(Debug, Clone)]
pub(crate) struct OnlineLog {
    pub header: LogHeader,
    /// Set once the log has been switched away from (its closed header is durable).
    pub end: Option<LogEnd>,
    pub archived: bool,
}

#[derive(Debug)]
pub(crate) struct Group {
    pub members: Vec<Member>,
    pub log: Option<OnlineLog>,
}

/// Why a group cannot be reused yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reuse {
    Ready,
    NeedsArchiving(LogSeq),
    /// The checkpoint must reach this SCN (the last SCN of the log).
    NeedsCheckpoint(Scn),
}

#[derive(Debug)]
pub(crate) struct GroupTable {
    pub groups: Vec<Group>,
    /// The group being written, once there is one.
    pub current: Option<usize>,
}

impl GroupTable {
    pub fn state(&self, index: usize, checkpoint_scn: Scn) -> GroupState {
        match &self.groups[index].log {
            None => GroupState::Unused,
            Some(_) if self.current == Some(index) => GroupState::Current,
            Some(_) if self.reuse(index, checkpoint_scn) == Reuse::Ready => GroupState::Inactive,
            Some(_) => GroupState::Active,
        }
    }

    pub fn reuse(&self, index: usize, checkpoint_scn: Scn) -> Reuse {
        match &self.groups[index].log {
            None => Reuse::Ready,
            Some(log) => match log.end {
                // The current log (or one not yet closed) is never reusable.
                None => Reuse::NeedsArchiving(log.header.seq),
                Some(_) if !log.archived => Reuse::NeedsArchiving(log.header.seq),
                Some(end)
                    if end.next_scn.prev() > checkpoint_scn
                        && end.next_scn > log.header.first_scn =>
                {
                    Reuse::NeedsCheckpoint(end.next_scn.prev())
                }
                Some(_) => Reuse::Ready,
            },
        }
    }

    /// The group holding log `seq`, if it is online.
    pub fn find(&self, seq: LogSeq) -> Option<usize> {
        self.groups
            .iter()
            .position(|group| group.log.as_ref().is_some_and(|log| log.header.seq == seq))
    }
}

/// A member's status for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberStatus {
    pub path: PathBuf,
    #[serde(flatten)]
    pub state: MemberState,
}

/// A group's status for a person (`redoguard status`, the admin API).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStatus {
    /// 1-based, as in file names.
    pub group: u32,
    pub state: GroupState,
    pub seq: Option<LogSeq>,
    pub first_scn: Option<Scn>,
    pub next_scn: Option<Scn>,
    pub first_time_us: Option<u64>,
    pub archived: bool,
    /// Bytes of the file holding headers and redo (for the current log: written so far).
    pub used_bytes: u64,
    pub size_bytes: u64,
    pub members: Vec<MemberStatus>,
}

/// Everything found when the online logs were opened.
#[derive(Debug)]
pub(crate) struct Opened {
    pub table: GroupTable,
    /// The SCN the next record will get.
    pub next_scn: Scn,
    /// Sequence of the newest log (0 if there is none).
    pub last_seq: LogSeq,
    /// Logs switched away from but not yet archived everywhere.
    pub to_archive: Vec<LogSeq>,
    /// On a standby, the durable end of the newest log if it is still open (0 otherwise).
    pub open_end: u64,
}

/// What failed when `StorageFile::settle` did (the error says `cannot {this} {path}: …`).
pub(crate) const SETTLE_FAILED: &str =
    "make durable (they may be lost: check the device) the writes left unsynced in";

pub(crate) fn io_error<'a>(
    op: &'static str,
    path: &'a std::path::Path,
) -> impl FnOnce(std::io::Error) -> RedoError + 'a {
    move |error| RedoError::io(op, path, error)
}

/// Reads the header blocks of one member: the open header (if valid) and the closed one
/// (if valid and matching).
fn read_headers(
    file: &dyn StorageFile,
    path: &std::path::Path,
    block_size: u32,
) -> Result<Option<(LogHeader, Option<LogEnd>)>> {
    let block = block_size as usize;
    let mut bytes = vec![0u8; 2 * block];
    file.read_at(&mut bytes, 0).map_err(io_error("read the headers of", path))?;
    let header = match format::decode_header(&bytes[..block], 0) {
        Ok(HeaderBlock::Open(header)) => header,
        // Zeroes (never used) or a torn header write (the switch to it never completed).
        _ => return Ok(None),
    };
    let end = match format::decode_header(&bytes[block..], u64::from(block_size)) {
        Ok(HeaderBlock::Closed(closed, end)) if closed == header => Some(end),
        _ => None,
    };
    Ok(Some((header, end)))
}

/// Writes one header block to a member and syncs it.
pub(crate) fn write_header(
    file: &dyn StorageFile,
    block: &[u8],
    offset: u64,
) -> std::io::Result<()> {
    file.write_at(block, offset)?;
    file.sync_data()
}

/// Scans the units of an open log on `file` and returns where its redo ends.
fn scan_end(
    file: &dyn StorageFile,
    path: &std::path::Path,
    header: &LogHeader,
    write_bytes_max: u64,
) -> Result<LogEnd> {
    let block = header.block_size as usize;
    let chunk_units = ((1usize << 20) / block).max(1);
    let mut scanner = RedoScanner::new(header);
    let mut records = Vec::new();
    let mut chunk = vec![0u8; chunk_units * block];
    'scan: while !scanner.at_end_of_file() {
        let at = scanner.next_offset();
        let units =
            (((header.file_size - at) / header.block_size as u64) as usize).min(chunk_units);
        let bytes = &mut chunk[..units * block];
        file.read_at(bytes, at).map_err(io_error("read", path))?;
        for unit in bytes.chunks(block) {
            let step = scanner
                .push_unit(unit, &mut records)
                .map_err(|error| RedoError::corrupt(path, error))?;
            records.clear();
            if let ScanStep::End(_) = step {
                break 'scan;
            }
        }
    }
    let end_offset = scanner.end_offset();
    // A torn last write can leave valid units past the end, but never further than one write.
    // Valid redo of this log beyond that is a damaged unit in the middle: refuse to guess.
    let bound =
        end_offset.saturating_add(write_bytes_max).saturating_add(2 * header.block_size as u64);
    let mut at = scanner.next_offset() + header.block_size as u64;
    while at + header.block_size as u64 <= header.file_size {
        let units =
            (((header.file_size - at) / header.block_size as u64) as usize).min(chunk_units);
        let bytes = &mut chunk[..units * block];
        file.read_at(bytes, at).map_err(io_error("read", path))?;
        for (index, unit) in bytes.chunks(block).enumerate() {
            let offset = at + (index * block) as u64;
            if offset > bound && matches!(format::check_unit(unit, header.seq, offset), Ok(Ok(_))) {
                return Err(RedoError::Corrupt {
                    file: path.to_path_buf(),
                    offset: end_offset,
                    reason: format!(
                        "redo ends at offset {end_offset}, but valid redo of this log continues at offset {offset}: a unit in the middle of the log is damaged (not a torn last write); restore this member from a mirror or the standby"
                    ),
                });
            }
        }
        at += (units * block) as u64;
    }
    Ok(LogEnd {
        next_scn: scanner.end_scn(),
        next_time_us: crate::types::now_unix_us(),
        end_offset,
    })
}

/// Opens every member, reads the headers, finds the true end of every log that was not
/// closed (the one being written at a crash), makes mirrors agree, and closes those logs.
pub(crate) fn open_groups(
    config: &RedoConfig,
    storage: &dyn Storage,
    control: &crate::control::ControlData,
    catalog: &ArchiveCatalog,
    role: crate::Role,
) -> Result<Opened> {
    let mut groups = Vec::with_capacity(config.groups as usize);
    // Per group, per member: whether that member's closed header is valid.
    let mut closed_members: Vec<Vec<bool>> = Vec::with_capacity(config.groups as usize);
    for group_index in 0..config.groups {
        let mut members = Vec::with_capacity(config.members as usize);
        for member_index in 0..config.members {
            let path = config.member_path(group_index, member_index);
            let file: Arc<dyn StorageFile> = if storage.exists(&path) {
                let file = storage.open_log(&path).map_err(io_error("open", &path))?;
                // What the last process left unsynced made durable, and read from the disk.
                file.settle().map_err(io_error(SETTLE_FAILED, &path))?;
                Arc::from(file)
            } else {
                Arc::from(
                    storage
                        .create_log(&path, config.log_file_size)
                        .map_err(io_error("create", &path))?,
                )
            };
            let size = file.len().map_err(io_error("stat", &path))?;
            if size != config.log_file_size {
                return Err(RedoError::Layout(format!(
                    "{} is {size} bytes but log_file_size is {}; changing the size of existing logs is not supported",
                    path.display(),
                    config.log_file_size
                )));
            }
            members.push((path, file));
        }
        // The group's log is the newest one its members agree on; a member holding an older
        // or no log missed writes and is stale until the group is reused.
        let mut found = Vec::new();
        for (path, file) in &members {
            let headers = read_headers(file.as_ref(), path, config.block_size)?;
            if let Some((header, _)) = &headers
                && (header.database_id != control.database_id
                    || header.block_size != config.block_size)
            {
                return Err(RedoError::Layout(format!(
                    "{} belongs to database {} (block size {}), not to database {} (block size {})",
                    path.display(),
                    header.database_id,
                    header.block_size,
                    control.database_id,
                    config.block_size
                )));
            }
            found.push(headers);
        }
        let newest = found.iter().flatten().map(|(header, _)| header.seq).max();
        let mut log = None;
        let mut group_members = Vec::new();
        let mut closed = Vec::new();
        for ((path, file), headers) in members.into_iter().zip(&found) {
            closed.push(matches!(headers, Some((header, Some(_))) if Some(header.seq) == newest));
            let state = match (headers, newest) {
                (Some((header, end)), Some(seq)) if header.seq == seq => {
                    let merged_end =
                        log.as_ref().and_then(|existing: &OnlineLog| existing.end).or(*end);
                    log = Some(OnlineLog { header: *header, end: merged_end, archived: false });
                    MemberState::Valid
                }
                (_, Some(seq)) => {
                    MemberState::Stale(format!("does not hold log sequence {seq} like its group"))
                }
                (_, None) => MemberState::Valid,
            };
            group_members.push(Member { path, file: Some(file), state });
        }
        groups.push(Group { members: group_members, log });
        closed_members.push(closed);
    }
    let mut table = GroupTable { groups, current: None };
    let mut open_end = 0u64;

    // Close every log that was not closed: find its end, bring its mirrors to it, and write
    // the closed header to each. (Normally only the newest log, being written at a crash or
    // shutdown; redo is never appended to it again, so a tail torn by the crash can never be
    // mistaken for redo.)
    for (index, closed_members) in closed_members.iter().enumerate() {
        let Some(log) = table.groups[index].log.clone() else { continue };
        if let Some(end) = log.end {
            // Closed, but a crash while closing may have left the closed header on only some
            // mirrors: give it to every valid member so that they stay byte-identical.
            let group = &table.groups[index];
            let mut block = vec![0u8; config.block_size as usize];
            format::encode_header(&mut block, &HeaderBlock::Closed(log.header, end));
            for (member, &has_end) in group.members.iter().zip(closed_members) {
                if member.state == MemberState::Valid && !has_end {
                    let file = member.file.as_ref().expect("valid members are open");
                    write_header(file.as_ref(), &block, u64::from(config.block_size))
                        .map_err(io_error("close", &member.path))?;
                }
            }
            continue;
        }
        let mut ends: Vec<Option<LogEnd>> = Vec::new();
        let mut damaged = Vec::new();
        for member in &mut table.groups[index].members {
            let scanned = match (&member.state, &member.file) {
                (MemberState::Valid, Some(file)) => {
                    scan_end(file.as_ref(), &member.path, &log.header, control.write_bytes_max)
                }
                _ => {
                    ends.push(None);
                    continue;
                }
            };
            match scanned {
                Ok(end) => ends.push(Some(end)),
                Err(error @ RedoError::Corrupt { .. }) => {
                    // A damaged mirror is taken out; the group goes on with the others.
                    tracing::error!(member = %member.path.display(), %error, "recovery: log member is damaged; taking it out");
                    member.state = MemberState::Failed(error.to_string());
                    ends.push(None);
                    damaged.push(error);
                }
                Err(error) => return Err(error),
            }
        }
        let group = &table.groups[index];
        let Some((best_member, end)) = ends
            .iter()
            .enumerate()
            .filter_map(|(member, end)| end.map(|end| (member, end)))
            .max_by_key(|(_, end)| end.end_offset)
        else {
            match damaged.into_iter().next() {
                Some(error) => return Err(error),
                None => continue,
            }
        };
        let end_offset = end.end_offset;
        if role == crate::Role::Standby {
            // A standby leaves its log open: the primary resumes it from this end (and its
            // closed header comes from the primary). Only level the mirrors.
            open_end = open_end.max(end_offset);
        }
        let best_path = &group.members[best_member].path;
        let best_file = group.members[best_member].file.clone().expect("valid members are open");
        let mut closed = vec![0u8; config.block_size as usize];
        format::encode_header(&mut closed, &HeaderBlock::Closed(log.header, end));
        for (member, member_end) in group.members.iter().zip(&ends) {
            let (Some(file), Some(member_end)) = (&member.file, member_end) else { continue };
            // Mirrors can differ in how much of the last write reached them: copy what this
            // one lacks from the most complete one (bytes it already holds are not rewritten).
            if member_end.end_offset < end_offset {
                let mut missing = vec![0u8; (end_offset - member_end.end_offset) as usize];
                best_file
                    .read_at(&mut missing, member_end.end_offset)
                    .map_err(io_error("read", best_path))?;
                file.write_at(&missing, member_end.end_offset)
                    .map_err(io_error("resynchronise", &member.path))?;
            }
            // What it was given above.
            file.sync_data().map_err(io_error("sync", &member.path))?;
        }
        // Only once every member holds the units durably: a member closed while another still
        // lacked them would, after a crash here, be taken for the log's closing and the other
        // closed without them.
        if role != crate::Role::Standby {
            for (member, member_end) in group.members.iter().zip(&ends) {
                let (Some(file), Some(_)) = (&member.file, member_end) else { continue };
                write_header(file.as_ref(), &closed, u64::from(config.block_size))
                    .map_err(io_error("close", &member.path))?;
            }
        }
        if role == crate::Role::Standby {
            continue;
        }
        tracing::info!(seq = %log.header.seq, end_offset, next_scn = %end.next_scn, "recovery: closed the log that was current at the last shutdown or crash");
        table.groups[index].log.as_mut().expect("log").end = Some(end);
    }

    // Order, chain and archive state of the online logs.
    let mut logs: Vec<(LogSeq, usize)> = table
        .groups
        .iter()
        .enumerate()
        .filter_map(|(index, group)| group.log.as_ref().map(|log| (log.header.seq, index)))
        .collect();
    logs.sort();
    for pair in logs.windows(2) {
        let (older, newer) = (&table.groups[pair[0].1], &table.groups[pair[1].1]);
        let (older, newer) = (older.log.as_ref().expect("log"), newer.log.as_ref().expect("log"));
        if pair[0].0 == pair[1].0 {
            return Err(RedoError::Layout(format!("two groups hold log sequence {}", pair[0].0)));
        }
        let Some(older_end) = older.end else {
            // Only a standby keeps an open log, and only its newest.
            return Err(RedoError::Layout(format!(
                "log {} is open but is not the newest log",
                pair[0].0
            )));
        };
        if pair[1].0 == pair[0].0.next() && older_end.next_scn != newer.header.first_scn {
            return Err(RedoError::Corrupt {
                file: config.dir.clone(),
                offset: 0,
                reason: format!(
                    "log {} ends before SCN {} but log {} starts at SCN {}",
                    pair[0].0, older_end.next_scn, pair[1].0, newer.header.first_scn
                ),
            });
        }
    }
    let mut to_archive = Vec::new();
    for group in &mut table.groups {
        if let Some(log) = &mut group.log {
            log.archived =
                config.archive_dests.iter().all(|dest| catalog.has(log.header.seq, dest));
            if !log.archived && log.end.is_some() {
                to_archive.push(log.header.seq);
            }
        }
    }
    to_archive.sort();
    let (last_seq, next_scn) = match logs.last() {
        Some(&(seq, index)) => {
            table.current = Some(index);
            let log = table.groups[index].log.as_ref().expect("listed logs exist");
            (seq, log.end.map_or(log.header.first_scn, |end| end.next_scn))
        }
        None => (LogSeq(0), Scn(1)),
    };
    // The newest log is closed: the first write switches to the next group. Until then the
    // newest group counts as current (it may not be reused before it is archived anyway).
    Ok(Opened { table, next_scn, last_seq, to_archive, open_end })
}
