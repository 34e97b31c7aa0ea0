//! Runs the commands a session hands over: maps them to database operations (one
//! transaction per command, or per EXEC), waits for the commit as the session's commit mode
//! says, and maps the results back to replies.

use bytes::Bytes;
use db::{DbError, Op, OpResult, SetCondition};
use redo::{CommitLogging, CommitOptions, CommitWait};
use resp::{Command, Frame, Session};

use crate::{Running, ServerState};

/// What the connection should do after a command ran.
#[derive(Debug)]
pub enum Outcome {
    Reply(Frame),
    /// SHUTDOWN: close this connection and stop the server.
    Shutdown,
}

/// Where each command's reply comes from once the transaction ran.
enum Step {
    /// The result of operation `index` of the transaction.
    Op(usize),
    /// Computed after the transaction (reads of the whole key space, INFO).
    After(Command),
    /// Known already (PING, ECHO).
    Ready(Frame),
}

fn op_for(command: &Command) -> Option<Op> {
    Some(match command {
        Command::Get { key } => Op::Get { key: key.clone() },
        Command::MGet { keys } => Op::MGet { keys: keys.clone() },
        Command::Exists { keys } => Op::Exists { keys: keys.clone() },
        Command::Set { key, value, condition } => Op::Set {
            key: key.clone(),
            value: value.clone(),
            condition: match condition {
                resp::SetCondition::Always => SetCondition::Always,
                resp::SetCondition::IfAbsent => SetCondition::IfAbsent,
                resp::SetCondition::IfPresent => SetCondition::IfPresent,
            },
        },
        Command::MSet { pairs } => Op::MSet { pairs: pairs.clone() },
        Command::Del { keys } => Op::Del { keys: keys.clone() },
        Command::Incr { key } => Op::IncrBy { key: key.clone(), increment: 1 },
        Command::IncrBy { key, increment } => {
            Op::IncrBy { key: key.clone(), increment: *increment }
        }
        _ => return None,
    })
}

fn frame_of(result: OpResult) -> Frame {
    match result {
        OpResult::Ok => Frame::ok(),
        OpResult::Nil => Frame::Null,
        OpResult::Value(value) => Frame::Bulk(value),
        OpResult::Integer(value) => Frame::Integer(value),
        OpResult::Values(values) => Frame::Array(
            values.into_iter().map(|value| value.map_or(Frame::Null, Frame::Bulk)).collect(),
        ),
        OpResult::Error(message) => Frame::error(message),
    }
}

/// The reply for an error of the database: clear, and saying what happens next.
pub fn error_frame(error: &DbError) -> Frame {
    match error {
        DbError::WritesRefused { reason } => {
            Frame::error(format!("ERR writes are refused: {reason}"))
        }
        DbError::TooLarge { .. } => Frame::error(format!("ERR {error}")),
        // (A role change closes the database too: a client retries, and finds it in its new
        // role, or the server gone.)
        DbError::Shutdown => Frame::error(
            "TRYAGAIN the database is closing (a role change, or the server stopping): retry",
        ),
        DbError::InvalidCursor => Frame::error("ERR invalid cursor"),
        DbError::ReadOnly => Frame::error("READONLY You can't write against a read only replica."),
        other => Frame::error(format!("ERR {other}")),
    }
}

pub fn commit_options(session: &Session) -> CommitOptions {
    let mode = session.commit_mode();
    CommitOptions {
        wait: match mode.wait {
            resp::CommitWait::Wait => CommitWait::Wait,
            resp::CommitWait::NoWait => CommitWait::NoWait,
        },
        logging: match mode.write {
            resp::CommitWrite::Immediate => CommitLogging::Immediate,
            resp::CommitWrite::Batch => CommitLogging::Batch,
        },
    }
}

