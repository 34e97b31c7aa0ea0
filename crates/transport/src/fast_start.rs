//! Fast-start failover, a member's side (`docs/fast-start-failover.md`).
//!
//! A primary with fast-start failover enabled acknowledges a commit only if a synchronized
//! SYNC standby acknowledged its redo, or — alone — while it holds the observer's *lease*: the
//! active observer pinged it (as the primary) less than `threshold` ago. Under Maximum
//! Availability, going on alone after its SYNC target stopped answering also needs the
//! observer's *grant*, after which the observer will not fail over to that target until it is
//! synchronized again. A primary that has neither stops acknowledging commits (they wait), so
//! that by the time the observer fails over (`threshold` after its own last answer from the
//! primary, which came after the primary's last ping) the old primary acknowledges nothing.
//!
//! `FastStart` is that state, shared by the primary's redo port (which records pings) and its
//! transport (whose log-writer wait asks `admit_alone`). `serve_observer` answers an observer's
//! pings on a member's redo listener, whatever the member's role, through `ObserverHooks`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use proto::{ErrorCode, ErrorMessage, Message, ObserverPing, ObserverPong};

use crate::config::{FastStartFailoverConfig, ProtectionMode};
use crate::conn::{Conn, ConnError};

/// How long an observer's connection may stay silent before the member closes it.
const OBSERVER_IDLE: Duration = Duration::from_secs(10);

#[derive(Debug, Default)]
struct State {
    /// When each observer last pinged this primary with a lease.
    heard: BTreeMap<String, Instant>,
    active: Option<String>,
    /// Some fast-start target is a synchronized SYNC destination.
    synchronized: bool,
    wants_unsync: bool,
    granted: bool,
}

/// A primary's fast-start failover state: lease, grant, isolation.
#[derive(Debug)]
pub struct FastStart {
    pub config: FastStartFailoverConfig,
    /// The observers, in order of priority.
    observers: Vec<String>,
    /// The members it may fail over to.
    pub targets: Vec<String>,
    state: Mutex<State>,
    changed: Condvar,
}

impl FastStart {
    pub fn new(
        config: FastStartFailoverConfig,
        observers: Vec<String>,
        targets: Vec<String>,
    ) -> Arc<FastStart> {
        Arc::new(FastStart {
            config,
            observers,
            targets,
            state: Mutex::default(),
            changed: Condvar::new(),
        })
    }

    fn lease_valid(&self, state: &State) -> bool {
        state
            .active
            .as_ref()
            .and_then(|active| state.heard.get(active))
            .is_some_and(|at| at.elapsed() < self.config.threshold)
    }

    /// An observer's ping to this primary.
    pub fn note_ping(&self, ping: &ObserverPing) {
        if !ping.lease || !self.observers.contains(&ping.observer) {
            return;
        }
        let mut state = self.state.lock();
        state.heard.insert(ping.observer.clone(), Instant::now());
        // The active observer: the first, in priority order, heard from within the threshold;
        // the last one stays named while none is.
        let threshold = self.config.threshold;
        if let Some(first) = self
            .observers
            .iter()
            .find(|name| state.heard.get(*name).is_some_and(|at| at.elapsed() < threshold))
            .cloned()
            && state.active.as_ref() != Some(&first)
        {
            tracing::info!(observer = %first, "fast-start failover: the active observer");
            state.active = Some(first);
        }
        if state.active.as_deref() == Some(ping.observer.as_str())
            && ping.grant_unsync
            && state.wants_unsync
            && !state.granted
        {
            tracing::warn!(observer = %ping.observer, "fast-start failover: the observer lets this primary go on without its SYNC target");
            state.granted = true;
        }
        self.changed.notify_all();
    }

    /// The observer this primary takes decisions from.
    pub fn active(&self) -> Option<String> {
        self.state.lock().active.clone()
    }

    /// Whether some fast-start target is a synchronized SYNC destination now (the transport
    /// says so whenever it changes). Synchronized again, the target needs no grant.
    pub fn set_synchronized(&self, synchronized: bool) {
        let mut state = self.state.lock();
        state.synchronized = synchronized;
        if synchronized {
            state.wants_unsync = false;
            state.granted = false;
        }
        self.changed.notify_all();
    }

