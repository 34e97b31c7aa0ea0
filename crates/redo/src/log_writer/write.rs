//! The write path: every record appended so far, laid out in units and written to the current
//! group (switching logs when it is full), as leader; and the background writer's loop.

use std::sync::Arc;

use super::members::LogBytes;
use super::pipeline::{Deferred, Settle};
use super::{CurrentLog, WriterState};
use crate::error::{RedoError, Result};
use crate::format::{self, RECORD_HEADER_LEN, UnitGather, UnitWriter};
use crate::ship::{ShipWait, WriteKind};
use crate::types::{LogSeq, RedoAddr, Scn, now_unix_us};
use crate::{Shared, SwitchReason};

/// Lays `records` of `batch` out as units filling `out` exactly (every byte, padding
/// included), as a log write starting at `offset` of log `seq`.
fn format_units(
    out: &mut [u8],
    block_size: u32,
    seq: LogSeq,
    offset: u64,
    batch: &crate::log_buffer::Batch<'_>,
    records: &[crate::log_buffer::Taken],
) {
    let len = out.len();
    let mut unit_writer = UnitWriter::new(out, block_size, seq, offset);
    for record in records {
        unit_writer.put(record.scn, batch.payload(record));
    }
    let written = unit_writer.finish();
    assert_eq!(written, len);
}

/// Writes at least this large (of record stream) are gathered from the log buffer rather than
/// formatted into the write buffer: below it the copy costs little and the kernel would get
/// many small pieces. (Lower in unit tests, whose logs are 64 KiB, so that the crash tests
/// cover both ways.)
pub(super) const GATHER_MIN_BYTES: usize = if cfg!(test) { 8 << 10 } else { 64 << 10 };

/// What one units write carried, for `record_units_write`.
#[derive(Debug, Clone, Copy)]
pub(super) struct UnitsWritten {
    pub(super) last_scn: Scn,
    /// Records written.
    pub(super) entries: u64,
    /// Bytes of record stream (headers and payloads).
    pub(super) stream: usize,
    pub(super) units: usize,
}

impl Shared {
    /// Writes every record appended so far (as leader), and returns once all of it, and
    /// everything in flight before it, is durable.
    pub(crate) fn write_pending(&self, writer: &mut WriterState) -> Result<()> {
        self.write_pending_switching(writer, true, Settle::Here, &mut Vec::new())?;
        self.log_writer.drain_pipeline()
    }

