//! A standby's side of the redo log: standby logs that receive the primary's redo (the same
//! bytes at the same offsets, so that each archived log is byte-identical to the primary's),
//! and whole archived logs received for gap resolution.
//!
//! The primary ships every write it makes: the open header of a log, its redo units in order,
//! its closed header. The standby checks each unit (checksum, sequence, offset) before writing
//! it, so garbage is refused and never written. A log is received into a free standby log
//! group (there is one more group than the primary has); when its closed header arrives it is
//! archived like any filled log. A standby holds at most one open log: the newest.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::catalog::ArchivedLog;
use crate::error::{RedoError, Result};
use crate::format::{self, HeaderBlock, LogEnd, LogHeader};
use crate::online_log::{MemberState, OnlineLog};
use crate::ship::WriteKind;
use crate::storage::StorageFile;

/// How long a received log waits for the standby's archiver to free a group before the
/// write is refused.
const STANDBY_GROUP_WAIT: Duration = Duration::from_secs(30);
use crate::types::{DatabaseId, Incarnation, LogSeq, RedoAddr, Scn, now_unix_us};
use crate::{RedoLog, Role, Shared};

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

/// State of the receive path.
pub(crate) struct Receiving {
    /// How far the log being received has been written (not necessarily synced).
    written_end: u64,
    partials: Arc<PartialArchives>,
    /// Set when the primary closed a log shorter than what this standby had received: the
    /// standby held redo the primary lost in a crash. Apply must drop what it applied from it.
    diverged_at: Option<Scn>,
}

impl Receiving {
    /// The receive path of a standby whose open log (if any) holds redo up to `open_end`.
    pub(crate) fn new(open_end: u64) -> Receiving {
        Receiving { written_end: open_end, partials: Arc::default(), diverged_at: None }
    }
}

impl std::fmt::Debug for Receiving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiving").field("written_end", &self.written_end).finish_non_exhaustive()
    }
}

/// Where a standby is: what it tells its primary when it connects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct StandbyPosition {
    /// Every log up to this sequence is complete here (closed or archived), with no gap.
    pub complete_through_seq: LogSeq,
    /// The next byte this standby needs: the log being received and its durable end, or the
    /// next log at offset 0.
    pub next: RedoAddr,
}

/// What one received write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The log now holds its redo up to here (written; durable after `sync_received`).
    pub end_offset: u64,
    /// Set when the write closed the log.
    pub closed: Option<LogEnd>,
}

impl RedoLog {
    fn standby_only(&self) -> Result<()> {
        if self.shared.role != Role::Standby {
            return Err(RedoError::Refused("this database is a primary, not a standby".into()));
        }
        Ok(())
    }

    /// Takes the primary's database identity, if this standby has none yet. Fails if it has
    /// another. (Its incarnation is adopted with `adopt_incarnation`, once checked.)
    pub fn adopt_identity(&self, database_id: DatabaseId) -> Result<()> {
        self.standby_only()?;
        let shared = &self.shared;
        let adopted = shared.update_control(|control| {
            if control.database_id == database_id {
                return Ok(());
            }
            if control.database_id.0 != 0 {
                return Err(RedoError::Refused(format!(
                    "this standby protects database {}; a primary of database {database_id} was refused",
                    control.database_id
                )));
            }
            control.database_id = database_id;
            Ok(())
        })?;
        let mut identity = shared.identity.write();
        if identity.database_id != adopted.database_id {
            identity.database_id = adopted.database_id;
            tracing::info!(%database_id, "standby: adopted the identity of its primary");
        }
        Ok(())
    }

    /// Enters a newer incarnation of its primary's (which it has checked it can follow, and
    /// whose history it has already recorded): new logs it receives belong to it.
    pub fn adopt_incarnation(&self, incarnation: Incarnation) -> Result<()> {
        self.standby_only()?;
        let adopted = self.shared.update_control(|control| {
            if incarnation > control.incarnation {
                control.incarnation = incarnation;
            }
            Ok(())
        })?;
        self.shared.identity.write().incarnation = adopted.incarnation;
        tracing::info!(%incarnation, "standby: entered its primary's new incarnation");
        Ok(())
    }

