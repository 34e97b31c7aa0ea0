//! Runs the commands a session hands over: maps them to database operations (one
//! transaction per command, or per EXEC), waits for the commit as the session's commit mode
//! says, and maps the results back to replies. Blocking pops wait here (`blocked`).

use bytes::Bytes;
use db::{DbError, KeyType, Op, OpResult};
use redo::{CommitLogging, CommitOptions, CommitWait};
use resp::{Command, Frame, ProtocolVersion, Session};

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
    /// The result of operation `index` of the transaction, shaped for a blocking pop if it was
    /// one (run inside MULTI, it does not block).
    Op(usize, Option<resp::BlockedReply>),
    /// Computed after the transaction (reads of the whole key space, INFO).
    After(Command),
    /// Known already (PING, ECHO).
    Ready(Frame),
}

/// The reply of an operation, in the connection's protocol.
pub fn frame_of(result: OpResult, protocol: ProtocolVersion) -> Frame {
    let frame = |result| frame_of(result, protocol);
    match result {
        OpResult::Ok => Frame::ok(),
        OpResult::Status(text) => Frame::simple(text),
        OpResult::Nil => Frame::Null,
        OpResult::NilArray => Frame::NullArray,
        OpResult::Value(value) => Frame::Bulk(value),
        OpResult::Integer(value) => Frame::Integer(value),
        OpResult::Score(score) => match protocol {
            ProtocolVersion::Resp2 => {
                Frame::Bulk(Bytes::from(keyspace::number::format_score(score)))
            }
            ProtocolVersion::Resp3 => Frame::Double(score),
        },
        OpResult::Values(values) => Frame::Array(
            values.into_iter().map(|value| value.map_or(Frame::Null, Frame::Bulk)).collect(),
        ),
        OpResult::Array(items) => Frame::Array(items.into_iter().map(frame).collect()),
        OpResult::Set(items) => Frame::Set(items.into_iter().map(frame).collect()),
        OpResult::Map(pairs) => {
            Frame::Map(pairs.into_iter().map(|(key, value)| (frame(key), frame(value))).collect())
        }
        OpResult::Pairs(pairs) => match protocol {
            ProtocolVersion::Resp2 => Frame::Array(
                pairs
                    .into_iter()
                    .flat_map(|(first, second)| [frame(first), frame(second)])
                    .collect(),
            ),
            ProtocolVersion::Resp3 => Frame::Array(
                pairs
                    .into_iter()
                    .map(|(first, second)| Frame::Array(vec![frame(first), frame(second)]))
                    .collect(),
            ),
        },
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

/// A transaction to run: its operations, and whether it is an EXEC after WATCH.
pub(crate) struct Transaction {
    pub(crate) ops: Vec<Op>,
    /// EXEC (an array of replies), not one command.
    pub(crate) exec: bool,
    /// EXEC after WATCH: runs only if no watched key changed.
    pub(crate) watched: bool,
}

/// A far sync holds no data: whatever reads or writes the key space is refused, by name.
fn far_sync_refusal(state: &ServerState) -> Option<Frame> {
    state.roles.current().and_then(|running| state.roles.far_sync_refusal(&running))
}

/// The reply while no database is open (a role change between closing and opening it).
pub(crate) fn role_changing() -> Frame {
    Frame::error("TRYAGAIN the database's role is changing: retry")
}

/// Runs one command outside MULTI: as `run` does, with nearly every request (one operation of
/// the key space) taken straight to its transaction and its reply, without the vectors of
/// commands, steps and frames an EXEC needs (four allocations, a tenth of the instructions a
/// GET costs in the server).
pub async fn run_one(state: &ServerState, session: &mut Session, command: Command) -> Outcome {
    let Command::Data { op, .. } = command else {
        return run(state, session, vec![command], false).await;
    };
    state.commands_processed.add(1);
    if let Some(refusal) = far_sync_refusal(state) {
        return Outcome::Reply(refusal);
    }
    let Some(running) = state.roles.current_or_wait().await else {
        return Outcome::Reply(role_changing());
    };
    let transaction = Transaction { ops: vec![op], exec: false, watched: false };
    Outcome::Reply(match transact(&running, session, &transaction, state).await {
        Ok(Some(mut results)) => {
            results.pop().map_or(Frame::Null, |result| frame_of(result, session.protocol()))
        }
        // Not watched: never (a watched key changing ends only an EXEC).
        Ok(None) => Frame::NullArray,
        Err(frame) => frame,
    })
}

/// Runs `commands` as one transaction (one command, or an EXEC block) and returns the reply:
/// the command's, or an array of them for EXEC (the null array if a watched key changed).
pub async fn run(
    state: &ServerState,
    session: &mut Session,
    commands: Vec<Command>,
    exec: bool,
) -> Outcome {
    if commands.iter().any(touches_key_space)
        && let Some(refusal) = far_sync_refusal(state)
    {
        state.commands_processed.add(commands.len() as u64);
        return Outcome::Reply(refusal);
    }
    let watched = exec && session.take_watching();
    if !exec && let [Command::Block { .. }] = commands.as_slice() {
        let Some(Command::Block { op, timeout, reply, .. }) = commands.into_iter().next() else {
            unreachable!("one blocking pop")
        };
        state.commands_processed.add(1);
        return Outcome::Reply(crate::blocked::pop(state, session, op, timeout, reply).await);
    }
    if !exec && let [Command::Watch { keys }] = commands.as_slice() {
        state.commands_processed.add(1);
        return Outcome::Reply(watch(state, session, keys).await);
    }
    let mut ops = Vec::new();
    let mut steps = Vec::with_capacity(commands.len());
    for command in commands {
        match command {
            Command::Shutdown { .. } => return Outcome::Shutdown,
            Command::Data { op, .. } => {
                steps.push(Step::Op(ops.len(), None));
                ops.push(op);
            }
            Command::Block { op, reply, .. } => {
                steps.push(Step::Op(ops.len(), Some(reply)));
                ops.push(op);
            }
            // Queued in MULTI: EXEC ends the watches anyway.
            Command::Unwatch => steps.push(Step::Ready(Frame::ok())),
            command => match command.local_reply() {
                Some(frame) => steps.push(Step::Ready(frame)),
                None => steps.push(Step::After(command)),
            },
        }
    }
    state.commands_processed.add(steps.len() as u64);
    let Some(running) = state.roles.current_or_wait().await else {
        return Outcome::Reply(role_changing());
    };
    let transaction = Transaction { ops, exec, watched };
    let results = match transact(&running, session, &transaction, state).await {
        Ok(Some(results)) => results,
        Ok(None) => {
            running.db.unwatch(session.id());
            return Outcome::Reply(Frame::NullArray);
        }
        Err(frame) => {
            if exec {
                running.db.unwatch(session.id());
            }
            return Outcome::Reply(frame);
        }
    };
    if exec {
        running.db.unwatch(session.id());
    }
    let mut results: Vec<Option<OpResult>> = results.into_iter().map(Some).collect();
    let protocol = session.protocol();
    let mut frames = Vec::with_capacity(steps.len());
    for step in steps {
        frames.push(match step {
            Step::Op(index, shape) => {
                let result = results[index].take().expect("one result per operation");
                crate::blocked::shape(frame_of(result, protocol), shape)
            }
            Step::Ready(frame) => frame,
            Step::After(command) => after(state, &running, command),
        });
    }
    if exec {
        Outcome::Reply(Frame::Array(frames))
    } else {
        Outcome::Reply(frames.pop().unwrap_or(Frame::Null))
    }
}

/// Whether `command` reads or writes the key space (what a far sync, holding none, refuses);
/// the others (PING, INFO, ROLE, CONFIG, CLIENT, …) are answered by any member.
fn touches_key_space(command: &Command) -> bool {
    matches!(
        command,
        Command::Data { .. }
            | Command::Block { .. }
            | Command::Watch { .. }
            | Command::DbSize
            | Command::Keys { .. }
            | Command::Scan { .. }
            | Command::Save
    )
}

/// Runs a transaction's operations and completes its commit: the results, `None` if a watched
/// key changed (nothing ran), or the error reply.
pub(crate) async fn transact(
    running: &Running,
    session: &Session,
    transaction: &Transaction,
    state: &ServerState,
) -> Result<Option<Vec<OpResult>>, Frame> {
    let ops = &transaction.ops;
    let writes = ops.iter().any(Op::is_write);
    if !transaction.exec && !writes {
        // A lone read needs no transaction (and so no write lock).
        return running.db.read(ops).map(Some).map_err(|error| error_frame(&error));
    }
    if ops.is_empty() && !transaction.watched {
        return Ok(Some(Vec::new()));
    }
    // Writes pass the gate (a standby, a fenced primary, a switchover, a restarted primary not
    // yet confirmed), and count as writers until their commit is done.
    let _writer = if writes { Some(state.roles.enter_write().await?) } else { None };
    // A NOWAIT commit is answered before its redo is durable anywhere: under fast-start
    // failover, only while this primary holds its observer's lease, which ends before any
    // observer may fail over (docs/resp.md says what NOWAIT promises).
    if writes
        && session.commit_mode().wait == resp::CommitWait::NoWait
        && let Some(fast_start) = &running.fast_start
        && !fast_start.may_reply_before_durable()
    {
        return Err(Frame::error(
            "TRYAGAIN this primary holds no fast-start failover lease now, so a COMMITMODE NOWAIT write is refused (nothing was changed): retry, or use COMMITMODE WAIT",
        ));
    }
    let db = running.db.clone();
    if writes {
        db.room_for_writes().await;
    }
    let executed =
        if transaction.watched { db.execute_watched(ops, session.id()) } else { db.execute(ops) };
    let executed = executed.map_err(|error| match error {
        // The role changed between the gate and the transaction: name the primary.
        DbError::ReadOnly => state.roles.read_only_refusal(),
        error => error_frame(&error),
    })?;
    if executed.watch_failed {
        return Ok(None);
    }
    if let Some(scn) = executed.scn {
        commit(&db, scn, commit_options(session)).await?;
    }
    Ok(Some(executed.results))
}

/// Completes the commit of `scn`; the error reply if it could not be confirmed.
pub(crate) async fn commit(
    db: &db::Database,
    scn: redo::Scn,
    options: CommitOptions,
) -> Result<(), Frame> {
    match db.commit(scn, options).await {
        Ok(()) => Ok(()),
        // Says itself what became of the change (kept, written once space returns).
        Err(DbError::Redo(stalled @ redo::RedoError::CommitStalled { .. })) => {
            Err(Frame::error(format!("ERR {stalled}")))
        }
        Err(error) => Err(Frame::error(format!(
            "ERR commit of SCN {scn} not confirmed: {error} (the change may or may not be durable)"
        ))),
    }
}

/// WATCH: the keys, in the database of the moment (a role change ends every watch).
async fn watch(state: &ServerState, session: &Session, keys: &[Bytes]) -> Frame {
    let Some(running) = state.roles.current_or_wait().await else {
        return role_changing();
    };
    match running.db.watch(session.id(), keys) {
        Ok(Ok(())) => Frame::ok(),
        Ok(Err(max)) => Frame::error(format!("ERR a connection watches at most {max} keys")),
        Err(error) => error_frame(&error),
    }
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
        Command::Scan { cursor, pattern, count, kind } => {
            let count = count.unwrap_or(10).clamp(1, 100_000) as usize;
            let matches = |key: &[u8]| {
                pattern.as_ref().is_none_or(|pattern| resp::glob::matches(pattern, key))
            };
            // A type no key can have: nothing matches (as in Redis).
            let unknown = kind.as_ref().is_some_and(|kind| KeyType::from_name(kind).is_none());
            let kind = kind.as_deref().and_then(KeyType::from_name);
            match running.db.scan(cursor, count, &|key| !unknown && matches(key), kind) {
                Ok((next, keys)) => Frame::Array(vec![
                    Frame::Bulk(Bytes::from(next.to_string())),
                    Frame::Array(keys.into_iter().map(Frame::Bulk).collect()),
                ]),
                Err(error) => error_frame(&error),
            }
        }
        Command::Role => crate::info::role_reply(state, running),
        Command::ConfigSet { pairs } => state.facts.config_set(&pairs),
        Command::Time => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            Frame::Array(vec![
                Frame::Bulk(Bytes::from(now.as_secs().to_string())),
                Frame::Bulk(Bytes::from(now.subsec_micros().to_string())),
            ])
        }
        // SAVE is a checkpoint: the data files made durable up to the last commit.
        Command::Save => match running.db.checkpoint() {
            Ok(_) => Frame::ok(),
            Err(error) => error_frame(&error),
        },
        Command::Info { sections } => {
            Frame::Bulk(Bytes::from(crate::info::render(state, running, &sections)))
        }
        other => Frame::error(format!("ERR '{}' cannot run here", other.name())),
    }
}
