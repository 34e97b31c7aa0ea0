//! COMMITMODE: a connection's commit options, redoguard's own command.
//!
//! ```text
//! COMMITMODE [WAIT|NOWAIT] [IMMEDIATE|BATCH]
//! ```
//!
//! With arguments it sets either option or both, in any order, for the rest of the connection
//! and replies `+OK`; an option not given keeps its value. With none it replies the current
//! mode as a bulk string, for example `WAIT IMMEDIATE` (the default).
//!
//! - `WAIT`: the reply to a write (or to EXEC) is sent only once its redo is durable: written
//!   and synced by the log writer and, where the protection mode requires it, acknowledged by
//!   the standbys. An acknowledged write survives a crash.
//! - `NOWAIT`: the reply is sent as soon as the redo is in the log buffer, before it is
//!   durable. Faster; a crash can lose writes that were already acknowledged.
//! - `IMMEDIATE`: the commit asks the log writer to write now.
//! - `BATCH`: the commit lets the log writer write when it suits it (buffer filling up, timer,
//!   another session's IMMEDIATE commit), so more commits share one write.
//!
//! The four combinations are the commit options of the reference (WAIT/NOWAIT, IMMEDIATE/BATCH):
//! NOWAIT BATCH is the fastest and least safe, WAIT IMMEDIATE the safest.

use std::fmt;

use bytes::Bytes;

use super::{Command, CommandError, is};

/// When the reply to a commit is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CommitWait {
    /// After the redo is durable.
    #[default]
    Wait,
    /// Before: as soon as the redo is in the log buffer.
    NoWait,
}

/// When the log writer writes a commit's redo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CommitWrite {
    /// At once: the commit wakes the log writer.
    #[default]
    Immediate,
    /// At the log writer's convenience, shared with other commits.
    Batch,
}

/// A connection's commit options. Default: `WAIT IMMEDIATE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CommitMode {
    pub wait: CommitWait,
    pub write: CommitWrite,
}

impl CommitMode {
    /// Changes the options that are given, keeps the others.
    pub fn apply(&mut self, wait: Option<CommitWait>, write: Option<CommitWrite>) {
        if let Some(wait) = wait {
            self.wait = wait;
        }
        if let Some(write) = write {
            self.write = write;
        }
    }
}

impl fmt::Display for CommitMode {
    /// `WAIT IMMEDIATE`, `NOWAIT BATCH`, …: the syntax COMMITMODE accepts.
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let wait = match self.wait {
            CommitWait::Wait => "WAIT",
            CommitWait::NoWait => "NOWAIT",
        };
        let write = match self.write {
            CommitWrite::Immediate => "IMMEDIATE",
            CommitWrite::Batch => "BATCH",
        };
        write!(formatter, "{wait} {write}")
    }
}

pub(super) fn parse(args: Vec<Bytes>) -> Result<Command, CommandError> {
    if args.len() > 3 {
        return Err(CommandError::WrongArity("commitmode"));
    }
    let mut wait = None;
    let mut write = None;
    for arg in &args[1..] {
        if is(arg, "WAIT") || is(arg, "NOWAIT") {
            if wait.is_some() {
                return Err(CommandError::CommitMode(
                    "takes WAIT or NOWAIT once, not both or twice".into(),
                ));
            }
            wait = Some(if is(arg, "WAIT") { CommitWait::Wait } else { CommitWait::NoWait });
        } else if is(arg, "IMMEDIATE") || is(arg, "BATCH") {
            if write.is_some() {
                return Err(CommandError::CommitMode(
                    "takes IMMEDIATE or BATCH once, not both or twice".into(),
                ));
            }
            write =
                Some(if is(arg, "BATCH") { CommitWrite::Batch } else { CommitWrite::Immediate });
        } else {
            return Err(CommandError::CommitMode(format!(
                "option '{}' is unknown: expected WAIT, NOWAIT, IMMEDIATE or BATCH",
                String::from_utf8_lossy(arg)
            )));
        }
    }
    Ok(Command::CommitMode { wait, write })
}