    /// Where this standby is.
    pub fn standby_position(&self) -> StandbyPosition {
        let shared = &self.shared;
        let mut complete: Vec<LogSeq> =
            shared.catalog.entries().into_iter().map(|entry| entry.seq).collect();
        let mut newest: Option<(LogSeq, bool)> = None;
        {
            let table = shared.table.lock();
            for log in table.groups.iter().filter_map(|group| group.log.as_ref()) {
                if log.end.is_some() {
                    complete.push(log.header.seq);
                }
                if newest.is_none_or(|(seq, _)| log.header.seq > seq) {
                    newest = Some((log.header.seq, log.end.is_some()));
                }
            }
        }
        complete.sort();
        complete.dedup();
        // A standby built from a copy never needs the logs before its base.
        let base = shared.control.lock().base_seq;
        let mut complete_through_seq = base.prev_seq();
        for seq in complete.into_iter().filter(|&seq| seq >= base) {
            if seq == complete_through_seq.next() {
                complete_through_seq = seq;
            } else if seq > complete_through_seq.next() {
                break;
            }
        }
        let next = match newest {
            Some((_, false)) => shared.durable_addr(),
            Some((seq, true)) => RedoAddr { seq: seq.next(), offset: 0 },
            None => RedoAddr { seq: complete_through_seq.next(), offset: 0 },
        };
        StandbyPosition { complete_through_seq, next }
    }

    /// Where the primary's stream has been received up to (written, not necessarily synced),
    /// in stream order: inside the log being received, or the next log's open header.
    pub fn received_position(&self) -> RedoAddr {
        let receiving = self.shared.standby.lock();
        let table = self.shared.table.lock();
        match table
            .groups
            .iter()
            .filter_map(|group| group.log.as_ref())
            .max_by_key(|log| log.header.seq)
        {
            Some(log) if log.end.is_none() => {
                RedoAddr { seq: log.header.seq, offset: receiving.written_end }
            }
            Some(log) => RedoAddr { seq: log.header.seq.next(), offset: 0 },
            None => RedoAddr { seq: LogSeq(0), offset: 0 },
        }
    }

    /// Records the primary's durable SCN (carried by its writes and heartbeats).
    pub fn note_primary_durable(&self, scn: Scn) {
        self.shared.primary_confirmed.fetch_max(scn.0, Ordering::AcqRel);
    }

    /// Takes (and clears) the SCN from which applied redo must be dropped because the primary
    /// lost it (see `Receiving::diverged_at`).
    pub fn take_divergence(&self) -> Option<Scn> {
        self.shared.standby.lock().diverged_at.take()
    }

