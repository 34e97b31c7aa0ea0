//! Pipelined SYNC writes: log writes in flight to SYNC standbys, and durability published in
//! write order.
//!
//! A log write that redo transport must see acknowledged before it counts as durable (a SYNC
//! destination, a protection mode, fast-start failover's lease) need not hold up the next
//! one. The leader sends it, writes and syncs it locally, and records it here as *in flight*
//! with what transport returned to wait for; then it hands the leadership on, so that the
//! commits that arrived meanwhile are sent at once instead of after a whole round trip. The
//! wait itself is run by the *acknowledgement waiter* (a thread of the engine, `ack_waiter`),
//! or, by a lone committing thread with nothing else in flight, by that thread itself, as
//! before pipelining: a lone committer pays no hand-off. A leader that defers its waits (a
//! tokio task, which must not block; the hand-over and the background writer, so that their
//! writes pipeline) settles the write itself when nothing is in flight ahead of it and its
//! acknowledgements are already in by the end of its local write (`ShipWait::try_wait`, which
//! waits for no standby: one that answers faster than the local disk syncs, or on receipt):
//! handing an instant wait to the waiter would only add its wake-up and the committer's.
//!
//! *Architecture Invariant*: durability is published strictly in write order. An entry's SCNs
//! become durable only once its own wait succeeded *and* every entry before it was published;
//! a failed wait refuses all further redo (`refuse_further_redo`), so nothing written after it
//! is ever published. What is in flight is bounded (`IN_FLIGHT_MAX` writes and
//! `IN_FLIGHT_BYTES_MAX` bytes): a leader that finds it full waits (a thread) or leaves the
//! write to the background writer (a tokio task, which must not block its worker). A log
//! switch first waits until nothing is in flight (`drain_pipeline`), so a log is never closed
//! behind writes whose fate is open.

use std::collections::VecDeque;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use super::LogWriter;
use crate::Shared;
use crate::error::{RedoError, Result};
use crate::ship::{ShipWait, Tried};
use crate::types::{RedoAddr, Scn};

/// Most log writes in flight at once.
pub(crate) const IN_FLIGHT_MAX: usize = 64;
/// Most bytes of log writes in flight at once (one write may exceed it alone).
pub(crate) const IN_FLIGHT_BYTES_MAX: usize = 64 << 20;

/// Where the outcome of a write in flight stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Waiting,
    Done,
    Failed,
}

#[derive(Debug)]
struct Entry {
    ticket: u64,
    last_scn: Scn,
    addr: RedoAddr,
    bytes: usize,
    outcome: Outcome,
}

#[derive(Debug, Default)]
struct Flight {
    next_ticket: u64,
    entries: VecDeque<Entry>,
    bytes: usize,
}

/// A wait the leader did not run itself: for the acknowledgement waiter, in write order.
pub(crate) struct Deferred {
    ticket: u64,
    wait: Box<dyn ShipWait>,
}

/// How the leader settles a write that must be acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Waits for it here (holding the leadership): log switches, flushes, shutdown.
    Here,
    /// Leaves the wait to the acknowledgement waiter (tokio tasks, which must not block; the
    /// hand-over and the background writer, so that their writes pipeline), unless nothing is
    /// in flight ahead of it and it settles without waiting (`ShipWait::try_wait`): the
    /// acknowledgements are in already.
    Defer,
    /// A committing thread: waits here if nothing else is in flight and nobody waits to
    /// commit (the lone committer, as before pipelining), else defers.
    Adaptive,
}

/// The writes in flight, and the waits handed to the acknowledgement waiter.
#[derive(Default)]
pub(crate) struct Pipeline {
    flight: Mutex<Flight>,
    /// Signalled when an entry is published or fails (room, drains).
    changed: Condvar,
    handed: Mutex<VecDeque<Deferred>>,
    handed_ready: Condvar,
}

impl Pipeline {
    /// Wakes the acknowledgement waiter and everyone waiting on the pipeline (at shutdown).
    pub(crate) fn wake_all(&self) {
        {
            let _handed = self.handed.lock();
            self.handed_ready.notify_all();
        }
        let _flight = self.flight.lock();
        self.changed.notify_all();
    }
}

impl Pipeline {
    /// Whether nothing is in flight.
    pub(crate) fn is_empty(&self) -> bool {
        self.flight.lock().entries.is_empty()
    }

    /// Whether a write of `bytes` may go in flight now.
    pub(crate) fn has_room(&self, bytes: usize) -> bool {
        has_room(&self.flight.lock(), bytes)
    }
}

