//! Who writes: taking the leadership, leading a round, and handing it on when the round ends.
//! Only the leader touches `WriterState` and the files' redo units, and exactly one leader
//! exists at a time (`CommitState::leader`).

use std::thread;

use super::pipeline::Settle;
use super::waiters::{DONE, FAILED, LEAD, WaitSlot, Waiter};
use super::{LogWriter, WriterState};
use crate::Shared;
use crate::config::WriterMode;
use crate::error::{RedoError, Result};

/// Ends the leadership of a leader that panics (a bug, in a shipper say): the writer is
/// failed and every waiter is told so, rather than left parked for ever.
/// (Armed only if the thread was not already unwinding when the round began: a round led
/// from a destructor during another panic, a flush at shutdown say, is not the one failing.)
pub(super) struct LeaderPanicGuard<'a> {
    shared: &'a Shared,
    armed: bool,
}

impl<'a> LeaderPanicGuard<'a> {
    pub(super) fn new(shared: &'a Shared) -> LeaderPanicGuard<'a> {
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

impl Shared {
    /// Becomes the leader (waiting for the current one to hand over), then runs `work` as
    /// leader and ends the leadership (waking whoever its writes covered).
    pub(crate) fn with_leadership<T>(
        &self,
        work: impl FnOnce(&mut WriterState) -> Result<T>,
    ) -> Result<T> {
        let mut commit = self.log_writer.commit.lock();
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
            commit.lead();
            drop(commit);
        }
        let result = {
            let _unwinding = LeaderPanicGuard::new(self);
            let mut writer = self.log_writer.state.lock();
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
            let mut writer = self.log_writer.state.lock();
            let bytes = self.buffer.used_bytes() as usize;
            if settle == Settle::Defer
                && (!self.log_writer.pipeline.has_room(bytes)
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
            self.log_writer.background.notify();
        }
        !declined
    }

    pub(super) fn end_leadership(&self, error: Option<&RedoError>) {
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
            self.log_writer.refuse(format!("{error}; restart the database"));
            self.buffer.close();
        }
        let stopped = self.failure().is_some() || self.is_shut_down();
        self.log_writer.hand_on(stopped, self.config.writer == WriterMode::Dedicated);
    }
}

impl LogWriter {
    /// Ends a leadership (the caller leads): tells every waiter its write covered that it is
    /// done (all who wait, if the writer `stopped`), then hands the leadership to a waiter
    /// who may lead and whose redo is not written yet, or leaves it free. In `dedicated` mode
    /// (only the background writer leads) it wakes that writer for whoever still waits.
    pub(super) fn hand_on(&self, stopped: bool, dedicated: bool) {
        let durable = self.durable_scn();
        let mut wake = Vec::new();
        let mut commit = self.commit.lock();
        assert!(commit.leader, "only the leader ends a leadership");
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
        let written = self.written_scn().0;
        match commit
            .waiters
            .iter()
            .position(|waiter| waiter.may_lead && waiter.scn.is_none_or(|scn| scn.0 > written))
        {
            Some(next) => wake.push((commit.waiters.swap_remove(next).slot, LEAD)),
            None => {
                commit.leader = false;
                if !commit.waiters.is_empty() && dedicated {
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
}
