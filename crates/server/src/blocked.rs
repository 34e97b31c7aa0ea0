//! Blocking pops (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP): the pop
//! is tried as an ordinary write; while there is nothing to pop, the session waits for the
//! database's next change (or its timeout) and tries again. Waiting holds no lock and no
//! thread; a change to any key wakes every waiting pop, which tries again and waits again if
//! it still finds nothing (as Redis, a client that was not served first may find the list
//! empty again).

use std::time::Duration;

use db::{Op, OpResult};
use resp::{BlockedReply, Frame, Session};

use crate::ServerState;
use crate::execute::{Transaction, error_frame, frame_of, transact};

/// Runs a blocking pop: its reply once something was popped, or its empty reply at the timeout
/// (zero: none).
pub(crate) async fn pop(
    state: &ServerState,
    session: &Session,
    op: Op,
    timeout: Duration,
    reply: BlockedReply,
) -> Frame {
    let deadline = (!timeout.is_zero()).then(|| tokio::time::Instant::now() + timeout);
    let transaction = Transaction { ops: vec![op], exec: false, watched: false };
    let mut shutdown = state.shutdown.subscribe();
    let mut woken = false;
    loop {
        let Some(running) = state.roles.current_or_wait().await else {
            return Frame::error("TRYAGAIN the database's role is changing: retry");
        };
        // Subscribed before the try: a change after it is never missed.
        let mut changes = running.db.changes();
        let result = match transact(&running, session, &transaction, state).await {
            Ok(Some(mut results)) => results.pop().expect("one result"),
            Ok(None) => unreachable!("a blocking pop watches nothing"),
            Err(frame) => return frame,
        };
        let empty = match result {
            OpResult::Nil => Frame::Null,
            OpResult::NilArray => Frame::NullArray,
            // A key that became another type while the pop waited does not wake it (as in
            // Redis, which serves a blocked client only from a list or sorted set); at the
            // first try it is the error.
            OpResult::Error(error)
                if woken
                    && error.starts_with("WRONGTYPE")
                    && source_of_another_type(&running, &transaction.ops[0]) =>
            {
                if matches!(transaction.ops[0], Op::LMove { .. }) {
                    Frame::Null
                } else {
                    Frame::NullArray
                }
            }
            result => return shape(frame_of(result, session.protocol()), Some(reply)),
        };
        woken = true;
        // Counted as blocked while it waits (INFO's `blocked_clients`).
        let _blocked = Blocked::enter(&state.blocked);
        tokio::select! {
            changed = changes.changed() => {
                if changed.is_err() {
                    // The database closed (a role change): try on the one that follows.
                    tokio::task::yield_now().await;
                }
            }
            () = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            } => return empty,
            () = crate::stopped(&mut shutdown) => {
                return error_frame(&db::DbError::Shutdown);
            }
        }
    }
}

/// Whether a key the pop takes from holds another type (not where it pushes to: a BLMOVE
/// whose destination is of another type gets the error once its source has an element).
fn source_of_another_type(running: &crate::Running, op: &Op) -> bool {
    let (keys, kind): (Vec<&bytes::Bytes>, &str) = match op {
        Op::LMove { from, .. } => (vec![from], "list"),
        Op::LMPop { keys, .. } => (keys.iter().collect(), "list"),
        Op::ZMPop { keys, .. } => (keys.iter().collect(), "zset"),
        _ => return false,
    };
    let reads: Vec<Op> = keys.into_iter().map(|key| Op::Type { key: key.clone() }).collect();
    match running.db.read(&reads) {
        Ok(types) => types.iter().any(
            |found| matches!(found, OpResult::Status(name) if *name != "none" && *name != kind),
        ),
        Err(_) => false,
    }
}

/// One client counted as blocked while this lives.
struct Blocked<'a>(&'a std::sync::atomic::AtomicU64);

impl Blocked<'_> {
    fn enter(count: &std::sync::atomic::AtomicU64) -> Blocked<'_> {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Blocked(count)
    }
}

impl Drop for Blocked<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A pop's reply as its blocking form replies it.
pub(crate) fn shape(frame: Frame, reply: Option<BlockedReply>) -> Frame {
    match (reply, frame) {
        (Some(BlockedReply::KeyAndElement), Frame::Array(mut parts)) if parts.len() == 2 => {
            let popped = parts.pop().expect("two parts");
            let key = parts.pop().expect("two parts");
            match popped {
                Frame::Array(mut elements) if elements.len() == 1 => {
                    Frame::Array(vec![key, elements.pop().expect("one element")])
                }
                other => Frame::Array(vec![key, other]),
            }
        }
        (Some(BlockedReply::KeyMemberScore), Frame::Array(mut parts)) if parts.len() == 2 => {
            let popped = parts.pop().expect("two parts");
            let key = parts.pop().expect("two parts");
            match popped {
                Frame::Array(mut pairs) if pairs.len() == 1 => match pairs.pop().expect("one pair")
                {
                    Frame::Array(pair) => Frame::Array(std::iter::once(key).chain(pair).collect()),
                    other => Frame::Array(vec![key, other]),
                },
                other => Frame::Array(vec![key, other]),
            }
        }
        (_, frame) => frame,
    }
}
