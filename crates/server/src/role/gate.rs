//! The write gate: whether this database takes a write now, and if not, what the client is
//! told. Every write command passes it before its transaction runs (reads never do).
//!
//! - `Open`: a primary taking writes.
//! - `Unconfirmed`: a primary that some standby followed, restarted: a failover may have
//!   happened while it was down, so it takes no write until every enabled destination has
//!   accepted it as primary in its incarnation (each a standby's welcome; `confirmation`).
//!   Writes wait for that briefly, then get `-TRYAGAIN`.
//! - `Quiesced`: a switchover is moving the primary role away; writes wait, and get
//!   `-READONLY` naming the new primary once it has moved (or go on if it is aborted).
//! - `Changing`: the role is being changed; writes wait, briefly.
//! - `Isolated`: a primary under fast-start failover that hears from neither its SYNC target
//!   nor the observer; writes wait, then `-TRYAGAIN` (commits already in flight wait in the
//!   transport, see `transport::fast_start`).
//! - `Fenced`: another member is primary in a newer incarnation: `-READONLY` naming it.
//! - `Standby`: `-READONLY` naming the primary.
//!
//! The gate also counts the writers that passed it and have not finished their commit, so
//! that a switchover knows when every acknowledged commit is in the redo it ships.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use resp::Frame;
use tokio::sync::{Notify, watch};

/// How long a write waits at a closed gate that may open again.
pub const WRITE_WAIT: Duration = Duration::from_secs(5);

pub use admin::roles::GateState;

/// What a write is told at a closed gate, as a reply.
pub trait Refusal {
    fn refusal(&self) -> Frame;
}

impl Refusal for GateState {
    fn refusal(&self) -> Frame {
        Frame::error(self.refusal_text())
    }
}

/// The gate.
pub struct Gate {
    state: watch::Sender<GateState>,
    writers: AtomicU64,
    idle: Notify,
    wait: Duration,
}

/// A writer past the gate; it counts until dropped (after its commit).
pub struct Writer<'a>(&'a Gate);

