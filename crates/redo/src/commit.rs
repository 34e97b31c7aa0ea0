//! Appending and committing: the commit options a session asks for (COMMIT_WAIT,
//! COMMIT_LOGGING), appending a transaction's redo, and waiting for it to be durable from a
//! thread or from a task.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::log_writer::{BORROW_MIN_BYTES, Durable, SwitchMark, Urgency};
use crate::{RedoError, RedoLog, Result, Role, Scn, Shared};

/// Whether a commit waits for its redo to be durable (the reference's COMMIT_WAIT).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CommitWait {
    /// Return only once the redo is durable.
    #[default]
    Wait,
    /// Return at once; the redo becomes durable soon after (and is lost in a crash before).
    NoWait,
}

/// Whether a commit asks for its redo to be written now (the reference's COMMIT_LOGGING).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CommitLogging {
    /// Start a log write now (or ride on the one in progress).
    #[default]
    Immediate,
    /// Let the log writer write it at its convenience: with the next write anyone starts, and
    /// at the latest after `batch_write_interval`.
    Batch,
}

/// A session's wait for log buffer space, timed until dropped (`RedoLog::buffer_space_wait`).
pub struct BufferSpaceWait {
    shared: Arc<Shared>,
    started: Instant,
    mark: SwitchMark,
}

impl std::fmt::Debug for BufferSpaceWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferSpaceWait").field("started", &self.started).finish()
    }
}

impl Drop for BufferSpaceWait {
    fn drop(&mut self) {
        let ended = Instant::now();
        self.shared.waits.log_buffer_space.record(ended.saturating_duration_since(self.started));
        self.shared.log_writer.switch_clock.record(&self.mark, ended);
    }
}

/// Commit options of one session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CommitOptions {
    pub wait: CommitWait,
    pub logging: CommitLogging,
}

impl RedoLog {
    /// Whether the log buffer is so full that an append may have to wait for the log writer
    /// (over three quarters used; the background writer is woken). False once no space will
    /// be released any more (the writer failed, or the engine stops): an append then returns
    /// the error at once, where a caller waiting for this to clear would wait for ever.
    pub fn log_buffer_nearly_full(&self) -> bool {
        let shared = &self.shared;
        if shared.buffer.is_closed() || shared.is_shut_down() {
            return false;
        }
        let full = shared.buffer.used_bytes() * 4 > shared.config.log_buffer_size * 3;
        if full {
            self.shared.log_writer.background.notify();
        }
        full
    }

    /// Starts timing a session's wait for room in the log buffer that no thread blocks on (a
    /// task that waits while `log_buffer_nearly_full` says so): when the returned value is
    /// dropped, the wait is counted as "log buffer space", and under the reason of any log
    /// switch it overlapped, as an append that waits in the buffer is.
    pub fn buffer_space_wait(&self) -> BufferSpaceWait {
        let started = Instant::now();
        BufferSpaceWait {
            shared: self.shared.clone(),
            started,
            mark: self.shared.log_writer.switch_clock.mark(started),
        }
    }

    /// Appends the redo of one transaction to the log buffer and returns its SCN. It is not
    /// durable until `wait_durable` (or a commit with WAIT) says so.
    pub fn append(&self, payload: &[u8]) -> Result<Scn> {
        self.check_append(payload.len())?;
        // A closed buffer (no space will come) is the writer's failure or the shutdown.
        self.shared.buffer.append(payload).map_err(|error| match error {
            RedoError::Shutdown => self.shared.failure().unwrap_or(error),
            error => error,
        })
    }

    /// Whether new redo of `len` bytes is taken now (a primary's, not failed nor shut down,
    /// archiving not failing, the record not too large).
    fn check_append(&self, len: usize) -> Result<()> {
        let shared = &self.shared;
        if shared.role == Role::Standby {
            return Err(RedoError::Standby);
        }
        if let Some(error) = shared.failure() {
            return Err(error);
        }
        if shared.is_shut_down() {
            return Err(RedoError::Shutdown);
        }
        // While archiving fails, new redo is refused at once: the sessions get a clear error
        // while the current log still has room, instead of their commits hanging later on a
        // log switch that needs the unarchived group.
        if shared.archive_failing.load(Ordering::Acquire)
            && let Some((seq, reason)) = shared.archive_errors().into_iter().next()
        {
            return Err(RedoError::ArchiverStuck { seq, reason });
        }
        let max = shared.config.max_record_len();
        if len > max {
            return Err(RedoError::RecordTooLarge { len, max });
        }
        Ok(())
    }