    /// Writes one write of the primary (`kind` at `offset` of log `seq`) into the standby
    /// logs, after checking it. Not synced: call `sync_received` before acknowledging it as
    /// durable. Writes must come in the primary's order.
    pub fn receive(
        &self,
        seq: LogSeq,
        offset: u64,
        kind: WriteKind,
        bytes: &[u8],
    ) -> Result<Received> {
        self.standby_only()?;
        let shared = &self.shared;
        let block = shared.config.block_size as usize;
        let mut receiving = shared.standby.lock();
        match kind {
            WriteKind::OpenHeader => {
                let header = self.check_header(seq, offset, 0, bytes)?;
                let HeaderBlock::Open(header) = header else { unreachable!("checked") };
                let group = {
                    let mut table = shared.table.lock();
                    match table.find(seq) {
                        Some(group) => {
                            let existing = table.groups[group].log.as_ref().expect("found").header;
                            if existing != header {
                                return Err(RedoError::Refused(format!(
                                    "log {seq} was begun here with another header"
                                )));
                            }
                            group
                        }
                        None => {
                            let newest = table
                                .groups
                                .iter()
                                .filter_map(|group| group.log.as_ref())
                                .max_by_key(|log| log.header.seq);
                            if let Some(newest) = newest {
                                if newest.header.seq >= seq {
                                    return Err(RedoError::Refused(format!(
                                        "log {seq} is older than log {}, already here",
                                        newest.header.seq
                                    )));
                                }
                                if newest.end.is_none() {
                                    return Err(RedoError::Refused(format!(
                                        "log {seq} begins while log {} is still open here (its closed header must come first)",
                                        newest.header.seq
                                    )));
                                }
                            }
                            let group = self.free_standby_group(&mut table)?;
                            let entry = &mut table.groups[group];
                            // Reuse gives stale and failed members another chance.
                            for member in &mut entry.members {
                                if member.state != MemberState::Valid
                                    && let Ok(file) = shared.storage.open_log(&member.path)
                                {
                                    member.file = Some(Arc::from(file));
                                    member.state = MemberState::Valid;
                                }
                            }
                            entry.log = Some(OnlineLog { header, end: None, archived: false });
                            table.current = Some(group);
                            group
                        }
                    }
                };
                shared.write_members(group, bytes, 0, true)?;
                receiving.written_end = format::first_unit_offset(shared.config.block_size);
                self.publish_received(seq, receiving.written_end);
                Ok(Received { end_offset: receiving.written_end, closed: None })
            }
            WriteKind::Units => {
                let (group, closed) = self.group_of(seq)?;
                if closed {
                    // A resend of a log that is complete here: nothing to do.
                    return Ok(Received { end_offset: offset + bytes.len() as u64, closed: None });
                }
                let expected =
                    receiving.written_end.max(format::first_unit_offset(shared.config.block_size));
                if offset > expected
                    || !offset.is_multiple_of(block as u64)
                    || bytes.is_empty()
                    || !bytes.len().is_multiple_of(block)
                {
                    return Err(RedoError::Refused(format!(
                        "write of {} bytes at offset {offset} of log {seq}: this standby holds that log up to {expected}",
                        bytes.len()
                    )));
                }
                if offset + bytes.len() as u64 > shared.config.log_file_size {
                    return Err(RedoError::Refused(format!(
                        "write at {offset} of {} bytes runs past the end of a log",
                        bytes.len()
                    )));
                }
                // Every unit must be redo of this log at this place: garbage is never written.
                for (index, unit) in bytes.chunks(block).enumerate() {
                    let unit_offset = offset + (index * block) as u64;
                    match format::check_unit(unit, seq, unit_offset) {
                        Ok(Ok(_)) => {}
                        Ok(Err(defect)) => {
                            return Err(RedoError::Refused(format!(
                                "unit at offset {unit_offset} of log {seq}: {defect}"
                            )));
                        }
                        Err(error) => {
                            return Err(RedoError::Refused(format!(
                                "unit at offset {unit_offset} of log {seq}: {}",
                                error.reason
                            )));
                        }
                    }
                }
                shared.write_members(group, bytes, offset, false)?;
                receiving.written_end = receiving.written_end.max(offset + bytes.len() as u64);
                Ok(Received { end_offset: receiving.written_end, closed: None })
            }
            WriteKind::ClosedHeader => {
                let checked =
                    self.check_header(seq, offset, shared.config.block_size as u64, bytes)?;
                let HeaderBlock::Closed(header, end) = checked else { unreachable!("checked") };
                let (group, closed) = self.group_of(seq)?;
                let open_header =
                    shared.table.lock().groups[group].log.as_ref().expect("held").header;
                if open_header != header {
                    return Err(RedoError::Refused(format!(
                        "closed header of log {seq} does not match its open header"
                    )));
                }
                if closed {
                    return Ok(Received { end_offset: end.end_offset, closed: Some(end) });
                }
                if receiving.written_end < end.end_offset {
                    return Err(RedoError::Refused(format!(
                        "log {seq} ends at {} on the primary, but this standby holds it only up to {}",
                        end.end_offset, receiving.written_end
                    )));
                }
                if receiving.written_end > end.end_offset {
                    // The primary crashed and recovered with less of this log than it had
                    // sent: what lies beyond its end was never durable there. The closed
                    // header bounds the log; apply must drop what it took from beyond.
                    tracing::warn!(%seq, primary_end = end.end_offset, received = receiving.written_end, "standby: the primary closed a log shorter than received here; dropping the tail");
                    receiving.diverged_at =
                        Some(receiving.diverged_at.map_or(end.next_scn, |at| at.min(end.next_scn)));
                }
                // The units before it must be durable before the log is declared closed.
                shared.sync_members(group)?;
                shared.write_members(group, bytes, shared.config.block_size as u64, true)?;
                {
                    let mut table = shared.table.lock();
                    if let Some(log) = table.groups[group].log.as_mut() {
                        log.end = Some(end);
                    }
                }
                receiving.written_end = end.end_offset;
                self.publish_received(seq, end.end_offset);
                shared.queue_archive(seq);
                Ok(Received { end_offset: end.end_offset, closed: Some(end) })
            }
        }
    }

