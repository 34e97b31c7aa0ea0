//! Blocking pops (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP): the pop
//! is tried as an ordinary write; while there is nothing to pop, the session waits for the
//! database's next change (or its timeout) and tries again. Waiting holds no lock and no
//! thread. A change wakes every waiting pop, and they try again in the order they blocked
//! (`BlockedQueue`), so that, as in Redis, the client that waited longest is served first.

use std::collections::BTreeMap;
use std::time::Duration;

use db::{Op, OpResult};
use resp::{BlockedReply, Frame, Session};

use crate::ServerState;
use crate::execute::{Transaction, error_frame, frame_of, transact};

/// The blocked pops in the order they blocked, each with the last change (the database's
/// change counter) it tried after: a pop tries again after a change only once every pop that
/// blocked before it has.
#[derive(Debug, Default)]
pub(crate) struct BlockedQueue {
    state: std::sync::Mutex<QueueState>,
    turn: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct QueueState {
    next_ticket: u64,
    /// Ticket → the change it last tried after.
    waiting: BTreeMap<u64, u64>,
}

impl BlockedQueue {
    fn state(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Joins the queue, having tried after change `generation`.
    fn join(&self, generation: u64) -> Ticket<'_> {
        let mut state = self.state();
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.waiting.insert(ticket, generation);
        Ticket { queue: self, ticket }
    }

    /// Waits until every pop ahead of `ticket` has tried after change `generation`.
    async fn turn(&self, ticket: u64, generation: u64) {
        loop {
            let notified = self.turn.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.state().waiting.range(..ticket).all(|(_, tried)| *tried >= generation) {
                return;
            }
            notified.await;
        }
    }

    fn tried(&self, ticket: u64, generation: u64) {
        self.state().waiting.insert(ticket, generation);
        self.turn.notify_waiters();
    }
}

/// A place in the queue, left when dropped (served, timed out, or the connection gone).
struct Ticket<'a> {
    queue: &'a BlockedQueue,
    ticket: u64,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.queue.state().waiting.remove(&self.ticket);
        self.queue.turn.notify_waiters();
    }
}

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
    let mut ticket: Option<Ticket> = None;
    loop {
        let Some(running) = state.roles.current_or_wait().await else {
            return crate::execute::role_changing();
        };
        // Subscribed before the try: a change after it is never missed.
        let mut changes = running.db.changes();
        let generation = *changes.borrow_and_update();
        if let Some(ticket) = &ticket {
            // The pops that blocked before this one try first.
            tokio::select! {
                () = state.blocked_queue.turn(ticket.ticket, generation) => {}
                () = crate::stopped(&mut shutdown) => return error_frame(&db::DbError::Shutdown),
            }
        }
        let result = match transact(&running, session, &transaction, state).await {
            Ok(Some(mut results)) => results.pop().expect("one result"),
            Ok(None) => unreachable!("a blocking pop watches nothing"),
            Err(frame) => return frame,
        };
        if let Some(ticket) = &ticket {
            state.blocked_queue.tried(ticket.ticket, generation);
        }
        let empty = match result {
            OpResult::Nil => Frame::Null,
            OpResult::NilArray => Frame::NullArray,
            // A key that became another type while the pop waited does not wake it (as in
            // Redis, which serves a blocked client only from a list or sorted set); at the
            // first try it is the error.
            OpResult::Error(error)
                if ticket.is_some()
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
        ticket.get_or_insert_with(|| state.blocked_queue.join(generation));
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
