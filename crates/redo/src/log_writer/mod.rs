//! The log writer: group commit, the log write itself, and log switches.
//!
//! Group commit is leader/follower by default (`WriterMode::Leader`): a committer whose SCN
//! is not yet durable and finds no write in progress becomes the leader, takes everything in
//! the log buffer, writes and syncs it, and wakes every waiter its write covered. Committers
//! that arrive during a write wait; when the write ends, the leader hands leadership to one of
//! them, whose write covers all who arrived meanwhile. A lone committer therefore writes its
//! own redo with no hand-off at all, and under load each write carries every commit that was
//! waiting when it started. With `WriterMode::Dedicated`, only the background writer thread
//! leads and committers wake it, as a classic LGWR does.
//!
//! The background writer also writes BATCH and NOWAIT redo (at least every
//! `batch_write_interval`, sooner when the buffer is a third full), and switches logs for
//! `archive_lag_target`.
//!
//! *Architecture Invariant*: only the leader touches `WriterState` and the files' redo
//! units; exactly one leader exists at a time (`CommitState::leader`). Durability is
//! published (`durable_scn`) only after every valid member's sync returned.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::Waker;
use std::thread::{self, Thread};
use std::time::Instant;

use crate::config::WriterMode;
use crate::error::{RedoError, Result};
use crate::format::{self, Gathered, LogHeader, RECORD_HEADER_LEN, UnitGather, UnitWriter};
use crate::online_log::MemberState;
use crate::ship::{LogWrite, ShipWait, WriteKind};
use crate::storage::{AlignedBuf, StorageFile};
use crate::types::{LogSeq, RedoAddr, Scn, now_unix_us};
use crate::{Shared, SwitchReason};

mod borrowed;
mod durable;
mod handover;
pub(crate) mod pipeline;
mod switch;

pub(crate) use borrowed::BORROW_MIN_BYTES;
pub use durable::Durable;
pub(crate) use handover::Handover;
pub(crate) use pipeline::Pipeline;
use pipeline::{Deferred, Settle};

/// How a committer waiting for durability gets its redo written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Urgency {
    /// IMMEDIATE: write it now (lead, or wake the dedicated writer).
    Lead,
    /// BATCH: wait for the next write that someone else starts, or the background writer's.
    Passive,
}

const WAITING: u8 = 0;
const DONE: u8 = 1;
const LEAD: u8 = 2;
const FAILED: u8 = 3;
/// The writer is stuck on a log switch that a failure blocks (a full disk): the commit is not
/// durable yet, and its session is told so rather than left waiting (see `Shared::set_stall`).
const STALLED: u8 = 4;

/// How a waiter is woken: a parked thread, or an async task.
#[derive(Debug)]
enum Wake {
    Thread(Thread),
    Task(parking_lot::Mutex<Option<Waker>>),
}

/// Where a waiter learns its outcome.
#[derive(Debug)]
struct WaitSlot {
    outcome: AtomicU8,
    wake: Wake,
}

impl WaitSlot {
    fn for_thread() -> Arc<WaitSlot> {
        Arc::new(WaitSlot {
            outcome: AtomicU8::new(WAITING),
            wake: Wake::Thread(thread::current()),
        })
    }

    fn for_task(waker: &Waker) -> Arc<WaitSlot> {
        Arc::new(WaitSlot {
            outcome: AtomicU8::new(WAITING),
            wake: Wake::Task(parking_lot::Mutex::new(Some(waker.clone()))),
        })
    }

    fn outcome(&self) -> u8 {
        self.outcome.load(Ordering::Acquire)
    }

    fn park(&self) -> u8 {
        loop {
            let outcome = self.outcome();
            if outcome != WAITING {
                return outcome;
            }
            thread::park();
        }
    }

    fn complete(&self, outcome: u8) {
        self.outcome.store(outcome, Ordering::Release);
        match &self.wake {
            Wake::Thread(thread) => thread.unpark(),
            Wake::Task(waker) => {
                if let Some(waker) = waker.lock().take() {
                    waker.wake();
                }
            }
        }
    }
}

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