    /// Makes everything received durable; returns the durable end of the log being received.
    pub fn sync_received(&self) -> Result<RedoAddr> {
        self.standby_only()?;
        let shared = &self.shared;
        let receiving = shared.standby.lock();
        let addr = shared.durable_addr();
        let group = shared.table.lock().find(addr.seq);
        if let Some(group) = group
            && receiving.written_end > addr.offset
        {
            shared.sync_members(group)?;
            self.publish_received(addr.seq, receiving.written_end);
        }
        Ok(shared.durable_addr())
    }

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
        let _durable = shared.durable_addr.lock();
        shared.redo_arrived.notify_all();
        Ok(())
    }

    fn check_header(
        &self,
        seq: LogSeq,
        offset: u64,
        expected_offset: u64,
        bytes: &[u8],
    ) -> Result<HeaderBlock> {
        let shared = &self.shared;
        if offset != expected_offset || bytes.len() != shared.config.block_size as usize {
            return Err(RedoError::Refused(format!(
                "header of log {seq} at offset {offset} of {} bytes",
                bytes.len()
            )));
        }
        let block = format::decode_header(bytes, offset).map_err(|error| {
            RedoError::Refused(format!("header of log {seq}: {}", error.reason))
        })?;
        let header: &LogHeader = block.header();
        let identity = self.identity();
        let kind_ok = matches!((&block, expected_offset), (HeaderBlock::Open(_), 0))
            || matches!(block, HeaderBlock::Closed(..)) && expected_offset != 0;
        if !kind_ok || header.seq != seq {
            return Err(RedoError::Refused(format!(
                "header block at {offset} is not the expected header of log {seq}"
            )));
        }
        if header.database_id != identity.database_id {
            return Err(RedoError::Refused(format!(
                "log {seq} belongs to database {}, this standby to {}",
                header.database_id, identity.database_id
            )));
        }
        if header.block_size != shared.config.block_size
            || header.file_size != shared.config.log_file_size
        {
            return Err(RedoError::Refused(format!(
                "log {seq} has block size {} and size {}; this standby's logs have {} and {}",
                header.block_size,
                header.file_size,
                shared.config.block_size,
                shared.config.log_file_size
            )));
        }
        Ok(block)
    }

    /// The group holding log `seq`, and whether it is closed.
    fn group_of(&self, seq: LogSeq) -> Result<(usize, bool)> {
        let table = self.shared.table.lock();
        let group = table.find(seq).ok_or_else(|| {
            RedoError::Refused(format!(
                "log {seq} has not begun on this standby (its open header must come first)"
            ))
        })?;
        Ok((group, table.groups[group].log.as_ref().is_some_and(|log| log.end.is_some())))
    }

    /// A standby log group to receive a new log into: never used, or archived (a standby
    /// needs no checkpoint to reuse a group: apply reads from the archive).
    ///
    /// When every group still waits for the archiver, the write waits for it (as a
    /// primary's log switch does: "log file switch (archiving needed)"), up to
    /// `STANDBY_GROUP_WAIT`; only an archiver stuck that long refuses the write.
    fn free_standby_group(
        &self,
        table: &mut parking_lot::MutexGuard<'_, crate::online_log::GroupTable>,
    ) -> Result<usize> {
        let count = table.groups.len();
        let mut waited: Option<Instant> = None;
        loop {
            let start = table.current.map_or(0, |current| current + 1);
            let free = (0..count)
                .map(|step| (start + step) % count)
                .find(|&index| table.groups[index].log.as_ref().is_none_or(|log| log.archived));
            if let Some(index) = free {
                if let Some(since) = waited {
                    self.shared.waits.log_file_switch_archiving.record_since(since);
                }
                return Ok(index);
            }
            let since = *waited.get_or_insert_with(Instant::now);
            if self.shared.is_shut_down() || since.elapsed() >= STANDBY_GROUP_WAIT {
                return Err(RedoError::Refused(format!(
                    "no standby log group is free ({count} groups, all waiting to be archived for {:?}); add a group (redo.groups) or give the archiver room",
                    since.elapsed()
                )));
            }
            self.shared.table_changed.wait_for(table, Duration::from_millis(100));
        }
    }

    fn publish_received(&self, seq: LogSeq, offset: u64) {
        let mut durable = self.shared.durable_addr.lock();
        *durable = RedoAddr { seq, offset };
        self.shared.redo_arrived.notify_all();
    }
}

impl Shared {
    pub(crate) fn is_standby(&self) -> bool {
        self.role == Role::Standby
    }
}
