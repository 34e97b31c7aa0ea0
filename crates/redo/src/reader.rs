//! The reader: redo records in SCN order from any SCN or log sequence, across archived and
//! online logs, up to the durable end of redo.
//!
//! Recovery, the ASYNC sender and apply all read redo this way. A reader returns `None` when
//! it has caught up with durable redo; calling it again later continues from there. An online
//! log that is reused while it is being read is detected (its units carry another sequence)
//! and the reader continues from the archived copy at the same place. On a standby with
//! delayed apply, a reader also stops before a record above the apply horizon
//! (`RedoLog::set_apply_horizon`).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::error::{RedoError, Result};
use crate::format::{self, HeaderBlock, LogEnd, LogHeader, RedoScanner, ScanStep};
use crate::online_log::MemberState;
use crate::storage::StorageFile;
use crate::types::{LogSeq, RedoRecord, Scn};
use crate::{Role, Shared};

/// Units read per I/O.
const READ_BYTES: usize = 1 << 20;

struct Source {
    file: Arc<dyn StorageFile>,
    path: PathBuf,
    header: LogHeader,
    /// Known once the log is closed.
    end: Option<LogEnd>,
    online: bool,
    scanner: RedoScanner,
}

/// Iterates redo records; see the module documentation.
pub struct RedoReader {
    shared: Arc<Shared>,
    seq: LogSeq,
    /// Records below this SCN are skipped (where the reader was asked to start).
    from_scn: Scn,
    source: Option<Source>,
    ready: VecDeque<RedoRecord>,
    chunk: Vec<u8>,
}

impl std::fmt::Debug for RedoReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedoReader")
            .field("seq", &self.seq)
            .field("from_scn", &self.from_scn)
            .finish()
    }
}

impl RedoReader {
    pub(crate) fn from_seq(shared: Arc<Shared>, seq: LogSeq) -> RedoReader {
        RedoReader {
            shared,
            seq,
            from_scn: Scn(0),
            source: None,
            ready: VecDeque::new(),
            chunk: Vec::new(),
        }
    }

    pub(crate) fn from_scn(shared: Arc<Shared>, scn: Scn) -> Result<RedoReader> {
        let seq = shared.seq_holding(scn)?;
        let mut reader = RedoReader::from_seq(shared, seq);
        reader.from_scn = scn;
        Ok(reader)
    }

    /// The sequence of the log being read.
    pub fn seq(&self) -> LogSeq {
        self.seq
    }

    /// The next record, or `None` if the reader has caught up with durable redo.
    pub fn next_record(&mut self) -> Result<Option<RedoRecord>> {
        loop {
            while let Some(record) = self.ready.front() {
                if record.scn < self.from_scn {
                    self.ready.pop_front();
                    continue;
                }
                // A standby's delayed apply: the record waits here until the horizon passes
                // it (the caller sees "caught up" and tries again later).
                if self.shared.role == Role::Standby
                    && record.scn.0 > self.shared.apply_horizon.load(Ordering::Acquire)
                {
                    return Ok(None);
                }
                return Ok(self.ready.pop_front());
            }
            if self.source.is_none() {
                match self.open_source(self.seq, None)? {
                    Some(source) => self.source = Some(source),
                    None => return Ok(None),
                }
            }
            let source = self.source.as_mut().expect("opened above");
            // How far this log may be read: its end if closed, else the durable end of redo.
            let limit = match source.end {
                Some(end) => end.end_offset,
                None => {
                    let durable = self.shared.durable_addr();
                    if durable.seq == source.header.seq {
                        durable.offset
                    } else {
                        // Switched away from since we opened it: learn its end.
                        match self.shared.log_end(source.header.seq) {
                            Some(end) => {
                                source.end = Some(end);
                                continue;
                            }
                            None => return Ok(None),
                        }
                    }
                }
            };
            let at = source.scanner.next_offset();
            if at >= limit {
                if source.end.is_some() {
                    self.seq = self.seq.next();
                    self.source = None;
                    continue;
                }
                return Ok(None);
            }
            let block = source.header.block_size as usize;
            let len = ((limit - at) as usize).min(READ_BYTES / block * block).max(block);
            self.chunk.resize(len, 0);
            source
                .file
                .read_at(&mut self.chunk, at)
                .map_err(|error| RedoError::io("read", &source.path, error))?;
            let mut records = Vec::new();
            let mut reused_at = None;
            for unit in self.chunk.chunks(block) {
                let step = source
                    .scanner
                    .push_unit(unit, &mut records)
                    .map_err(|error| RedoError::corrupt(&source.path, error))?;
                if let ScanStep::End(defect) = step {
                    if !source.online {
                        return Err(RedoError::Corrupt {
                            file: source.path.clone(),
                            offset: source.scanner.next_offset(),
                            reason: format!("{defect}, before the end of redo at {limit}"),
                        });
                    }
                    // The group was reused under us: continue from the archived copy, at the
                    // last record boundary reached (records of the unfinished run are read
                    // again from there).
                    tracing::debug!(seq = %source.header.seq, %defect, "online log reused while reading; switching to its archived copy");
                    reused_at = Some((source.scanner.end_offset(), source.scanner.end_scn()));
                    break;
                }
            }
            self.ready.extend(records);
            if let Some(resume) = reused_at {
                self.source = Some(
                    self.open_source(self.seq, Some(resume))?
                        .ok_or(RedoError::LogNotAvailable { seq: self.seq })?,
                );
            }
        }
    }