    /// Writes every record appended so far (as leader). With `may_switch` false, returns
    /// false, having written nothing, if that needs a log switch. Writes that must be
    /// acknowledged by SYNC standbys are settled as `settle` says; deferred waits are added to
    /// `deferred`, for the caller to `dispatch` once it has handed the leadership on.
    pub(super) fn write_pending_switching(
        &self,
        writer: &mut WriterState,
        may_switch: bool,
        settle: Settle,
        deferred: &mut Vec<Deferred>,
    ) -> Result<bool> {
        if let Some(error) = self.failure() {
            return Err(error);
        }
        if self.is_shut_down() {
            // Shutdown flushed what was appended before it; a batch taken now could be cut
            // off by the stopping switch, leaving a gap in the SCNs.
            return Err(RedoError::Shutdown);
        }
        let horizon = self.buffer.next_scn();
        if horizon <= writer.next_scn {
            return Ok(true);
        }
        if !may_switch {
            // Decide before taking the batch (taken records cannot be put back). The buffer's
            // used bytes, read after the horizon, bound the batch's stream (each record is
            // charged its header there too), and the buffer's size bounds those: count them
            // only when the log has less room than a full buffer.
            let Some(current) = writer.current else { return Ok(false) };
            let block_size = self.config.block_size;
            let room_units = (current.header.file_size - current.offset) / u64::from(block_size);
            let fits =
                |bytes: u64| format::units_for(bytes as usize, block_size) as u64 <= room_units;
            if !fits(self.config.log_buffer_size) && !fits(self.buffer.used_bytes()) {
                return Ok(false);
            }
        }
        if writer.current.is_none() {
            self.switch(writer, SwitchReason::FirstWrite)?;
        }
        if self.shipper.read().is_some() {
            // Bounds what is in flight to SYNC standbys (a task never gets here when full).
            self.make_room(self.buffer.used_bytes() as usize)?;
        }
        let block_size = self.config.block_size;
        let mut batch = Some(self.buffer.take(horizon));
        let count = batch.as_ref().map_or(0, |batch| batch.records.len());
        assert_eq!(
            count as u64,
            horizon.0 - writer.next_scn.0,
            "the log buffer hands out every SCN below the horizon"
        );
        let mut first = 0;
        while first < count {
            if first > 0
                && let Some(error) = self.failure()
            {
                // Refused meanwhile (fenced during a long switch, say): nothing more of this
                // batch may be written and counted durable.
                return Err(error);
            }
            let current = writer.current.expect("a log is open after a switch");
            let room_units =
                ((current.header.file_size - current.offset) / u64::from(block_size)) as usize;
            // As many records as fit in the current log.
            let (end, stream) = {
                let records = &batch.as_ref().expect("batch held until formatted").records;
                let mut stream = 0usize;
                let mut end = first;
                while end < count {
                    let grown = stream + RECORD_HEADER_LEN + records[end].len();
                    if format::units_for(grown, block_size) > room_units {
                        break;
                    }
                    stream = grown;
                    end += 1;
                }
                (end, stream)
            };
            if end == first {
                self.stats.log_space_requests.incr();
                // The switch waits for everything in flight, this round's writes included.
                self.run_deferred(deferred)?;
                self.switch(writer, SwitchReason::Full)?;
                continue;
            }
            let units = format::units_for(stream, block_size);
            let bytes = units * block_size as usize;
            let held = batch.as_ref().expect("batch held until formatted");
            let records = &held.records[first..end];
            let last_scn = records[records.len() - 1].scn;
            let entries = (end - first) as u64;
            let seq = current.header.seq;
            // How the units are laid out (the same bytes every way; `docs/redo-format.md`):
            // - shipped: formatted once into memory the shipper shares with the local write;
            // - large, where the members take vectored writes: gathered, the payloads written
            //   straight from the log buffer (no copy before the kernel's);
            // - otherwise (small, or `io_mode = "direct"`, which needs aligned memory):
            //   formatted into the aligned write buffer. (With `auto`, a gathered write under
            //   1 MiB is joined into aligned memory by the file, a larger one written buffered.)
            let gathers = self.members_gather(current.group);
            let wait = if gathers && self.shipper.read().is_some() {
                // SAFETY: zero is a valid u8.
                let mut shared = unsafe { Arc::<[u8]>::new_zeroed_slice(bytes).assume_init() };
                let out = Arc::get_mut(&mut shared).expect("not shared before it is shipped");
                format_units(out, block_size, seq, current.offset, held, records);
                if end == count {
                    // Everything is formatted: give the log buffer its space back before the I/O.
                    batch = None;
                }
                self.write_log(
                    current.group,
                    LogBytes::Shared(shared),
                    current.offset,
                    WriteKind::Units,
                    seq,
                    last_scn,
                )?
            } else if gathers && stream >= GATHER_MIN_BYTES {
                let (wait, started) = {
                    let mut gather = UnitGather::new(block_size, seq, current.offset);
                    for record in records {
                        gather.put(record.scn, held.payload(record));
                    }
                    let gathered = gather.finish();
                    assert_eq!(gathered.len(), bytes);
                    self.write_gathered(current.group, &gathered, current.offset, seq, last_scn)?
                };
                // The pieces borrowed the log buffer; the kernel has the bytes now, so it gets
                // its space back before the sync.
                if end == count {
                    batch = None;
                }
                self.sync_gathered(current.group, current.offset, started)?;
                wait
            } else {
                let mut buffer = std::mem::take(&mut writer.buffer);
                // (The unit writer writes every byte of the units, padding included.)
                buffer.resize_for_overwrite(bytes);
                format_units(&mut buffer[..bytes], block_size, seq, current.offset, held, records);
                if end == count {
                    // Everything is formatted: give the log buffer its space back before the I/O.
                    batch = None;
                }
                let result = self.write_log(
                    current.group,
                    LogBytes::Slice(&buffer[..bytes]),
                    current.offset,
                    WriteKind::Units,
                    seq,
                    last_scn,
                );
                writer.buffer = buffer;
                result?
            };
            let written = UnitsWritten { last_scn, entries, stream, units };
            self.record_units_write(writer, current, written, wait, settle, deferred)?;
            first = end;
        }
        drop(batch);
        Ok(true)
    }

