//! Archived logs received in pieces (gap resolution, catch-up): pieces written at their
//! offsets by several connections at once, the log checked from its start as its bytes
//! arrive, and archived once every byte is in and the check passed.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use crate::RedoLog;
use crate::catalog::ArchivedLog;
use crate::error::{RedoError, Result};
use crate::format::{self, LogEnd, LogHeader};
use crate::storage::StorageFile;
use crate::types::{LogSeq, now_unix_us};

/// Most archived logs a standby assembles at once (gap resolution).
const PARTIAL_ARCHIVES_MAX: usize = 64;

/// Most separate byte ranges of one archived log held while it is received: pieces come in
/// any order, but a primary claims them in order over at most 20 connections, so a log holds
/// a few holes at a time; more is a peer spraying tiny pieces, refused.
const RANGES_MAX: usize = 1024;

/// Bytes read back at a time to check a log being received (a bounded buffer per check).
const CHECK_READ_MAX: usize = 4 << 20;

/// Received bytes of a log being assembled that are made durable at once when this many have
/// been checked since the last sync, so that its final sync (after its last piece) waits for
/// little more than the last of them.
const SYNC_EVERY: u64 = 64 << 20;

/// Archived logs being received in pieces, shared by every connection that brings them. The
/// map is locked only to find or add a log, each log only to note what it holds: connections
/// write their pieces at once (never under the standby's receive lock, which live redo needs),
/// and the log is checked from its start as its bytes arrive, by one connection at a time.
#[derive(Default)]
pub(crate) struct PartialArchives(parking_lot::Mutex<BTreeMap<LogSeq, Arc<Partial>>>);

/// An archived log being received in pieces.
pub(crate) struct Partial {
    file: Box<dyn StorageFile>,
    path: PathBuf,
    total: u64,
    state: parking_lot::Mutex<PartialState>,
}

#[derive(Default)]
struct PartialState {
    /// The byte ranges some connection is writing or has written: each byte of the log is
    /// written once (a repeat writes nothing), so bytes once checked are never rewritten.
    claimed: Ranges,
    /// The byte ranges written so far.
    held: Ranges,
    /// The check of the log from its start (`None` until its two headers are here).
    check: Option<format::ImageCheck>,
    /// A connection is checking (outside the lock), holding `check`; others leave it to it.
    checking: bool,
    /// Refused, or taken to be archived: pieces still arriving for it go nowhere.
    ended: bool,
    /// Checked bytes not yet synced.
    unsynced: u64,
}

/// Takes `partial` (log `seq`) out of the logs being assembled, unless another took its place.
fn forget(partials: &PartialArchives, seq: LogSeq, partial: &Arc<Partial>) {
    let mut logs = partials.0.lock();
    if logs.get(&seq).is_some_and(|held| Arc::ptr_eq(held, partial)) {
        logs.remove(&seq);
    }
}

/// Disjoint, sorted, non-adjacent byte ranges `[start, end)`: what of a log is here.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Ranges(Vec<(u64, u64)>);

impl Ranges {
    /// Whether adding `[start, end)` keeps at most `RANGES_MAX` ranges.
    fn can_add(&self, start: u64, end: u64) -> bool {
        let mut merged = self.clone();
        merged.add(start, end);
        merged.0.len() <= RANGES_MAX
    }

    /// Adds `[start, end)`, merging what it touches or overlaps.
    pub(crate) fn add(&mut self, start: u64, end: u64) {
        let (mut start, mut end) = (start, end);
        let first = self.0.partition_point(|&(_, e)| e < start);
        let mut last = first;
        while last < self.0.len() && self.0[last].0 <= end {
            start = start.min(self.0[last].0);
            end = end.max(self.0[last].1);
            last += 1;
        }
        self.0.splice(first..last, [(start, end)]);
    }

    /// Whether `[0, total)` is held whole.
    pub(crate) fn covers(&self, total: u64) -> bool {
        self.prefix() >= total
    }

    /// The parts of `[start, end)` not held.
    pub(crate) fn gaps(&self, start: u64, end: u64) -> Vec<(u64, u64)> {
        let mut gaps = Vec::new();
        let mut at = start;
        let first = self.0.partition_point(|&(_, e)| e <= start);
        for &(held_start, held_end) in &self.0[first..] {
            if held_start >= end {
                break;
            }
            if held_start > at {
                gaps.push((at, held_start));
            }
            at = at.max(held_end);
        }
        if at < end {
            gaps.push((at, end));
        }
        gaps
    }

    /// How far the bytes from offset 0 are held without a hole.
    pub(crate) fn prefix(&self) -> u64 {
        self.0.first().filter(|&&(start, _)| start == 0).map_or(0, |&(_, end)| end)
    }
}

