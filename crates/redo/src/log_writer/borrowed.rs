//! Borrowed records: a large record that its committing thread waits for (WAIT IMMEDIATE),
//! written straight from the committer's memory instead of being copied into the log buffer.
//!
//! Copying 1 MiB into the log buffer costs as much CPU as the kernel's own copy of the write,
//! and only buys something when another thread may write the record: a NOWAIT committer has
//! returned by then, a follower's record is written by its leader. So only a committer that
//! can lead at once borrows: it takes the leadership *before* its record exists, then, in one
//! step under every strand lock (`LogBuffer::take_numbering_borrowed`), numbers its record
//! (the next SCN) and takes every record before it, and writes them all, its own payload
//! gathered from its own slice, in one write it makes itself.
//!
//! Why no one else ever needs the borrowed bytes:
//! - The record is never in the log buffer, so no batch, shipper or reader can see it there.
//!   Nothing but the log writer's batch reads the buffer anyway: shipping and readers take
//!   redo from the written log files (or from the shared copy a shipper is given).
//! - Its SCN is handed out while its committer is the leader and holds the writer, and the
//!   write happens before the leadership ends, so no other leader (a committer, the
//!   background writer, a log switch, the shutdown flush) takes a batch in between. The next
//!   batch starts above it.
//! - The write needs no log switch (the record and everything pending must fit the current
//!   log, decided before the SCN is handed out), so it never waits in a stall, and it is
//!   never retried: a write or sync that fails on every member fails the writer, and any
//!   other error after the numbering is turned into a writer failure, so no later write can
//!   find the SCN missing.
//! - A destination added meanwhile is offered a copy (`write_gathered`): shipped bytes are
//!   always owned.
//! - The borrow itself is an ordinary one: the gathered pieces live on this call's stack and
//!   end before it returns, so the compiler proves the slice outlives the write.
//!
//! Anything else (a leader already at work, a first write or a full log needing a switch,
//! members opened with `io_mode = "direct"`, a shipper, dedicated mode) takes the usual path,
//! copied.

use super::leadership::LeaderPanicGuard;
use super::pipeline::Settle;
use super::write::UnitsWritten;
use super::{Urgency, WriterState};
use crate::Shared;
use crate::config::WriterMode;
use crate::error::{RedoError, Result};
use crate::format::{self, RECORD_HEADER_LEN, UnitGather};
use crate::log_writer::pipeline::Deferred;
use crate::types::Scn;

/// Records at least this large are borrowed when they can be. Below it the copy costs little
/// next to the write; the same bound decides whether a write is gathered
/// (`GATHER_MIN_BYTES`), so a borrowed record is always written gathered.
pub(crate) const BORROW_MIN_BYTES: usize = super::write::GATHER_MIN_BYTES;

impl Shared {
    /// Commits `payload` as a borrowed record, if this thread can lead now: returns its SCN
    /// once durable. Returns `Ok(None)` having done nothing when it cannot (the caller appends
    /// the record as usual). The caller has checked that the engine takes new redo of this
    /// size (`RedoLog::check_append`).
    pub(crate) fn commit_borrowed(&self, payload: &[u8]) -> Result<Option<Scn>> {
        if payload.len() < BORROW_MIN_BYTES
            || self.config.writer != WriterMode::Leader
            || self.shipper.read().is_some()
        {
            return Ok(None);
        }
        {
            let mut commit = self.log_writer.commit.lock();
            if let Some(error) = self.failure() {
                return Err(error);
            }
            if self.is_shut_down() {
                return Err(RedoError::Shutdown);
            }
            if commit.leader || commit.stall.is_some() {
                return Ok(None);
            }
            commit.lead();
            commit.borrowing = true;
        }
        let mut deferred = Vec::new();
        let result = {
            let _unwinding = LeaderPanicGuard::new(self);
            let mut writer = self.log_writer.state.lock();
            self.write_borrowed(&mut writer, payload, &mut deferred)
        };
        self.dispatch(deferred);
        // Ends `borrowing` too.
        self.end_leadership(result.as_ref().err());
        let Some(scn) = result? else { return Ok(None) };
        // Durable already, unless a destination added meanwhile must acknowledge it first.
        self.wait_durable(scn, Urgency::Lead)?;
        Ok(Some(scn))
    }

    /// As leader: numbers `payload` as the next record and writes it after everything pending,
    /// in one gathered write to the current log. `Ok(None)`, having numbered nothing, when that
    /// is not possible without a log switch (or the members do not gather).
    fn write_borrowed(
        &self,
        writer: &mut WriterState,
        payload: &[u8],
        deferred: &mut Vec<Deferred>,
    ) -> Result<Option<Scn>> {
        if let Some(error) = self.failure() {
            return Err(error);
        }
        if self.is_shut_down() {
            return Err(RedoError::Shutdown);
        }
        // The first write after opening switches logs: the usual path does that.
        let Some(current) = writer.current else { return Ok(None) };
        if !self.members_gather(current.group) {
            return Ok(None);
        }
        let block_size = self.config.block_size;
        let room_units =
            ((current.header.file_size - current.offset) / u64::from(block_size)) as usize;
        let own_stream = RECORD_HEADER_LEN + payload.len();
        // No larger than a write from the log buffer can be (its record stream at most the
        // buffer's size): the recovery scan takes valid redo further than `write_bytes_max`
        // past a torn write's end for corruption, so a longer write torn by a power cut
        // would leave a log that refuses to open.
        let stream_max = self.config.log_buffer_size as usize;
        let Some((scn, batch)) = self.buffer.take_numbering_borrowed(|pending| {
            let stream = pending as usize + own_stream;
            stream <= stream_max && format::units_for(stream, block_size) <= room_units
        }) else {
            return Ok(None);
        };
        assert_eq!(
            batch.records.len() as u64,
            scn.0 - writer.next_scn.0,
            "the log buffer hands out every SCN below the borrowed one"
        );
        // The SCN is handed out and only this write carries it.
        let written = (|| {
            let seq = current.header.seq;
            let mut stream = own_stream;
            let (wait, started) = {
                let mut gather = UnitGather::new(block_size, seq, current.offset);
                for record in &batch.records {
                    gather.put(record.scn, batch.payload(record));
                    stream += RECORD_HEADER_LEN + record.len();
                }
                gather.put(scn, payload);
                let gathered = gather.finish();
                assert_eq!(
                    gathered.len(),
                    format::units_for(stream, block_size) * block_size as usize
                );
                self.write_gathered(current.group, &gathered, current.offset, seq, scn)?
            };
            let entries = batch.records.len() as u64 + 1;
            // The kernel has the bytes: the log buffer gets its space back before the sync.
            drop(batch);
            self.sync_gathered(current.group, current.offset, started)?;
            let units = format::units_for(stream, block_size);
            let written = UnitsWritten { last_scn: scn, entries, stream, units };
            self.record_units_write(writer, current, written, wait, Settle::Adaptive, deferred)
        })();
        match written {
            Ok(()) => {
                self.stats.redo_borrowed_records.incr();
                Ok(Some(scn))
            }
            // `end_leadership` fails the writer for an I/O error; an error it would let pass
            // (none is expected here) must fail it too, or the next write would find a gap.
            Err(
                error @ (RedoError::Shutdown
                | RedoError::ArchiverStuck { .. }
                | RedoError::CommitStalled { .. }),
            ) => Err(RedoError::WriterFailed(format!(
                "the write of borrowed record {} did not complete ({error})",
                scn.0
            ))),
            Err(error) => Err(error),
        }
    }
}