    /// Opens log `seq`: online if a group still holds it (unless resuming, which means the
    /// online copy was just found reused), else its archived copy. `None` if the log does not
    /// exist yet.
    fn open_source(&self, seq: LogSeq, resume: Option<(u64, Scn)>) -> Result<Option<Source>> {
        let shared = &self.shared;
        if resume.is_none() {
            let table = shared.table.lock();
            if let Some(index) = table.find(seq) {
                let group = &table.groups[index];
                let log = group.log.as_ref().expect("found by sequence");
                if let Some(member) = group
                    .members
                    .iter()
                    .find(|member| member.state == MemberState::Valid && member.file.is_some())
                {
                    return Ok(Some(Source {
                        file: member.file.clone().expect("checked"),
                        path: member.path.clone(),
                        header: log.header,
                        end: log.end,
                        online: true,
                        scanner: RedoScanner::new(&log.header),
                    }));
                }
            }
        }
        for archived in shared.catalog.find(seq) {
            let path = archived.path.clone();
            let file: Arc<dyn StorageFile> = match shared.storage.open(&path) {
                Ok(file) => Arc::from(file),
                Err(error) => {
                    tracing::warn!(archive = %path.display(), %error, "archived log in the catalog cannot be opened; trying another copy");
                    continue;
                }
            };
            let mut first = vec![0u8; format::BLOCK_SIZE_MIN as usize];
            file.read_at(&mut first, 0).map_err(|error| RedoError::io("read", &path, error))?;
            let block_size =
                format::peek_header_block_size(&first).ok_or_else(|| RedoError::Corrupt {
                    file: path.clone(),
                    offset: 0,
                    reason: "not a redoguard log".into(),
                })?;
            let mut headers = vec![0u8; 2 * block_size as usize];
            file.read_at(&mut headers, 0).map_err(|error| RedoError::io("read", &path, error))?;
            let block = block_size as usize;
            let (header, end) = match (
                format::decode_header(&headers[..block], 0),
                format::decode_header(&headers[block..], block as u64),
            ) {
                (Ok(HeaderBlock::Open(header)), Ok(HeaderBlock::Closed(closed, end)))
                    if closed == header && header.seq == seq =>
                {
                    (header, end)
                }
                _ => {
                    return Err(RedoError::Corrupt {
                        file: path,
                        offset: 0,
                        reason: format!("its headers do not describe closed log {seq}"),
                    });
                }
            };
            let scanner = match resume {
                Some((offset, next_scn)) => RedoScanner::resume(&header, offset, next_scn),
                None => RedoScanner::new(&header),
            };
            return Ok(Some(Source { file, path, header, end: Some(end), online: false, scanner }));
        }
        let newest = shared.durable_addr().seq;
        if seq > newest {
            return Ok(None);
        }
        if shared.is_standby() {
            // A gap: this standby lacks the log; it is being fetched from the primary.
            return Ok(None);
        }
        Err(RedoError::LogNotAvailable { seq })
    }
}

impl Iterator for RedoReader {
    type Item = Result<RedoRecord>;

    fn next(&mut self) -> Option<Result<RedoRecord>> {
        self.next_record().transpose()
    }
}

impl Shared {
    /// The sequence of the log that holds `scn` (or, for an SCN not yet written, the newest
    /// log).
    pub(crate) fn seq_holding(&self, scn: Scn) -> Result<LogSeq> {
        let mut logs: Vec<(LogSeq, Scn, Option<Scn>)> = Vec::new();
        {
            let table = self.table.lock();
            for group in &table.groups {
                if let Some(log) = &group.log {
                    logs.push((
                        log.header.seq,
                        log.header.first_scn,
                        log.end.map(|end| end.next_scn),
                    ));
                }
            }
        }
        for archived in self.catalog.entries() {
            logs.push((archived.seq, archived.first_scn, Some(archived.next_scn)));
        }
        logs.sort();
        logs.dedup_by_key(|log| log.0);
        if let Some(&(seq, _, _)) =
            logs.iter().find(|(_, first, next)| *first <= scn && next.is_none_or(|next| scn < next))
        {
            return Ok(seq);
        }
        match (logs.first(), logs.last()) {
            (Some(&(_, oldest, _)), _) if scn < oldest => {
                Err(RedoError::ScnNotAvailable { scn, oldest })
            }
            // Beyond all redo and the newest log is closed: the next log, once it exists.
            (_, Some(&(seq, _, _))) => Ok(seq.next()),
            // No log yet: the first one (of a standby built from a copy: its base).
            _ => Ok(LogSeq(1).max(self.control.lock().base_seq)),
        }
    }