/// Runs `commands` as one transaction (one command, or an EXEC block) and returns the reply:
/// the command's, or an array of them for EXEC.
pub async fn run(
    state: &ServerState,
    session: &Session,
    commands: Vec<Command>,
    transaction: bool,
) -> Outcome {
    let mut ops = Vec::new();
    let mut steps = Vec::with_capacity(commands.len());
    for command in commands {
        if let Command::Shutdown { .. } = command {
            return Outcome::Shutdown;
        }
        match op_for(&command) {
            Some(op) => {
                steps.push(Step::Op(ops.len()));
                ops.push(op);
            }
            None => match command.local_reply() {
                Some(frame) => steps.push(Step::Ready(frame)),
                None => steps.push(Step::After(command)),
            },
        }
    }
    state.commands_processed.add(steps.len() as u64);
    let Some(running) = state.roles.current_or_wait().await else {
        return Outcome::Reply(Frame::error("TRYAGAIN the database's role is changing: retry"));
    };
    let mut results: Vec<Option<OpResult>> = Vec::new();
    if !transaction && !ops.iter().any(Op::is_write) {
        // A lone read needs no transaction (and so no write lock).
        match read(&running, &ops) {
            Ok(read) => results = read.into_iter().map(Some).collect(),
            Err(error) => return Outcome::Reply(error_frame(&error)),
        }
    } else if !ops.is_empty() {
        // Writes pass the gate (a standby, a fenced primary, a switchover, a restarted
        // primary not yet confirmed), and count as writers until their commit is done.
        let _writer = if ops.iter().any(Op::is_write) {
            match state.roles.enter_write().await {
                Ok(writer) => Some(writer),
                Err(refusal) => return Outcome::Reply(refusal),
            }
        } else {
            None
        };
        let db = running.db.clone();
        if _writer.is_some() {
            db.room_for_writes().await;
        }
        let executed = match db.execute(&ops) {
            Ok(executed) => executed,
            // The role changed between the gate and the transaction: name the primary.
            Err(DbError::ReadOnly) => return Outcome::Reply(state.roles.read_only_refusal()),
            Err(error) => return Outcome::Reply(error_frame(&error)),
        };
        if let Some(scn) = executed.scn
            && let Err(error) = db.commit(scn, commit_options(session)).await
        {
            if let DbError::Redo(stalled @ redo::RedoError::CommitStalled { .. }) = &error {
                // Says itself what became of the change (kept, written once space returns).
                return Outcome::Reply(Frame::error(format!("ERR {stalled}")));
            }
            return Outcome::Reply(Frame::error(format!(
                "ERR commit of SCN {scn} not confirmed: {error} (the change may or may not be durable)"
            )));
        }
        results = executed.results.into_iter().map(Some).collect();
    }
    let mut frames = Vec::with_capacity(steps.len());
    for step in steps {
        frames.push(match step {
            Step::Op(index) => frame_of(results[index].take().expect("one result per operation")),
            Step::Ready(frame) => frame,
            Step::After(command) => after(state, &running, command),
        });
    }
    if transaction {
        Outcome::Reply(Frame::Array(frames))
    } else {
        Outcome::Reply(frames.pop().unwrap_or(Frame::Null))
    }
}

fn read(running: &Running, ops: &[Op]) -> Result<Vec<OpResult>, DbError> {
    let db = &running.db;
    ops.iter()
        .map(|op| {
            Ok(match op {
                Op::Get { key } => db.get(key)?.map_or(OpResult::Nil, OpResult::Value),
                Op::MGet { keys } => {
                    OpResult::Values(keys.iter().map(|key| db.get(key)).collect::<Result<_, _>>()?)
                }
                Op::Exists { keys } => {
                    let mut count = 0;
                    for key in keys {
                        count += i64::from(db.get(key)?.is_some());
                    }
                    OpResult::Integer(count)
                }
                write => unreachable!("{write:?} is not a read"),
            })
        })
        .collect()
}

/// Commands that read the whole key space or the server.
fn after(state: &ServerState, running: &Running, command: Command) -> Frame {
    match command {
        Command::DbSize => match running.db.dbsize() {
            Ok(keys) => Frame::Integer(keys as i64),
            Err(error) => error_frame(&error),
        },
        Command::Keys { pattern } => {
            match running.db.keys(&|key| resp::glob::matches(&pattern, key)) {
                Ok(keys) => Frame::Array(keys.into_iter().map(Frame::Bulk).collect()),
                Err(error) => error_frame(&error),
            }
        }
        Command::Scan { cursor, pattern, count } => {
            let count = count.unwrap_or(10).clamp(1, 100_000) as usize;
            let matches = |key: &[u8]| {
                pattern.as_ref().is_none_or(|pattern| resp::glob::matches(pattern, key))
            };
            match running.db.scan(cursor, count, &matches) {
                Ok((next, keys)) => Frame::Array(vec![
                    Frame::Bulk(Bytes::from(next.to_string())),
                    Frame::Array(keys.into_iter().map(Frame::Bulk).collect()),
                ]),
                Err(error) => error_frame(&error),
            }
        }
        Command::Role => crate::info::role_reply(state, running),
        Command::Info { sections } => {
            Frame::Bulk(Bytes::from(crate::info::render(state, running, &sections)))
        }
        other => Frame::error(format!("ERR '{}' cannot run here", other.name())),
    }
}