    /// Records a units write just made locally at `current`'s offset (as leader): the
    /// writer's position and the written SCN move past it, it is settled (`settle_write`) and
    /// counted.
    pub(super) fn record_units_write(
        &self,
        writer: &mut WriterState,
        current: CurrentLog,
        written: UnitsWritten,
        wait: Option<Box<dyn ShipWait>>,
        settle: Settle,
        deferred: &mut Vec<Deferred>,
    ) -> Result<()> {
        let UnitsWritten { last_scn, entries, stream, units } = written;
        let block_size = self.config.block_size as usize;
        let bytes = units * block_size;
        let offset = current.offset + bytes as u64;
        writer.current = Some(CurrentLog { offset, ..current });
        writer.next_scn = last_scn.next();
        let addr = RedoAddr { seq: current.header.seq, offset };
        self.log_writer.advance_written(Some(last_scn), addr);
        self.settle_write(last_scn, addr, bytes, wait, settle, deferred)?;
        self.stats.redo_writes.incr();
        self.stats.redo_entries.add(entries);
        self.stats.redo_size.add(stream as u64);
        self.stats.redo_blocks_written.add(units as u64);
        let capacity = format::unit_capacity(self.config.block_size);
        self.stats.redo_wastage.add((units * capacity - stream) as u64);
        Ok(())
    }

    /// The background log writer: BATCH and NOWAIT redo, dedicated-mode commits, and
    /// `archive_lag_target`.
    pub(crate) fn background_writer(self: &Arc<Shared>) {
        let interval = self.config.batch_write_interval;
        let lag_target = self.config.archive_lag_target;
        loop {
            self.log_writer.background.wait(interval);
            if self.is_shut_down() || self.failure().is_some() {
                return;
            }
            let mut unwritten = self.log_writer.written_scn() < self.buffer.next_scn().prev();
            // `borrowing` implies leader mode and a leader (set with the leadership, cleared
            // when it ends or passes on).
            let step_back = unwritten && {
                let mut commit = self.log_writer.commit.lock();
                commit.background_stepped_back = commit.borrowing;
                commit.borrowing
            };
            if step_back {
                // A committer is writing its own borrowed record. Queueing to lead after it
                // would hold the leadership just when that committer comes back with its next
                // record, and make it copy that record and wait for this thread. Look again
                // once its leadership ends (or after the interval): whatever it did not cover
                // is written then. Any other leader is queued behind as before: one that
                // declines a log switch hands the leadership on, and the switch must reach
                // this thread at once, not an interval later.
                // The end of the borrowing leadership notifies `background` (it finds
                // `background_stepped_back`, set under the same lock as the check above), and
                // `background` keeps a notification that comes before this wait: none is lost
                // (before, a wait on `redo_arrived` missed a borrower that declined, led a
                // copied write, declined its log switch and notified this thread, and the
                // switch waited for the interval).
                self.log_writer.background.wait(interval);
                self.log_writer.background.notify();
                unwritten = false;
            }
            let mut deferred = Vec::new();
            let result = if unwritten {
                self.with_leadership(|writer| {
                    let result =
                        self.write_pending_switching(writer, true, Settle::Defer, &mut deferred);
                    // Handed on while still leading, as in `lead_unless_switching`.
                    self.dispatch(std::mem::take(&mut deferred));
                    result
                })
            } else {
                Ok(true)
            };
            if let Err(error) = result {
                if !matches!(error, RedoError::Shutdown) {
                    tracing::warn!(%error, "background log write failed");
                }
                continue;
            }
            if !lag_target.is_zero() {
                let due = {
                    let writer_view = self.log_writer.durable_addr();
                    let table = self.table.lock();
                    table
                        .current
                        .and_then(|current| table.groups[current].log.as_ref())
                        .is_some_and(|log| {
                            log.end.is_none()
                                && writer_view.offset
                                    > format::first_unit_offset(self.config.block_size)
                                && now_unix_us().saturating_sub(log.header.first_time_us)
                                    >= lag_target.as_micros() as u64
                        })
                };
                if due
                    && let Err(error) = self.with_leadership(|writer| {
                        self.write_pending(writer)?;
                        self.switch(writer, SwitchReason::ArchiveLagTarget)
                    })
                {
                    tracing::warn!(%error, "log switch for archive_lag_target failed");
                }
            }
        }
    }
}