/// Ends the leadership of a leader that panics (a bug, in a shipper say): the writer is
/// failed and every waiter is told so, rather than left parked for ever.
/// (Armed only if the thread was not already unwinding when the round began: a round led
/// from a destructor during another panic, a flush at shutdown say, is not the one failing.)
struct LeaderPanicGuard<'a> {
    shared: &'a Shared,
    armed: bool,
}

impl<'a> LeaderPanicGuard<'a> {
    fn new(shared: &'a Shared) -> LeaderPanicGuard<'a> {
        LeaderPanicGuard { shared, armed: !thread::panicking() }
    }
}

impl Drop for LeaderPanicGuard<'_> {
    fn drop(&mut self) {
        if self.armed && thread::panicking() {
            self.shared.end_leadership(Some(&RedoError::WriterFailed(
                "the log writer panicked while leading a write".into(),
            )));
        }
    }
}

#[derive(Debug)]
struct Waiter {
    /// The SCN that must be durable; `None` for one who only wants to lead.
    scn: Option<Scn>,
    may_lead: bool,
    slot: Arc<WaitSlot>,
}

/// Who leads, and who waits.
#[derive(Debug, Default)]
pub(crate) struct CommitState {
    leader: bool,
    waiters: Vec<Waiter>,
    /// Why the log writer cannot go on (a log switch waits for a group whose archiving or
    /// checkpoint fails), while that lasts: commits not yet durable get an error at once.
    stall: Option<String>,
    /// The leader is a committer writing its own borrowed record (`borrowed`): a short write
    /// that never switches logs, which the background writer leaves alone.
    borrowing: bool,
    /// The background writer stepped back for that borrower and waits for `background` to
    /// look again: the end of the borrowing leadership notifies it.
    background_stepped_back: bool,
}

/// The log being written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CurrentLog {
    pub group: usize,
    pub header: LogHeader,
    /// Where the next write goes (a unit boundary).
    pub offset: u64,
}

/// State only the leader touches.
#[derive(Debug)]
pub(crate) struct WriterState {
    /// `None` until the first switch after opening: the newest log found is closed, and redo
    /// is never appended to a log that was open at a crash.
    pub current: Option<CurrentLog>,
    /// SCN of the next record to write.
    pub next_scn: Scn,
    /// Sequence of the newest log.
    pub last_seq: LogSeq,
    buffer: AlignedBuf,
}

/// Writes at least this large (of record stream) are gathered from the log buffer rather than
/// formatted into the write buffer: below it the copy costs little and the kernel would get
/// many small pieces. (Lower in unit tests, whose logs are 64 KiB, so that the crash tests
/// cover both ways.)
const GATHER_MIN_BYTES: usize = if cfg!(test) { 8 << 10 } else { 64 << 10 };

/// What one units write carried, for `record_units_write`.
#[derive(Debug, Clone, Copy)]
struct UnitsWritten {
    last_scn: Scn,
    /// Records written.
    entries: u64,
    /// Bytes of record stream (headers and payloads).
    stream: usize,
    units: usize,
}

/// A log write's bytes, as `write_log` takes them.
pub(crate) enum LogBytes<'a> {
    /// Contiguous, the caller's (headers; units formatted into the write buffer): copied if
    /// shipped.
    Slice(&'a [u8]),
    /// Contiguous and shared: the shipper gets the very allocation the local write uses.
    Shared(Arc<[u8]>),
}

/// What `offer` makes the shipper's one allocation from.
enum SharedOnce<'a> {
    Copy(&'a [u8]),
    Ready(Arc<[u8]>),
    Gathered(&'a Gathered<'a>),
}

impl WriterState {
    pub fn new(next_scn: Scn, last_seq: LogSeq) -> WriterState {
        WriterState { current: None, next_scn, last_seq, buffer: AlignedBuf::new() }
    }
}

