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
//! `LogWriter` is the log writer's state, with its lock order and the invariants its phase
//! changes assert. Its work is in the submodules, as methods of the engine's `Shared` (they
//! need the log buffer, the groups and the shipper too): `leadership` (who writes, and the
//! hand-on), `waiters` and `durable` (how committers wait, from a thread or a task), `write`
//! (the write path and the background writer), `members` (a write's I/O), `pipeline` (writes
//! in flight to SYNC standbys, published in order), `switch` (log switches and the stall),
//! `switch_waits` (what a session a switch holds up is counted under), `handover` (the thread
//! a task leader hands its write to), `borrowed` (large records written from their
//! committer's memory).
//!
//! *Architecture Invariant*: only the leader touches `WriterState` and the files' redo
//! units; exactly one leader exists at a time (`CommitState::leader`). Durability is
//! published (`durable_scn`) only after every valid member's sync returned.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Condvar, Mutex};

use crate::error::RedoError;
use crate::format::LogHeader;
use crate::log_buffer::Signal;
use crate::storage::AlignedBuf;
use crate::types::{LogSeq, RedoAddr, Scn};

mod borrowed;
mod durable;
mod handover;
mod leadership;
mod members;
pub(crate) mod pipeline;
mod stall;
mod switch;
mod switch_waits;
mod waiters;
mod write;

pub(crate) use borrowed::BORROW_MIN_BYTES;
pub use durable::Durable;
pub(crate) use handover::Handover;
pub(crate) use pipeline::Pipeline;
#[cfg(test)]
pub(crate) use switch_waits::SwitchPhase;
pub(crate) use switch_waits::{SwitchClock, SwitchMark};
pub(crate) use waiters::Urgency;
use waiters::Waiter;

/// The log writer's state: who leads and who waits, the writer's position, what is written
/// and what is durable, the writes in flight to SYNC standbys, the hand-over, the stall, and
/// why it refuses further redo.
///
/// **Lock order.** A thread holding one of these locks takes only locks later in this list
/// (never an earlier one), so no two threads can wait on each other:
///
/// 1. `state` (`WriterState`): held by the leader for its whole round, across the I/O and
///    any log switch;
/// 2. the engine's group `table` (`Shared::table`), and under it the control file's data, the
///    archive queue, the checkpoint's handler and failure; the switch drops `table` before it
///    calls the checkpoint handler and before it takes `commit` (`set_stall`);
/// 3. `pipeline`'s in-flight list (`flight`): a committing thread deciding whether to wait
///    for a SYNC standby itself takes `commit` under it, and publishing takes the ends;
/// 4. `commit` (`CommitState`: the leader flag, the waiters, the stall);
/// 5. `failure`;
/// 6. `written_addr`, `durable_addr`: each is read or changed on its own, never held while
///    another lock is taken (a reader that tails waits on `redo_arrived` with `durable_addr`).
///
/// `handover`'s state and `pipeline`'s hand-off queue are leaves too. A waiter's slot is
/// completed (its thread unparked, its task woken) only after `commit` is released.
///
/// **Phase changes**, each asserted where it happens (always on: a few comparisons per log
/// write, and a log writer that broke one must stop rather than publish):
/// - what is written (`written_scn`, `written_addr`) never moves back (`advance_written`);
/// - what is durable never moves back, and never passes what is written
///   (`publish_durable`): `written >= durable`;
/// - a log switch closes a log only behind a drained pipeline: nothing is in flight when its
///   closed header is written (`switch`);
/// - once `failure` is set it stays, with its first reason (`refuse`);
/// - the leadership is taken only when nobody holds it (`CommitState::lead`), and ended (or
///   handed on) only by its holder (`hand_on`).
pub(crate) struct LogWriter {
    /// Who leads, who waits, the stall (`CommitState`).
    pub commit: Mutex<CommitState>,
    /// The leader's position: the current log, the next SCN to write, its write buffer.
    pub state: Mutex<WriterState>,
    /// Every record at or below this SCN is durable.
    durable_scn: AtomicU64,
    /// The end of durable redo (on a standby, of received redo synced: the receiver publishes
    /// it, `publish_received`).
    durable_addr: Mutex<RedoAddr>,
    /// Signalled with `durable_addr` when more redo is durable (readers that tail wait on it).
    pub redo_arrived: Condvar,
    /// Readers parked on `redo_arrived` (counted under `durable_addr`'s lock): lets a test
    /// know a reader is waiting before it publishes.
    #[cfg(test)]
    pub redo_waiters: AtomicU64,
    /// End of what the log writer has written and synced locally (ahead of `durable_addr`
    /// while it waits for SYNC standbys): what redo transport may ship.
    written_addr: Mutex<RedoAddr>,
    /// The last SCN the log writer has written locally (ahead of `durable_scn` while writes
    /// are in flight to SYNC standbys).
    written_scn: AtomicU64,
    /// Log writes in flight to SYNC standbys (see `pipeline`).
    pub pipeline: Pipeline,
    /// A task leader's write handed to the hand-over writer (see `handover`).
    pub handover: Handover,
    /// The phase of the log switch in progress, which a session held up by it is counted
    /// under (`switch_waits`).
    pub switch_clock: Arc<SwitchClock>,
    /// Why the log writer refuses all further redo, once it does (a failed write, a fence, a
    /// failed SYNC wait): the first reason stays.
    failure: Mutex<Option<String>>,
    /// Wakes the background writer (the log buffer shares it).
    pub background: Arc<Signal>,
}