impl RedoLog {
    /// Receives a piece of a whole archived log (gap resolution, catch-up). Pieces may come
    /// in any order and over several connections at once (a destination's `max_connections`),
    /// each written at its offset, connections in parallel; a piece may repeat bytes already
    /// here (a primary that reconnected ships the log again), never change the log's length.
    /// The log is checked from its start as its bytes arrive (`ImageCheck`: the whole log,
    /// every unit, the closed header's end) and archived only once every byte is in and the
    /// check passed. Returns whether this call completed the log and it is archived here (or
    /// was already): with several connections, the one that ends the check says so.
    pub fn receive_archive_chunk(
        &self,
        seq: LogSeq,
        offset: u64,
        total_len: u64,
        bytes: &[u8],
    ) -> Result<bool> {
        self.standby_only()?;
        let shared = &self.shared;
        let dests = &shared.config.archive_dests;
        if dests.iter().all(|dest| shared.catalog.has(seq, dest)) {
            return Ok(true);
        }
        if total_len > shared.config.log_file_size
            || total_len < format::first_unit_offset(shared.config.block_size)
        {
            return Err(RedoError::Refused(format!(
                "archived log {seq} of {total_len} bytes cannot be a log of this layout"
            )));
        }
        let end = offset.checked_add(bytes.len() as u64);
        if bytes.is_empty() || end.is_none_or(|end| end > total_len) {
            return Err(RedoError::Refused(format!(
                "piece of archived log {seq} at {offset} ({} bytes) lies outside its {total_len} bytes",
                bytes.len()
            )));
        }
        let end = end.expect("checked");
        // The receive lock only to reach the logs being assembled.
        let partials = shared.standby.lock().partials.clone();
        let partial = {
            let mut logs = partials.0.lock();
            match logs.get(&seq) {
                Some(partial) => partial.clone(),
                None => {
                    if logs.len() >= PARTIAL_ARCHIVES_MAX {
                        return Err(RedoError::Refused(format!(
                            "more than {PARTIAL_ARCHIVES_MAX} archived logs in transit"
                        )));
                    }
                    let path = dests[0].join(format!(
                        "{}.receiving",
                        crate::archiver::archive_file_name(self.identity().thread, seq)
                    ));
                    let file = shared
                        .storage
                        .create(&path)
                        .map_err(|error| RedoError::io("create", &path, error))?;
                    let partial = Arc::new(Partial {
                        file,
                        path,
                        total: total_len,
                        state: Default::default(),
                    });
                    logs.insert(seq, partial.clone());
                    partial
                }
            }
        };
        let gaps = {
            let mut state = partial.state.lock();
            if state.ended {
                return Ok(false);
            }
            if partial.total != total_len {
                let total = partial.total;
                drop(state);
                self.drop_partial(&partials, seq, &partial);
                return Err(RedoError::Refused(format!(
                    "piece of archived log {seq} says the log has {total_len} bytes; earlier pieces said {total}"
                )));
            }
            if !state.claimed.can_add(offset, end) {
                drop(state);
                self.drop_partial(&partials, seq, &partial);
                return Err(RedoError::Refused(format!(
                    "archived log {seq} arrives in more than {RANGES_MAX} separate pieces"
                )));
            }
            let gaps = state.claimed.gaps(offset, end);
            state.claimed.add(offset, end);
            gaps
        };
        // Written with no lock held: the other connections write theirs meanwhile.
        for &(from, to) in &gaps {
            let slice = &bytes[(from - offset) as usize..(to - offset) as usize];
            if let Err(error) = partial.file.write_at(slice, from) {
                self.drop_partial(&partials, seq, &partial);
                return Err(RedoError::io("write", &partial.path, error));
            }
        }
        {
            let mut state = partial.state.lock();
            for &(from, to) in &gaps {
                state.held.add(from, to);
            }
        }
        match self.check_partial(seq, &partial) {
            Ok(None) => Ok(false),
            Ok(Some((header, log_end))) => {
                // This connection ended the check of a whole log: it archives it. The log
                // leaves the map only after (a repeat meanwhile finds it ended, and never
                // creates its file again).
                let archived = self.finish_archived(seq, &partial, header, log_end);
                if archived.is_err() {
                    let _ = shared.storage.remove(&partial.path);
                }
                forget(&partials, seq, &partial);
                archived.map(|()| true)
            }
            Err(error) => {
                // Refused: the file goes, and the primary ships the log again.
                self.drop_partial(&partials, seq, &partial);
                Err(error)
            }
        }
    }

    /// Forgets a log being assembled and removes its file (a refusal). Its file goes before
    /// it leaves the map, so that a piece after it starts a new file that nothing removes.
    fn drop_partial(&self, partials: &PartialArchives, seq: LogSeq, partial: &Arc<Partial>) {
        partial.state.lock().ended = true;
        let _ = self.shared.storage.remove(&partial.path);
        forget(partials, seq, partial);
    }