impl Shared {
    /// Waits until `scn` is durable. With `Urgency::Lead` the caller writes it as leader if
    /// nobody else is writing (in `WriterMode::Leader`; in dedicated mode it wakes the
    /// background writer instead); with `Urgency::Passive` it waits for a write someone
    /// else starts (BATCH).
    pub(crate) fn wait_durable(&self, scn: Scn, urgency: Urgency) -> Result<()> {
        let mut may_lead = urgency == Urgency::Lead && self.config.writer == WriterMode::Leader;
        let wake_background = urgency == Urgency::Lead && !may_lead;
        loop {
            if self.durable_scn() >= scn {
                return Ok(());
            }
            let mut commit = self.commit.lock();
            if let Some(error) = self.failure() {
                return Err(error);
            }
            if self.durable_scn() >= scn {
                return Ok(());
            }
            if self.is_shut_down() {
                return Err(RedoError::Shutdown);
            }
            if let Some(reason) = &commit.stall {
                return Err(RedoError::CommitStalled { scn, reason: reason.clone() });
            }
            if may_lead && !commit.leader && !self.is_written(scn) {
                commit.leader = true;
                drop(commit);
                // A write that needs a log switch goes to the background writer (the switch
                // may wait as long as a full disk lasts, and a stall must be able to answer
                // this commit): then this thread waits as a follower.
                may_lead = self.lead_unless_switching(Settle::Adaptive);
                continue;
            }
            let slot = WaitSlot::for_thread();
            commit.waiters.push(Waiter { scn: Some(scn), may_lead, slot: slot.clone() });
            drop(commit);
            if wake_background {
                self.background.notify();
            }
            match slot.park() {
                LEAD => may_lead = self.lead_unless_switching(Settle::Adaptive),
                FAILED => return Err(self.failure().unwrap_or(RedoError::Shutdown)),
                // Asks again: durable by now, or still stalled (the error), or no longer.
                STALLED => {}
                _ => {}
            }
        }
    }

    /// Becomes the leader (waiting for the current one to hand over), then runs `work` as
    /// leader and ends the leadership (waking whoever its writes covered).
    pub(crate) fn with_leadership<T>(
        &self,
        work: impl FnOnce(&mut WriterState) -> Result<T>,
    ) -> Result<T> {
        let mut commit = self.commit.lock();
        if let Some(error) = self.failure() {
            return Err(error);
        }
        if commit.leader {
            let slot = WaitSlot::for_thread();
            commit.waiters.push(Waiter { scn: None, may_lead: true, slot: slot.clone() });
            drop(commit);
            if slot.park() != LEAD {
                return Err(self.failure().unwrap_or(RedoError::Shutdown));
            }
        } else {
            commit.leader = true;
            drop(commit);
        }
        let result = {
            let _unwinding = LeaderPanicGuard::new(self);
            let mut writer = self.writer.lock();
            work(&mut writer)
        };
        self.end_leadership(result.as_ref().err());
        result
    }

    /// One round as leader (a committing thread or tokio task): write everything in the log
    /// buffer, then hand over, unless the write needs a log switch. A switch waits until the
    /// next group is archived and checkpointed, which lasts as long as a full disk does; a
    /// task must not block its runtime worker that long (on a small machine that stops every
    /// connection and the admin API), and a committer blocked inside the switch could not be
    /// told of a stall. It then hands the write to the background writer, which may block,
    /// and returns false: the caller waits for it as a follower. A task also declines when
    /// the writes in flight to SYNC standbys are at their bound, or when a SYNC connection's
    /// socket has no room for the write (either would block its worker until a standby
    /// answers). The SYNC acknowledgements are waited for after the
    /// leadership is handed on (`pipeline`), by the acknowledgement waiter or, as `settle`
    /// allows, by this thread.
    pub(crate) fn lead_unless_switching(&self, settle: Settle) -> bool {
        let mut deferred = Vec::new();
        let result = {
            let _unwinding = LeaderPanicGuard::new(self);
            let mut writer = self.writer.lock();
            let bytes = self.buffer.used_bytes() as usize;
            if settle == Settle::Defer
                && (!self.pipeline_has_room(bytes)
                    || self.shipper.read().as_ref().is_some_and(|shipper| shipper.may_block(bytes)))
            {
                Ok(false)
            } else {
                self.write_pending_switching(&mut writer, false, settle, &mut deferred)
            }
        };
        // Handed to the acknowledgement waiter before the leadership: the next leader's
        // waits then queue behind these, and the waiter runs them in write order.
        self.dispatch(deferred);
        self.end_leadership(result.as_ref().err());
        let declined = matches!(result, Ok(false));
        if declined {
            self.background.notify();
        }
        !declined
    }