impl LogWriter {
    /// The log writer of an engine whose redo ends at `durable` (SCN `next_scn - 1`, in log
    /// `last_seq` at most): nothing in flight, nobody leading.
    pub(crate) fn new(
        next_scn: Scn,
        last_seq: LogSeq,
        durable: RedoAddr,
        background: Arc<Signal>,
        switch_clock: Arc<SwitchClock>,
    ) -> LogWriter {
        LogWriter {
            commit: Mutex::new(CommitState::default()),
            state: Mutex::new(WriterState::new(next_scn, last_seq)),
            durable_scn: AtomicU64::new(next_scn.prev().0),
            durable_addr: Mutex::new(durable),
            redo_arrived: Condvar::new(),
            #[cfg(test)]
            redo_waiters: AtomicU64::new(0),
            written_addr: Mutex::new(durable),
            written_scn: AtomicU64::new(next_scn.prev().0),
            pipeline: Pipeline::default(),
            handover: Handover::default(),
            switch_clock,
            failure: Mutex::new(None),
            background,
        }
    }

    /// Every record at or below this SCN is durable.
    pub(crate) fn durable_scn(&self) -> Scn {
        Scn(self.durable_scn.load(Ordering::Acquire))
    }

    /// The end of durable redo.
    pub(crate) fn durable_addr(&self) -> RedoAddr {
        *self.durable_addr.lock()
    }

    /// The end of what is written and synced locally (what may be shipped): never behind the
    /// durable end (on a standby, only that moves).
    pub(crate) fn written_addr(&self) -> RedoAddr {
        let written = *self.written_addr.lock();
        written.max(self.durable_addr())
    }

    /// Whether the log writer has written `scn` (it is in flight to SYNC standbys, or
    /// durable): a committer waiting for it has nothing to lead.
    pub(crate) fn is_written(&self, scn: Scn) -> bool {
        self.written_scn.load(Ordering::Acquire) >= scn.0
    }

    /// The last SCN written locally.
    pub(crate) fn written_scn(&self) -> Scn {
        Scn(self.written_scn.load(Ordering::Acquire))
    }

    /// The leader wrote and synced redo locally up to `addr` (with records up to `scn`, if
    /// the write held any: a log switch's header moves the address alone).
    pub(crate) fn advance_written(&self, scn: Option<Scn>, addr: RedoAddr) {
        let mut written = self.written_addr.lock();
        assert!(addr >= *written, "the written end moves back: {addr} after {}", *written);
        *written = addr;
        drop(written);
        if let Some(scn) = scn {
            let before = self.written_scn.swap(scn.0, Ordering::AcqRel);
            assert!(scn.0 >= before, "the written SCN moves back: {scn} after {before}");
        }
    }