impl Shared {
    /// Waits (as leader) until a write of `bytes` may go in flight.
    pub(crate) fn make_room(&self, bytes: usize) -> Result<()> {
        let mut flight = self.log_writer.pipeline.flight.lock();
        while !has_room(&flight, bytes) {
            self.check_going()?;
            self.log_writer.pipeline.changed.wait_for(&mut flight, Duration::from_millis(100));
        }
        Ok(())
    }

    /// Settles a log write just made locally (as leader): published at once when nothing is
    /// in flight and nothing is to be waited for; otherwise recorded in flight, and its wait
    /// run as `settle` says (deferred waits go to `deferred`, for `dispatch` once the
    /// leadership is handed on).
    pub(crate) fn settle_write(
        &self,
        last_scn: Scn,
        addr: RedoAddr,
        bytes: usize,
        wait: Option<Box<dyn ShipWait>>,
        settle: Settle,
        deferred: &mut Vec<Deferred>,
    ) -> Result<()> {
        let Some(wait) = wait else {
            let mut flight = self.log_writer.pipeline.flight.lock();
            if flight.entries.is_empty() {
                self.log_writer.publish_durable(Some(last_scn), addr);
            } else {
                // Durable here, but not before what is ahead of it.
                let ticket = push(&mut flight, last_scn, addr, bytes);
                drop(flight);
                self.log_writer.complete(ticket, true);
            }
            return Ok(());
        };
        let here = match settle {
            Settle::Here => true,
            Settle::Defer => false,
            Settle::Adaptive => {
                deferred.is_empty()
                    && self.log_writer.pipeline.flight.lock().entries.is_empty()
                    && self.log_writer.commit.lock().waiters.is_empty()
            }
        };
        if here && settle == Settle::Here {
            // One wait at a time reads the acknowledgements: the ones in flight first.
            self.log_writer.drain_pipeline()?;
        }
        let (ticket, alone) = {
            let mut flight = self.log_writer.pipeline.flight.lock();
            let alone = flight.entries.is_empty();
            (push(&mut flight, last_scn, addr, bytes), alone)
        };
        if !here {
            // Nothing ahead of it (so nothing deferred either: every deferred wait is in
            // flight): settled here if its acknowledgements are in already.
            let wait = if settle == Settle::Defer && alone {
                match self.try_wait_shipped(wait) {
                    Ok(result) => {
                        self.log_writer.complete(ticket, result.is_ok());
                        result?;
                        return self.log_writer.await_published(ticket);
                    }
                    Err(wait) => wait,
                }
            } else {
                wait
            };
            deferred.push(Deferred { ticket, wait });
            return Ok(());
        }
        let result = self.wait_shipped(wait);
        self.log_writer.complete(ticket, result.is_ok());
        result?;
        self.log_writer.await_published(ticket)
    }

    /// Hands deferred waits to the acknowledgement waiter (after the leadership is passed on).
    pub(crate) fn dispatch(&self, deferred: Vec<Deferred>) {
        if deferred.is_empty() {
            return;
        }
        let mut handed = self.log_writer.pipeline.handed.lock();
        handed.extend(deferred);
        self.log_writer.pipeline.handed_ready.notify_one();
    }

