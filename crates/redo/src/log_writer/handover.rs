//! Writes a task leader hands over: the hand-over writer thread (`redo-lgwr-task`).
//!
//! A tokio task that leads a log write would block its runtime worker for the local write and
//! fdatasync, and with it every other session that worker serves (on a small machine, the
//! only worker). Redis blocks its event loop the same way for `appendfsync always`. When other
//! committers are waiting by the time the leader writes (it yields once first, so that the
//! sessions the runtime has ready append their redo), the task gives the leadership to this
//! thread instead and waits as a follower: the worker goes on reading, executing and appending
//! the next requests while the write and its sync are on the disk, and the write still
//! carries everyone who arrived before it. A lone committer (nobody else waiting) writes
//! itself, as before: no hand-off between threads when there is nothing to overlap.
//!
//! *Invariant*: the hand-over passes the leadership itself (`CommitState::leader` stays set):
//! from the task's request to this thread's `end_leadership`, nobody else leads, and this
//! thread never queues for the leadership (so it never waits on a leader that waits on it).

use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::leadership::LeaderPanicGuard;
use super::pipeline::Settle;
use crate::Shared;
use crate::config::WriterMode;

/// The leadership handed to the hand-over writer, not yet taken up.
#[derive(Debug, Default)]
pub(crate) struct Handover {
    state: Mutex<HandoverState>,
    ready: Condvar,
}

#[derive(Debug, Default)]
struct HandoverState {
    /// A task handed the leadership over; the thread has not taken it up yet.
    requested: bool,
    /// The thread has ended (shutdown, or a panic outside a write): nothing may be handed to
    /// it any more, or the leadership would be held with nobody to use it.
    gone: bool,
}

/// Marks the hand-over writer gone when its thread ends, returning or unwinding.
struct Gone<'a>(&'a Handover);

impl Drop for Gone<'_> {
    fn drop(&mut self) {
        self.0.state.lock().gone = true;
    }
}

impl Shared {
    /// For a task that holds the leadership: if other committers wait, hands the leadership to
    /// the hand-over writer and returns true (the task no longer leads, and waits as a
    /// follower); otherwise returns false, and the task writes itself.
    pub(crate) fn hand_over_if_others_wait(&self) -> bool {
        if self.config.writer != WriterMode::Leader
            || self.log_writer.commit.lock().waiters.is_empty()
        {
            return false;
        }
        #[cfg(test)]
        self.failpoint("hand-over: others wait");
        {
            let mut state = self.log_writer.handover.state.lock();
            // Decided under the lock the thread ends under: a request it would never see (it
            // has ended, or ends on the shutdown it finds) is not made, and this task leads
            // (and, shut down, fails) itself.
            if state.gone || self.is_shut_down() {
                return false;
            }
            state.requested = true;
        }
        self.log_writer.handover.ready.notify_one();
        self.stats.redo_writes_handed_over.incr();
        true
    }

    /// The hand-over writer thread: leads each write handed to it, then ends the leadership
    /// (which wakes the commits it covered and passes the leadership on, as any leader's end).
    pub(crate) fn handover_writer(&self) {
        let _gone = Gone(&self.log_writer.handover);
        loop {
            {
                let mut state = self.log_writer.handover.state.lock();
                while !state.requested {
                    if self.is_shut_down() {
                        // Marked gone under this lock: a task that checks after this does not
                        // hand over, and one that checked before made its request, seen above.
                        state.gone = true;
                        return;
                    }
                    self.log_writer.handover.ready.wait_for(&mut state, Duration::from_millis(200));
                }
                state.requested = false;
            }
            let mut deferred = Vec::new();
            let result = {
                let _unwinding = LeaderPanicGuard::new(self);
                let mut writer = self.log_writer.state.lock();
                // A thread may wait for a log switch: it takes it (`may_switch`).
                self.write_pending_switching(&mut writer, true, Settle::Defer, &mut deferred)
            };
            // Handed to the acknowledgement waiter before the leadership, as a task leader's.
            self.dispatch(deferred);
            self.end_leadership(result.as_ref().err());
        }
    }

    /// Wakes the hand-over writer to see the shutdown.
    pub(crate) fn wake_handover_writer(&self) {
        let _state = self.log_writer.handover.state.lock();
        self.log_writer.handover.ready.notify_all();
    }
}