    /// Publishes redo up to `addr` (records up to `scn`, if any moved) as durable and wakes
    /// the readers that tail. Never behind what was published, never past what is written.
    pub(crate) fn publish_durable(&self, scn: Option<Scn>, addr: RedoAddr) {
        let written = *self.written_addr.lock();
        assert!(addr <= written, "durable {addr} published past the written end {written}");
        let mut durable = self.durable_addr.lock();
        assert!(addr >= *durable, "the durable end moves back: {addr} after {}", *durable);
        *durable = addr;
        if let Some(scn) = scn {
            assert!(self.is_written(scn), "SCN {scn} published durable before it is written");
            let before = self.durable_scn.swap(scn.0, Ordering::AcqRel);
            assert!(scn.0 >= before, "the durable SCN moves back: {scn} after {before}");
        }
        self.redo_arrived.notify_all();
    }

    /// A standby's receiver publishes the end of what it received and synced (no log writer
    /// runs on a standby); `wake` wakes the readers that tail now (else the caller does, with
    /// `wake_readers`).
    pub(crate) fn publish_received(&self, addr: RedoAddr, wake: bool) {
        let mut durable = self.durable_addr.lock();
        *durable = addr;
        if wake {
            self.redo_arrived.notify_all();
        }
    }

    /// Wakes the readers that tail (more redo may be readable).
    pub(crate) fn wake_readers(&self) {
        let _durable = self.durable_addr.lock();
        self.redo_arrived.notify_all();
    }