    /// Runs deferred waits here, in order (a leader about to switch logs settles its own
    /// first: the switch waits for everything in flight).
    pub(crate) fn run_deferred(&self, deferred: &mut Vec<Deferred>) -> Result<()> {
        let mut failed = None;
        for Deferred { ticket, wait } in deferred.drain(..) {
            if failed.is_some() {
                self.log_writer.complete(ticket, false);
                continue;
            }
            let result = self.wait_shipped(wait);
            self.log_writer.complete(ticket, result.is_ok());
            if let Err(error) = result {
                failed = Some(error);
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// Waits for what the shipper asked for. If that fails (the protection mode cannot be
    /// met: the primary is fenced or stopping), the redo just written locally must never count
    /// as durable, nor anything after it: the writer refuses all further redo, and every
    /// commit waiting gets the error.
    pub(super) fn wait_shipped(&self, wait: Box<dyn ShipWait>) -> Result<()> {
        // A wait that panics fails like one that returns an error: the acknowledgement waiter
        // (or the leader running it) lives on, the commits behind it are told, and no further
        // redo is taken. Unwound, it would leave every pipelined commit waiting for ever.
        let waited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || wait.wait()))
            .unwrap_or_else(|_| Err(wait_panicked()));
        self.shipped_outcome(waited)
    }

    /// `wait_shipped` without waiting: the outcome if the wait settled at once, else the wait
    /// given back (`ShipWait::try_wait`).
    fn try_wait_shipped(&self, wait: Box<dyn ShipWait>) -> Tried {
        let tried = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || wait.try_wait()))
            .unwrap_or_else(|_| Ok(Err(wait_panicked())));
        tried.map(|waited| self.shipped_outcome(waited))
    }

    /// What a wait's result means for the log: a failure refuses all further redo.
    fn shipped_outcome(&self, waited: Result<()>) -> Result<()> {
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

    /// The acknowledgement waiter: runs the waits leaders deferred, in write order, until
    /// shutdown (and until the waits handed before it are run).
    pub(crate) fn ack_waiter(&self) {
        loop {
            let next = {
                let mut handed = self.log_writer.pipeline.handed.lock();
                loop {
                    if let Some(next) = handed.pop_front() {
                        break Some(next);
                    }
                    if self.is_shut_down() {
                        break None;
                    }
                    self.log_writer
                        .pipeline
                        .handed_ready
                        .wait_for(&mut handed, Duration::from_millis(200));
                }
            };
            let Some(Deferred { ticket, wait }) = next else { return };
            let ok = self.failure().is_none() && self.wait_shipped(wait).is_ok();
            self.log_writer.complete(ticket, ok);
        }
    }

    fn check_going(&self) -> Result<()> {
        if let Some(error) = self.failure() {
            return Err(error);
        }
        if self.is_shut_down() {
            return Err(RedoError::Shutdown);
        }
        Ok(())
    }
}

/// The pipeline's side of the log writer: writes leave it, in write order, as durable.
impl LogWriter {
    /// Waits until nothing is in flight: everything written is published (or the writer has
    /// failed, the error).
    pub(crate) fn drain_pipeline(&self) -> Result<()> {
        let mut flight = self.pipeline.flight.lock();
        while !flight.entries.is_empty() {
            if let Some(error) = self.failure() {
                return Err(error);
            }
            self.pipeline.changed.wait_for(&mut flight, Duration::from_millis(100));
        }
        Ok(())
    }

    /// Records the outcome of an entry, then publishes every entry at the head that is done.
    pub(super) fn complete(&self, ticket: u64, ok: bool) {
        let published = {
            let mut flight = self.pipeline.flight.lock();
            if let Some(entry) = flight.entries.iter_mut().find(|entry| entry.ticket == ticket) {
                entry.outcome = if ok { Outcome::Done } else { Outcome::Failed };
            }
            let mut last = None;
            while flight.entries.front().is_some_and(|entry| entry.outcome == Outcome::Done) {
                let entry = flight.entries.pop_front().expect("a front entry");
                flight.bytes -= entry.bytes;
                last = Some((entry.last_scn, entry.addr));
            }
            // After a failure nothing more is published: the commits behind it were told.
            let published = match last {
                Some((scn, addr)) if self.failure().is_none() => {
                    self.publish_durable(Some(scn), addr);
                    true
                }
                _ => false,
            };
            self.pipeline.changed.notify_all();
            published
        };
        if published {
            self.wake_durable_waiters();
        }
    }

    /// Waits until the entry `ticket` is published.
    pub(super) fn await_published(&self, ticket: u64) -> Result<()> {
        let mut flight = self.pipeline.flight.lock();
        while flight.entries.front().is_some_and(|entry| entry.ticket <= ticket) {
            if let Some(error) = self.failure() {
                return Err(error);
            }
            self.pipeline.changed.wait_for(&mut flight, Duration::from_millis(100));
        }
        Ok(())
    }
}

fn wait_panicked() -> RedoError {
    RedoError::WriterFailed("the wait for the standbys' acknowledgement panicked".into())
}

fn has_room(flight: &Flight, bytes: usize) -> bool {
    flight.entries.is_empty()
        || (flight.entries.len() < IN_FLIGHT_MAX && flight.bytes + bytes <= IN_FLIGHT_BYTES_MAX)
}

fn push(flight: &mut Flight, last_scn: Scn, addr: RedoAddr, bytes: usize) -> u64 {
    let ticket = flight.next_ticket;
    flight.next_ticket += 1;
    flight.bytes += bytes;
    flight.entries.push_back(Entry { ticket, last_scn, addr, bytes, outcome: Outcome::Waiting });
    ticket
}