    /// Appends `payload` as one transaction and commits it with `options`: returns its SCN,
    /// once durable if `options.wait` is `Wait`.
    ///
    /// A large record waited for (WAIT IMMEDIATE) is written straight from `payload`, not
    /// copied into the log buffer, when this thread can lead the write at once
    /// (`log_writer::borrowed`).
    pub fn commit(&self, payload: &[u8], options: CommitOptions) -> Result<Scn> {
        if let Some(result) = self.commit_borrowed(payload, options) {
            return result;
        }
        let scn = self.append(payload)?;
        self.shared.stats.user_commits.incr();
        self.complete_commit(scn, options)?;
        Ok(scn)
    }

    /// `commit` of a borrowed record; `None` when the record is not borrowed (then nothing
    /// was done).
    fn commit_borrowed(&self, payload: &[u8], options: CommitOptions) -> Option<Result<Scn>> {
        let shared = &self.shared;
        if options != (CommitOptions { wait: CommitWait::Wait, logging: CommitLogging::Immediate })
            || payload.len() < BORROW_MIN_BYTES
        {
            return None;
        }
        if let Err(error) = self.check_append(payload.len()) {
            return Some(Err(error));
        }
        let started = Instant::now();
        let mark = shared.log_writer.switch_clock.mark(started);
        let result = shared.commit_borrowed(payload).transpose()?;
        // Counted as `append` and `complete_commit` count a commit that waits.
        shared.stats.user_commits.incr();
        shared.stats.redo_synch_writes.incr();
        shared.record_commit_wait(started, &mark);
        Some(result)
    }

    /// Finishes the commit of an appended `scn` as `options` say: waits for durability with
    /// WAIT, and asks for a write now with IMMEDIATE.
    pub fn complete_commit(&self, scn: Scn, options: CommitOptions) -> Result<()> {
        let shared = &self.shared;
        match (options.wait, options.logging) {
            (CommitWait::Wait, logging) => {
                if shared.durable_scn() >= scn {
                    return Ok(());
                }
                let started = Instant::now();
                let mark = shared.log_writer.switch_clock.mark(started);
                shared.stats.redo_synch_writes.incr();
                let urgency = if logging == CommitLogging::Immediate {
                    Urgency::Lead
                } else {
                    Urgency::Passive
                };
                let result = shared.wait_durable(scn, urgency);
                shared.record_commit_wait(started, &mark);
                result
            }
            (CommitWait::NoWait, CommitLogging::Immediate) => {
                shared.log_writer.background.notify();
                Ok(())
            }
            (CommitWait::NoWait, CommitLogging::Batch) => Ok(()),
        }
    }

    /// The async form of `complete_commit`: `None` when there is nothing to wait for
    /// (NOWAIT; an IMMEDIATE one has asked the log writer to write), else a future that
    /// resolves once `scn` is durable. The future is runtime-agnostic.
    pub fn commit_waiter(&self, scn: Scn, options: CommitOptions) -> Option<Durable> {
        let shared = &self.shared;
        match (options.wait, options.logging) {
            (CommitWait::Wait, logging) => {
                if shared.durable_scn() < scn {
                    shared.stats.redo_synch_writes.incr();
                }
                let urgency = if logging == CommitLogging::Immediate {
                    Urgency::Lead
                } else {
                    Urgency::Passive
                };
                Some(Durable::new(shared.clone(), scn, urgency))
            }
            (CommitWait::NoWait, CommitLogging::Immediate) => {
                shared.log_writer.background.notify();
                None
            }
            (CommitWait::NoWait, CommitLogging::Batch) => None,
        }
    }

    /// Counts a commit in "user commits" (for callers that append and complete separately).
    pub fn count_commit(&self) {
        self.shared.stats.user_commits.incr();
    }

    /// Waits until every record up to `scn` is durable, writing it now if needed.
    pub fn wait_durable(&self, scn: Scn) -> Result<()> {
        self.shared.wait_durable(scn, Urgency::Lead)
    }

    /// Writes everything appended so far; returns the durable SCN.
    pub fn flush(&self) -> Result<Scn> {
        let target = self.shared.buffer.next_scn().prev();
        self.shared.wait_durable(target, Urgency::Lead)?;
        Ok(self.shared.durable_scn())
    }
}