    /// Waits up to `timeout` for the durable end to move from `seen` (readers that tail);
    /// returns at once if it has, or `stop` says so.
    pub(crate) fn wait_for_redo(
        &self,
        seen: RedoAddr,
        timeout: std::time::Duration,
        stop: impl Fn() -> bool,
    ) {
        let mut addr = self.durable_addr.lock();
        if *addr == seen && !stop() {
            #[cfg(test)]
            self.redo_waiters.fetch_add(1, Ordering::SeqCst);
            self.redo_arrived.wait_for(&mut addr, timeout);
            #[cfg(test)]
            self.redo_waiters.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Why the log writer refuses further redo, if it does.
    pub(crate) fn failure(&self) -> Option<RedoError> {
        self.failure.lock().clone().map(RedoError::WriterFailed)
    }

    /// From now on the log writer refuses further redo, for `reason`; returns false if it
    /// already did (the first reason stays).
    pub(crate) fn refuse(&self, reason: String) -> bool {
        let mut failure = self.failure.lock();
        if failure.is_some() {
            return false;
        }
        *failure = Some(reason);
        true
    }

    /// The text of why it refuses further redo, for the status.
    pub(crate) fn failure_text(&self) -> Option<String> {
        self.failure.lock().clone()
    }
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

impl CommitState {
    /// Takes the leadership, which nobody holds.
    fn lead(&mut self) {
        assert!(!self.leader, "one leader at a time");
        self.leader = true;
    }
}

#[cfg(test)]
impl CommitState {
    /// How many committers (and would-be leaders) wait.
    pub(crate) fn waiting(&self) -> usize {
        self.waiters.len()
    }
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

impl WriterState {
    pub fn new(next_scn: Scn, last_seq: LogSeq) -> WriterState {
        WriterState { current: None, next_scn, last_seq, buffer: AlignedBuf::new() }
    }
}

#[cfg(test)]
impl LogWriter {
    /// A log writer on its own, for its unit tests: redo durable up to SCN 10, at offset 4096
    /// of log 1.
    pub(crate) fn for_tests() -> LogWriter {
        LogWriter::new(
            Scn(11),
            LogSeq(1),
            RedoAddr { seq: LogSeq(1), offset: 4096 },
            Arc::new(Signal::default()),
            Arc::new(SwitchClock::new(&stats::Metrics::new())),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::waiters::WaitSlot;
    use super::*;

    fn log_writer() -> LogWriter {
        LogWriter::for_tests()
    }

    #[test]
    fn written_and_durable_ends_move_forward_together() {
        let log_writer = log_writer();
        let end = RedoAddr { seq: LogSeq(1), offset: 8192 };
        log_writer.advance_written(Some(Scn(12)), end);
        assert!(log_writer.is_written(Scn(12)));
        assert_eq!(log_writer.durable_scn(), Scn(10), "written, in flight: not durable yet");
        log_writer.publish_durable(Some(Scn(12)), end);
        assert_eq!((log_writer.durable_scn(), log_writer.durable_addr()), (Scn(12), end));
        // A switch moves both to the next log's first unit, with no record.
        let next = RedoAddr { seq: LogSeq(2), offset: 8192 };
        log_writer.advance_written(None, next);
        log_writer.publish_durable(None, next);
        assert_eq!(log_writer.written_addr(), next);
    }

    fn wait(log_writer: &LogWriter, scn: Option<Scn>, may_lead: bool) -> Arc<WaitSlot> {
        let slot = WaitSlot::for_thread();
        log_writer.commit.lock().waiters.push(Waiter { scn, may_lead, slot: slot.clone() });
        slot
    }

    #[test]
    fn a_leader_tells_the_covered_and_hands_on_to_one_with_unwritten_redo() {
        use waiters::{DONE, FAILED, LEAD, WAITING};
        let log_writer = log_writer();
        log_writer.commit.lock().lead();
        let covered = wait(&log_writer, Some(Scn(9)), true);
        let passive = wait(&log_writer, Some(Scn(12)), false);
        let next = wait(&log_writer, Some(Scn(12)), true);
        log_writer.hand_on(false, false);
        assert_eq!(covered.outcome(), DONE);
        assert_eq!(next.outcome(), LEAD, "the one who may lead leads next");
        assert_eq!(passive.outcome(), WAITING, "BATCH waits for a write someone starts");
        assert!(log_writer.commit.lock().leader, "handed on, not given up");

        // That leader's write is in flight (written, not yet durable): nobody is left to lead
        // it, the leadership is free, and the waiters wait to be published.
        let in_flight = wait(&log_writer, Some(Scn(12)), true);
        log_writer.advance_written(Some(Scn(12)), RedoAddr { seq: LogSeq(1), offset: 8192 });
        log_writer.hand_on(false, false);
        assert_eq!(in_flight.outcome(), WAITING);
        assert!(!log_writer.commit.lock().leader);

        // A writer that stopped tells everyone still waiting.
        log_writer.commit.lock().lead();
        log_writer.hand_on(true, false);
        assert_eq!((passive.outcome(), in_flight.outcome()), (FAILED, FAILED));
        assert_eq!(log_writer.commit.lock().waiting(), 0);
    }

    #[test]
    #[should_panic(expected = "only the leader ends a leadership")]
    fn only_the_leader_hands_on() {
        log_writer().hand_on(false, false);
    }

    #[test]
    #[should_panic(expected = "one leader at a time")]
    fn one_leader_at_a_time() {
        let log_writer = log_writer();
        log_writer.commit.lock().lead();
        log_writer.commit.lock().lead();
    }

    #[test]
    #[should_panic(expected = "published past the written end")]
    fn durable_never_passes_written() {
        let log_writer = log_writer();
        log_writer.publish_durable(Some(Scn(12)), RedoAddr { seq: LogSeq(1), offset: 8192 });
    }

    #[test]
    #[should_panic(expected = "the durable end moves back")]
    fn durable_never_moves_back() {
        let log_writer = log_writer();
        log_writer.publish_durable(None, RedoAddr { seq: LogSeq(1), offset: 0 });
    }

    #[test]
    #[should_panic(expected = "the written SCN moves back")]
    fn written_never_moves_back() {
        let log_writer = log_writer();
        log_writer.advance_written(Some(Scn(9)), RedoAddr { seq: LogSeq(1), offset: 8192 });
    }
}