    /// Whether the log writer has written `scn` (it is in flight to SYNC standbys, or durable):
    /// a committer waiting for it has nothing to lead.
    fn is_written(&self, scn: Scn) -> bool {
        self.written_scn.load(Ordering::Acquire) >= scn.0
    }

    /// Wakes every waiter whose SCN is durable now (after a write in flight was published).
    pub(crate) fn wake_durable_waiters(&self) {
        let durable = self.durable_scn();
        self.complete_waiters(DONE, |scn| scn <= durable);
    }

    /// Waits for what the shipper asked for. If that fails (the protection mode cannot be
    /// met: the primary is fenced or stopping), the redo just written locally must never count
    /// as durable, nor anything after it: the writer refuses all further redo, and every
    /// commit waiting gets the error.
    fn wait_shipped(&self, wait: Box<dyn ShipWait>) -> Result<()> {
        // A wait that panics fails like one that returns an error: the acknowledgement waiter
        // (or the leader running it) lives on, the commits behind it are told, and no further
        // redo is taken. Unwound, it would leave every pipelined commit waiting for ever.
        let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || wait.wait()))
            .unwrap_or_else(|_| {
                Err(RedoError::WriterFailed(
                    "the wait for the standbys' acknowledgement panicked".into(),
                ))
            });
        waited.map_err(|error| {
            let cause = match &error {
                RedoError::WriterFailed(cause) => cause.clone(),
                other => other.to_string(),
            };
            let reason = format!(
                "the redo could not be protected as the protection mode requires ({cause})"
            );
            self.refuse_further_redo(&reason);
            self.failure().unwrap_or(error)
        })
    }

    /// From now on no redo is written or made durable, and every commit waiting (and every
    /// later one) gets `WriterFailed(reason)`; the first reason stays. Used when the database
    /// may not acknowledge anything more (fenced), or a ship wait failed.
    pub(crate) fn refuse_further_redo(&self, reason: &str) {
        {
            let mut failure = self.failure.lock();
            if failure.is_some() {
                return;
            }
            *failure = Some(reason.to_string());
        }
        self.buffer.close();
        tracing::warn!(reason, "the log writer refuses further redo");
        let durable = self.durable_scn();
        self.complete_waiters(FAILED, |scn| scn > durable);
    }

    /// Takes every waiter for an SCN that `pick` chooses off the list and completes it with
    /// `outcome` (after the lock is released).
    fn complete_waiters(&self, outcome: u8, pick: impl Fn(Scn) -> bool) {
        let mut wake = Vec::new();
        let mut commit = self.commit.lock();
        let mut index = 0;
        while index < commit.waiters.len() {
            if commit.waiters[index].scn.is_some_and(&pick) {
                wake.push(commit.waiters.swap_remove(index).slot);
            } else {
                index += 1;
            }
        }
        drop(commit);
        for slot in wake {
            slot.complete(outcome);
        }
    }

    fn end_leadership(&self, error: Option<&RedoError>) {
        if let Some(error) = error
            && !matches!(
                error,
                RedoError::Shutdown
                    | RedoError::ArchiverStuck { .. }
                    | RedoError::CommitStalled { .. }
            )
            && self.failure().is_none()
        {
            // A write or sync failed on every member: fsync errors are not retryable, so the
            // writer refuses all further redo rather than pretend.
            tracing::error!(%error, "log writer failed; no further redo will be accepted");
            *self.failure.lock() = Some(format!("{error}; restart the database"));
            self.buffer.close();
        }
        let stopped = self.failure().is_some() || self.is_shut_down();
        let durable = self.durable_scn();
        let mut wake = Vec::new();
        let mut commit = self.commit.lock();
        // Whoever leads next is not the borrower (cleared under this lock, with the handing on).
        commit.borrowing = false;
        let wake_background = std::mem::take(&mut commit.background_stepped_back);
        let mut index = 0;
        while index < commit.waiters.len() {
            let waiter = &commit.waiters[index];
            if waiter.scn.is_some_and(|scn| scn <= durable) {
                wake.push((commit.waiters.swap_remove(index).slot, DONE));
            } else if stopped {
                wake.push((commit.waiters.swap_remove(index).slot, FAILED));
            } else {
                index += 1;
            }
        }
        // A waiter whose redo is written (in flight to SYNC standbys) has nothing to lead: it
        // waits to be published.
        let written = self.written_scn.load(Ordering::Acquire);
        match commit
            .waiters
            .iter()
            .position(|waiter| waiter.may_lead && waiter.scn.is_none_or(|scn| scn.0 > written))
        {
            Some(next) => wake.push((commit.waiters.swap_remove(next).slot, LEAD)),
            None => {
                commit.leader = false;
                if !commit.waiters.is_empty() && self.config.writer == WriterMode::Dedicated {
                    // Dedicated mode: committers that arrived during this write need the
                    // background writer to start the next one.
                    self.background.notify();
                }
            }
        }
        drop(commit);
        if wake_background {
            // The background writer stepped back for the borrower (`background_writer`): it
            // looks again now, whether or not anything was published.
            self.background.notify();
        }
        for (slot, outcome) in wake {
            slot.complete(outcome);
        }
    }

    /// Writes every record appended so far (as leader), and returns once all of it, and
    /// everything in flight before it, is durable.
    pub(crate) fn write_pending(&self, writer: &mut WriterState) -> Result<()> {
        self.write_pending_switching(writer, true, Settle::Here, &mut Vec::new())?;
        self.drain_pipeline()
    }

    /// Writes every record appended so far (as leader). With `may_switch` false, returns
    /// false, having written nothing, if that needs a log switch. Writes that must be
    /// acknowledged by SYNC standbys are settled as `settle` says; deferred waits are added to
    /// `deferred`, for the caller to `dispatch` once it has handed the leadership on.
    fn write_pending_switching(
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
            // - otherwise (small, or O_DIRECT, which needs aligned memory): formatted into
            //   the aligned write buffer.
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
    fn record_units_write(
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
        *self.written_addr.lock() = addr;
        self.written_scn.store(last_scn.0, Ordering::Release);
        self.settle_write(last_scn, addr, bytes, wait, settle, deferred)?;
        self.stats.redo_writes.incr();
        self.stats.redo_entries.add(entries);
        self.stats.redo_size.add(stream as u64);
        self.stats.redo_blocks_written.add(units as u64);
        let capacity = format::unit_capacity(self.config.block_size);
        self.stats.redo_wastage.add((units * capacity - stream) as u64);
        Ok(())
    }

    /// Makes one log write: offers it to the shipper (redo transport) first, then writes and
    /// syncs it on every valid member of `group`. Returns what must be waited for (SYNC
    /// acknowledgements) before the write may be declared durable: the caller records the
    /// write as made first, so that a failed wait never leaves the writer's state behind
    /// what is on disk.
    pub(crate) fn write_log(
        &self,
        group: usize,
        bytes: LogBytes<'_>,
        offset: u64,
        kind: WriteKind,
        seq: LogSeq,
        last_scn: Scn,
    ) -> Result<Option<Box<dyn ShipWait>>> {
        let shared = match &bytes {
            LogBytes::Slice(bytes) => SharedOnce::Copy(bytes),
            LogBytes::Shared(shared) => SharedOnce::Ready(shared.clone()),
        };
        let wait = self.offer(shared, offset, kind, seq, last_scn);
        let bytes: &[u8] = match &bytes {
            LogBytes::Slice(bytes) => bytes,
            LogBytes::Shared(shared) => shared,
        };
        self.write_members(group, bytes, offset, true)?;
        Ok(wait)
    }

    /// `write_log` for units gathered from the log buffer, in two steps: this one offers them
    /// to the shipper (gathered units are not meant to be shipped: a shipper that appeared
    /// since the caller looked gets a copy) and writes them, one vectored write per member;
    /// `sync_gathered` then syncs them. Between the two the caller releases the log buffer.
    /// Returns the ship wait and when the write began.
    fn write_gathered(
        &self,
        group: usize,
        gathered: &Gathered<'_>,
        offset: u64,
        seq: LogSeq,
        last_scn: Scn,
    ) -> Result<(Option<Box<dyn ShipWait>>, Instant)> {
        let wait =
            self.offer(SharedOnce::Gathered(gathered), offset, WriteKind::Units, seq, last_scn);
        let pieces: Vec<&[u8]> = gathered.pieces().collect();
        let started = Instant::now();
        self.on_valid_members(group, offset, |file| file.write_gathered_at(&pieces, offset))?;
        Ok((wait, started))
    }

    /// Syncs what `write_gathered` wrote (begun at `started`).
    fn sync_gathered(&self, group: usize, offset: u64, started: Instant) -> Result<()> {
        self.on_valid_members(group, offset, |file| file.sync_data())?;
        self.waits.log_file_parallel_write.record_since(started);
        Ok(())
    }

    /// Offers a write to the shipper, if there is one, with its bytes in one shared
    /// allocation (made only then).
    fn offer(
        &self,
        bytes: SharedOnce<'_>,
        offset: u64,
        kind: WriteKind,
        seq: LogSeq,
        last_scn: Scn,
    ) -> Option<Box<dyn ShipWait>> {
        let shipper = self.shipper.read().clone()?;
        let bytes = match bytes {
            SharedOnce::Ready(shared) => shared,
            SharedOnce::Copy(bytes) => Arc::from(bytes),
            SharedOnce::Gathered(gathered) => Arc::from(gathered.to_vec()),
        };
        let write = Arc::new(LogWrite {
            seq,
            offset,
            kind,
            bytes,
            last_scn,
            time_us: now_unix_us(),
            durable_scn: self.durable_scn(),
        });
        shipper.ship(&write)
    }

    /// Whether every valid member of `group` takes vectored writes without joining the pieces
    /// (none is opened with O_DIRECT).
    fn members_gather(&self, group: usize) -> bool {
        let table = self.table.lock();
        table.groups[group]
            .members
            .iter()
            .filter(|member| member.state == MemberState::Valid)
            .filter_map(|member| member.file.as_ref())
            .all(|file| file.gathers())
    }

    /// Writes `bytes` at `offset` to every valid member of `group` (and syncs them if `sync`),
    /// in parallel. A member that fails is taken out; the write fails only if none is left.
    pub(crate) fn write_members(
        &self,
        group: usize,
        bytes: &[u8],
        offset: u64,
        sync: bool,
    ) -> Result<()> {
        let started = Instant::now();
        self.on_valid_members(group, offset, |file| {
            file.write_at(bytes, offset)?;
            if sync { file.sync_data() } else { Ok(()) }
        })?;
        if sync {
            self.waits.log_file_parallel_write.record_since(started);
        }
        Ok(())
    }

    /// Runs `io` on every valid member of `group`, in parallel. A member that fails is taken
    /// out (`offset` names the write in the error); fails only if none is left.
    fn on_valid_members(
        &self,
        group: usize,
        offset: u64,
        io: impl Fn(&Arc<dyn StorageFile>) -> std::io::Result<()> + Sync,
    ) -> Result<()> {
        let members: Vec<(usize, Arc<dyn StorageFile>)> = {
            let table = self.table.lock();
            table.groups[group]
                .members
                .iter()
                .enumerate()
                .filter(|(_, member)| member.state == MemberState::Valid)
                .filter_map(|(index, member)| member.file.clone().map(|file| (index, file)))
                .collect()
        };
        if members.is_empty() {
            return Err(RedoError::WriterFailed(format!(
                "no member of log group {} can be written",
                group + 1
            )));
        }
        let results = self.on_members(&members, io);
        self.take_out_failed(group, &members, results, offset)
    }

    /// Syncs every valid member of `group`.
    pub(crate) fn sync_members(&self, group: usize) -> Result<()> {
        let members: Vec<(usize, Arc<dyn StorageFile>)> = {
            let table = self.table.lock();
            table.groups[group]
                .members
                .iter()
                .enumerate()
                .filter(|(_, member)| member.state == MemberState::Valid)
                .filter_map(|(index, member)| member.file.clone().map(|file| (index, file)))
                .collect()
        };
        let started = Instant::now();
        let results = self.on_members(&members, |file| file.sync_data());
        self.waits.log_file_parallel_write.record_since(started);
        self.take_out_failed(group, &members, results, 0)
    }

    /// Runs `io` on every member, the first on this thread and the others in parallel.
    fn on_members(
        &self,
        members: &[(usize, Arc<dyn StorageFile>)],
        io: impl Fn(&Arc<dyn StorageFile>) -> std::io::Result<()> + Sync,
    ) -> Vec<std::io::Result<()>> {
        match members {
            [] => Vec::new(),
            [(_, only)] => vec![io(only)],
            [(_, first), rest @ ..] => thread::scope(|scope| {
                let others: Vec<_> =
                    rest.iter().map(|(_, file)| scope.spawn(|| io(file))).collect();
                let mut results = vec![io(first)];
                results.extend(others.into_iter().map(|handle| {
                    handle
                        .join()
                        .unwrap_or_else(|_| Err(std::io::Error::other("member writer panicked")))
                }));
                results
            }),
        }
    }

    /// Marks the members whose I/O failed as FAILED; fails if none succeeded.
    fn take_out_failed(
        &self,
        group: usize,
        members: &[(usize, Arc<dyn StorageFile>)],
        results: Vec<std::io::Result<()>>,
        offset: u64,
    ) -> Result<()> {
        let mut survivors = 0;
        let mut last_error = None;
        for ((member, _), result) in members.iter().zip(results) {
            match result {
                Ok(()) => survivors += 1,
                Err(error) => {
                    let mut table = self.table.lock();
                    let member = &mut table.groups[group].members[*member];
                    tracing::error!(member = %member.path.display(), offset, %error, "log member write failed; taking the member out");
                    member.state =
                        MemberState::Failed(format!("write at offset {offset}: {error}"));
                    last_error = Some(RedoError::io("write", &member.path, error));
                }
            }
        }
        match (survivors, last_error) {
            (0, Some(error)) => Err(error),
            (0, None) => Err(RedoError::WriterFailed(format!(
                "no member of log group {} can be written",
                group + 1
            ))),
            _ => Ok(()),
        }
    }

    fn publish_durable(&self, scn: Scn, addr: RedoAddr) {
        let mut durable = self.durable_addr.lock();
        *durable = addr;
        self.durable_scn.store(scn.0, Ordering::Release);
        self.redo_arrived.notify_all();
    }

    /// The background log writer: BATCH and NOWAIT redo, dedicated-mode commits, and
    /// `archive_lag_target`.
    pub(crate) fn background_writer(self: &Arc<Shared>) {
        let interval = self.config.batch_write_interval;
        let lag_target = self.config.archive_lag_target;
        loop {
            self.background.wait(interval);
            if self.is_shut_down() || self.failure().is_some() {
                return;
            }
            let mut unwritten =
                Scn(self.written_scn.load(Ordering::Acquire)) < self.buffer.next_scn().prev();
            // `borrowing` implies leader mode and a leader (set with the leadership, cleared
            // when it ends or passes on).
            let step_back = unwritten && {
                let mut commit = self.commit.lock();
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
                self.background.wait(interval);
                self.background.notify();
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
                    let writer_view = *self.durable_addr.lock();
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