    /// What a pong tells the observer: synchronized, wants to go unsynchronized, isolated.
    pub fn view(&self) -> (bool, bool, bool) {
        let state = self.state.lock();
        let isolated = !state.synchronized && !self.lease_valid(&state);
        (state.synchronized, state.wants_unsync && !state.granted, isolated)
    }

    /// For status: the active observer and how long ago it last pinged (seconds).
    pub fn observer_contact(&self) -> (Option<String>, Option<f64>) {
        let state = self.state.lock();
        let last = state
            .active
            .as_ref()
            .and_then(|active| state.heard.get(active))
            .map(|at| at.elapsed().as_secs_f64());
        (state.active.clone(), last)
    }

    /// Whether this primary takes no write now: no synchronized target and no lease.
    pub fn isolated(&self) -> bool {
        self.view().2
    }

    /// The log writer's question for a write that no synchronized SYNC target acknowledged:
    /// may it be declared durable (its commits acknowledged)? Waits until it may — the lease
    /// valid and, under Maximum Availability, the grant given — or `stop` says to give up.
    pub fn admit_alone(&self, mode: ProtectionMode, stop: &dyn Fn() -> bool) -> Result<(), String> {
        let mut state = self.state.lock();
        let mut waited = false;
        loop {
            let needs_grant = mode == ProtectionMode::MaximumAvailability;
            if needs_grant && !state.granted && !state.wants_unsync {
                tracing::warn!(
                    "fast-start failover: no SYNC target answers; commits wait for the observer's consent to go on without it"
                );
                state.wants_unsync = true;
            }
            if self.lease_valid(&state) && (!needs_grant || state.granted) {
                if waited {
                    tracing::info!("fast-start failover: commits are acknowledged again");
                }
                return Ok(());
            }
            if stop() {
                return Err("the primary is stopping or has been fenced".into());
            }
            if !waited {
                tracing::warn!(
                    "fast-start failover: this primary has neither a synchronized target nor the observer's lease: commits wait"
                );
                waited = true;
            }
            self.changed.wait_for(&mut state, Duration::from_millis(50));
        }
    }

    /// Wakes a waiting `admit_alone` (to look at `stop` again).
    pub fn wake(&self) {
        let _state = self.state.lock();
        self.changed.notify_all();
    }
}

/// What a member's server does for an observer.
pub trait ObserverHooks: Send + Sync {
    /// The answer to a ping (a primary also records it: its lease, a grant).
    fn pong(&self, ping: &ObserverPing) -> ObserverPong;
    /// The observer asks this standby to become the primary: `Err` says why not.
    fn failover(&self, ping: &ObserverPing) -> Result<(), String>;
    /// The observer says this (old) primary has been failed over.
    fn fence(&self, incarnation: u32, primary: &str);
}

/// Serves an observer's connection: a pong for every ping, until it goes quiet or away.
pub fn serve_observer(mut conn: Conn, first: ObserverPing, hooks: &dyn ObserverHooks) {
    let mut ping = first;
    loop {
        if ping.newer_incarnation > 0 {
            hooks.fence(ping.newer_incarnation, &ping.new_primary);
        }
        let refusal = if ping.failover { hooks.failover(&ping).err() } else { None };
        let mut pong = hooks.pong(&ping);
        if let Some(reason) = refusal {
            pong.refusal = reason;
        }
        if conn.send(&Message::ObserverPong(pong), Duration::from_secs(5)).is_err() {
            return;
        }
        ping = match conn.recv(Some(OBSERVER_IDLE)) {
            Ok(Message::ObserverPing(next)) => next,
            Ok(other) => {
                conn.refuse(ErrorMessage::new(
                    ErrorCode::Malformed,
                    format!("expected an observer ping, got {:?}", other.kind()),
                ));
                return;
            }
            Err(ConnError::Protocol(error)) => {
                conn.refuse(ErrorMessage::new(ErrorCode::Malformed, error.to_string()));
                return;
            }
            Err(_) => return,
        };
    }
}
