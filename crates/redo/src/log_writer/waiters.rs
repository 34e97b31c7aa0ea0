//! How committers wait for durability: each waiter waits on a `WaitSlot` until it is completed
//! with an outcome (done, lead, failed, stalled): its redo is published, the leadership is
//! handed to it, or the writer refuses further redo. `durable` is the same wait for a task.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::Waker;
use std::thread::{self, Thread};

use std::time::Instant;

use super::pipeline::Settle;
use super::{LogWriter, SwitchMark};
use crate::Shared;
use crate::config::WriterMode;
use crate::error::{RedoError, Result};
use crate::types::Scn;

/// How a committer waiting for durability gets its redo written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Urgency {
    /// IMMEDIATE: write it now (lead, or wake the dedicated writer).
    Lead,
    /// BATCH: wait for the next write that someone else starts, or the background writer's.
    Passive,
}

pub(super) const WAITING: u8 = 0;
pub(super) const DONE: u8 = 1;
pub(super) const LEAD: u8 = 2;
pub(super) const FAILED: u8 = 3;
/// The writer is stuck on a log switch that a failure blocks (a full disk): the commit is not
/// durable yet, and its session is told so rather than left waiting (see `stall`).
pub(super) const STALLED: u8 = 4;

/// How a waiter is woken: a parked thread, or an async task.
#[derive(Debug)]
pub(super) enum Wake {
    Thread(Thread),
    Task(parking_lot::Mutex<Option<Waker>>),
}

/// Where a waiter learns its outcome.
#[derive(Debug)]
pub(super) struct WaitSlot {
    outcome: AtomicU8,
    pub(super) wake: Wake,
}

impl WaitSlot {
    pub(super) fn for_thread() -> Arc<WaitSlot> {
        Arc::new(WaitSlot {
            outcome: AtomicU8::new(WAITING),
            wake: Wake::Thread(thread::current()),
        })
    }

    pub(super) fn for_task(waker: &Waker) -> Arc<WaitSlot> {
        Arc::new(WaitSlot {
            outcome: AtomicU8::new(WAITING),
            wake: Wake::Task(parking_lot::Mutex::new(Some(waker.clone()))),
        })
    }

    pub(super) fn outcome(&self) -> u8 {
        self.outcome.load(Ordering::Acquire)
    }

    pub(super) fn park(&self) -> u8 {
        loop {
            let outcome = self.outcome();
            if outcome != WAITING {
                return outcome;
            }
            thread::park();
        }
    }

    pub(super) fn complete(&self, outcome: u8) {
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

#[derive(Debug)]
pub(super) struct Waiter {
    /// The SCN that must be durable; `None` for one who only wants to lead.
    pub(super) scn: Option<Scn>,
    pub(super) may_lead: bool,
    pub(super) slot: Arc<WaitSlot>,
}

impl Shared {
    /// Records a committer's wait for durability that began at `started` (the clock at
    /// `mark`): "log file sync", and its share of any log switch it overlapped.
    pub(crate) fn record_commit_wait(&self, started: Instant, mark: &SwitchMark) {
        let ended = Instant::now();
        self.waits.log_file_sync.record(ended.saturating_duration_since(started));
        self.log_writer.switch_clock.record(mark, ended);
    }

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
            let mut commit = self.log_writer.commit.lock();
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
            if may_lead && !commit.leader && !self.log_writer.is_written(scn) {
                commit.lead();
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
                self.log_writer.background.notify();
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

    /// From now on no redo is written or made durable, and every commit waiting (and every
    /// later one) gets `WriterFailed(reason)`; the first reason stays. Used when the database
    /// may not acknowledge anything more (fenced), or a ship wait failed.
    pub(crate) fn refuse_further_redo(&self, reason: &str) {
        if !self.log_writer.refuse(reason.to_string()) {
            return;
        }
        self.buffer.close();
        tracing::warn!(reason, "the log writer refuses further redo");
        let durable = self.durable_scn();
        self.log_writer.complete_waiters(FAILED, |scn| scn > durable);
    }
}

impl LogWriter {
    /// Wakes every waiter whose SCN is durable now (after a write in flight was published).
    pub(crate) fn wake_durable_waiters(&self) {
        let durable = self.durable_scn();
        self.complete_waiters(DONE, |scn| scn <= durable);
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
}
