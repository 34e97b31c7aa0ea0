//! A standby's side of the redo log: standby logs that receive the primary's redo (the same
//! bytes at the same offsets, so that each archived log is byte-identical to the primary's),
//! and whole archived logs received for gap resolution.
//!
//! The primary ships every write it makes: the open header of a log, its redo units in order,
//! its closed header. The standby checks each unit (checksum, sequence, offset) before writing
//! it, so garbage is refused and never written. A log is received into a free standby log
//! group (there is one more group than the primary has); when its closed header arrives it is
//! archived like any filled log. A standby holds at most one open log: the newest.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::error::{RedoError, Result};
use crate::format::{self, HeaderBlock, LogEnd, LogHeader};
use crate::online_log::{MemberState, OnlineLog};
use crate::ship::WriteKind;

/// How long a received log waits for the standby's archiver to free a group before the
/// write is refused.
const STANDBY_GROUP_WAIT: Duration = Duration::from_secs(30);
use crate::types::{DatabaseId, Incarnation, LogSeq, RedoAddr, Scn};
use crate::{RedoLog, Role, Shared};

mod archive_pieces;
use archive_pieces::PartialArchives;
#[cfg(test)]
pub(crate) use archive_pieces::Ranges;

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
    /// whose history it has already recorded): new logs it receives belong to it. `first_scn`
    /// is where the first incarnation it adopts began: what the old primary said was durable
    /// past it is no longer confirmed (those SCNs now name the new primary's records, which
    /// only its own word confirms), so the confirmed SCN falls back below it.
    pub fn adopt_incarnation(&self, incarnation: Incarnation, first_scn: Scn) -> Result<()> {
        self.standby_only()?;
        self.shared.primary_confirmed.fetch_min(first_scn.0.saturating_sub(1), Ordering::AcqRel);
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
                            // A resend of a header already here (a connection of an earlier
                            // session retransmitting after a partition healed, say): what was
                            // received after it stays, and the position never goes back.
                            return Ok(Received {
                                end_offset: receiving
                                    .written_end
                                    .max(format::first_unit_offset(shared.config.block_size)),
                                closed: None,
                            });
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
        self.sync_received_then(|durable| durable)
    }

    /// As `sync_received`, and then `acknowledge` with the durable end: after the end is
    /// published (so that this standby's position never reads below what it acknowledged),
    /// and before the readers waiting for it (real-time apply) are woken. A woken reader could
    /// otherwise take the CPU before the acknowledgement leaves, on the path of the primary's
    /// SYNC AFFIRM commits. (A write of a log's header still wakes them as it is received:
    /// once per log.)
    pub fn sync_received_then<T>(&self, acknowledge: impl FnOnce(RedoAddr) -> T) -> Result<T> {
        self.standby_only()?;
        let shared = &self.shared;
        // The end as of the sync, read under the receiving lock: another connection may
        // publish a later log's end before the acknowledgement leaves.
        let (durable, published) = {
            let receiving = shared.standby.lock();
            let addr = shared.durable_addr();
            let group = shared.table.lock().find(addr.seq);
            if let Some(group) = group
                && receiving.written_end > addr.offset
            {
                shared.sync_members(group)?;
                let durable = RedoAddr { seq: addr.seq, offset: receiving.written_end };
                shared.log_writer.publish_received(durable, false);
                (durable, true)
            } else {
                (addr, false)
            }
        };
        let acknowledged = acknowledge(durable);
        if published {
            // The end changed under the lock a reader checks it with before it waits
            // (`wait_for_redo`): a reader either saw the new end or is waiting now.
            shared.log_writer.wake_readers();
        }
        Ok(acknowledged)
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
            // Every copy of these logs (closed, waiting for the archivers), if spread
            // (`archive_spread_max`), goes on at once.
            let newest = table
                .groups
                .iter()
                .filter_map(|group| group.log.as_ref())
                .filter(|log| log.end.is_some() && !log.archived)
                .map(|log| log.header.seq.0)
                .max();
            self.shared
                .archive_hurry
                .fetch_max(newest.unwrap_or(0), std::sync::atomic::Ordering::AcqRel);
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
        self.shared.log_writer.publish_received(RedoAddr { seq, offset }, true);
    }
}

impl Shared {
    pub(crate) fn is_standby(&self) -> bool {
        self.role == Role::Standby
    }
}