impl Drop for Writer<'_> {
    fn drop(&mut self) {
        if self.0.writers.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Default for Gate {
    fn default() -> Gate {
        Gate::new(GateState::Changing { reason: "the database is opening".into() })
    }
}

impl Gate {
    pub fn new(state: GateState) -> Gate {
        Gate {
            state: watch::Sender::new(state),
            writers: AtomicU64::new(0),
            idle: Notify::new(),
            wait: WRITE_WAIT,
        }
    }

    /// A gate whose writers wait `wait` at most.
    pub fn with_wait(state: GateState, wait: Duration) -> Gate {
        Gate { wait, ..Gate::new(state) }
    }

    pub fn state(&self) -> GateState {
        self.state.borrow().clone()
    }

    /// Waits up to `limit` while `waiting` holds of the state; returns the state then.
    pub async fn wait_while(
        &self,
        waiting: impl Fn(&GateState) -> bool,
        limit: Duration,
    ) -> GateState {
        let mut receiver = self.state.subscribe();
        let _ = tokio::time::timeout(limit, receiver.wait_for(|state| !waiting(state))).await;
        self.state()
    }

    pub fn set(&self, state: GateState) {
        self.state.send_if_modified(|current| {
            if *current == state {
                return false;
            }
            tracing::info!(from = ?current, to = ?state, "write gate");
            *current = state;
            true
        });
    }

    /// Sets the state only if the current one is `from` (a confirmation that arrives after a
    /// fence must not reopen the gate).
    pub fn replace(&self, from: impl Fn(&GateState) -> bool, state: GateState) -> bool {
        let mut replaced = false;
        self.state.send_if_modified(|current| {
            if from(current) && *current != state {
                tracing::info!(from = ?current, to = ?state, "write gate");
                *current = state.clone();
                replaced = true;
            }
            replaced
        });
        replaced
    }

    /// Lets a writer through (waiting up to its wait, 5 s, at a gate that may reopen), or says
    /// why not (`GateState::refusal` is what to tell the client).
    pub async fn enter(&self) -> Result<Writer<'_>, GateState> {
        let mut receiver = self.state.subscribe();
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            {
                let state = receiver.borrow_and_update();
                if *state == GateState::Open {
                    self.writers.fetch_add(1, Ordering::AcqRel);
                    // Closed between the check and the count? Then step back and look again:
                    // a switchover waits for the count after closing the gate.
                    if *self.state.borrow() == GateState::Open {
                        return Ok(Writer(self));
                    }
                    drop(Writer(self));
                    continue;
                }
                if !state.waits() {
                    return Err(state.clone());
                }
            }
            match tokio::time::timeout_at(deadline, receiver.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Err(receiver.borrow().clone()),
            }
        }
    }

    /// Waits until no writer is past the gate (after closing it), up to `timeout`.
    pub async fn drained(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let idle = self.idle.notified();
            if self.writers.load(Ordering::Acquire) == 0 {
                return true;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.writers.load(Ordering::Acquire) == 0;
            }
        }
    }

    /// Waits until the gate leaves a waiting state, up to `timeout`.
    pub async fn settled(self: &Arc<Gate>, timeout: Duration) -> GateState {
        let mut receiver = self.state.subscribe();
        let _ = tokio::time::timeout(timeout, receiver.wait_for(|state| !state.waits())).await;
        self.state()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(frame: Frame) -> String {
        match frame {
            Frame::Error(text) => String::from_utf8_lossy(&text).into_owned(),
            other => panic!("not an error: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_writer_waits_at_a_quiesced_gate_and_passes_when_it_reopens() {
        let gate = Arc::new(Gate::new(GateState::Quiesced { to: "west".into() }));
        let waiting = {
            let gate = gate.clone();
            tokio::spawn(async move {
                gate.enter().await.map(|_writer| ()).map_err(|state| text(state.refusal()))
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        gate.set(GateState::Open);
        assert_eq!(waiting.await.unwrap(), Ok(()));
    }

    #[tokio::test]
    async fn a_writer_is_told_readonly_when_the_role_moved_and_tryagain_when_the_wait_ends() {
        let gate = Arc::new(Gate::new(GateState::Quiesced { to: "west".into() }));
        let moved = {
            let gate = gate.clone();
            tokio::spawn(async move {
                text(gate.enter().await.map(|_writer| ()).unwrap_err().refusal())
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        gate.set(GateState::Standby {
            primary: Some("west".into()),
            primary_resp: Some("127.0.0.1:7000".into()),
        });
        let moved = moved.await.unwrap();
        assert!(
            moved.starts_with("READONLY") && moved.contains("'west' at 127.0.0.1:7000"),
            "{moved}"
        );
        let stuck =
            Gate::with_wait(GateState::Quiesced { to: "west".into() }, Duration::from_millis(50));
        let stuck = text(stuck.enter().await.map(|_| ()).unwrap_err().refusal());
        assert!(stuck.starts_with("TRYAGAIN"), "{stuck}");
        let fenced = Gate::new(GateState::Fenced {
            incarnation: 2,
            primary: "west".into(),
            primary_resp: None,
        });
        let fenced = text(fenced.enter().await.map(|_| ()).unwrap_err().refusal());
        assert!(fenced.starts_with("READONLY") && fenced.contains("incarnation 2"), "{fenced}");
    }

    #[tokio::test]
    async fn draining_waits_for_the_writers_already_past_the_gate() {
        let gate = Arc::new(Gate::new(GateState::Open));
        let writer = gate.enter().await.unwrap();
        gate.set(GateState::Quiesced { to: "west".into() });
        assert!(!gate.drained(Duration::from_millis(50)).await);
        drop(writer);
        assert!(gate.drained(Duration::from_millis(50)).await);
    }
}