    /// The end of log `seq` if it has been closed.
    pub(crate) fn log_end(&self, seq: LogSeq) -> Option<LogEnd> {
        {
            let table = self.table.lock();
            if let Some(index) = table.find(seq)
                && let Some(end) = table.groups[index].log.as_ref().and_then(|log| log.end)
            {
                return Some(end);
            }
        }
        self.catalog.find(seq).first().map(|archived| LogEnd {
            next_scn: archived.next_scn,
            next_time_us: archived.next_time_us,
            end_offset: archived.size_bytes,
        })
    }
}

/// What a redo transport sender may read of one log now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogExtent {
    pub header: LogHeader,
    /// Set once the log is closed.
    pub end: Option<LogEnd>,
    /// Bytes up to here are durable redo (the end if closed; the durable end if current).
    pub readable_end: u64,
}

impl crate::RedoLog {
    /// What can be read of log `seq`, online or archived; `None` if it does not exist (yet).
    pub fn log_extent(&self, seq: LogSeq) -> Option<LogExtent> {
        let shared = &self.shared;
        // Shipping may run ahead of durability: redo written and synced here can go to a
        // standby while the log writer waits for SYNC standbys.
        let written = match shared.role {
            Role::Primary => shared.log_writer.written_addr(),
            Role::Standby => shared.durable_addr(),
        };
        {
            let table = shared.table.lock();
            if let Some(index) = table.find(seq) {
                let log = table.groups[index].log.as_ref().expect("found by sequence");
                let readable_end = match log.end {
                    Some(end) => end.end_offset,
                    None if written.seq == seq => written.offset,
                    None => return None,
                };
                return Some(LogExtent { header: log.header, end: log.end, readable_end });
            }
        }
        let archived = shared.catalog.find(seq).into_iter().next()?;
        let file = shared.storage.open(&archived.path).ok()?;
        let mut first = vec![0u8; format::BLOCK_SIZE_MIN as usize];
        file.read_at(&mut first, 0).ok()?;
        let block = format::peek_header_block_size(&first)? as usize;
        let mut headers = vec![0u8; 2 * block];
        file.read_at(&mut headers, 0).ok()?;
        match (
            format::decode_header(&headers[..block], 0),
            format::decode_header(&headers[block..], block as u64),
        ) {
            (Ok(HeaderBlock::Open(header)), Ok(HeaderBlock::Closed(closed, end)))
                if closed == header =>
            {
                Some(LogExtent { header, end: Some(end), readable_end: end.end_offset })
            }
            _ => None,
        }
    }

    /// The exact bytes `[offset, offset + len)` of log `seq` (headers or units), from an online
    /// member or its archived copy. The range must be within what `log_extent` says is
    /// readable (header blocks are always readable).
    pub fn read_log_bytes(&self, seq: LogSeq, offset: u64, len: usize) -> Result<Vec<u8>> {
        let shared = &self.shared;
        let mut bytes = vec![0u8; len];
        let online = {
            let table = shared.table.lock();
            table.find(seq).and_then(|index| {
                let group = &table.groups[index];
                group
                    .members
                    .iter()
                    .find(|member| member.state == MemberState::Valid && member.file.is_some())
                    .map(|member| {
                        (index, member.file.clone().expect("checked"), member.path.clone())
                    })
            })
        };
        if let Some((index, file, path)) = online {
            file.read_at(&mut bytes, offset)
                .map_err(|error| RedoError::io("read", &path, error))?;
            // A group is given a new log (its table entry changed) before its header is
            // overwritten: if it still holds `seq` now, what we read was `seq`'s.
            let still = shared.table.lock().groups[index]
                .log
                .as_ref()
                .is_some_and(|log| log.header.seq == seq);
            if still {
                return Ok(bytes);
            }
        }
        for archived in shared.catalog.find(seq) {
            let Ok(file) = shared.storage.open(&archived.path) else { continue };
            file.read_at(&mut bytes, offset)
                .map_err(|error| RedoError::io("read", &archived.path, error))?;
            return Ok(bytes);
        }
        Err(RedoError::LogNotAvailable { seq })
    }
}
