//! Waiting for durability from a tokio task: the `Durable` future.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use super::pipeline::Settle;
use super::waiters::{FAILED, LEAD, STALLED, WAITING, WaitSlot, Waiter, Wake};
use super::{SwitchMark, Urgency};
use crate::Shared;
use crate::config::WriterMode;
use crate::error::{RedoError, Result};
use crate::types::Scn;

impl Shared {
    /// Registers a task waiting for `scn` (see `Durable`).
    fn register_task(&self, scn: Scn, urgency: Urgency, waker: &Waker) -> Result<Registered> {
        let may_lead = urgency == Urgency::Lead && self.config.writer == WriterMode::Leader;
        if self.durable_scn() >= scn {
            return Ok(Registered::Durable);
        }
        let mut commit = self.log_writer.commit.lock();
        if let Some(error) = self.failure() {
            return Err(error);
        }
        if self.durable_scn() >= scn {
            return Ok(Registered::Durable);
        }
        if self.is_shut_down() {
            return Err(RedoError::Shutdown);
        }
        if let Some(reason) = &commit.stall {
            return Err(RedoError::CommitStalled { scn, reason: reason.clone() });
        }
        if may_lead && !commit.leader && !self.log_writer.is_written(scn) {
            commit.lead();
            return Ok(Registered::Leader);
        }
        let slot = WaitSlot::for_task(waker);
        commit.waiters.push(Waiter { scn: Some(scn), may_lead, slot: slot.clone() });
        drop(commit);
        if urgency == Urgency::Lead && !may_lead {
            self.log_writer.background.notify();
        }
        Ok(Registered::Waiting(slot))
    }
}

/// What registering a task found.
enum Registered {
    Durable,
    /// Queued as a waiter.
    Waiting(Arc<WaitSlot>),
    /// The task holds the leadership and must write.
    Leader,
}

/// A future that resolves once an SCN is durable: the async form of `wait_durable`, for
/// sessions served by tokio tasks.
///
/// A task that becomes the leader does not write at once: it yields once, so that the other
/// sessions the runtime has ready get to append their redo first and ride on the same write
/// (as an event loop gathers every ready client before its one fsync). A lone committer pays a
/// single extra poll for it, no cross-thread wake-up. A task handed the leadership writes when
/// it is next polled. Dropping the future gives up the wait, and passes on the leadership if
/// it held it.
pub struct Durable {
    pub(crate) shared: Arc<Shared>,
    pub(crate) scn: Scn,
    pub(crate) urgency: Urgency,
    slot: Option<Arc<WaitSlot>>,
    /// Holds the leadership, to write when next polled.
    leading: bool,
    /// When the wait began, and where the switch clock stood then.
    started: Option<(Instant, SwitchMark)>,
}

impl Durable {
    pub(crate) fn new(shared: Arc<Shared>, scn: Scn, urgency: Urgency) -> Durable {
        Durable { shared, scn, urgency, slot: None, leading: false, started: None }
    }
}

impl std::fmt::Debug for Durable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Durable").field("scn", &self.scn).finish()
    }
}

impl Future for Durable {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<Result<()>> {
        let this = &mut *self;
        if this.started.is_none() {
            if this.shared.durable_scn() >= this.scn {
                return Poll::Ready(Ok(()));
            }
            let now = Instant::now();
            this.started = Some((now, this.shared.log_writer.switch_clock.mark(now)));
        }
        loop {
            if this.leading {
                this.leading = false;
                if this.shared.hand_over_if_others_wait() {
                    // The hand-over writer writes for everyone waiting, this task included;
                    // the worker goes on serving meanwhile.
                } else if !this.shared.lead_unless_switching(Settle::Defer) {
                    // That needs a log switch, which may wait long, or room among the writes
                    // in flight to SYNC standbys: the background writer (a thread of its own)
                    // makes it; this task waits as a follower.
                    this.urgency = Urgency::Passive;
                }
            }
            if let Some(slot) = &this.slot {
                match slot.outcome() {
                    WAITING => {
                        if let Wake::Task(waker) = &slot.wake {
                            let mut registered = waker.lock();
                            // Re-check under the lock: `complete` stores the outcome before it
                            // takes the waker.
                            if slot.outcome() == WAITING {
                                if !registered
                                    .as_ref()
                                    .is_some_and(|waker| waker.will_wake(context.waker()))
                                {
                                    *registered = Some(context.waker().clone());
                                }
                                return Poll::Pending;
                            }
                        }
                        continue;
                    }
                    LEAD => {
                        this.slot = None;
                        this.leading = true;
                        continue;
                    }
                    FAILED => {
                        this.slot = None;
                        return Poll::Ready(Err(this
                            .shared
                            .failure()
                            .unwrap_or(RedoError::Shutdown)));
                    }
                    // Registers again: durable by now, still stalled (the error), or no
                    // longer.
                    STALLED => this.slot = None,
                    _ => this.slot = None,
                }
            }
            match this.shared.register_task(this.scn, this.urgency, context.waker()) {
                Err(error) => return Poll::Ready(Err(error)),
                Ok(Registered::Durable) => {
                    if let Some((started, mark)) = this.started.take() {
                        this.shared.record_commit_wait(started, &mark);
                    }
                    return Poll::Ready(Ok(()));
                }
                Ok(Registered::Waiting(slot)) => this.slot = Some(slot),
                Ok(Registered::Leader) => {
                    // Let the other ready sessions append first; write on the next poll.
                    this.leading = true;
                    context.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
        }
    }
}

impl Drop for Durable {
    fn drop(&mut self) {
        if self.leading {
            // We hold the leadership and will never use it: pass it on.
            self.shared.end_leadership(None);
            return;
        }
        let Some(slot) = self.slot.take() else { return };
        let mut commit = self.shared.log_writer.commit.lock();
        if let Some(index) =
            commit.waiters.iter().position(|waiter| Arc::ptr_eq(&waiter.slot, &slot))
        {
            commit.waiters.swap_remove(index);
            return;
        }
        drop(commit);
        // Taken off the list: `end_leadership` is completing the slot, after it released the
        // lock. Wait for the outcome (a few instructions away) so that a leadership handed
        // to this future is passed on, not lost with it.
        let mut outcome = slot.outcome();
        while outcome == WAITING {
            std::thread::yield_now();
            outcome = slot.outcome();
        }
        if outcome == LEAD {
            self.shared.end_leadership(None);
        }
    }
}