    /// Checks what has arrived of `partial` from where its check is, unless another
    /// connection is at it (that one looks again for bytes that came meanwhile before it lets
    /// go). Returns the log's headers once it is whole and checked, to one caller only: it
    /// archives the log.
    fn check_partial(&self, seq: LogSeq, partial: &Partial) -> Result<Option<(LogHeader, LogEnd)>> {
        let corrupt = |error| RedoError::corrupt(&partial.path, error);
        let read = |buffer: &mut Vec<u8>, from: u64, len: usize| {
            buffer.resize(len, 0);
            partial
                .file
                .read_at(buffer, from)
                .map_err(|error| RedoError::io("read", &partial.path, error))
        };
        let mut buffer = Vec::new();
        let mut state = partial.state.lock();
        loop {
            if state.checking || state.ended {
                return Ok(None);
            }
            let prefix = state.held.prefix();
            let Some(mut check) = state.check.take() else {
                // The two headers first (a few KiB, read under the lock).
                const PEEK: usize = 16;
                if prefix < PEEK as u64 {
                    return Ok(None);
                }
                read(&mut buffer, 0, PEEK)?;
                let head_len = format::ImageCheck::head_len(&buffer).unwrap_or(PEEK);
                if prefix < head_len as u64 {
                    return Ok(None);
                }
                read(&mut buffer, 0, head_len)?;
                let Some(check) = format::ImageCheck::begin(&buffer).map_err(corrupt)? else {
                    return Err(RedoError::Refused(format!(
                        "archived log {seq} received without its closed header"
                    )));
                };
                let (header, end) = (check.header(), check.end());
                if header.seq != seq
                    || header.database_id != self.identity().database_id
                    || end.end_offset != partial.total
                {
                    return Err(RedoError::Refused(format!(
                        "archived log received as {seq} ({} bytes) is log {} of database {} ({} bytes)",
                        partial.total, header.seq, header.database_id, end.end_offset
                    )));
                }
                state.check = Some(check);
                continue;
            };
            if check.is_done() {
                if !state.held.covers(partial.total) {
                    state.check = Some(check);
                    return Ok(None);
                }
                state.ended = true;
                drop(state);
                return check.finish().map(Some).map_err(corrupt);
            }
            let block = u64::from(check.header().block_size);
            let from = check.next_offset();
            let to = prefix.min(from + CHECK_READ_MAX as u64) / block * block;
            if to <= from {
                state.check = Some(check);
                return Ok(None);
            }
            // Outside the lock: the other connections go on writing.
            state.checking = true;
            drop(state);
            let checked = read(&mut buffer, from, (to - from) as usize)
                .and_then(|()| check.feed(&buffer).map_err(corrupt));
            let sync = checked.is_ok() && {
                let mut state = partial.state.lock();
                state.unsynced += (to - from).min(SYNC_EVERY);
                let due = state.unsynced >= SYNC_EVERY;
                if due {
                    state.unsynced = 0;
                }
                due
            };
            let synced = if sync {
                partial.file.sync_data().map_err(crate::online_log::io_error("sync", &partial.path))
            } else {
                Ok(())
            };
            state = partial.state.lock();
            state.checking = false;
            state.check = Some(check);
            checked?;
            synced?;
        }
    }

    /// A received archived log is whole and checked: make it durable, then put it into every
    /// archive destination and the catalog.
    fn finish_archived(
        &self,
        seq: LogSeq,
        partial: &Partial,
        header: LogHeader,
        end: LogEnd,
    ) -> Result<()> {
        let shared = &self.shared;
        let io = crate::online_log::io_error;
        partial.file.sync_data().map_err(io("sync", &partial.path))?;
        for dest in &shared.config.archive_dests {
            if shared.catalog.has(seq, dest) {
                continue;
            }
            let path = dest.join(crate::archiver::archive_file_name(header.thread, seq));
            if *dest == shared.config.archive_dests[0] {
                shared.storage.rename(&partial.path, &path).map_err(io("rename", &path))?;
            } else {
                // The checked bytes, through the received file (renamed or not).
                let mut image = vec![0u8; end.end_offset as usize];
                partial.file.read_at(&mut image, 0).map_err(io("read", &partial.path))?;
                let copy = shared.storage.create(&path).map_err(io("create", &path))?;
                copy.write_at(&image, 0).map_err(io("write", &path))?;
                copy.sync_data().map_err(io("sync", &path))?;
            }
            shared.storage.sync_dir(dest).map_err(io("sync", dest))?;
            shared.catalog.append(ArchivedLog {
                thread: header.thread,
                seq,
                first_scn: header.first_scn,
                next_scn: end.next_scn,
                first_time_us: header.first_time_us,
                next_time_us: end.next_time_us,
                size_bytes: end.end_offset,
                completed_us: now_unix_us(),
                path,
            })?;
        }
        shared.stats.archived_logs.incr();
        tracing::info!(%seq, bytes = end.end_offset, "standby: received a missing log (gap resolution)");
        // Apply may be waiting for this log.
        shared.log_writer.wake_readers();
        Ok(())
    }
}
