//! The *stall*: while a failure holds a log switch up (the next group cannot be archived, or
//! the checkpoint that frees it fails: a full disk), the switch goes on waiting, but the
//! commits it holds are not left hanging. Every commit waiting for redo not yet durable gets
//! `CommitStalled` at once ("not durable yet"), and so does every new one, until the switch
//! goes through; their redo stays in the log buffer and is written, in SCN order, when it does.
//! A stall is not a writer failure: nothing is refused for good, and no SCN is skipped.
//!
//! The switch decides when a stall starts, changes its reason and ends (`switch`'s
//! `wait_reusable`, with `StallGuard` ending it however that wait ends); a committer asks
//! `CommitState::stall` under the `commit` lock before it waits (`waiters`, `durable`), and a
//! borrower does not lead while one lasts (`borrowed`).

use super::LogWriter;
use super::waiters::{DONE, STALLED};

/// Ends a stall when the wait for a reusable group ends, however it ends.
pub(super) struct StallGuard<'a>(pub(super) &'a LogWriter);

impl Drop for StallGuard<'_> {
    fn drop(&mut self) {
        if self.0.stall().is_some() {
            self.0.set_stall(None);
        }
    }
}

impl LogWriter {
    /// Why the log writer is stalled, while it is.
    pub(crate) fn stall(&self) -> Option<String> {
        self.commit.lock().stall.clone()
    }

    /// Starts (`Some`) or ends (`None`) a stall, or says its new reason: while it lasts, every
    /// commit waiting for redo not yet durable gets `CommitStalled` at once, and so does every
    /// new one. Commits the part of the batch written before the switch covered are told they
    /// are done. (Takes `commit`: never called under the group table's lock.)
    pub(crate) fn set_stall(&self, reason: Option<String>) {
        let durable = self.durable_scn();
        let mut wake = Vec::new();
        {
            let mut commit = self.commit.lock();
            match (&commit.stall, &reason) {
                (None, Some(reason)) => tracing::error!(
                    %reason,
                    "log writer stalled; commits not yet durable get an error until it goes on"
                ),
                (Some(_), None) => {
                    tracing::info!("log switch goes on; commits are confirmed again")
                }
                (Some(old), Some(new)) if old != new => {
                    tracing::warn!(reason = %new, "log writer still stalled, now because")
                }
                _ => {}
            }
            commit.stall = reason;
            if commit.stall.is_some() {
                // Commits the part of the batch written before the switch covered are done
                // (the leader would only tell them once the stall ends); the others stall.
                let mut index = 0;
                while index < commit.waiters.len() {
                    match commit.waiters[index].scn {
                        Some(scn) => {
                            let outcome = if scn <= durable { DONE } else { STALLED };
                            wake.push((commit.waiters.swap_remove(index).slot, outcome));
                        }
                        None => index += 1,
                    }
                }
            }
        }
        for (slot, outcome) in wake {
            slot.complete(outcome);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::LogWriter;
    use super::super::waiters::{WAITING, WaitSlot, Waiter};
    use super::*;
    use crate::types::Scn;

    fn log_writer() -> LogWriter {
        LogWriter::for_tests()
    }

    fn wait(log_writer: &LogWriter, scn: Option<Scn>) -> Arc<WaitSlot> {
        let slot = WaitSlot::for_thread();
        log_writer.commit.lock().waiters.push(Waiter { scn, may_lead: true, slot: slot.clone() });
        slot
    }

    #[test]
    fn a_stall_answers_every_committer_at_once_and_leaves_would_be_leaders_waiting() {
        let log_writer = log_writer();
        let durable = wait(&log_writer, Some(Scn(10)));
        let not_yet = wait(&log_writer, Some(Scn(12)));
        let leader = wait(&log_writer, None);
        log_writer.set_stall(Some("log group 2 cannot be archived: disk full".into()));
        assert_eq!(durable.outcome(), DONE, "its redo was written before the switch");
        assert_eq!(not_yet.outcome(), STALLED);
        assert_eq!(leader.outcome(), WAITING, "one who only wants to lead still waits");
        assert_eq!(log_writer.commit.lock().waiting(), 1);
        assert!(log_writer.stall().is_some_and(|reason| reason.contains("disk full")));
        // The switch goes through: the stall ends with its guard.
        drop(StallGuard(&log_writer));
        assert_eq!(log_writer.stall(), None);
    }
}
